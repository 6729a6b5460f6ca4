//! The decoder target: every line is a reading or a rejection with a reason, the same as the
//! reference decoder's, and a reading survives being written back as JSON and as a narrow row.

use crate::codec::key::validate_device;
use crate::codec::narrow::{narrow_put, reading_from_narrow, KeyScheme};
use crate::decode::{decode_line, decode_line_reference, Reason, Rejected};
use crate::reading::Reading;
use pipeline::json::MAX_TS;
use serde_json::{Map, Value};
use sinks::table::{Mutation, Row};

use super::{lines, run, Verdict};

const METRIC: &str = "temp";
const LINE: u64 = 7;

/// The scenario replayed by the end-to-end tests: good readings and every kind of dead letter.
pub(super) fn corpus() -> Vec<Vec<u8>> {
    let mut corpus = lines(include_bytes!("../../../../tests/data/scenario.jsonl"));
    corpus.extend(lines(
        concat!(
            r#"{"device":"d","ts":"2024-08-19T21:20:00.750Z","temp":4}"#,
            "\n",
            r#"{"device":"d","ts":1,"temp":2,"room":null,"extra":{"a":[1,2.5,"x"]}}"#,
            "\n",
            r#"{"device":"d","ts":1,"temp":1e999}"#,
            "\n",
            "[1,2]\n",
        )
        .as_bytes(),
    ));
    corpus
}

/// A reading written back as an input line: its extra fields with device, ts and the metric.
fn encode(r: &Reading) -> Result<Vec<u8>, String> {
    let mut fields: Map<String, Value> = serde_json::from_str(&r.extra)
        .map_err(|e| format!("extra {:?} is not a JSON object: {e}", r.extra))?;
    for key in ["device", "ts", METRIC] {
        if fields.contains_key(key) {
            return Err(format!("extra {:?} still holds `{key}`", r.extra));
        }
    }
    fields.insert("device".into(), r.device.clone().into());
    fields.insert("ts".into(), r.ts.into());
    fields.insert(METRIC.into(), r.value.into());
    serde_json::to_vec(&fields).map_err(|e| e.to_string())
}

fn check_reading(r: &Reading) -> Verdict {
    validate_device(&r.device).map_err(|e| format!("accepted a bad device id: {e}"))?;
    if !(0..=MAX_TS).contains(&r.ts) {
        return Err(format!("accepted ts {} outside 0..={MAX_TS}", r.ts));
    }
    if !r.value.is_finite() {
        return Err(format!("accepted a non-finite value {}", r.value));
    }
    let line = encode(r)?;
    match decode_line(LINE, &line, METRIC) {
        Ok(again) if again == *r => {}
        Ok(again) => {
            return Err(format!(
                "re-encoded reading decodes differently: {r:?} became {again:?}"
            ))
        }
        Err(e) => {
            return Err(format!(
                "re-encoded reading {:?} is rejected: {}",
                String::from_utf8_lossy(&line),
                e.reason
            ))
        }
    }
    for scheme in [KeyScheme::Salted, KeyScheme::Plain] {
        let Mutation::Put { row, cells, .. } = narrow_put(scheme, r) else {
            return Err("narrow_put made a delete".to_string());
        };
        match reading_from_narrow(scheme, &Row { key: row, cells }) {
            Ok(back) if back == *r => {}
            other => {
                return Err(format!(
                    "{scheme:?} narrow row of {r:?} reads back as {other:?}"
                ))
            }
        }
    }
    Ok(())
}

/// The decoder's fast path must answer exactly as the reference decoder: the same reading (its
/// value bit for bit) or the same rejection.
fn check_against_reference(got: &Result<Reading, Box<Rejected>>, input: &[u8]) -> Verdict {
    let want = decode_line_reference(LINE, input, METRIC);
    let same = match (got, &want) {
        (Ok(a), Ok(b)) => a == b && a.value.to_bits() == b.value.to_bits(),
        (Err(a), Err(b)) => a == b,
        _ => false,
    };
    if same {
        Ok(())
    } else {
        Err(format!(
            "decoder differs from the reference decoder: {got:?}, reference {want:?}"
        ))
    }
}

fn check(input: &[u8]) -> Verdict {
    let decoded = decode_line(LINE, input, METRIC);
    check_against_reference(&decoded, input)?;
    match decoded {
        Ok(r) => check_reading(&r),
        Err(rejected) => {
            let message = rejected.reason.to_string();
            if message.trim().is_empty() {
                return Err(format!(
                    "rejection {:?} has an empty message",
                    rejected.reason
                ));
            }
            if !Reason::KINDS.contains(&rejected.reason.kind()) {
                return Err(format!("unknown rejection kind {}", rejected.reason.kind()));
            }
            if rejected.line != LINE || rejected.raw != input {
                return Err("rejection does not carry the line number and raw input".to_string());
            }
            Ok(())
        }
    }
}

#[test]
fn decoder() {
    run("fuzz::decode::decoder", &corpus(), check);
}

#[test]
fn the_checks_catch_a_decoder_that_differs_from_the_reference() {
    let line = br#"{"device":"d","ts":1,"temp":2,"battery":3.70}"#;
    let good = decode_line(LINE, line, METRIC);
    assert_eq!(check_against_reference(&good, line), Ok(()));
    let mut changed = good.expect("accepted");
    changed.extra = r#"{"battery":3.70}"#.into();
    assert!(check_against_reference(&Ok(changed), line)
        .unwrap_err()
        .contains("differs from the reference"));
}

#[test]
fn the_checks_catch_a_reading_that_does_not_round_trip() {
    let good = Reading {
        device: "dev1".into(),
        ts: 1_724_101_200,
        value: 20.5,
        extra: r#"{"room":"r1"}"#.into(),
        room: Some("r1".into()),
    };
    assert_eq!(check_reading(&good), Ok(()));
    let bad_extra = Reading {
        extra: r#"{"ts":3}"#.into(),
        ..good.clone()
    };
    assert!(check_reading(&bad_extra)
        .unwrap_err()
        .contains("still holds `ts`"));
    let bad_device = Reading {
        device: "a_b".into(),
        ..good
    };
    assert!(check_reading(&bad_device)
        .unwrap_err()
        .contains("bad device id"));
}
