//! What a put reads before it writes: a packed family's visible cells in a row, with
//! `newest_timestamp_wins`, and before a delete rewrites the family.

use crate::embedded::codec::{self, Column};
use crate::embedded::store::{EmbeddedStore, Table};
use crate::Result;
use std::collections::{BTreeMap, HashMap};

/// A packed family's visible cell of one qualifier in a row, and the put it comes from.
pub(super) struct VisibleCell {
    seq: u64,
    pub(super) ts: i64,
    pub(super) value: Vec<u8>,
    /// Its put expired in a compaction: it hides earlier cells and shows nothing.
    pub(super) hidden: bool,
}

/// A packed family's visible cells in a row, by qualifier: of each qualifier's stored cells,
/// the newest put's.
#[derive(Default)]
pub(super) struct Visible(pub(super) BTreeMap<Vec<u8>, VisibleCell>);

impl Visible {
    /// Adds the cells of one stored key-value of the family; `None` if it is malformed.
    pub(super) fn add(&mut self, column: Column<'_>, stored: &[u8]) -> Option<()> {
        let mut offer = |qualifier: &[u8], cell: VisibleCell| {
            if self.0.get(qualifier).is_none_or(|v| v.seq < cell.seq) {
                self.0.insert(qualifier.to_vec(), cell);
            }
        };
        match column {
            // A version, in a family that was versioned before it was packed: one cell.
            Column::Cell(qualifier) | Column::Version(qualifier, _) => {
                let (ts, value) = codec::decode_value(stored)?;
                let cell = VisibleCell {
                    seq: 0,
                    ts,
                    value: value.to_vec(),
                    hidden: false,
                };
                offer(qualifier, cell);
            }
            Column::Packed(qualifiers) => {
                let packed = codec::PackedValue::decode(stored)?;
                let hidden = packed.is_expired_marker();
                for cell in codec::packed_cells(qualifiers, &packed) {
                    let (qualifier, ts, value) = cell?;
                    let cell = VisibleCell {
                        seq: packed.seq,
                        ts,
                        value: value.to_vec(),
                        hidden,
                    };
                    offer(qualifier, cell);
                }
            }
        }
        Some(())
    }
}

/// The timestamps of a packed family's visible cells in `row`, by qualifier, expired or not
/// ([`codec::EXPIRED`] for those of a put a compaction expired), as `newest_timestamp_wins`
/// compares a put's cells with.
pub(super) fn visible_ts(
    store: &EmbeddedStore,
    table: &Table,
    row: &[u8],
    family: &str,
) -> Result<HashMap<Vec<u8>, i64>> {
    let mut prefix = Vec::new();
    codec::encode_row_prefix(&mut prefix, row);
    let mut visible = Visible::default();
    for item in table.prefix(&prefix, None) {
        let (key, stored) = item.map_err(|e| store.inner.fjall_error("read before write", e))?;
        let corrupt = || store.inner.corrupt(table.name, &key);
        let (_, f, column) = codec::decode_key(&key).ok_or_else(corrupt)?;
        if f == family.as_bytes() {
            visible.add(column, &stored).ok_or_else(corrupt)?;
        }
    }
    Ok(visible.0.into_iter().map(|(q, c)| (q, c.ts)).collect())
}
