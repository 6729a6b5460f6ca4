//! The store handle: opening, reads, TTL purges and durability.

use super::codec::{self, Column};
use super::generations::{self, table_options, Generation, Lease, Merged, Span, GENERATION_BYTES};
use super::journal::JournalDamage;
use super::prepare::{prepare, OpenMode};
use super::ttl::{system_now_ms, Clock, FamilyTtls, TtlFilterFactory};
use super::StoreError;
use crate::schema::{FamilySpec, TableSpec};
use crate::table::{Cell, Row, ScanSpec, TableReader, TimeRange};
use crate::{Error, Result};
use fjall::{Database, Keyspace, KeyspaceCreateOptions, KvPair, PersistMode};
use std::collections::HashMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Threads of fjall's flush and compaction pool (fjall's default: one per core, up to 4).
///
/// With two or more, fjall 3.1's first worker hands every compaction request back to the queue
/// to stay free for flushes, and takes it again at once: while another worker compacts, it spins
/// on the queue. In a replay of 100,000 devices × 10 min on 2 cores that spin was a third of the
/// process's CPU samples (`worker_tick` and flume's send and receive); with one worker the replay
/// took 47–50 CPU s instead of 73–76, and ran 1.4× as fast (docs/BENCHMARKS.md, "Where a
/// replay's time goes"). One worker also leaves the pipeline's own threads the other core.
const FJALL_WORKER_THREADS: usize = 1;

/// The key, in [`generations::SPANS_KEYSPACE`], of the seq below which every seq of a packed put
/// was given ([`Inner::next_seq`]). `#` starts no keyspace's name.
const SEQ_KEY: &str = "#seq";

/// Seqs recorded as handed out at a time: a sync per 16 M packed puts.
const SEQ_BLOCK: u64 = 1 << 24;

/// Removals committed per fjall batch by [`EmbeddedStore::purge_expired`].
const PURGE_BATCH: usize = 4096;

/// One table: its generations and its families' TTLs.
pub(crate) struct Table {
    pub(crate) name: &'static str,
    /// The table's generations, oldest first (see [`generations`]); writes go to the last.
    generations: RwLock<Vec<Generation>>,
    /// `(family name, TTL in ms)`, as given by the table spec.
    pub(crate) families: FamilyTtls,
    /// The families whose puts' cells are stored as one key-value ([`FamilySpec::packed`]).
    pub(crate) packed: Vec<&'static str>,
    /// Each packed family's [`FamilySpec::packed_apart`], in the order of `packed`.
    packed_apart: Vec<&'static [&'static str]>,
    /// The families that keep more than one version of a cell, with their
    /// [`FamilySpec::max_versions`]: each version is a key-value of its own
    /// ([`codec::encode_version_key`]).
    versioned: Vec<(&'static str, u32)>,
}

impl Table {
    /// The generations, oldest first, for reading. A writer that panicked while holding the lock
    /// left the list whole (it only pushes, removes or widens a span in place), so the list is
    /// read on.
    fn read(&self) -> RwLockReadGuard<'_, Vec<Generation>> {
        self.generations
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// The generations, oldest first, for changing the list or a span.
    fn write(&self) -> RwLockWriteGuard<'_, Vec<Generation>> {
        self.generations
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Every generation, oldest first.
    pub(crate) fn generations(&self) -> Vec<Keyspace> {
        self.read().iter().map(|g| g.keyspace.clone()).collect()
    }

    /// Every generation, oldest first, leased for writes (removals) to all of them.
    pub(crate) fn leases(&self) -> Vec<Lease> {
        self.read().iter().map(Generation::lease).collect()
    }

    /// The generations that may hold cells stamped within `range` (all of them without one),
    /// oldest first.
    pub(crate) fn generations_within(&self, range: Option<&TimeRange>) -> Vec<Keyspace> {
        self.read()
            .iter()
            .filter(|g| g.span.may_hold(range))
            .map(|g| g.keyspace.clone())
            .collect()
    }

    /// Every generation with its span, oldest first.
    #[cfg(test)]
    pub(crate) fn generation_spans(&self) -> Vec<(Keyspace, Span)> {
        self.read()
            .iter()
            .map(|g| (g.keyspace.clone(), g.span))
            .collect()
    }

