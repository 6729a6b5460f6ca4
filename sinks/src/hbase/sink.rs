//! The write side: mutations buffered per worker and sent as Thrift2 `putMultiple` and
//! `deleteMultiple` batches, one per table per flush when they fit.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::schema::TableSpec;
use crate::table::{Cell, Mutation, TableWriter};

use super::client::{Connection, Thrift2};
use super::config::HbaseConfig;
use super::retry::retrying;
use super::thrift2::{
    put_multiple_ref, TColumn, TColumnValue, TDelete, TDeleteType, TIOError, TPut,
    TTHBaseServiceSyncClient,
};
use super::Error;

/// Bytes a cell costs on the wire beyond its family, qualifier and value (Thrift field headers
/// and its timestamp).
const CELL_OVERHEAD: usize = 24;
/// Bytes a row costs on the wire beyond its key.
const ROW_OVERHEAD: usize = 16;

/// Counters of what writers sent, shared by every writer of a job (all atomic).
#[derive(Debug, Default)]
pub struct WriterStats {
    /// Write calls that succeeded (`putMultiple` and `deleteMultiple`).
    pub calls: AtomicU64,
    /// Rows (`TPut`s and `TDelete`s) in those calls.
    pub rows: AtomicU64,
    /// Cells put by those calls (a cell carries its own timestamp).
    pub cells: AtomicU64,
    /// Approximate bytes in those calls.
    pub bytes: AtomicU64,
    /// Largest number of rows in one call.
    pub max_call_rows: AtomicU64,
    /// Largest number of cells in one call.
    pub max_call_cells: AtomicU64,
    /// Rows deleted (`TDelete`s in `deleteMultiple` calls that succeeded).
    pub deletes: AtomicU64,
    /// Calls that failed with a retriable error and were retried.
    pub retries: AtomicU64,
}

impl WriterStats {
    fn record_call(&self, rows: usize, cells: usize, bytes: usize) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.rows.fetch_add(rows as u64, Ordering::Relaxed);
        self.cells.fetch_add(cells as u64, Ordering::Relaxed);
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
        self.max_call_rows.fetch_max(rows as u64, Ordering::Relaxed);
        self.max_call_cells
            .fetch_max(cells as u64, Ordering::Relaxed);
    }
}

/// The puts and deletes of one table, merged per row: one future `putMultiple` call and, if
/// there are deletes, one `deleteMultiple` call.
#[derive(Debug, Default)]
struct Group {
    puts: Vec<TPut>,
    put_index: HashMap<Vec<u8>, usize>,
    deletes: Vec<TDelete>,
    delete_index: HashMap<Vec<u8>, usize>,
    /// Per row, the `TDelete` of `deletes` that holds its column deletes.
    column_delete_index: HashMap<Vec<u8>, usize>,
    cells: usize,
    bytes: usize,
}

impl Group {
    fn rows(&self) -> usize {
        self.puts.len() + self.deletes.len()
    }
}

/// A batch of one table ready to be sent: a `putMultiple` call (if `puts` is not empty), then a
/// `deleteMultiple` call (if `deletes` is not empty). A delete hides the cells stamped at most
/// its timestamp whenever they were put, so the order of the two calls does not matter.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct PlannedCall {
    pub(crate) table: &'static str,
    pub(crate) puts: Vec<TPut>,
    pub(crate) deletes: Vec<TDelete>,
    pub(crate) cells: usize,
    pub(crate) bytes: usize,
}

fn same_cell(a: &TColumnValue, b: &TColumnValue) -> bool {
    a.timestamp == b.timestamp && a.qualifier == b.qualifier && a.family == b.family
}

fn cell_bytes(c: &TColumnValue) -> usize {
    c.family.len() + c.qualifier.len() + c.value.len() + CELL_OVERHEAD
}

