//! The hourly wide table (`ts_metric_hourly`): the hour, the row key, the point and summary
//! cells, and the one rule that tells them apart.
//!
//! Row key `<device>_<hourStart>`. A point is `t:<offset>`, the metric text of the reading at
//! `hourStart + offset`, `offset` in `0..3600` written as plain decimal; the summary is `t:n`,
//! `t:min`, `t:max`, `t:sum`, `t:first`, `t:last` ([`SUMMARY_QUALIFIERS`]). Every cell of a row
//! is stamped with the hour's last millisecond ([`wide_cell_ts_ms`]), so each write of the row is
//! one atomic HBase `Put`.
//!
//! A row may also carry `t:dirty` ([`DIRTY_QUALIFIER`]): its hour got a reading the window could
//! not put in the row (past the allowed lateness, or a second it already had: a resend or a
//! correction), so the narrow table, which has every reading, answers for that hour
//! ([`is_dirty`]; docs/ARCHITECTURE.md, "One truth").

use std::time::Duration;

use operators::WindowSpec;

use super::key::{id_prefix, push_id_prefix, validate_device, SEPARATOR};
use super::{cell, parse_value};
use crate::reading::format_value;
use crate::summary::HourSummary;
use crate::tables::{FAMILY, HOURLY_TABLE};
use crate::Result;
use pipeline::time::HOUR_SECS;
use sinks::table::{prefix_successor, Cell, Mutation, Row};

/// The summary cells' qualifiers, in the order written.
pub const SUMMARY_QUALIFIERS: [&str; 6] = crate::tables::HOURLY_SUMMARY_QUALIFIERS;

/// Start of the hour containing `ts` (epoch seconds).
pub fn hour_start(ts: i64) -> i64 {
    ts - ts.rem_euclid(HOUR_SECS)
}

/// The window that fills the wide rows: hourly, accepting readings `allowed_lateness` seconds
/// after the hour's end. Its [`WindowSpec::is_final`] is also the rule by which a Kafka restart
/// knows which hours the previous run closed. It holds any number of items
/// ([`WindowSpec::max_pending`] is `None`); the job sets its budget from the configuration.
pub fn hourly_window(allowed_lateness: u64, early_fire: Option<Duration>) -> WindowSpec {
    WindowSpec {
        width: HOUR_SECS as u64,
        allowed_lateness,
        early_fire,
        max_pending: None,
    }
}

/// The wide row key of `device`'s hour starting at `hour_start`: `<device>_<hourStart>`.
pub fn wide_key(device: &str, hour_start: i64) -> Vec<u8> {
    format!("{device}_{hour_start}").into_bytes()
}

/// The prefix shared by every wide row of `device`: `<device>_`.
pub fn wide_prefix(device: &str) -> Vec<u8> {
    id_prefix(device)
}

/// The device and hour start of a wide row key `<device>_<hourStart>`, split at the last `_`;
/// `None` unless the device part is not empty and the hour is decimal digits (no sign) that fit
/// an `i64`. Neither the device id nor the hour's alignment is checked: a reader walking the
/// table takes the device from whatever key it meets, as it was written.
pub fn parse_wide_key(key: &[u8]) -> Option<(&str, i64)> {
    let text = std::str::from_utf8(key).ok()?;
    let (device, hour) = text.rsplit_once(char::from(SEPARATOR))?;
    if device.is_empty() || hour.is_empty() || !hour.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((device, hour.parse().ok()?))
}

/// The device and hour start of a wide row whose point cells the series layout keeps
/// (`tables::HOURLY_SERIES`'s split): [`parse_wide_key`]'s, if the device is a valid id (no
/// `_`), the hour start is on the hour, and the key is as [`join_wide`] writes it; `None`
/// otherwise (such a row stays generic).
pub fn split_wide(key: &[u8]) -> Option<(&str, i64)> {
    let (device, hour) = parse_wide_key(key)?;
    validate_device(device).ok()?;
    let canonical = key.len() == device.len() + 1 + decimal_len(hour);
    (canonical && hour_start(hour) == hour).then_some((device, hour))
}

/// Digits of a non-negative number in decimal.
fn decimal_len(n: i64) -> usize {
    n.checked_ilog10().map_or(1, |d| d as usize + 1)
}

