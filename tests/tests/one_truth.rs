//! One truth: whatever the arrival order, the lateness and the repeated seconds of a recording,
//! after `hourglass replay` the default curve equals the narrow table's scan, and each hour's
//! points and summary (`query hour`, what the dashboard's hour and the report show) equal those
//! computed from the hour's narrow rows. The narrow table itself holds the last line of each
//! second (the duplicate rule: the last write wins), with 2 workers too: a replay reads each
//! device's lines on one worker, in order.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::sync::Arc;

use e2e::{hourglass_command, succeeded, NOW};
use proptest::prelude::*;
use sensor::codec::narrow::KeyScheme;
use sensor::query::{self, CurveSource};
use sensor::summary::HourSummary;
use sensor::tables::all_tables;
use sinks::embedded::EmbeddedStore;

/// The recording's first hour, a day before the tests' `NOW` (so no hour is live: each is
/// written at its on-time firing and by late panes, as a replay of the past is).
const B: i64 = 1_724_097_600;
const HOURS: i64 = 3;
const STEP: i64 = 60;
const DEVICES: [&str; 3] = ["dev00786", "sensor-1", "gw-7:t.s-0001"];

/// A reading as a line of the recording.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Line {
    device: usize,
    ts: i64,
    /// Half-units, so that every value and sum is exact.
    value: i32,
}

/// The regular timeline: every device every `STEP` seconds, with a per-device phase.
fn timeline() -> Vec<Line> {
    let mut lines = Vec::new();
    for t in (0..HOURS * 3600).step_by(STEP as usize) {
        for device in 0..DEVICES.len() {
            lines.push(Line {
                device,
                ts: B + t + 7 * device as i64,
                value: (t / STEP) as i32 % 40 - 10 + device as i32,
            });
        }
    }
    lines
}

/// What happens to the timeline before it is written.
#[derive(Debug, Clone)]
enum Change {
    /// Swap two lines at most 40 apart: out of order, mostly within the watermark bound.
    Swap(usize, usize),
    /// A second arrives again `after` lines later, with this value (a resend or a correction).
    Repeat { at: usize, after: usize, value: i32 },
    /// A line moves `after` lines later: late, within the lateness or far beyond it.
    Delay { at: usize, after: usize },
}

fn change() -> impl Strategy<Value = Change> {
    let n = (HOURS * 3600 / STEP) as usize * DEVICES.len();
    prop_oneof![
        (0..n, 1usize..40).prop_map(move |(i, d)| Change::Swap(i, (i + d).min(n - 1))),
        (0..n, 0usize..200, -30i32..30).prop_map(|(at, after, value)| Change::Repeat {
            at,
            after,
            value
        }),
        (0..n, 100usize..n).prop_map(|(at, after)| Change::Delay { at, after }),
    ]
}

fn apply(mut lines: Vec<Line>, changes: &[Change]) -> Vec<Line> {
    for c in changes {
        let n = lines.len();
        match *c {
            Change::Swap(i, j) => lines.swap(i.min(n - 1), j.min(n - 1)),
            Change::Repeat { at, after, value } => {
                let at = at.min(n - 1);
                let again = Line { value, ..lines[at] };
                lines.insert((at + 1 + after).min(n), again);
            }
            Change::Delay { at, after } => {
                let at = at.min(n - 1);
                let line = lines.remove(at);
                lines.insert((at + after).min(n - 1), line);
            }
        }
    }
    lines
}

/// The narrow table as the duplicate rule makes it: the last line of each second wins.
fn last_wins(lines: &[Line]) -> BTreeMap<(usize, i64), f64> {
    lines
        .iter()
        .map(|l| ((l.device, l.ts), f64::from(l.value) / 2.0))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]
    #[test]
    fn default_reads_equal_the_narrow_table(
        workers in 1usize..=2,
        changes in prop::collection::vec(change(), 1..40),
        ranges in prop::collection::vec((0i64..HOURS * 3600, 1i64..HOURS * 3600), 1..4),
    ) {
        let lines = apply(timeline(), &changes);
        let dir = tempfile::tempdir().unwrap();
        let input = dir.path().join("in.jsonl");
        let mut file = std::io::BufWriter::new(std::fs::File::create(&input).unwrap());
        for l in &lines {
            writeln!(
                file,
                r#"{{"device":"{}","ts":{},"temp":{}}}"#,
                DEVICES[l.device],
                l.ts,
                f64::from(l.value) / 2.0
            )
            .unwrap();
        }
        file.into_inner().unwrap().sync_all().unwrap();
        let args = ["replay", "in.jsonl", "--store", "store", "--workers", &workers.to_string()];
        let out = hourglass_command(dir.path(), NOW, &args).output().unwrap();
        succeeded(&args, &out);

        let now_ms: i64 = NOW.parse::<i64>().unwrap() * 1000;
        let store = EmbeddedStore::open_with_clock(
            &dir.path().join("store"),
            &all_tables(),
            Arc::new(move || now_ms),
        )
        .unwrap();
        let scheme = KeyScheme::Salted;
        let model = last_wins(&lines);
        for (d, device) in DEVICES.iter().enumerate() {
            let (from, to) = (B - 3600, B + (HOURS + 1) * 3600);
            let narrow = query::curve_points(&store, scheme, device, from, to, CurveSource::Narrow)
                .unwrap();
            let want: Vec<(i64, f64)> = model
                .range((d, i64::MIN)..(d + 1, i64::MIN))
                .map(|(&(_, ts), &v)| (ts, v))
                .collect();
            prop_assert_eq!(&narrow, &want, "{}: the narrow table keeps the last line", device);
            let auto = query::curve_points(&store, scheme, device, from, to, CurveSource::Auto)
                .unwrap();
            prop_assert_eq!(&auto, &narrow, "{}: auto vs narrow", device);
            for &(start, len) in &ranges {
                let (f, t) = (B + start, B + start + len);
                let want: Vec<(i64, f64)> =
                    narrow.iter().copied().filter(|(ts, _)| (f..t).contains(ts)).collect();
                for source in [CurveSource::Auto, CurveSource::Wide] {
                    let got = query::curve_points(&store, scheme, device, f, t, source).unwrap();
                    prop_assert_eq!(&got, &want, "{}: {:?} over [{}, {})", device, source, f, t);
                }
            }
            for h in 0..HOURS {
                let hour = B + h * 3600;
                let answer = query::hour(&store, scheme, device, hour).unwrap();
                let points: Vec<(i64, f64)> = narrow
                    .iter()
                    .copied()
                    .filter(|(ts, _)| (hour..hour + 3600).contains(ts))
                    .collect();
                prop_assert_eq!(&answer.points, &points, "{} hour {}", device, h);
                prop_assert_eq!(answer.summary, HourSummary::of_points(&points), "{} hour {}", device, h);
            }
        }
    }
}
