//! The index entries a profile write makes and retracts: the rule the job's indexing writer
//! applies to each user's put, given the value the store holds before it.
//!
//! The rule, with event-time stamps: a tag's value in `user_profile_tag` is its newest-stamped
//! cell (a late event is written as an older version and hides nothing). So the index follows
//! the newest stamp too:
//! - a written value stamped **before** the stored one is a late event: the index is left as
//!   it is (the stored value stays the visible one);
//! - a written value stamped at or after the stored one (at the same stamp the later write
//!   wins, in HBase as in the embedded store) replaces it: the entries of the old value that
//!   the new one does not have are deleted, as of the old value's stamp (a delete of the row
//!   with every cell stamped up to it, which covers the entry, whose stamp is the first write
//!   of that value), and the new value's entries that the old one did not have are put,
//!   stamped with the new event time;
//! - the same value again changes nothing.
//!
//! One case the rule cannot serve on HBase: a value that comes back stamped exactly at the
//! bound of an earlier delete of its entry stays hidden until a major compaction (HBase masks
//! puts at or below a delete's stamp); `profile reconcile` reports it as missing.

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
    let old_entries = match old {
        Some((ts, _)) if cell.ts_ms < ts => return false,
        Some((_, value)) if value == cell.value.as_slice() => return true,
        Some((ts, value)) => Some((ts, values_of_cell(data_type, value))),
        None => None,
    };
    let new_entries = values_of_cell(data_type, &cell.value);
    if let Some((ts, old_entries)) = &old_entries {
        for e in old_entries.iter().filter(|e| !new_entries.contains(e)) {
            out.push(Mutation::DeleteRow {
                table: INDEX_TABLE,
                row: index_row(code, e, user),
                ts_ms: *ts,
            });
        }
    }
    for e in &new_entries {
        if old_entries.as_ref().is_some_and(|(_, old)| old.contains(e)) {
            continue;
        }
        out.push(Mutation::Put {
            table: INDEX_TABLE,
            row: index_row(code, e, user),
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
                Mutation::DeleteRow { row, ts_ms, .. } => {
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
    fn a_newer_value_retracts_the_old_entry() {
        assert_eq!(
            run(DataType::String, cell(20, "sh"), Some((10, b"hz"))),
            (
                true,
                vec!["-dim_x_Shz_u1@10".into(), "+dim_x_Ssh_u1@20".into()]
            )
        );
        // The same stamp: the later write wins in the store, and in the index.
        assert_eq!(
            run(DataType::String, cell(10, "sh"), Some((10, b"hz")))
                .1
                .len(),
            2
        );
    }

    #[test]
    fn a_late_value_or_the_same_value_changes_nothing() {
        assert_eq!(
            run(DataType::String, cell(5, "sh"), Some((10, b"hz"))),
            (false, vec![])
        );
        assert_eq!(
            run(DataType::String, cell(20, "hz"), Some((10, b"hz"))),
            (true, vec![])
        );
    }

    #[test]
    fn multi_values_change_only_the_elements_that_changed() {
        assert_eq!(
            run(
                DataType::MultiValue,
                cell(20, r#"["a","c"]"#),
                Some((10, br#"["a","b"]"#))
            )
            .1,
            ["-dim_x_Mb_u1@10", "+dim_x_Mc_u1@20"]
        );
    }
}
