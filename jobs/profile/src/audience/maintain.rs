//! The index entries a profile write makes and retracts: the rule the job's indexing writer
//! applies to each user's put, given the value the store holds before it.
//!
//! The rule, with event-time stamps: a tag's value in `user_profile_tag` is its newest-stamped
//! cell (a late event is written as an older version and hides nothing). So the index follows
//! the newest stamp too, and each entry carries the stamp of the value it stands for, as the
//! profile table holds it:
//! - a written value stamped **before** the stored one is a late event: the index is left as
//!   it is (the stored value stays the visible one);
//! - a written value stamped at or after the stored one (at the same stamp the later write
//!   wins, in HBase as in the embedded store) replaces it: the entries of the old value are
//!   deleted, each the one version stamped as the old value (`Mutation::DeleteVersion`: no read
//!   in either backend), and the new value's entries are put, stamped with the new event time.
//!   The same value at a newer stamp moves its entries to that stamp;
//! - the same value at the same stamp changes nothing.
//!
//! An entry's stamp is so always its value's stamp in the profile table, which is all a
//! retraction needs: the writer knows it from the row it read or the values it remembers, not
//! from a scan of the index. An entry written otherwise (by a build before this rule, whose
//! entries kept their value's first stamp) is not found by its retraction and stays:
//! `profile reconcile` reports it as stale and `--repair` deletes it.
//!
//! One case the rule cannot serve on HBase: a value that comes back stamped exactly as an
//! earlier deleted version of its entry stays hidden until a major compaction (HBase masks a
//! put of a deleted version); `profile reconcile` reports it as missing.

use sinks::table::{Cell, KeyBatch, Mutation, ScanSpec, TableReader, TableWriter};

use super::index::{code_range, for_each_row_of_cell, INDEX_CELL, INDEX_FAMILY, INDEX_QUALIFIER};
use super::INDEX_TABLE;
use crate::tag::DataType;

/// A tag's value as stored: its stamp (ms) and cell text.
pub type Stored<'a> = Option<(i64, &'a [u8])>;

/// One entry version put or retracted, its row in [`Changes::rows`].
#[derive(Debug, Clone, Copy)]
struct Change {
    start: u32,
    end: u32,
    ts_ms: i64,
    put: bool,
}

/// The index changes of a batch of writes, as [`changes`] appends them: the rows in one byte
/// buffer, nothing written until [`Changes::net`] has dropped the ones a later change undoes.
#[derive(Debug, Default)]
pub struct Changes {
    rows: Vec<u8>,
    changes: Vec<Change>,
    scratch: Vec<u8>,
}

impl Changes {
    /// Whether no change was appended since the last [`Changes::net`].
    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    fn push(&mut self, row: &[u8], ts_ms: i64, put: bool) {
        let start = self.rows.len();
        self.rows.extend_from_slice(row);
        // Rows are a batch's, far below 4 GiB; a longer buffer would only mis-net, never panic.
        let offset = |at: usize| u32::try_from(at).unwrap_or(u32::MAX);
        self.changes.push(Change {
            start: offset(start),
            end: offset(self.rows.len()),
            ts_ms,
            put,
        });
    }

    fn row(&self, c: &Change) -> &[u8] {
        self.rows
            .get(c.start as usize..c.end as usize)
            .unwrap_or_default()
    }

    /// Appends to `out` (a batch of [`INDEX_TABLE`]'s entries, [`new_batch`]) the changes'
    /// net effect per entry version (row and stamp): the last of a version's puts and
    /// retractions. An entry put then retracted in one batch is not written; one retracted then
    /// put again is put. So no version is both put and deleted in a batch, which HBase, where a
    /// deleted version hides a put of it whatever their order, needs. The retractions come
    /// first, then the puts, each in row order. Empties `self`.
    pub fn net(&mut self, out: &mut KeyBatch) {
        // By version, in the order they were appended among a version's changes (stable).
        let mut order: Vec<u32> =
            (0..u32::try_from(self.changes.len()).unwrap_or(u32::MAX)).collect();
        order.sort_by(|&a, &b| {
            let (a, b) = (&self.changes[a as usize], &self.changes[b as usize]);
            self.row(a).cmp(self.row(b)).then(a.ts_ms.cmp(&b.ts_ms))
        });
        let mut last: Vec<&Change> = Vec::with_capacity(order.len());
        for &i in &order {
            let c = &self.changes[i as usize];
            match last.last_mut() {
                Some(l) if l.ts_ms == c.ts_ms && self.row(l) == self.row(c) => *l = c,
                _ => last.push(c),
            }
        }
        for put in [false, true] {
            for c in last.iter().filter(|c| c.put == put) {
                if put {
                    out.put(self.row(c), c.ts_ms);
                } else {
                    out.delete(self.row(c), c.ts_ms);
                }
            }
        }
        self.rows.clear();
        self.changes.clear();
    }
}

/// An empty batch of [`INDEX_TABLE`]'s entries: the cell `i:u` of each entry's row, put with
/// [`INDEX_CELL`] or deleted, written with [`TableWriter::write_keys`].
pub fn new_batch() -> KeyBatch {
    KeyBatch::new(INDEX_TABLE, INDEX_FAMILY, INDEX_QUALIFIER, INDEX_CELL)
}

