//! Generic JSON helpers of decoders: the event-time rule and the names of JSON value kinds.

use serde_json::Value;

/// Largest accepted event time: 9999999999 (year 2286). Larger values are almost always
/// milliseconds sent where seconds were expected.
pub const MAX_TS: i64 = 9_999_999_999;

/// An event time field: integer epoch seconds `0..=`[`MAX_TS`], or an RFC 3339 string
/// (fractional seconds truncated); else what is wrong with it. Both jobs' decoders read `ts`
/// with it.
pub fn event_time(v: &Value) -> Result<i64, String> {
    let ts = match v {
        Value::Number(n) => match n.as_i64() {
            Some(ts) => ts,
            None if n.is_u64() => i64::MAX,
            None => return Err(format!("expected integer epoch seconds, got {n}")),
        },
        Value::String(s) => chrono::DateTime::parse_from_rfc3339(s)
            .map_err(|e| format!("not RFC 3339 ({e}): {s:?}"))?
            .timestamp(),
        other => {
            return Err(format!(
                "expected epoch seconds or an RFC 3339 string, got {}",
                kind(other)
            ))
        }
    };
    if ts < 0 {
        return Err(format!("negative timestamp {ts}"));
    }
    if ts > MAX_TS {
        return Err(format!(
            "{ts} is after year 2286: milliseconds instead of seconds?"
        ));
    }
    Ok(ts)
}

/// What kind of JSON value `v` is, for messages ("a string", "an array", …).
pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}