    /// The stored cell under `key`: the newest generation's that holds one.
    pub(crate) fn get_cell(&self, key: &[u8]) -> fjall::Result<Option<fjall::Slice>> {
        // Read under the lock rather than copy the list: the writer calls this once per cell.
        let generations = self.read();
        for generation in generations.iter().rev() {
            if let Some(stored) = generation.keyspace.get(key)? {
                return Ok(Some(stored));
            }
        }
        Ok(None)
    }

    /// The visible stored cells whose keys start with `prefix`, in key order, read from the
    /// generations that may hold cells stamped within `time` (as [`Table::range`]).
    pub(crate) fn prefix(&self, prefix: &[u8], time: Option<&TimeRange>) -> Merged {
        Merged::new(
            self.generations_within(time)
                .iter()
                .map(|g| g.prefix(prefix))
                .collect(),
        )
    }

    /// The visible stored cells with keys from `start` on (to `stop`, excluded, unless empty),
    /// in key order, read from the generations that may hold cells stamped within `time`.
    ///
    /// A key whose newest write is in a skipped generation, and so outside `time`, may then
    /// show an older write stamped within it: HBase's scans with a time range do the same while
    /// no compaction has dropped the older version. Hourglass never writes one cell with two
    /// timestamps (its cells' timestamps follow from their keys), so its answers do not depend
    /// on which generations are skipped.
    pub(crate) fn range(&self, start: &[u8], stop: &[u8], time: Option<&TimeRange>) -> Merged {
        let generations = self.generations_within(time);
        let iters = generations.iter().map(|g| {
            if stop.is_empty() {
                g.range(start..)
            } else {
                g.range(start..stop)
            }
        });
        Merged::new(iters.collect())
    }

    /// The family's name and TTL, if the table has this family.
    pub(crate) fn family(&self, name: &[u8]) -> Option<(&'static str, Option<i64>)> {
        self.families
            .iter()
            .copied()
            .find(|(f, _)| f.as_bytes() == name)
    }

    /// Whether a put's cells of `family` are stored as one key-value.
    pub(crate) fn is_packed(&self, family: &str) -> bool {
        self.packed.contains(&family)
    }

    /// The qualifiers a put of packed `family` stores apart from its other cells
    /// ([`FamilySpec::packed_apart`]); none for a family not packed.
    pub(crate) fn packed_apart(&self, family: &str) -> &'static [&'static str] {
        self.packed
            .iter()
            .position(|f| *f == family)
            .map_or(&[], |i| self.packed_apart[i])
    }

    /// The versions of a cell `family` keeps ([`FamilySpec::max_versions`]; 1 for a family not
    /// versioned or not in the table).
    pub(crate) fn max_versions(&self, family: &[u8]) -> u32 {
        self.versioned
            .iter()
            .find(|(f, _)| f.as_bytes() == family)
            .map_or(1, |&(_, n)| n)
    }

    /// Whether `family` stores each version of a cell under a key of its own.
    pub(crate) fn is_versioned(&self, family: &str) -> bool {
        self.versioned.iter().any(|(f, _)| *f == family)
    }

    fn has_ttl(&self) -> bool {
        self.families.iter().any(|(_, ttl)| ttl.is_some())
    }

    /// The longest TTL of the table's families if every family has one: a cell stamped before
    /// `now` minus it has expired, whatever its family.
    fn longest_ttl(&self) -> Option<i64> {
        self.families
            .iter()
            .try_fold(i64::MIN, |most, (_, ttl)| ttl.map(|t| most.max(t)))
    }
}

pub(crate) struct Inner {
    pub(crate) db: Database,
    pub(crate) dir: PathBuf,
    pub(crate) tables: Vec<Table>,
    /// Each generation's [`Span`], by keyspace name ([`generations::SPANS_KEYSPACE`]).
    pub(crate) spans: Keyspace,
    /// Disk bytes at which a table's newest generation is closed ([`GENERATION_BYTES`]).
    generation_bytes: AtomicU64,
    /// The next [`codec::PackedValue::seq`] to give a put.
    seq: AtomicU64,
    /// Seqs below this are recorded as handed out ([`SEQ_KEY`]); passing it takes `seq_lock`.
    seq_reserved: AtomicU64,
    seq_lock: Mutex<()>,
    pub(crate) now_ms: Clock,
    /// What opening dropped from the journals.
    pub(crate) dropped: Vec<JournalDamage>,
    /// The copy a read-only open reads; declared after `db` so fjall closes before it goes.
    _snapshot: Option<tempfile::TempDir>,
}

