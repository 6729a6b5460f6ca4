//! The row-key target: narrow keys parse back to what made them, in both schemes, and order
//! by bucket, device and reversed time; wide keys, qualifiers and cells round-trip.

use std::cmp::Reverse;

use crate::codec::hourly::{
    hour_start, parse_wide_key, points_from_wide, wide_key, wide_put, wide_qualifier,
};
use crate::codec::key::{salt_bucket, validate_device};
use crate::codec::narrow::{
    narrow_key, narrow_put, narrow_range, parse_narrow_key, reading_from_narrow, KeyScheme,
};
use crate::reading::Reading;
use pipeline::json::MAX_TS;
use pipeline::time::HOUR_SECS;
use sinks::table::{Mutation, Row};

use super::{lines, run, Verdict};

const SCHEMES: [KeyScheme; 2] = [KeyScheme::Salted, KeyScheme::Plain];

/// Values a cell must carry exactly: bounds and the shortest and longest decimal texts.
const VALUES: [f64; 8] = [
    0.0,
    -0.0,
    20.5,
    -1e300,
    f64::MAX,
    f64::MIN_POSITIVE,
    5e-324,
    0.1 + 0.2,
];

/// The row keys of the golden tables (narrow and wide) and the room view's shape.
pub(super) fn corpus() -> Vec<Vec<u8>> {
    let mut keys: Vec<Vec<u8>> = [
        &include_bytes!("../../../../tests/golden/scenario.ts_metric.tsv")[..],
        include_bytes!("../../../../tests/golden/scenario.ts_metric_hourly.tsv"),
    ]
    .iter()
    .flat_map(|t| lines(t))
    .filter_map(|l| l.split(|&b| b == b'\t').next().map(<[u8]>::to_vec))
    .collect();
    keys.extend(lines(
        b"dev1_1724101200\nroom031_dev00786\n01_a_9223372036854775807\n",
    ));
    keys.sort();
    keys.dedup();
    keys
}

/// The key order the salted scheme promises: bucket, then the id followed by `_`, then newest first.
fn salted_order(d: &str, ts: i64) -> (u32, Vec<u8>, Reverse<i64>) {
    (salt_bucket(d), format!("{d}_").into_bytes(), Reverse(ts))
}

fn plain_order(d: &str, ts: i64) -> (Vec<u8>, i64) {
    (format!("{d}_").into_bytes(), ts)
}

/// Every property of one accepted device id and time.
fn check_pair(d: &str, ts: i64, value: f64) -> Verdict {
    for scheme in SCHEMES {
        let key = narrow_key(scheme, d, ts);
        let parsed = parse_narrow_key(scheme, &key)
            .map_err(|e| format!("{scheme:?} key of ({d:?}, {ts}) does not parse: {e}"))?;
        let bucket = (scheme == KeyScheme::Salted).then(|| salt_bucket(d));
        if (parsed.bucket, parsed.device.as_str(), parsed.ts) != (bucket, d, ts) {
            return Err(format!(
                "{scheme:?} key of ({d:?}, {ts}) parses as {parsed:?}"
            ));
        }
        let reading = Reading {
            device: d.to_string(),
            ts,
            value,
            extra: "{}".into(),
            room: None,
        };
        let Mutation::Put { row, cells, .. } = narrow_put(scheme, &reading) else {
            return Err("narrow_put made a delete".into());
        };
        match reading_from_narrow(scheme, &Row { key: row, cells }) {
            Ok(back) if back == reading => {}
            other => {
                return Err(format!(
                    "{scheme:?} row of {reading:?} reads back as {other:?}"
                ))
            }
        }
        // The scan range of [from, to) holds this key exactly when from <= ts < to.
        for (from, to) in [
            (ts, ts + 1),
            (ts - 1, ts),
            (ts + 1, ts + 3600),
            (0, ts),
            (ts, MAX_TS + 1),
        ] {
            let inside =
                narrow_range(scheme, d, from, to).is_some_and(|r| key >= r.start && key < r.stop);
            if inside != (from <= ts && ts < to) {
                return Err(format!(
                    "{scheme:?} range [{from}, {to}) of {d:?} {} the key at {ts}",
                    if inside { "holds" } else { "misses" }
                ));
            }
        }
    }
    let hs = hour_start(ts);
    if hs % HOUR_SECS != 0 || !(hs <= ts && ts < hs + HOUR_SECS) {
        return Err(format!("hour_start({ts}) = {hs}"));
    }
    if wide_key(d, hs) != format!("{d}_{hs}").into_bytes()
        || parse_wide_key(&wide_key(d, hs)) != Some((d, hs))
    {
        return Err(format!(
            "wide key of ({d:?}, {hs}) is not `<device>_<hourStart>`"
        ));
    }
    let q = wide_qualifier(ts);
    let offset = std::str::from_utf8(&q)
        .ok()
        .and_then(|q| q.parse::<i64>().ok());
    if offset != Some(ts - hs) {
        return Err(format!(
            "qualifier of {ts} is {:?}",
            String::from_utf8_lossy(&q)
        ));
    }
    let Mutation::Put { row, cells, .. } = wide_put(d, hs, &[(ts, value)], None) else {
        return Err("wide_put made a delete".into());
    };
    match points_from_wide(hs, &Row { key: row, cells }) {
        Ok(points) if points == [(ts, value)] => Ok(()),
        other => Err(format!(
            "wide row of ({d:?}, {ts}, {value}) reads back as {other:?}"
        )),
    }
}

