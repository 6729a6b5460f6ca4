//! Decoding input lines into readings, or into rejections that carry the raw line and a reason.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::reading::Reading;
use crate::rowkey::validate_device;

/// Longest accepted input line, in bytes.
pub const MAX_LINE_BYTES: usize = 64 * 1024;
/// Largest accepted event time: 9999999999 (year 2286). Larger values are almost always
/// milliseconds sent where seconds were expected.
pub const MAX_TS: i64 = 9_999_999_999;

/// Why a line was rejected. `Display` gives the message written to the dead-letter file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", content = "detail", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Reason {
    /// The line is longer than [`MAX_LINE_BYTES`].
    #[error("line is {0} bytes, over the 64 KiB limit")]
    TooLong(usize),
    /// The line is not UTF-8.
    #[error("line is not valid UTF-8")]
    NotUtf8,
    /// The line is not JSON (or is truncated).
    #[error("invalid JSON: {0}")]
    InvalidJson(String),
    /// The line is JSON but not an object.
    #[error("expected a JSON object")]
    NotAnObject,
    /// A required field is absent.
    #[error("missing field `{0}`")]
    MissingField(String),
    /// A field has the wrong type or value.
    #[error("field `{field}`: {problem}")]
    BadField {
        /// The field.
        field: String,
        /// What is wrong with it.
        problem: String,
    },
    /// The reading's time is more than the allowed skew ahead of a reference time (the wall
    /// clock, or the watermark of a replay): a device clock running ahead, which must not move
    /// event time for the whole fleet.
    #[error(
        "ts {ts} ({}) is more than {limit_secs} s ahead of {reference} {reference_ts} ({}): \
         fix the device's clock, or raise window.max_future_skew_secs if readings really \
         arrive this early",
        crate::time::format_time(*.ts),
        crate::time::format_time(*.reference_ts)
    )]
    Future {
        /// The reading's event time, epoch seconds.
        ts: i64,
        /// What it was compared with: `the wall clock` or `the watermark`.
        reference: String,
        /// The reference time, epoch seconds.
        reference_ts: i64,
        /// The allowed skew, seconds.
        limit_secs: u64,
    },
}

impl Reason {
    /// Every kind of reason, as [`Reason::kind`] names it; [`Reason::kind_index`] indexes it.
    pub const KINDS: [&'static str; 7] = [
        "too_long",
        "not_utf8",
        "invalid_json",
        "not_an_object",
        "missing_field",
        "bad_field",
        "future",
    ];

    /// The position of this reason's kind in [`Reason::KINDS`].
    pub fn kind_index(&self) -> usize {
        match self {
            Reason::TooLong(_) => 0,
            Reason::NotUtf8 => 1,
            Reason::InvalidJson(_) => 2,
            Reason::NotAnObject => 3,
            Reason::MissingField(_) => 4,
            Reason::BadField { .. } => 5,
            Reason::Future { .. } => 6,
        }
    }

    /// The reason's kind without its details (`invalid_json`, `missing_field`, …): the `kind`
    /// of its dead-letter record, and a label value with few distinct values.
    pub fn kind(&self) -> &'static str {
        Self::KINDS[self.kind_index()]
    }
}

/// A line that could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejected {
    /// 1-based line number in the input, or the record's offset in its Kafka partition.
    pub line: u64,
    /// The Kafka partition the record came from (`None` for a file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<i32>,
    /// Why it was rejected.
    pub reason: Reason,
    /// The raw line (without its newline).
    pub raw: Vec<u8>,
}

/// Decodes one input line (without its trailing newline) whose primary metric is `metric`.
///
/// Accepts a JSON object with `device` (string, see [`validate_device`]), `ts` (integer epoch
/// seconds `0..=9999999999`, or an RFC 3339 string, fractional seconds truncated) and `metric`
/// (a finite number). Every other field is kept in [`Reading::extra`].
///
/// # Errors
/// A [`Rejected`] holding `line`, the reason and the raw bytes. Never panics.
pub fn decode_line(line: u64, raw: &[u8], metric: &str) -> Result<Reading, Box<Rejected>> {
    decode(raw, metric).map_err(|reason| {
        Box::new(Rejected {
            line,
            partition: None,
            reason,
            raw: raw.to_vec(),
        })
    })
}

fn bad(field: &str, problem: impl Into<String>) -> Reason {
    Reason::BadField {
        field: field.to_string(),
        problem: problem.into(),
    }
}

