//! Puts: a mutation's cells encoded into a table's buffer (with `newest_timestamp_wins`, each
//! as a version, with no read), or, for a packed family with `newest_timestamp_wins`, compared
//! with the stored ones and queued in the batch; and a [`KeyBatch`]'s versions, encoded into
//! the buffer with no mutation built.

use super::buffer::Slot;
use super::read_before::visible_ts;
use super::EmbeddedWriter;
use crate::embedded::codec;
use crate::embedded::store::Table;
use crate::table::{Cell, KeyBatch, TableWriter};
use crate::Result;

impl EmbeddedWriter {
    /// Encodes into `self.key` and `self.value` one put of a packed family's `cells`
    /// (`(qualifier, timestamp, value)`, sorted by qualifier without repeats) under a new seq,
    /// and returns the smallest and largest of their timestamps.
    pub(super) fn encode_packed<'c>(
        &mut self,
        row: &[u8],
        family: &str,
        cells: impl Iterator<Item = (&'c [u8], i64, &'c [u8])> + Clone,
    ) -> Result<(i64, i64)> {
        let seq = self.store.inner.next_seq()?;
        codec::encode_packed_key(&mut self.key, row, family, cells.clone().map(|(q, _, _)| q));
        codec::encode_packed_value(
            &mut self.value,
            seq,
            cells.clone().map(|(_, ts, v)| (ts, v)),
        );
        let (lo, hi) = cells.fold((i64::MAX, i64::MIN), |(lo, hi), (_, ts, _)| {
            (lo.min(ts), hi.max(ts))
        });
        Ok((lo, hi))
    }

    pub(super) fn put(
        &mut self,
        table_index: usize,
        table: &Table,
        row: &[u8],
        cells: &[Cell],
    ) -> Result<()> {
        if table.packed.is_empty() {
            return self.put_cells(table_index, table, row, cells.iter());
        }
        if let [family] = table.packed[..] {
            // A narrow row's put: all its cells in the one packed family.
            if cells.iter().all(|c| c.family == family) {
                return self.put_packed(table_index, table, row, family, cells.iter().collect());
            }
        }
        let (packed, single): (Vec<&Cell>, Vec<&Cell>) =
            cells.iter().partition(|c| table.is_packed(&c.family));
        self.put_cells(table_index, table, row, single.into_iter())?;
        for family in table.packed.iter().copied() {
            let of_family: Vec<&Cell> = packed
                .iter()
                .copied()
                .filter(|c| c.family == family)
                .collect();
            if !of_family.is_empty() {
                self.put_packed(table_index, table, row, family, of_family)?;
            }
        }
        Ok(())
    }

    /// Queues a put's cells of one packed family, in the put's order, as one key-value (with
    /// `newest_timestamp_wins`, those newer than the visible ones).
    fn put_packed(
        &mut self,
        table_index: usize,
        table: &Table,
        row: &[u8],
        family: &str,
        mut cells: Vec<&Cell>,
    ) -> Result<()> {
        if let Some(queued_ts) = &mut self.queued_ts {
            let visible = visible_ts(&self.store, table, row, family)?;
            let queued = &mut queued_ts[table_index];
            cells.retain(|cell| {
                codec::encode_key(&mut self.key, row, family, &cell.qualifier);
                let ts = queued
                    .get(self.key.as_slice())
                    .or_else(|| visible.get(&cell.qualifier))
                    .copied();
                // HBase keeps the newest timestamp; on a tie the later put wins.
                let wins = ts.is_none_or(|ts| cell.ts_ms >= ts);
                if wins {
                    queued.insert(self.key.clone(), cell.ts_ms);
                }
                wins
            });
            if cells.is_empty() {
                return Ok(());
            }
        }
        // By qualifier, the last of a qualifier's cells in the put winning, as it would were
        // they stored one by one; then by kind (`codec::packed_chunks`).
        let apart = is_apart(table.packed_apart(family));
        cells.reverse();
        cells.sort_by(|a, b| a.qualifier.cmp(&b.qualifier));
        // Stable: among a qualifier's cells the put's last comes first, and stays.
        cells.dedup_by(|later, kept| later.qualifier == kept.qualifier);
        // Its series points go to the series runs; the cells left, here.
        self.put_series(table_index, table, row, family, &mut cells)?;
        if cells.is_empty() {
            return Ok(());
        }
        codec::apart_last(&mut cells, |c| &c.qualifier, apart);
        for chunk in codec::packed_chunks(&cells, |c| &c.qualifier, apart) {
            let (lo, hi) = self.encode_packed(
                row,
                family,
                chunk
                    .iter()
                    .map(|c| (&c.qualifier[..], c.ts_ms, &c.value[..])),
            )?;
            if self.queued_ts.is_some() {
                self.leases
                    .push(self.store.inner.covering(table_index, lo, hi)?);
                let newest = &self.leases[self.leases.len() - 1].keyspace;
                self.batch
                    .insert(newest, self.key.as_slice(), self.value.as_slice());
                continue;
            }
            self.make_room(table_index, Slot::stored_bytes(&self.key, &self.value))?;
            self.pending[table_index].push_stored(
                &self.key,
                &self.value,
                (lo, hi),
                self.ingest_bytes,
            );
            if self.pending[table_index].bytes() >= self.ingest_bytes {
                self.pending[table_index].bulk = true;
                self.write_pending(table_index, self.ingest_bytes)?;
            }
        }
        Ok(())
    }

    /// Queues cells of families not packed into the table's buffer. A versioned family's cell
    /// is a version of its own ([`codec::encode_version_key`]), and so is every cell with
    /// `newest_timestamp_wins`: the stamp in the key orders a cell's writes as HBase does (the
    /// newest stamp wins, a later put of the same stamp replaces it) with no read before the
    /// write. Reads return a cell's newest versions up to its family's count; the versions past
    /// it are removed by compactions and [`crate::embedded::EmbeddedStore::purge_expired`].
    fn put_cells<'c>(
        &mut self,
        table_index: usize,
        table: &Table,
        row: &[u8],
        cells: impl Iterator<Item = &'c Cell>,
    ) -> Result<()> {
        let all_versions = self.queued_ts.is_some();
        for cell in cells {
            if all_versions || table.is_versioned(&cell.family) {
                codec::encode_version_key(
                    &mut self.key,
                    row,
                    &cell.family,
                    &cell.qualifier,
                    cell.ts_ms,
                );
            } else {
                codec::encode_key(&mut self.key, row, &cell.family, &cell.qualifier);
            }
            self.make_room(table_index, Slot::arena_bytes(&self.key, &cell.value))?;
            self.pending[table_index].push(&self.key, cell.ts_ms, &cell.value, self.ingest_bytes);
        }
        if self.pending[table_index].bytes() >= self.ingest_bytes {
            self.pending[table_index].bulk = true;
            self.write_pending(table_index, self.ingest_bytes)?;
        }
        Ok(())
    }

    /// Queues `keys` ([`TableWriter::write_keys`]): in a family whose cells are each stored as
    /// a version ([`super::delete::removes_by_key`]), each entry is encoded straight into the
    /// table's buffer, a put as [`EmbeddedWriter::put_cells`] queues its cell and a delete as
    /// [`EmbeddedWriter::delete_version`] queues its removal, in the batch's order; checked
    /// once per batch and once per row rather than per mutation. In another family, as its
    /// mutations.
    pub(super) fn write_key_batch(&mut self, keys: &KeyBatch) -> Result<()> {
        if keys.is_empty() {
            return Ok(());
        }
        let store = self.store.clone();
        let (table_index, table) = store.inner.table(keys.table())?;
        let (family, qualifier, value) = (keys.family(), keys.qualifier(), keys.value());
        if table.family(family.as_bytes()).is_none() {
            return Err(super::no_family(table, family));
        }
        if !super::delete::removes_by_key(table, family, self.queued_ts.is_some()) {
            return self.write(keys.to_mutations());
        }
        super::check_value_len(table, value)?;
        for (row, _, _) in keys.iter() {
            codec::check_row(table.name, row)?;
            codec::check_version_key_len(table.name, row, family, qualifier)?;
        }
        for (row, ts_ms, put) in keys.iter() {
            codec::encode_version_key(&mut self.key, row, family, qualifier, ts_ms);
            if put {
                self.make_room(table_index, Slot::arena_bytes(&self.key, value))?;
                self.pending[table_index].push(&self.key, ts_ms, value, self.ingest_bytes);
            } else {
                self.make_room(table_index, self.key.len())?;
                self.pending[table_index].push_removal(&self.key, self.ingest_bytes);
            }
            if self.pending[table_index].bytes() >= self.ingest_bytes {
                self.pending[table_index].bulk = true;
                self.write_pending(table_index, self.ingest_bytes)?;
            }
        }
        Ok(())
    }
}

/// Whether a qualifier is one of `apart` ([`crate::schema::FamilySpec::packed_apart`]).
pub(super) fn is_apart(apart: &'static [&'static str]) -> impl Fn(&[u8]) -> bool + Copy {
    move |qualifier| apart.iter().any(|a| a.as_bytes() == qualifier)
}