/// Puts and deletes waiting to be sent, grouped by table: Thrift2's `TColumnValue` carries a
/// timestamp per cell, so cells of any timestamps share a call.
///
/// Within a group, puts to the same row are merged into one row (one `TPut`); a second put of
/// the same cell (family, qualifier and timestamp) replaces the first one's value, which is what
/// HBase does with two puts of one cell at one timestamp. Nothing else is dropped. Deletes of a
/// row are merged into one `TDelete` at the latest timestamp asked, which hides everything the
/// earlier ones would.
#[derive(Debug)]
pub(crate) struct Buffer {
    groups: BTreeMap<&'static str, Group>,
    max_rows: usize,
    max_cells: usize,
    max_bytes: usize,
    max_total_bytes: usize,
    total_bytes: usize,
}

impl Buffer {
    /// A buffer whose calls hold at most `max_rows` rows, `max_cells` cells and about
    /// `max_bytes` bytes, and which asks to be drained once it holds `max_total_bytes`.
    pub(crate) fn new(
        max_rows: usize,
        max_cells: usize,
        max_bytes: usize,
        max_total_bytes: usize,
    ) -> Self {
        Buffer {
            groups: BTreeMap::new(),
            max_rows: max_rows.max(1),
            max_cells: max_cells.max(1),
            max_bytes: max_bytes.max(1),
            max_total_bytes: max_total_bytes.max(1),
            total_bytes: 0,
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// Approximate bytes buffered.
    pub(crate) fn total_bytes(&self) -> usize {
        self.total_bytes
    }

    fn full(&self, table: &'static str) -> bool {
        self.groups.get(table).is_some_and(|g| {
            g.rows() >= self.max_rows || g.cells >= self.max_cells || g.bytes >= self.max_bytes
        })
    }

    /// Queues a put. Returns the call that became full (at `max_rows` rows, `max_cells` cells
    /// or `max_bytes` bytes), to be sent now.
    ///
    /// Fullness is checked once the whole put is queued, so a put's cells always travel in one
    /// call, as one `TPut`: HBase applies them as one atomic `Put`, whatever their timestamps.
    pub(crate) fn push(
        &mut self,
        table: &'static str,
        row: Vec<u8>,
        cells: Vec<Cell>,
    ) -> Option<PlannedCall> {
        let group = self.groups.entry(table).or_default();
        let before = group.bytes;
        let put = match group.put_index.get(&row) {
            Some(&i) => &mut group.puts[i],
            None => {
                group.bytes += row.len() + ROW_OVERHEAD;
                group.put_index.insert(row.clone(), group.puts.len());
                group
                    .puts
                    .push(TPut::new(row, Vec::with_capacity(cells.len()), None));
                group.puts.last_mut().expect("just pushed")
            }
        };
        // Only cells already in the row can be replaced: a put's own cells are distinct in
        // what hourglass writes, and HBase keeps the last of two equal cells of one `Put`.
        let earlier = put.column_values.len();
        for cell in cells {
            let value = TColumnValue::new(
                cell.family.into_bytes(),
                cell.qualifier,
                cell.value,
                cell.ts_ms,
            );
            group.bytes += cell_bytes(&value);
            match put.column_values[..earlier]
                .iter_mut()
                .find(|c| same_cell(c, &value))
            {
                Some(old) => {
                    group.bytes -= cell_bytes(old);
                    *old = value;
                }
                None => {
                    put.column_values.push(value);
                    group.cells += 1;
                }
            }
        }
        self.total_bytes = self.total_bytes + group.bytes - before;
        self.full(table).then(|| self.take(table))
    }

    /// Queues the deletion of `row`'s cells stamped at most `ts_ms`: of `families` if given,
    /// else of the whole row. Returns the call that became full, if any, to be sent now.
    pub(crate) fn push_delete(
        &mut self,
        table: &'static str,
        row: Vec<u8>,
        ts_ms: i64,
        families: Option<&[&str]>,
    ) -> Option<PlannedCall> {
        let group = self.groups.entry(table).or_default();
        let before = group.bytes;
        let delete = |row: Vec<u8>| match families {
            // A family without qualifier becomes `Delete.addFamily(family, ts)`.
            Some(families) => TDelete::new(
                row,
                families
                    .iter()
                    .map(|f| TColumn::new(f.as_bytes().to_vec(), None, ts_ms))
                    .collect::<Vec<_>>(),
                None,
                TDeleteType::DELETE_FAMILY,
            ),
            // No columns: `new Delete(row, ts)`, every family, as Thrift1's `deleteAllRowTs`.
            None => TDelete::new(row, None, ts_ms, None),
        };
        match group.delete_index.get(&row) {
            Some(&i) => {
                let latest = delete(row);
                let old = &mut group.deletes[i];
                if delete_ts(&latest) > delete_ts(old) {
                    *old = latest;
                }
            }
            None => {
                let tdelete = delete(row.clone());
                group.bytes += row.len()
                    + ROW_OVERHEAD
                    + families.map_or(0, |f| f.iter().map(|f| f.len() + CELL_OVERHEAD).sum());
                group.delete_index.insert(row, group.deletes.len());
                group.deletes.push(tdelete);
            }
        }
        self.total_bytes = self.total_bytes + group.bytes - before;
        self.full(table).then(|| self.take(table))
    }

    /// Queues the deletion of the versions of `family:qualifier` in `row` stamped at most
    /// `ts_ms` (`Delete.addColumns`). Returns the call that became full, if any, to be sent now.
    ///
    /// A row's column deletes share one `TDelete` of type `DELETE_COLUMNS`, each column with
    /// its own stamp; a row delete of the same row is another `TDelete` of the same call, which
    /// HBase applies as well (deletes commute).
    pub(crate) fn push_delete_column(
        &mut self,
        table: &'static str,
        row: Vec<u8>,
        family: String,
        qualifier: Vec<u8>,
        ts_ms: i64,
    ) -> Option<PlannedCall> {
        let group = self.groups.entry(table).or_default();
        let before = group.bytes;
        group.bytes += family.len() + qualifier.len() + CELL_OVERHEAD;
        let column = TColumn::new(family.into_bytes(), qualifier, ts_ms);
        match group.column_delete_index.get(&row) {
            Some(&i) => group.deletes[i]
                .columns
                .get_or_insert_with(Vec::new)
                .push(column),
            None => {
                group.bytes += row.len() + ROW_OVERHEAD;
                group
                    .column_delete_index
                    .insert(row.clone(), group.deletes.len());
                group.deletes.push(TDelete::new(
                    row,
                    vec![column],
                    None,
                    TDeleteType::DELETE_COLUMNS,
                ));
            }
        }
        self.total_bytes = self.total_bytes + group.bytes - before;
        self.full(table).then(|| self.take(table))
    }

    /// Queues the deletion of the one version of `family:qualifier` in `row` stamped `ts_ms`
    /// (`Delete.addColumn`): a `TDelete` of its own, since a `TDelete`'s type is every column's.
    /// Returns the call that became full, if any, to be sent now.
    pub(crate) fn push_delete_version(
        &mut self,
        table: &'static str,
        row: Vec<u8>,
        family: String,
        qualifier: Vec<u8>,
        ts_ms: i64,
    ) -> Option<PlannedCall> {
        let group = self.groups.entry(table).or_default();
        let before = group.bytes;
        group.bytes += row.len() + ROW_OVERHEAD + family.len() + qualifier.len() + CELL_OVERHEAD;
        let column = TColumn::new(family.into_bytes(), qualifier, ts_ms);
        group.deletes.push(TDelete::new(
            row,
            vec![column],
            None,
            TDeleteType::DELETE_COLUMN,
        ));
        self.total_bytes = self.total_bytes + group.bytes - before;
        self.full(table).then(|| self.take(table))
    }

    /// Whether the buffer holds `max_total_bytes` or more and should be drained.
    pub(crate) fn over_budget(&self) -> bool {
        self.total_bytes >= self.max_total_bytes
    }

    fn take(&mut self, table: &'static str) -> PlannedCall {
        let group = self.groups.remove(table).unwrap_or_default();
        self.total_bytes -= group.bytes;
        PlannedCall {
            table,
            puts: group.puts,
            deletes: group.deletes,
            cells: group.cells,
            bytes: group.bytes,
        }
    }

    /// Removes and returns every queued call, ordered by table.
    pub(crate) fn drain(&mut self) -> Vec<PlannedCall> {
        let tables: Vec<_> = self.groups.keys().copied().collect();
        tables.into_iter().map(|t| self.take(t)).collect()
    }
}

/// The timestamp up to which a delete hides cells.
fn delete_ts(d: &TDelete) -> i64 {
    d.timestamp
        .or_else(|| d.columns.as_ref()?.first()?.timestamp)
        .unwrap_or(i64::MIN)
}

/// Writes mutations for one worker to HBase through the Thrift2 gateway.
///
/// Puts and deletes are buffered and grouped by table; each group is sent as one `putMultiple`
/// call (and one `deleteMultiple` call if it holds deletes) when it reaches
/// [`HbaseConfig::batch_cells`] cells (default 10,000), [`HbaseConfig::batch_rows`] rows
/// (default 10,000) or [`HbaseConfig::batch_bytes`] bytes (default 4 MiB), and every group is
/// sent when the buffer holds four times `batch_bytes` or on [`TableWriter::flush`]. Each cell
/// carries its own timestamp, so narrow rows of many event-time seconds share one call: a flush
/// makes one call per table when its rows fit. The dataflow flushes when its frontier advances
/// and at least every second. A `DeleteRow` is buffered too: as family deletes at its
/// timestamp on a table given to [`HbaseWriter::for_tables`], as a whole-row delete on another;
/// so is a `DeleteColumn`, as a column delete of all versions (`DELETE_COLUMNS`).
///
/// The connection is opened on first use and replaced after failures. Retriable failures
/// (see [`super::is_retriable`]) are retried with capped exponential backoff per
/// [`HbaseConfig::retry`], forever by default: the worker blocks meanwhile, which slows the
/// whole pipeline down instead of buffering without bound. Every call is idempotent (cell
/// timestamps are set by hourglass), so a call that timed out may safely be sent again.
pub struct HbaseWriter {
    cfg: HbaseConfig,
    conn: Connection<Thrift2>,
    buffer: Buffer,
    stats: Arc<WriterStats>,
    /// Column families of the tables named in [`HbaseWriter::for_tables`].
    families: HashMap<&'static str, Vec<&'static str>>,
}

impl fmt::Debug for HbaseWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HbaseWriter")
            .field("thrift2", &self.cfg.thrift2)
            .field("buffered_bytes", &self.buffer.total_bytes())
            .finish_non_exhaustive()
    }
}

