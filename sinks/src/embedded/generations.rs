//! A table's generations: fjall keyspaces written one after the other, read as one.
//!
//! Leveled compaction rewrites a cell once per level it passes, and merges every new table with
//! all the tables of the next level its keys overlap. Hourglass's narrow keys are salted, so a
//! table of fresh cells spans the whole key space: each compaction round merges into the whole
//! next level, and the rounds grow with the table. In a replay of 100,000 devices the compaction
//! thread's CPU grew 16× for 6× the readings (docs/BENCHMARKS.md).
//!
//! So a table is a stack of generations. Writes go to the newest; once it holds
//! [`GENERATION_BYTES`] on disk, or once enough tables were ingested into it to start its
//! first compaction (`Generation::is_full`), the next write starts a new one, and compactions
//! never merge across generations. A cell is rewritten by compactions only within its
//! generation, whatever the table's size: time-series stores seal blocks (InfluxDB's shards,
//! Prometheus's blocks), and HBase's date-tiered compaction never merges files of different time
//! windows, for the same reason. Reads merge the generations in key order; of a key stored in
//! several, the newest generation's cell is the visible one, as a later write is in one keyspace.
//!
//! Each generation records the [`Span`] of timestamps its cells carry, and a scan with a time
//! range reads only the generations whose span meets it, as HBase skips the store files whose
//! time range lies outside a scan's.
//!
//! Generation 0 is the keyspace named after the table, so a store written before generations
//! existed opens as a table of one generation. Generation `n > 0` is the keyspace `table#n`
//! (`#` is not allowed in table names, HBase's nor ours).

use super::store::Lease;
use fjall::{Iter, KvPair, OwnedWriteBatch, Slice};

/// Bytes on disk of a generation at which writes move on to a new one.
///
/// Within a generation leveled compaction costs what it costs for a table of this size; across
/// generations reads merge one more iterator each, except scans with a time range, which skip the
/// generations whose [`Span`] lies outside it. A replay of 100,000 devices × 1 h (36 M readings)
/// ran 3.05× as fast with 600 MiB generations as in one keyspace (its compaction thread took
/// 98.5 CPU s instead of 360.8), and with spans to skip by, 1.4–1.7× as fast again with 64 MiB
/// generations as with 600 MiB ones: its compaction thread took 94–97 CPU s instead of 153–189,
/// and its peak RSS was 331–341 MB instead of 374–386 (docs/BENCHMARKS.md). Every generation is
/// a fjall keyspace with its own files and metadata, and gets and scans without a time range seek
/// each of them: a store kept for months of a large fleet wants larger generations
/// (`store.generation_mb`, [`super::EmbeddedStore::set_generation_bytes`]).
pub const GENERATION_BYTES: u64 = 64 << 20;

/// Separates a table's name from its generation number in a keyspace name.
pub(crate) const MARK: char = '#';

/// The name of generation `n` of `table`.
pub(crate) fn keyspace_name(table: &str, n: usize) -> String {
    if n == 0 {
        table.to_string()
    } else {
        format!("{table}{MARK}{n}")
    }
}

/// The table and generation of a keyspace name; `None` if it is not a generation's name.
pub(crate) fn parse_keyspace_name(name: &str) -> Option<(&str, usize)> {
    match name.split_once(MARK) {
        None => Some((name, 0)),
        Some((table, n)) => {
            let n: usize = n.parse().ok()?;
            // `t#0` or `t#01` would be a second name of a generation.
            (n > 0 && keyspace_name(table, n) == name).then_some((table, n))
        }
    }
}

/// Longest table name whose generations' names fjall still accepts (255 bytes).
pub(crate) const MAX_TABLE_NAME: usize = 255 - 1 - 10;

/// The keyspace that records each generation's [`Span`]: a key per generation's keyspace name.
/// `#` starts no table's name, so no generation is called this.
pub(crate) const SPANS_KEYSPACE: &str = "#spans";

/// Granularity of recorded spans: a span is widened to whole steps, so a job that writes in
/// time order records a generation's span about once per step, each record synced.
pub(crate) const SPAN_STEP_MS: i64 = 10 * 60 * 1000;

/// The timestamps `[lo, hi]` (both included) that every cell written into a generation carries.
///
/// HBase keeps the same in each store file (`TIMERANGE` in its metadata, from the
/// `TimeRangeTracker`) and skips the files outside a scan's time range. A generation's span is
/// widened, and the widening synced to disk, before any cell outside it is written, so a span
/// never misses a cell: a crash in between leaves it wider than needed, never narrower. Cells a
/// compaction turns into expiry markers ([`super::codec::EXPIRED`]) are not in it: they hide
/// older writes of their key and are invisible themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub(crate) lo: i64,
    pub(crate) hi: i64,
}

impl Span {
    /// A generation with no cell.
    pub(crate) const EMPTY: Span = Span {
        lo: i64::MAX,
        hi: i64::MIN,
    };

    /// A generation whose cells' timestamps are not known: one a store written before spans
    /// existed holds, or one created just before a crash.
    pub(crate) const ANY: Span = Span {
        lo: i64::MIN,
        hi: i64::MAX,
    };

    /// Whether every timestamp in `[lo, hi]` is in the span.
    pub(crate) fn covers(&self, lo: i64, hi: i64) -> bool {
        self.lo <= lo && hi <= self.hi
    }

    /// The span widened to hold `[lo, hi]`, rounded out to whole [`SPAN_STEP_MS`].
    pub(crate) fn widened(&self, lo: i64, hi: i64) -> Span {
        let lo = lo.saturating_sub(lo.rem_euclid(SPAN_STEP_MS));
        let hi = hi.saturating_add(SPAN_STEP_MS - 1 - hi.rem_euclid(SPAN_STEP_MS));
        Span {
            lo: self.lo.min(lo),
            hi: self.hi.max(hi),
        }
    }

