//! Opening a store: the table specs checked, the journals checked, fjall opened with the TTL
//! filters, and each table's generations and spans recovered.

use super::series::{self, SeriesTable};
use super::{EmbeddedStore, Inner, Table, SEQ_KEY};
use crate::embedded::codec;
use crate::embedded::generations::{self, table_options, Generation, Span, GENERATION_BYTES};
use crate::embedded::journal::JournalDamage;
use crate::embedded::prepare::{prepare, OpenMode};
use crate::embedded::ttl::{system_now_ms, FamilyTtls, FamilyVersions, TtlFilterFactory};
use crate::embedded::StoreError;
use crate::schema::{FamilySpec, TableSpec};
use crate::{Error, Result};
use fjall::{Database, KeyspaceCreateOptions, PersistMode};
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, RwLock};

/// Threads of fjall's flush and compaction pool (fjall's default: one per core, up to 4).
///
/// With two or more, fjall 3.1's first worker hands every compaction request back to the queue
/// to stay free for flushes, and takes it again at once: while another worker compacts, it spins
/// on the queue. In a replay of 100,000 devices × 10 min on 2 cores that spin was a third of the
/// process's CPU samples (`worker_tick` and flume's send and receive); with one worker the replay
/// took 47–50 CPU s instead of 73–76, and ran 1.4× as fast (docs/BENCHMARKS.md, "Where a
/// replay's time goes"). One worker also leaves the pipeline's own threads the other core.
const FJALL_WORKER_THREADS: usize = 1;

/// Checks the specs and returns each table's families with their TTLs.
fn family_ttls(tables: &[TableSpec]) -> Result<Vec<FamilyTtls>> {
    let mut out = Vec::with_capacity(tables.len());
    for (i, spec) in tables.iter().enumerate() {
        // fjall panics on keyspace names it does not accept (over 255 bytes), so refuse names
        // whose generations' keyspace names would be.
        if spec.name.is_empty() || spec.name.len() > generations::MAX_TABLE_NAME {
            return Err(Error::Invalid(format!(
                "table name {:?} must be 1 to {} bytes long",
                spec.name,
                generations::MAX_TABLE_NAME
            )));
        }
        if spec.name.contains(generations::MARK) {
            return Err(Error::Invalid(format!(
                "table name {:?} contains {:?}, which the embedded store uses to name a table's \
                 generations (HBase does not allow it in table names either)",
                spec.name,
                generations::MARK
            )));
        }
        if tables[..i].iter().any(|t| t.name == spec.name) {
            return Err(Error::Invalid(format!(
                "table {} is listed twice",
                spec.name
            )));
        }
        let mut families = Vec::with_capacity(spec.families.len());
        for f in &spec.families {
            if f.name.is_empty() || f.name.bytes().any(|b| b <= codec::VERSIONED) {
                return Err(Error::Invalid(format!(
                    "family {:?} of table {} must be non-empty and contain no 0x00, 0x01 or 0x02 \
                     byte",
                    f.name, spec.name
                )));
            }
            if f.max_versions == 0 {
                return Err(Error::Invalid(format!(
                    "family {} of table {} asks for VERSIONS => 0; a family keeps at least one \
                     version of a cell, as in HBase",
                    f.name, spec.name
                )));
            }
            if f.packed && f.max_versions > 1 {
                return Err(Error::Invalid(format!(
                    "family {} of table {} is packed and asks for VERSIONS => {}: a packed put \
                     replaces its cells, so it keeps one version; set VERSIONS => 1 or \
                     packed: false",
                    f.name, spec.name, f.max_versions
                )));
            }
            families.push((f.name, codec::ttl_ms(f.ttl_secs)));
        }
        out.push(FamilyTtls::from(families));
    }
    Ok(out)
}

/// The key, in [`generations::SPANS_KEYSPACE`], recording that `table` keeps its points in
/// series runs, valued with the layout's name.
fn layout_key(table: &str) -> String {
    format!("#layout#{table}")
}

