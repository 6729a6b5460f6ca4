//! Writing what a writer holds: buffers ingested as sorted tables or queued, and the batch
//! committed.

use super::buffer::MAX_ARENA;
use super::codec;
use super::{new_batch, EmbeddedWriter};
use crate::Result;
use std::collections::HashMap;

impl EmbeddedWriter {
    /// Commits the queued batch, if any, with the series points buffered so far sealed into it;
    /// then registers the sealed runs and merges those that make a full group (`settle_series`).
    pub(super) fn commit(&mut self) -> Result<()> {
        // On an error, what was sealed stays in the batch for the next commit, its seqs held.
        self.seal_all_series()?;
        if self.batch.is_empty() {
            self.queued = 0;
            return self.settle_series(false);
        }
        let next = new_batch(&self.store, self.batch.len());
        let full = std::mem::replace(&mut self.batch, next);
        self.queued = 0;
        if let Some(queued_ts) = &mut self.queued_ts {
            queued_ts.iter_mut().for_each(HashMap::clear);
        }
        let inner = &self.store.inner;
        let committed = full.commit().map_err(|e| inner.fjall_error("write", e));
        self.leases.clear();
        let settled = self.settle_series(committed.is_ok());
        committed?;
        for index in 0..self.store.inner.tables.len() {
            self.store.inner.close_full_generation(index)?;
        }
        settled
    }

    /// Writes table `index`'s pending cells: ingested as a sorted table when there are at least
    /// `min_ingest` bytes of them, else queued in the writer's batch for the next commit.
    pub(super) fn write_pending(&mut self, index: usize, min_ingest: usize) -> Result<()> {
        let pending = &mut self.pending[index];
        if pending.is_empty() {
            return Ok(());
        }
        let inner = &self.store.inner;
        let lease = inner.covering(index, pending.lo, pending.hi)?;
        let keyspace = &lease.keyspace;
        if pending.removals > 0 {
            // A removed key may be in an older generation too, which the newest's removal would
            // not hide; only those whose span holds its stamp can have it.
            let table = &inner.tables[index];
            let older: Vec<_> = table
                .leases_with_spans()
                .into_iter()
                .filter(|(l, _)| l.keyspace.name() != keyspace.name())
                .collect();
            for slot in pending.cells.iter().filter(|s| s.value().is_empty()) {
                let key = &pending.arena[slot.key()];
                let ts = match codec::decode_key(key) {
                    Some((_, _, codec::Column::Version(_, ts))) => Some(ts),
                    _ => None,
                };
                for (older, span) in &older {
                    if ts.is_none_or(|ts| span.covers(ts, ts)) {
                        self.batch.remove(&older.keyspace, key);
                    }
                }
            }
            self.leases.extend(older.into_iter().map(|(l, _)| l));
        }
        if pending.bytes() < min_ingest {
            // Queued in the writer's batch, which `write_all` commits once for all tables.
            if pending.removals == 0 {
                for slot in &pending.cells {
                    self.batch.insert(
                        keyspace,
                        &pending.arena[slot.key()],
                        &pending.arena[slot.value()],
                    );
                }
            } else {
                // A batch that removes and inserts one key does not say which comes last: only
                // the last write of each key goes in.
                for (key, value) in pending.sorted() {
                    if value.is_empty() {
                        self.batch.remove(keyspace, key);
                    } else {
                        self.batch.insert(keyspace, key, value);
                    }
                }
            }
            pending.clear();
            self.leases.push(lease);
            return Ok(());
        }
        let mut ingestion = keyspace
            .start_ingestion()
            .map_err(|e| inner.fjall_error("ingest", e))?;
        for (key, value) in pending.sorted() {
            let written = if value.is_empty() {
                ingestion.write_tombstone(key)
            } else {
                ingestion.write(key, value)
            };
            written.map_err(|e| inner.fjall_error("ingest", e))?;
        }
        ingestion
            .finish()
            .map_err(|e| inner.fjall_error("ingest", e))?;
        lease.ingested();
        pending.clear();
        inner.close_full_generation(index)
    }

    /// Writes every table's pending cells and the queued batch: the small buffers of all tables
    /// go in one write batch, so a live job's flush is one journal write, not one per table.
    pub(super) fn write_all(&mut self) -> Result<()> {
        for index in 0..self.pending.len() {
            let bulk = std::mem::take(&mut self.pending[index].bulk);
            self.write_pending(index, if bulk { 0 } else { self.min_ingest_bytes })?;
        }
        self.commit()
    }

    /// Makes room in table `index`'s buffer for `need` more bytes of arena.
    pub(super) fn make_room(&mut self, index: usize, need: usize) -> Result<()> {
        if self.pending[index].arena.len() + need > MAX_ARENA {
            // Only a put of gigabytes gets here: its cells so far go out in bulk, as a full
            // buffer's do, and the rest into an empty buffer.
            self.pending[index].bulk = true;
            self.write_pending(index, 0)?;
        }
        Ok(())
    }
}
