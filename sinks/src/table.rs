//! The table model shared by every backend: rows of cells addressed by family, qualifier and timestamp.
//!
//! This is HBase's data model reduced to what hourglass uses. The embedded store and the HBase
//! backend both implement [`TableWriter`] and [`TableReader`], so the dataflow and the dashboard
//! queries never know which one they talk to.

use crate::Result;

/// One cell to write or one cell read back.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Cell {
    /// Column family, e.g. `t`.
    pub family: String,
    /// Column qualifier (raw bytes; hourglass uses short ASCII names and decimal offsets).
    pub qualifier: Vec<u8>,
    /// Cell timestamp in milliseconds since the epoch. hourglass sets it to the event time.
    pub ts_ms: i64,
    /// Cell value.
    pub value: Vec<u8>,
}

/// A change to one row of one table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mutation {
    /// Put these cells into the row (each replaces the cell with the same family, qualifier and
    /// timestamp; with `VERSIONS => 1` the newest timestamp is the visible one).
    Put {
        /// Table name.
        table: &'static str,
        /// Row key.
        row: Vec<u8>,
        /// Cells to put.
        cells: Vec<Cell>,
    },
    /// Delete every cell of the row whose timestamp is at most `ts_ms` (HBase `deleteAllRowTs`).
    DeleteRow {
        /// Table name.
        table: &'static str,
        /// Row key.
        row: Vec<u8>,
        /// Upper bound (inclusive) of the deleted cells' timestamps.
        ts_ms: i64,
    },
    /// Delete every version of one column of the row whose timestamp is at most `ts_ms`, as
    /// HBase's `Delete.addColumns(family, qualifier, ts)`. Other columns of the row stay; a
    /// missing column or row is no error. A later put of the column stamped after `ts_ms` is
    /// visible. (HBase also hides a later put stamped at most `ts_ms` until a major compaction,
    /// the embedded store does not: write later puts with newer stamps.)
    DeleteColumn {
        /// Table name.
        table: &'static str,
        /// Row key.
        row: Vec<u8>,
        /// Column family; it must be one of the table's.
        family: String,
        /// Column qualifier.
        qualifier: Vec<u8>,
        /// Upper bound (inclusive) of the deleted versions' timestamps (`i64::MAX`: every
        /// version; HBase then takes its server's current time as the bound).
        ts_ms: i64,
    },
    /// Delete the one version of a column stamped exactly `ts_ms`, as HBase's
    /// `Delete.addColumn(family, qualifier, ts)`. A missing version, column or row is no error.
    ///
    /// Blind in both backends: HBase queues a marker, and the embedded store, where every cell
    /// of the family is stored as a version (a versioned family, or a writer with
    /// `newest_timestamp_wins`), removes the version's key in order with the writer's buffered
    /// puts, with no read and no commit of its own; in a family it stores as one cell
    /// (last write wins), it reads the cell and removes it if it carries that stamp, as
    /// `DeleteColumn` does. (HBase also hides a later put of that exact version until a major
    /// compaction; the embedded store does not.)
    DeleteVersion {
        /// Table name.
        table: &'static str,
        /// Row key.
        row: Vec<u8>,
        /// Column family; it must be one of the table's.
        family: String,
        /// Column qualifier.
        qualifier: Vec<u8>,
        /// The deleted version's timestamp.
        ts_ms: i64,
    },
}

impl Mutation {
    /// The table this mutation goes to.
    pub fn table(&self) -> &'static str {
        match self {
            Mutation::Put { table, .. }
            | Mutation::DeleteRow { table, .. }
            | Mutation::DeleteColumn { table, .. }
            | Mutation::DeleteVersion { table, .. } => table,
        }
    }

    /// The row key this mutation changes.
    pub fn row(&self) -> &[u8] {
        match self {
            Mutation::Put { row, .. }
            | Mutation::DeleteRow { row, .. }
            | Mutation::DeleteColumn { row, .. }
            | Mutation::DeleteVersion { row, .. } => row,
        }
    }

    /// Approximate size on the wire, used to bound write batches.
    pub fn approx_bytes(&self) -> usize {
        match self {
            Mutation::Put { row, cells, .. } => {
                row.len()
                    + cells
                        .iter()
                        .map(|c| c.family.len() + c.qualifier.len() + c.value.len() + 16)
                        .sum::<usize>()
            }
            Mutation::DeleteRow { row, .. } => row.len() + 16,
            Mutation::DeleteColumn {
                row,
                family,
                qualifier,
                ..
            }
            | Mutation::DeleteVersion {
                row,
                family,
                qualifier,
                ..
            } => row.len() + family.len() + qualifier.len() + 16,
        }
    }
}

