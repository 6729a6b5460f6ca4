//! What a put reads before it writes: a cell's stored versions past its family's count, and a
//! packed family's visible cells in a row.

use crate::embedded::codec::{self, Column};
use crate::embedded::generations::{self, Lease};
use crate::embedded::store::{EmbeddedStore, Table};
use crate::table::Cell;
use crate::Result;
use fjall::{OwnedWriteBatch, Slice};
use std::collections::{BTreeMap, HashMap};

/// The versions of a cell that a put of one of them leaves past its family's count
/// ([`past_versions`]).
struct PastVersions {
    /// Keys of stored versions.
    stored: Vec<Slice>,
    /// Whether the put's own version is past the count (older than as many stored ones).
    this: bool,
}

/// What a put of `cell` leaves past its family's count in `row`: of the versions written
/// (`cell`'s own stamp excluded, which the put replaces) and `cell`, those after the newest
/// [`crate::schema::FamilySpec::max_versions`]. Reads never return them; removing them as puts
/// come, and not writing a put already past the count, keeps a cell's versions on disk near
/// that count. Versions still buffered by a writer are not seen, and are left to a later put
/// or [`EmbeddedStore::purge_expired`].
///
/// A version once past the count stays invisible: newer versions are deleted only along with
/// it (deletes remove what is stamped at most their stamp) and expire after it.
fn past_versions(
    store: &EmbeddedStore,
    table: &Table,
    row: &[u8],
    cell: &Cell,
) -> Result<PastVersions> {
    let keeps = table.max_versions(cell.family.as_bytes()) as usize;
    // Every version of the column, and those of longer qualifiers that start with this one.
    let mut prefix = Vec::new();
    codec::encode_version_key(&mut prefix, row, &cell.family, &cell.qualifier, 0);
    prefix.truncate(prefix.len() - 8);
    // Newest first, in key order; a later version of the same stamp replaces this one.
    let mut versions = Vec::new();
    for item in table.prefix(&prefix, None) {
        let (key, _) = item.map_err(|e| store.inner.fjall_error("read before write", e))?;
        let corrupt = || store.inner.corrupt(table.name, &key);
        let (_, _, column) = codec::decode_key(&key).ok_or_else(corrupt)?;
        if let Column::Version(qualifier, ts) = column {
            if qualifier == cell.qualifier.as_slice() && ts != cell.ts_ms {
                versions.push((ts, key));
            }
        }
    }
    let newer = versions.iter().filter(|(ts, _)| *ts > cell.ts_ms).count();
    // `cell` takes the place after the `newer` ones.
    let stored = versions
        .into_iter()
        .enumerate()
        .filter(|&(i, _)| i + usize::from(i >= newer) >= keeps)
        .map(|(_, (_, key))| key)
        .collect();
    Ok(PastVersions {
        stored,
        this: newer >= keeps,
    })
}

/// Prepares a put of `cell`, of a versioned family, in `row`: queues in `batch` the removal of
/// the stored versions it leaves past the family's count ([`past_versions`]), their generations
/// leased in `leases` until the batch is committed, and writes the version's key into `key`.
/// `false` if the put is itself past the count and is not to be written.
pub(super) fn version_key(
    store: &EmbeddedStore,
    table: &Table,
    row: &[u8],
    cell: &Cell,
    batch: &mut OwnedWriteBatch,
    leases: &mut Vec<Lease>,
    key: &mut Vec<u8>,
) -> Result<bool> {
    let past = past_versions(store, table, row, cell)?;
    if !past.stored.is_empty() {
        let generations = table.leases();
        for stored in &past.stored {
            generations::remove_everywhere(batch, &generations, stored);
        }
        leases.extend(generations);
    }
    if past.this {
        return Ok(false);
    }
    codec::encode_version_key(key, row, &cell.family, &cell.qualifier, cell.ts_ms);
    Ok(true)
}

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
