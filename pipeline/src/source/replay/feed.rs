//! The replay feed: recorded lines → decoded readings with an event-time watermark.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use operators::{EventFeed, Poll};

use crate::control::JobControl;
use crate::decode::{decode_line, Reason, Rejected};
use crate::input::{self, LineReader};
use crate::reading::Reading;
use crate::stats::{add, Stats};

/// What the replay source emits: a reading, or a rejected line for the dead-letter output.
pub type Decoded = Result<Reading, Box<Rejected>>;

/// How a worker replays its share of a recording.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// Input file, `-` for stdin.
    pub path: PathBuf,
    /// Primary metric field.
    pub metric: String,
    /// Watermark bound, seconds.
    pub watermark_bound: u64,
    /// Replay speed: `None` as fast as possible, `Some(f)` at `f` times recorded time.
    pub speed: Option<f64>,
    /// Seconds added to every timestamp (`--rebase-time`), a multiple of 3600.
    pub shift: i64,
    /// Readings whose cells would already be expired by this TTL (seconds) are counted.
    pub ttl_secs: u64,
    /// This worker's index and the number of workers: worker `i` takes lines `n` with
    /// `n % peers == i`.
    pub worker: usize,
    /// Number of workers reading the input.
    pub peers: usize,
    /// Allowed skew ahead, seconds ([`crate::config::WindowConfig::future_skew_secs`]): see
    /// [`FutureGuard`].
    pub max_future_skew: u64,
}

/// "Now" for the checks against the wall clock: [`crate::time::now_ms`] (so `HOURGLASS_NOW`
/// applies) read once, then advanced by a monotonic clock, so a reading costs no environment
/// lookup.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    base_ms: i64,
    start: Instant,
}

impl Clock {
    /// Starts from [`crate::time::now_ms`].
    pub fn start() -> Self {
        Clock {
            base_ms: crate::time::now_ms(),
            start: Instant::now(),
        }
    }

    /// Now, epoch seconds.
    pub fn now_secs(&self) -> i64 {
        let elapsed = i64::try_from(self.start.elapsed().as_millis()).unwrap_or(i64::MAX);
        self.base_ms.saturating_add(elapsed) / 1000
    }
}

/// What [`FutureGuard::check`] decides about a reading.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Accept it. A reading held before it is refused (its clock was the odd one out).
    Accept,
    /// Refuse it, to the dead-letter output with this reason. A reading held before it is
    /// refused too.
    Refuse(Reason),
    /// Hold it: it jumps more than the skew ahead of the watermark. The next reading checked
    /// decides: if it comes from another device and agrees within the skew, the fleet has
    /// moved on (a silence in the recording) and [`Verdict::Confirm`] accepts both; otherwise
    /// the held reading is refused with this reason. A reading held before it is refused.
    Hold(Reason),
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
        }
    }

    /// The newest event time accepted so far.
    pub fn newest(&self) -> Option<i64> {
        self.newest
    }

    /// Decides about the reading of `device` at `ts` (recorded time), the wall clock being
    /// `now` (epoch seconds).
    pub fn check(&mut self, device: &str, ts: i64, now: i64) -> Verdict {
        let held = self.held.take();
        if ts > now.saturating_add(self.skew) {
            return Verdict::Refuse(self.ahead_of("the wall clock", ts, now));
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

    fn ahead_of(&self, reference: &str, ts: i64, reference_ts: i64) -> Reason {
        Reason::Future {
            ts,
            reference: reference.to_string(),
            reference_ts,
            limit_secs: self.skew.unsigned_abs(),
        }
    }
}

/// An [`EventFeed`] over one worker's share of a recording.
pub struct ReplayFeed {
    lines: Option<LineReader<Box<dyn std::io::BufRead + Send>>>,
    opts: ReplayOptions,
    stats: Arc<Stats>,
    control: Arc<JobControl>,
    buf: Vec<u8>,
    max_ts: Option<i64>,
    expired_before: i64,
    pace: Option<(Instant, i64)>,
    held: Option<Decoded>,
    local: [u64; 4],
    guard: FutureGuard,
    clock: Clock,
    /// A reading held by the guard, with the rejection it becomes unless the next confirms it.
    ahead: Option<(Box<Rejected>, Reading)>,
    /// The second reading of a confirmed pair, emitted after the first.
    ready: Option<Decoded>,
}

impl std::fmt::Debug for ReplayFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayFeed")
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}

