//! Dashboard queries: a device's curve, a device's hour and a device's latest reading.

use serde::Serialize;

use crate::codec::hourly::wide_cell_ts_ms;
use crate::codec::key::validate_device;
use crate::codec::narrow::KeyScheme;
use crate::codec::{hourly, narrow};
use crate::reading::Reading;
use crate::summary::HourSummary;
use crate::tables::{FAMILY, HOURLY_TABLE, NARROW_TABLE};
use crate::Result;
use pipeline::time::HOUR_SECS;
use sinks::table::{Column, Row, ScanSpec, TableReader, TimeRange};

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
    validate_device(device)?;
    scan_narrow(store, scheme, device, (from, to), Vec::new(), |row| {
        narrow::reading_from_narrow(scheme, row)
    })
}

/// `decode` of each narrow row of `device` with `from <= ts < to`, oldest first: one scan,
/// of `columns` only if it names any.
fn scan_narrow<T>(
    store: &dyn TableReader,
    scheme: KeyScheme,
    device: &str,
    (from, to): (i64, i64),
    columns: Vec<Column>,
    decode: impl Fn(&Row) -> Result<T>,
) -> Result<Vec<T>> {
    let Some(range) = narrow::narrow_range(scheme, device, from, to) else {
        return Ok(Vec::new());
    };
    let spec = ScanSpec {
        start: range.start,
        stop: range.stop,
        limit: None,
        columns,
        // A narrow cell is stamped with its reading's time, which its key holds: the key range
        // already picks these timestamps, and the range lets the store skip the rest.
        time_range: Some(TimeRange::of_secs(from, to)),
        ..ScanSpec::default()
    };
    let mut out = store
        .scan(NARROW_TABLE, &spec)?
        .iter()
        .map(decode)
        .collect::<Result<Vec<_>>>()?;
    if range.newest_first {
        out.reverse();
    }
    Ok(out)
}

/// One hour of one device: its wide row, or its narrow rows when the row is marked dirty.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HourAnswer {
    /// Device id.
    pub device: String,
    /// Start of the hour, epoch seconds.
    pub hour_start: i64,
    /// `(ts, value)` points, ascending.
    pub points: Vec<(i64, f64)>,
    /// The hour's summary cells, if the row has them.
    pub summary: Option<HourSummary>,
}

/// The hour of `device` containing `at`: one Get of the wide row, and when the row is marked
/// dirty ([`hourly::is_dirty`]), one scan of the hour's narrow rows, whose points and summary
/// are then the answer (one truth: the narrow table holds every reading, the last write of a
/// second winning).
///
/// # Errors
/// A store error, or a malformed cell.
pub fn hour(
    store: &dyn TableReader,
    scheme: KeyScheme,
    device: &str,
    at: i64,
) -> Result<HourAnswer> {
    validate_device(device)?;
    let hour_start = hourly::hour_start(at);
    let key = hourly::wide_key(device, hour_start);
    let row = store.get(
        HOURLY_TABLE,
        &key,
        Some(wide_rows_time(hour_start, hour_start)),
    )?;
    match row {
        Some(row) if hourly::is_dirty(&row) => {
            let points = narrow_points(store, scheme, device, hour_start, hour_start + HOUR_SECS)?;
            Ok(HourAnswer {
                device: device.to_string(),
                hour_start,
                summary: HourSummary::of_points(&points),
                points,
            })
        }
        row => hour_answer(device, hour_start, row.as_ref()),
    }
}

/// The timestamps of the cells of the wide rows of the hours from `first` to `last` (hour
/// starts, both included). Every cell of a wide row is stamped with its hour's last millisecond
/// ([`wide_cell_ts_ms`](crate::codec::hourly::wide_cell_ts_ms)), so a Get with this range reads
/// the same cells as one without, and the store skips the files (HBase) or generations (the
/// embedded store) written for other hours.
fn wide_rows_time(first: i64, last: i64) -> TimeRange {
    TimeRange::new(
        wide_cell_ts_ms(first),
        wide_cell_ts_ms(last).saturating_add(1),
    )
}

/// Decodes the wide row of `device`'s hour at `hour_start` (`None`: no row), as stored.
fn hour_answer(device: &str, hour_start: i64, row: Option<&Row>) -> Result<HourAnswer> {
    let (points, summary) = match row {
        Some(row) => (
            hourly::points_from_wide(hour_start, row)?,
            HourSummary::from_row(row),
        ),
        None => (Vec::new(), None),
    };
    Ok(HourAnswer {
        device: device.to_string(),
        hour_start,
        points,
        summary,
    })
}