impl HbaseWriter {
    /// A writer for the Thrift2 gateway of `cfg`; it connects on its first call.
    pub fn new(cfg: &HbaseConfig) -> Self {
        Self::with_stats(cfg, Arc::new(WriterStats::default()))
    }

    /// A writer that adds what it sends to `stats` (shared by the writers of a job).
    pub fn with_stats(cfg: &HbaseConfig, stats: Arc<WriterStats>) -> Self {
        HbaseWriter {
            conn: Connection::new(&cfg.thrift2, cfg),
            buffer: Buffer::new(
                cfg.batch_rows,
                cfg.batch_cells,
                cfg.batch_bytes,
                cfg.batch_bytes * 4,
            ),
            cfg: cfg.clone(),
            stats,
            families: HashMap::new(),
        }
    }

    /// Tells the writer the column families of `tables`, so that a `DeleteRow` on one of them
    /// deletes those families (as the embedded store does) rather than the whole row.
    #[must_use]
    pub fn for_tables(mut self, tables: &[TableSpec]) -> Self {
        for t in tables {
            self.families
                .insert(t.name, t.families.iter().map(|f| f.name).collect());
        }
        self
    }

    /// Runs `call` with retries, counting them.
    fn retry<T>(
        cfg: &HbaseConfig,
        conn: &mut Connection<Thrift2>,
        stats: &WriterStats,
        what: &str,
        name: &'static str,
        table: &'static str,
        mut call: impl FnMut(&mut Thrift2) -> thrift::Result<T>,
    ) -> super::Result<T> {
        let mut attempt = 0;
        retrying(&cfg.retry, what, || {
            attempt += 1;
            if attempt > 1 {
                stats.retries.fetch_add(1, Ordering::Relaxed);
            }
            conn.call(name, table, &mut call).map_err(|e| match e {
                // The command to run names the gateway `--hbase` takes, not the write gateway.
                Error::TableNotFound { table, .. } => Error::TableNotFound {
                    table,
                    addr: cfg.thrift1.clone(),
                },
                e => e,
            })
        })
    }

