//! Row and column deletes: the cells stamped at most the delete's stamp removed from every
//! generation, a packed family's survivors written back.

use super::put::is_apart;
use super::read_before::{Visible, VisibleCell};
use super::EmbeddedWriter;
use crate::embedded::codec::{self, Column};
use crate::embedded::generations::{self, Lease};
use crate::embedded::store::Table;
use crate::Result;
use fjall::Slice;

/// The row a delete removes cells of: its table, and the table's generations it removes them
/// from.
struct RowDelete<'a> {
    table_index: usize,
    table: &'a Table,
    row: &'a [u8],
    generations: Vec<Lease>,
}

impl EmbeddedWriter {
    /// Removes the row's cells stamped at most `ts_ms`. HBase would instead write a delete
    /// marker that also hides later puts stamped at most `ts_ms` until a major compaction;
    /// hourglass never puts a cell it has deleted, so removing what exists is the same.
    pub(super) fn delete_row(
        &mut self,
        table_index: usize,
        table: &Table,
        row: &[u8],
        ts_ms: i64,
    ) -> Result<()> {
        // The scan below reads written cells only, so write the puts buffered before it; the
        // removals are committed at once, so that a later put of the row is not removed.
        self.write_all()?;
        self.remove_row(table_index, table, row, ts_ms)?;
        self.commit()
    }

    /// What [`EmbeddedWriter::delete_row`] does between writing what the writer buffers and
    /// committing: the row's cells stamped at most `ts_ms` found (among the written ones) and
    /// their removal queued in the batch.
    pub(super) fn remove_row(
        &mut self,
        table_index: usize,
        table: &Table,
        row: &[u8],
        ts_ms: i64,
    ) -> Result<()> {
        codec::encode_row_prefix(&mut self.key, row);
        let at = RowDelete {
            table_index,
            table,
            row,
            generations: table.leases(),
        };
        // Per packed family: its stored key-values in the row, and its qualifiers' visible cells.
        let mut packed: Vec<(&str, Vec<Slice>, Visible)> = Vec::new();
        for item in table.prefix(&self.key, None) {
            let (key, stored) = item.map_err(|e| self.store.inner.fjall_error("delete row", e))?;
            let corrupt = || self.store.inner.corrupt(table.name, &key);
            let (_, family, column) = codec::decode_key(&key).ok_or_else(corrupt)?;
            if let Some(family) = table.packed.iter().find(|f| f.as_bytes() == family) {
                if packed.last().is_none_or(|(f, _, _)| f != family) {
                    packed.push((family, Vec::new(), Visible::default()));
                }
                let (_, keys, visible) = packed.last_mut().expect("pushed above");
                visible.add(column, &stored).ok_or_else(corrupt)?;
                keys.push(key);
                continue;
            }
            let Some(ts) = codec::decode_ts(&stored) else {
                return Err(corrupt());
            };
            if ts <= ts_ms {
                generations::remove_everywhere(&mut self.batch, &at.generations, &key);
            }
        }
        for (family, keys, visible) in packed {
            self.delete_packed(&at, family, &keys, visible, |_, cell| {
                cell.hidden || cell.ts <= ts_ms
            })?;
        }
        // Committed by the caller before any later put: a later put of a removed key must not
        // share its batch.
        self.leases.extend(at.generations);
        Ok(())
    }

    /// Removes the version of `family:qualifier` in `row` stamped `ts_ms`. In a family whose
    /// cells are stored as versions ([`removes_by_key`]) that is one key, whose removal is
    /// queued in the table's buffer, ordered with its puts and written with them; in another
    /// family, the column is read as [`EmbeddedWriter::delete_column`] does.
    pub(super) fn delete_version(
        &mut self,
        table_index: usize,
        table: &Table,
        row: &[u8],
        family: &str,
        qualifier: &[u8],
        ts_ms: i64,
    ) -> Result<()> {
        if !removes_by_key(table, family, self.queued_ts.is_some()) {
            return self
                .delete_column(table_index, table, row, family, qualifier, |ts| ts == ts_ms);
        }
        codec::encode_version_key(&mut self.key, row, family, qualifier, ts_ms);
        self.make_room(table_index, self.key.len())?;
        let pending = &mut self.pending[table_index];
        pending.push_removal(&self.key, self.ingest_bytes);
        if pending.bytes() >= self.ingest_bytes {
            pending.bulk = true;
            self.write_pending(table_index, self.ingest_bytes)?;
        }
        Ok(())
    }