/// The `(ts, value)` points of `device`'s narrow rows with `from <= ts < to`, ascending: one
/// scan of `t:v` only (the points need neither the extras nor the room).
///
/// # Errors
/// A store error, or a malformed row.
pub fn narrow_points(
    store: &dyn TableReader,
    scheme: KeyScheme,
    device: &str,
    from: i64,
    to: i64,
) -> Result<Vec<(i64, f64)>> {
    let value = vec![Column::new(FAMILY, narrow::VALUE_QUALIFIER)];
    scan_narrow(store, scheme, device, (from, to), value, |row| {
        narrow::point_from_narrow(scheme, row)
    })
}

/// How far back from now [`latest`] looks in each of its scans but the last, which looks at
/// everything older: 10 minutes (the embedded store's generation spans grow in 10-minute steps),
/// a day, 32 days.
const LATEST_LOOKBACK_SECS: [i64; 3] = [600, 24 * HOUR_SECS, 32 * 24 * HOUR_SECS];

/// The newest reading of `device`, if it has any.
///
/// With the salted scheme this is the first row of the device's range (time is reversed in the
/// key), asked in time windows from now back: the last 10 minutes (to any time ahead), the rest
/// of the day before, the 32 days before, then everything older; the first window with a row
/// holds the newest. A narrow row's cells are stamped with its reading's time, so each window's
/// answer is the first row that a scan without one would give in it, and the stores read only
/// the files (HBase) or generations (the embedded store) written for it: a live device's newest
/// reading costs a read of the last minutes' data, not of its 90 days'. A device whose newest
/// reading is older costs a scan per window, the empty ones of few or no files.
///
/// With the plain scheme (oldest first) it is the last row, which needs a scan of the device's
/// rows.
///
/// # Errors
/// A store error, or a malformed row.
pub fn latest(store: &dyn TableReader, scheme: KeyScheme, device: &str) -> Result<Option<Reading>> {
    validate_device(device)?;
    let prefix = narrow::narrow_prefix(scheme, device);
    if scheme != KeyScheme::Salted {
        let rows = store.scan(NARROW_TABLE, &ScanSpec::prefix(&prefix))?;
        return rows
            .last()
            .map(|row| narrow::reading_from_narrow(scheme, row))
            .transpose();
    }
    let now_ms = pipeline::time::now_ms();
    let mut upper = i64::MAX;
    let lowers = LATEST_LOOKBACK_SECS
        .iter()
        .map(|secs| now_ms.saturating_sub(secs.saturating_mul(1000)))
        .chain([i64::MIN]);
    for lower in lowers {
        let mut spec = ScanSpec::prefix(&prefix);
        spec.limit = Some(1);
        spec.time_range = Some(TimeRange::new(lower, upper));
        if let Some(row) = store.scan(NARROW_TABLE, &spec)?.first() {
            return narrow::reading_from_narrow(scheme, row).map(Some);
        }
        upper = lower;
    }
    Ok(None)
}

/// Where `curve_points` reads from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CurveSource {
    /// One scan of the narrow table.
    Narrow,
    /// The wide rows of the range's hours (a multi-get a day; a dirty row's hour from the
    /// narrow table).
    Wide,
    /// Hours before the one `to` falls in from wide rows (a multi-get; the first filtered to
    /// `from`; a dirty row's hour from the narrow table), the rest of the range from the narrow
    /// table (default).
    #[default]
    Auto,
}

/// Most hours one curve reads from wide rows (one Get each): 366 days. Longer ranges would
/// cost a Get per hour whether or not the device has readings in it.
pub const MAX_WIDE_HOURS: i64 = 366 * 24;

/// Wide rows fetched per multi-get: a day, so memory follows the readings, not the range.
const HOURS_PER_GET: usize = 24;

