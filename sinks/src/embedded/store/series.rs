//! A table's series points (issue 38): runs of readings sealed as series chunks in a keyspace of
//! their own, keyed by time partition, series bucket and seq, and read back as the packed
//! key-values the generic layout would hold.

use crate::embedded::codec;
use crate::embedded::series::{self, Point};
use crate::schema::{SeriesLayout, SeriesPoints};
use crate::table::TimeRange;
use fjall::{Database, Keyspace, KvPair, OwnedWriteBatch, PersistMode, Slice};
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Mutex, PoisonError, RwLock};
use xxhash_rust::xxh3::xxh3_64;

/// A time partition's width: an hour of cell stamps. Whole partitions go at the TTL.
pub(crate) const PARTITION_MS: i64 = 3_600_000;

/// Series buckets: a run's points are sealed as one chunk per (partition, bucket), so a read of
/// one series decodes about 1/64 of a run.
pub(crate) const BUCKETS: u64 = 64;

/// Bytes of a run key: partition (8), bucket (2), seq (8).
const RUN_KEY: usize = 18;

/// Runs of one (partition, bucket) merged at once: when the newest mergeable runs include
/// this many of one level, they become one run of the next level (a run sealed by a writer is
/// level 0), so a point is rewritten about log_8 of its bucket's runs times.
pub(crate) const MERGE_FANIN: usize = 8;

/// A partition is closed, and its buckets' runs merged whole, once a run is sealed into a
/// partition this many hours newer.
pub(crate) const CLOSE_AFTER: i64 = 2;

/// The bucket bytes of a partition's marker key (`partition ‖ 0xFFFF`, after its runs): the
/// partition holds generic key-values of the layout's family, or had points deleted, so its
/// runs are never merged. No bucket reaches it ([`BUCKETS`]).
const MARKER_BUCKET: [u8; 2] = [0xFF, 0xFF];

/// The name of the keyspace of `table`'s series runs. `#` starts no generation's name.
pub(crate) fn keyspace_name(table: &str) -> String {
    format!("#series#{table}")
}

/// The bucket of a series.
pub(crate) fn bucket_of(series: &str) -> u16 {
    // Below BUCKETS, which fits in u16.
    (xxh3_64(series.as_bytes()) % BUCKETS) as u16
}

/// The partition of a cell stamp.
pub(crate) fn partition_of(stamp_ms: i64) -> i64 {
    stamp_ms.div_euclid(PARTITION_MS)
}

/// The first and last cell stamps (ms) of `partition`.
fn partition_span(partition: i64) -> (i64, i64) {
    let first = partition.saturating_mul(PARTITION_MS);
    (first, first.saturating_add(PARTITION_MS - 1))
}

/// Whether every cell stamp of `partition` is past `ttl_ms` at `now_ms`.
fn partition_expired(partition: i64, ttl_ms: Option<i64>, now_ms: i64) -> bool {
    codec::is_expired(partition_span(partition).1, ttl_ms, now_ms)
}

/// A partition's 8 key bytes: the sign bit flipped, big-endian, so that keys sort by time.
fn partition_bytes(partition: i64) -> [u8; 8] {
    (partition as u64 ^ (1 << 63)).to_be_bytes()
}

/// The prefix of the keys of `partition` whose bucket bytes are `bucket` (a run's bucket, or
/// [`MARKER_BUCKET`]).
fn bucket_prefix(partition: i64, bucket: [u8; 2]) -> [u8; 10] {
    let mut key = [0; 10];
    key[..8].copy_from_slice(&partition_bytes(partition));
    key[8..].copy_from_slice(&bucket);
    key
}

/// The key of a run's chunk of `(partition, bucket)`.
pub(crate) fn run_key(partition: i64, bucket: u16, seq: u64) -> [u8; RUN_KEY] {
    let mut key = [0; RUN_KEY];
    key[..8].copy_from_slice(&partition_bytes(partition));
    key[8..10].copy_from_slice(&bucket.to_be_bytes());
    key[10..].copy_from_slice(&seq.to_be_bytes());
    key
}

/// The marker key of `partition` (see [`MARKER_BUCKET`]).
fn marker_key(partition: i64) -> [u8; 10] {
    bucket_prefix(partition, MARKER_BUCKET)
}