const READ: usize = 0;
const OK: usize = 1;
const REJECTED: usize = 2;
const EXPIRED: usize = 3;

impl ReplayFeed {
    /// Opens the input for worker `opts.worker`. Only worker 0 counts bytes for progress.
    ///
    /// # Errors
    /// The input cannot be opened.
    pub fn open(
        opts: ReplayOptions,
        stats: Arc<Stats>,
        control: Arc<JobControl>,
    ) -> crate::Result<Self> {
        let counting = (opts.worker == 0).then(|| stats.clone());
        let reader = input::open(&opts.path, counting)?;
        let expired_before = (crate::time::now_ms() / 1000).saturating_sub(opts.ttl_secs as i64);
        Ok(ReplayFeed {
            lines: Some(LineReader::new(reader)),
            stats,
            control,
            buf: Vec::with_capacity(512),
            max_ts: None,
            expired_before,
            pace: None,
            held: None,
            local: [0; 4],
            guard: FutureGuard::new(opts.max_future_skew, opts.watermark_bound),
            clock: Clock::start(),
            ahead: None,
            ready: None,
            opts,
        })
    }

    /// A feed with no input (a worker that gets no share, e.g. for stdin on workers > 0).
    pub fn empty(opts: ReplayOptions, stats: Arc<Stats>, control: Arc<JobControl>) -> Self {
        ReplayFeed {
            lines: None,
            stats,
            control,
            buf: Vec::new(),
            max_ts: None,
            expired_before: 0,
            pace: None,
            held: None,
            local: [0; 4],
            guard: FutureGuard::new(opts.max_future_skew, opts.watermark_bound),
            clock: Clock::start(),
            ahead: None,
            ready: None,
            opts,
        }
    }

    fn publish(&mut self) {
        let s = &self.stats;
        for (i, counter) in [&s.read, &s.ok, &s.rejected, &s.expired]
            .into_iter()
            .enumerate()
        {
            add(counter, std::mem::take(&mut self.local[i]));
        }
    }

    fn accept(&mut self, mut r: Reading) -> Decoded {
        r.ts = (r.ts + self.opts.shift).max(0);
        self.local[OK] += 1;
        if r.ts < self.expired_before {
            self.local[EXPIRED] += 1;
        }
        Ok(r)
    }

    fn refuse(&mut self, rejected: Box<Rejected>) -> Decoded {
        self.local[REJECTED] += 1;
        Err(rejected)
    }

    /// The held reading, refused: nothing came to confirm it.
    fn refuse_ahead(&mut self) -> Option<Decoded> {
        let (rejected, _) = self.ahead.take()?;
        Some(self.refuse(rejected))
    }

    fn next_decoded(&mut self) -> Option<Decoded> {
        if let Some(item) = self.ready.take() {
            return Some(item);
        }
        loop {
            let Some(lines) = self.lines.as_mut() else {
                return self.refuse_ahead();
            };
            let line = match lines.next_line(&mut self.buf) {
                Ok(Some(line)) => line,
                Ok(None) => return self.refuse_ahead(),
                Err(e) => {
                    // The recording's own line number: every worker reads every line.
                    self.control.fail(format!(
                        "reading {} failed at line {}: {e}",
                        self.opts.path.display(),
                        lines.lines_read() + 1
                    ));
                    return self.refuse_ahead();
                }
            };
            if (line.number % self.opts.peers as u64) as usize != self.opts.worker {
                self.buf = line.bytes;
                continue;
            }
            self.local[READ] += 1;
            if line.len > line.bytes.len() {
                return Some(self.refuse(Box::new(Rejected {
                    line: line.number,
                    partition: None,
                    reason: Reason::TooLong(line.len),
                    raw: line.bytes,
                })));
            }
            let reading = match decode_line(line.number, &line.bytes, &self.opts.metric) {
                Ok(r) => r,
                Err(rejected) => {
                    self.buf = line.bytes;
                    return Some(self.refuse(rejected));
                }
            };
            let verdict = self
                .guard
                .check(&reading.device, reading.ts, self.clock.now_secs());
            let earlier = match verdict {
                Verdict::Confirm => None,
                _ => self.refuse_ahead(),
            };
            let item = match verdict {
                Verdict::Accept => {
                    self.buf = line.bytes;
                    Some(self.accept(reading))
                }
                Verdict::Refuse(reason) => {
                    Some(self.refuse(rejected(line.number, line.bytes, reason)))
                }
                Verdict::Hold(reason) => {
                    self.ahead = Some((rejected(line.number, line.bytes, reason), reading));
                    None
                }
                Verdict::Confirm => {
                    self.buf = line.bytes;
                    let second = self.accept(reading);
                    match self.ahead.take() {
                        Some((_, first)) => {
                            self.ready = Some(second);
                            Some(self.accept(first))
                        }
                        None => Some(second),
                    }
                }
            };
            match (earlier, item) {
                (Some(earlier), item) => {
                    self.ready = item;
                    return Some(earlier);
                }
                (None, Some(item)) => return Some(item),
                (None, None) => continue,
            }
        }
    }

