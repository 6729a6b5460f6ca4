//! Decoding input lines into readings, or into rejections that carry the raw line and a reason.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use pipeline::json::{event_time, kind};
use pipeline::source::{job_kinds, json_object, line_text, Ahead, LineDecoder, LineFault, Refusal};

use crate::codec::key::validate_device;
use crate::reading::Reading;

/// Why a line was rejected: a [`LineFault`], or a reading too far ahead. `Display` gives the
/// message written to the dead-letter file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", content = "detail", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Reason {
    /// The reading's time is more than the allowed skew ahead of a reference time (the wall
    /// clock, or the watermark of a replay): a device clock running ahead, which must not move
    /// event time for the whole fleet.
    #[error(
        "ts {} ({}) is more than {} s ahead of {} {} ({}): \
         fix the device's clock, or raise window.max_future_skew_secs if readings really \
         arrive this early",
        .0.ts,
        pipeline::time::format_time(.0.ts),
        .0.limit_secs,
        .0.reference,
        .0.reference_ts,
        pipeline::time::format_time(.0.reference_ts)
    )]
    Future(Ahead),
    /// The line is not one (too long, not UTF-8, not a JSON object, a field absent or wrong).
    #[serde(untagged)]
    #[error(transparent)]
    Line(#[from] LineFault),
}

impl Reason {
    /// Every kind of reason, as [`Reason::kind`] names it; [`Reason::kind_index`] indexes it.
    pub const KINDS: [&'static str; 7] = job_kinds(&["future"]);

    /// The position of this reason's kind in [`Reason::KINDS`].
    pub fn kind_index(&self) -> usize {
        match self {
            Reason::Line(fault) => fault.kind_index(),
            Reason::Future { .. } => LineFault::KINDS.len(),
        }
    }

    /// The reason's kind without its details (`invalid_json`, `missing_field`, …): the `kind`
    /// of its dead-letter record, and a label value with few distinct values.
    pub fn kind(&self) -> &'static str {
        Self::KINDS[self.kind_index()]
    }
}

impl From<Ahead> for Reason {
    fn from(ahead: Ahead) -> Self {
        Reason::Future(ahead)
    }
}

impl Refusal for Reason {
    const KINDS: &'static [&'static str] = &Reason::KINDS;

    fn kind_index(&self) -> usize {
        Reason::kind_index(self)
    }
}

/// The sensor job's [`LineDecoder`]: [`decode_line`] with the job's primary metric, routing
/// a replay's lines by [`device_hint`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SensorDecoder {
    /// Name of the primary metric field.
    pub metric: String,
}

impl LineDecoder for SensorDecoder {
    type Record = Reading;
    type Reason = Reason;

    #[inline]
    fn decode(&self, line: u64, raw: &[u8]) -> Decoded {
        decode_line(line, raw, &self.metric)
    }

    #[inline]
    fn event_time(record: &Reading) -> i64 {
        record.ts
    }

    #[inline]
    fn set_event_time(record: &mut Reading, ts: i64) {
        record.ts = ts;
    }

    #[inline]
    fn key(record: &Reading) -> &str {
        &record.device
    }

    #[inline]
    fn route_hint(raw: &[u8]) -> Option<&str> {
        device_hint(raw)
    }
}

/// A line that could not be decoded, or a reading refused by its source.
pub type Rejected = pipeline::source::Rejected<Reason>;

/// What a source of the sensor job emits: a reading, or a rejected line.
pub type Decoded = pipeline::source::Decoded<Reading, Reason>;

/// Decodes one input line (without its trailing newline) whose primary metric is `metric`.
///
/// Accepts a JSON object with `device` (string, see [`validate_device`]), `ts` (integer epoch
/// seconds `0..=9999999999`, or an RFC 3339 string, fractional seconds truncated) and `metric`
/// (a finite number). Every other field is kept in [`Reading::extra`].
///
/// # Errors
/// A [`Rejected`] holding `line`, the reason and the raw bytes. Never panics.
pub fn decode_line(line: u64, raw: &[u8], metric: &str) -> Result<Reading, Box<Rejected>> {
    decode(raw, metric).map_err(|reason| rejected(line, raw, reason))
}

