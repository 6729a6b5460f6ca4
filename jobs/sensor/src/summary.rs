//! Summaries of a device's hour, kept in the window and written as the summary cells of the
//! wide row (`codec::hourly`): `n`, `min`, `max`, `sum`, `first`, `last`.
//!
//! The window keeps one [`HourAccumulator`] per device and open hour (until the watermark passes
//! the hour's end plus the allowed lateness): the set of the seconds already seen and the
//! summary, 128 bytes inline plus the set's gaps and the sum's partials (two small allocations),
//! so memory stays bounded by devices × open hours. A reading whose second was already seen is
//! not taken (the window emits it as repeated, and its hour's wide row is marked dirty, so reads
//! of the hour take the narrow table, where the last write of the second wins).

use operators::Accumulate;
use serde::{Deserialize, Serialize};

use pipeline::time::HOUR_SECS;

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
#[derive(Debug, Clone, Default)]
pub struct HourAccumulator {
    seen: Seen,
    /// Exact sum as non-overlapping partials (Shewchuk), so the rounded sum does not depend on
    /// the order readings arrive in (workers, partitions and late data change that order).
    partials: Vec<f64>,
    /// Second offsets in the hour of the first and last readings (valid once `summary.n > 0`).
    first_offset: u16,
    last_offset: u16,
    /// All but `sum`, which [`Accumulate::summary`] takes from `partials`.
    summary: HourSummary,
}

/// The seconds of an hour already seen.
///
/// A device's readings arrive mostly in time order, or nearly (jitter, resends, late readings).
/// So the set keeps the last [`RECENT`] seconds as bits and everything before them as the gaps
/// between the seconds seen, 4 bits a gap of 1–15 s, 16 bits (a zero nibble, then 12 bits) a
/// longer one: an hour of readings every 10 s takes about 180 bytes where a bit per second takes
/// 450. A reading older than the recent bits (a late one), or gaps that would outgrow the bit
/// set, turn the set into a 3600-bit set for good: never more than the bit set, plus the gaps it
/// replaced.
#[derive(Debug, Clone)]
enum Seen {
    Gaps {
        /// Gap nibbles of the seconds before `base`, the first one in the low half of a byte;
        /// `len` of them in use.
        nibbles: Vec<u8>,
        len: u16,
        /// One more than the last second in `nibbles` (0 when there is none): the next gap
        /// counts from it.
        next: u16,
        /// Bit `i` is set when second `base + i` was seen.
        recent: u128,
        base: u16,
    },
    /// Bit `s % 64` of word `s / 64` is set when second `s` was seen.
    Bits(Box<[u64; WORDS]>),
}

/// Seconds kept as bits behind the latest one seen.
const RECENT: u16 = 128;

impl Default for Seen {
    fn default() -> Self {
        Seen::Gaps {
            nibbles: Vec::new(),
            len: 0,
            next: 0,
            recent: 0,
            base: 0,
        }
    }
}

/// The most bytes of gaps kept before the set turns into bits: the bit set's size.
const MAX_GAP_BYTES: usize = WORDS * 8;

impl Seen {
    /// Adds second `offset` (below 3600); false if it was in the set.
    fn insert(&mut self, offset: u16) -> bool {
        if let Seen::Gaps {
            nibbles,
            len,
            next,
            recent,
            base,
        } = self
        {
            if offset >= *base + RECENT {
                // Seal the seconds that fall out of the recent bits as gaps.
                let new_base = offset + 1 - RECENT;
                let shift = new_base - *base;
                let mut out = if shift >= RECENT {
                    std::mem::take(recent)
                } else {
                    let out = *recent & ((1u128 << shift) - 1);
                    *recent >>= shift;
                    out
                };
                let mut fits = true;
                while out != 0 {
                    // Below 3600.
                    let second = *base + out.trailing_zeros() as u16;
                    fits = push_gap(nibbles, len, second + 1 - *next);
                    if !fits {
                        break;
                    }
                    *next = second + 1;
                    out &= out - 1;
                }
                *base = new_base;
                if fits {
                    *recent |= 1 << (offset - *base);
                    return true;
                }
                // The gaps outgrew the bit set: the bits take the rest of `out` below.
                let bits = self.bits();
                set_bits(bits, new_base - shift, out);
                return set_bit(bits, offset);
            }
            if offset >= *base {
                let bit = 1u128 << (offset - *base);
                let new = *recent & bit == 0;
                *recent |= bit;
                return new;
            }
        }
        set_bit(self.bits(), offset)
    }

