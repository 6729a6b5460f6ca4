//! A table's generations: fjall keyspaces written one after the other, read as one.
//!
//! Leveled compaction rewrites a cell once per level it passes, and merges every new table with
//! all the tables of the next level its keys overlap. Hourglass's narrow keys are salted, so a
//! table of fresh cells spans the whole key space: each compaction round merges into the whole
//! next level, and the rounds grow with the table. In a replay of 100,000 devices the compaction
//! thread's CPU grew 16× for 6× the readings (docs/BENCHMARKS.md).
//!
//! So a table is a stack of generations. Writes go to the newest; once it holds
//! [`GENERATION_BYTES`] on disk, the next write starts a new one, and compactions never merge
//! across generations. A cell is rewritten by compactions only within its generation, whatever
//! the table's size: time-series stores seal blocks (InfluxDB's shards, Prometheus's blocks), and
//! HBase's date-tiered compaction never merges files of different time windows, for the same
//! reason. Reads merge the generations in key order; of a key stored in several, the newest
//! generation's cell is the visible one, as a later write is in one keyspace.
//!
//! Generation 0 is the keyspace named after the table, so a store written before generations
//! existed opens as a table of one generation. Generation `n > 0` is the keyspace `table#n`
//! (`#` is not allowed in table names, HBase's nor ours).

use fjall::{Iter, Keyspace, KvPair, OwnedWriteBatch, Slice};

/// Bytes on disk of a generation at which writes move on to a new one.
///
/// Within a generation leveled compaction costs what it costs for a table of this size; across
/// generations reads merge one more iterator each. A replay of 100,000 devices × 1 h
/// (36 M readings) ran 3.05× as fast with 600 MiB generations as in one keyspace, its compaction
/// thread taking 98.5 CPU s instead of 360.8 (docs/BENCHMARKS.md). Reads of a store of `n`
/// generations seek `n` keyspaces; a store of 90 days of the full fleet would want larger ones
/// (`store.generation_mb`, [`super::EmbeddedStore::set_generation_bytes`]).
pub const GENERATION_BYTES: u64 = 600 << 20;

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

/// Queues the removal of `key` from every one of a table's `generations`: once its visible cell
/// is gone, no older write of the key may show in its place.
pub(crate) fn remove_everywhere(
    batch: &mut OwnedWriteBatch,
    generations: &[Keyspace],
    key: &Slice,
) {
    for generation in generations {
        batch.remove(generation, key.clone());
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
    }
}