/// Whether `key` is a partition's marker key.
fn is_marker(key: &[u8]) -> bool {
    key.len() == 10 && key[8..] == MARKER_BUCKET
}

/// The partition of a key of the series keyspace (at least 8 bytes long).
fn partition_of_key(key: &[u8]) -> i64 {
    let mut bytes = [0; 8];
    bytes.copy_from_slice(&key[..8]);
    (u64::from_be_bytes(bytes) ^ (1 << 63)) as i64
}

/// `(partition, bucket, seq)` of a run key; `None` if it is not one.
fn parse_run_key(key: &[u8]) -> Option<(i64, u16, u64)> {
    let key: &[u8; RUN_KEY] = key.try_into().ok()?;
    let partition = u64::from_be_bytes(key[..8].try_into().ok()?) ^ (1 << 63);
    let bucket = u16::from_be_bytes(key[8..10].try_into().ok()?);
    let seq = u64::from_be_bytes(key[10..].try_into().ok()?);
    Some((partition as i64, bucket, seq))
}

/// A committed run as the merge policy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RunInfo {
    seq: u64,
    /// 0 for a run a writer sealed (or found on disk); a merge of runs of level `l` is `l + 1`.
    level: u8,
}

/// A run a writer sealed into its batch: registered with [`SeriesTable::register`] once the
/// batch is committed, then offered to [`SeriesTable::merge`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct SealedRun {
    pub(crate) partition: i64,
    pub(crate) bucket: u16,
    pub(crate) seq: u64,
}

/// A table's series runs.
pub(crate) struct SeriesTable {
    pub(crate) layout: SeriesLayout,
    pub(crate) keyspace: Keyspace,
    /// The partitions that hold runs (or a marker).
    partitions: RwLock<BTreeSet<i64>>,
    /// The partitions that are never merged ([`MARKER_BUCKET`]), as their marker keys say.
    marked: RwLock<BTreeSet<i64>>,
    /// Per (partition, bucket) a writer of this process sealed runs into: its committed runs by
    /// seq, loaded from the keyspace when first touched. Forgotten when the partition is closed.
    index: Mutex<HashMap<(i64, u16), Vec<RunInfo>>>,
    /// Held by a merge from choosing its runs until its batch is committed, and by whoever
    /// marks a partition or queues rewrites or removals of its runs (deletes, expiry), so
    /// that none of them acts on runs a merge is replacing.
    merging: Mutex<()>,
    /// The newest partition a run was sealed into by this process: partitions
    /// [`CLOSE_AFTER`] older are closed.
    newest: AtomicI64,
}

/// What a merge needs from the store.
pub(crate) struct MergeContext<'a> {
    pub(crate) db: &'a Database,
    /// The lowest seq that may still be committed ([`super::Inner::merge_watermark`]): runs at
    /// or above it are not merged.
    pub(crate) watermark: &'a dyn Fn() -> u64,
    /// The family's TTL and the clock: a partition past it is left to `drop_expired`.
    pub(crate) ttl_ms: Option<i64>,
    pub(crate) now_ms: i64,
}

/// A damaged run, as the fjall error that reads carry.
fn damaged(what: impl std::fmt::Display) -> fjall::Error {
    fjall::Error::Io(std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        format!("series run damaged: {what}"),
    ))
}

impl SeriesTable {
    /// The runs of `keyspace`, their partitions found by one seek each.
    pub(crate) fn open(layout: SeriesLayout, keyspace: Keyspace) -> fjall::Result<Self> {
        let mut partitions = BTreeSet::new();
        let mut marked = BTreeSet::new();
        let mut from = [0u8; 8];
        loop {
            let Some(first) = keyspace.range(from.as_slice()..).next() else {
                break;
            };
            let key = first.key()?;
            let partition = match parse_run_key(&key) {
                Some((partition, _, _)) => partition,
                None if is_marker(&key) => partition_of_key(&key),
                None => return Err(damaged("key")),
            };
            partitions.insert(partition);
            if keyspace.contains_key(marker_key(partition))? {
                marked.insert(partition);
            }
            if partition == i64::MAX {
                break;
            }
            from = partition_bytes(partition + 1);
        }
        Ok(SeriesTable {
            layout,
            keyspace,
            partitions: RwLock::new(partitions),
            marked: RwLock::new(marked),
            index: Mutex::new(HashMap::new()),
            merging: Mutex::new(()),
            newest: AtomicI64::new(i64::MIN),
        })
    }

