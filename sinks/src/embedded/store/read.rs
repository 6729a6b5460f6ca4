//! Reads: Gets and scans, merged over a table's generations into visible rows.

use super::{EmbeddedStore, Table};
use crate::embedded::codec::{self, Column};
use crate::table::{Cell, Row, ScanSpec, TableReader, TimeRange};
use crate::Result;
use fjall::KvPair;

/// A stored cell of the row being read, before the row's cells are merged and filtered.
struct Candidate {
    cell: Cell,
    ttl: Option<i64>,
    /// The put's seq for a packed cell, 0 for a cell stored on its own.
    seq: u64,
    /// A packed cell whose put expired in a compaction ([`codec::encode_packed_expired`]): it
    /// hides the cells of earlier puts and shows nothing.
    hidden: bool,
}

/// Where a [`RowCollector`]'s visible rows go.
enum Out<'v> {
    /// Kept whole.
    Rows(Vec<Row>),
    /// Only their keys, each passed on as its row closes; `count` of them so far.
    Keys {
        visit: &'v mut dyn FnMut(&[u8]),
        count: usize,
    },
}

impl Out<'_> {
    /// Rows it holds or passed on.
    fn count(&self) -> usize {
        match self {
            Out::Rows(rows) => rows.len(),
            Out::Keys { count, .. } => *count,
        }
    }
}

/// Groups key-ordered stored cells into visible rows.
struct RowCollector<'a, 'v> {
    table: &'a Table,
    now_ms: i64,
    time: Option<TimeRange>,
    /// Versions of a cell asked for ([`ScanSpec::max_versions`], at least 1).
    versions: u32,
    limit: usize,
    out: Out<'v>,
    /// The row being read and its stored cells (without their values when only keys are
    /// wanted: a row's visibility does not depend on them).
    key: Vec<u8>,
    candidates: Vec<Candidate>,
    /// Whether a qualifier may have cells from several key-values in the row (puts of packed
    /// cells with other qualifiers, cells written before the family was packed, versions of a
    /// cell), so that the candidates must be sorted and the newest of each kept.
    merge: bool,
}

impl<'a, 'v> RowCollector<'a, 'v> {
    fn new(table: &'a Table, now_ms: i64, spec: &ScanSpec, out: Out<'v>) -> Self {
        RowCollector {
            table,
            now_ms,
            time: spec.time_range,
            versions: spec.max_versions.max(1),
            limit: spec.limit.unwrap_or(usize::MAX),
            out,
            key: Vec::new(),
            candidates: Vec::new(),
            merge: false,
        }
    }

    fn is_full(&self) -> bool {
        self.out.count() >= self.limit
    }

    fn keys_only(&self) -> bool {
        matches!(self.out, Out::Keys { .. })
    }

    /// Closes the current row and starts `row`; a row whose cells all expired is not returned.
    fn start_row(&mut self, row: &[u8]) {
        self.close_row();
        self.key.clear();
        self.key.extend_from_slice(row);
    }