impl Inner {
    /// The table called `name`.
    ///
    /// # Errors
    /// `Error::Invalid` if the store was not opened with this table.
    pub(crate) fn table(&self, name: &str) -> Result<(usize, &Table)> {
        let found = self.tables.iter().enumerate().find(|(_, t)| t.name == name);
        found.ok_or_else(|| {
            let known: Vec<&str> = self.tables.iter().map(|t| t.name).collect();
            Error::Invalid(format!(
                "table {name} is not in the embedded store at {} (it has {}); open the store \
                 with the table's spec",
                self.dir.display(),
                known.join(", ")
            ))
        })
    }

    pub(crate) fn fjall_error(&self, doing: &'static str, source: fjall::Error) -> Error {
        StoreError::from_fjall(&self.dir, doing, source).into()
    }

    /// The error for a stored key or value of `table` under `key` that is not in the store's
    /// layout.
    pub(crate) fn corrupt(&self, table: &'static str, key: &[u8]) -> Error {
        StoreError::Corrupt {
            dir: self.dir.clone(),
            table,
            key: String::from_utf8_lossy(key).escape_debug().to_string(),
        }
        .into()
    }

    /// The seq of a put of packed cells: larger than every one given before, in this process
    /// or an earlier one, so that of two puts of one row the later one's cells win.
    ///
    /// Seqs are recorded as handed out [`SEQ_BLOCK`] at a time, synced before the first of a
    /// block is given: a store reopened after a crash starts after every seq any written cell
    /// can carry. fjall orders writes by sequence numbers of its own, which it does not return
    /// with a read.
    pub(crate) fn next_seq(&self) -> Result<u64> {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        if seq >= self.seq_reserved.load(Ordering::Acquire) {
            let _held = self.seq_lock.lock().unwrap_or_else(PoisonError::into_inner);
            if seq >= self.seq_reserved.load(Ordering::Acquire) {
                let reserved = seq.saturating_add(SEQ_BLOCK);
                self.spans
                    .insert(SEQ_KEY, reserved.to_be_bytes())
                    .map_err(|e| self.fjall_error("record the seqs of packed puts", e))?;
                self.db
                    .persist(PersistMode::SyncAll)
                    .map_err(|e| self.fjall_error("record the seqs of packed puts", e))?;
                self.seq_reserved.store(reserved, Ordering::Release);
            }
        }
        Ok(seq)
    }

    /// The generation of table `index` that writes go to, its span widened first, if need be,
    /// to hold cells stamped within `[lo, hi]`. Write them into the generation returned even if
    /// another writer has started a newer one since, and hold the lease until they are
    /// committed.
    pub(crate) fn covering(&self, index: usize, lo: i64, hi: i64) -> Result<Lease> {
        let table = &self.tables[index];
        {
            let generations = table.read();
            let newest = &generations[generations.len() - 1];
            if newest.span.covers(lo, hi) {
                return Ok(newest.lease());
            }
        }
        let mut generations = table.write();
        let newest = generations
            .last_mut()
            .expect("a table has at least one generation");
        if !newest.span.covers(lo, hi) {
            let span = newest.span.widened(lo, hi);
            self.record_span(newest.keyspace.name(), span)?;
            newest.span = span;
        }
        Ok(newest.lease())
    }