    /// How long to wait before releasing a reading at `ts` under `--speed`.
    fn wait_for(&mut self, ts: i64) -> Option<Duration> {
        let speed = self.opts.speed?;
        let (start, first) = *self.pace.get_or_insert((Instant::now(), ts));
        let ahead = (ts - first).max(0) as f64 / speed;
        let due = start + Duration::from_secs_f64(ahead);
        let now = Instant::now();
        (due > now).then(|| (due - now).min(Duration::from_millis(100)))
    }
}

fn rejected(line: u64, raw: Vec<u8>, reason: Reason) -> Box<Rejected> {
    Box::new(Rejected {
        line,
        partition: None,
        reason,
        raw,
    })
}

impl EventFeed for ReplayFeed {
    type Item = Decoded;

    fn poll(&mut self) -> Poll<Decoded> {
        if self.local[READ] >= 4096 {
            self.publish();
        }
        if self.control.stopped() {
            self.publish();
            return Poll::Done;
        }
        let item = match self.held.take().or_else(|| self.next_decoded()) {
            Some(item) => item,
            None => {
                self.publish();
                return Poll::Done;
            }
        };
        if let Ok(r) = &item {
            let newest = self.max_ts.map_or(r.ts, |m| m.max(r.ts));
            if let Some(wait) = self.wait_for(newest) {
                self.held = Some(item);
                return Poll::Pending(wait);
            }
            self.max_ts = Some(newest);
        }
        Poll::Ready(item)
    }

    fn watermark(&self) -> u64 {
        self.max_ts.map_or(0, |m| {
            (m.max(0) as u64).saturating_sub(self.opts.watermark_bound)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1724200000;
    const T: i64 = 1724101200;

    fn future(reference: &str, ts: i64, reference_ts: i64) -> Verdict {
        let reason = Reason::Future {
            ts,
            reference: reference.to_string(),
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
            g.check("x", 9_999_999_999, NOW),
            future("the wall clock", 9_999_999_999, NOW)
        );
        assert_eq!(g.newest(), None);
        assert_eq!(g.check("a", T, NOW), Verdict::Accept);
        assert_eq!(g.check("a", T + 3000, NOW), Verdict::Accept);
    }

    #[test]
    fn one_device_ahead_of_the_watermark_is_refused() {
        let mut g = FutureGuard::new(3600, 30);
        assert_eq!(g.check("a", T, NOW), Verdict::Accept);
        // Exactly the skew ahead of the watermark (T - 30) is accepted.
        assert_eq!(g.check("b", T + 3570, NOW), Verdict::Accept);
        let wm = T + 3540;
        let ahead = wm + 3601;
        assert_eq!(g.check("x", ahead, NOW), future("the watermark", ahead, wm));
        // The same device again does not confirm itself.
        assert_eq!(g.check("x", ahead, NOW), future("the watermark", ahead, wm));
        // A reading in line with the fleet: the held one is the odd one out.
        assert_eq!(g.check("a", T + 3580, NOW), Verdict::Accept);
        assert_eq!(g.newest(), Some(T + 3580));
    }

    #[test]
    fn two_devices_agreeing_after_a_silence_move_event_time() {
        let mut g = FutureGuard::new(3600, 30);
        assert_eq!(g.check("a", T, NOW), Verdict::Accept);
        let later = T + 5 * 3600;
        assert!(matches!(g.check("a", later, NOW), Verdict::Hold(_)));
        assert_eq!(g.check("b", later + 60, NOW), Verdict::Confirm);
        assert_eq!(g.newest(), Some(later + 60));
        assert_eq!(g.check("c", later + 30, NOW), Verdict::Accept);
    }
}