    /// The set as bits, turned into them first if it is gaps.
    fn bits(&mut self) -> &mut [u64; WORDS] {
        if let Seen::Gaps {
            nibbles,
            len,
            recent,
            base,
            ..
        } = self
        {
            let mut bits = Box::new([0u64; WORDS]);
            let nibble = |i: usize| u16::from(nibbles[i / 2] >> (i % 2 * 4) & 0xF);
            let (mut next, mut i) = (0u16, 0usize);
            while i < usize::from(*len) {
                let mut gap = nibble(i);
                i += 1;
                if gap == 0 {
                    gap = nibble(i) << 8 | nibble(i + 1) << 4 | nibble(i + 2);
                    i += 3;
                }
                next += gap;
                set_bit(&mut bits, next - 1);
            }
            set_bits(&mut bits, *base, *recent);
            *self = Seen::Bits(bits);
        }
        match self {
            Seen::Bits(bits) => bits,
            Seen::Gaps { .. } => unreachable!("the gaps were turned into bits above"),
        }
    }
}

/// Sets bit `s`; false if it was set.
fn set_bit(bits: &mut [u64; WORDS], s: u16) -> bool {
    let (word, bit) = (usize::from(s) / 64, 1u64 << (s % 64));
    let new = bits[word] & bit == 0;
    bits[word] |= bit;
    new
}

/// Sets the seconds `base + i` for the bits `i` of `mask` (all below 3600).
fn set_bits(bits: &mut [u64; WORDS], base: u16, mut mask: u128) {
    while mask != 0 {
        set_bit(bits, base + mask.trailing_zeros() as u16);
        mask &= mask - 1;
    }
}

/// Appends a gap (1..=3600); false, appending nothing, if the gaps would outgrow the bit set.
fn push_gap(nibbles: &mut Vec<u8>, len: &mut u16, gap: u16) -> bool {
    let need = if gap < 16 { 1 } else { 4 };
    if (usize::from(*len) + need).div_ceil(2) > MAX_GAP_BYTES {
        return false;
    }
    if gap < 16 {
        push_nibble(nibbles, len, gap as u8);
    } else {
        for nibble in [0, gap >> 8, gap >> 4, gap] {
            push_nibble(nibbles, len, (nibble & 0xF) as u8);
        }
    }
    true
}

/// Appends a nibble, growing the buffer by a quarter (at least 16 bytes) rather than doubling it:
/// the gaps of an hour are most of an accumulator's memory.
fn push_nibble(nibbles: &mut Vec<u8>, len: &mut u16, nibble: u8) {
    if *len % 2 == 1 {
        if let Some(last) = nibbles.last_mut() {
            *last |= nibble << 4;
        }
    } else {
        if nibbles.len() == nibbles.capacity() {
            nibbles.reserve_exact((nibbles.capacity() / 4).max(16));
        }
        nibbles.push(nibble);
    }
    *len += 1;
}

impl Accumulate<f64> for HourAccumulator {
    type Summary = HourSummary;

    fn accept(&mut self, ts: u64, value: &f64) -> bool {
        // `offset < 3600`.
        let offset = (ts % HOUR_SECS as u64) as u16;
        if !self.seen.insert(offset) {
            return false;
        }
        let v = *value;
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
        true
    }

    /// The hour's first or last second again with the value it has: a resend of a reading
    /// (at-least-once delivery resends the newest), which changes nothing. Any other repeat
    /// may be a correction: the accumulator keeps no other values to compare with.
    fn knows(&self, ts: u64, value: &f64) -> bool {
        let offset = (ts % HOUR_SECS as u64) as u16;
        let s = &self.summary;
        s.n > 0
            && ((offset == self.last_offset && *value == s.last)
                || (offset == self.first_offset && *value == s.first))
    }

    fn summary(&self) -> HourSummary {
        // The partials' sum, largest last: the correctly rounded sum, summed only when asked.
        HourSummary {
            sum: self.partials.iter().sum(),
            ..self.summary
        }
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
        (acc.summary.n > 0).then(|| acc.summary())
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
        // The accumulator's summary sums its partials: 0.6, where adding in turn gives
        // 0.6000000000000001.
        let mut acc = HourAccumulator::default();
        for (second, v) in [(3, 0.1), (1, 0.2), (2, 0.3)] {
            acc.accept(second, &v);
        }
        assert_eq!(acc.summary().sum, 0.6);
    }

