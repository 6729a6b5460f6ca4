//! Summaries of a device's hour, kept in the window and written as the summary cells of the
//! wide row (`codec::hourly`): `n`, `min`, `max`, `sum`, `first`, `last`.
//!
//! The window keeps one [`HourAccumulator`] per device and open hour (until the watermark passes
//! the hour's end plus the allowed lateness): a 3600-bit set of the seconds already seen and the
//! summary, 536 bytes inline plus the sum's partials (one small allocation), so memory stays
//! bounded by devices × open hours. A reading whose second was already seen is a duplicate: the
//! first value stays, in the summary and in the wide row.

use operators::Accumulate;
use serde::{Deserialize, Serialize};

use crate::codec::hourly::HOUR_SECS;

const WORDS: usize = (HOUR_SECS as usize).div_ceil(64);

/// Statistics of the readings of one device in one hour.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct HourSummary {
    /// Number of readings (distinct seconds).
    pub n: u32,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Sum of the values.
    pub sum: f64,
    /// Value of the earliest reading.
    pub first: f64,
    /// Value of the latest reading.
    pub last: f64,
}

/// Window state behind an [`HourSummary`].
///
/// Inline, not boxed: the window keeps accumulators in one flat vector per hour, so a box would
/// only add a pointer and an allocation per device-hour.
#[derive(Debug, Clone)]
pub struct HourAccumulator {
    seen: [u64; WORDS],
    /// Exact sum as non-overlapping partials (Shewchuk), so the rounded sum does not depend on
    /// the order readings arrive in (workers, partitions and late data change that order).
    partials: Vec<f64>,
    /// Second offsets in the hour of the first and last readings (valid once `summary.n > 0`).
    first_offset: u16,
    last_offset: u16,
    summary: HourSummary,
}

impl Default for HourAccumulator {
    fn default() -> Self {
        HourAccumulator {
            seen: [0; WORDS],
            partials: Vec::new(),
            first_offset: 0,
            last_offset: 0,
            summary: HourSummary::default(),
        }
    }
}

impl Accumulate<f64> for HourAccumulator {
    type Summary = HourSummary;

    fn accept(&mut self, ts: u64, value: &f64) -> bool {
        let offset = (ts % HOUR_SECS as u64) as usize;
        let (word, bit) = (offset / 64, 1u64 << (offset % 64));
        if self.seen[word] & bit != 0 {
            return false;
        }
        self.seen[word] |= bit;
        let v = *value;
        // `offset < 3600`.
        let offset = offset as u16;
        let s = &mut self.summary;
        if s.n == 0 {
            (s.min, s.max, s.first, s.last) = (v, v, v, v);
            (self.first_offset, self.last_offset) = (offset, offset);
        } else {
            s.min = s.min.min(v);
            s.max = s.max.max(v);
            if offset < self.first_offset {
                self.first_offset = offset;
                s.first = v;
            }
            if offset > self.last_offset {
                self.last_offset = offset;
                s.last = v;
            }
        }
        s.n += 1;
        add_exact(&mut self.partials, v);
        s.sum = self.partials.iter().sum();
        true
    }

    fn summary(&self) -> HourSummary {
        self.summary
    }
}

/// Adds `x` to an exact sum kept as non-overlapping partials, smallest first (Shewchuk 1997,
/// the algorithm behind Python's `math.fsum`). Every partial is exactly representable, so the
/// sum of the partials (largest last) is the correctly rounded sum whatever the input order;
/// values are finite, so no overflow handling is needed for sensor readings.
fn add_exact(partials: &mut Vec<f64>, mut x: f64) {
    let mut i = 0;
    for j in 0..partials.len() {
        let mut y = partials[j];
        if x.abs() < y.abs() {
            std::mem::swap(&mut x, &mut y);
        }
        let hi = x + y;
        let lo = y - (hi - x);
        if lo != 0.0 {
            partials[i] = lo;
            i += 1;
        }
        x = hi;
    }
    partials.truncate(i);
    partials.push(x);
}

impl HourSummary {
    /// Recomputes the summary from `(ts, value)` points with distinct timestamps.
    pub fn of_points(points: &[(i64, f64)]) -> Option<Self> {
        let mut acc = HourAccumulator::default();
        for &(ts, v) in points {
            acc.accept(ts.max(0) as u64, &v);
        }
        (acc.summary.n > 0).then_some(acc.summary)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sum_does_not_depend_on_order() {
        let values = [20.1, 401.6, -3.0, 0.1, 0.2, 1e-9, 77.7, 20.4];
        let mut forward = Vec::new();
        let mut backward = Vec::new();
        values.iter().for_each(|&v| add_exact(&mut forward, v));
        values
            .iter()
            .rev()
            .for_each(|&v| add_exact(&mut backward, v));
        let (f, b): (f64, f64) = (forward.iter().sum(), backward.iter().sum());
        assert_eq!(f.to_bits(), b.to_bits());
        let mut p = Vec::new();
        [0.1, 0.2, 0.3].iter().for_each(|&v| add_exact(&mut p, v));
        assert_eq!(p.iter().sum::<f64>(), 0.6);
    }

    #[test]
    fn an_accumulator_is_one_flat_block_of_536_bytes() {
        // The figure docs/ARCHITECTURE.md gives per device-hour (besides the sum's partials and
        // the window's key entry): the seen-set inline, first and last as 16-bit offsets.
        assert_eq!(std::mem::size_of::<HourAccumulator>(), 536);
    }

    #[test]
    fn late_and_duplicate_readings_keep_the_summary_exact() {
        let mut acc = HourAccumulator::default();
        assert!(acc.accept(3610, &5.0));
        assert!(acc.accept(3620, &7.0));
        assert!(acc.accept(3605, &1.0)); // late: becomes first
        assert!(!acc.accept(3620, &9.0)); // duplicate second
        let s = acc.summary();
        assert_eq!(
            s,
            HourSummary {
                n: 3,
                min: 1.0,
                max: 7.0,
                sum: 13.0,
                first: 1.0,
                last: 7.0
            }
        );
        assert_eq!(
            HourSummary::of_points(&[(3605, 1.0), (3610, 5.0), (3620, 7.0)]),
            Some(s)
        );
        let row = crate::table::Row {
            key: b"d_3600".to_vec(),
            cells: s.cells(3600),
        };
        assert_eq!(HourSummary::from_row(&row), Some(s));
    }
}
