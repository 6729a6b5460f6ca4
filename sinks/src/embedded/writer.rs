//! The write side: mutations buffered per worker and committed in fjall write batches.

use super::codec;
use super::store::{EmbeddedStore, Table};
use super::StoreError;
use crate::table::{Cell, Mutation, TableWriter};
use crate::{Error, Result};
use fjall::{OwnedWriteBatch, PersistMode};
use std::collections::HashMap;
use std::fmt;

/// Mutations buffered before the writer commits them as one fjall batch.
pub(crate) const BATCH_MUTATIONS: usize = 4096;

/// Writes mutations for one worker: buffers them and commits them as fjall write batches of 4096
/// mutations, or on [`TableWriter::flush`].
///
/// A committed batch is visible to every reader of the store at once and survives a crash of
/// the process (fjall's journal reaches the OS on each commit); it survives a crash of the
/// machine after [`EmbeddedStore::persist`]. Dropping a writer commits what it still buffers,
/// as HBase's `BufferedMutator.close()` does, but only `flush` reports failures.
///
/// Each table keeps one version per cell. By default a put replaces the cell whatever its
/// timestamp (last write wins), which for hourglass is the same as HBase's rule that the newest
/// timestamp wins: every hourglass cell timestamp is a function of the cell's coordinates (a
/// narrow cell is stamped with the reading's event time, which is part of its row key; a wide
/// cell with its row's hour start plus its qualifier's offset), so two puts of one cell carry
/// one timestamp. [`EmbeddedWriter::newest_timestamp_wins`] enforces HBase's rule exactly, at the
/// price of a read per cell.
pub struct EmbeddedWriter {
    store: EmbeddedStore,
    batch: OwnedWriteBatch,
    /// Mutations in `batch`.
    queued: usize,
    /// With `newest_timestamp_wins`, per table: the timestamp each cell queued in `batch` will
    /// have once committed (`i64::MIN` for a queued delete), which the store cannot tell yet.
    queued_ts: Option<Vec<HashMap<Vec<u8>, i64>>>,
    key: Vec<u8>,
    value: Vec<u8>,
}

impl fmt::Debug for EmbeddedWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmbeddedWriter")
            .field("store", &self.store)
            .field("queued", &self.queued)
            .field("newest_timestamp_wins", &self.queued_ts.is_some())
            .finish_non_exhaustive()
    }
}

impl EmbeddedWriter {
    pub(crate) fn new(store: EmbeddedStore) -> Self {
        let batch = new_batch(&store, 0);
        EmbeddedWriter {
            store,
            batch,
            queued: 0,
            queued_ts: None,
            key: Vec::new(),
            value: Vec::new(),
        }
    }

    /// With `true`, a put whose timestamp is older than the cell's visible one is ignored, as in
    /// HBase with `VERSIONS => 1`; each put then reads the cell first. With `false` (the
    /// default), the last put wins without a read. Set it before the first write: cells queued
    /// before the switch are compared as if already committed.
    #[must_use]
    pub fn newest_timestamp_wins(mut self, on: bool) -> Self {
        self.queued_ts = on.then(|| vec![HashMap::new(); self.store.inner.tables.len()]);
        self
    }

