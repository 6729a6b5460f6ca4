//! Reading a month of hourly wide rows: devices found by walking the table's keys, each
//! device's month read with one range scan of `<device>_<monthStart>` .. `<device>_<monthEnd>`.

use crate::codec::hourly::{is_dirty, parse_wide_key, wide_key, wide_prefix};
use crate::codec::narrow::KeyScheme;
use crate::query::narrow_points;
use crate::tables::HOURLY_TABLE;
use crate::Result;
use pipeline::time::HOUR_SECS;
use sinks::table::{prefix_successor, Row, ScanSpec, TableReader, TimeRange};

use super::figures::HourFigures;

/// One device's month as read: its hours, and the rows that were no hour the window wrote.
#[derive(Debug)]
pub struct DeviceRows {
    /// Device id.
    pub device: String,
    /// The hours read.
    pub hours: Vec<HourFigures>,
    /// Rows read.
    pub rows: u64,
    /// Keys of rows without the summary and point cells, for the report's `bad_rows`.
    pub bad: Vec<String>,
}

/// Reads `device`'s hours of `[month_start, month_end)`: one scan of its wide rows, and for a row
/// marked dirty (`hourly::is_dirty`: the hour got a reading past the allowed lateness, or a
/// second twice) one scan of that hour's narrow rows, whose figures are the hour's.
///
/// # Errors
/// A store error, or a malformed narrow row.
pub fn read_device(
    reader: &dyn TableReader,
    scheme: KeyScheme,
    device: &str,
    month_start: i64,
    month_end: i64,
) -> Result<DeviceRows> {
    let spec = ScanSpec {
        start: wide_key(device, month_start),
        stop: wide_key(device, month_end),
        limit: None,
        columns: Vec::new(),
        // Every cell of the month's rows is stamped within it (an hour's last millisecond), so
        // the range changes no answer; it lets the store skip what was written outside it.
        time_range: Some(TimeRange::of_secs(month_start, month_end)),
        ..ScanSpec::default()
    };
    let rows = reader.scan(HOURLY_TABLE, &spec)?;
    let mut out = DeviceRows {
        device: device.to_string(),
        hours: Vec::with_capacity(rows.len()),
        rows: rows.len() as u64,
        bad: Vec::new(),
    };
    for row in &rows {
        let Some(hour) = hour_of(device, row) else {
            out.bad.push(row.key.escape_ascii().to_string());
            continue;
        };
        if is_dirty(row) {
            let points = narrow_points(reader, scheme, device, hour, hour + HOUR_SECS)?;
            // A dirty hour whose narrow rows have all expired has nothing to report.
            out.hours.extend(HourFigures::of_points(hour, &points));
        } else {
            match HourFigures::from_row(hour, row) {
                Some(f) => out.hours.push(f),
                None => out.bad.push(row.key.escape_ascii().to_string()),
            }
        }
    }
    Ok(out)
}

/// The hour start of `device`'s wide row `row`, if its key is `<device>_<hourStart>`.
fn hour_of(device: &str, row: &Row) -> Option<i64> {
    parse_wide_key(&row.key)
        .filter(|&(d, _)| d == device)
        .map(|(_, hour)| hour)
}

/// Walks the devices whose rows begin in `[start, stop)` (`stop` empty: the table's end), in key
/// order: one scan of a single key finds the next device, then its month is read. A device whose
/// rows begin before `start` belongs to the range before, so each device is read by exactly one
/// range.
#[derive(Debug)]
pub struct DeviceWalk {
    start: Vec<u8>,
    stop: Vec<u8>,
    cursor: Vec<u8>,
    done: bool,
}

impl DeviceWalk {
    /// A walk over `[start, stop)`.
    pub fn new(start: Vec<u8>, stop: Vec<u8>) -> Self {
        DeviceWalk {
            cursor: start.clone(),
            start,
            stop,
            done: false,
        }
    }

    /// The next device of the range, or `None` at its end. Keys that are no wide row key are
    /// returned in `bad` and skipped.
    ///
    /// # Errors
    /// A store error.
    pub fn next_device(
        &mut self,
        reader: &dyn TableReader,
        bad: &mut Vec<String>,
    ) -> Result<Option<String>> {
        while !self.done {
            let Some(key) = first_key(reader, &self.cursor, &self.stop)? else {
                self.done = true;
                break;
            };
            let Some((device, _)) = parse_wide_key(&key) else {
                bad.push(key.escape_ascii().to_string());
                self.cursor = key;
                self.cursor.push(0);
                continue;
            };
            let prefix = wide_prefix(device);
            self.cursor = prefix_successor(&prefix);
            // The device belongs to the range its first row is in. A split key can fall inside
            // its prefix but before its first row (split keys are cut from 8 bytes of a key), and
            // then no earlier range sees any of its rows: ask where its rows begin.
            if prefix < self.start
                && first_key(reader, &prefix, &self.cursor)?.is_none_or(|k| k < self.start)
            {
                continue;
            }
            return Ok(Some(device.to_string()));
        }
        Ok(None)
    }
}

/// The key of the first wide row in `[start, stop)` (`stop` empty: to the end), by a one-row
/// scan.
fn first_key(reader: &dyn TableReader, start: &[u8], stop: &[u8]) -> Result<Option<Vec<u8>>> {
    let spec = ScanSpec {
        start: start.to_vec(),
        stop: stop.to_vec(),
        limit: Some(1),
        columns: Vec::new(),
        time_range: None,
        ..ScanSpec::default()
    };
    Ok(reader
        .scan(HOURLY_TABLE, &spec)?
        .into_iter()
        .next()
        .map(|r| r.key))
}

/// Split keys dividing the table's keys into about `parts` ranges: the first and last keys are
/// found with single-row scans (the last by bisecting its 8 bytes after the common prefix), and
/// the split keys spread evenly between them, as HBase's `UniformSplit` does over a key range.
///
/// # Errors
/// A store error.
pub fn split_keys(reader: &dyn TableReader, parts: usize) -> Result<Vec<Vec<u8>>> {
    let first_at = |start: &[u8]| first_key(reader, start, &[]);
    let Some(lo) = first_at(&[])? else {
        return Ok(Vec::new());
    };
    if parts < 2 {
        return Ok(Vec::new());
    }
    // The last key's first 8 bytes, by bisection: the greatest `k` with a row at or after it.
    let word = |k: &[u8]| {
        let mut w = [0u8; 8];
        for (d, s) in w.iter_mut().zip(k) {
            *d = *s;
        }
        u64::from_be_bytes(w)
    };
    let (mut low, mut high) = (word(&lo), u64::MAX);
    while low < high {
        let mid = low + (high - low).div_ceil(2);
        if first_at(&mid.to_be_bytes())?.is_some() {
            low = mid;
        } else {
            high = mid - 1;
        }
    }
    let (a, b) = (u128::from(word(&lo)), u128::from(low) + 1);
    let n = parts as u128;
    Ok((1..n)
        .map(|i| {
            let v = (a + (b - a) * i / n) as u64;
            let bytes = v.to_be_bytes();
            let len = bytes.iter().rposition(|&x| x != 0).map_or(0, |p| p + 1);
            bytes[..len].to_vec()
        })
        .collect())
}
