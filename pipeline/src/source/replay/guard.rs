//! The replay's guard against a device clock running ahead: see [`FutureGuard`].

use crate::source::Ahead;

/// What [`FutureGuard::check`] decides about a reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Accept it. A reading held before it is refused (its clock was the odd one out).
    Accept,
    /// Refuse it, to the dead-letter output with this reason. A reading held before it is
    /// refused too.
    Refuse(Ahead),
    /// Hold it: it jumps more than the skew ahead of the watermark. The next reading checked
    /// decides: if it comes from another device and agrees within the skew, the fleet has
    /// moved on (a silence in the recording) and [`Verdict::Confirm`] accepts both; otherwise
    /// the held reading is refused with this reason. A reading held before it is refused.
    Hold(Ahead),
    /// It confirms the held reading: accept both, the held one first.
    Confirm,
}

/// Keeps a recording's event time from being moved by a device whose clock runs ahead.
///
/// A reading is refused if it is more than `skew` seconds ahead of the wall clock (a
/// recording is of the past), or held (see [`Verdict::Hold`]) if it is more than `skew` ahead
/// of the watermark of the readings accepted so far (newest − `bound`). The first reading has
/// no watermark to compare with: only the wall clock bounds it. Times are the recorded ones,
/// before `--rebase-time`'s shift.
#[derive(Debug, Clone)]
pub struct FutureGuard {
    skew: i64,
    bound: i64,
    newest: Option<i64>,
    held: Option<(String, i64)>,
    /// The wall clock when last read (epoch seconds): it only goes on, so a reading within
    /// `skew` of it needs no new reading of the clock.
    wall: i64,
}

impl FutureGuard {
    /// A guard allowing `skew` seconds ahead, for a watermark `bound` seconds behind the newest
    /// reading.
    pub fn new(skew: u64, bound: u64) -> Self {
        FutureGuard {
            skew: i64::try_from(skew).unwrap_or(i64::MAX),
            bound: i64::try_from(bound).unwrap_or(i64::MAX),
            newest: None,
            held: None,
            wall: i64::MIN,
        }
    }

    /// The newest event time accepted so far.
    pub fn newest(&self) -> Option<i64> {
        self.newest
    }

    /// Decides about the reading of `device` at `ts` (recorded time), `now` reading the wall
    /// clock (epoch seconds) when `ts` is ahead of its last reading: a replay's readings are
    /// of the past, so it reads it about once.
    pub fn check(&mut self, device: &str, ts: i64, now: impl FnOnce() -> i64) -> Verdict {
        let held = self.held.take();
        if ts > self.wall.saturating_add(self.skew) {
            self.wall = self.wall.max(now());
            if ts > self.wall.saturating_add(self.skew) {
                return Verdict::Refuse(self.ahead_of("the wall clock", ts, self.wall));
            }
        }
        let Some(newest) = self.newest else {
            self.newest = Some(ts);
            return Verdict::Accept;
        };
        let watermark = newest.max(0).saturating_sub(self.bound).max(0);
        if ts <= watermark.saturating_add(self.skew) {
            self.newest = Some(newest.max(ts));
            return Verdict::Accept;
        }
        if let Some((other, held_ts)) = held {
            if other != device && held_ts.abs_diff(ts) <= self.skew.unsigned_abs() {
                self.newest = Some(ts.max(held_ts));
                return Verdict::Confirm;
            }
        }
        self.held = Some((device.to_string(), ts));
        Verdict::Hold(self.ahead_of("the watermark", ts, watermark))
    }

    fn ahead_of(&self, reference: &'static str, ts: i64, reference_ts: i64) -> Ahead {
        Ahead {
            ts,
            reference: reference.into(),
            reference_ts,
            limit_secs: self.skew.unsigned_abs(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1724200000;
    const T: i64 = 1724101200;

    fn future(reference: &'static str, ts: i64, reference_ts: i64) -> Verdict {
        let reason = Ahead {
            ts,
            reference: reference.into(),
            reference_ts,
            limit_secs: 3600,
        };
        if reference == "the wall clock" {
            Verdict::Refuse(reason)
        } else {
            Verdict::Hold(reason)
        }
    }

    #[test]
    fn a_clock_ahead_of_the_wall_clock_is_refused_even_first() {
        let mut g = FutureGuard::new(3600, 30);
        assert_eq!(
            g.check("x", 9_999_999_999, || NOW),
            future("the wall clock", 9_999_999_999, NOW)
        );
        assert_eq!(g.newest(), None);
        assert_eq!(g.check("a", T, || NOW), Verdict::Accept);
        assert_eq!(g.check("a", T + 3000, || NOW), Verdict::Accept);
    }

    #[test]
    fn one_device_ahead_of_the_watermark_is_refused() {
        let mut g = FutureGuard::new(3600, 30);
        assert_eq!(g.check("a", T, || NOW), Verdict::Accept);
        // Exactly the skew ahead of the watermark (T - 30) is accepted.
        assert_eq!(g.check("b", T + 3570, || NOW), Verdict::Accept);
        let wm = T + 3540;
        let ahead = wm + 3601;
        assert_eq!(
            g.check("x", ahead, || NOW),
            future("the watermark", ahead, wm)
        );
        // The same device again does not confirm itself.
        assert_eq!(
            g.check("x", ahead, || NOW),
            future("the watermark", ahead, wm)
        );
        // A reading in line with the fleet: the held one is the odd one out.
        assert_eq!(g.check("a", T + 3580, || NOW), Verdict::Accept);
        assert_eq!(g.newest(), Some(T + 3580));
    }

    #[test]
    fn two_devices_agreeing_after_a_silence_move_event_time() {
        let mut g = FutureGuard::new(3600, 30);
        assert_eq!(g.check("a", T, || NOW), Verdict::Accept);
        let later = T + 5 * 3600;
        assert!(matches!(g.check("a", later, || NOW), Verdict::Hold(_)));
        assert_eq!(g.check("b", later + 60, || NOW), Verdict::Confirm);
        assert_eq!(g.newest(), Some(later + 60));
        assert_eq!(g.check("c", later + 30, || NOW), Verdict::Accept);
    }

    #[test]
    fn the_wall_clock_is_read_again_only_for_a_reading_ahead_of_its_last_reading() {
        let mut g = FutureGuard::new(3600, 30);
        assert_eq!(g.check("a", T, || NOW), Verdict::Accept);
        assert_eq!(
            g.check("a", T + 10, || unreachable!("read")),
            Verdict::Accept
        );
        // Past the skew of the clock's last reading: read again, and it went on since, so the
        // reading is not refused by it (the watermark holds it).
        let later = NOW + 4000;
        assert!(matches!(
            g.check("a", later, || NOW + 1000),
            Verdict::Hold(_)
        ));
        // A clock that did not go on far enough refuses.
        assert_eq!(
            g.check("a", NOW + 6000, || NOW + 1500),
            future("the wall clock", NOW + 6000, NOW + 1500)
        );
    }
}
