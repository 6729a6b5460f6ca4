//! The table sink's index maintenance: each `user_profile_tag` put brings the index entries
//! of its changed values, and the retraction of the old ones (`crate::audience::maintain`).
//!
//! An entry is stamped as the value it stands for, so a retraction is the delete of one known
//! version (`Mutation::DeleteVersion`), which neither backend reads for: HBase queues a marker,
//! and the embedded writer queues the version key's removal with its buffered puts, all of them
//! ingested as sorted tables. (A retraction was a row delete, which the embedded writer served
//! by writing out everything it buffered, through the memtable, and scanning the row: 7× the
//! job's CPU.)
//!
//! The values a put replaces are read from the store once per user, then remembered: a user is
//! always on the same worker (the job exchanges events by user), so no other writer of the job
//! changes its row, and what this writer wrote last is what the store holds. A bounded cache
//! ([`IndexConfig::cache_mib`](crate::audience::IndexConfig::cache_mib), by bytes, quick_cache's
//! S3-FIFO eviction) keeps the values of recently written users; a user it evicted is read
//! again. Reading a row per put was the index's cost: a read of the embedded store ranges over
//! every table file and version a row may be in.
//!
//! A user neither pending nor remembered is read, unless it cannot have a row: when the profile
//! table was empty as the writer started (a first load), a user it never wrote has none, and
//! one it wrote and then forgot is in [`Evicted`], a Bloom filter of the users the cache evicted.
//! A first run of `profile run` so reads no row until its cache fills, and then only those of
//! users seen before. (A replay into an empty store keeps no index up: it builds the index at
//! its end, `crate::audience::build`.) (The reads of first-seen users' rows, which find nothing, were 35 % of a replay's
//! samples once retractions were blind: a row's read ranges over every table file of every
//! generation.)
//!
//! One writer outside the job changes rows: `hourglass tags purge`, which deletes an offline
//! tag's cells and entries. A remembered value may so be one the store no longer holds. Such
//! a value can only make the writer skip an entry it must write (the same value written
//! again), never keep one it must retract (retracting a missing entry changes nothing), so a
//! remembered value equal to the written one puts its entry again.

use std::sync::Arc;

use pipeline::control::JobControl;
use quick_cache::unsync::Cache;
use quick_cache::{DefaultHashBuilder, Lifecycle, Weighter};
use sinks::table::{KeyBatch, Mutation, Row, ScanSpec, TableReader, TableWriter};

use crate::audience::maintain::{changes, new_batch, Changes};
use crate::key::parse_profile_row;
use crate::merge::FastMap;
use crate::registry::{RegistryUrl, TagRegistry};
use crate::tables::PROFILE_TABLE;
use crate::tag::DataType;

/// A user's values as the store holds them: (code id, stamp, value), sorted by code id. A
/// tag with no value has no entry.
#[derive(Debug, Clone, Default)]
struct Known {
    cells: Vec<(u32, i64, Box<[u8]>)>,
    /// Bytes it takes, as [`Known::weigh`] found when it was last changed.
    bytes: u64,
    /// Taken from the cache: a purge may have deleted some of its values since.
    remembered: bool,
}

/// Bytes a remembered user takes beside its values: its id's heap and the cache's slot.
const USER_OVERHEAD: u64 = 96;
/// Bytes a remembered value takes beside its own: its tuple and its allocation.
const CELL_OVERHEAD: u64 = 48;

impl Known {
    fn get(&self, code: u32) -> Option<(i64, &[u8])> {
        let i = self.cells.binary_search_by_key(&code, |c| c.0).ok()?;
        let (_, ts, value) = &self.cells[i];
        Some((*ts, value))
    }

    fn set(&mut self, code: u32, ts: i64, value: &[u8]) {
        let cell = (code, ts, Box::from(value));
        match self.cells.binary_search_by_key(&code, |c| c.0) {
            Ok(i) => self.cells[i] = cell,
            Err(i) => self.cells.insert(i, cell),
        }
    }

    /// Sets [`Known::bytes`] (before it goes into the cache, whose weights must not change).
    fn weigh(&mut self, user: &str) {
        self.bytes = USER_OVERHEAD
            + user.len() as u64
            + self
                .cells
                .iter()
                .map(|c| CELL_OVERHEAD + c.2.len() as u64)
                .sum::<u64>();
    }
}

/// The cache's weight of a user: the bytes it takes.
#[derive(Debug, Clone, Copy)]
struct ByBytes;