/// A row read back from a table: its key and its visible cells ordered by family and qualifier.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Row {
    /// Row key.
    pub key: Vec<u8>,
    /// Visible cells, ordered by (family, qualifier), and a column's versions newest first, as
    /// HBase returns them: one per column unless a read asked for more
    /// ([`ScanSpec::max_versions`]) of a family that keeps more.
    pub cells: Vec<Cell>,
}

impl Row {
    /// The cell with this family and qualifier, if present: its newest version.
    pub fn cell(&self, family: &str, qualifier: &[u8]) -> Option<&Cell> {
        self.cells
            .iter()
            .find(|c| c.family == family && c.qualifier == qualifier)
    }

    /// The versions of the cell with this family and qualifier that the read returned, newest
    /// first.
    pub fn versions<'a>(
        &'a self,
        family: &'a str,
        qualifier: &'a [u8],
    ) -> impl Iterator<Item = &'a Cell> + 'a {
        self.cells
            .iter()
            .filter(move |c| c.family == family && c.qualifier == qualifier)
    }
}

/// A scan over an ordered range of row keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanSpec {
    /// First row key included.
    pub start: Vec<u8>,
    /// First row key excluded; empty means "to the end of the table".
    pub stop: Vec<u8>,
    /// Stop after this many rows (`None`: no limit).
    pub limit: Option<usize>,
    /// Only these cells of each row, as HBase's `Scan.addColumn` (empty: every cell). A row
    /// with none of them is not returned.
    pub columns: Vec<Column>,
    /// Only cells stamped within this range, as HBase's `Scan.setTimeRange` (`None`: any
    /// timestamp). A row with none is not returned. Stores use it to skip files: HBase skips the
    /// store files whose time range (`TIMERANGE` in each HFile's metadata) lies outside it, the
    /// embedded store skips generations the same way.
    pub time_range: Option<TimeRange>,
    /// Versions of each column to return, newest first, as HBase's `Scan.readVersions`
    /// (default 1: the newest only; 0 is read as 1). Never more than the family keeps
    /// ([`crate::schema::FamilySpec::max_versions`]).
    pub max_versions: u32,
}

impl Default for ScanSpec {
    /// The whole table, every column, any timestamp, one version of each column.
    fn default() -> Self {
        ScanSpec {
            start: Vec::new(),
            stop: Vec::new(),
            limit: None,
            columns: Vec::new(),
            time_range: None,
            max_versions: 1,
        }
    }
}

/// Cell timestamps from `min_ms` (included) to `max_ms` (excluded), as HBase's `TimeRange`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeRange {
    /// First timestamp included, milliseconds since the epoch.
    pub min_ms: i64,
    /// First timestamp excluded.
    pub max_ms: i64,
}

impl TimeRange {
    /// The timestamps `[min_ms, max_ms)`.
    pub fn new(min_ms: i64, max_ms: i64) -> Self {
        TimeRange { min_ms, max_ms }
    }

    /// The cells stamped within `[from, to)` epoch seconds, whatever their millisecond.
    pub fn of_secs(from: i64, to: i64) -> Self {
        TimeRange::new(from.saturating_mul(1000), to.saturating_mul(1000))
    }

    /// Whether a cell stamped `ts_ms` is in the range.
    pub fn contains(&self, ts_ms: i64) -> bool {
        self.min_ms <= ts_ms && ts_ms < self.max_ms
    }

    /// Whether a cell stamped anywhere in `[lo, hi]` (both included) may be in the range.
    pub fn overlaps(&self, lo: i64, hi: i64) -> bool {
        lo < self.max_ms && self.min_ms <= hi
    }
}

/// One column of a table: a family and a qualifier.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    /// Column family, e.g. `t`.
    pub family: String,
    /// Column qualifier.
    pub qualifier: Vec<u8>,
}

impl Column {
    /// The column `family:qualifier`.
    pub fn new(family: &str, qualifier: &[u8]) -> Self {
        Column {
            family: family.to_string(),
            qualifier: qualifier.to_vec(),
        }
    }
}