    /// Removes the versions of the column `family:qualifier` of `row` whose stamps `goes`
    /// picks (`DeleteColumn`: those at most its bound), as [`EmbeddedWriter::delete_row`]
    /// removes a row's cells (no marker: a later put of the column shows whatever its stamp).
    ///
    /// How each layout loses one column:
    /// - a family of single cells: the cell's key is removed from every generation;
    /// - a versioned family ([`codec::encode_version_key`]): each version's key stamped at most
    ///   `ts_ms`, found by the column's key prefix;
    /// - a packed family: a put's cells share one key-value, so the column cannot be removed on
    ///   its own. The row's key-values of the family are removed and its visible cells but the
    ///   deleted one written back as one put under a new seq, as a row delete does with the
    ///   cells it keeps. Reads and puts stay as they are (no per-column marker for every read
    ///   to consult, no read before a put), at the price of rewriting the family's row on a
    ///   column delete, which only purges do.
    pub(super) fn delete_column(
        &mut self,
        table_index: usize,
        table: &Table,
        row: &[u8],
        family: &str,
        qualifier: &[u8],
        goes: impl Fn(i64) -> bool,
    ) -> Result<()> {
        self.write_all()?;
        let packed = table.is_packed(family);
        // `row 0x00 family`: the family's keys, and those of longer families, skipped below.
        codec::encode_row_prefix(&mut self.key, row);
        self.key.extend_from_slice(family.as_bytes());
        let at = RowDelete {
            table_index,
            table,
            row,
            generations: table.leases(),
        };
        let (mut keys, mut visible) = (Vec::new(), Visible::default());
        for item in table.prefix(&self.key, None) {
            let (key, stored) =
                item.map_err(|e| self.store.inner.fjall_error("delete column", e))?;
            let corrupt = || self.store.inner.corrupt(table.name, &key);
            let (_, f, column) = codec::decode_key(&key).ok_or_else(corrupt)?;
            if f != family.as_bytes() {
                continue;
            }
            if packed {
                visible.add(column, &stored).ok_or_else(corrupt)?;
                keys.push(key);
                continue;
            }
            let ts = match column {
                Column::Cell(q) if q == qualifier => {
                    codec::decode_ts(&stored).ok_or_else(corrupt)?
                }
                // The key's stamp: a compaction may have expired the value's.
                Column::Version(q, ts) if q == qualifier => ts,
                _ => continue,
            };
            if goes(ts) {
                generations::remove_everywhere(&mut self.batch, &at.generations, &key);
            }
        }
        let deleted = visible
            .0
            .get(qualifier)
            .is_some_and(|cell| !cell.hidden && goes(cell.ts));
        if deleted {
            self.delete_packed(&at, family, &keys, visible, |q, cell| {
                cell.hidden || (q == qualifier && goes(cell.ts))
            })?;
        }
        // Committed at once in either mode: a put of the column later in the same batch would
        // be a removal and an insert of one key, whose order a batch does not keep.
        self.leases.extend(at.generations);
        self.commit()
    }

    /// Deletes from `at`'s row a packed family's visible cells that `goes` picks (by qualifier),
    /// given the family's stored `keys` there and their `visible` cells: when any goes, every
    /// key is removed and the visible cells that stay are written back as one put, so no cell
    /// an earlier put hid shows again. `goes` must pick the hidden cells (of a put a compaction
    /// expired): with every key removed there is nothing left for them to hide.
    fn delete_packed(
        &mut self,
        at: &RowDelete<'_>,
        family: &str,
        keys: &[Slice],
        visible: Visible,
        goes: impl Fn(&[u8], &VisibleCell) -> bool,
    ) -> Result<()> {
        if !visible.0.iter().any(|(q, cell)| goes(q, cell)) {
            return Ok(());
        }
        // The row's series point is one of the family's key-values: it goes with them.
        if let Some(runs) = at.table.series.as_ref() {
            if runs.layout.family == family {
                runs.remove_point(at.row, &self.store.inner.db, &mut self.batch)
                    .map_err(|e| self.store.inner.fjall_error("delete", e))?;
            }
        }
        let mut kept: Vec<(Vec<u8>, VisibleCell)> = Vec::new();
        for (qualifier, cell) in visible.0 {
            if !goes(&qualifier, &cell) {
                kept.push((qualifier, cell));
            }
        }
        // Written back as a put is, in the same key-values.
        let apart = is_apart(at.table.packed_apart(family));
        codec::apart_last(&mut kept, |(q, _)| q, apart);
        // `(keyspace, key)` of each key-value written back.
        let mut written: Vec<(String, Vec<u8>)> = Vec::new();
        for chunk in codec::packed_chunks(&kept, |(q, _)| q, apart) {
            let (lo, hi) = self.encode_packed(
                at.row,
                family,
                chunk.iter().map(|(q, c)| (&q[..], c.ts, &c.value[..])),
            )?;
            let lease = self.store.inner.covering(at.table_index, lo, hi)?;
            self.batch
                .insert(&lease.keyspace, self.key.as_slice(), self.value.as_slice());
            written.push((lease.keyspace.name().to_string(), self.key.clone()));
            self.leases.push(lease);
        }
        for key in keys {
            for generation in &at.generations {
                // A batch that removes and inserts one key in one keyspace does not say which
                // comes last: the insert replaces it there.
                let rewritten = written.iter().any(|(keyspace, written)| {
                    keyspace.as_str() == generation.keyspace.name().as_ref()
                        && key.as_ref() == written.as_slice()
                });
                if !rewritten {
                    self.batch.remove(&generation.keyspace, key.clone());
                }
            }
        }
        Ok(())
    }
}

/// Whether the embedded store keeps every cell of `family` as versions, each under a key of its
/// own holding its stamp: a versioned family not packed, or any family not packed with
/// `newest_timestamp_wins` (`all_versions`). A version's removal is then its key's.
pub(super) fn removes_by_key(table: &Table, family: &str, all_versions: bool) -> bool {
    !table.is_packed(family) && (all_versions || table.is_versioned(family))
}
