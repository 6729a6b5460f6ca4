//! When each line is delivered: reordering within a window, duplicates, and late lines.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{self, Write};

use indicatif::ProgressBar;
use rand::Rng;
use rand_chacha::ChaCha8Rng;

use super::faults::Flaw;
use super::fleet::{Device, Sample};
use super::plan::{Plan, DELIVERY_STREAM, VALUE_STREAM};
use super::GenerateSummary;

/// Reordering window: a line is delivered up to this long (event time) after its timestamp.
const WINDOW_MS: u64 = 5_000;
/// Seconds of the window with lines pending at once: the second being released, the second
/// jitter can add, and the window.
const WINDOW_SLOTS: u64 = WINDOW_MS / 1000 + 2;
/// Hold-back of late lines, in seconds of event time. The 30 s of lateness promised is the
/// hold-back minus the reordering window minus 1 s, so that every line of second `ts + 31` has
/// been delivered first: a pipeline with a 30 s watermark bound then surely sees the line late.
const LATE_MIN: u64 = 36;
const LATE_MAX: u64 = 600;
/// Very late lines are beyond a 1 h allowed lateness too.
const VERY_LATE_MIN: u64 = 3600 + LATE_MIN;
const VERY_LATE_MAX: u64 = 3600 + LATE_MAX;
const VERY_LATE_SHARE: f64 = 0.1;

impl Plan {
    /// Writes the whole recording to `out`, advancing `bar` over event time.
    pub(super) fn write<W: Write>(
        &self,
        out: &mut W,
        bar: Option<&ProgressBar>,
    ) -> io::Result<GenerateSummary> {
        let mut devices: Vec<Device> = (0..self.devices).map(|id| self.device(id)).collect();
        let rooms: Vec<u32> = devices.iter().map(|d| d.room).collect();
        // Devices due in a second are a run of this list: the one whose phase is that second.
        let mut by_phase: Vec<u32> = (0..self.devices).collect();
        by_phase.sort_by_key(|&id| devices[id as usize].phase);

        let mut values = self.rng(VALUE_STREAM);
        let mut delivery = Delivery {
            plan: self,
            rng: self.rng(DELIVERY_STREAM),
            window: (0..WINDOW_SLOTS).map(|_| Vec::new()).collect(),
            held: BinaryHeap::new(),
            order: 0,
            summary: GenerateSummary::default(),
        };
        let mut line = Vec::with_capacity(256);
        let mut lines = 0;
        let mut emit = |pending: &Pending| {
            self.format(pending, &rooms, &mut line);
            lines += 1;
            out.write_all(&line)
        };
        let mut cursor = 0;
        for second in 0..self.ticks {
            let phase = second % self.interval;
            if phase == 0 {
                cursor = 0;
            }
            while let Some(&id) = by_phase.get(cursor) {
                let device = &mut devices[id as usize];
                if device.phase != phase {
                    break;
                }
                cursor += 1;
                let sample = self.sample(id, device, second, &mut values);
                delivery.schedule(sample);
            }
            // Seconds still to come hold timestamps from `second` on (jitter moves them at most
            // 1 s earlier), so the lines due in the second before are final.
            if let Some(done) = second.checked_sub(1) {
                delivery.release(done, &mut emit)?;
            }
            if let Some(bar) = bar {
                bar.set_position(second + 1);
            }
        }
        // Jitter can put the last readings up to 1 s after `ticks`, and the window adds more.
        for done in self.ticks.saturating_sub(1)..self.ticks + WINDOW_SLOTS {
            delivery.release(done, &mut emit)?;
        }
        delivery.flush(&mut emit)?;
        let mut summary = delivery.summary;
        summary.lines = lines;
        Ok(summary)
    }
}

/// A line waiting for its delivery time.
#[derive(Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Pending {
    /// Delivery time, milliseconds of event time after start.
    due: u64,
    /// Scheduling order: unique, so the order of delivery never depends on the heap's layout
    /// or on the unstable sort.
    order: u64,
    pub(super) sample: Sample,
    pub(super) flaw: Option<Flaw>,
}

impl Pending {
    /// `sample` as a well-formed line, due at once.
    pub(super) fn well_formed(sample: Sample) -> Self {
        Pending {
            due: 0,
            order: 0,
            sample,
            flaw: None,
        }
    }
}