    #[test]
    fn an_accumulator_is_128_bytes_inline() {
        // The figure docs/ARCHITECTURE.md gives per device-hour (besides the set's gaps, the
        // sum's partials and the window's key entry).
        assert_eq!(std::mem::size_of::<HourAccumulator>(), 128);
    }

    /// Heap bytes of the seen-set.
    fn seen_bytes(acc: &HourAccumulator) -> usize {
        match &acc.seen {
            Seen::Gaps { nibbles, .. } => nibbles.capacity(),
            Seen::Bits(_) => WORDS * 8,
        }
    }

    #[test]
    fn an_hour_every_10_s_nearly_in_order_keeps_its_seconds_in_a_fraction_of_a_bit_set() {
        // Pairs swapped, as a replay's two workers may interleave a device's readings.
        let mut acc = HourAccumulator::default();
        let seconds: Vec<u64> = (3..3600).step_by(10).collect();
        for pair in seconds.chunks(2) {
            for &second in pair.iter().rev() {
                assert!(acc.accept(7200 + second, &1.0));
            }
        }
        assert!(matches!(acc.seen, Seen::Gaps { .. }));
        assert!(seen_bytes(&acc) <= 200, "{} bytes", seen_bytes(&acc));
        // Duplicates, recent and sealed, then a second older than the recent bits: the set
        // turns into bits and still knows every second.
        assert!(!acc.accept(7200 + 3593, &2.0));
        assert!(!acc.accept(7200 + 3483, &2.0));
        assert!(matches!(acc.seen, Seen::Gaps { .. }));
        assert!(!acc.accept(7200 + 13, &2.0));
        assert!(matches!(acc.seen, Seen::Bits(_)));
        assert!(acc.accept(7200 + 14, &2.0));
        assert_eq!(acc.summary().n, 361);
        // Every second: the gaps would outgrow the bit set, which takes over.
        let mut dense = HourAccumulator::default();
        (0..3600).for_each(|s| assert!(dense.accept(s, &0.5)));
        assert!(matches!(dense.seen, Seen::Bits(_)));
        assert!((0..3600).all(|s| !dense.accept(s, &0.5)));
    }

    proptest::proptest! {
        /// Whatever the order and spacing of the seconds (gaps of one nibble and of four,
        /// repeats, late ones), a second is new exactly once, as in a plain set.
        #[test]
        fn a_second_is_new_exactly_once(
            max_gap in 1u64..300,
            steps in proptest::collection::vec((0u64..300, proptest::bool::weighted(0.05), 0u64..3600), 0..2000),
        ) {
            let mut acc = HourAccumulator::default();
            let mut model = std::collections::BTreeSet::new();
            let mut at = 0;
            for (gap, jump, anywhere) in steps {
                // Mostly ascending, now and then any second of the hour.
                at = if jump { anywhere } else { (at + gap % max_gap).min(3599) };
                proptest::prop_assert_eq!(acc.accept(3600 * 5 + at, &(at as f64)), model.insert(at));
            }
            proptest::prop_assert_eq!(acc.summary().n as usize, model.len());
            proptest::prop_assert!(seen_bytes(&acc) <= WORDS * 8 + WORDS * 8 / 4);
        }
    }

    #[test]
    fn a_resend_of_the_first_or_last_reading_is_known_and_any_other_repeat_is_not() {
        let mut acc = HourAccumulator::default();
        assert!(!acc.knows(3610, &1.0), "an empty hour knows nothing");
        for (ts, v) in [(3610, 1.0), (3620, 2.0), (3630, 3.0)] {
            assert!(acc.accept(ts, &v));
        }
        assert!(!acc.accept(3630, &3.0));
        assert!(acc.knows(3630, &3.0), "the last reading again");
        assert!(acc.knows(3610, &1.0), "the first reading again");
        assert!(!acc.knows(3630, &3.5), "a correction of the last");
        assert!(
            !acc.knows(3620, &2.0),
            "a middle second: its value is not kept"
        );
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
        let row = sinks::table::Row {
            key: b"d_3600".to_vec(),
            cells: s.cells(3600),
        };
        assert_eq!(HourSummary::from_row(&row), Some(s));
    }
}