fn check_order(a: (&str, i64), b: (&str, i64)) -> Verdict {
    let got = narrow_key(KeyScheme::Salted, a.0, a.1).cmp(&narrow_key(KeyScheme::Salted, b.0, b.1));
    if got != salted_order(a.0, a.1).cmp(&salted_order(b.0, b.1)) {
        return Err(format!("salted keys of {a:?} and {b:?} order {got:?}"));
    }
    let got = narrow_key(KeyScheme::Plain, a.0, a.1).cmp(&narrow_key(KeyScheme::Plain, b.0, b.1));
    if got != plain_order(a.0, a.1).cmp(&plain_order(b.0, b.1)) {
        return Err(format!("plain keys of {a:?} and {b:?} order {got:?}"));
    }
    Ok(())
}

fn check(input: &[u8]) -> Verdict {
    // Whatever parses is canonical: it is exactly the key its parts make.
    for scheme in SCHEMES {
        if let Ok(k) = parse_narrow_key(scheme, input) {
            validate_device(&k.device).map_err(|e| format!("parsed a bad device id: {e}"))?;
            if narrow_key(scheme, &k.device, k.ts) != input {
                return Err(format!(
                    "{scheme:?} key parses as {k:?}, which makes another key"
                ));
            }
        }
    }
    // Device ids and times taken from the input's parts, with the time range's edges.
    let text = String::from_utf8_lossy(input);
    let devices: Vec<&str> = text
        .split('_')
        .filter(|p| validate_device(p).is_ok())
        .take(3)
        .collect();
    let mut times: Vec<i64> = text
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse::<i64>().ok())
        .map(|n| n.rem_euclid(MAX_TS + 1))
        .take(2)
        .collect();
    times.extend([0, 3599, 3600, MAX_TS]);
    let value = VALUES[input.len() % VALUES.len()];
    for d in &devices {
        for &ts in &times {
            check_pair(d, ts, value)?;
        }
    }
    let pairs: Vec<(&str, i64)> = devices
        .iter()
        .flat_map(|d| times.iter().map(move |&ts| (*d, ts)))
        .chain(
            devices
                .iter()
                .map(|d| (*d, times[0].saturating_sub(1).max(0))),
        )
        .collect();
    for a in &pairs {
        for b in &pairs {
            check_order(*a, *b)?;
        }
    }
    Ok(())
}

#[test]
fn key_codecs() {
    run("fuzz::keys::key_codecs", &corpus(), check);
}

#[test]
fn the_corpus_holds_both_key_shapes() {
    let corpus = corpus();
    assert!(corpus
        .iter()
        .any(|k| parse_narrow_key(KeyScheme::Salted, k).is_ok()));
    assert!(corpus.contains(&b"dev00786_1724101200".to_vec()));
    assert_eq!(check(b"00_dev00786_9223372035130660507"), Ok(()));
}