    /// Commits the buffered batch, if any.
    fn commit(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            self.queued = 0;
            return Ok(());
        }
        let next = new_batch(&self.store, self.batch.len());
        let full = std::mem::replace(&mut self.batch, next);
        self.queued = 0;
        if let Some(queued_ts) = &mut self.queued_ts {
            queued_ts.iter_mut().for_each(HashMap::clear);
        }
        full.commit()
            .map_err(|e| self.store.inner.fjall_error("write", e))
    }

    fn put(&mut self, table_index: usize, table: &Table, row: &[u8], cells: &[Cell]) -> Result<()> {
        for cell in cells {
            codec::encode_key(&mut self.key, row, &cell.family, &cell.qualifier);
            if let Some(queued_ts) = &mut self.queued_ts {
                let queued = &mut queued_ts[table_index];
                let visible = match queued.get(self.key.as_slice()) {
                    Some(&ts) => Some(ts),
                    None => table
                        .keyspace
                        .get(&self.key)
                        .map_err(|e| self.store.inner.fjall_error("read before write", e))?
                        .and_then(|stored| codec::decode_ts(&stored)),
                };
                // HBase keeps the newest timestamp; on a tie the later put wins.
                if visible.is_some_and(|ts| cell.ts_ms < ts) {
                    continue;
                }
                queued.insert(self.key.clone(), cell.ts_ms);
            }
            codec::encode_value(&mut self.value, cell.ts_ms, &cell.value);
            self.batch
                .insert(&table.keyspace, self.key.as_slice(), self.value.as_slice());
        }
        Ok(())
    }

    /// Queues removals of the row's cells stamped at most `ts_ms`. HBase would instead write a
    /// delete marker that also hides later puts stamped at most `ts_ms` until a major compaction;
    /// hourglass never puts a cell it has deleted, so removing what exists is the same.
    fn delete_row(
        &mut self,
        table_index: usize,
        table: &Table,
        row: &[u8],
        ts_ms: i64,
    ) -> Result<()> {
        // The scan below reads committed cells only, so commit the puts queued before it.
        self.commit()?;
        codec::encode_row_prefix(&mut self.key, row);
        for guard in table.keyspace.prefix(&self.key) {
            let (key, stored) = guard
                .into_inner()
                .map_err(|e| self.store.inner.fjall_error("delete row", e))?;
            let Some(ts) = codec::decode_ts(&stored) else {
                return Err(StoreError::Corrupt {
                    dir: self.store.inner.dir.clone(),
                    table: table.name,
                    key: String::from_utf8_lossy(&key).escape_debug().to_string(),
                }
                .into());
            };
            if ts <= ts_ms {
                if let Some(queued_ts) = &mut self.queued_ts {
                    queued_ts[table_index].insert(key.to_vec(), i64::MIN);
                }
                self.batch.remove(&table.keyspace, key);
            }
        }
        Ok(())
    }
}

fn new_batch(store: &EmbeddedStore, capacity: usize) -> OwnedWriteBatch {
    // `Buffer` hands the journal to the OS on each commit, as `Database::batch` does, so a
    // committed batch survives a crash of the process.
    OwnedWriteBatch::with_capacity(store.inner.db.clone(), capacity)
        .durability(Some(PersistMode::Buffer))
}

/// Checks a mutation against the store's tables before anything of it is queued.
fn validate(store: &EmbeddedStore, mutation: &Mutation) -> Result<()> {
    let (_, table) = store.inner.table(mutation.table())?;
    codec::check_row(table.name, mutation.row())?;
    if let Mutation::Put { row, cells, .. } = mutation {
        for cell in cells {
            if table.family(cell.family.as_bytes()).is_none() {
                return Err(Error::Invalid(format!(
                    "table {} has no column family {:?}; put cells in one of {}",
                    table.name,
                    cell.family,
                    table
                        .families
                        .iter()
                        .map(|(f, _)| *f)
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            codec::check_key_len(table.name, row, &cell.family, &cell.qualifier)?;
            if u32::try_from(cell.value.len() + 8).is_err() {
                return Err(Error::Invalid(format!(
                    "a cell value of {} bytes for table {} exceeds the embedded store's 4 GiB limit",
                    cell.value.len(),
                    table.name
                )));
            }
        }
    }
    Ok(())
}

impl TableWriter for EmbeddedWriter {
    /// Queues `mutations` in order, committing a batch whenever 4096 are queued.
    ///
    /// A `DeleteRow` commits the mutations queued before it, then queues removals of the cells
    /// the row holds at that point.
    ///
    /// # Errors
    /// `Error::Invalid`, with nothing of this call queued, if a mutation names an unknown table
    /// or family, or has an empty, too long or 0x00-holding row key. `Error::Embedded` if a commit
    /// fails; the store then refuses writes and the job must stop.
    fn write(&mut self, mutations: Vec<Mutation>) -> Result<()> {
        for mutation in &mutations {
            validate(&self.store, mutation)?;
        }
        let store = self.store.clone();
        for mutation in &mutations {
            let (table_index, table) = store.inner.table(mutation.table())?;
            match mutation {
                Mutation::Put { row, cells, .. } => self.put(table_index, table, row, cells)?,
                Mutation::DeleteRow { row, ts_ms, .. } => {
                    self.delete_row(table_index, table, row, *ts_ms)?;
                }
            }
            self.queued += 1;
            if self.queued >= BATCH_MUTATIONS {
                self.commit()?;
            }
        }
        Ok(())
    }

    /// Commits every queued mutation; readers see them when this returns.
    ///
    /// # Errors
    /// `Error::Embedded` if the commit fails.
    fn flush(&mut self) -> Result<()> {
        self.commit()
    }
}

impl Drop for EmbeddedWriter {
    fn drop(&mut self) {
        if !self.batch.is_empty() {
            if let Err(e) = self.commit() {
                tracing::error!(error = %e, "embedded writer dropped with unflushed mutations");
            }
        }
    }
}