/// Decides when each line is delivered, and holds it until then.
#[derive(Debug)]
struct Delivery<'a> {
    plan: &'a Plan,
    rng: ChaCha8Rng,
    /// Lines due within the reordering window, by second due: slot `second % WINDOW_SLOTS`.
    /// Sorting a second's lines at once beats one heap for all: with 100,000 devices the heap
    /// outgrows the CPU caches, and popping it took a third of the run time.
    window: Vec<Vec<Pending>>,
    /// Late lines, held back for up to an hour and more.
    held: BinaryHeap<Reverse<Pending>>,
    order: u64,
    summary: GenerateSummary,
}

impl Delivery<'_> {
    /// Queues the lines of one reading: the reading, its duplicates, and malformed lines
    /// derived from it.
    fn schedule(&mut self, sample: Sample) {
        self.summary.readings += 1;
        let copies = 1 + extra(&mut self.rng, self.plan.duplicates_per_reading);
        self.summary.duplicates += copies - 1;
        for _ in 0..copies {
            match self.late_by(sample.offset) {
                None => {
                    let due = self.window_due(sample.offset);
                    self.push_in_window(due, sample, None);
                }
                Some(hold) => {
                    self.summary.late += 1;
                    self.order += 1;
                    self.held.push(Reverse(Pending {
                        due: (sample.offset + hold) * 1000 + self.rng.random_range(0..1000),
                        order: self.order,
                        sample,
                        flaw: None,
                    }));
                }
            }
        }
        for _ in 0..extra(&mut self.rng, self.plan.malformed_per_reading) {
            self.summary.malformed += 1;
            let due = self.window_due(sample.offset);
            let flaw = Flaw::random(&mut self.rng);
            self.push_in_window(due, sample, Some(flaw));
        }
    }

    /// How long to hold back a well-formed line with event time `offset`, if it is to be late.
    fn late_by(&mut self, offset: u64) -> Option<u64> {
        // Data ends at `ticks`: a line is only made late if enough of the recording follows to
        // deliver it behind lines at least 30 s (or 1 h 30 s) newer.
        let remaining = self.plan.ticks.saturating_sub(offset);
        let late = self.plan.late_rate > 0.0
            && remaining >= LATE_MIN
            && self.rng.random_bool(self.plan.late_rate);
        if !late {
            return None;
        }
        Some(
            if remaining >= VERY_LATE_MIN && self.rng.random_bool(VERY_LATE_SHARE) {
                self.rng
                    .random_range(VERY_LATE_MIN..=remaining.min(VERY_LATE_MAX))
            } else {
                self.rng.random_range(LATE_MIN..=remaining.min(LATE_MAX))
            },
        )
    }

    /// Delivery time of a line on time: up to [`WINDOW_MS`] after its event time.
    fn window_due(&mut self, offset: u64) -> u64 {
        offset * 1000 + self.rng.random_range(0..WINDOW_MS)
    }

    fn push_in_window(&mut self, due: u64, sample: Sample, flaw: Option<Flaw>) {
        self.order += 1;
        let slot = (due / 1000 % WINDOW_SLOTS) as usize;
        self.window[slot].push(Pending {
            due,
            order: self.order,
            sample,
            flaw,
        });
    }

    /// Delivers, in order, the window's lines due in `second` (after start) and the held-back
    /// lines due by its end. No line due in `second` may be scheduled afterwards.
    fn release(
        &mut self,
        second: u64,
        emit: &mut impl FnMut(&Pending) -> io::Result<()>,
    ) -> io::Result<()> {
        let until = (second + 1) * 1000;
        let slot = &mut self.window[(second % WINDOW_SLOTS) as usize];
        slot.sort_unstable();
        for pending in slot.drain(..) {
            while let Some(held) = pop_if(&mut self.held, |h| *h < pending) {
                emit(&held)?;
            }
            emit(&pending)?;
        }
        while let Some(held) = pop_if(&mut self.held, |h| h.due < until) {
            emit(&held)?;
        }
        Ok(())
    }

    /// Delivers the held-back lines still due after the recording ends.
    fn flush(&mut self, emit: &mut impl FnMut(&Pending) -> io::Result<()>) -> io::Result<()> {
        while let Some(Reverse(held)) = self.held.pop() {
            emit(&held)?;
        }
        Ok(())
    }
}

