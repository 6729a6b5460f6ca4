//! The write side: mutations buffered per worker, then committed in fjall write batches or, in
//! bulk, ingested as sorted tables.

mod buffer;
mod delete;
mod flush;
mod put;
mod read_before;
mod series;

use super::codec;
use super::generations::Lease;
use super::store::EmbeddedStore;
use crate::table::{KeyBatch, Mutation, TableWriter};
use crate::{Error, Result};
use buffer::Pending;
use fjall::{OwnedWriteBatch, PersistMode};
use std::collections::{HashMap, HashSet};
use std::fmt;

/// Mutations buffered before the writer commits them as one fjall batch, in the mode that reads
/// a packed family's row before it writes ([`EmbeddedWriter::newest_timestamp_wins`]).
pub(crate) const BATCH_MUTATIONS: usize = 4096;

/// Bytes of cells buffered per table before the writer ingests them as a sorted table: their
/// keys and values, and a 32-byte slot per cell.
///
/// Ingesting skips the memtable, whose skiplist inserts (a key comparison per level, on keys
/// that share long prefixes) were the largest single cost of a replay in `perf`, and the
/// journal. The bound is the writer's memory: 8 MiB per table, times three tables, per worker.
pub(crate) const INGEST_BYTES: usize = 8 << 20;

/// Smallest buffer a flush ingests; a smaller one goes through the memtable, so a live job that
/// flushes often does not make one tiny table per flush for compactions to merge.
///
/// A table that filled a buffer since the last flush is written in bulk, and the flush ingests
/// its remainder whatever its size: an ingestion first flushes the keyspace's memtable, and in a
/// replay of 100,000 devices × 20 min the odd remainder through the memtable made fjall's
/// compactions take 39–44 CPU s instead of 27–30.
pub(crate) const MIN_INGEST_BYTES: usize = 1 << 20;
/// Writes mutations for one worker: buffers them per table and writes a table's buffer when it
/// reaches 8 MiB, and every buffer on [`TableWriter::flush`].
///
/// A large buffer is sorted and ingested as a new table of the LSM tree (fjall's bulk load,
/// registered atomically under a sequence number newer than every earlier write); the small ones
/// of a flush are committed as one write batch through the journal and memtable. Either way,
/// written cells are visible to every reader of the store at once and survive a crash of the
/// process; they survive a crash of the machine after [`EmbeddedStore::persist`]. Dropping a writer writes what it
/// still buffers, as HBase's `BufferedMutator.close()` does, but only `flush` reports failures.
///
/// A family with [`crate::schema::FamilySpec::max_versions`] above 1 keeps each put as a
/// version of its own, the same stamp replacing it; reads return a cell's newest versions up to
/// the family's count, and compactions and [`EmbeddedStore::purge_expired`] remove the versions
/// past it (no read before a put). Other families keep one version per cell. By default a put
/// replaces the cell whatever its timestamp (last write wins), which for hourglass's sensor
/// tables is the same as HBase's rule that the newest timestamp wins: every sensor cell
/// timestamp is a function of the cell's coordinates (a narrow cell is stamped with the
/// reading's event time, which is part of its row key; a wide cell with its row's hour start
/// plus its qualifier's offset), so two puts of one cell carry one timestamp.
/// [`EmbeddedWriter::newest_timestamp_wins`] enforces HBase's rule exactly for jobs whose late
/// events carry older stamps: every cell of a family not packed is then stored as a version,
/// so the stamp decides with no read; a packed family's put reads the row's visible stamps and
/// is committed in write batches of 4096 mutations.
pub struct EmbeddedWriter {
    store: EmbeddedStore,
    /// Per table (the store's order): cells not written yet.
    pending: Vec<Pending>,
    /// Per table: series points not sealed yet (`writer/series.rs`), sealed into the batch
    /// when it is committed.
    series: Vec<Vec<super::series::Point>>,
    /// Runs sealed into `batch` (by table index), and their seqs, held as not committed until
    /// `batch` is (`writer/series.rs`, `settle_series`).
    sealed: Vec<(usize, super::store::series::SealedRun)>,
    sealed_seqs: Vec<u64>,
    /// Removals (and, with `newest_timestamp_wins`, puts) queued for the next commit.
    batch: OwnedWriteBatch,
    /// Mutations in `batch`.
    queued: usize,
    /// The generations `batch` writes to, kept until it is committed.
    leases: Vec<Lease>,
    /// With `newest_timestamp_wins`, per table: the timestamp each cell queued in `batch` will
    /// have once committed (`i64::MIN` for a queued delete), which the store cannot tell yet.
    queued_ts: Option<Vec<HashMap<Vec<u8>, i64>>>,
    /// [`INGEST_BYTES`] and [`MIN_INGEST_BYTES`], smaller in tests.
    ingest_bytes: usize,
    min_ingest_bytes: usize,
    key: Vec<u8>,
    value: Vec<u8>,
}