/// Appends [`wide_key`]`(device, hour_start)` to `key` (the series layout's join).
pub fn join_wide(device: &str, hour_start: i64, key: &mut Vec<u8>) {
    use std::io::Write as _;
    push_id_prefix(key, device);
    // Writing to a Vec cannot fail.
    let _ = write!(key, "{hour_start}");
}

/// The device whose wide rows alone can lie in `[start, stop)`: `start` begins with a valid
/// device's prefix `<device>_` and `stop` with the same, or is the prefix's successor.
pub fn wide_device_in(start: &[u8], stop: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(start).ok()?;
    let (device, _) = text.split_once(char::from(SEPARATOR))?;
    validate_device(device).ok()?;
    let prefix = &start[..device.len() + 1];
    (stop.starts_with(prefix) || stop == prefix_successor(prefix)).then(|| device.to_string())
}

/// [`wide_cell_ts_ms`], `None` where it would saturate (the series layout's stamp).
pub fn wide_stamp(hour_start: i64) -> Option<i64> {
    hour_start
        .checked_add(HOUR_SECS)?
        .checked_mul(1000)?
        .checked_sub(1)
}

/// The time of the point a wide row's cell holds: the hour start plus the qualifier's offset,
/// if the qualifier is a point's ([`point_offset`]).
pub fn point_time(hour_start: i64, qualifier: &[u8]) -> Option<i64> {
    hour_start.checked_add(point_offset(qualifier)?)
}

/// The start of the wide row's hour that holds the point at `ts` ([`hour_start`], saturating
/// for times no row holds).
pub fn point_hour(ts: i64) -> i64 {
    ts.saturating_sub(ts.rem_euclid(HOUR_SECS))
}

/// Appends the qualifier of the point at `ts` in the wide row of `hour_start`: its offset in
/// decimal ([`wide_qualifier`] when `ts` is in the hour).
pub fn point_qualifier(hour_start: i64, ts: i64, out: &mut Vec<u8>) {
    use std::io::Write as _;
    let _ = write!(out, "{}", ts.saturating_sub(hour_start));
}

/// The timestamp (ms) of every cell of the wide row of the hour starting at `hour_start`: the
/// hour's last millisecond.
///
/// One timestamp per row makes each write of a row (a window pane: its new points and the
/// updated summary) one HBase `Put`, which HBase applies atomically, so a `Get` never sees points
/// without the summary that counts them. The row also expires as a whole (TTL from the hour's
/// end). Points are never rewritten (a repeated second is a duplicate) and the summary's rewrites
/// share the timestamp, so the latest write is the visible one.
///
/// Saturating: queries pass hours that come from their callers.
pub fn wide_cell_ts_ms(hour_start: i64) -> i64 {
    hour_start
        .saturating_add(HOUR_SECS)
        .saturating_mul(1000)
        .saturating_sub(1)
}

/// The qualifier of the point at `ts` in its wide row: the second offset `0`..`3599` as text.
pub fn wide_qualifier(ts: i64) -> Vec<u8> {
    ts.rem_euclid(HOUR_SECS).to_string().into_bytes()
}