    /// The partitions holding runs, oldest first.
    pub(crate) fn partitions(&self) -> Vec<i64> {
        let held = self
            .partitions
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        held.iter().copied().collect()
    }

    /// Whether `partition` holds runs.
    fn holds(&self, partition: i64) -> bool {
        let held = self
            .partitions
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        held.contains(&partition)
    }

    /// Records that `partition` holds runs (before they are committed: a read then finds none).
    pub(crate) fn add_partition(&self, partition: i64) {
        let mut held = self
            .partitions
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        held.insert(partition);
    }

    /// Forgets `partition` (its runs were dropped): its runs, mark and merge index.
    fn forget_partition(&self, partition: i64) {
        let mut held = self
            .partitions
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        held.remove(&partition);
        drop(held);
        self.marked
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&partition);
        self.index
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|(p, _), _| *p != partition);
    }

    /// Whether `partition` is marked never to be merged.
    pub(crate) fn is_marked(&self, partition: i64) -> bool {
        let marked = self.marked.read().unwrap_or_else(PoisonError::into_inner);
        marked.contains(&partition)
    }

    /// Marks the partition of `row`'s stamp (if the row splits) never to be merged, in memory
    /// and on disk (its marker key, synced), before the caller writes a generic key-value of
    /// the layout's family for the row: a merge of runs on either side of its seq would reorder
    /// them. A merge holds [`SeriesTable::merging`] while it checks the mark, and this takes it
    /// to set one, so a merge either finished before or sees the mark.
    pub(crate) fn mark_row(&self, row: &[u8], db: &Database) -> fjall::Result<()> {
        let Some(partition) = self.partition_of_row(row) else {
            return Ok(());
        };
        if self.is_marked(partition) {
            return Ok(());
        }
        let _held = self.merging.lock().unwrap_or_else(PoisonError::into_inner);
        self.mark_held(partition, db)
    }

    /// [`SeriesTable::mark_row`] for a partition, with [`SeriesTable::merging`] held.
    fn mark_held(&self, partition: i64, db: &Database) -> fjall::Result<()> {
        if self.is_marked(partition) {
            return Ok(());
        }
        // Once a partition is marked in a process it is never merged; the marker must be on
        // disk before the generic key-value it guards, which may be ingested (not journaled)
        // before the writer's batch is committed. One sync per partition ever marked.
        self.keyspace.insert(marker_key(partition), [])?;
        db.persist(PersistMode::SyncAll)?;
        self.add_partition(partition);
        self.marked
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(partition);
        Ok(())
    }

    /// The partition of a row's points, if the row is a series row.
    fn partition_of_row(&self, row: &[u8]) -> Option<i64> {
        let (_, time) = self.layout.split_exact(row, &mut Vec::new())?;
        Some(partition_of((self.layout.stamp)(time)?))
    }

    /// The runs of `partition` (of one bucket if given): `(key, seq, points)`, every point or,
    /// with `only`, that series' (of its bucket, then: a chunk's blocks hold whole series, and
    /// only the block holding it is decoded).
    fn runs(
        &self,
        partition: i64,
        bucket: Option<u16>,
        only: Option<&str>,
    ) -> fjall::Result<Vec<(Slice, u64, Vec<Point>)>> {
        let prefix = match only.map(bucket_of).or(bucket) {
            Some(b) => bucket_prefix(partition, b.to_be_bytes()).to_vec(),
            None => partition_bytes(partition).to_vec(),
        };
        let mut out = Vec::new();
        for item in self.keyspace.prefix(&prefix) {
            let (key, value) = item.into_inner()?;
            if is_marker(&key) {
                continue;
            }
            let (_, _, seq) = parse_run_key(&key).ok_or_else(|| damaged("key"))?;
            let points = match only {
                Some(id) => series::decode_series(&value, id, id),
                None => series::decode(&value),
            }
            .map_err(damaged)?;
            out.push((key, seq, points));
        }
        Ok(out)
    }

    /// The stored key-values of `row`'s points (one per run holding any), if `prefix` is
    /// `row 0x00` or `row 0x00 family` of the layout's family, in the generic packed encoding.
    pub(crate) fn row_points(
        &self,
        prefix: &[u8],
        time: Option<&TimeRange>,
    ) -> fjall::Result<Vec<KvPair>> {
        let layout = &self.layout;
        let Some(at) = prefix.iter().position(|&b| b == codec::SEP) else {
            return Ok(Vec::new());
        };
        let (row, family) = (&prefix[..at], &prefix[at + 1..]);
        if !layout.family.as_bytes().starts_with(family) {
            return Ok(Vec::new());
        }
        let mut scratch = Vec::new();
        let Some((series, row_time)) = layout.split_exact(row, &mut scratch) else {
            return Ok(Vec::new());
        };
        let Some(stamp) = (layout.stamp)(row_time) else {
            return Ok(Vec::new());
        };
        if time.is_some_and(|t| !t.contains(stamp)) {
            return Ok(Vec::new());
        }
        let partition = partition_of(stamp);
        if !self.holds(partition) {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for (_, seq, points) in self.runs(partition, None, Some(series))? {
            let of_row: Vec<&Point> = points
                .iter()
                .filter(|p| layout.row_time(p.ts) == row_time)
                .collect();
            if !of_row.is_empty() {
                out.push(self.stored(row, row_time, seq, &of_row, stamp));
            }
        }
        Ok(out)
    }

    /// The stored key-values of the points whose rows lie in `[start, stop)` (`stop` empty: no
    /// end) and whose stamps may lie in `time`, in key order: per run, one for each row's
    /// points.
    pub(crate) fn range_points(
        &self,
        start: &[u8],
        stop: &[u8],
        time: Option<&TimeRange>,
    ) -> fjall::Result<Vec<KvPair>> {
        let layout = &self.layout;
        let only = (layout.series_in)(start, stop);
        let mut out = Vec::new();
        let mut row = Vec::new();
        for partition in self.partitions() {
            let (lo, hi) = partition_span(partition);
            if time.is_some_and(|t| !t.overlaps(lo, hi)) {
                continue;
            }
            for (_, seq, points) in self.runs(partition, None, only.as_deref())? {
                // A run's points are by (series, time): a row's are consecutive.
                let mut rest = &points[..];
                while let Some(first) = rest.first() {
                    let row_time = layout.row_time(first.ts);
                    let n = rest
                        .iter()
                        .take_while(|p| {
                            p.series == first.series && layout.row_time(p.ts) == row_time
                        })
                        .count();
                    let (of_row, tail) = rest.split_at(n);
                    rest = tail;
                    row.clear();
                    (layout.join)(&first.series, row_time, &mut row);
                    if row.as_slice() < start || (!stop.is_empty() && row.as_slice() >= stop) {
                        continue;
                    }
                    let stamp = layout.point_stamp(first.ts);
                    let of_row: Vec<&Point> = of_row.iter().collect();
                    out.push(self.stored(&row, row_time, seq, &of_row, stamp));
                }
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// A row's points of one run as the packed key-value a put of their cells would be, under
    /// the run's seq: a narrow row's one point as its value and extra cells, a wide row's as
    /// one cell each, by qualifier.
    fn stored(&self, row: &[u8], row_time: i64, seq: u64, points: &[&Point], stamp: i64) -> KvPair {
        let layout = &self.layout;
        // (qualifier, value) of each cell.
        let mut cells: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(points.len() + 1);
        let render = |v: f64| {
            let mut value = Vec::with_capacity(24);
            (layout.render)(v, &mut value);
            value
        };
        match layout.points {
            SeriesPoints::Row { value, extra } => {
                for p in points {
                    cells.push((value.to_vec(), render(p.value)));
                    if !p.extra.is_empty() {
                        cells.push((extra.to_vec(), p.extra.as_bytes().to_vec()));
                    }
                }
            }
            SeriesPoints::Cells { qualifier, .. } => {
                for p in points {
                    let mut q = Vec::with_capacity(8);
                    qualifier(row_time, p.ts, &mut q);
                    cells.push((q, render(p.value)));
                }
            }
        }
        cells.sort_by(|a, b| a.0.cmp(&b.0));
        let mut key = Vec::new();
        codec::encode_packed_key(
            &mut key,
            row,
            layout.family,
            cells.iter().map(|c| c.0.as_slice()),
        );
        let mut stored = Vec::new();
        codec::encode_packed_value(
            &mut stored,
            seq,
            cells.iter().map(|c| (stamp, c.1.as_slice())),
        );
        (Slice::from(key), Slice::from(stored))
    }

    /// Queues in `batch` the removal of `row`'s points from every run holding any (each run
    /// rewritten without them, or removed when it held nothing else); whether any held one.
    ///
    /// The row's partition is marked first ([`SeriesTable::mark_row`]) and the runs read with
    /// [`SeriesTable::merging`] held: the rewrites, committed later, replace runs no merge will
    /// have replaced, and the caller's write-back of the row's surviving cells (a generic put)
    /// is ordered against runs that stay as they are.
    pub(crate) fn remove_point(
        &self,
        row: &[u8],
        db: &Database,
        batch: &mut OwnedWriteBatch,
    ) -> fjall::Result<bool> {
        let layout = &self.layout;
        let Some((series, row_time)) = layout.split_exact(row, &mut Vec::new()) else {
            return Ok(false);
        };
        let Some(stamp) = (layout.stamp)(row_time) else {
            return Ok(false);
        };
        let partition = partition_of(stamp);
        let _held = self.merging.lock().unwrap_or_else(PoisonError::into_inner);
        self.mark_held(partition, db)?;
        if !self.holds(partition) {
            return Ok(false);
        }
        let mut found = false;
        for (key, _, mut points) in self.runs(partition, Some(bucket_of(series)), None)? {
            let before = points.len();
            points.retain(|p| !(p.series == series && layout.row_time(p.ts) == row_time));
            if points.len() == before {
                continue;
            }
            found = true;
            if points.is_empty() {
                batch.remove(&self.keyspace, key);
            } else {
                let chunk = series::encode(&points).map_err(damaged)?;
                batch.insert(&self.keyspace, key, chunk);
            }
        }
        Ok(found)
    }

    /// Records runs a writer's batch committed, so that merges see them. Called before the
    /// writer gives up their seqs ([`super::Inner::settle_series_seqs`]): a run whose seq is
    /// below the merge watermark is in the index, so merges never skip over one.
    pub(crate) fn register(&self, runs: &[SealedRun]) -> fjall::Result<()> {
        let mut index = self.index.lock().unwrap_or_else(PoisonError::into_inner);
        for run in runs {
            let entry = match index.entry((run.partition, run.bucket)) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    // The runs already there (an earlier process's, or another writer's just
                    // committed), as level 0: a merge of them with new ones is one rewrite more.
                    e.insert(self.load_runs(run.partition, run.bucket)?)
                }
            };
            if let Err(at) = entry.binary_search_by_key(&run.seq, |r| r.seq) {
                entry.insert(
                    at,
                    RunInfo {
                        seq: run.seq,
                        level: 0,
                    },
                );
            }
        }
        Ok(())
    }

    /// The runs of `(partition, bucket)` in the keyspace, by seq, as level 0.
    fn load_runs(&self, partition: i64, bucket: u16) -> fjall::Result<Vec<RunInfo>> {
        let mut out = Vec::new();
        for item in self
            .keyspace
            .prefix(bucket_prefix(partition, bucket.to_be_bytes()))
        {
            let key = item.key()?;
            let (_, _, seq) = parse_run_key(&key).ok_or_else(|| damaged("key"))?;
            out.push(RunInfo { seq, level: 0 });
        }
        Ok(out)
    }

    /// Merges runs of `(partition, bucket)`: [`MERGE_FANIN`] consecutive mergeable runs of one
    /// level (see [`choose`]), again while there are such, or with `whole` every mergeable run
    /// at once. How many merges were committed.
    ///
    /// A merged run keeps, per (series, time), the point of the run with the highest seq and is
    /// stored under that run's seq, the merged runs' keys removed in the same atomic batch. It
    /// answers as the runs did if nothing else of the rows can lie between their seqs, which
    /// is what makes runs mergeable:
    /// - every seq below the watermark is committed, or never will be (no writer holds it);
    ///   the runs are below it and consecutive among the (partition, bucket)'s committed runs
    ///   (checked against the keyspace under the lock);
    /// - the partition is not marked: no generic key-value of the family has a row in it
    ///   ([`SeriesTable::mark_row`], taken before the put's seq), and no delete rewrote its runs;
    /// - the partition is not past the TTL, which `drop_expired` handles.
    ///
    /// # Errors
    /// A fjall error, or a damaged run.
    pub(crate) fn merge(
        &self,
        cx: &MergeContext<'_>,
        partition: i64,
        bucket: u16,
        whole: bool,
    ) -> fjall::Result<usize> {
        let _held = self.merging.lock().unwrap_or_else(PoisonError::into_inner);
        let mut merges = 0;
        loop {
            if self.is_marked(partition) || !self.holds(partition) {
                break;
            }
            if partition_expired(partition, cx.ttl_ms, cx.now_ms) {
                break;
            }
            // After the mark is checked, under the lock: a generic put marks its partition
            // before it takes its seq, so one not seen marked here has a seq above this.
            let watermark = (cx.watermark)();
            let chosen: Vec<RunInfo> = {
                let index = self.index.lock().unwrap_or_else(PoisonError::into_inner);
                let Some(runs) = index.get(&(partition, bucket)) else {
                    break;
                };
                choose(runs, watermark, whole).to_vec()
            };
            if chosen.len() < 2 {
                break;
            }
            let (first, last) = (chosen[0].seq, chosen[chosen.len() - 1].seq);
            let mut keys = Vec::with_capacity(chosen.len());
            let mut points = Vec::new();
            let range = run_key(partition, bucket, first)..=run_key(partition, bucket, last);
            for item in self.keyspace.range(range) {
                let (key, value) = item.into_inner()?;
                let (_, _, seq) = parse_run_key(&key).ok_or_else(|| damaged("key"))?;
                if chosen.get(keys.len()).is_none_or(|r| r.seq != seq) {
                    break;
                }
                points.extend(series::decode(&value).map_err(damaged)?);
                keys.push(key);
            }
            if keys.len() != chosen.len() {
                // The index no longer says what is stored (a run removed by a delete, which
                // also marks the partition): read it again rather than merge around it.
                let runs = self.load_runs(partition, bucket)?;
                let mut index = self.index.lock().unwrap_or_else(PoisonError::into_inner);
                index.insert((partition, bucket), runs);
                break;
            }
            // Runs were read in seq order: of a (series, time), the newest run's point last.
            points.sort_by(|a, b| a.series.cmp(&b.series).then(a.ts.cmp(&b.ts)));
            points.reverse();
            points.dedup_by(|older, kept| older.series == kept.series && older.ts == kept.ts);
            let chunk = series::encode(&points).map_err(damaged)?;
            let mut batch = cx.db.batch().durability(Some(PersistMode::Buffer));
            for key in &keys[..keys.len() - 1] {
                batch.remove(&self.keyspace, key.clone());
            }
            batch.insert(&self.keyspace, run_key(partition, bucket, last), chunk);
            batch.commit()?;
            merges += 1;
            let level = chosen.iter().map(|r| r.level).max().unwrap_or(0);
            let mut index = self.index.lock().unwrap_or_else(PoisonError::into_inner);
            if let Some(runs) = index.get_mut(&(partition, bucket)) {
                runs.retain(|r| r.seq < first || r.seq > last);
                let at = runs.partition_point(|r| r.seq < last);
                runs.insert(
                    at,
                    RunInfo {
                        seq: last,
                        level: level.saturating_add(1),
                    },
                );
            }
            if whole {
                break;
            }
        }
        Ok(merges)
    }

    /// Notes that a run was sealed into `partition`; if that makes older partitions closed
    /// ([`CLOSE_AFTER`]), merges each of their buckets' runs whole and forgets them in the
    /// index (a late run there loads them again). How many merges were committed.
    ///
    /// # Errors
    /// As [`SeriesTable::merge`].
    pub(crate) fn close_before(
        &self,
        cx: &MergeContext<'_>,
        partition: i64,
    ) -> fjall::Result<usize> {
        if self.newest.fetch_max(partition, Ordering::AcqRel) >= partition {
            return Ok(0);
        }
        let closed = partition.saturating_sub(CLOSE_AFTER);
        let buckets: Vec<(i64, u16)> = {
            let index = self.index.lock().unwrap_or_else(PoisonError::into_inner);
            index
                .keys()
                .filter(|(p, _)| *p <= closed)
                .copied()
                .collect()
        };
        let mut merges = 0;
        for (p, b) in buckets {
            merges += self.merge(cx, p, b, true)?;
            let mut index = self.index.lock().unwrap_or_else(PoisonError::into_inner);
            if index.get(&(p, b)).is_some_and(|runs| runs.len() <= 1) {
                index.remove(&(p, b));
            }
        }
        Ok(merges)
    }

    /// Queues in `batch` the removal of every run of the partitions wholly expired at `now_ms`
    /// for cells kept `ttl_ms`, and forgets them; how many partitions went.
    pub(crate) fn drop_expired(
        &self,
        ttl_ms: i64,
        now_ms: i64,
        batch: &mut OwnedWriteBatch,
    ) -> fjall::Result<usize> {
        let expired = |partition: i64| partition_expired(partition, Some(ttl_ms), now_ms);
        let oldest = self.partitions().first().copied();
        if oldest.is_none_or(|p| !expired(p)) {
            return Ok(0);
        }
        // Merges skip expired partitions; the lock keeps one from committing a merged run in
        // a partition between the listing of its keys below and their removal.
        let _held = self.merging.lock().unwrap_or_else(PoisonError::into_inner);
        let mut dropped = 0;
        for partition in self.partitions() {
            if !expired(partition) {
                break;
            }
            for item in self.keyspace.prefix(partition_bytes(partition)) {
                batch.remove(&self.keyspace, item.key()?);
            }
            self.forget_partition(partition);
            dropped += 1;
        }
        Ok(dropped)
    }
}

/// The runs a merge of `runs` (by seq) takes: of those below `watermark`, all if `whole`, else
/// the oldest [`MERGE_FANIN`] of the oldest stretch of at least that many consecutive runs of
/// one level (so levels fall from the oldest run to the newest, as digits of a count in base
/// [`MERGE_FANIN`]); fewer than two means none.
fn choose(runs: &[RunInfo], watermark: u64, whole: bool) -> &[RunInfo] {
    let below = runs.partition_point(|r| r.seq < watermark);
    let runs = &runs[..below];
    if whole {
        return runs;
    }
    let mut at = 0;
    while at < runs.len() {
        let level = runs[at].level;
        let same = runs[at..].iter().take_while(|r| r.level == level).count();
        if same >= MERGE_FANIN {
            return &runs[at..at + MERGE_FANIN];
        }
        at += same;
    }
    &[]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_keys_round_trip_and_sort_by_partition_then_bucket_then_seq() {
        let keys = [
            run_key(-3, 5, 9),
            run_key(-1, 0, 1),
            run_key(0, 0, 7),
            run_key(0, 1, 2),
            run_key(7, 63, u64::MAX),
        ];
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(parse_run_key(&run_key(-3, 5, 9)), Some((-3, 5, 9)));
        assert_eq!(parse_run_key(&keys[1][..17]), None);
    }

    #[test]
    fn merges_take_full_groups_of_one_level_below_the_watermark() {
        let runs = |levels: &[u8]| -> Vec<RunInfo> {
            levels
                .iter()
                .enumerate()
                .map(|(i, &level)| RunInfo {
                    seq: 10 + i as u64,
                    level,
                })
                .collect()
        };
        let seqs = |chosen: &[RunInfo]| chosen.iter().map(|r| r.seq).collect::<Vec<_>>();
        let sealed = runs(&[0; 9]);
        assert_eq!(
            seqs(choose(&sealed, u64::MAX, false)),
            (10..18).collect::<Vec<_>>()
        );
        assert!(
            choose(&sealed, 17, false).is_empty(),
            "seq 17 may not be committed"
        );
        assert_eq!(seqs(choose(&sealed, 13, true)), [10, 11, 12]);
        let mixed = runs(&[2, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0]);
        assert_eq!(
            seqs(choose(&mixed, u64::MAX, false)),
            (11..19).collect::<Vec<_>>()
        );
        assert!(choose(&runs(&[1, 1, 1, 1, 0, 0, 0, 0]), u64::MAX, false).is_empty());
    }

    #[test]
    fn partitions_are_whole_hours_of_stamps() {
        assert_eq!(partition_of(0), 0);
        assert_eq!(partition_of(PARTITION_MS - 1), 0);
        assert_eq!(partition_of(PARTITION_MS), 1);
        assert_eq!(partition_of(-1), -1);
    }
}