    /// Drops table `index`'s oldest generations once every cell in them has expired, as HBase's
    /// FIFO compaction drops a TTL table's store files whole, and returns how many it dropped.
    ///
    /// Only in a table whose every family has a TTL, from the oldest generation up, never the
    /// newest, and not one a writer holds a [`Lease`] of. The cells dropped were invisible
    /// already, and no older write of their keys is left to show in their place, so no read
    /// answers differently.
    pub(crate) fn drop_expired(&self, index: usize) -> Result<usize> {
        let table = &self.tables[index];
        let Some(ttl) = table.longest_ttl() else {
            return Ok(0);
        };
        let now = (self.now_ms)();
        let mut dropped = 0;
        loop {
            let mut generations = table.write();
            let oldest = &generations[0];
            let droppable = generations.len() > 1
                && !oldest.is_leased()
                && codec::is_expired(oldest.span.hi, Some(ttl), now);
            if !droppable {
                return Ok(dropped);
            }
            let oldest = generations.remove(0);
            drop(generations);
            let name = oldest.keyspace.name().to_string();
            // A reader still iterating the keyspace finishes; fjall removes its files after.
            self.db
                .delete_keyspace(oldest.keyspace)
                .map_err(|e| self.fjall_error("drop an expired generation", e))?;
            self.spans
                .remove(name.as_str())
                .map_err(|e| self.fjall_error("drop an expired generation", e))?;
            tracing::info!(
                table = table.name,
                generation = name,
                newest_cell_ms = oldest.span.hi,
                "embedded store dropped a generation whose cells have all expired"
            );
            dropped += 1;
        }
    }

    /// Records the span of the generation whose keyspace is `name`, synced to disk before any
    /// cell it lets in is written.
    fn record_span(&self, name: &str, span: Span) -> Result<()> {
        self.spans
            .insert(name, span.encode())
            .map_err(|e| self.fjall_error("record a generation's time span", e))?;
        self.db
            .persist(PersistMode::SyncAll)
            .map_err(|e| self.fjall_error("record a generation's time span", e))
    }

    /// Starts a new generation of table `index` if its newest holds more than the generation
    /// size on disk. Writers call it after they write; one of them starts the generation.
    pub(crate) fn close_full_generation(&self, index: usize) -> Result<()> {
        let table = &self.tables[index];
        let limit = self.generation_bytes.load(Ordering::Relaxed);
        if !table.read().last().is_some_and(|g| g.is_full(limit)) {
            return Ok(());
        }
        let mut generations = table.write();
        let closed = &generations[generations.len() - 1];
        // Another writer may have started one since the check above.
        if !closed.is_full(limit) {
            return Ok(());
        }
        let bytes = closed.keyspace.disk_space();
        // Numbered after the newest, not by count: the oldest may have been dropped.
        let n = generations::parse_keyspace_name(closed.keyspace.name()).map_or(0, |(_, n)| n) + 1;
        let name = generations::keyspace_name(table.name, n);
        let keyspace = self
            .db
            .keyspace(&name, table_options)
            .map_err(|e| self.fjall_error("start a generation", e))?;
        self.record_span(&name, Span::EMPTY)?;
        generations.push(Generation::new(keyspace, Span::EMPTY));
        drop(generations);
        tracing::info!(
            table = table.name,
            generation = n,
            closed_bytes = bytes,
            "embedded store started a new generation"
        );
        self.drop_expired(index)?;
        Ok(())
    }
}

/// HBase's table model on fjall, in one directory: a table is one or more keyspaces, its
/// generations (see `generations.rs`). A family keeps one version per cell, or its
/// [`FamilySpec::max_versions`] versions, each under a key of its own, the newest first; reads
/// return up to the versions they ask for ([`ScanSpec::max_versions`]) and never one past the
/// family's count, which [`EmbeddedStore::purge_expired`] and later puts of the cell remove.
///
/// A cell is `table → row → family:qualifier → (timestamp, value)`; scans return rows in HBase
/// order (byte order of row keys, then family, then qualifier), merged over the generations.
/// Cells older than their family's TTL are invisible at once and physically dropped by
/// compactions (a fjall compaction filter) and by [`EmbeddedStore::purge_expired`]. A closed
/// generation takes no more writes, so once the compactions its last writes started are done,
/// nothing compacts it again: cells that expire later stay on disk, hidden, until
/// `purge_expired`.
///
/// Cloning is cheap and shares the store: open a directory once per process and hand clones to
/// every worker (a second open of the same directory fails because fjall locks it).
#[derive(Clone)]
pub struct EmbeddedStore {
    pub(crate) inner: Arc<Inner>,
}

