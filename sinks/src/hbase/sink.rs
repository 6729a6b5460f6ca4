//! The write side: mutations buffered per worker and sent as Thrift1 `mutateRowsTs` batches.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::schema::TableSpec;
use crate::table::{Cell, Mutation, TableWriter};
use hbase_thrift::hbase::{BatchMutation, Mutation as TMutation, THbaseSyncClient};

use super::client::{Connection, Thrift1};
use super::config::HbaseConfig;
use super::retry::retrying;

/// Bytes a cell costs on the wire beyond its column and value (Thrift field headers).
const CELL_OVERHEAD: usize = 16;
/// Bytes a row costs on the wire beyond its key.
const ROW_OVERHEAD: usize = 16;

/// Counters of what writers sent, shared by every writer of a job (all atomic).
#[derive(Debug, Default)]
pub struct WriterStats {
    /// `mutateRowsTs` calls that succeeded.
    pub calls: AtomicU64,
    /// Rows (`BatchMutation`s) in those calls.
    pub rows: AtomicU64,
    /// Cells in those calls.
    pub cells: AtomicU64,
    /// Approximate bytes in those calls.
    pub bytes: AtomicU64,
    /// Largest number of rows in one call.
    pub max_call_rows: AtomicU64,
    /// `deleteAllRowTs` calls that succeeded.
    pub deletes: AtomicU64,
    /// Calls that failed with a retriable error and were retried.
    pub retries: AtomicU64,
}

impl WriterStats {
    fn record_call(&self, call: &PlannedCall) {
        let rows = call.batches.len() as u64;
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.rows.fetch_add(rows, Ordering::Relaxed);
        self.cells.fetch_add(call.cells as u64, Ordering::Relaxed);
        self.bytes.fetch_add(call.bytes as u64, Ordering::Relaxed);
        self.max_call_rows.fetch_max(rows, Ordering::Relaxed);
    }
}

/// One row's changes at one timestamp: families whose cells up to the timestamp are deleted,
/// and `family:qualifier` columns put with their values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RowPut {
    pub(crate) row: Vec<u8>,
    pub(crate) delete_families: Vec<Vec<u8>>,
    pub(crate) columns: Vec<(Vec<u8>, Vec<u8>)>,
}

/// The puts of one table at one timestamp, merged per row: one future `mutateRowsTs` call.
#[derive(Debug, Default)]
struct Group {
    rows: Vec<RowPut>,
    index: HashMap<Vec<u8>, usize>,
    cells: usize,
    bytes: usize,
}

impl Group {
    /// The entry of `row`, added (and its key counted in `bytes`) if it is new.
    fn row(&mut self, row: &[u8]) -> &mut RowPut {
        let i = match self.index.get(row) {
            Some(&i) => i,
            None => {
                self.index.insert(row.to_vec(), self.rows.len());
                self.rows.push(RowPut {
                    row: row.to_vec(),
                    delete_families: Vec::new(),
                    columns: Vec::new(),
                });
                self.bytes += row.len() + ROW_OVERHEAD;
                self.rows.len() - 1
            }
        };
        &mut self.rows[i]
    }
}

/// A `mutateRowsTs` call ready to be sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PlannedCall {
    pub(crate) table: &'static str,
    pub(crate) ts_ms: i64,
    pub(crate) batches: Vec<RowPut>,
    pub(crate) cells: usize,
    pub(crate) bytes: usize,
}

impl PlannedCall {
    fn to_thrift(&self) -> Vec<BatchMutation> {
        self.batches
            .iter()
            .map(|r| {
                // A family without qualifier deletes the family's cells up to the call's
                // timestamp (Thrift1 turns it into `Delete.addFamily(family, ts)`).
                let deletes = r
                    .delete_families
                    .iter()
                    .map(|family| TMutation::new(true, family.clone(), None, true));
                let puts = r.columns.iter().map(|(column, value)| {
                    TMutation::new(false, column.clone(), value.clone(), true)
                });
                let mutations: Vec<TMutation> = deletes.chain(puts).collect();
                BatchMutation::new(r.row.clone(), mutations)
            })
            .collect()
    }
}

