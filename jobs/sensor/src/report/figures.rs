//! The report's figures: one hour of a device as read from its wide row, and their sums over a
//! month per device and per room.

use std::collections::BTreeMap;

use crate::codec::hourly::{hourly_window, point_offset};
use crate::summary::HourSummary;
use pipeline::time::HOUR_SECS;
use serde::Serialize;
use sinks::table::Row;

/// Seconds of a day, for the per-day chart.
const DAY_SECS: i64 = 86_400;

/// What the report reads of one wide row: its summary cells' values, and of the point cells
/// only their qualifiers (the seconds of the hour that have a reading), for gaps and intervals.
#[derive(Debug, Clone, PartialEq)]
pub struct HourFigures {
    /// Start of the hour, epoch seconds.
    pub hour: i64,
    /// The summary cells.
    pub summary: HourSummary,
    /// Offsets of the first and last readings in the hour (from the point qualifiers).
    pub first_offset: i64,
    /// See `first_offset`.
    pub last_offset: i64,
    /// Longest gap between two readings inside the hour, seconds (0 with fewer than two).
    pub max_gap: i64,
}

impl HourFigures {
    /// Reads the hour starting at `hour` from its wide row; `None` when the row lacks summary
    /// cells or point cells (not a row the window wrote).
    pub fn from_row(hour: i64, row: &Row) -> Option<Self> {
        let summary = HourSummary::from_row(row)?;
        let mut seen = [0u64; (HOUR_SECS as usize).div_ceil(64)];
        for c in &row.cells {
            if let Some(o) = point_offset(&c.qualifier) {
                seen[o as usize / 64] |= 1 << (o % 64);
            }
        }
        let mut offsets = seen.iter().enumerate().flat_map(|(w, &bits)| {
            (0..64)
                .filter(move |b| bits & (1 << b) != 0)
                .map(move |b| (w * 64 + b) as i64)
        });
        let first = offsets.next()?;
        let (mut last, mut max_gap) = (first, 0);
        for o in offsets {
            max_gap = max_gap.max(o - last);
            last = o;
        }
        Some(HourFigures {
            hour,
            summary,
            first_offset: first,
            last_offset: last,
            max_gap,
        })
    }

    /// The same figures from `(ts, value)` readings of one hour with distinct seconds, as the
    /// narrow table has them: a dirty hour's, and tests comparing the two tables.
    pub fn of_points(hour: i64, points: &[(i64, f64)]) -> Option<Self> {
        let summary = HourSummary::of_points(points)?;
        let mut offsets: Vec<i64> = points.iter().map(|p| p.0 - hour).collect();
        offsets.sort_unstable();
        let max_gap = offsets.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
        Some(HourFigures {
            hour,
            summary,
            first_offset: offsets[0],
            last_offset: offsets[offsets.len() - 1],
            max_gap,
        })
    }
}

/// Where a device's reading interval comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IntervalSource {
    /// `--interval`.
    Flag,
    /// The median over the month's hours with two readings or more of (last − first) ÷ (n − 1).
    MedianHourlySpacing,
}

/// One day of a device or room, for the chart.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Day {
    /// Start of the day (UTC), epoch seconds.
    pub day: i64,
    /// Readings.
    pub readings: u64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Sum of the values.
    pub sum: f64,
}

/// A device's month, or a room's.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MonthFigures {
    /// Device id, or room id.
    pub name: String,
    /// The device's room (from the registry or the room view), or empty; for a room, empty.
    pub room: String,
    /// Devices counted (1 for a device).
    pub devices: u64,
    /// Readings (distinct seconds).
    pub readings: u64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// Sum of the hourly sums ÷ readings.
    pub mean: f64,
    /// Readings expected over the month so far at the interval (`None`: interval unknown).
    pub expected: Option<u64>,
    /// `readings ÷ expected`.
    pub coverage: Option<f64>,
    /// Seconds between readings (a room: none).
    pub interval_secs: Option<i64>,
    /// Where `interval_secs` comes from.
    pub interval_source: Option<IntervalSource>,
    /// Longest time between two consecutive readings in the month, seconds.
    pub longest_gap_secs: i64,
    /// Hours with readings.
    pub hours: u64,
    /// Hours still open to late data (their figures may still change).
    pub provisional_hours: u64,
    /// Per day, for the chart.
    #[serde(skip)]
    pub days: Vec<Day>,
}