impl Weighter<String, Known> for ByBytes {
    fn weight(&self, _user: &String, known: &Known) -> u64 {
        known.bytes
    }
}

/// Collects the users the cache evicts, for [`Evicted`].
#[derive(Debug, Clone, Copy, Default)]
struct CollectEvicted;

impl Lifecycle<String, Known> for CollectEvicted {
    type RequestState = Vec<String>;

    fn begin_request(&self) -> Vec<String> {
        Vec::new()
    }

    fn on_evict(&self, evicted: &mut Vec<String>, user: String, _: Known) {
        evicted.push(user);
    }
}

/// Bits of [`Evicted`]'s filter: 2 MiB, allocated at the first eviction. Three bits a user:
/// about 1 % of false positives (a read that finds the row or nothing, as without the filter)
/// at 2 M evicted users, 20 % at 5 M.
const EVICTED_BITS: usize = 1 << 24;

/// The users the cache evicted, as a Bloom filter: a user not in it was never evicted.
#[derive(Debug, Default)]
struct Evicted {
    bits: Vec<u64>,
}

impl Evicted {
    /// The filter's three bits of `user`.
    fn bits_of(user: &str) -> [usize; 3] {
        use std::hash::BuildHasher;
        let h = foldhash::fast::FixedState::with_seed(0x1d3a).hash_one(user);
        let (a, b) = (h & 0xffff_ffff, (h >> 32) | 1);
        [0, 1, 2].map(|i| (a.wrapping_add(i * b) as usize) % EVICTED_BITS)
    }

    fn insert(&mut self, user: &str) {
        if self.bits.is_empty() {
            self.bits = vec![0; EVICTED_BITS / 64];
        }
        for bit in Self::bits_of(user) {
            self.bits[bit / 64] |= 1 << (bit % 64);
        }
    }

    fn may_contain(&self, user: &str) -> bool {
        !self.bits.is_empty()
            && Self::bits_of(user)
                .iter()
                .all(|&bit| self.bits[bit / 64] & (1 << (bit % 64)) != 0)
    }
}

/// Wraps the table writer: after a batch with profile puts, writes the index entries of the
/// values that change and the deletes of the entries they replace, comparing with the values
/// each user's row holds (remembered, or read with one multi-get, [`TableReader::get_many`],
/// for the users not remembered that may have a row). The entries go as one [`KeyBatch`]
/// ([`TableWriter::write_keys`]): the embedded store encodes them straight into its buffer,
/// where a mutation per entry cost five allocations, a check and a table lookup each.
///
/// What this writer passed on since the last flush is not yet readable, so the users written
/// since then are held apart from the cache ([`IndexingWriter::pending`]), and go into it at
/// the flush. Tag types come from the registry; a code's type never changes once written
/// (`TagDef::check_change`).
pub(crate) struct IndexingWriter {
    inner: Box<dyn TableWriter>,
    /// `None`: the index is off (`[index] enabled = false`), batches pass as they are.
    reader: Option<sinks::Reader>,
    url: RegistryUrl,
    registry: Option<Box<dyn TagRegistry>>,
    /// Each code's id in [`Known`] and type.
    codes: FastMap<String, (u32, DataType)>,
    /// Users written since the last flush.
    pending: FastMap<String, Known>,
    /// Users written before it, most recently used kept.
    cache: Cache<String, Known, ByBytes, DefaultHashBuilder, CollectEvicted>,
    /// Whether the profile table was empty when this writer first looked (`None`: not yet).
    first_load: Option<bool>,
    /// The users `cache` evicted.
    evicted: Evicted,
    /// The index changes of the batch being written.
    changes: Changes,
    /// Those changes netted, as they are written.
    keys: KeyBatch,
    control: Arc<JobControl>,
}

impl IndexingWriter {
    /// `inner`, reading stored rows through `reader` (`None`: no index), tag types from the
    /// registry at `url`, remembering up to `cache_bytes` of users' values.
    pub(crate) fn new(
        inner: Box<dyn TableWriter>,
        reader: Option<sinks::Reader>,
        url: RegistryUrl,
        cache_bytes: u64,
        control: Arc<JobControl>,
    ) -> Self {
        // quick_cache sizes its table from the estimate: a user of ten short values.
        let estimate = usize::try_from(cache_bytes / 700)
            .unwrap_or(usize::MAX)
            .max(16);
        IndexingWriter {
            inner,
            reader,
            url,
            registry: None,
            codes: FastMap::default(),
            pending: FastMap::default(),
            cache: Cache::with(
                estimate,
                cache_bytes.max(1),
                ByBytes,
                DefaultHashBuilder::default(),
                CollectEvicted,
            ),
            first_load: None,
            evicted: Evicted::default(),
            changes: Changes::default(),
            keys: new_batch(),
            control,
        }
    }

