//! One codec per table: how a reading becomes the cells of a table, and back.
//!
//! [`narrow`] owns the narrow table (`ts_metric`), [`hourly`] the wide table (`ts_metric_hourly`)
//! with the hour itself and the rule that tells point cells from summary cells, [`room`] the room
//! view's table (`ts_room_latest`); [`key`] holds what the row keys share (the separator, Java's
//! salt, device ids). No row key is formatted or parsed outside these modules.

pub mod hourly;
pub mod key;
pub mod narrow;
pub mod room;

use crate::tables::FAMILY;
use crate::{Error, Result};
use sinks::table::Cell;

/// A cell of the single family, as every table's codec writes it.
fn cell(qualifier: Vec<u8>, ts_ms: i64, value: Vec<u8>) -> Cell {
    Cell {
        family: FAMILY.to_string(),
        qualifier,
        ts_ms,
        value,
    }
}

/// A row's cells as `(qualifier, timestamp, value)`, for tests comparing them with literals.
#[cfg(test)]
fn cell_parts(row: &sinks::table::Row) -> Vec<(&[u8], i64, &[u8])> {
    row.cells
        .iter()
        .map(|c| (c.qualifier.as_slice(), c.ts_ms, c.value.as_slice()))
        .collect()
}

/// Reads a cell value written by [`crate::reading::format_value`].
///
/// # Errors
/// [`pipeline::Error::Invalid`] if the value is not a number.
fn parse_value(bytes: &[u8]) -> Result<f64> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .ok_or_else(|| {
            Error::invalid(format!(
                "cell value {:?} is not a number",
                String::from_utf8_lossy(bytes)
            ))
        })
}