    fn send(&mut self, call: &PlannedCall) -> super::Result<()> {
        let (cfg, conn, stats) = (&self.cfg, &mut self.conn, &*self.stats);
        let table = call.table;
        if !call.puts.is_empty() {
            let what = format!("putMultiple of {} rows to {table}", call.puts.len());
            // Sent from the buffer's own `TPut`s: a retry sends them again, nothing is copied.
            Self::retry(cfg, conn, stats, &what, "putMultiple", table, |c| {
                put_multiple_ref(c, table.as_bytes(), &call.puts)
            })?;
            stats.record_call(call.puts.len(), call.cells, call.bytes);
            tracing::trace!(
                table,
                rows = call.puts.len(),
                cells = call.cells,
                "putMultiple"
            );
        }
        if !call.deletes.is_empty() {
            let what = format!("deleteMultiple of {} rows on {table}", call.deletes.len());
            Self::retry(cfg, conn, stats, &what, "deleteMultiple", table, |c| {
                // Deletes are few (a device leaving a room), so the copy the generated call
                // needs costs little.
                let undone = c.delete_multiple(table.as_bytes().to_vec(), call.deletes.clone())?;
                if undone.is_empty() {
                    Ok(())
                } else {
                    Err(thrift::Error::User(Box::new(TIOError::new(
                        format!(
                            "the gateway left {} of {} deletes undone",
                            undone.len(),
                            call.deletes.len()
                        ),
                        true,
                    ))))
                }
            })?;
            stats.record_call(call.deletes.len(), 0, 0);
            stats
                .deletes
                .fetch_add(call.deletes.len() as u64, Ordering::Relaxed);
            tracing::trace!(table, rows = call.deletes.len(), "deleteMultiple");
        }
        Ok(())
    }