impl fmt::Debug for EmbeddedStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmbeddedStore")
            .field("dir", &self.inner.dir)
            .field(
                "tables",
                &self.inner.tables.iter().map(|t| t.name).collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

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

impl EmbeddedStore {
    /// Opens the store in `dir`, creating the directory and any missing table, with the system
    /// clock for TTLs. Pass the tables a domain declares (the sensors':
    /// `pipeline::tables::all_tables()`).
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

    /// Same as [`EmbeddedStore::open_with_clock`], with `mode` saying whether the store may be
    /// created or changed and how journal damage is handled (see [`OpenMode`]). The journals
    /// are checked before fjall replays them, because fjall silently truncates a journal at its
    /// first unreadable record.
    ///
    /// # Errors
    /// As [`EmbeddedStore::open_with_clock`]; also `Error::Embedded` if a journal holds damage
    /// followed by intact writes (unless `mode` is `Recover`), or, for `ReadOnly`, if `dir`
    /// holds no store.
    pub fn open_with_options(
        dir: &Path,
        tables: &[TableSpec],
        now_ms: Arc<dyn Fn() -> i64 + Send + Sync>,
        mode: OpenMode,
    ) -> Result<Self> {
        let ttls = family_ttls(tables)?;
        let (snapshot, dropped) = prepare(dir, mode)?;
        let fjall_dir = snapshot.as_ref().map_or(dir, |s| s.path());
        // Keyspaces get their filter by name, both when created and when recovered on reopen.
        let assigned: Vec<(&'static str, FamilyTtls)> = tables
            .iter()
            .map(|t| t.name)
            .zip(ttls.iter().cloned())
            .collect();
        let clock = now_ms.clone();
        let db = Database::builder(fjall_dir)
            .worker_threads(FJALL_WORKER_THREADS)
            .with_compaction_filter_factories(Arc::new(move |keyspace: &str| {
                let (table, generation) = generations::parse_keyspace_name(keyspace)?;
                let (name, families) = assigned.iter().find(|(name, _)| *name == table)?;
                if families.iter().all(|(_, ttl)| ttl.is_none()) {
                    return None;
                }
                let factory =
                    TtlFilterFactory::new(name, generation, families.clone(), clock.clone());
                Some(Arc::new(factory) as Arc<dyn fjall::compaction::filter::Factory>)
            }))
            .open()
            .map_err(|e| StoreError::from_fjall(dir, "open", e))?;
        let existing = db.list_keyspace_names();
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
        for (spec, families) in tables.iter().zip(ttls) {
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
            });
        }
        if created {
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
                now_ms,
                dropped,
                _snapshot: snapshot,
            }),
        })
    }

    /// What opening dropped from the journals: incomplete last write batches and, with
    /// [`OpenMode::Recover`], everything after damage. Empty for a clean store.
    pub fn dropped_on_open(&self) -> &[JournalDamage] {
        &self.inner.dropped
    }

    /// Deletes every expired cell of every table now, and every version of a cell past its
    /// family's [`FamilySpec::max_versions`], like an HBase major compaction does, and returns
    /// how many cells (versions) it deleted. Compactions drop expired cells on their own, and a
    /// put of a cell its versions past the family's count; call this to reclaim space without
    /// waiting for them.
    ///
    /// A writer that re-puts an expired cell while this runs may see its put deleted; for
    /// hourglass that put carries the same, expired, timestamp, so nothing visible is lost.
    ///
    /// # Errors
    /// `Error::Embedded` if fjall fails to read or write.
    pub fn purge_expired(&self) -> Result<u64> {
        let inner = &self.inner;
        let now = (inner.now_ms)();
        let mut purged = 0u64;
        let purged_tables = inner
            .tables
            .iter()
            .filter(|t| t.has_ttl() || !t.versioned.is_empty());
        for table in purged_tables {
            let mut batch = inner.db.batch();
            // Leased until the last batch is committed.
            let generations = table.leases();
            // Of the row being read: the live versions seen of each versioned cell, which come
            // newest first (`codec::encode_version_key`).
            let mut row_key: Vec<u8> = Vec::new();
            let mut versions: HashMap<(Vec<u8>, Vec<u8>), u32> = HashMap::new();
            for item in table.range(&[], &[], None) {
                let (key, value) = item.map_err(|e| inner.fjall_error("purge expired cells", e))?;
                let Some((row, family, column)) = codec::decode_key(&key) else {
                    continue;
                };
                let Some((_, ttl)) = table.family(family) else {
                    continue;
                };
                let expired =
                    codec::decode_ts(&value).is_some_and(|ts| codec::is_expired(ts, ttl, now));
                let mut past_count = false;
                if let (false, codec::Column::Version(qualifier, _)) = (expired, column) {
                    if row != row_key.as_slice() {
                        row_key = row.to_vec();
                        versions.clear();
                    }
                    let seen = versions
                        .entry((family.to_vec(), qualifier.to_vec()))
                        .or_default();
                    *seen += 1;
                    past_count = *seen > table.max_versions(family);
                }
                if expired || past_count {
                    generations::remove_everywhere(&mut batch, &generations, &key);
                    purged += 1;
                    if batch.len() >= PURGE_BATCH {
                        let full = std::mem::replace(&mut batch, inner.db.batch());
                        full.commit()
                            .map_err(|e| inner.fjall_error("purge expired cells", e))?;
                    }
                }
            }
            batch
                .commit()
                .map_err(|e| inner.fjall_error("purge expired cells", e))?;
        }
        if purged > 0 {
            tracing::info!(cells = purged, dir = %inner.dir.display(), "purged expired cells and versions");
        }
        Ok(purged)
    }

    /// Sets the disk bytes at which a table's newest generation is closed and writes move on to
    /// a new one (default [`GENERATION_BYTES`]; see the `generations` module). Small values are
    /// for tests; a value smaller than one write makes every write start a generation.
    pub fn set_generation_bytes(&self, bytes: u64) {
        self.inner.generation_bytes.store(bytes, Ordering::Relaxed);
    }

    /// How many generations `table` has.
    ///
    /// # Errors
    /// `Error::Invalid` for an unknown table.
    pub fn generation_count(&self, table: &str) -> Result<usize> {
        Ok(self.inner.table(table)?.1.generations().len())
    }

    /// Every visible row of `table`, in key order.
    ///
    /// # Errors
    /// `Error::Invalid` for an unknown table; `Error::Embedded` if fjall fails to read.
    pub fn dump(&self, table: &str) -> Result<Vec<Row>> {
        self.scan(table, &ScanSpec::default())
    }

    /// Syncs every committed write to disk (fjall journal, `fsync`). Writes are committed by
    /// [`crate::table::TableWriter::flush`]; call this once at the end of a job.
    ///
    /// # Errors
    /// `Error::Embedded` if the sync fails; the store then refuses further writes.
    pub fn persist(&self) -> Result<()> {
        self.inner
            .db
            .persist(PersistMode::SyncAll)
            .map_err(|e| self.inner.fjall_error("persist", e))
    }
}

