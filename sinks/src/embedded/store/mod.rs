//! The store handle: its shared state, tables, and the seqs of packed puts.

mod admin;
mod open;
mod read;
mod rotation;
pub(crate) mod series;
mod table;

pub(crate) use table::{Stored, Table};

use super::journal::JournalDamage;
use super::ttl::Clock;
use super::StoreError;
use crate::{Error, Result};
use fjall::{Database, Keyspace, PersistMode};
use std::collections::BTreeSet;
use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

/// The key, in [`super::generations::SPANS_KEYSPACE`], of the seq below which every seq of a packed
/// put was given ([`Inner::next_seq`]). `#` starts no keyspace's name.
const SEQ_KEY: &str = "#seq";

/// Seqs recorded as handed out at a time: a sync per 16 M packed puts.
const SEQ_BLOCK: u64 = 1 << 24;

pub(crate) struct Inner {
    pub(crate) db: Database,
    pub(crate) dir: PathBuf,
    pub(crate) tables: Vec<Table>,
    /// Each generation's [`super::generations::Span`], by keyspace name
    /// ([`super::generations::SPANS_KEYSPACE`]).
    pub(crate) spans: Keyspace,
    /// Disk bytes at which a table's newest generation is closed ([`super::GENERATION_BYTES`]).
    generation_bytes: AtomicU64,
    /// The next [`super::codec::PackedValue::seq`] to give a put.
    seq: AtomicU64,
    /// Seqs below this are recorded as handed out ([`SEQ_KEY`]); passing it takes `seq_lock`.
    seq_reserved: AtomicU64,
    seq_lock: Mutex<()>,
    /// Seqs of series runs sealed into a writer's batch that is not committed yet
    /// ([`Inner::next_series_seq`]); the lowest bounds what merges may take.
    series_pending: Mutex<BTreeSet<u64>>,
    pub(crate) now_ms: Clock,
    /// What opening dropped from the journals.
    pub(crate) dropped: Vec<JournalDamage>,
    /// The tables a read-only open did not find ([`EmbeddedStore::absent_tables`]).
    pub(crate) absent: Vec<&'static str>,
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

    /// A seq for a series run (see [`Inner::next_seq`]), held as not committed until the
    /// writer gives it up with [`Inner::settle_series_seqs`] once its batch is committed or
    /// failed. Taken and held under one lock, so [`Inner::merge_watermark`] never misses one.
    pub(crate) fn next_series_seq(&self) -> Result<u64> {
        let mut pending = self
            .series_pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let seq = self.next_seq()?;
        pending.insert(seq);
        Ok(seq)
    }

    /// Gives up seqs of [`Inner::next_series_seq`]: their runs are committed (and registered
    /// for merges) or never will be.
    pub(crate) fn settle_series_seqs(&self, seqs: &[u64]) {
        if seqs.is_empty() {
            return;
        }
        let mut pending = self
            .series_pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        for seq in seqs {
            pending.remove(seq);
        }
    }

    /// The lowest seq whose series run may still be committed: the lowest held by a writer, or
    /// the next to be given. Every series run below it is committed, so merges take only runs
    /// below it.
    pub(crate) fn merge_watermark(&self) -> u64 {
        let pending = self
            .series_pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let next = self.seq.load(Ordering::SeqCst);
        pending.first().copied().map_or(next, |held| held.min(next))
    }
}

/// HBase's table model on fjall, in one directory: a table is one or more keyspaces, its
/// generations (see `generations.rs`). A family keeps one version per cell, or its
/// [`crate::schema::FamilySpec::max_versions`] versions, each under a key of its own, the newest
/// first; reads return up to the versions they ask for ([`crate::table::ScanSpec::max_versions`])
/// and never one past the family's count, which [`EmbeddedStore::purge_expired`] and later puts of
/// the cell remove.
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