/// The device id of a line, found without decoding it: the value of the first `"device"` key
/// that is followed by `:` and a string without escapes. A replay routes lines by it, so that
/// one worker reads every line of a device in order. It may disagree with [`decode_line`] on
/// odd lines (an escaped id, a repeated key), which then only go to another worker; `None`
/// when there is no such key.
pub fn device_hint(raw: &[u8]) -> Option<&str> {
    let mut rest = raw;
    while let Some(at) = memchr::memmem::find(rest, br#""device""#) {
        rest = &rest[at + 8..];
        let after = rest.trim_ascii_start();
        let Some(value) = after.strip_prefix(b":") else {
            continue;
        };
        let value = value.trim_ascii_start().strip_prefix(b"\"")?;
        let end = memchr::memchr2(b'"', b'\\', value)?;
        if value[end] != b'"' {
            return None;
        }
        return std::str::from_utf8(&value[..end]).ok();
    }
    None
}

/// The reference decoder: what [`decode_line`] answers, computed the slow and obviously right
/// way (a `serde_json::Value` of the whole line, the other fields re-serialised).
///
/// [`decode_line`] reads ordinary lines with a borrowed tokenizer and hands every other line
/// to this; it must agree with it byte for byte on every input (tested by a differential
/// property test and by the decoder fuzz target).
///
/// # Errors
/// As [`decode_line`].
pub fn decode_line_reference(
    line: u64,
    raw: &[u8],
    metric: &str,
) -> Result<Reading, Box<Rejected>> {
    decode_reference(raw, metric).map_err(|reason| rejected(line, raw, reason))
}

fn rejected(line: u64, raw: &[u8], reason: Reason) -> Box<Rejected> {
    pipeline::source::rejected(line, raw, reason)
}

fn bad(field: &str, problem: impl Into<String>) -> Reason {
    LineFault::bad(field, problem).into()
}

fn missing(field: &str) -> Reason {
    LineFault::missing(field).into()
}

fn decode(raw: &[u8], metric: &str) -> Result<Reading, Reason> {
    let text = line_text(raw)?;
    match fast::decode(text, metric) {
        Some(reading) => Ok(reading),
        None => decode_text(text, metric),
    }
}

fn decode_reference(raw: &[u8], metric: &str) -> Result<Reading, Reason> {
    decode_text(line_text(raw)?, metric)
}