    /// The id and type of `code`, reading the registry again if the code is new.
    fn code(&mut self, code: &str) -> Option<(u32, DataType)> {
        if let Some(c) = self.codes.get(code) {
            return Some(*c);
        }
        if self.registry.is_none() {
            match self.url.open() {
                Ok(r) => self.registry = Some(r),
                Err(e) => {
                    self.control
                        .fail(format!("index: opening the tag registry {}: {e}", self.url));
                    return None;
                }
            }
        }
        match self.registry.as_mut().map(|r| r.list()) {
            Some(Ok(defs)) => {
                for d in defs {
                    let id = u32::try_from(self.codes.len()).unwrap_or(u32::MAX);
                    self.codes.entry(d.tag_code).or_insert((id, d.data_type));
                }
            }
            Some(Err(e)) => {
                // Reconnected at the next new code: MySQL drops idle connections.
                self.registry = None;
                self.control
                    .fail(format!("index: reading the tag registry {}: {e}", self.url));
            }
            None => {}
        }
        self.codes.get(code).copied()
    }

    /// The values of a stored row (`None`: no row) as [`Known`].
    fn known_of(&mut self, row: Option<&Row>) -> Known {
        let mut known = Known::default();
        for cell in row.map_or(&[][..], |r| &r.cells[..]) {
            let Ok(code) = std::str::from_utf8(&cell.qualifier) else {
                continue;
            };
            if let Some((id, _)) = self.code(code) {
                known.set(id, cell.ts_ms, &cell.value);
            }
        }
        known
    }

    /// Puts the index changes of `batch`'s profile puts into [`IndexingWriter::keys`].
    fn index_of(&mut self, batch: &[Mutation]) -> sinks::Result<()> {
        let puts: Vec<(&str, &[u8], &[sinks::table::Cell])> = batch
            .iter()
            .filter_map(|m| match m {
                Mutation::Put { table, row, cells } if *table == PROFILE_TABLE => {
                    parse_profile_row(row).map(|user| (user, row.as_slice(), cells.as_slice()))
                }
                _ => None,
            })
            .collect();
        let Some(reader) = self.reader.clone().filter(|_| !puts.is_empty()) else {
            return Ok(());
        };
        let first_load = match self.first_load {
            Some(empty) => empty,
            None => {
                let one = ScanSpec {
                    limit: Some(1),
                    ..ScanSpec::default()
                };
                let empty = reader.scan(PROFILE_TABLE, &one)?.is_empty();
                *self.first_load.insert(empty)
            }
        };
        // The users neither written since the flush nor remembered: read, once each, unless
        // they cannot have a row.
        let mut unknown: Vec<(&str, Vec<u8>)> = Vec::new();
        for (user, row, _) in &puts {
            if self.pending.contains_key(*user) {
                continue;
            }
            match self.cache.remove(*user) {
                Some((user, mut known)) => {
                    known.remembered = true;
                    self.pending.insert(user, known);
                }
                None if first_load && !self.evicted.may_contain(user) => {
                    self.pending.insert((*user).to_string(), Known::default());
                }
                None if unknown.iter().any(|(u, _)| u == user) => {}
                None => unknown.push((user, row.to_vec())),
            }
        }
        if !unknown.is_empty() {
            let rows: Vec<Vec<u8>> = unknown.iter().map(|(_, row)| row.clone()).collect();
            let stored = reader.get_many(PROFILE_TABLE, &rows, None)?;
            for ((user, _), row) in unknown.iter().zip(stored) {
                let known = self.known_of(row.as_ref());
                self.pending.insert((*user).to_string(), known);
            }
        }
        let mut ids = Vec::new();
        for (user, _, cells) in puts {
            // The cells' codes first: `known` borrows `self`.
            ids.clear();
            for cell in cells {
                let code = std::str::from_utf8(&cell.qualifier).ok();
                ids.push(code.and_then(|c| Some((c, self.code(c)?))));
            }
            let known = match self.pending.get_mut(user) {
                Some(known) => known,
                None => self.pending.entry(user.to_string()).or_default(),
            };
            for (cell, id) in cells.iter().zip(&ids) {
                let Some((code, (id, data_type))) = *id else {
                    continue;
                };
                // A remembered value written again at its stamp: its entry is put again.
                let stored = known.get(id);
                let again = known.remembered
                    && stored.is_some_and(|(ts, v)| v == cell.value.as_slice() && cell.ts_ms == ts);
                let old = if again { None } else { stored };
                if changes(user, code, data_type, cell, old, &mut self.changes) {
                    known.set(id, cell.ts_ms, &cell.value);
                }
            }
        }
        self.changes.net(&mut self.keys);
        Ok(())
    }
}