    /// Keeps the visible cells of the current row: of a qualifier's cells the newest put's (of a
    /// versioned family's, the newest versions asked for, up to the family's count), if it is
    /// within the time range and not expired.
    ///
    /// Versions past the family's count are invisible whatever the time range, as after
    /// HBase's compactions; before one, HBase may still return such a version to a read whose
    /// time range excludes the newer ones.
    fn close_row(&mut self) {
        if self.candidates.is_empty() {
            return;
        }
        if std::mem::take(&mut self.merge) {
            // Key order, and the newest put, then the newest version, first among a qualifier's
            // cells.
            self.candidates.sort_by(|a, b| {
                (&a.cell.family, &a.cell.qualifier)
                    .cmp(&(&b.cell.family, &b.cell.qualifier))
                    .then(b.seq.cmp(&a.seq))
                    .then(b.cell.ts_ms.cmp(&a.cell.ts_ms))
            });
            let same_column = |a: &Candidate, b: &Candidate| {
                a.cell.family == b.cell.family && a.cell.qualifier == b.cell.qualifier
            };
            if self.table.versioned.is_empty() {
                self.candidates
                    .dedup_by(|later, kept| same_column(later, kept));
            } else {
                // Of each qualifier's run, as many as its family keeps and the read asks for.
                let mut keep = Vec::with_capacity(self.candidates.len());
                let (mut run, mut most) = (0, 0);
                for (i, c) in self.candidates.iter().enumerate() {
                    if i > 0 && same_column(&self.candidates[i - 1], c) {
                        run += 1;
                    } else {
                        run = 1;
                        most = self.table.max_versions(c.cell.family.as_bytes());
                        most = most.min(self.versions);
                    }
                    keep.push(run <= most);
                }
                let mut keep = keep.into_iter();
                self.candidates.retain(|_| keep.next().unwrap_or(false));
            }
        }
        let (time, now_ms) = (self.time, self.now_ms);
        let visible = |c: &Candidate| {
            !c.hidden
                && time.is_none_or(|t| t.contains(c.cell.ts_ms))
                && !codec::is_expired(c.cell.ts_ms, c.ttl, now_ms)
        };
        match &mut self.out {
            Out::Rows(rows) => {
                let cells: Vec<Cell> = self
                    .candidates
                    .drain(..)
                    .filter(visible)
                    .map(|c| c.cell)
                    .collect();
                if !cells.is_empty() {
                    rows.push(Row {
                        key: self.key.clone(),
                        cells,
                    });
                }
            }
            Out::Keys { visit, count } => {
                if self.candidates.iter().any(visible) {
                    visit(&self.key);
                    *count += 1;
                }
                self.candidates.clear();
            }
        }
    }

    /// Adds one stored key-value of the current row, its cells of `wanted` qualifiers; `None` if
    /// it is malformed.
    fn push(
        &mut self,
        family: &[u8],
        column: Column<'_>,
        stored: &[u8],
        wanted: impl Fn(&str, &[u8]) -> bool,
    ) -> Option<()> {
        // A family the spec no longer lists is invisible, as HBase has no store to read it from.
        let Some((family, ttl)) = self.table.family(family) else {
            return Some(());
        };
        // Keys come in order: a qualifier's cells are all of this family's, from here on.
        let same_family = self
            .candidates
            .last()
            .is_some_and(|c| c.cell.family == family);
        let keys_only = self.keys_only();
        let candidate = |qualifier: &[u8], ts_ms, value: &[u8], seq, hidden| Candidate {
            cell: Cell {
                family: family.to_owned(),
                qualifier: qualifier.to_vec(),
                ts_ms,
                value: if keys_only {
                    Vec::new()
                } else {
                    value.to_vec()
                },
            },
            ttl,
            seq,
            hidden,
        };
        match column {
            Column::Cell(qualifier) => {
                let (ts_ms, value) = codec::decode_value(stored)?;
                if same_family && self.candidates.last().is_some_and(|c| c.seq > 0) {
                    self.merge = true;
                }
                if wanted(family, qualifier) {
                    self.candidates
                        .push(candidate(qualifier, ts_ms, value, 0, false));
                }
            }
            Column::Version(qualifier, _) => {
                // The value's stamp, not the key's: a compaction may have expired it.
                let (ts_ms, value) = codec::decode_value(stored)?;
                self.merge = true;
                if wanted(family, qualifier) {
                    self.candidates
                        .push(candidate(qualifier, ts_ms, value, 0, false));
                }
            }
            Column::Packed(qualifiers) => {
                let packed = codec::PackedValue::decode(stored)?;
                if same_family {
                    self.merge = true;
                }
                let hidden = packed.is_expired_marker();
                for cell in codec::packed_cells(qualifiers, &packed) {
                    let (qualifier, ts_ms, value) = cell?;
                    if wanted(family, qualifier) {
                        self.candidates
                            .push(candidate(qualifier, ts_ms, value, packed.seq, hidden));
                    }
                }
            }
        }
        Some(())
    }

    fn finish(mut self) -> Out<'v> {
        if !self.is_full() {
            self.close_row();
        }
        self.out
    }
}