fn decode_text(text: &str, metric: &str) -> Result<Reading, Reason> {
    let mut fields = json_object(text)?;

    let device = match fields.remove("device") {
        None => return Err(missing("device")),
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
        None => return Err(missing("ts")),
        Some(v) => parse_ts(&v)?,
    };

    let value = match fields.remove(metric) {
        None => return Err(missing(metric)),
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
    event_time(v).map_err(|problem| bad("ts", problem))
}

fn compact_json(fields: &Map<String, Value>) -> String {
    // Serializing a map of JSON values cannot fail.
    serde_json::to_string(fields).unwrap_or_else(|_| "{}".to_string())
}

/// The fast path of [`decode_line`], a borrowed tokenizer for ordinary lines.
mod fast;

#[cfg(test)]
mod tests {
    use pipeline::json::MAX_TS;
    use pipeline::source::MAX_LINE_BYTES;

    use super::*;

    const GOOD: &str = r#"{"device":"dev00786","ts":1724102400,"temp":25.5,"room":"room031","humidity":41.2,"battery":3.61,"rssi":-67,"fw":"2.4.1","seq":1234}"#;

    #[test]
    fn the_device_hint_is_the_decoded_device_of_ordinary_lines() {
        assert_eq!(device_hint(GOOD.as_bytes()), Some("dev00786"));
        fn hint(line: &str) -> Option<&str> {
            device_hint(line.as_bytes())
        }
        assert_eq!(hint(r#"{ "ts":1, "device" : "d-1","temp":2}"#), Some("d-1"));
        // "device" as a value, then as the key.
        assert_eq!(
            hint(r#"{"kind":"device","device":"d2","ts":1}"#),
            Some("d2")
        );
        // No such key, a non-string, an escape: no hint (the line goes by its number).
        assert_eq!(hint(r#"{"dev":"d","ts":1}"#), None);
        assert_eq!(hint(r#"{"device":7,"ts":1}"#), None);
        assert_eq!(hint(r#"{"device":"a\"b","ts":1}"#), None);
        assert_eq!(hint(r#"{"device":"unterminated"#), None);
        assert_eq!(hint(""), None);
        // Whatever the hint says, decoding agrees on ordinary lines.
        let line = r#"{"device":"dev00001","ts":1724102400,"temp":21.5}"#;
        let decoded = decode_line(1, line.as_bytes(), "temp").expect("decodes");
        assert_eq!(hint(line), Some(decoded.device.as_str()));
    }

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
            Reason::from(LineFault::TooLong(1)),
            LineFault::NotUtf8.into(),
            LineFault::InvalidJson(String::new()).into(),
            LineFault::NotAnObject.into(),
            missing(""),
            bad("ts", "x"),
            Reason::Future(Ahead {
                ts: 1,
                reference: "the watermark".into(),
                reference_ts: 0,
                limit_secs: 0,
            }),
        ];
        assert_eq!(all.len(), Reason::KINDS.len());
        for (i, r) in all.iter().enumerate() {
            assert_eq!(r.kind_index(), i);
            let tag = serde_json::to_value(r).unwrap()["kind"].clone();
            assert_eq!(tag, r.kind(), "{r:?}");
            let text = serde_json::to_string(r).unwrap();
            assert_eq!(&serde_json::from_str::<Reason>(&text).unwrap(), r, "{text}");
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
    fn the_fast_path_reads_ordinary_lines_as_the_reference_does() {
        let lines = [
            GOOD,
            r#"{"device":"d","ts":1,"temp":-3,"humidity":45.0,"battery":3.70,"big":10000000000000000.0}"#,
            " {\"ts\" : \"2024-08-19T21:20:00.750Z\",\t\"temp\":-0.0 ,\"device\":\"d\"}\n",
        ];
        for line in lines {
            let fast = fast::decode(line, "temp").unwrap_or_else(|| panic!("{line} not fast"));
            let reference = decode_line_reference(1, line.as_bytes(), "temp").expect("accepted");
            assert_same(&Ok(fast), &Ok(reference));
        }
        let r = fast::decode(lines[1], "temp").expect("fast");
        assert_eq!(
            r.extra, r#"{"battery":3.7,"big":1e+16,"humidity":45.0}"#,
            "serde_json's float text, not the input's"
        );
    }

    #[test]
    fn the_fast_path_leaves_unusual_lines_to_the_reference() {
        for line in [
            r#"{"device":"d","ts":1,"temp":2,"fw":"a\"b"}"#,
            r#"{"device":"d","ts":1,"temp":2,"temp":3}"#,
            r#"{"device":"d","ts":1,"temp":2e1}"#,
            r#"{"device":"d","ts":1,"temp":-0}"#,
            r#"{"device":"d","ts":1,"temp":2,"x":[1]}"#,
            r#"{"device":"d","ts":1,"temp":1234567890123456789}"#,
            r#"{"device":"d","ts":1,"temp":2,"room":7}"#,
            r#"{"device":"d","ts":1.0,"temp":2}"#,
            r#"{"device":"d","ts":1,"temp":2"#,
            r#"{"device":"d","ts":1,"temp":02}"#,
        ] {
            assert!(fast::decode(line, "temp").is_none(), "{line}");
            assert_same(
                &decode_line(1, line.as_bytes(), "temp"),
                &decode_line_reference(1, line.as_bytes(), "temp"),
            );
        }
    }

    #[test]
    fn a_sensor_s_float_text_is_kept_as_it_is() {
        for text in [
            "41.2",
            "3.61",
            "-67.5",
            "0.001",
            "45.0",
            "-0.0",
            "123456789012.345",
        ] {
            assert!(fast::prints_as_itself(text), "{text}");
            let v: f64 = text.parse().unwrap();
            assert_eq!(serde_json::to_string(&v).unwrap(), text);
        }
        for text in [
            "3.70",
            "0.00001",
            "1000000000000000.0",
            "0.1234567890123456",
        ] {
            assert!(!fast::prints_as_itself(text), "{text}");
        }
    }

    mod float_text {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(20_000))]

            /// The decoder copies a float's text into `extra` where `prints_as_itself` says
            /// so: it must be serde_json's text of that float, which the reference writes.
            #[test]
            fn a_float_text_kept_is_serde_json_s_text(
                text in prop_oneof![
                    "-?(0|[1-9][0-9]{0,16})\\.0{0,6}[0-9]{1,17}0{0,2}",
                    (-1e16f64..1e16).prop_map(|v| format!("{v:?}")),
                    (-1e-2f64..1e-2).prop_map(|v| format!("{v:?}")),
                ]
            ) {
                // The tokenizer's floats have no exponent.
                if !text.contains('e') && fast::prints_as_itself(&text) {
                    let v: f64 = text.parse().unwrap();
                    prop_assert_eq!(serde_json::to_string(&v).unwrap(), text);
                }
            }
        }
    }

    /// Equal readings (the value compared bit for bit) or equal rejections.
    fn assert_same(a: &Result<Reading, Box<Rejected>>, b: &Result<Reading, Box<Rejected>>) {
        assert!(same(a, b), "{a:?} != {b:?}");
    }

    fn same(a: &Result<Reading, Box<Rejected>>, b: &Result<Reading, Box<Rejected>>) -> bool {
        match (a, b) {
            (Ok(a), Ok(b)) => a == b && a.value.to_bits() == b.value.to_bits(),
            (Err(a), Err(b)) => a == b,
            _ => false,
        }
    }

    mod differential {
        use super::*;
        use proptest::prelude::*;

        fn key() -> impl Strategy<Value = String> {
            prop_oneof![
                6 => prop::sample::select(vec![
                    "device", "ts", "temp", "room", "humidity", "battery", "rssi", "fw", "seq",
                ])
                .prop_map(String::from),
                1 => prop::sample::select(vec!["", "a", "Z", "é", "a\\nb", "a\\u0062", "\\\""])
                    .prop_map(String::from),
                // Keys alike in their first 8 bytes, which the fast path's sort compares first.
                1 => prop::sample::select(vec!["humidity2", "humidityA", "humidity", "humidit"])
                    .prop_map(String::from),
                1 => "[a-z\u{e9}\u{2028}]{1,3}",
            ]
        }

        fn number() -> impl Strategy<Value = String> {
            prop_oneof![
                any::<i64>().prop_map(|n| n.to_string()),
                (-1000i64..100_000).prop_map(|n| n.to_string()),
                any::<u64>().prop_map(|n| n.to_string()),
                (-1e4f64..1e4).prop_map(|v| format!("{v:.1}")),
                (-1e4f64..1e4).prop_map(|v| format!("{v:.2}")),
                any::<f64>().prop_map(|v| format!("{v}")),
                any::<f64>().prop_map(|v| format!("{v:e}")),
                any::<f64>().prop_map(|v| format!("{v:?}")),
                (0u32..40, 0u32..25).prop_map(|(i, f)| format!(
                    "{}.{}",
                    "9".repeat(i as usize + 1),
                    "0".repeat(f as usize) + "1"
                )),
                prop::sample::select(vec![
                    "0",
                    "-0",
                    "0.0",
                    "-0.0",
                    "01",
                    "1.",
                    ".5",
                    "-",
                    "1e5",
                    "1E+5",
                    "2.5e-3",
                    "1724102400",
                    "1724102400000",
                    "9999999999",
                    "10000000000",
                    "-5",
                    "1.5",
                    "18446744073709551615",
                    "18446744073709551616",
                    "-9223372036854775808",
                    "123456789012345678",
                    "1234567890123456789",
                    "1e999",
                    "0.1",
                    "1e-320",
                    "10000000000000000.0",
                    "0.000001",
                    "3.70",
                    "45.0",
                ])
                .prop_map(String::from),
            ]
        }

        fn value() -> impl Strategy<Value = String> {
            prop_oneof![
                4 => number(),
                2 => prop::sample::select(vec![
                    "\"dev00786\"", "\"d\"", "\"a_b\"", "\"\"", "\"room031\"", "\"room-7.b\"",
                    "\"2024-08-19T21:20:00.750Z\"", "\"2024-08-19T21:20:00+02:00\"",
                    "\"yesterday\"", "\"2.4.1\"", "\"x\\\"y\"", "\"\\u00e9\"", "\"é\u{2028}\"",
                    "\"\x7f\"", "\"tab\there\"", "true", "false", "null", "[1,2]", "{\"a\":1}",
                    "[]", "{}", "nul", "truex",
                ])
                .prop_map(String::from),
                1 => "\"[a-zA-Z0-9._:-]{0,70}\"",
            ]
        }

        fn whitespace() -> impl Strategy<Value = &'static str> {
            prop_oneof![
                8 => Just(""),
                1 => prop::sample::select(vec![" ", "\t", "\n", "\r\n ", "\u{a0}", "\x0b"]),
            ]
        }

        /// A line shaped like a sensor's, with random keys, values, order and whitespace.
        fn line() -> impl Strategy<Value = Vec<u8>> {
            let good = (
                "dev[0-9]{5}",
                0i64..=MAX_TS,
                (-400i64..400).prop_map(|v| format!("{}.{}", v / 10, v.abs() % 10)),
            )
                .prop_map(|(d, ts, v)| {
                    vec![
                        ("device".to_string(), format!("\"{d}\"")),
                        ("ts".to_string(), ts.to_string()),
                        ("temp".to_string(), v),
                    ]
                });
            let others = prop::collection::vec((key(), value()), 0..10);
            (
                good,
                others,
                any::<prop::sample::Index>(),
                prop::collection::vec(whitespace(), 8),
            )
                .prop_map(|(good, others, shuffle, ws)| {
                    let mut fields: Vec<(String, String)> =
                        good.into_iter().chain(others).collect();
                    let n = fields.len();
                    fields.rotate_left(shuffle.index(n));
                    let mut line = String::from(ws[0]);
                    line.push('{');
                    for (i, (k, v)) in fields.iter().enumerate() {
                        if i > 0 {
                            line.push_str(ws[(i % 3) + 1]);
                            line.push(',');
                        }
                        line.push_str(ws[4]);
                        line.push_str(&format!("\"{k}\"{}:{}{v}", ws[5], ws[6]));
                    }
                    line.push('}');
                    line.push_str(ws[7]);
                    line.into_bytes()
                })
        }

        /// Byte edits: deletions, insertions of JSON's structural bytes and of invalid UTF-8.
        fn mutated() -> impl Strategy<Value = Vec<u8>> {
            let edit = (
                any::<prop::sample::Index>(),
                0u8..3,
                prop::sample::select(b"\"\\{}[],:.-+eE0159 \xff\xc3tnu".to_vec()),
            );
            (line(), prop::collection::vec(edit, 1..4)).prop_map(|(mut line, edits)| {
                for (at, op, byte) in edits {
                    let i = at.index(line.len() + 1);
                    match op {
                        0 if i < line.len() => {
                            line.remove(i);
                        }
                        1 if i < line.len() => line[i] = byte,
                        _ => line.insert(i, byte),
                    }
                }
                line
            })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2048))]

            #[test]
            fn fast_and_reference_agree_on_random_lines(line in line()) {
                let fast = decode_line(3, &line, "temp");
                let reference = decode_line_reference(3, &line, "temp");
                prop_assert!(same(&fast, &reference), "{:?}: {:?} != {:?}",
                    String::from_utf8_lossy(&line), fast, reference);
            }

            #[test]
            fn fast_and_reference_agree_on_mutated_lines(line in mutated()) {
                let fast = decode_line(3, &line, "temp");
                let reference = decode_line_reference(3, &line, "temp");
                prop_assert!(same(&fast, &reference), "{:?}: {:?} != {:?}",
                    String::from_utf8_lossy(&line), fast, reference);
            }

            #[test]
            fn fast_and_reference_agree_for_any_metric_name(line in line(), metric in key()) {
                let fast = decode_line(3, &line, &metric);
                let reference = decode_line_reference(3, &line, &metric);
                prop_assert!(same(&fast, &reference), "{:?} ({}): {:?} != {:?}",
                    String::from_utf8_lossy(&line), metric, fast, reference);
            }
        }
    }

    /// Nanoseconds per line of the fast and the reference decoder, on recorded traffic:
    /// `hourglass generate --devices 1000 --duration 10m --out /tmp/gen.jsonl`, then
    /// `HOURGLASS_DECODE_INPUT=/tmp/gen.jsonl cargo test -p hourglass-pipeline --release --
    /// --ignored decode_speed --nocapture`. A measurement, not a test of speed.
    #[test]
    #[ignore = "a measurement: needs HOURGLASS_DECODE_INPUT and a release build"]
    fn decode_speed() {
        let path = std::env::var("HOURGLASS_DECODE_INPUT")
            .expect("set HOURGLASS_DECODE_INPUT to a file written by `hourglass generate`");
        let text = std::fs::read(&path).expect("HOURGLASS_DECODE_INPUT is readable");
        let lines: Vec<&[u8]> = text
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .collect();
        let fast_hits = lines
            .iter()
            .filter(|l| std::str::from_utf8(l).is_ok_and(|t| fast::decode(t, "temp").is_some()))
            .count();
        for line in &lines {
            assert_same(
                &decode_line(1, line, "temp"),
                &decode_line_reference(1, line, "temp"),
            );
        }
        type Decoder = fn(u64, &[u8], &str) -> Result<Reading, Box<Rejected>>;
        let measure = |decode: Decoder| {
            let mut best = f64::MAX;
            for _ in 0..5 {
                let started = std::time::Instant::now();
                let mut ok = 0usize;
                for (i, line) in lines.iter().enumerate() {
                    ok += usize::from(std::hint::black_box(decode(i as u64, line, "temp")).is_ok());
                }
                std::hint::black_box(ok);
                best = best.min(started.elapsed().as_nanos() as f64 / lines.len() as f64);
            }
            best
        };
        let reference = measure(decode_line_reference);
        let fast = measure(decode_line);
        println!(
            "decode_speed: {} lines of {path}, {fast_hits} on the fast path; reference \
             {reference:.0} ns/line, fast {fast:.0} ns/line ({:.1}x)",
            lines.len(),
            reference / fast
        );
    }

    #[test]
    fn rejection_keeps_line_and_raw() {
        let err = decode_line(42, b"{oops", "temp").unwrap_err();
        assert_eq!(err.line, 42);
        assert_eq!(err.raw, b"{oops");
    }
}