/// The month from `month_start` to `month_end` as the report sees it: `now` bounds the expected
/// readings and decides which hours are still open (`hour end + lateness > now`).
#[derive(Debug, Clone, Copy)]
pub struct Window {
    /// First second of the month.
    pub month_start: i64,
    /// First second after the month.
    pub month_end: i64,
    /// The report's now, epoch seconds.
    pub now: i64,
    /// Allowed lateness of the hourly window, seconds.
    pub lateness: u64,
    /// `--interval`, when given.
    pub interval: Option<i64>,
}

impl Window {
    /// Whether the hour at `hour` may still change with late data: the hourly window
    /// ([`hourly_window`] with the allowed lateness) has not made it final at `now`
    /// ([`operators::WindowSpec::is_final`]), so the report cannot disagree with the job.
    pub fn provisional(&self, hour: i64) -> bool {
        // The window's times are unsigned; the report's are epoch seconds of a month (a time
        // before the epoch counts as the epoch).
        let epoch = |t: i64| u64::try_from(t).unwrap_or(0);
        !hourly_window(self.lateness, None).is_final(epoch(hour), epoch(self.now))
    }
}

/// A device's month from its hours (any order; at most one per hour).
pub fn device_month(
    device: &str,
    room: &str,
    mut hours: Vec<HourFigures>,
    w: &Window,
) -> Option<MonthFigures> {
    hours.sort_by_key(|h| h.hour);
    let first = hours.first()?;
    let (mut readings, mut min, mut max, mut sum) =
        (0u64, first.summary.min, first.summary.max, 0.0);
    let (mut gap, mut provisional) = (0i64, 0u64);
    let mut prev_last: Option<i64> = None;
    let mut spacings = Vec::new();
    let mut days: BTreeMap<i64, Day> = BTreeMap::new();
    for h in &hours {
        let s = &h.summary;
        readings += u64::from(s.n);
        min = min.min(s.min);
        max = max.max(s.max);
        sum += s.sum;
        gap = gap.max(h.max_gap);
        if let Some(prev) = prev_last {
            gap = gap.max(h.hour + h.first_offset - prev);
        }
        prev_last = Some(h.hour + h.last_offset);
        if s.n >= 2 {
            spacings.push((h.last_offset - h.first_offset) as f64 / f64::from(s.n - 1));
        }
        if w.provisional(h.hour) {
            provisional += 1;
        }
        let day = h.hour - h.hour.rem_euclid(DAY_SECS);
        let d = days.entry(day).or_insert(Day {
            day,
            readings: 0,
            min: s.min,
            max: s.max,
            sum: 0.0,
        });
        d.readings += u64::from(s.n);
        d.min = d.min.min(s.min);
        d.max = d.max.max(s.max);
        d.sum += s.sum;
    }
    let (interval, source) = match w.interval {
        Some(i) => (Some(i), Some(IntervalSource::Flag)),
        None if spacings.is_empty() => (None, None),
        None => {
            spacings.sort_by(f64::total_cmp);
            let mid = spacings.len() / 2;
            let median = if spacings.len() % 2 == 1 {
                spacings[mid]
            } else {
                (spacings[mid - 1] + spacings[mid]) / 2.0
            };
            (
                Some((median.round() as i64).max(1)),
                Some(IntervalSource::MedianHourlySpacing),
            )
        }
    };
    let elapsed = w.now.clamp(w.month_start, w.month_end) - w.month_start;
    let expected = interval.map(|i| (elapsed / i) as u64);
    Some(MonthFigures {
        name: device.to_string(),
        room: room.to_string(),
        devices: 1,
        readings,
        min,
        max,
        mean: sum / readings as f64,
        expected,
        coverage: expected
            .filter(|&e| e > 0)
            .map(|e| readings as f64 / e as f64),
        interval_secs: interval,
        interval_source: source,
        longest_gap_secs: gap,
        hours: hours.len() as u64,
        provisional_hours: provisional,
        days: days.into_values().collect(),
    })
}