    fn send_all(&mut self, calls: impl IntoIterator<Item = PlannedCall>) -> super::Result<()> {
        for call in calls {
            self.send(&call)?;
        }
        Ok(())
    }
}

impl TableWriter for HbaseWriter {
    /// Queues `mutations`, sending every group that becomes full before returning.
    ///
    /// # Errors
    /// [`crate::Error::Hbase`], not retriable, for a failure retrying cannot cure (missing table
    /// or family, illegal argument) or after `retry.max_elapsed`; the job must stop.
    fn write(&mut self, mutations: Vec<Mutation>) -> crate::Result<()> {
        for mutation in mutations {
            let full = match mutation {
                Mutation::Put { table, row, cells } => self.buffer.push(table, row, cells),
                Mutation::DeleteRow { table, row, ts_ms } => {
                    // In HBase a delete hides the cells stamped at most `ts_ms` whenever they
                    // were put, so it may travel in the buffer like a put.
                    let families = self.families.get(table).map(Vec::as_slice);
                    self.buffer.push_delete(table, row, ts_ms, families)
                }
                Mutation::DeleteColumn {
                    table,
                    row,
                    family,
                    qualifier,
                    ts_ms,
                } => self
                    .buffer
                    .push_delete_column(table, row, family, qualifier, ts_ms),
                Mutation::DeleteVersion {
                    table,
                    row,
                    family,
                    qualifier,
                    ts_ms,
                } => self
                    .buffer
                    .push_delete_version(table, row, family, qualifier, ts_ms),
            };
            self.send_all(full)?;
            if self.buffer.over_budget() {
                let all = self.buffer.drain();
                self.send_all(all)?;
            }
        }
        Ok(())
    }

    /// Sends every buffered put and delete; they are durable in HBase (WAL) when this returns.
    ///
    /// # Errors
    /// As [`TableWriter::write`].
    fn flush(&mut self) -> crate::Result<()> {
        let all = self.buffer.drain();
        tracing::trace!(calls = all.len(), "flush");
        self.send_all(all)?;
        Ok(())
    }
}

impl Drop for HbaseWriter {
    fn drop(&mut self) {
        if !self.buffer.is_empty() {
            tracing::error!(
                bytes = self.buffer.total_bytes(),
                "HBase writer dropped with unflushed mutations; they are lost (call flush first)"
            );
        }
    }
}
