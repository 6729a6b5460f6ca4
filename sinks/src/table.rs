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

/// Versions of one column (`family:qualifier`) of many rows of one table, each put (with the
/// batch's one value) or deleted, in the order they were added: the entries of an inverted
/// index, whose row key is the entry. The rows are kept in one buffer, so a batch of a hundred
/// thousand entries is two allocations rather than five per entry, as [`Mutation`]s are.
///
/// [`TableWriter::write_keys`] writes it as the mutations [`KeyBatch::to_mutations`] makes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyBatch {
    table: &'static str,
    family: &'static str,
    qualifier: &'static [u8],
    value: &'static [u8],
    rows: Vec<u8>,
    entries: Vec<KeyEntry>,
}

/// One entry of a [`KeyBatch`]: where its row ends in [`KeyBatch::rows`], its stamp, and
/// whether it is a put.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct KeyEntry {
    end: usize,
    ts_ms: i64,
    put: bool,
}

impl KeyBatch {
    /// An empty batch of versions of `family:qualifier` in `table`, each put with `value`.
    pub fn new(
        table: &'static str,
        family: &'static str,
        qualifier: &'static [u8],
        value: &'static [u8],
    ) -> Self {
        KeyBatch {
            table,
            family,
            qualifier,
            value,
            rows: Vec::new(),
            entries: Vec::new(),
        }
    }

    /// Adds a put of the version of `row` stamped `ts_ms` (as [`Mutation::Put`] of one cell).
    pub fn put(&mut self, row: &[u8], ts_ms: i64) {
        self.push(row, ts_ms, true);
    }

    /// Adds the delete of the version of `row` stamped `ts_ms` (as
    /// [`Mutation::DeleteVersion`]).
    pub fn delete(&mut self, row: &[u8], ts_ms: i64) {
        self.push(row, ts_ms, false);
    }

    fn push(&mut self, row: &[u8], ts_ms: i64, put: bool) {
        self.rows.extend_from_slice(row);
        self.entries.push(KeyEntry {
            end: self.rows.len(),
            ts_ms,
            put,
        });
    }

    /// The table.
    pub fn table(&self) -> &'static str {
        self.table
    }

    /// The column family.
    pub fn family(&self) -> &'static str {
        self.family
    }

    /// The column qualifier.
    pub fn qualifier(&self) -> &'static [u8] {
        self.qualifier
    }

    /// The value of every put.
    pub fn value(&self) -> &'static [u8] {
        self.value
    }

    /// How many entries it holds.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether it holds no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Removes every entry, keeping the buffers.
    pub fn clear(&mut self) {
        self.rows.clear();
        self.entries.clear();
    }

    /// The entries in the order they were added: (row, stamp, whether a put).
    pub fn iter(&self) -> impl ExactSizeIterator<Item = (&[u8], i64, bool)> + '_ {
        let mut start = 0;
        self.entries.iter().map(move |e| {
            let row = &self.rows[start..e.end];
            start = e.end;
            (row, e.ts_ms, e.put)
        })
    }

    /// The batch as mutations, in its order: a [`Mutation::Put`] of one cell per put, a
    /// [`Mutation::DeleteVersion`] per delete.
    pub fn to_mutations(&self) -> Vec<Mutation> {
        self.iter()
            .map(|(row, ts_ms, put)| {
                if put {
                    Mutation::Put {
                        table: self.table,
                        row: row.to_vec(),
                        cells: vec![Cell {
                            family: self.family.to_string(),
                            qualifier: self.qualifier.to_vec(),
                            ts_ms,
                            value: self.value.to_vec(),
                        }],
                    }
                } else {
                    Mutation::DeleteVersion {
                        table: self.table,
                        row: row.to_vec(),
                        family: self.family.to_string(),
                        qualifier: self.qualifier.to_vec(),
                        ts_ms,
                    }
                }
            })
            .collect()
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

    /// Queues the entries of `keys`, as [`TableWriter::write`] queues
    /// [`KeyBatch::to_mutations`] (the default does just that). A backend may write them
    /// without building the mutations: the embedded store encodes each entry straight into its
    /// buffer.
    ///
    /// # Errors
    /// As [`TableWriter::write`]: nothing of the batch is queued if an entry is invalid.
    fn write_keys(&mut self, keys: &KeyBatch) -> Result<()> {
        if keys.is_empty() {
            return Ok(());
        }
        self.write(keys.to_mutations())
    }
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
    fn a_key_batch_is_its_mutations_in_order() {
        let mut keys = KeyBatch::new("t", "f", b"q", b"1");
        assert!(keys.is_empty());
        keys.delete(b"a", 5);
        keys.put(b"bc", 7);
        keys.put(b"", 9);
        assert_eq!(keys.len(), 3);
        let seen: Vec<(&[u8], i64, bool)> = keys.iter().collect();
        assert_eq!(
            seen,
            [
                (&b"a"[..], 5, false),
                (&b"bc"[..], 7, true),
                (&b""[..], 9, true)
            ]
        );
        let mutations = keys.to_mutations();
        assert_eq!(
            mutations[0],
            Mutation::DeleteVersion {
                table: "t",
                row: b"a".to_vec(),
                family: "f".into(),
                qualifier: b"q".to_vec(),
                ts_ms: 5,
            }
        );
        assert_eq!(
            mutations[1],
            Mutation::Put {
                table: "t",
                row: b"bc".to_vec(),
                cells: vec![Cell {
                    family: "f".into(),
                    qualifier: b"q".to_vec(),
                    ts_ms: 7,
                    value: b"1".to_vec(),
                }],
            }
        );
        assert_eq!(mutations.len(), 3);
        keys.clear();
        assert!(keys.is_empty() && keys.to_mutations().is_empty());
    }

    #[test]
    fn prefix_successor_carries_over_max_bytes() {
        assert_eq!(prefix_successor(b"ab"), b"ac".to_vec());
        assert_eq!(prefix_successor(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_successor(b"\xff\xff"), Vec::<u8>::new());
    }
}