/// A room's month from its devices' months: readings, extremes and gaps over all of them; the
/// expected readings are summed over the devices whose interval is known.
pub fn room_month(room: &str, devices: &[&MonthFigures]) -> Option<MonthFigures> {
    let first = devices.first()?;
    let mut r = MonthFigures {
        name: room.to_string(),
        room: String::new(),
        devices: 0,
        readings: 0,
        min: first.min,
        max: first.max,
        mean: 0.0,
        expected: None,
        coverage: None,
        interval_secs: None,
        interval_source: None,
        longest_gap_secs: 0,
        hours: 0,
        provisional_hours: 0,
        days: Vec::new(),
    };
    let (mut sum, mut expected, mut readings_with_expected) = (0.0, 0u64, 0u64);
    let mut days: BTreeMap<i64, Day> = BTreeMap::new();
    for d in devices {
        r.devices += 1;
        r.readings += d.readings;
        r.min = r.min.min(d.min);
        r.max = r.max.max(d.max);
        sum += d.mean * d.readings as f64;
        if let Some(e) = d.expected {
            expected += e;
            readings_with_expected += d.readings;
        }
        r.longest_gap_secs = r.longest_gap_secs.max(d.longest_gap_secs);
        r.hours += d.hours;
        r.provisional_hours += d.provisional_hours;
        for day in &d.days {
            let e = days.entry(day.day).or_insert(Day {
                day: day.day,
                readings: 0,
                min: day.min,
                max: day.max,
                sum: 0.0,
            });
            e.readings += day.readings;
            e.min = e.min.min(day.min);
            e.max = e.max.max(day.max);
            e.sum += day.sum;
        }
    }
    r.mean = sum / r.readings as f64;
    if devices.iter().any(|d| d.expected.is_some()) {
        r.expected = Some(expected);
        r.coverage = (expected > 0).then(|| readings_with_expected as f64 / expected as f64);
    }
    r.days = days.into_values().collect();
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::hourly::wide_put;
    use sinks::table::Mutation;

    fn row(hour: i64, points: &[(i64, f64)]) -> Row {
        let summary = HourSummary::of_points(points);
        let Mutation::Put { row, cells, .. } = wide_put("d", hour, points, summary.as_ref()) else {
            panic!("a put")
        };
        Row { key: row, cells }
    }

    #[test]
    fn a_wide_row_gives_the_figures_of_its_points() {
        let points = [(3600, 1.0), (3610, 4.0), (3700, 2.0), (7199, 3.0)];
        let from_row = HourFigures::from_row(3600, &row(3600, &points)).unwrap();
        assert_eq!(
            Some(from_row.clone()),
            HourFigures::of_points(3600, &points)
        );
        assert_eq!((from_row.first_offset, from_row.last_offset), (0, 3599));
        assert_eq!(from_row.max_gap, 3499);
    }

    #[test]
    fn gaps_span_hours_and_open_hours_are_provisional() {
        let w = Window {
            month_start: 0,
            month_end: 30 * 86_400,
            now: 3 * 3600 + 100,
            lateness: 3600,
            interval: None,
        };
        let h0 = HourFigures::of_points(0, &[(0, 1.0), (10, 2.0), (3590, 3.0)]).unwrap();
        let h2 = HourFigures::of_points(7200, &[(7300, 5.0), (7310, 0.0)]).unwrap();
        let m = device_month("d", "r", vec![h2, h0], &w).unwrap();
        assert_eq!(m.readings, 5);
        assert_eq!((m.min, m.max, m.mean), (0.0, 5.0, 11.0 / 5.0));
        assert_eq!(m.longest_gap_secs, 7300 - 3590);
        // Spacings 1795 and 10: median 902.5 rounds to 903.
        assert_eq!(m.interval_secs, Some(903));
        assert_eq!(m.expected, Some((3 * 3600 + 100) / 903));
        // Hour 2 ends at 10800; + 3600 lateness is past now.
        assert_eq!(m.provisional_hours, 1);
    }

    #[test]
    fn an_hour_is_provisional_until_its_end_plus_the_lateness() {
        let w = |now, lateness| Window {
            month_start: 0,
            month_end: 30 * 86_400,
            now,
            lateness,
            interval: None,
        };
        for (now, lateness, provisional) in [
            (3600 + 3599, 0, true),
            (7200, 0, false),
            (7200 + 59, 60, true),
            (7200 + 60, 60, false),
            (0, u64::MAX, true),
        ] {
            assert_eq!(
                w(now, lateness).provisional(3600),
                provisional,
                "now {now}, lateness {lateness}"
            );
        }
    }
}
