//! A table's series points (issue 38): runs of readings sealed as series chunks in a keyspace of
//! their own, keyed by time partition, series bucket and seq, and read back as the packed
//! key-values the generic layout would hold.

use crate::embedded::codec;
use crate::embedded::series::{self, Point};
use crate::schema::SeriesLayout;
use crate::table::TimeRange;
use fjall::{Keyspace, KvPair, OwnedWriteBatch, Slice};
use std::collections::BTreeSet;
use std::sync::{PoisonError, RwLock};
use xxhash_rust::xxh3::xxh3_64;

/// A time partition's width: an hour of cell stamps. Whole partitions go at the TTL.
pub(crate) const PARTITION_MS: i64 = 3_600_000;

/// Series buckets: a run's points are sealed as one chunk per (partition, bucket), so a read of
/// one series decodes about 1/64 of a run.
pub(crate) const BUCKETS: u64 = 64;

/// Bytes of a run key: partition (8), bucket (2), seq (8).
const RUN_KEY: usize = 18;

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

/// A partition's 8 key bytes: the sign bit flipped, big-endian, so that keys sort by time.
fn partition_bytes(partition: i64) -> [u8; 8] {
    (partition as u64 ^ (1 << 63)).to_be_bytes()
}

/// The key of a run's chunk of `(partition, bucket)`.
pub(crate) fn run_key(partition: i64, bucket: u16, seq: u64) -> [u8; RUN_KEY] {
    let mut key = [0; RUN_KEY];
    key[..8].copy_from_slice(&partition_bytes(partition));
    key[8..10].copy_from_slice(&bucket.to_be_bytes());
    key[10..].copy_from_slice(&seq.to_be_bytes());
    key
}

/// `(partition, bucket, seq)` of a run key; `None` if it is not one.
fn parse_run_key(key: &[u8]) -> Option<(i64, u16, u64)> {
    let key: &[u8; RUN_KEY] = key.try_into().ok()?;
    let partition = u64::from_be_bytes(key[..8].try_into().ok()?) ^ (1 << 63);
    let bucket = u16::from_be_bytes(key[8..10].try_into().ok()?);
    let seq = u64::from_be_bytes(key[10..].try_into().ok()?);
    Some((partition as i64, bucket, seq))
}

