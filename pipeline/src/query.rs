//! Dashboard queries: a device's curve, a device's hour and a device's latest reading.

use serde::Serialize;

use crate::reading::Reading;
use crate::rowkey::{self, KeyScheme};
use crate::rows;
use crate::schema::{HOURLY_TABLE, NARROW_TABLE};
use crate::table::{ScanSpec, TableReader};
use crate::Result;

/// The readings of `device` with `from <= ts < to`, oldest first: one scan of the narrow table.
///
/// # Errors
/// A store error, or a malformed row.
pub fn curve(
    store: &dyn TableReader,
    scheme: KeyScheme,
    device: &str,
    from: i64,
    to: i64,
) -> Result<Vec<Reading>> {
    rowkey::validate_device(device)?;
    let Some(range) = rowkey::narrow_range(scheme, device, from, to) else {
        return Ok(Vec::new());
    };
    let rows = store.scan(
        NARROW_TABLE,
        &ScanSpec {
            start: range.start,
            stop: range.stop,
            limit: None,
        },
    )?;
    let mut readings = rows
        .iter()
        .map(|row| rows::reading_from_narrow(scheme, row))
        .collect::<Result<Vec<_>>>()?;
    if range.newest_first {
        readings.reverse();
    }
    Ok(readings)
}

/// One hour of one device, read from its wide row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HourAnswer {
    /// Device id.
    pub device: String,
    /// Start of the hour, epoch seconds.
    pub hour_start: i64,
    /// `(ts, value)` points, ascending.
    pub points: Vec<(i64, f64)>,
}

/// The hour of `device` containing `at`: one Get of the wide row.
///
/// # Errors
/// A store error, or a malformed cell.
pub fn hour(store: &dyn TableReader, device: &str, at: i64) -> Result<HourAnswer> {
    rowkey::validate_device(device)?;
    let hour_start = rowkey::hour_start(at);
    let points = match store.get(HOURLY_TABLE, &rowkey::wide_key(device, hour_start))? {
        Some(row) => rows::points_from_wide(hour_start, &row)?,
        None => Vec::new(),
    };
    Ok(HourAnswer {
        device: device.to_string(),
        hour_start,
        points,
    })
}

/// The newest reading of `device`, if it has any.
///
/// With the salted scheme this is the first row of the device's range; with the plain scheme
/// (oldest first) it is the last one, which needs a scan of the device's rows.
///
/// # Errors
/// A store error, or a malformed row.
pub fn latest(store: &dyn TableReader, scheme: KeyScheme, device: &str) -> Result<Option<Reading>> {
    rowkey::validate_device(device)?;
    let prefix = rowkey::narrow_prefix(scheme, device);
    let mut spec = ScanSpec::prefix(&prefix);
    if scheme == KeyScheme::Salted {
        spec.limit = Some(1);
    }
    let rows = store.scan(NARROW_TABLE, &spec)?;
    rows.last()
        .map(|row| rows::reading_from_narrow(scheme, row))
        .transpose()
}
