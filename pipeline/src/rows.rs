//! How readings become cells, and how cells become readings again.
//!
//! Narrow row (`ts_metric`): `t:v` = primary metric as text, `t:x` = the reading's other fields
//! as compact JSON (absent when there are none). Device and time come from the row key, so a
//! reading is recovered as `{device, ts, <metric>: v, ..x}`. Wide row (`ts_metric_hourly`):
//! `t:<offset>` = metric text of the reading at `hourStart + offset`, plus the summary cells. A
//! narrow cell's timestamp is the event time in milliseconds, so HBase time-range scans and TTL
//! follow event time; every cell of a wide row is stamped with the hour's last millisecond
//! ([`rowkey::wide_cell_ts_ms`]), so each write of the row is one atomic HBase `Put`.

use crate::reading::{format_value, Reading};
use crate::rowkey::{self, KeyScheme};
use crate::schema::{FAMILY, HOURLY_TABLE, NARROW_TABLE};
use crate::summary::HourSummary;
use crate::table::{Cell, Mutation, Row};
use crate::{Error, Result};

/// Qualifier of the primary metric in a narrow row.
pub const VALUE_QUALIFIER: &[u8] = b"v";
/// Qualifier of the other fields in a narrow row.
pub const EXTRA_QUALIFIER: &[u8] = b"x";

fn cell(qualifier: Vec<u8>, ts: i64, value: Vec<u8>) -> Cell {
    Cell {
        family: FAMILY.to_string(),
        qualifier,
        ts_ms: ts * 1000,
        value,
    }
}

/// The narrow-table put of a reading.
pub fn narrow_put(scheme: KeyScheme, r: &Reading) -> Mutation {
    let mut cells = vec![cell(
        VALUE_QUALIFIER.to_vec(),
        r.ts,
        format_value(r.value).into_bytes(),
    )];
    if r.extra != "{}" {
        cells.push(cell(
            EXTRA_QUALIFIER.to_vec(),
            r.ts,
            r.extra.as_bytes().to_vec(),
        ));
    }
    Mutation::Put {
        table: NARROW_TABLE,
        row: rowkey::narrow_key(scheme, &r.device, r.ts),
        cells,
    }
}

/// The wide-table put of some readings `(ts, value)` of `device` in the hour at `hour_start`,
/// with the hour's summary cells when given. All cells share the row's timestamp.
pub fn wide_put(
    device: &str,
    hour_start: i64,
    items: &[(i64, f64)],
    summary: Option<&HourSummary>,
) -> Mutation {
    let ts_ms = rowkey::wide_cell_ts_ms(hour_start);
    let mut cells: Vec<Cell> = items
        .iter()
        .map(|&(ts, v)| Cell {
            family: FAMILY.to_string(),
            qualifier: rowkey::wide_qualifier(ts),
            ts_ms,
            value: format_value(v).into_bytes(),
        })
        .collect();
    if let Some(s) = summary {
        cells.extend(s.cells(hour_start));
    }
    Mutation::Put {
        table: HOURLY_TABLE,
        row: rowkey::wide_key(device, hour_start),
        cells,
    }
}

fn parse_value(bytes: &[u8]) -> Result<f64> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
        .ok_or_else(|| {
            Error::Invalid(format!(
                "cell value {:?} is not a number",
                String::from_utf8_lossy(bytes)
            ))
        })
}

/// Recovers the reading stored in a narrow row.
///
/// # Errors
/// [`Error::Invalid`] if the key or the `t:v` cell is malformed.
pub fn reading_from_narrow(scheme: KeyScheme, row: &Row) -> Result<Reading> {
    let key = rowkey::parse_narrow_key(scheme, &row.key)?;
    let value = row.cell(FAMILY, VALUE_QUALIFIER).ok_or_else(|| {
        Error::Invalid(format!(
            "row {:?} has no t:v cell",
            String::from_utf8_lossy(&row.key)
        ))
    })?;
    let extra = row.cell(FAMILY, EXTRA_QUALIFIER).map_or_else(
        || "{}".to_string(),
        |c| String::from_utf8_lossy(&c.value).into_owned(),
    );
    Ok(Reading {
        device: key.device,
        ts: key.ts,
        value: parse_value(&value.value)?,
        extra,
    })
}

/// The `(ts, value)` points of a wide row, ascending; cells with non-numeric qualifiers
/// (summaries) are skipped.
///
/// # Errors
/// [`Error::Invalid`] if a point's value is not a number.
pub fn points_from_wide(hour_start: i64, row: &Row) -> Result<Vec<(i64, f64)>> {
    let mut points = Vec::with_capacity(row.cells.len());
    for c in row.cells.iter().filter(|c| c.family == FAMILY) {
        let Some(offset) = std::str::from_utf8(&c.qualifier)
            .ok()
            .and_then(|q| q.parse::<i64>().ok())
        else {
            continue;
        };
        if (0..3600).contains(&offset) {
            points.push((hour_start + offset, parse_value(&c.value)?));
        }
    }
    points.sort_by_key(|p| p.0);
    Ok(points)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn narrow_round_trip() {
        let r = Reading {
            device: "dev1".into(),
            ts: 1724102401,
            value: 25.5,
            extra: r#"{"room":"r1"}"#.into(),
        };
        let Mutation::Put { row, cells, table } = narrow_put(KeyScheme::Salted, &r) else {
            panic!()
        };
        assert_eq!(table, NARROW_TABLE);
        assert_eq!(cells[0].value, b"25.5");
        assert_eq!(cells[0].ts_ms, 1724102401000);
        let back = reading_from_narrow(KeyScheme::Salted, &Row { key: row, cells }).unwrap();
        assert_eq!(back, r);
    }

    #[test]
    fn no_extra_cell_without_extra_fields() {
        let r = Reading {
            device: "d".into(),
            ts: 5,
            value: 1.0,
            extra: "{}".into(),
        };
        let Mutation::Put { cells, .. } = narrow_put(KeyScheme::Plain, &r) else {
            panic!()
        };
        assert_eq!(cells.len(), 1);
    }

    #[test]
    fn every_cell_of_a_wide_row_has_the_hours_last_millisecond() {
        let points = [(3601, 1.5), (7199, 2.0)];
        let summary = HourSummary::of_points(&points).unwrap();
        let Mutation::Put { cells, .. } = wide_put("d", 3600, &points, Some(&summary)) else {
            panic!()
        };
        assert_eq!(cells.len(), 2 + crate::summary::QUALIFIERS.len());
        assert!(cells.iter().all(|c| c.ts_ms == 7_199_999), "{cells:?}");
    }

    #[test]
    fn wide_points_skip_summaries() {
        let Mutation::Put { row, mut cells, .. } =
            wide_put("d", 3600, &[(3601, 1.5), (7199, 2.0)], None)
        else {
            panic!()
        };
        assert_eq!(row, b"d_3600");
        assert_eq!(cells[1].qualifier, b"3599");
        cells.push(Cell {
            family: FAMILY.into(),
            qualifier: b"max".to_vec(),
            ts_ms: 0,
            value: b"2".to_vec(),
        });
        let points = points_from_wide(3600, &Row { key: row, cells }).unwrap();
        assert_eq!(points, vec![(3601, 1.5), (7199, 2.0)]);
    }
}