/// A stored cell of the row being read, before the row's cells are merged and filtered.
struct Candidate {
    cell: Cell,
    ttl: Option<i64>,
    /// The put's seq for a packed cell, 0 for a cell stored on its own.
    seq: u64,
    /// A packed cell whose put expired in a compaction ([`codec::encode_packed_expired`]): it
    /// hides the cells of earlier puts and shows nothing.
    hidden: bool,
}

/// Groups key-ordered stored cells into visible rows.
struct RowCollector<'a> {
    table: &'a Table,
    now_ms: i64,
    time: Option<TimeRange>,
    /// Versions of a cell asked for ([`ScanSpec::max_versions`], at least 1).
    versions: u32,
    limit: usize,
    rows: Vec<Row>,
    /// The row being read and its stored cells.
    key: Vec<u8>,
    candidates: Vec<Candidate>,
    /// Whether a qualifier may have cells from several key-values in the row (puts of packed
    /// cells with other qualifiers, cells written before the family was packed, versions of a
    /// cell), so that the candidates must be sorted and the newest of each kept.
    merge: bool,
}

impl<'a> RowCollector<'a> {
    fn new(table: &'a Table, now_ms: i64, spec: &ScanSpec) -> Self {
        RowCollector {
            table,
            now_ms,
            time: spec.time_range,
            versions: spec.max_versions.max(1),
            limit: spec.limit.unwrap_or(usize::MAX),
            rows: Vec::new(),
            key: Vec::new(),
            candidates: Vec::new(),
            merge: false,
        }
    }