fn pop_if(
    heap: &mut BinaryHeap<Reverse<Pending>>,
    due: impl Fn(&Pending) -> bool,
) -> Option<Pending> {
    if due(&heap.peek()?.0) {
        heap.pop().map(|Reverse(p)| p)
    } else {
        None
    }
}

/// Draws how many extra lines to add, `expected` on average: its whole part always, plus one
/// with the probability of its fractional part.
fn extra(rng: &mut ChaCha8Rng, expected: f64) -> u64 {
    if expected <= 0.0 {
        return 0;
    }
    let whole = expected.floor();
    whole as u64 + u64::from(rng.random_bool(expected - whole))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::generate::testing::{args, generate, lines, reading, ts, START};

    #[test]
    fn delivery_is_roughly_in_event_time_order() {
        let (out, _) = generate(&args(200, "5m"));
        let mut newest = START;
        let mut shuffled = 0;
        for line in lines(&out) {
            let ts = ts(line).unwrap();
            assert!(ts > newest - 8, "{ts} delivered after {newest}");
            shuffled += usize::from(ts < newest);
            newest = newest.max(ts);
        }
        assert!(shuffled > 100, "only {shuffled} lines out of order");
    }

    #[test]
    fn faults_add_lines_but_keep_every_reading() {
        let mut a = args(100, "20m");
        let (clean, _) = generate(&a);
        a.late_rate = 0.05;
        a.malformed_rate = 0.03;
        a.duplicate_rate = 0.04;
        let (out, summary) = generate(&a);
        let lines = lines(&out);
        assert_eq!(summary.readings, 100 * 120);
        assert_eq!(summary.lines, lines.len() as u64);
        assert_eq!(
            summary.lines,
            summary.readings + summary.duplicates + summary.malformed
        );
        let share = |n: u64| n as f64 / summary.lines as f64;
        assert!(
            (0.02..0.04).contains(&share(summary.malformed)),
            "{summary:?}"
        );
        assert!(
            (0.03..0.05).contains(&share(summary.duplicates)),
            "{summary:?}"
        );
        assert!((0.03..0.06).contains(&share(summary.late)), "{summary:?}");

        let good: Vec<&[u8]> = lines
            .iter()
            .copied()
            .filter(|l| reading(l).is_some())
            .collect();
        assert_eq!(lines.len() - good.len(), summary.malformed as usize);
        // The readings are the clean run's, whatever the faults.
        let mut distinct = good.clone();
        distinct.sort();
        distinct.dedup();
        let mut clean = self::lines(&clean);
        clean.sort();
        assert!(
            distinct == clean,
            "faulty run delivers other readings than the clean one"
        );
    }

    #[test]
    fn late_lines_arrive_behind_newer_lines() {
        let mut a = args(100, "2h");
        a.late_rate = 0.02;
        a.duplicate_rate = 0.01;
        a.malformed_rate = 0.01;
        let (out, summary) = generate(&a);
        let mut newest = START;
        let (mut late, mut very_late) = (0, 0);
        for line in lines(&out) {
            let Some(ts) = ts(line) else { continue };
            let behind = newest - ts;
            if behind >= 30 {
                late += 1;
                very_late += u64::from(behind >= 3630);
                assert!(behind <= VERY_LATE_MAX as i64 + 10, "{behind} s late");
            } else {
                assert!(behind <= 10, "{behind} s behind: neither in order nor late");
            }
            newest = newest.max(ts);
        }
        assert_eq!(
            late, summary.late,
            "every late line, and only those, is 30 s behind"
        );
        // Only lines of the first hour can be 1 h late: about a tenth of those.
        assert!(
            (late / 40..late / 10).contains(&very_late),
            "{very_late} of {late} very late"
        );
    }

    #[test]
    fn nothing_is_late_without_time_to_be() {
        let mut a = args(20, "30s");
        a.late_rate = 1.0;
        let (_, summary) = generate(&a);
        assert_eq!(summary.late, 0);
    }
}
