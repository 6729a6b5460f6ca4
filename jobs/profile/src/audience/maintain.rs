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

use sinks::table::{Cell, Mutation, ScanSpec, TableReader, TableWriter};

use super::index::{
    code_range, index_row, values_of_cell, INDEX_CELL, INDEX_FAMILY, INDEX_QUALIFIER,
};
use super::INDEX_TABLE;
use crate::tag::DataType;

/// A tag's value as stored: its stamp (ms) and cell text.
pub type Stored<'a> = Option<(i64, &'a [u8])>;

/// Appends to `out` the index mutations of writing `cell` (qualifier = tag code) for `user`,
/// whose stored value is `old`, for a tag of `data_type`. Returns whether the written value is
/// now the newest (so later writes of the same flush compare with it).
pub fn changes(
    user: &str,
    code: &str,
    data_type: DataType,
    cell: &Cell,
    old: Stored<'_>,
    out: &mut Vec<Mutation>,
) -> bool {
    match old {
        Some((ts, _)) if cell.ts_ms < ts => return false,
        Some((ts, value)) if ts == cell.ts_ms && value == cell.value.as_slice() => return true,
        Some((ts, value)) => {
            for e in values_of_cell(data_type, value) {
                out.push(Mutation::DeleteVersion {
                    table: INDEX_TABLE,
                    row: index_row(code, &e, user),
                    family: INDEX_FAMILY.to_string(),
                    qualifier: INDEX_QUALIFIER.to_vec(),
                    ts_ms: ts,
                });
            }
        }
        None => {}
    }
    for e in values_of_cell(data_type, &cell.value) {
        out.push(Mutation::Put {
            table: INDEX_TABLE,
            row: index_row(code, &e, user),
            cells: vec![Cell {
                family: INDEX_FAMILY.to_string(),
                qualifier: INDEX_QUALIFIER.to_vec(),
                ts_ms: cell.ts_ms,
                value: INDEX_CELL.to_vec(),
            }],
        });
    }
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

    /// The mutations as `+row@ts` / `-row@ts`.
    fn run(dt: DataType, new: Cell, old: Stored<'_>) -> (bool, Vec<String>) {
        let mut out = Vec::new();
        let newest = changes("u1", "dim_x", dt, &new, old, &mut out);
        let shown = out
            .iter()
            .map(|m| match m {
                Mutation::Put { row, cells, .. } => {
                    format!("+{}@{}", String::from_utf8_lossy(row), cells[0].ts_ms)
                }
                Mutation::DeleteVersion { row, ts_ms, .. } => {
                    format!("-{}@{ts_ms}", String::from_utf8_lossy(row))
                }
                other => format!("{other:?}"),
            })
            .collect();
        (newest, shown)
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