/// A table's series runs: those it recorded, or new ones if `create` (and the spec has a series
/// layout), recorded. `None`: the generic layout.
fn open_series(
    db: &Database,
    spans: &fjall::Keyspace,
    dir: &Path,
    spec: &TableSpec,
    create: bool,
    mode: OpenMode,
) -> Result<Option<SeriesTable>> {
    let fjall = |e| StoreError::from_fjall(dir, "open series runs", e);
    let recorded = spans.get(layout_key(spec.name)).map_err(fjall)?;
    let layout = match (recorded, spec.key.series) {
        (None, Some(layout)) if create => layout,
        (None, _) => return Ok(None),
        (Some(name), Some(layout)) if name.as_ref() == layout.name.as_bytes() => layout,
        (Some(name), _) => {
            return Err(Error::Invalid(format!(
                "table {} of the embedded store at {} keeps its rows in the series layout {:?},                  which this table spec does not declare; open it with the hourglass version                  that wrote it, or replay the input into a new --store directory",
                spec.name,
                dir.display(),
                String::from_utf8_lossy(&name)
            )))
        }
    };
    let family = spec.family(layout.family);
    if family.is_none_or(|f| !f.packed || f.max_versions != 1) {
        return Err(Error::Invalid(format!(
            "table {}'s series layout {} names family {}, which must be one of its families,              packed, with one version",
            spec.name, layout.name, layout.family
        )));
    }
    let keyspace = db
        .keyspace(&series::keyspace_name(spec.name), table_options)
        .map_err(fjall)?;
    if create && mode != OpenMode::ReadOnly {
        spans
            .insert(layout_key(spec.name), layout.name)
            .map_err(fjall)?;
    }
    SeriesTable::open(layout, keyspace)
        .map(Some)
        .map_err(|e| fjall(e).into())
}

impl EmbeddedStore {
    /// Opens the store in `dir`, creating the directory and any missing table, with the system
    /// clock for TTLs. Pass the tables a domain declares (the sensors':
    /// `sensor::tables::all_tables()`).
    ///
    /// # Errors
    /// `Error::Invalid` for an unusable table spec (see [`EmbeddedStore::open_with_clock`]);
    /// `Error::Embedded` if fjall cannot open `dir`, notably when another process holds it.
    pub fn open(dir: &Path, tables: &[TableSpec]) -> Result<Self> {
        Self::open_with_clock(dir, tables, Arc::new(system_now_ms))
    }

    /// Same as [`EmbeddedStore::open`], with `now_ms` (milliseconds since the epoch) as the
    /// clock TTLs are measured against, for reads, purges and compactions alike.
    ///
    /// # Errors
    /// `Error::Invalid` if a table name is empty, longer than 244 bytes, holds `#` or is listed
    /// twice, if a family name is empty or contains `0x00`, `0x01` or `0x02`, or if a family
    /// asks for no version or is packed and asks for more than one.
    /// `Error::Embedded` if fjall cannot open the directory: it is locked by another
    /// process (or already open in this one), unreadable, or written by an incompatible fjall.
    pub fn open_with_clock(
        dir: &Path,
        tables: &[TableSpec],
        now_ms: Arc<dyn Fn() -> i64 + Send + Sync>,
    ) -> Result<Self> {
        Self::open_with_options(dir, tables, now_ms, OpenMode::ReadWrite)
    }

    /// Same as [`EmbeddedStore::open_with_layouts`] with the series layout off.
    ///
    /// # Errors
    /// As [`EmbeddedStore::open_with_layouts`].
    pub fn open_with_options(
        dir: &Path,
        tables: &[TableSpec],
        now_ms: Arc<dyn Fn() -> i64 + Send + Sync>,
        mode: OpenMode,
    ) -> Result<Self> {
        Self::open_with_layouts(dir, tables, now_ms, mode, false)
    }