    fn is_full(&self) -> bool {
        self.rows.len() >= self.limit
    }

    /// Closes the current row and starts `row`; a row whose cells all expired is not returned.
    fn start_row(&mut self, row: &[u8]) {
        self.close_row();
        self.key.clear();
        self.key.extend_from_slice(row);
    }

    /// Keeps the visible cells of the current row: of a qualifier's cells the newest put's (of a
    /// versioned family's, the newest versions asked for, up to the family's count), if it is
    /// within the time range and not expired.
    ///
    /// Versions past the family's count are invisible whatever the time range, as after
    /// HBase's compactions; before one, HBase may still return such a version to a read whose
    /// time range excludes the newer ones.
    fn close_row(&mut self) {
        if self.candidates.is_empty() {
            return;
        }
        if std::mem::take(&mut self.merge) {
            // Key order, and the newest put, then the newest version, first among a qualifier's
            // cells.
            self.candidates.sort_by(|a, b| {
                (&a.cell.family, &a.cell.qualifier)
                    .cmp(&(&b.cell.family, &b.cell.qualifier))
                    .then(b.seq.cmp(&a.seq))
                    .then(b.cell.ts_ms.cmp(&a.cell.ts_ms))
            });
            let same_column = |a: &Candidate, b: &Candidate| {
                a.cell.family == b.cell.family && a.cell.qualifier == b.cell.qualifier
            };
            if self.table.versioned.is_empty() {
                self.candidates
                    .dedup_by(|later, kept| same_column(later, kept));
            } else {
                // Of each qualifier's run, as many as its family keeps and the read asks for.
                let mut keep = Vec::with_capacity(self.candidates.len());
                let (mut run, mut most) = (0, 0);
                for (i, c) in self.candidates.iter().enumerate() {
                    if i > 0 && same_column(&self.candidates[i - 1], c) {
                        run += 1;
                    } else {
                        run = 1;
                        most = self.table.max_versions(c.cell.family.as_bytes());
                        most = most.min(self.versions);
                    }
                    keep.push(run <= most);
                }
                let mut keep = keep.into_iter();
                self.candidates.retain(|_| keep.next().unwrap_or(false));
            }
        }
        let (time, now_ms) = (self.time, self.now_ms);
        let cells: Vec<Cell> = self
            .candidates
            .drain(..)
            .filter(|c| {
                !c.hidden
                    && time.is_none_or(|t| t.contains(c.cell.ts_ms))
                    && !codec::is_expired(c.cell.ts_ms, c.ttl, now_ms)
            })
            .map(|c| c.cell)
            .collect();
        if !cells.is_empty() {
            self.rows.push(Row {
                key: self.key.clone(),
                cells,
            });
        }
    }

    /// Adds one stored key-value of the current row, its cells of `wanted` qualifiers; `None` if
    /// it is malformed.
    fn push(
        &mut self,
        family: &[u8],
        column: Column<'_>,
        stored: &[u8],
        wanted: impl Fn(&str, &[u8]) -> bool,
    ) -> Option<()> {
        // A family the spec no longer lists is invisible, as HBase has no store to read it from.
        let Some((family, ttl)) = self.table.family(family) else {
            return Some(());
        };
        // Keys come in order: a qualifier's cells are all of this family's, from here on.
        let same_family = self
            .candidates
            .last()
            .is_some_and(|c| c.cell.family == family);
        let candidate = |qualifier: &[u8], ts_ms, value: &[u8], seq, hidden| Candidate {
            cell: Cell {
                family: family.to_owned(),
                qualifier: qualifier.to_vec(),
                ts_ms,
                value: value.to_vec(),
            },
            ttl,
            seq,
            hidden,
        };
        match column {
            Column::Cell(qualifier) => {
                let (ts_ms, value) = codec::decode_value(stored)?;
                if same_family && self.candidates.last().is_some_and(|c| c.seq > 0) {
                    self.merge = true;
                }
                if wanted(family, qualifier) {
                    self.candidates
                        .push(candidate(qualifier, ts_ms, value, 0, false));
                }
            }
            Column::Version(qualifier, _) => {
                // The value's stamp, not the key's: a compaction may have expired it.
                let (ts_ms, value) = codec::decode_value(stored)?;
                self.merge = true;
                if wanted(family, qualifier) {
                    self.candidates
                        .push(candidate(qualifier, ts_ms, value, 0, false));
                }
            }
            Column::Packed(qualifiers) => {
                let packed = codec::PackedValue::decode(stored)?;
                if same_family {
                    self.merge = true;
                }
                let hidden = packed.is_expired_marker();
                for cell in codec::packed_cells(qualifiers, &packed) {
                    let (qualifier, ts_ms, value) = cell?;
                    if wanted(family, qualifier) {
                        self.candidates
                            .push(candidate(qualifier, ts_ms, value, packed.seq, hidden));
                    }
                }
            }
        }
        Some(())
    }