    /// Whether a cell in the span can be stamped within `range` (always, with no range).
    pub(crate) fn may_hold(&self, range: Option<&crate::table::TimeRange>) -> bool {
        range.is_none_or(|r| r.overlaps(self.lo, self.hi))
    }

    /// The span as stored: `lo` and `hi`, 8 bytes big-endian each.
    pub(crate) fn encode(&self) -> [u8; 16] {
        let mut out = [0; 16];
        out[..8].copy_from_slice(&self.lo.to_be_bytes());
        out[8..].copy_from_slice(&self.hi.to_be_bytes());
        out
    }

    /// A stored span; `None` if it is not 16 bytes.
    pub(crate) fn decode(stored: &[u8]) -> Option<Span> {
        let (lo, hi) = stored.split_first_chunk::<8>()?;
        let hi: [u8; 8] = hi.try_into().ok()?;
        Some(Span {
            lo: i64::from_be_bytes(*lo),
            hi: i64::from_be_bytes(hi),
        })
    }
}

/// Queues the removal of `key` from every one of a table's `generations`: once its visible cell
/// is gone, no older write of the key may show in its place.
pub(crate) fn remove_everywhere(batch: &mut OwnedWriteBatch, generations: &[Lease], key: &Slice) {
    for generation in generations {
        batch.remove(&generation.keyspace, key.clone());
    }
}

/// The cells of several generations' iterators over one key range, in key order; of a key in
/// more than one, only the cell of the newest generation (the last iterator).
pub(crate) struct Merged {
    iters: Vec<Iter>,
    /// Each iterator's next cell; `None` once it is exhausted.
    heads: Vec<Option<KvPair>>,
    started: bool,
}

impl Merged {
    /// Merges `iters`, oldest generation first.
    pub(crate) fn new(iters: Vec<Iter>) -> Self {
        let heads = iters.iter().map(|_| None).collect();
        Merged {
            iters,
            heads,
            started: false,
        }
    }

    fn advance(&mut self, i: usize) -> fjall::Result<()> {
        self.heads[i] = self.iters[i]
            .next()
            .map(fjall::Guard::into_inner)
            .transpose()?;
        Ok(())
    }
}

impl Iterator for Merged {
    type Item = fjall::Result<KvPair>;

    fn next(&mut self) -> Option<Self::Item> {
        if !self.started {
            self.started = true;
            for i in 0..self.iters.len() {
                if let Err(e) = self.advance(i) {
                    return Some(Err(e));
                }
            }
        }
        // The smallest key; on a tie the later (newer) generation's cell.
        let mut newest: Option<usize> = None;
        for (i, head) in self.heads.iter().enumerate() {
            let Some((key, _)) = head else { continue };
            if newest.is_none_or(|n| self.heads[n].as_ref().is_some_and(|(k, _)| key <= k)) {
                newest = Some(i);
            }
        }
        let newest = newest?;
        let (key, value) = self.heads[newest].take()?;
        // Older generations' cells of the same key are hidden by this one.
        for i in 0..self.heads.len() {
            let same = self.heads[i].as_ref().is_some_and(|(k, _)| *k == key);
            if i == newest || same {
                if let Err(e) = self.advance(i) {
                    return Some(Err(e));
                }
            }
        }
        Some(Ok((key, value)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generation_names_round_trip_and_reject_other_spellings() {
        assert_eq!(keyspace_name("ts_metric", 0), "ts_metric");
        assert_eq!(keyspace_name("ts_metric", 3), "ts_metric#3");
        assert_eq!(parse_keyspace_name("ts_metric"), Some(("ts_metric", 0)));
        assert_eq!(parse_keyspace_name("ts_metric#3"), Some(("ts_metric", 3)));
        assert_eq!(parse_keyspace_name("ts_metric#0"), None);
        assert_eq!(parse_keyspace_name("ts_metric#03"), None);
        assert_eq!(parse_keyspace_name("ts_metric#x"), None);
        let longest = "t".repeat(MAX_TABLE_NAME);
        assert!(keyspace_name(&longest, u32::MAX as usize).len() <= 255);
        assert_eq!(parse_keyspace_name(SPANS_KEYSPACE), None);
    }

    #[test]
    fn a_span_widens_to_whole_steps_and_round_trips() {
        let step = SPAN_STEP_MS;
        let span = Span::EMPTY.widened(step + 5, 2 * step + 1);
        assert_eq!(
            span,
            Span {
                lo: step,
                hi: 3 * step - 1
            }
        );
        assert!(span.covers(step, 3 * step - 1));
        assert!(!span.covers(step - 1, step));
        // Negative timestamps round down too, and the extremes saturate.
        assert_eq!(Span::EMPTY.widened(-1, -1), Span { lo: -step, hi: -1 });
        assert!(Span::EMPTY
            .widened(i64::MIN, i64::MAX)
            .covers(i64::MIN, i64::MAX));
        assert_eq!(Span::decode(&span.encode()), Some(span));
        assert_eq!(Span::decode(&[0; 15]), None);
        let range = crate::table::TimeRange::new(3 * step, 4 * step);
        assert!(!span.may_hold(Some(&range)));
        assert!(span.may_hold(Some(&crate::table::TimeRange::new(0, step + 1))));
        assert!(span.may_hold(None));
        assert!(!Span::EMPTY.may_hold(Some(&crate::table::TimeRange::new(i64::MIN, i64::MAX))));
    }
}