/// The `(ts, value)` points of `device` with `from <= ts < to`, ascending, read from `source`.
///
/// Every source answers what the narrow table holds: a wide row marked dirty
/// ([`hourly::is_dirty`]: its hour got a reading past the allowed lateness, or a second twice)
/// is not read for its points, its hour's narrow rows are (one scan each). So `Auto` and `Wide`
/// equal `Narrow` once the job has written the hours' panes (for a live hour, within
/// `early_fire_secs` of a reading; for every reading whose Kafka offset is committed).
///
/// # Errors
/// A store error, a malformed row, or [`pipeline::Error::Invalid`] when `Wide` or
/// `Auto` would read more than [`MAX_WIDE_HOURS`] wide rows.
pub fn curve_points(
    store: &dyn TableReader,
    scheme: KeyScheme,
    device: &str,
    from: i64,
    to: i64,
    source: CurveSource,
) -> Result<Vec<(i64, f64)>> {
    let narrow = |from: i64, to: i64| narrow_points(store, scheme, device, from, to);
    // The hours' wide rows, a day per multi-get; `first` is an hour start before `to`.
    let wide = |first: i64, from: i64, to: i64| -> Result<Vec<(i64, f64)>> {
        let hours =
            (i128::from(to) - i128::from(first) + HOUR_SECS as i128 - 1) / HOUR_SECS as i128;
        if hours > i128::from(MAX_WIDE_HOURS) {
            return Err(crate::Error::invalid(format!(
                "the range [{from}, {to}) spans {hours} hours, more than the limit of \
                 {MAX_WIDE_HOURS} hours (366 days) read from wide rows: split it, or read the \
                 narrow table (one scan)"
            )));
        }
        let mut points = Vec::new();
        let all: Vec<i64> = (0..hours as i64).map(|k| first + k * HOUR_SECS).collect();
        for day in all.chunks(HOURS_PER_GET) {
            let keys: Vec<Vec<u8>> = day.iter().map(|&h| hourly::wide_key(device, h)).collect();
            let time = wide_rows_time(day[0], day[day.len() - 1]);
            for (&h, row) in day
                .iter()
                .zip(store.get_many(HOURLY_TABLE, &keys, Some(time))?)
            {
                let (lo, hi) = (h.max(from), (h + HOUR_SECS).min(to));
                match row {
                    Some(row) if hourly::is_dirty(&row) => points.extend(narrow(lo, hi)?),
                    row => points.extend(
                        hour_answer(device, h, row.as_ref())?
                            .points
                            .into_iter()
                            .filter(|(ts, _)| (lo..hi).contains(ts)),
                    ),
                }
            }
        }
        Ok(points)
    };
    validate_device(device)?;
    if to <= from {
        return Ok(Vec::new());
    }
    // Hour rounding below must not overflow near `i64::MIN`/`MAX`: no reading is that far out.
    let (from, to) = (
        from.max(i64::MIN + 2 * HOUR_SECS),
        to.min(i64::MAX - 2 * HOUR_SECS),
    );
    if to <= from {
        return Ok(Vec::new());
    }
    match source {
        CurveSource::Narrow => narrow(from, to),
        CurveSource::Wide => wide(hourly::hour_start(from), from, to),
        CurveSource::Auto => {
            // The hours before the one `to` falls in come from wide rows, the first one too when
            // `from` cuts it (its row is filtered: one more row in the multi-get costs less than
            // a scan); the hour of `to`, which may still be filling, from the narrow table.
            let first = hourly::hour_start(from);
            let last_whole_end = hourly::hour_start(to);
            if first >= last_whole_end {
                return narrow(from, to);
            }
            // Both at once: the narrow scan's round trip overlaps the multi-get's.
            let (wide, open) = std::thread::scope(|s| {
                let open = s.spawn(|| narrow(last_whole_end, to));
                let wide = wide(first, from, last_whole_end);
                let open = open
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
                (wide, open)
            });
            let mut points = wide?;
            points.extend(open?);
            Ok(points)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    #[test]
    fn the_wide_rows_time_range_holds_their_hours_stamps_and_no_other_hours() {
        let h = 1_796_400_000;
        let one = wide_rows_time(h, h);
        assert!(one.contains(wide_cell_ts_ms(h)));
        assert!(!one.contains(wide_cell_ts_ms(h - HOUR_SECS)));
        assert!(!one.contains(wide_cell_ts_ms(h + HOUR_SECS)));
        let day = wide_rows_time(h, h + 23 * HOUR_SECS);
        assert!((0..24).all(|k| day.contains(wide_cell_ts_ms(h + k * HOUR_SECS))));
        assert!(!day.contains(wide_cell_ts_ms(h + 24 * HOUR_SECS)));
        // Hours from the caller saturate instead of overflowing.
        let last = i64::MAX - HOUR_SECS / 2;
        assert!(wide_rows_time(last, last).max_ms > wide_rows_time(last, last).min_ms);
        assert!(wide_rows_time(i64::MIN, i64::MIN).max_ms > i64::MIN);
    }

    /// A narrow table in memory that answers scans as the stores do (prefix, limit, time range)
    /// and counts them.
    #[derive(Default)]
    struct Narrow {
        rows: std::collections::BTreeMap<Vec<u8>, Vec<sinks::table::Cell>>,
        scans: AtomicUsize,
    }

    impl Narrow {
        fn put(&mut self, device: &str, ts: i64) {
            let reading = Reading {
                device: device.to_string(),
                ts,
                value: ts as f64,
                extra: "{}".to_string(),
                room: None,
            };
            let sinks::table::Mutation::Put { row, cells, .. } =
                narrow::narrow_put(KeyScheme::Salted, &reading)
            else {
                panic!("a narrow put")
            };
            self.rows.insert(row, cells);
        }
    }

    impl TableReader for Narrow {
        fn get(&self, _: &str, _: &[u8], _: Option<TimeRange>) -> sinks::Result<Option<Row>> {
            Ok(None)
        }
        fn scan(&self, _: &str, spec: &ScanSpec) -> sinks::Result<Vec<Row>> {
            self.scans.fetch_add(1, Relaxed);
            let rows = self
                .rows
                .range(spec.start.clone()..)
                .take_while(|(k, _)| spec.stop.is_empty() || **k < spec.stop)
                .filter_map(|(key, cells)| {
                    let cells: Vec<_> = cells
                        .iter()
                        .filter(|c| spec.time_range.is_none_or(|t| t.contains(c.ts_ms)))
                        .cloned()
                        .collect();
                    (!cells.is_empty()).then(|| Row {
                        key: key.clone(),
                        cells,
                    })
                });
            Ok(rows.take(spec.limit.unwrap_or(usize::MAX)).collect())
        }
    }

    #[test]
    fn latest_finds_the_newest_reading_in_the_first_window_back_from_now_that_has_one() {
        let now = pipeline::time::now_ms() / 1000;
        let (min, day) = (60, 24 * HOUR_SECS);
        let mut store = Narrow::default();
        let cases: [(&str, &[i64], usize); 6] = [
            ("live", &[now - 5 * min, now - 2 * day, now - 40 * day], 1),
            ("ahead", &[now + HOUR_SECS, now - 10], 1),
            ("yesterday", &[now - 2 * HOUR_SECS, now - 3 * day], 2),
            ("last-month", &[now - 3 * day, now - 40 * day], 3),
            ("old", &[now - 40 * day, now - 400 * day], 4),
            ("none", &[], 4),
        ];
        for (device, stamps, _) in &cases {
            for &ts in *stamps {
                store.put(device, ts);
            }
        }
        for (device, stamps, scans) in cases {
            store.scans.store(0, Relaxed);
            let got = latest(&store, KeyScheme::Salted, device).unwrap();
            assert_eq!(got.map(|r| r.ts), stamps.iter().max().copied(), "{device}");
            assert_eq!(store.scans.load(Relaxed), scans, "{device}: scans");
        }
    }

    /// An empty store that counts the keys asked for.
    #[derive(Default)]
    struct Empty {
        keys: AtomicUsize,
        largest_get: AtomicUsize,
    }

    impl TableReader for Empty {
        fn get(&self, _: &str, _: &[u8], _: Option<TimeRange>) -> sinks::Result<Option<Row>> {
            self.keys.fetch_add(1, Relaxed);
            Ok(None)
        }
        fn get_many(
            &self,
            _: &str,
            keys: &[Vec<u8>],
            _: Option<TimeRange>,
        ) -> sinks::Result<Vec<Option<Row>>> {
            self.keys.fetch_add(keys.len(), Relaxed);
            self.largest_get.fetch_max(keys.len(), Relaxed);
            Ok(vec![None; keys.len()])
        }
        fn scan(&self, _: &str, _: &ScanSpec) -> sinks::Result<Vec<Row>> {
            Ok(Vec::new())
        }
    }

    #[test]
    fn absurd_ranges_are_refused_not_iterated() {
        let store = Empty::default();
        for source in [CurveSource::Auto, CurveSource::Wide] {
            for (from, to) in [
                (i64::MIN, i64::MAX),
                (-100_000_000_000, 0),
                (0, (MAX_WIDE_HOURS + 2) * 3600),
            ] {
                let e = curve_points(&store, KeyScheme::Salted, "dev1", from, to, source)
                    .unwrap_err()
                    .to_string();
                assert!(e.contains("366 days"), "{source:?} [{from}, {to}): {e}");
            }
        }
        assert_eq!(
            store.keys.load(Relaxed),
            0,
            "nothing is read for a refused range"
        );
        let narrow = curve_points(
            &store,
            KeyScheme::Salted,
            "dev1",
            i64::MIN,
            i64::MAX,
            CurveSource::Narrow,
        );
        assert!(narrow.unwrap().is_empty());
    }

    #[test]
    fn wide_rows_are_fetched_a_day_at_a_time() {
        let store = Empty::default();
        let hours = 30 * 24;
        let points = curve_points(
            &store,
            KeyScheme::Salted,
            "dev1",
            0,
            hours * 3600,
            CurveSource::Wide,
        )
        .unwrap();
        assert!(points.is_empty());
        assert_eq!(store.keys.load(Relaxed), hours as usize);
        assert_eq!(store.largest_get.load(Relaxed), HOURS_PER_GET);
    }
}