    fn finish(mut self) -> Vec<Row> {
        if !self.is_full() {
            self.close_row();
        }
        self.rows
    }
}

impl EmbeddedStore {
    /// Collects the visible rows of `spec` (`[start, stop)`, `stop` empty: no end; only the
    /// cells of its columns if it names any, stamped within its time range if it has one) from
    /// a key-ordered iterator that starts at or before `spec.start`.
    fn collect(
        &self,
        table: &Table,
        iter: impl Iterator<Item = fjall::Result<KvPair>>,
        spec: &ScanSpec,
    ) -> Result<Vec<Row>> {
        let inner = &self.inner;
        let (start, stop, columns) = (&spec.start[..], &spec.stop[..], &spec.columns[..]);
        let mut rows = RowCollector::new(table, (inner.now_ms)(), spec);
        if rows.is_full() {
            return Ok(Vec::new());
        }
        let wanted = |family: &str, qualifier: &[u8]| {
            columns.is_empty()
                || columns
                    .iter()
                    .any(|c| c.family == family && c.qualifier == qualifier)
        };
        let mut started = false;
        for item in iter {
            let (key, value) = item.map_err(|e| inner.fjall_error("read", e))?;
            let corrupt = || inner.corrupt(table.name, &key);
            let (row, family, column) = codec::decode_key(&key).ok_or_else(corrupt)?;
            // Only a start bound holding 0x00 lets keys of earlier rows reach this point.
            if row < start {
                continue;
            }
            if !stop.is_empty() && row >= stop {
                break;
            }
            if !started || row != rows.key.as_slice() {
                started = true;
                rows.start_row(row);
                if rows.is_full() {
                    return Ok(rows.rows);
                }
            }
            rows.push(family, column, &value, wanted)
                .ok_or_else(corrupt)?;
        }
        Ok(rows.finish())
    }
}

impl TableReader for EmbeddedStore {
    fn get(&self, table: &str, row: &[u8], time: Option<TimeRange>) -> Result<Option<Row>> {
        self.get_versions(table, row, time, 1)
    }

    fn get_versions(
        &self,
        table: &str,
        row: &[u8],
        time: Option<TimeRange>,
        max_versions: u32,
    ) -> Result<Option<Row>> {
        let (_, t) = self.inner.table(table)?;
        // No stored row can have such a key, and its prefix could match other rows' cells.
        if codec::check_row(table, row).is_err() {
            return Ok(None);
        }
        let mut prefix = Vec::with_capacity(row.len() + 1);
        codec::encode_row_prefix(&mut prefix, row);
        let spec = ScanSpec {
            start: row.to_vec(),
            limit: Some(1),
            time_range: time,
            max_versions,
            ..ScanSpec::default()
        };
        let rows = self.collect(t, t.prefix(&prefix, time.as_ref()), &spec)?;
        Ok(rows.into_iter().next())
    }

    fn scan(&self, table: &str, spec: &ScanSpec) -> Result<Vec<Row>> {
        let (_, t) = self.inner.table(table)?;
        // Every key of a row >= start is >= start. A stop without 0x00 bounds keys the same way
        // (row < stop implies key < stop); a stop with 0x00 does not, so leave the range open
        // and let `collect` stop on the decoded row.
        let stop: &[u8] = if spec.stop.contains(&codec::SEP) {
            &[]
        } else {
            &spec.stop
        };
        let iter = t.range(&spec.start, stop, spec.time_range.as_ref());
        self.collect(t, iter, spec)
    }
}