impl EmbeddedStore {
    /// Collects the visible rows of `spec` (`[start, stop)`, `stop` empty: no end; only the
    /// cells of its columns if it names any, stamped within its time range if it has one) from
    /// a key-ordered iterator that starts at or before `spec.start`.
    fn collect(
        &self,
        table: &Table,
        iter: impl Iterator<Item = fjall::Result<KvPair>>,
        spec: &ScanSpec,
    ) -> Result<Vec<Row>> {
        match self.collect_into(table, iter, spec, Out::Rows(Vec::new()))? {
            Out::Rows(rows) => Ok(rows),
            Out::Keys { .. } => Ok(Vec::new()),
        }
    }

    /// [`EmbeddedStore::collect`], the rows going to `out`.
    fn collect_into<'v>(
        &self,
        table: &Table,
        iter: impl Iterator<Item = fjall::Result<KvPair>>,
        spec: &ScanSpec,
        out: Out<'v>,
    ) -> Result<Out<'v>> {
        let inner = &self.inner;
        let (start, stop, columns) = (&spec.start[..], &spec.stop[..], &spec.columns[..]);
        let mut rows = RowCollector::new(table, (inner.now_ms)(), spec, out);
        if rows.is_full() {
            return Ok(rows.out);
        }
        let wanted = |family: &str, qualifier: &[u8]| {
            columns.is_empty()
                || columns
                    .iter()
                    .any(|c| c.family == family && c.qualifier == qualifier)
        };
        let mut started = false;
        for item in iter {
            let (key, value) = item.map_err(|e| inner.fjall_error("read", e))?;
            let corrupt = || inner.corrupt(table.name, &key);
            let (row, family, column) = codec::decode_key(&key).ok_or_else(corrupt)?;
            // Only a start bound holding 0x00 lets keys of earlier rows reach this point.
            if row < start {
                continue;
            }
            if !stop.is_empty() && row >= stop {
                break;
            }
            if !started || row != rows.key.as_slice() {
                started = true;
                rows.start_row(row);
                if rows.is_full() {
                    return Ok(rows.out);
                }
            }
            rows.push(family, column, &value, wanted)
                .ok_or_else(corrupt)?;
        }
        Ok(rows.finish())
    }
}

impl TableReader for EmbeddedStore {
    fn get(&self, table: &str, row: &[u8], time: Option<TimeRange>) -> Result<Option<Row>> {
        self.get_versions(table, row, time, 1)
    }

    fn get_versions(
        &self,
        table: &str,
        row: &[u8],
        time: Option<TimeRange>,
        max_versions: u32,
    ) -> Result<Option<Row>> {
        let (_, t) = self.inner.table(table)?;
        // No stored row can have such a key, and its prefix could match other rows' cells.
        if codec::check_row(table, row).is_err() {
            return Ok(None);
        }
        let mut prefix = Vec::with_capacity(row.len() + 1);
        codec::encode_row_prefix(&mut prefix, row);
        let spec = ScanSpec {
            start: row.to_vec(),
            limit: Some(1),
            time_range: time,
            max_versions,
            ..ScanSpec::default()
        };
        let rows = self.collect(t, t.prefix(&prefix, time.as_ref()), &spec)?;
        Ok(rows.into_iter().next())
    }

    fn scan(&self, table: &str, spec: &ScanSpec) -> Result<Vec<Row>> {
        let (_, t) = self.inner.table(table)?;
        self.collect(t, range_of(t, spec), spec)
    }

    // The rows' cells are not built, nor their values copied.
    fn scan_keys(
        &self,
        table: &str,
        spec: &ScanSpec,
        visit: &mut dyn FnMut(&[u8]),
    ) -> Result<usize> {
        let (_, t) = self.inner.table(table)?;
        let out = Out::Keys { visit, count: 0 };
        Ok(self.collect_into(t, range_of(t, spec), spec, out)?.count())
    }
}

/// The stored keys that may hold rows of `spec`. Every key of a row >= start is >= start. A
/// stop without 0x00 bounds keys the same way (row < stop implies key < stop); a stop with
/// 0x00 does not, so the range is left open and `collect` stops on the decoded row.
fn range_of(t: &Table, spec: &ScanSpec) -> super::Stored {
    let stop: &[u8] = if spec.stop.contains(&codec::SEP) {
        &[]
    } else {
        &spec.stop
    };
    t.range(&spec.start, stop, spec.time_range.as_ref(), &spec.stop)
}