/// The second offset of a point cell, or `None` for any other cell (the summary's).
///
/// The one rule telling points from summary cells, for everything that reads or counts wide
/// cells: a point's qualifier is exactly what [`wide_qualifier`] writes, an offset in
/// `0..3600` as decimal text without sign or leading zeros.
pub fn point_offset(qualifier: &[u8]) -> Option<i64> {
    let canonical = match qualifier {
        [b'0'] => true,
        [b'1'..=b'9', rest @ ..] => rest.len() < 4 && rest.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    let offset: i64 = std::str::from_utf8(qualifier).ok()?.parse().ok()?;
    (canonical && offset < HOUR_SECS).then_some(offset)
}

/// The qualifier of the mark that a wide row's hour has readings the row lacks or holds
/// differently: a reading past the allowed lateness, or a second that arrived again (a resend,
/// or a device's correction; the narrow table keeps the last). Its value is `1`.
pub const DIRTY_QUALIFIER: &str = "dirty";

/// The put that marks `device`'s hour at `hour_start` dirty ([`DIRTY_QUALIFIER`]): one cell,
/// stamped like the row's others, so it never expires before them. Blind (no read), so a late
/// or repeated reading costs one small put whatever the row holds, and every later write of the
/// row keeps it.
pub fn dirty_put(device: &str, hour_start: i64) -> Mutation {
    Mutation::Put {
        table: HOURLY_TABLE,
        row: wide_key(device, hour_start),
        cells: vec![cell(
            DIRTY_QUALIFIER.as_bytes().to_vec(),
            wide_cell_ts_ms(hour_start),
            b"1".to_vec(),
        )],
    }
}

/// Whether a wide row is marked dirty ([`DIRTY_QUALIFIER`]): its points and summary are not the
/// hour's truth, the narrow table's rows are.
pub fn is_dirty(row: &Row) -> bool {
    row.cell(FAMILY, DIRTY_QUALIFIER.as_bytes()).is_some()
}

/// The wide-table put of some readings `(ts, value)` of `device` in the hour at `hour_start`,
/// with the hour's summary cells when given. All cells share the row's timestamp.
pub fn wide_put(
    device: &str,
    hour_start: i64,
    items: &[(i64, f64)],
    summary: Option<&HourSummary>,
) -> Mutation {
    let summary_cells = summary.map(|s| s.cells(hour_start)).unwrap_or_default();
    wide_put_with(device, hour_start, items, summary_cells)
}

/// The put of `items`' point cells followed by `extra`, in a vector of exactly their number:
/// extending the points' vector doubled it, and a replay's puts waiting for the writer held
/// 76.5 MB of such vectors at its peak (docs/BENCHMARKS.md, where a replay's memory goes).
fn wide_put_with(
    device: &str,
    hour_start: i64,
    items: &[(i64, f64)],
    extra: Vec<Cell>,
) -> Mutation {
    let ts_ms = wide_cell_ts_ms(hour_start);
    let mut cells = Vec::with_capacity(items.len() + extra.len());
    cells.extend(
        items
            .iter()
            .map(|&(ts, v)| cell(wide_qualifier(ts), ts_ms, format_value(v).into_bytes())),
    );
    cells.extend(extra);
    Mutation::Put {
        table: HOURLY_TABLE,
        row: wide_key(device, hour_start),
        cells,
    }
}

/// The put of a window pane: its `items`, the hour's readings new since the hour's last pane,
/// and of the `summary` (the whole hour's, these items included) only the cells the items can
/// have changed ([`HourSummary::cells_touched_by`]). Every cell of a wide row has one
/// timestamp, so the row reads exactly as if every summary cell had been rewritten. When a
/// device's values vary, a live hour's early firing writes about four cells a reading (the
/// point, `n`, `sum`, `last`) instead of seven.
pub fn pane_put(
    device: &str,
    hour_start: i64,
    items: &[(i64, f64)],
    summary: &HourSummary,
) -> Mutation {
    wide_put_with(
        device,
        hour_start,
        items,
        summary.cells_touched_by(hour_start, items),
    )
}

/// The `(ts, value)` points of a wide row, ascending; summary cells are skipped.
///
/// # Errors
/// [`pipeline::Error::Invalid`] if a point's value is not a number.
pub fn points_from_wide(hour_start: i64, row: &Row) -> Result<Vec<(i64, f64)>> {
    let mut points = Vec::with_capacity(row.cells.len());
    for c in row.cells.iter().filter(|c| c.family == FAMILY) {
        if let Some(offset) = point_offset(&c.qualifier) {
            points.push((hour_start + offset, parse_value(&c.value)?));
        }
    }
    points.sort_by_key(|p| p.0);
    Ok(points)
}

impl HourSummary {
    /// The summary cells of the hour starting at `hour_start`, stamped like every cell of the
    /// wide row ([`wide_cell_ts_ms`]): each rewrite has the same timestamp and the latest write
    /// is visible.
    pub fn cells(&self, hour_start: i64) -> Vec<Cell> {
        self.cells_where(hour_start, [true; SUMMARY_QUALIFIERS.len()])
    }

    /// The cells of [`HourSummary::cells`] that adding the readings `items` to the hour can have
    /// changed: `n` and `sum`, and `min`, `max`, `first` or `last` only when one of the items
    /// has its value. A value that changed was taken from an item, so an item has it; an equal
    /// value that did not change is rewritten with the same bytes, which is harmless.
    pub fn cells_touched_by(&self, hour_start: i64, items: &[(i64, f64)]) -> Vec<Cell> {
        let has = |x: f64| items.iter().any(|&(_, v)| v == x);
        let touched = [
            true,
            has(self.min),
            has(self.max),
            true,
            has(self.first),
            has(self.last),
        ];
        self.cells_where(hour_start, touched)
    }

    /// The summary cells whose [`SUMMARY_QUALIFIERS`] index `keep` marks; only their values are
    /// formatted.
    fn cells_where(&self, hour_start: i64, keep: [bool; SUMMARY_QUALIFIERS.len()]) -> Vec<Cell> {
        let ts_ms = wide_cell_ts_ms(hour_start);
        // After `n`, in the order of `SUMMARY_QUALIFIERS`.
        let floats = [self.min, self.max, self.sum, self.first, self.last];
        SUMMARY_QUALIFIERS
            .iter()
            .enumerate()
            .filter(|&(i, _)| keep[i])
            .map(|(i, q)| {
                let value = match i {
                    0 => self.n.to_string(),
                    _ => format_value(floats[i - 1]),
                };
                cell(q.as_bytes().to_vec(), ts_ms, value.into_bytes())
            })
            .collect()
    }

    /// Reads the summary cells of a wide row, if it has them all.
    pub fn from_row(row: &Row) -> Option<Self> {
        let get = |q: &str| -> Option<f64> {
            std::str::from_utf8(&row.cell(FAMILY, q.as_bytes())?.value)
                .ok()?
                .parse()
                .ok()
        };
        Some(HourSummary {
            n: get("n")? as u32,
            min: get("min")?,
            max: get("max")?,
            sum: get("sum")?,
            first: get("first")?,
            last: get("last")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn put_row(m: Mutation) -> Row {
        let Mutation::Put { row, cells, .. } = m else {
            panic!("wide_put makes a put, got {m:?}")
        };
        Row { key: row, cells }
    }

    #[test]
    fn a_put_holds_exactly_its_cells() {
        let items: Vec<(i64, f64)> = (0..20)
            .map(|i| (7200 + i * 10, f64::from(i as u8)))
            .collect();
        let summary = HourSummary::of_points(&items).unwrap();
        for put in [
            pane_put("d", 7200, &items, &summary),
            wide_put("d", 7200, &items, Some(&summary)),
        ] {
            let Mutation::Put { cells, .. } = put else {
                panic!("a wide put, got {put:?}")
            };
            assert!(cells.len() > items.len());
            assert_eq!(cells.capacity(), cells.len());
        }
    }

    #[test]
    fn wide_key_and_qualifier() {
        assert_eq!(
            wide_key("dev00786", hour_start(1724104799)),
            b"dev00786_1724101200".to_vec()
        );
        assert_eq!(wide_qualifier(1724104799), b"3599".to_vec());
        assert_eq!(wide_qualifier(1724101200), b"0".to_vec());
        assert_eq!(wide_cell_ts_ms(1724101200), 1724104799999);
    }

    #[test]
    fn parse_wide_key_takes_the_device_before_the_last_separator() {
        assert_eq!(
            parse_wide_key(b"dev-1_1764547200"),
            Some(("dev-1", 1764547200))
        );
        assert_eq!(parse_wide_key(b"dev-1_"), None);
        assert_eq!(parse_wide_key(b"_1764547200"), None);
        assert_eq!(parse_wide_key(b"dev-1_17x"), None);
        assert_eq!(parse_wide_key(b"dev-1_+3600"), None);
        assert_eq!(parse_wide_key(b"dev-1"), None);
        assert_eq!(parse_wide_key(b"dev-1_99999999999999999999"), None);
        // Not a device id, but the key's device as written.
        assert_eq!(parse_wide_key(b"a_b_3600"), Some(("a_b", 3600)));
    }

    #[test]
    fn a_dirty_mark_is_one_cell_of_the_row_stamped_as_its_others_and_no_point() {
        let row = put_row(dirty_put("d", 3600));
        assert_eq!(row.key, wide_key("d", 3600));
        assert!(is_dirty(&row));
        assert_eq!(row.cells.len(), 1);
        assert_eq!(row.cells[0].ts_ms, wide_cell_ts_ms(3600));
        assert_eq!(point_offset(&row.cells[0].qualifier), None);
        assert_eq!(points_from_wide(3600, &row).unwrap(), vec![]);
        assert_eq!(HourSummary::from_row(&row), None);
        let clean = put_row(wide_put("d", 3600, &[(3601, 1.0)], None));
        assert!(!is_dirty(&clean));
    }

    #[test]
    fn the_series_layout_maps_exactly_the_rows_and_cells_a_wide_put_writes() {
        let hour = 1_796_400_000;
        let points = [(hour, 1.5), (hour + 10, -2.0), (hour + 3599, 7.25)];
        let summary = HourSummary::of_points(&points).unwrap();
        let row = put_row(wide_put("dev-1", hour, &points, Some(&summary)));
        assert_eq!(split_wide(&row.key), Some(("dev-1", hour)));
        let mut key = Vec::new();
        join_wide("dev-1", hour, &mut key);
        assert_eq!(key, row.key);
        let mut seen = Vec::new();
        for c in &row.cells {
            assert_eq!(wide_stamp(hour), Some(c.ts_ms));
            let Some(ts) = point_time(hour, &c.qualifier) else {
                continue;
            };
            assert_eq!(point_hour(ts), hour);
            let mut q = Vec::new();
            point_qualifier(hour, ts, &mut q);
            assert_eq!(q, c.qualifier);
            seen.push(ts);
        }
        assert_eq!(seen, points.map(|p| p.0), "points only, summary apart");
        assert_eq!(point_time(hour, DIRTY_QUALIFIER.as_bytes()), None);
        // Rows the layout leaves generic: an id with `_`, off the hour, not as written.
        for key in [
            "dev_1_1796400000",
            "dev-1_1796400001",
            "dev-1_01796400000",
            "dev-1_",
            "_3600",
        ] {
            assert_eq!(split_wide(key.as_bytes()), None, "{key}");
        }
        assert_eq!(split_wide(b"d_0"), Some(("d", 0)));
        assert_eq!(wide_stamp(i64::MAX - 10), None);
        // One device's rows, and only then, are one series.
        let one = |start: &[u8], stop: &[u8]| wide_device_in(start, stop);
        assert_eq!(
            one(b"dev-1_1796400000", b"dev-1_1796403600"),
            Some("dev-1".into())
        );
        assert_eq!(one(b"dev-1_", b"dev-1`"), Some("dev-1".into()));
        assert_eq!(one(b"dev-1_", b"dev-2_"), None);
        assert_eq!(one(b"dev-1", b"dev-1`"), None);
    }

    #[test]
    fn summary_qualifiers_are_not_points_and_only_written_offsets_are() {
        assert_eq!(point_offset(DIRTY_QUALIFIER.as_bytes()), None);
        for q in SUMMARY_QUALIFIERS {
            assert_eq!(point_offset(q.as_bytes()), None, "{q}");
        }
        for q in ["3600", "+5", "05", "-0", "9x", "", "00", "12345"] {
            assert_eq!(point_offset(q.as_bytes()), None, "{q:?}");
        }
        assert_eq!(point_offset(b"0"), Some(0));
        assert_eq!(point_offset(b"3599"), Some(3599));
    }

    #[test]
    fn every_cell_of_a_wide_row_has_the_hours_last_millisecond() {
        let points = [(3601, 1.5), (7199, 2.0)];
        let summary = HourSummary::of_points(&points).unwrap();
        let row = put_row(wide_put("d", 3600, &points, Some(&summary)));
        assert_eq!(row.key, b"d_3600");
        assert_eq!(row.cells.len(), 2 + SUMMARY_QUALIFIERS.len());
        assert!(row.cells.iter().all(|c| c.ts_ms == 7_199_999), "{row:?}");
        assert_eq!(points_from_wide(3600, &row).unwrap(), points);
        assert_eq!(HourSummary::from_row(&row), Some(summary));
    }

    proptest! {
        #[test]
        fn points_and_summary_round_trip(
            hour in 0i64..3_000_000, offsets in proptest::collection::btree_set(0i64..3600, 0..40),
            v in -1e6f64..1e6,
        ) {
            let hour = hour * HOUR_SECS;
            let points: Vec<(i64, f64)> =
                offsets.iter().map(|&o| (hour + o, v + o as f64)).collect();
            let summary = HourSummary::of_points(&points);
            let row = put_row(wide_put("dev-1", hour, &points, summary.as_ref()));
            prop_assert_eq!(points_from_wide(hour, &row).unwrap(), points.clone());
            prop_assert_eq!(HourSummary::from_row(&row), summary);
            let point_cells = row.cells.iter().filter(|c| point_offset(&c.qualifier).is_some());
            prop_assert_eq!(point_cells.count(), points.len());
            for &(ts, _) in &points {
                prop_assert_eq!(hour_start(ts), hour);
            }
        }

        /// The hour's readings arrive in panes, in any order (late and out-of-order readings
        /// included, values repeating); each pane's put, as the window makes it, is applied over
        /// the row the earlier ones left (last write of a cell wins, as in both stores). The row
        /// must read the summary of all readings, as if every pane had rewritten every cell.
        #[test]
        fn pane_puts_add_up_to_the_hours_summary(
            readings in proptest::collection::vec((0i64..3600, -3i32..4), 1..60),
            cuts in proptest::collection::vec(1usize..8, 1..20),
        ) {
            let hour = 7 * HOUR_SECS;
            let mut acc = crate::summary::HourAccumulator::default();
            let mut stored: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = Default::default();
            let (mut at, mut cut) = (0, cuts.iter().cycle());
            let mut writes = 0;
            while at < readings.len() {
                let end = (at + cut.next().unwrap()).min(readings.len());
                // The window's pane: the readings it accepted (a repeated second is a duplicate).
                let mut items: Vec<(i64, f64)> = readings[at..end]
                    .iter()
                    .map(|&(o, v)| (hour + o, f64::from(v) / 2.0))
                    .filter(|&(ts, v)| operators::Accumulate::accept(&mut acc, ts as u64, &v))
                    .collect();
                at = end;
                if items.is_empty() {
                    continue;
                }
                items.sort_by_key(|p| p.0);
                let summary = operators::Accumulate::summary(&acc);
                let row = put_row(pane_put("dev-1", hour, &items, &summary));
                for c in row.cells {
                    writes += usize::from(SUMMARY_QUALIFIERS.contains(&std::str::from_utf8(&c.qualifier).unwrap_or("")));
                    stored.insert(c.qualifier, c.value);
                }
            }
            let row = Row {
                key: wide_key("dev-1", hour),
                cells: stored.into_iter().map(|(q, v)| cell(q, wide_cell_ts_ms(hour), v)).collect(),
            };
            let expected = operators::Accumulate::summary(&acc);
            prop_assert_eq!(HourSummary::from_row(&row), Some(expected));
            prop_assert!(writes >= SUMMARY_QUALIFIERS.len());
        }

        #[test]
        fn wide_key_round_trips_and_its_prefix_holds_exactly_the_devices_rows(
            d in "[A-Za-z0-9.:-]{1,12}", other in "[A-Za-z0-9.:-]{1,12}",
            ts in 0i64..9_999_999_999,
        ) {
            let key = wide_key(&d, hour_start(ts));
            prop_assert_eq!(parse_wide_key(&key), Some((d.as_str(), hour_start(ts))));
            prop_assert!(key.starts_with(&wide_prefix(&d)));
            prop_assert_eq!(wide_key(&other, hour_start(ts)).starts_with(&wide_prefix(&d)), other == d);
        }

        #[test]
        fn hour_start_is_the_window_start(ts in 0i64..9_999_999_999, lateness in 0u64..10_000) {
            let spec = hourly_window(lateness, None);
            prop_assert_eq!(hour_start(ts) as u64, spec.window_start(ts as u64));
            prop_assert!(hour_start(ts) <= ts && ts < hour_start(ts) + HOUR_SECS);
        }
    }
}