fn decode(raw: &[u8], metric: &str) -> Result<Reading, Reason> {
    if raw.len() > MAX_LINE_BYTES {
        return Err(Reason::TooLong(raw.len()));
    }
    let text = std::str::from_utf8(raw).map_err(|_| Reason::NotUtf8)?;
    let value: Value =
        serde_json::from_str(text).map_err(|e| Reason::InvalidJson(e.to_string()))?;
    let Value::Object(mut fields) = value else {
        return Err(Reason::NotAnObject);
    };

    let device = match fields.remove("device") {
        None => return Err(Reason::MissingField("device".into())),
        Some(Value::String(d)) => d,
        Some(other) => {
            return Err(bad(
                "device",
                format!("expected a string, got {}", kind(&other)),
            ))
        }
    };
    validate_device(&device).map_err(|e| bad("device", e.to_string()))?;

    let ts = match fields.remove("ts") {
        None => return Err(Reason::MissingField("ts".into())),
        Some(v) => parse_ts(&v)?,
    };

    let value = match fields.remove(metric) {
        None => return Err(Reason::MissingField(metric.into())),
        Some(Value::Number(n)) => n
            .as_f64()
            .filter(|v| v.is_finite())
            .ok_or_else(|| bad(metric, "not a finite number"))?,
        Some(other) => {
            return Err(bad(
                metric,
                format!("expected a number, got {}", kind(&other)),
            ))
        }
    };

    // The room view's row key is `<room>_<device>`: a room must be a room id (no '_'), or the
    // row would show up under another room's prefix.
    let room = match fields.get("room") {
        None | Some(Value::Null) => None,
        Some(Value::String(room)) => {
            crate::registry::validate_room(room).map_err(|e| bad("room", e.to_string()))?;
            Some(room.clone())
        }
        Some(other) => {
            return Err(bad(
                "room",
                format!("expected a room id string, got {}", kind(other)),
            ))
        }
    };

    // The one serialisation of the other fields: the narrow row stores this text as is.
    let extra = compact_json(&fields);
    Ok(Reading {
        device,
        ts,
        value,
        extra,
        room,
    })
}

