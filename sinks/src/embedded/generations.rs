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

use fjall::{Iter, Keyspace, KeyspaceCreateOptions, KvPair, OwnedWriteBatch, Slice};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Bytes on disk of a generation at which writes move on to a new one.
///
/// Within a generation leveled compaction costs what it costs for a table of this size; across
/// generations reads merge one more iterator each, except scans with a time range, which skip the
/// generations whose span lies outside it. A replay of 100,000 devices × 1 h (36 M readings)
/// ran 3.05× as fast with 600 MiB generations as in one keyspace (its compaction thread took
/// 98.5 CPU s instead of 360.8), and with spans to skip by, 1.4–1.7× as fast again with 64 MiB
/// generations as with 600 MiB ones: its compaction thread took 94–97 CPU s instead of 153–189,
/// and its peak RSS was 331–341 MB instead of 374–386 (docs/BENCHMARKS.md). Every generation is
/// a fjall keyspace with its own files and metadata, and gets and scans without a time range seek
/// each of them: a store kept for months of a large fleet wants larger generations
/// (`store.generation_mb`, [`super::EmbeddedStore::set_generation_bytes`]).
pub const GENERATION_BYTES: u64 = 64 << 20;

/// Memtable size of a table's keyspace (fjall's default: 64 MiB).
const MEMTABLE_BYTES: u64 = 16 * 1024 * 1024;

/// L0 runs that start a compaction into L1 (fjall's default: 4).
///
/// A replay ingests a table of about 1–2.5 MB (8 MiB of cells and slots, lz4-compressed) per
/// run. Each run's salted keys span the whole key space, so every L0 → L1 round rewrites all of
/// L1: at 8, a 64 MiB generation was merged three times over (8, 16 and 24 runs' worth); at 24 it
/// is merged about once. In a replay of 100,000 devices × 1 h that took fjall's worker from 90–96
/// to 53–57 CPU s and the replay from 232–260 k to 273–304 k readings/s (docs/BENCHMARKS.md, "L0
/// trigger"). A generation closes when this many tables were ingested into it
/// ([`Generation::is_full`]), so the round is its only one. It stays below 30, where fjall halts
/// memtable writes until a compaction ends; from 20 runs fjall slows them a little (a spin of at
/// most 90 k empty iterations per batch), which replays, whose writes are ingested, rarely see.
/// The cost is on reads: a Get or scan checks each L0 run of each generation it reads.
pub(crate) const L0_COMPACTION_TRIGGER: u8 = 24;

/// Options of a table's keyspace, stored with it when it is created.
///
/// Writers spend most of their time inserting into the memtable's skiplist, whose searches get
/// slower as it grows; flushing smaller memtables, and compacting their tables in fewer, larger
/// rounds, cut the process's CPU per cell by about 15% and the writer's by about 35% in
/// `bench_writer_throughput` (2 writers, 6 M cells, 2 cores, jemalloc). A generation's reads merge
/// at most [`L0_COMPACTION_TRIGGER`] L0 runs.
///
/// Blocks are lz4-compressed from L1 down (fjall's default: from L2). A generation's data lives
/// in L1 and the top of the levels, so without it a replay of 100,000 devices × 20 min took
/// 2.0–2.1 GB instead of 723–743 MB; compressing costs the compaction thread CPU (81 → 90 CPU s
/// in all) but not the replay's speed, which the timely workers bound. The memtable's flushes
/// into L0 stay uncompressed; ingested tables take L1's options (lsm-tree's
/// `INITIAL_CANONICAL_LEVEL`), so the timely workers compress them.
///
/// Block indexes and bloom filters are partitioned from L1 down (fjall's default: from L3). An
/// unpartitioned index is one block per table, which fjall pins in memory for L0 and L1, where a
/// generation's data lives: in the first three quarters of a replay of 100,000 devices × 1 h they
/// held 114 MB of the heap's 478 MB peak (heaptrack), and they grew with the data, so a 3 h replay
/// peaked at 910 MB against 587 MB for 1 h. A partitioned index pins only its small top level and
/// reads its partitions through the block cache. An unpartitioned filter's writer also holds a hash
/// of every key of the table it writes (67 MB at that peak); a partitioned one writes a partition
/// at a time. The options are stored with a keyspace: a store created before keeps its tables'
/// unpartitioned indexes, and its new generations get these.
pub(crate) fn table_options() -> KeyspaceCreateOptions {
    let compaction = fjall::compaction::Leveled::default().with_l0_threshold(L0_COMPACTION_TRIGGER);
    let compression = fjall::config::CompressionPolicy::new([
        fjall::CompressionType::None,
        fjall::CompressionType::Lz4,
    ]);
    let partitioned = || fjall::config::PartitioningPolicy::new([false, true]);
    KeyspaceCreateOptions::default()
        .max_memtable_size(MEMTABLE_BYTES)
        .data_block_compression_policy(compression)
        .index_block_partitioning_policy(partitioned())
        .filter_block_partitioning_policy(partitioned())
        .compaction_strategy(Arc::new(compaction))
}

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

/// One generation of a table: its keyspace and the timestamps its cells carry.
pub(crate) struct Generation {
    pub(crate) keyspace: Keyspace,
    pub(crate) span: Span,
    /// Shared by every [`Lease`] of the generation: one with writes queued or under way holds
    /// it, and an expired generation is dropped only when no lease does. Leases count the
    /// tables ingested through them in it.
    leases: Arc<Ingested>,
}

/// Tables ingested into a generation since it was opened, counted by the writers that ingest
/// them through a [`Lease`].
///
/// fjall's L0 count cannot stand for it: a compaction may have merged the runs by the time the
/// writer looks, and the first table goes straight to the last level.
#[derive(Default)]
struct Ingested(AtomicUsize);

impl Generation {
    pub(crate) fn new(keyspace: Keyspace, span: Span) -> Self {
        Generation {
            keyspace,
            span,
            leases: Arc::default(),
        }
    }

    pub(crate) fn lease(&self) -> Lease {
        Lease {
            keyspace: self.keyspace.clone(),
            generation: self.leases.clone(),
        }
    }

    /// Whether the generation takes no more writes: it holds more than `limit` bytes on disk,
    /// or at least a quarter of that in enough ingested tables to start its first compaction.
    ///
    /// Each table a replay ingests spans the whole key space, so the compaction that
    /// [`L0_COMPACTION_TRIGGER`] of them start merges them into one sorted run, and the next one
    /// merges that run again with the next [`L0_COMPACTION_TRIGGER`]. A generation closed when
    /// its first compaction starts is rewritten once. The quarter keeps a live job whose flushes
    /// ingest small tables from starting a generation every few megabytes.
    pub(crate) fn is_full(&self, limit: u64) -> bool {
        let bytes = self.keyspace.disk_space();
        let runs = self.leases.0.load(Ordering::Relaxed);
        bytes > limit || (runs >= usize::from(L0_COMPACTION_TRIGGER) && bytes > limit / 4)
    }

    /// Whether a writer holds a [`Lease`] of the generation.
    pub(crate) fn is_leased(&self) -> bool {
        Arc::strong_count(&self.leases) > 1
    }
}

/// A generation's keyspace, kept from being dropped (`Inner::drop_expired`) while held: hold
/// it until the writes queued for the keyspace are committed.
pub(crate) struct Lease {
    pub(crate) keyspace: Keyspace,
    generation: Arc<Ingested>,
}

impl Lease {
    /// Counts a table ingested into the generation ([`Generation::is_full`]).
    pub(crate) fn ingested(&self) {
        self.generation.0.fetch_add(1, Ordering::Relaxed);
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
