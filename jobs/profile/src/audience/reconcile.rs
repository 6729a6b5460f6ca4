//! `hourglass profile reconcile`: the index compared with `user_profile_tag`, mismatches
//! counted by kind and, when asked, repaired.
//!
//! Both tables are read whole (one scan each, held in memory): a tool for an operator after an
//! incident or with the index turned off for a while, not for every hour.

use std::collections::BTreeMap;

use sinks::table::{Cell, Mutation, ScanSpec, TableReader, TableWriter};

use super::index::{index_row, values_of_cell, INDEX_CELL, INDEX_FAMILY, INDEX_QUALIFIER};
use super::INDEX_TABLE;
use crate::key::parse_profile_row;
use crate::tables::PROFILE_TABLE;
use crate::tag::{TagDef, ValueType};
use crate::Result;

/// What a reconciliation found (and, with repair, fixed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct Reconciled {
    /// `user_profile_tag` rows read.
    pub profile_rows: u64,
    /// `user_tag_index` rows read.
    pub index_rows: u64,
    /// Entries a stored value needs and the index lacks.
    pub missing: u64,
    /// Entries of no stored value: a value that changed, a tag purged or unknown, a row that
    /// is not an index key.
    pub stale: u64,
    /// Whether the mismatches were repaired (missing entries put, stale ones deleted).
    pub repaired: bool,
}

impl Reconciled {
    /// Whether the index matched the profiles.
    pub fn consistent(&self) -> bool {
        self.missing == 0 && self.stale == 0
    }
}

/// Compares `user_tag_index` with `user_profile_tag` (each tag's newest value, typed by
/// `defs`; short-term tags are not indexed); with a `repair` writer, puts the missing entries
/// (stamped as their values) and deletes the stale ones (as of their own stamps, so a later
/// entry of the same value is not hidden).
///
/// # Errors
/// A store error.
pub fn reconcile(
    reader: &dyn TableReader,
    repair: Option<&mut dyn TableWriter>,
    defs: &[TagDef],
) -> Result<Reconciled> {
    let types: BTreeMap<&str, _> = defs
        .iter()
        .filter(|d| d.value_type != ValueType::ShortTerm)
        .map(|d| (d.tag_code.as_str(), d.data_type))
        .collect();
    let mut found = Reconciled::default();
    let mut expected: BTreeMap<Vec<u8>, i64> = BTreeMap::new();
    for row in reader.scan(PROFILE_TABLE, &ScanSpec::default())? {
        found.profile_rows += 1;
        let Some(user) = parse_profile_row(&row.key) else {
            continue;
        };
        for cell in &row.cells {
            let Some(code) = std::str::from_utf8(&cell.qualifier).ok() else {
                continue;
            };
            let Some(data_type) = types.get(code) else {
                continue;
            };
            for v in values_of_cell(*data_type, &cell.value) {
                expected.insert(index_row(code, &v, user), cell.ts_ms);
            }
        }
    }
    let mut fixes = Vec::new();
    for row in reader.scan(INDEX_TABLE, &ScanSpec::default())? {
        found.index_rows += 1;
        if expected.remove(&row.key).is_none() {
            found.stale += 1;
            let ts_ms = row.cells.iter().map(|c| c.ts_ms).max().unwrap_or(i64::MAX);
            fixes.push(Mutation::DeleteRow {
                table: INDEX_TABLE,
                row: row.key,
                ts_ms,
            });
        }
    }
    found.missing = expected.len() as u64;
    for (row, ts_ms) in expected {
        fixes.push(Mutation::Put {
            table: INDEX_TABLE,
            row,
            cells: vec![Cell {
                family: INDEX_FAMILY.to_string(),
                qualifier: INDEX_QUALIFIER.to_vec(),
                ts_ms,
                value: INDEX_CELL.to_vec(),
            }],
        });
    }
    if let Some(writer) = repair {
        if !fixes.is_empty() {
            writer.write(fixes)?;
            writer.flush()?;
        }
        found.repaired = true;
    }
    Ok(found)
}