fn parse_ts(v: &Value) -> Result<i64, Reason> {
    let ts = match v {
        Value::Number(n) => match n.as_i64() {
            Some(ts) => ts,
            None if n.is_u64() => i64::MAX,
            None => {
                return Err(bad(
                    "ts",
                    format!("expected integer epoch seconds, got {n}"),
                ))
            }
        },
        Value::String(s) => chrono::DateTime::parse_from_rfc3339(s)
            .map_err(|e| bad("ts", format!("not RFC 3339 ({e}): {s:?}")))?
            .timestamp(),
        other => {
            return Err(bad(
                "ts",
                format!(
                    "expected epoch seconds or an RFC 3339 string, got {}",
                    kind(other)
                ),
            ))
        }
    };
    if ts < 0 {
        return Err(bad("ts", format!("negative timestamp {ts}")));
    }
    if ts > MAX_TS {
        return Err(bad(
            "ts",
            format!("{ts} is after year 2286: milliseconds instead of seconds?"),
        ));
    }
    Ok(ts)
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn compact_json(fields: &Map<String, Value>) -> String {
    // Serializing a map of JSON values cannot fail.
    serde_json::to_string(fields).unwrap_or_else(|_| "{}".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"{"device":"dev00786","ts":1724102400,"temp":25.5,"room":"room031","humidity":41.2,"battery":3.61,"rssi":-67,"fw":"2.4.1","seq":1234}"#;

    fn reason(line: &[u8]) -> String {
        decode_line(7, line, "temp")
            .map(|_| ())
            .unwrap_err()
            .reason
            .to_string()
    }

    #[test]
    fn decodes_the_example_line() {
        let r = decode_line(1, GOOD.as_bytes(), "temp").unwrap();
        assert_eq!(r.device, "dev00786");
        assert_eq!(r.ts, 1724102400);
        assert_eq!(r.value, 25.5);
        assert_eq!(
            r.extra,
            r#"{"battery":3.61,"fw":"2.4.1","humidity":41.2,"room":"room031","rssi":-67,"seq":1234}"#
        );
        assert_eq!(r.room().as_deref(), Some("room031"));
    }

    #[test]
    fn accepts_rfc3339_and_other_metrics() {
        let r = decode_line(
            1,
            br#"{"device":"d","ts":"2024-08-19T21:20:00.750Z","hum":4}"#,
            "hum",
        )
        .unwrap();
        assert_eq!(r.ts, 1724102400);
        assert_eq!(r.value, 4.0);
        assert_eq!(r.extra, "{}");
    }

    #[test]
    fn kinds_are_the_dead_letter_kinds() {
        let all = [
            Reason::TooLong(1),
            Reason::NotUtf8,
            Reason::InvalidJson(String::new()),
            Reason::NotAnObject,
            Reason::MissingField(String::new()),
            bad("ts", "x"),
            Reason::Future {
                ts: 1,
                reference: String::new(),
                reference_ts: 0,
                limit_secs: 0,
            },
        ];
        assert_eq!(all.len(), Reason::KINDS.len());
        for (i, r) in all.iter().enumerate() {
            assert_eq!(r.kind_index(), i);
            let tag = serde_json::to_value(r).unwrap()["kind"].clone();
            assert_eq!(tag, r.kind(), "{r:?}");
        }
    }

    #[test]
    fn a_room_id_or_null_is_accepted_as_room() {
        let cases: [(&[u8], Option<&str>); 2] = [
            (
                br#"{"device":"d","ts":1,"temp":2,"room":"room-7.b"}"#,
                Some("room-7.b"),
            ),
            (br#"{"device":"d","ts":1,"temp":2,"room":null}"#, None),
        ];
        for (line, room) in cases {
            let r = decode_line(1, line, "temp").expect("accepted");
            assert_eq!(r.room().as_deref(), room);
        }
    }

    #[test]
    fn rejects_with_reasons() {
        let cases: &[(&[u8], &str)] = &[
            (br#"{"device":"d","ts":1,"temp":2"#, "invalid JSON"),
            (b"", "invalid JSON"),
            (b"[1,2]", "expected a JSON object"),
            (br#"{"ts":1,"temp":2}"#, "missing field `device`"),
            (br#"{"device":"d","temp":2}"#, "missing field `ts`"),
            (br#"{"device":"d","ts":1}"#, "missing field `temp`"),
            (
                br#"{"device":null,"ts":1,"temp":2}"#,
                "field `device`: expected a string, got null",
            ),
            (
                br#"{"device":"a_b","ts":1,"temp":2}"#,
                "field `device`: device id \"a_b\" contains '_'",
            ),
            (
                br#"{"device":"d","ts":-5,"temp":2}"#,
                "field `ts`: negative timestamp -5",
            ),
            (
                br#"{"device":"d","ts":1.5,"temp":2}"#,
                "field `ts`: expected integer epoch seconds",
            ),
            (
                br#"{"device":"d","ts":1724102400000,"temp":2}"#,
                "milliseconds instead of seconds",
            ),
            (
                br#"{"device":"d","ts":"yesterday","temp":2}"#,
                "field `ts`: not RFC 3339",
            ),
            (
                br#"{"device":"d","ts":1,"temp":"25"}"#,
                "field `temp`: expected a number, got a string",
            ),
            (
                br#"{"device":"d","ts":1,"temp":null}"#,
                "field `temp`: expected a number, got null",
            ),
            (br#"{"device":"d","ts":1,"temp":1e999}"#, "invalid JSON"),
            (
                br#"{"device":"d","ts":1,"temp":2,"room":"a_b"}"#,
                "field `room`: room id \"a_b\" contains '_'",
            ),
            (
                br#"{"device":"d","ts":1,"temp":2,"room":7}"#,
                "field `room`: expected a room id string, got a number",
            ),
            (
                b"{\"device\":\"d\xff\",\"ts\":1,\"temp\":2}",
                "not valid UTF-8",
            ),
        ];
        for (line, want) in cases {
            let got = reason(line);
            assert!(
                got.contains(want),
                "{:?}: {got:?} lacks {want:?}",
                String::from_utf8_lossy(line)
            );
        }
        let long = format!(
            r#"{{"device":"d","ts":1,"temp":2,"pad":"{}"}}"#,
            "x".repeat(MAX_LINE_BYTES)
        );
        assert!(reason(long.as_bytes()).contains("over the 64 KiB limit"));
    }

    #[test]
    fn values_are_the_nearest_double_of_their_text() {
        // Found by the decoder fuzz target: a 1-ulp error changed the value on re-encoding.
        for text in [
            "-92233720368154775808",
            "-9.223372036815477e19",
            "0.1",
            "1e-320",
        ] {
            let line = format!(r#"{{"device":"d","ts":1,"temp":{text}}}"#);
            let r = decode_line(1, line.as_bytes(), "temp").expect("accepted");
            assert_eq!(r.value, text.parse::<f64>().unwrap(), "{text}");
        }
    }

    #[test]
    fn rejection_keeps_line_and_raw() {
        let err = decode_line(42, b"{oops", "temp").unwrap_err();
        assert_eq!(err.line, 42);
        assert_eq!(err.raw, b"{oops");
    }
}