    /// Same as [`EmbeddedStore::open_with_clock`], with `mode` saying whether the store may be
    /// created or changed and how journal damage is handled (see [`OpenMode`]). The journals
    /// are checked before fjall replays them, because fjall silently truncates a journal at its
    /// first unreadable record.
    ///
    /// `series_layout` (experimental, `[store] series_layout`): a table this open creates whose
    /// key codec has a [`crate::schema::SeriesLayout`] keeps its points in series runs, and the
    /// store records so. A table that exists keeps the layout recorded when it was created,
    /// whatever `series_layout` says (a table created before layouts were recorded, or without
    /// the flag, is generic): a store is never half converted.
    ///
    /// # Errors
    /// As [`EmbeddedStore::open_with_clock`]; also `Error::Embedded` if a journal holds damage
    /// followed by intact writes (unless `mode` is `Recover`), or, for `ReadOnly`, if `dir`
    /// holds no store; `Error::Invalid` if a table records the series layout and its spec has
    /// none, or another one, or its series family is not packed with one version.
    pub fn open_with_layouts(
        dir: &Path,
        tables: &[TableSpec],
        now_ms: Arc<dyn Fn() -> i64 + Send + Sync>,
        mode: OpenMode,
        series_layout: bool,
    ) -> Result<Self> {
        let ttls = family_ttls(tables)?;
        let (snapshot, dropped) = prepare(dir, mode)?;
        let fjall_dir = snapshot.as_ref().map_or(dir, |s| s.path());
        // Keyspaces get their filter by name, both when created and when recovered on reopen.
        // Every family not packed may hold versions: a versioned one always, any other when a
        // `newest_timestamp_wins` writer wrote it.
        let assigned: Vec<(&'static str, FamilyTtls, FamilyVersions)> = tables
            .iter()
            .zip(ttls.iter().cloned())
            .map(|(t, ttls)| {
                let versions = t
                    .families
                    .iter()
                    .filter(|f| !f.packed)
                    .map(|f| (f.name, f.max_versions))
                    .collect();
                (t.name, ttls, versions)
            })
            .collect();
        let clock = now_ms.clone();
        let db = Database::builder(fjall_dir)
            .worker_threads(FJALL_WORKER_THREADS)
            .with_compaction_filter_factories(Arc::new(move |keyspace: &str| {
                let (table, generation) = generations::parse_keyspace_name(keyspace)?;
                let (name, families, versions) =
                    assigned.iter().find(|(name, _, _)| *name == table)?;
                if families.iter().all(|(_, ttl)| ttl.is_none()) && versions.is_empty() {
                    return None;
                }
                let factory = TtlFilterFactory::new(
                    name,
                    generation,
                    families.clone(),
                    versions.clone(),
                    clock.clone(),
                );
                Some(Arc::new(factory) as Arc<dyn fjall::compaction::filter::Factory>)
            }))
            .open()
            .map_err(|e| StoreError::from_fjall(dir, "open", e))?;
        let existing = db.list_keyspace_names();
        // A read-only open creates a missing table in its snapshot alone: it stays missing.
        let absent: Vec<&'static str> = match mode {
            OpenMode::ReadOnly => tables
                .iter()
                .map(|t| t.name)
                .filter(|&name| {
                    let first = generations::keyspace_name(name, 0);
                    !existing.iter().any(|e| e.as_ref() == first)
                })
                .collect(),
            _ => Vec::new(),
        };
        let spans = db
            .keyspace(generations::SPANS_KEYSPACE, KeyspaceCreateOptions::default)
            .map_err(|e| StoreError::from_fjall(dir, "open", e))?;
        // A generation created before spans were recorded, or just before a crash, has none:
        // it may hold any timestamp. One this open creates holds none yet, and says so on disk
        // (else the next open would read it as any timestamp, and it would never expire).
        let mut created = false;
        let mut span_of = |name: &str| -> Result<Span> {
            if !existing.iter().any(|e| e.as_ref() == name) {
                spans
                    .insert(name, Span::EMPTY.encode())
                    .map_err(|e| StoreError::from_fjall(dir, "open", e))?;
                created = true;
                return Ok(Span::EMPTY);
            }
            let stored = spans
                .get(name)
                .map_err(|e| StoreError::from_fjall(dir, "open", e))?;
            match stored {
                None => Ok(Span::ANY),
                Some(stored) => Span::decode(&stored).ok_or_else(|| {
                    StoreError::Corrupt {
                        dir: dir.to_path_buf(),
                        table: "#spans",
                        key: name.escape_debug().to_string(),
                    }
                    .into()
                }),
            }
        };
        let mut handles = Vec::with_capacity(tables.len());
        let mut series_created = false;
        for (spec, families) in tables.iter().zip(ttls) {
            let is_new = !existing
                .iter()
                .any(|e| e.as_ref() == generations::keyspace_name(spec.name, 0));
            let series = open_series(&db, &spans, dir, spec, is_new && series_layout, mode)?;
            series_created |= is_new && series.is_some();
            // Generation 0 always, created with the table; then every later one the store holds.
            let mut numbers: Vec<usize> = existing
                .iter()
                .filter_map(|name| generations::parse_keyspace_name(name))
                .filter(|&(table, n)| table == spec.name && n > 0)
                .map(|(_, n)| n)
                .collect();
            numbers.sort_unstable();
            numbers.insert(0, 0);
            let mut opened = Vec::with_capacity(numbers.len());
            for n in numbers {
                let name = generations::keyspace_name(spec.name, n);
                let span = span_of(&name)?;
                let keyspace = db
                    .keyspace(&name, table_options)
                    .map_err(|e| StoreError::from_fjall(dir, "open table", e))?;
                opened.push(Generation::new(keyspace, span));
            }
            let packed: Vec<&FamilySpec> = spec.families.iter().filter(|f| f.packed).collect();
            handles.push(Table {
                name: spec.name,
                generations: RwLock::new(opened),
                families,
                packed: packed.iter().map(|f| f.name).collect(),
                packed_apart: packed.iter().map(|f| f.packed_apart).collect(),
                versioned: spec
                    .families
                    .iter()
                    .filter(|f| f.max_versions > 1)
                    .map(|f| (f.name, f.max_versions))
                    .collect(),
                series,
            });
        }
        if created || series_created {
            db.persist(PersistMode::SyncAll)
                .map_err(|e| StoreError::from_fjall(dir, "open", e))?;
        }
        let seq =
            match spans
                .get(SEQ_KEY)
                .map_err(|e| StoreError::from_fjall(dir, "open", e))?
            {
                // Seq 0 stands for a cell stored on its own, older than every packed put.
                None => 1,
                Some(stored) => u64::from_be_bytes(stored.as_ref().try_into().map_err(|_| {
                    StoreError::Corrupt {
                        dir: dir.to_path_buf(),
                        table: "#spans",
                        key: SEQ_KEY.to_string(),
                    }
                })?),
            };
        Ok(EmbeddedStore {
            inner: Arc::new(Inner {
                db,
                dir: dir.to_path_buf(),
                tables: handles,
                spans,
                generation_bytes: AtomicU64::new(GENERATION_BYTES),
                seq: AtomicU64::new(seq),
                seq_reserved: AtomicU64::new(seq),
                seq_lock: Mutex::new(()),
                series_pending: Mutex::new(std::collections::BTreeSet::new()),
                now_ms,
                dropped,
                absent,
                _snapshot: snapshot,
            }),
        })
    }

    /// The tables a read-only open did not find in the store (none for any other open, which
    /// creates them).
    pub fn absent_tables(&self) -> &[&'static str] {
        &self.inner.absent
    }

    /// What opening dropped from the journals: incomplete last write batches and, with
    /// [`OpenMode::Recover`], everything after damage. Empty for a clean store.
    pub fn dropped_on_open(&self) -> &[JournalDamage] {
        &self.inner.dropped
    }
}