impl ScanSpec {
    /// All rows starting with `prefix`.
    pub fn prefix(prefix: &[u8]) -> Self {
        ScanSpec {
            start: prefix.to_vec(),
            stop: prefix_successor(prefix),
            ..ScanSpec::default()
        }
    }
}

/// The smallest key greater than every key that starts with `prefix` (empty if there is none).
pub fn prefix_successor(prefix: &[u8]) -> Vec<u8> {
    let mut stop = prefix.to_vec();
    while let Some(last) = stop.pop() {
        if last < u8::MAX {
            stop.push(last + 1);
            return stop;
        }
    }
    Vec::new()
}

/// The write side of a backend. One writer per timely worker; writers buffer internally.
pub trait TableWriter: Send {
    /// Queues mutations. May write some of them before returning when buffers are full.
    ///
    /// # Errors
    /// A backend error that retrying did not cure; the job must stop.
    fn write(&mut self, mutations: Vec<Mutation>) -> Result<()>;

    /// Makes every queued mutation durable (visible to readers) before returning.
    ///
    /// # Errors
    /// As [`TableWriter::write`].
    fn flush(&mut self) -> Result<()>;
}

/// The read side of a backend, used by dashboard queries.
///
/// `Sync`: one reader serves the HTTP server's request threads, and a query may read two tables
/// at once (the `auto` curve reads its open hour's narrow rows while the wide rows come).
pub trait TableReader: Sync {
    /// The row with this key, or `None` if it has no visible cell.
    ///
    /// With a `time` range, only the cells stamped within it, as HBase's `Get.setTimeRange`
    /// (`None` if the row has none); stores use it to skip files, as [`ScanSpec::time_range`]
    /// does.
    ///
    /// # Errors
    /// A backend error (unreachable store, unknown table).
    fn get(&self, table: &str, row: &[u8], time: Option<TimeRange>) -> Result<Option<Row>>;

    /// The row with this key as [`TableReader::get`] reads it, with up to `max_versions` versions
    /// of each column, newest first (0 is read as 1; never more than the family keeps), as
    /// HBase's `Get.readVersions`. The default scans the one row.
    ///
    /// # Errors
    /// A backend error (unreachable store, unknown table).
    fn get_versions(
        &self,
        table: &str,
        row: &[u8],
        time: Option<TimeRange>,
        max_versions: u32,
    ) -> Result<Option<Row>> {
        // `row 0x00` is the first key after `row`: the scan holds this row only.
        let mut stop = row.to_vec();
        stop.push(0);
        let spec = ScanSpec {
            start: row.to_vec(),
            stop,
            limit: Some(1),
            time_range: time,
            max_versions,
            ..ScanSpec::default()
        };
        Ok(self.scan(table, &spec)?.into_iter().find(|r| r.key == row))
    }

    /// The rows with these keys, in the order asked, `None` where a row has no visible cell
    /// (within `time`, as [`TableReader::get`]). Backends with a multi-get (HBase's
    /// `getMultiple`) answer in few calls; the default asks for each row in turn.
    ///
    /// # Errors
    /// A backend error (unreachable store, unknown table).
    fn get_many(
        &self,
        table: &str,
        rows: &[Vec<u8>],
        time: Option<TimeRange>,
    ) -> Result<Vec<Option<Row>>> {
        rows.iter().map(|row| self.get(table, row, time)).collect()
    }

    /// The rows in `[spec.start, spec.stop)` in ascending key order.
    ///
    /// # Errors
    /// A backend error (unreachable store, unknown table).
    fn scan(&self, table: &str, spec: &ScanSpec) -> Result<Vec<Row>>;

    /// The keys of the rows [`TableReader::scan`] returns for `spec`, passed to `visit` in
    /// ascending order; returns how many. For reads that need only the keys, as an inverted
    /// index's, whose row key is the entry: a backend may then skip building the rows' cells.
    /// The default scans.
    ///
    /// # Errors
    /// A backend error (unreachable store, unknown table).
    fn scan_keys(
        &self,
        table: &str,
        spec: &ScanSpec,
        visit: &mut dyn FnMut(&[u8]),
    ) -> Result<usize> {
        let rows = self.scan(table, spec)?;
        for row in &rows {
            visit(&row.key);
        }
        Ok(rows.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_successor_carries_over_max_bytes() {
        assert_eq!(prefix_successor(b"ab"), b"ac".to_vec());
        assert_eq!(prefix_successor(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_successor(b"\xff\xff"), Vec::<u8>::new());
    }
}