/// A table's series runs.
pub(crate) struct SeriesTable {
    pub(crate) layout: SeriesLayout,
    pub(crate) keyspace: Keyspace,
    /// The partitions that hold runs.
    partitions: RwLock<BTreeSet<i64>>,
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
        let mut from = [0u8; 8];
        loop {
            let Some(first) = keyspace.range(from.as_slice()..).next() else {
                break;
            };
            let key = first.key()?;
            let (partition, _, _) = parse_run_key(&key).ok_or_else(|| damaged("key"))?;
            partitions.insert(partition);
            if partition == i64::MAX {
                break;
            }
            from = partition_bytes(partition + 1);
        }
        Ok(SeriesTable {
            layout,
            keyspace,
            partitions: RwLock::new(partitions),
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

    /// Forgets `partition` (its runs were dropped).
    pub(crate) fn forget_partition(&self, partition: i64) {
        let mut held = self
            .partitions
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        held.remove(&partition);
    }

    /// The runs of `partition` (of one bucket if given): `(key, seq, points)`.
    fn runs(
        &self,
        partition: i64,
        bucket: Option<u16>,
    ) -> fjall::Result<Vec<(Slice, u64, Vec<Point>)>> {
        let mut prefix = partition_bytes(partition).to_vec();
        if let Some(b) = bucket {
            prefix.extend_from_slice(&b.to_be_bytes());
        }
        let mut out = Vec::new();
        for item in self.keyspace.prefix(&prefix) {
            let (key, value) = item.into_inner()?;
            let (_, _, seq) = parse_run_key(&key).ok_or_else(|| damaged("key"))?;
            let points = series::decode(&value).map_err(damaged)?;
            out.push((key, seq, points));
        }
        Ok(out)
    }

    /// The stored key-values of `row`'s point (one per run holding it), if `prefix` is
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
        let Some((series, ts)) = (layout.split)(row) else {
            return Ok(Vec::new());
        };
        let Some(stamp) = ts.checked_mul(layout.unit_ms) else {
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
        for (_, seq, points) in self.runs(partition, Some(bucket_of(series)))? {
            for p in points.iter().filter(|p| p.series == series && p.ts == ts) {
                out.push(self.stored(row, seq, p, stamp));
            }
        }
        Ok(out)
    }

    /// The stored key-values of the points whose rows lie in `[start, stop)` (`stop` empty: no
    /// end) and whose stamps may lie in `time`, in key order.
    pub(crate) fn range_points(
        &self,
        start: &[u8],
        stop: &[u8],
        time: Option<&TimeRange>,
    ) -> fjall::Result<Vec<KvPair>> {
        let layout = &self.layout;
        let only = (layout.series_in)(start, stop);
        let bucket = only.as_deref().map(bucket_of);
        let mut out = Vec::new();
        let mut row = Vec::new();
        for partition in self.partitions() {
            let lo = partition.saturating_mul(PARTITION_MS);
            let hi = lo.saturating_add(PARTITION_MS - 1);
            if time.is_some_and(|t| !t.overlaps(lo, hi)) {
                continue;
            }
            for (_, seq, points) in self.runs(partition, bucket)? {
                for p in &points {
                    if only.as_deref().is_some_and(|s| s != p.series) {
                        continue;
                    }
                    row.clear();
                    (layout.join)(&p.series, p.ts, &mut row);
                    if row.as_slice() < start || (!stop.is_empty() && row.as_slice() >= stop) {
                        continue;
                    }
                    let stamp = p.ts.saturating_mul(layout.unit_ms);
                    out.push(self.stored(&row, seq, p, stamp));
                }
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// A point as the packed key-value a put of its cells would be, under its run's seq.
    fn stored(&self, row: &[u8], seq: u64, p: &Point, stamp: i64) -> KvPair {
        let layout = &self.layout;
        let mut value = Vec::with_capacity(24);
        (layout.render)(p.value, &mut value);
        let mut cells: [(&[u8], &[u8]); 2] =
            [(layout.value, &value), (layout.extra, p.extra.as_bytes())];
        let n = if p.extra.is_empty() { 1 } else { 2 };
        let cells = &mut cells[..n];
        cells.sort_by(|a, b| a.0.cmp(b.0));
        let mut key = Vec::new();
        codec::encode_packed_key(&mut key, row, layout.family, cells.iter().map(|c| c.0));
        let mut stored = Vec::new();
        codec::encode_packed_value(&mut stored, seq, cells.iter().map(|c| (stamp, c.1)));
        (Slice::from(key), Slice::from(stored))
    }

    /// Queues in `batch` the removal of `row`'s point from every run holding it (each run
    /// rewritten without it, or removed when it held nothing else); whether any held it.
    pub(crate) fn remove_point(
        &self,
        row: &[u8],
        batch: &mut OwnedWriteBatch,
    ) -> fjall::Result<bool> {
        let Some((series, ts)) = (self.layout.split)(row) else {
            return Ok(false);
        };
        let Some(stamp) = ts.checked_mul(self.layout.unit_ms) else {
            return Ok(false);
        };
        let partition = partition_of(stamp);
        if !self.holds(partition) {
            return Ok(false);
        }
        let mut found = false;
        for (key, _, mut points) in self.runs(partition, Some(bucket_of(series)))? {
            let before = points.len();
            points.retain(|p| !(p.series == series && p.ts == ts));
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

    /// Queues in `batch` the removal of every run of the partitions wholly expired at `now_ms`
    /// for cells kept `ttl_ms`, and forgets them; how many partitions went.
    pub(crate) fn drop_expired(
        &self,
        ttl_ms: i64,
        now_ms: i64,
        batch: &mut OwnedWriteBatch,
    ) -> fjall::Result<usize> {
        let mut dropped = 0;
        for partition in self.partitions() {
            let newest = partition
                .saturating_mul(PARTITION_MS)
                .saturating_add(PARTITION_MS - 1);
            if !codec::is_expired(newest, Some(ttl_ms), now_ms) {
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
    fn partitions_are_whole_hours_of_stamps() {
        assert_eq!(partition_of(0), 0);
        assert_eq!(partition_of(PARTITION_MS - 1), 0);
        assert_eq!(partition_of(PARTITION_MS), 1);
        assert_eq!(partition_of(-1), -1);
    }
}