impl fmt::Debug for EmbeddedWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmbeddedWriter")
            .field("store", &self.store)
            .field("queued", &self.queued)
            .field(
                "pending_cells",
                &self.pending.iter().map(|p| p.cells.len()).sum::<usize>(),
            )
            .field("newest_timestamp_wins", &self.queued_ts.is_some())
            .finish_non_exhaustive()
    }
}

impl EmbeddedStore {
    /// A writer for one worker. It buffers mutations per table and writes them in bulk; see
    /// [`EmbeddedWriter`].
    pub fn writer(&self) -> EmbeddedWriter {
        EmbeddedWriter::new(self.clone())
    }
}

impl EmbeddedWriter {
    fn new(store: EmbeddedStore) -> Self {
        let batch = new_batch(&store, 0);
        let pending = store
            .inner
            .tables
            .iter()
            .map(|_| Pending::default())
            .collect();
        let series = store.inner.tables.iter().map(|_| Vec::new()).collect();
        EmbeddedWriter {
            store,
            pending,
            series,
            sealed: Vec::new(),
            sealed_seqs: Vec::new(),
            batch,
            queued: 0,
            leases: Vec::new(),
            queued_ts: None,
            ingest_bytes: INGEST_BYTES,
            min_ingest_bytes: MIN_INGEST_BYTES,
            key: Vec::new(),
            value: Vec::new(),
        }
    }

    /// With `true`, a put whose timestamp is older than the cell's visible one does not show,
    /// as in HBase with `VERSIONS => 1`: cells of families not packed are stored as versions,
    /// stamp in the key, and reads show the newest (no read before the write); a packed
    /// family's put reads the row's visible stamps first. With `false` (the default), the last
    /// put wins. Set it before the first write: cells queued before the switch are compared as
    /// if already committed.
    #[must_use]
    pub fn newest_timestamp_wins(mut self, on: bool) -> Self {
        self.queued_ts = on.then(|| vec![HashMap::new(); self.store.inner.tables.len()]);
        self
    }

    /// Sets the buffer size that starts an ingestion, and the smallest a flush ingests, so that
    /// tests reach the ingestion path with a few cells.
    #[cfg(test)]
    pub(crate) fn ingest_thresholds(
        mut self,
        ingest_bytes: usize,
        min_ingest_bytes: usize,
    ) -> Self {
        self.ingest_bytes = ingest_bytes;
        self.min_ingest_bytes = min_ingest_bytes;
        self
    }
}

fn new_batch(store: &EmbeddedStore, capacity: usize) -> OwnedWriteBatch {
    // `Buffer` hands the journal to the OS on each commit, as `Database::batch` does, so a
    // committed batch survives a crash of the process.
    OwnedWriteBatch::with_capacity(store.inner.db.clone(), capacity)
        .durability(Some(PersistMode::Buffer))
}

/// Checks a mutation against the store's tables before anything of it is queued.
/// With `all_versions` (`newest_timestamp_wins`), cells of families not packed are stored as
/// versions.
fn validate(store: &EmbeddedStore, mutation: &Mutation, all_versions: bool) -> Result<()> {
    let (_, table) = store.inner.table(mutation.table())?;
    codec::check_row(table.name, mutation.row())?;
    if let Mutation::DeleteColumn { family, .. } = mutation {
        if table.family(family.as_bytes()).is_none() {
            return Err(no_family(table, family));
        }
    }
    if let Mutation::DeleteVersion {
        row,
        family,
        qualifier,
        ..
    } = mutation
    {
        if table.family(family.as_bytes()).is_none() {
            return Err(no_family(table, family));
        }
        if delete::removes_by_key(table, family, all_versions) {
            codec::check_version_key_len(table.name, row, family, qualifier)?;
        }
    }
    if let Mutation::Put { row, cells, .. } = mutation {
        for cell in cells {
            if table.family(cell.family.as_bytes()).is_none() {
                return Err(no_family(table, &cell.family));
            }
            if table.is_packed(&cell.family) {
                // A put's packed cells are split into key-values that fit
                // (`codec::packed_chunks`), as long as each qualifier fits on its own.
                codec::check_packed_key_len(table.name, row, &cell.family, &cell.qualifier)?;
            } else if all_versions || table.is_versioned(&cell.family) {
                codec::check_version_key_len(table.name, row, &cell.family, &cell.qualifier)?;
            } else {
                codec::check_key_len(table.name, row, &cell.family, &cell.qualifier)?;
            }
            check_value_len(table, &cell.value)?;
        }
        for family in table.packed.iter().copied() {
            // Each cell's age and length take at most 20 bytes.
            let bytes: usize = cells
                .iter()
                .filter(|c| c.family == family)
                .map(|c| c.value.len() + 20)
                .sum();
            if u32::try_from(bytes + 16).is_err() {
                return Err(Error::Invalid(format!(
                    "a put of {bytes} bytes to family {family} of table {} exceeds the embedded \
                     store's 4 GiB limit for a put's packed cells",
                    table.name
                )));
            }
        }
    }
    Ok(())
}