/// Puts waiting to be sent, grouped by table and cell timestamp because Thrift1's
/// `mutateRowsTs` takes one timestamp per call.
///
/// Within a group, puts to the same row are merged into one row (one `BatchMutation`); a second
/// put of the same column replaces the first one's value, which is what HBase does with two
/// puts of one cell at one timestamp. Nothing else is dropped.
#[derive(Debug)]
pub(crate) struct Buffer {
    groups: BTreeMap<(&'static str, i64), Group>,
    max_rows: usize,
    max_bytes: usize,
    max_total_bytes: usize,
    total_bytes: usize,
}

impl Buffer {
    /// A buffer whose calls hold at most `max_rows` rows and about `max_bytes` bytes, and which
    /// asks to be drained once it holds `max_total_bytes`.
    pub(crate) fn new(max_rows: usize, max_bytes: usize, max_total_bytes: usize) -> Self {
        Buffer {
            groups: BTreeMap::new(),
            max_rows: max_rows.max(1),
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

    /// Queues a put. Returns the calls that became full (at `max_rows` rows or `max_bytes`
    /// bytes), to be sent now.
    ///
    /// Fullness is checked once the whole put is queued, so the put's cells of one timestamp
    /// always travel in one call, as one `BatchMutation`: HBase applies them as one atomic `Put`.
    pub(crate) fn push(
        &mut self,
        table: &'static str,
        row: &[u8],
        cells: Vec<Cell>,
    ) -> Vec<PlannedCall> {
        let mut touched: Vec<(&'static str, i64)> = Vec::new();
        for cell in cells {
            let key = (table, cell.ts_ms);
            if !touched.contains(&key) {
                touched.push(key);
            }
            let group = self.groups.entry(key).or_default();
            let mut column = Vec::with_capacity(cell.family.len() + 1 + cell.qualifier.len());
            column.extend_from_slice(cell.family.as_bytes());
            column.push(b':');
            column.extend_from_slice(&cell.qualifier);
            let added = column.len() + cell.value.len() + CELL_OVERHEAD;
            let before = group.bytes;
            let put = group.row(row);
            let replaced = match put.columns.iter_mut().find(|(c, _)| *c == column) {
                Some(slot) => {
                    let old = slot.0.len() + slot.1.len() + CELL_OVERHEAD;
                    slot.1 = cell.value;
                    Some(old)
                }
                None => {
                    put.columns.push((column, cell.value));
                    None
                }
            };
            if let Some(old) = replaced {
                group.bytes -= old;
                group.cells -= 1;
            }
            group.cells += 1;
            group.bytes += added;
            self.total_bytes = self.total_bytes + group.bytes - before;
        }
        touched.retain(|key| {
            self.groups
                .get(key)
                .is_some_and(|g| g.rows.len() >= self.max_rows || g.bytes >= self.max_bytes)
        });
        touched.into_iter().map(|key| self.take(key)).collect()
    }

    /// Queues the deletion of `families` of `row` up to `ts_ms`. Returns the call that became
    /// full, if any, to be sent now.
    pub(crate) fn push_delete(
        &mut self,
        table: &'static str,
        row: &[u8],
        ts_ms: i64,
        families: &[&str],
    ) -> Option<PlannedCall> {
        let key = (table, ts_ms);
        let group = self.groups.entry(key).or_default();
        let before = group.bytes;
        let delete = group.row(row);
        let mut added = 0;
        for family in families {
            if !delete
                .delete_families
                .iter()
                .any(|f| f == family.as_bytes())
            {
                delete.delete_families.push(family.as_bytes().to_vec());
                added += family.len() + CELL_OVERHEAD;
            }
        }
        group.bytes += added;
        self.total_bytes = self.total_bytes + group.bytes - before;
        (group.rows.len() >= self.max_rows || group.bytes >= self.max_bytes).then(|| self.take(key))
    }

    /// Whether the buffer holds `max_total_bytes` or more and should be drained.
    pub(crate) fn over_budget(&self) -> bool {
        self.total_bytes >= self.max_total_bytes
    }

    fn take(&mut self, key: (&'static str, i64)) -> PlannedCall {
        let group = self.groups.remove(&key).unwrap_or_default();
        self.total_bytes -= group.bytes;
        PlannedCall {
            table: key.0,
            ts_ms: key.1,
            batches: group.rows,
            cells: group.cells,
            bytes: group.bytes,
        }
    }

    /// Removes and returns every queued call, ordered by table then timestamp.
    pub(crate) fn drain(&mut self) -> Vec<PlannedCall> {
        let keys: Vec<_> = self.groups.keys().copied().collect();
        keys.into_iter().map(|k| self.take(k)).collect()
    }
}

/// Writes mutations for one worker to HBase through the Thrift1 gateway.
///
/// Puts are buffered and grouped by table and cell timestamp; each group is sent as one
/// `mutateRowsTs` call when it reaches [`HbaseConfig::batch_rows`] rows (default 1000) or
/// [`HbaseConfig::batch_bytes`] bytes (default 4 MiB), and every group is sent when the buffer
/// holds four times `batch_bytes` or on [`TableWriter::flush`]. The dataflow flushes when its
/// frontier advances and at least every second. A `DeleteRow` on a table given to
/// [`HbaseWriter::for_tables`] is buffered as family deletes at its timestamp; on another table
/// it sends the buffer, then `deleteAllRowTs`.
///
/// The connection is opened on first use and replaced after failures. Retriable failures
/// (see [`super::is_retriable`]) are retried with capped exponential backoff per
/// [`HbaseConfig::retry`], forever by default: the worker blocks meanwhile, which slows the
/// whole pipeline down instead of buffering without bound. Every call is idempotent (cell
/// timestamps are set by hourglass), so a call that timed out may safely be sent again.
pub struct HbaseWriter {
    cfg: HbaseConfig,
    conn: Connection<Thrift1>,
    buffer: Buffer,
    stats: Arc<WriterStats>,
    /// Column families of the tables named in [`HbaseWriter::for_tables`].
    families: HashMap<&'static str, Vec<&'static str>>,
}

impl fmt::Debug for HbaseWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HbaseWriter")
            .field("thrift1", &self.cfg.thrift1)
            .field("buffered_bytes", &self.buffer.total_bytes())
            .finish_non_exhaustive()
    }
}

impl HbaseWriter {
    /// A writer for the gateway of `cfg`; it connects on its first call.
    pub fn new(cfg: &HbaseConfig) -> Self {
        Self::with_stats(cfg, Arc::new(WriterStats::default()))
    }

    /// A writer that adds what it sends to `stats` (shared by the writers of a job).
    pub fn with_stats(cfg: &HbaseConfig, stats: Arc<WriterStats>) -> Self {
        HbaseWriter {
            conn: Connection::new(&cfg.thrift1, cfg),
            buffer: Buffer::new(cfg.batch_rows, cfg.batch_bytes, cfg.batch_bytes * 4),
            cfg: cfg.clone(),
            stats,
            families: HashMap::new(),
        }
    }

    /// Tells the writer the column families of `tables`, so that a `DeleteRow` on one of them
    /// is batched with the puts (as family deletes in `mutateRowsTs`) instead of costing a
    /// `deleteAllRowTs` call and a flush of the buffer.
    #[must_use]
    pub fn for_tables(mut self, tables: &[TableSpec]) -> Self {
        for t in tables {
            self.families
                .insert(t.name, t.families.iter().map(|f| f.name).collect());
        }
        self
    }

    fn send(&mut self, call: &PlannedCall) -> super::Result<()> {
        let batches = call.to_thrift();
        let (conn, stats) = (&mut self.conn, &self.stats);
        let what = format!("mutateRowsTs of {} rows to {}", batches.len(), call.table);
        let mut attempt = 0;
        retrying(&self.cfg.retry, &what, || {
            attempt += 1;
            if attempt > 1 {
                stats.retries.fetch_add(1, Ordering::Relaxed);
            }
            conn.call("mutateRowsTs", call.table, |c| {
                c.mutate_rows_ts(
                    call.table.as_bytes().to_vec(),
                    batches.clone(),
                    call.ts_ms,
                    BTreeMap::new(),
                )
            })
        })?;
        self.stats.record_call(call);
        tracing::trace!(
            table = call.table,
            ts_ms = call.ts_ms,
            rows = call.batches.len(),
            cells = call.cells,
            "mutateRowsTs"
        );
        Ok(())
    }

    fn send_all(&mut self, calls: Vec<PlannedCall>) -> super::Result<()> {
        for call in calls {
            self.send(&call)?;
        }
        Ok(())
    }

    fn delete_row(&mut self, table: &'static str, row: &[u8], ts_ms: i64) -> super::Result<()> {
        let (conn, stats) = (&mut self.conn, &self.stats);
        let mut attempt = 0;
        retrying(
            &self.cfg.retry,
            &format!("deleteAllRowTs on {table}"),
            || {
                attempt += 1;
                if attempt > 1 {
                    stats.retries.fetch_add(1, Ordering::Relaxed);
                }
                conn.call("deleteAllRowTs", table, |c| {
                    c.delete_all_row_ts(
                        table.as_bytes().to_vec(),
                        row.to_vec(),
                        ts_ms,
                        BTreeMap::new(),
                    )
                })
            },
        )?;
        self.stats.deletes.fetch_add(1, Ordering::Relaxed);
        tracing::trace!(table, ts_ms, "deleteAllRowTs");
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
            match mutation {
                Mutation::Put { table, row, cells } => {
                    let full = self.buffer.push(table, &row, cells);
                    self.send_all(full)?;
                    if self.buffer.over_budget() {
                        let all = self.buffer.drain();
                        self.send_all(all)?;
                    }
                }
                Mutation::DeleteRow { table, row, ts_ms } => {
                    // In HBase a delete hides the cells stamped at most `ts_ms` whenever they
                    // were put, so it may travel in the buffer like a put.
                    if let Some(families) = self.families.get(table) {
                        let full = self.buffer.push_delete(table, &row, ts_ms, families);
                        self.send_all(full.into_iter().collect())?;
                    } else {
                        let all = self.buffer.drain();
                        self.send_all(all)?;
                        self.delete_row(table, &row, ts_ms)?;
                    }
                }
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