/// Appends to `out` the index changes of writing `cell` (qualifier = tag code) for `user`,
/// whose stored value is `old`, for a tag of `data_type`. Returns whether the written value is
/// now the newest (so later writes of the same flush compare with it).
pub fn changes(
    user: &str,
    code: &str,
    data_type: DataType,
    cell: &Cell,
    old: Stored<'_>,
    out: &mut Changes,
) -> bool {
    let mut scratch = std::mem::take(&mut out.scratch);
    match old {
        Some((ts, _)) if cell.ts_ms < ts => return false,
        Some((ts, value)) if ts == cell.ts_ms && value == cell.value.as_slice() => return true,
        Some((ts, value)) => {
            for_each_row_of_cell(code, data_type, value, user, &mut scratch, |row| {
                out.push(row, ts, false);
            });
        }
        None => {}
    }
    for_each_row_of_cell(code, data_type, &cell.value, user, &mut scratch, |row| {
        out.push(row, cell.ts_ms, true);
    });
    out.scratch = scratch;
    true
}

/// Deletes every index entry of `code` (`hourglass tags purge`), `page_rows` rows a scan and
/// a flush; returns how many. Idempotent, so a purge killed midway deletes the rest when run
/// again: the deleted rows are gone from the next scan.
///
/// # Errors
/// A store error.
pub fn delete_code(
    reader: &dyn TableReader,
    writer: &mut dyn TableWriter,
    code: &str,
    page_rows: usize,
) -> sinks::Result<u64> {
    let (mut start, stop) = code_range(code);
    let limit = page_rows.max(1);
    let mut deleted = 0;
    loop {
        let spec = ScanSpec {
            start: start.clone(),
            stop: stop.clone(),
            limit: Some(limit),
            ..ScanSpec::default()
        };
        let rows = reader.scan(INDEX_TABLE, &spec)?;
        let deletes: Vec<Mutation> = rows
            .iter()
            .map(|r| Mutation::DeleteRow {
                table: INDEX_TABLE,
                row: r.key.clone(),
                ts_ms: i64::MAX,
            })
            .collect();
        deleted += deletes.len() as u64;
        writer.write(deletes)?;
        writer.flush()?;
        match rows.last() {
            Some(last) if rows.len() == limit => {
                start = last.key.clone();
                start.push(0);
            }
            _ => return Ok(deleted),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(ts_ms: i64, value: &str) -> Cell {
        Cell {
            family: "dimension".into(),
            qualifier: b"dim_x".to_vec(),
            ts_ms,
            value: value.as_bytes().to_vec(),
        }
    }

    /// The changes as `+row@ts` / `-row@ts`, retractions first.
    fn run(dt: DataType, new: Cell, old: Stored<'_>) -> (bool, Vec<String>) {
        let mut out = Changes::default();
        let newest = changes("u1", "dim_x", dt, &new, old, &mut out);
        (newest, netted(&mut out))
    }

    /// The netted changes as `+row@ts` / `-row@ts`.
    fn netted(changes: &mut Changes) -> Vec<String> {
        let mut batch = new_batch();
        changes.net(&mut batch);
        batch
            .iter()
            .map(|(row, ts, put)| {
                let sign = if put { '+' } else { '-' };
                format!("{sign}{}@{ts}", String::from_utf8_lossy(row))
            })
            .collect()
    }

    #[test]
    fn a_batch_nets_to_the_last_change_of_each_version_retractions_first() {
        let mut c = Changes::default();
        for (row, ts, put) in [
            ("a", 5, false),
            ("b", 10, true),
            ("c", 10, true),
            ("b", 10, false),
            ("a", 20, true),
            ("d", 3, false),
            ("e", 7, false),
            ("e", 7, true),
            ("c", 9, true),
        ] {
            c.push(row.as_bytes(), ts, put);
        }
        assert_eq!(
            netted(&mut c),
            ["-a@5", "-b@10", "-d@3", "+a@20", "+c@9", "+c@10", "+e@7"]
        );
        assert!(c.is_empty());
        assert!(netted(&mut c).is_empty());
    }

    #[test]
    fn a_first_value_is_put() {
        assert_eq!(
            run(DataType::String, cell(10, "hz"), None),
            (true, vec!["+dim_x_Shz_u1@10".into()])
        );
    }

    #[test]
    fn a_newer_value_retracts_the_old_entry_at_its_stamp() {
        assert_eq!(
            run(DataType::String, cell(20, "sh"), Some((10, b"hz"))),
            (
                true,
                vec!["-dim_x_Shz_u1@10".into(), "+dim_x_Ssh_u1@20".into()]
            )
        );
        // The same stamp: the later write wins in the store, and in the index.
        assert_eq!(
            run(DataType::String, cell(10, "sh"), Some((10, b"hz"))),
            (
                true,
                vec!["-dim_x_Shz_u1@10".into(), "+dim_x_Ssh_u1@10".into()]
            )
        );
    }

    #[test]
    fn the_same_value_newer_moves_its_entry_to_the_new_stamp() {
        assert_eq!(
            run(DataType::String, cell(20, "hz"), Some((10, b"hz"))),
            (
                true,
                vec!["-dim_x_Shz_u1@10".into(), "+dim_x_Shz_u1@20".into()]
            )
        );
    }

    #[test]
    fn a_late_value_or_the_same_value_at_its_stamp_changes_nothing() {
        assert_eq!(
            run(DataType::String, cell(5, "sh"), Some((10, b"hz"))),
            (false, vec![])
        );
        assert_eq!(
            run(DataType::String, cell(10, "hz"), Some((10, b"hz"))),
            (true, vec![])
        );
    }

    #[test]
    fn a_multi_value_moves_every_element_to_the_new_stamp() {
        assert_eq!(
            run(
                DataType::MultiValue,
                cell(20, r#"["a","c"]"#),
                Some((10, br#"["a","b"]"#))
            )
            .1,
            [
                "-dim_x_Ma_u1@10",
                "-dim_x_Mb_u1@10",
                "+dim_x_Ma_u1@20",
                "+dim_x_Mc_u1@20"
            ]
        );
    }
}