/// Refuses a cell value too large for the embedded store's 4 GiB bound on a stored value (with
/// its 8-byte stamp).
fn check_value_len(table: &super::store::Table, value: &[u8]) -> Result<()> {
    if u32::try_from(value.len() + 8).is_err() {
        return Err(Error::Invalid(format!(
            "a cell value of {} bytes for table {} exceeds the embedded store's 4 GiB limit",
            value.len(),
            table.name
        )));
    }
    Ok(())
}

/// The error for a mutation naming a family `table` does not have.
fn no_family(table: &super::store::Table, family: &str) -> Error {
    Error::Invalid(format!(
        "table {} has no column family {family:?}; use one of {}",
        table.name,
        table
            .families
            .iter()
            .map(|(f, _)| *f)
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

impl TableWriter for EmbeddedWriter {
    /// Queues `mutations` in order; a table's buffer is written once it holds 8 MiB of cells
    /// (with `newest_timestamp_wins`: a batch whenever 4096 mutations are queued).
    ///
    /// A `DeleteVersion` of a family whose cells are stored as versions is queued as the
    /// removal of the version's key, in order with the puts: no read, no commit of its own.
    ///
    /// A `DeleteRow` or `DeleteColumn` writes the mutations queued before it, then removes the
    /// cells the row (the column) holds at that point, committed before the next mutation. A
    /// run of `DeleteRow`s of distinct rows in tables without a packed family is one delete
    /// run: what is queued before it is written once, and its removals are committed together
    /// (an index's retractions, one commit instead of one per row).
    ///
    /// # Errors
    /// `Error::Invalid`, with nothing of this call queued, if a mutation names an unknown table
    /// or family, or has an empty, too long or 0x00-holding row key. `Error::Embedded` if a write
    /// fails; the store then refuses writes and the job must stop.
    fn write(&mut self, mutations: Vec<Mutation>) -> Result<()> {
        for mutation in &mutations {
            validate(&self.store, mutation, self.queued_ts.is_some())?;
        }
        let store = self.store.clone();
        // The rows of the run of row deletes being queued (see above).
        let mut run: Option<HashSet<(usize, &[u8])>> = None;
        for mutation in &mutations {
            let (table_index, table) = store.inner.table(mutation.table())?;
            let joins = match mutation {
                Mutation::DeleteRow { row, .. } if table.packed.is_empty() => run
                    .as_ref()
                    .is_none_or(|r| !r.contains(&(table_index, &row[..]))),
                _ => false,
            };
            if !joins && run.take().is_some() {
                self.commit()?;
            }
            match mutation {
                Mutation::Put { row, cells, .. } => self.put(table_index, table, row, cells)?,
                Mutation::DeleteRow { row, ts_ms, .. } if joins => {
                    let rows = match &mut run {
                        Some(rows) => rows,
                        None => {
                            self.write_all()?;
                            run.insert(HashSet::new())
                        }
                    };
                    rows.insert((table_index, &row[..]));
                    self.remove_row(table_index, table, row, *ts_ms)?;
                }
                Mutation::DeleteRow { row, ts_ms, .. } => {
                    self.delete_row(table_index, table, row, *ts_ms)?;
                }
                Mutation::DeleteColumn {
                    row,
                    family,
                    qualifier,
                    ts_ms,
                    ..
                } => {
                    self.delete_column(table_index, table, row, family, qualifier, |ts| {
                        ts <= *ts_ms
                    })?;
                }
                Mutation::DeleteVersion {
                    row,
                    family,
                    qualifier,
                    ts_ms,
                    ..
                } => {
                    self.delete_version(table_index, table, row, family, qualifier, *ts_ms)?;
                }
            }
            if self.queued_ts.is_some() {
                self.queued += 1;
                if self.queued >= BATCH_MUTATIONS {
                    self.commit()?;
                }
            }
        }
        if run.is_some() {
            self.commit()?;
        }
        Ok(())
    }

    /// Writes every queued mutation; readers see them when this returns.
    ///
    /// # Errors
    /// `Error::Embedded` if a write fails.
    fn flush(&mut self) -> Result<()> {
        self.write_all()
    }

    /// Queues the batch's versions straight into the table's buffer, with no mutation built,
    /// when its family stores each cell as a version (a versioned family, or
    /// `newest_timestamp_wins`); else as its mutations.
    ///
    /// # Errors
    /// As [`TableWriter::write`].
    fn write_keys(&mut self, keys: &KeyBatch) -> Result<()> {
        self.write_key_batch(keys)
    }
}

impl Drop for EmbeddedWriter {
    fn drop(&mut self) {
        let pending =
            self.pending.iter().any(|p| !p.is_empty()) || self.series.iter().any(|s| !s.is_empty());
        if pending || !self.batch.is_empty() {
            if let Err(e) = self.write_all() {
                tracing::error!(error = %e, "embedded writer dropped with unflushed mutations");
            }
        }
    }
}