impl TableWriter for IndexingWriter {
    fn write(&mut self, batch: Vec<Mutation>) -> sinks::Result<()> {
        if self.reader.is_none() {
            return self.inner.write(batch);
        }
        self.keys.clear();
        self.index_of(&batch)?;
        self.inner.write(batch)?;
        self.inner.write_keys(&self.keys)
    }

    fn flush(&mut self) -> sinks::Result<()> {
        self.inner.flush()?;
        for (user, mut known) in self.pending.drain() {
            known.remembered = false;
            known.weigh(&user);
            for evicted in self.cache.insert_with_lifecycle(user, known) {
                self.evicted.insert(&evicted);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use sinks::config::StoreConfig;
    use sinks::table::{Cell, ScanSpec};
    use sinks::OpenOptions;

    use super::*;
    use crate::audience::INDEX_TABLE;
    use crate::key::profile_row;
    use crate::registry::SqliteRegistry;
    use crate::tables::DIMENSION_FAMILY;
    use crate::tag::{TagDef, TagStatus, ValueType};

    fn city(status: TagStatus) -> TagDef {
        TagDef {
            tag_code: "dim_city".into(),
            name: "city".into(),
            data_type: DataType::String,
            value_type: ValueType::Dimension,
            status,
            ttl_secs: None,
            category: String::new(),
            owner: String::new(),
            update_frequency: String::new(),
        }
    }

    fn put(user: &str, ts_ms: i64, value: &str) -> Mutation {
        Mutation::Put {
            table: PROFILE_TABLE,
            row: profile_row(user),
            cells: vec![Cell {
                family: DIMENSION_FAMILY.into(),
                qualifier: b"dim_city".to_vec(),
                ts_ms,
                value: value.as_bytes().to_vec(),
            }],
        }
    }

    /// The index's rows, as text.
    fn entries(store: &sinks::Store) -> Vec<String> {
        let rows = store
            .reader()
            .scan(INDEX_TABLE, &ScanSpec::default())
            .unwrap();
        rows.iter()
            .map(|r| String::from_utf8_lossy(&r.key).into_owned())
            .collect()
    }

    struct Fixture {
        _dir: tempfile::TempDir,
        registry: std::path::PathBuf,
        store: sinks::Store,
        control: Arc<JobControl>,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let registry = dir.path().join("tags.sqlite");
        SqliteRegistry::open(&registry)
            .unwrap()
            .upsert(&[city(TagStatus::Online)])
            .unwrap();
        let cfg = StoreConfig {
            dir: dir.path().join("store"),
            ..StoreConfig::default()
        };
        let options = OpenOptions {
            newest_timestamp_wins: true,
            ..OpenOptions::default()
        };
        let store = sinks::open(&cfg, &crate::tables::tables(), &options).unwrap();
        Fixture {
            _dir: dir,
            registry,
            store,
            control: Arc::new(JobControl::default()),
        }
    }

    fn writer(f: &Fixture, cache_bytes: u64) -> IndexingWriter {
        IndexingWriter::new(
            f.store.writer(),
            Some(f.store.reader()),
            RegistryUrl::Sqlite(f.registry.clone()),
            cache_bytes,
            f.control.clone(),
        )
    }

    /// Remembered or read again (a cache too small to hold a user), a user's changes retract
    /// the entry of the value they replace, across flushes, and a late value changes nothing.
    #[test]
    fn values_replaced_after_a_flush_are_retracted_remembered_or_read_again() {
        for cache_bytes in [1, 1 << 20] {
            let f = fixture();
            let mut w = writer(&f, cache_bytes);
            w.write(vec![put("u1", 10, "hz"), put("u2", 10, "sh")])
                .unwrap();
            w.flush().unwrap();
            w.write(vec![put("u1", 20, "bj")]).unwrap();
            w.flush().unwrap();
            w.write(vec![put("u1", 15, "gz"), put("u2", 30, "hz")])
                .unwrap();
            w.flush().unwrap();
            assert_eq!(
                entries(&f.store),
                ["dim_city_Sbj_u1", "dim_city_Shz_u2"],
                "cache of {cache_bytes} bytes"
            );
            assert_eq!(f.control.error(), None);
        }
    }

    /// A writer started on a store holding profiles reads the users it does not remember; one
    /// started on an empty store reads only those its cache evicted.
    #[test]
    fn a_writer_reads_the_rows_it_cannot_know_are_absent() {
        let f = fixture();
        let mut first = writer(&f, 1 << 20);
        first.write(vec![put("u1", 10, "hz")]).unwrap();
        first.flush().unwrap();
        assert_eq!(first.first_load, Some(true));
        drop(first);
        let mut second = writer(&f, 1 << 20);
        second.write(vec![put("u1", 20, "sh")]).unwrap();
        second.flush().unwrap();
        assert_eq!(second.first_load, Some(false));
        assert_eq!(entries(&f.store), ["dim_city_Ssh_u1"]);
    }

    #[test]
    fn the_evicted_filter_holds_every_user_put_in_it() {
        let mut evicted = Evicted::default();
        assert!(!evicted.may_contain("u1"));
        let users: Vec<String> = (0..10_000).map(|i| format!("u{i}")).collect();
        for u in &users[..5_000] {
            evicted.insert(u);
        }
        assert!(users[..5_000].iter().all(|u| evicted.may_contain(u)));
        let false_positives = users[5_000..]
            .iter()
            .filter(|u| evicted.may_contain(u))
            .count();
        assert!(false_positives < 10, "{false_positives}");
    }

    /// A value changed many times for one user, back and forth, again at newer stamps and late,
    /// within a batch and across flushes, remembered or read again: exactly one entry is left,
    /// the newest value's, stamped as the value.
    #[test]
    fn a_value_changed_many_times_leaves_exactly_one_entry() {
        let values = ["hz", "sh", "hz", "bj", "bj", "gz", "hz"];
        for cache_bytes in [1, 1 << 20] {
            for per_batch in [1, 3, values.len()] {
                let f = fixture();
                let mut w = writer(&f, cache_bytes);
                let mut ts = 0;
                for chunk in values.chunks(per_batch) {
                    let mut batch = Vec::new();
                    for value in chunk {
                        ts += 10;
                        batch.push(put("u1", ts, value));
                        // A late event of another value changes nothing.
                        batch.push(put("u1", ts - 5, "late"));
                    }
                    w.write(batch).unwrap();
                    w.flush().unwrap();
                }
                let at = format!("cache {cache_bytes} bytes, {per_batch} a batch");
                assert_eq!(entries(&f.store), ["dim_city_Shz_u1"], "{at}");
                let row = f
                    .store
                    .reader()
                    .get_versions(INDEX_TABLE, b"dim_city_Shz_u1", None, 10)
                    .unwrap()
                    .unwrap();
                let stamps: Vec<i64> = row.cells.iter().map(|c| c.ts_ms).collect();
                assert_eq!(stamps, [ts], "{at}");
                assert_eq!(f.control.error(), None);
            }
        }
    }

    /// A purge (the column and its entries deleted while the tag is offline) is not hidden by
    /// what the writer remembers: once the tag is back online, the same value is indexed again.
    #[test]
    fn a_purged_value_written_again_is_indexed_again() {
        let f = fixture();
        let mut w = writer(&f, 1 << 20);
        w.write(vec![put("u1", 10, "hz")]).unwrap();
        w.flush().unwrap();
        assert_eq!(entries(&f.store), ["dim_city_Shz_u1"]);
        let mut registry = SqliteRegistry::open(&f.registry).unwrap();
        registry.set_status("dim_city", TagStatus::Offline).unwrap();
        let mut purge = f.store.writer();
        purge
            .write(vec![
                Mutation::DeleteColumn {
                    table: PROFILE_TABLE,
                    row: profile_row("u1"),
                    family: DIMENSION_FAMILY.into(),
                    qualifier: b"dim_city".to_vec(),
                    ts_ms: i64::MAX,
                },
                Mutation::DeleteRow {
                    table: INDEX_TABLE,
                    row: b"dim_city_Shz_u1".to_vec(),
                    ts_ms: i64::MAX,
                },
            ])
            .unwrap();
        purge.flush().unwrap();
        assert!(entries(&f.store).is_empty());
        registry.set_status("dim_city", TagStatus::Online).unwrap();
        w.write(vec![put("u1", 20, "hz")]).unwrap();
        w.flush().unwrap();
        assert_eq!(entries(&f.store), ["dim_city_Shz_u1"]);
    }
}
