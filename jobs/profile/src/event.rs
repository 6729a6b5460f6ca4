//! Decoding tag events (JSON lines) and checking their tags against the registry, into values
//! ready to store or into rejections that carry the raw line and a reason.
//!
//! A line is `{"user_id": "10086" | 10086, "ts": 1796500000 | "2026-12-06T10:00:00Z",
//! "tags": {"dim_city": "hz", "beh_buy_30d": 3}}`; other top-level fields are ignored (producers
//! add their own metadata). Decoding ([`decode_event`]) checks the envelope; each tag is then
//! checked on its own ([`check_tag`]: known, writable, of its type), so that one bad tag is
//! dead-lettered with its reason while the event's other tags are written. Nothing here panics.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use pipeline::source::{job_kinds, json_fields, line_text, Ahead, LineFault};

use crate::key::validate_user_id;
use crate::tag::{DataType, TagDef, TagStatus};

/// Largest accepted event time: 9999999999 (year 2286). Larger values are almost always
/// milliseconds sent where seconds were expected (the sensor decoder's rule).
pub use pipeline::json::MAX_TS;
/// Longest accepted input line, in bytes (the engine's, as the sensor job's).
pub use pipeline::source::MAX_LINE_BYTES;
/// Longest stored value by default ([`EventLimits::max_value_bytes`]), in bytes of its cell
/// text (a STRING, or a MULTI_VALUE's JSON array): a profile row is read whole by every
/// recommendation request, so one tag must not make it large.
pub const MAX_VALUE_BYTES: usize = 4096;

/// Limits of one event, part of the job's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventLimits {
    /// Most tags one event may carry (default 256): users hold tens to hundreds of tags, so
    /// more in one event is a producer's bug, and a whole event is one user's put.
    #[serde(default = "default_max_tags")]
    pub max_tags: usize,
    /// Longest value, in bytes of its cell text (default [`MAX_VALUE_BYTES`], 4096).
    #[serde(default = "default_max_value_bytes")]
    pub max_value_bytes: usize,
}

const fn default_max_tags() -> usize {
    256
}

const fn default_max_value_bytes() -> usize {
    MAX_VALUE_BYTES
}

impl Default for EventLimits {
    fn default() -> Self {
        EventLimits {
            max_tags: default_max_tags(),
            max_value_bytes: default_max_value_bytes(),
        }
    }
}

/// One decoded tag event: whose tags, when, and the raw values (not yet checked).
#[derive(Debug, Clone, PartialEq)]
pub struct TagEvent {
    /// The user id as text: a JSON integer in decimal, a string as it was (so `"007"` and `7`
    /// are different users). Valid by [`validate_user_id`].
    pub user_id: String,
    /// Event time, epoch seconds, `0..=MAX_TS`.
    pub ts: i64,
    /// Tag code and raw value, ordered by code (a repeated code keeps its last value, as
    /// JSON parsers do).
    pub tags: Vec<(String, Value)>,
}

/// Why a line or one of its tags was rejected: a [`LineFault`], or the profile domain's own
/// reasons. `Display` gives the dead-letter message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", content = "detail", rename_all = "snake_case")]
#[non_exhaustive]
pub enum Reason {
    /// The event carries more tags than [`EventLimits::max_tags`].
    #[error(
        "{count} tags in one event, over the limit of {limit}: split the event, or raise max_tags"
    )]
    TooManyTags {
        /// Tags in the event.
        count: usize,
        /// The limit.
        limit: usize,
    },
    /// No tag of the registry has this code.
    #[error("unknown tag code '{0}': define it in the registry (`hourglass tags import`)")]
    UnknownTag(String),
    /// The tag is offline: no longer written.
    #[error("tag '{0}' is offline and no longer written")]
    Offline(String),
    /// The tag is gray and the user is not in the test list.
    #[error("tag '{code}' is gray and user '{user}' is not in its test list")]
    GrayNotTestUser {
        /// The tag's code.
        code: String,
        /// The user.
        user: String,
    },
    /// The value does not have the tag's type.
    #[error("tag '{code}' is {expected}: {problem}")]
    WrongType {
        /// The tag's code.
        code: String,
        /// The tag's data type.
        expected: DataType,
        /// What the value is instead.
        problem: String,
    },
    /// The value's text is longer than [`EventLimits::max_value_bytes`].
    #[error("tag '{code}': value is {bytes} bytes, over the limit of {limit}")]
    TooLarge {
        /// The tag's code.
        code: String,
        /// Bytes of the value's cell text.
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// The event's time is too far ahead of a reference (the wall clock, or the watermark):
    /// made by the job's sources, not by decoding.
    #[error(
        "ts {} is more than {} s ahead of {} ({})",
        .0.ts,
        .0.limit_secs,
        .0.reference,
        .0.reference_ts
    )]
    Future(Ahead),
    /// The line is not one (too long, not UTF-8, not a JSON object, a field of the envelope
    /// absent or wrong).
    #[serde(untagged)]
    #[error(transparent)]
    Line(#[from] LineFault),
}

impl Reason {
    /// Every kind of reason, as [`Reason::kind`] names it; [`Reason::kind_index`] indexes it.
    pub const KINDS: [&'static str; 13] = job_kinds(&[
        "too_many_tags",
        "unknown_tag",
        "offline_tag",
        "gray_tag",
        "wrong_type",
        "value_too_large",
        "future",
    ]);

    /// The position of this reason's kind in [`Reason::KINDS`]: an index into a job's counters.
    pub fn kind_index(&self) -> usize {
        let own = match self {
            Reason::Line(fault) => return fault.kind_index(),
            Reason::TooManyTags { .. } => 0,
            Reason::UnknownTag(_) => 1,
            Reason::Offline(_) => 2,
            Reason::GrayNotTestUser { .. } => 3,
            Reason::WrongType { .. } => 4,
            Reason::TooLarge { .. } => 5,
            Reason::Future { .. } => 6,
        };
        LineFault::KINDS.len() + own
    }

    /// The reason's kind without its details: the `kind` of its dead-letter record, and a
    /// label value with few distinct values.
    pub fn kind(&self) -> &'static str {
        Self::KINDS[self.kind_index()]
    }
}

impl From<Ahead> for Reason {
    fn from(ahead: Ahead) -> Self {
        Reason::Future(ahead)
    }
}

/// A line, or one tag of it, that is not written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RejectedEvent {
    /// 1-based line number in the input, or the record's offset in its Kafka partition.
    pub line: u64,
    /// Why it was rejected.
    pub reason: Reason,
    /// The raw line (without its newline).
    pub raw: Vec<u8>,
}

impl RejectedEvent {
    /// The rejection of `raw`, line `line`, for `reason`.
    pub fn new(line: u64, raw: &[u8], reason: Reason) -> Box<Self> {
        Box::new(RejectedEvent {
            line,
            reason,
            raw: raw.to_vec(),
        })
    }
}

/// A checked value, ready to store: what [`check_value`] makes of a raw JSON value.
#[derive(Debug, Clone, PartialEq)]
pub enum CellValue {
    /// A BOOLEAN tag's value.
    Boolean(bool),
    /// An INT tag's value.
    Int(i64),
    /// A FLOAT tag's value, finite.
    Float(f64),
    /// A STRING tag's value.
    String(String),
    /// A MULTI_VALUE tag's value: its strings sorted and without repeats, as a compact JSON
    /// array, so that the same set is the same bytes (and writes no new version).
    MultiValue(String),
}

impl CellValue {
    /// The cell text stored in HBase, readable by the HBase shell and happybase: `true`/`false`,
    /// a decimal, the shortest float text that reads back the same (`0.1`, `3.0`, `1e+300`),
    /// the UTF-8 text itself, or the JSON array.
    pub fn to_cell(&self) -> Vec<u8> {
        match self {
            CellValue::String(s) | CellValue::MultiValue(s) => s.as_bytes().to_vec(),
            other => other.to_json().into_bytes(),
        }
    }

    /// The value as JSON text (a STRING quoted): the Redis value of a short-term tag and the
    /// value `profile get` prints.
    pub fn to_json(&self) -> String {
        match self {
            CellValue::Boolean(b) => b.to_string(),
            CellValue::Int(i) => i.to_string(),
            CellValue::Float(f) => serde_json::to_string(f).unwrap_or_else(|_| "null".into()),
            CellValue::String(s) => Value::String(s.clone()).to_string(),
            CellValue::MultiValue(s) => s.clone(),
        }
    }

    /// Reads back a cell text written by [`CellValue::to_cell`] for a tag of `data_type`;
    /// `None` when it is not one.
    pub fn from_cell(data_type: DataType, cell: &[u8]) -> Option<CellValue> {
        let text = std::str::from_utf8(cell).ok()?;
        match data_type {
            DataType::Boolean => text.parse().ok().map(CellValue::Boolean),
            DataType::Int => text.parse().ok().map(CellValue::Int),
            DataType::Float => text
                .parse::<f64>()
                .ok()
                .filter(|f| f.is_finite())
                .map(CellValue::Float),
            DataType::String => Some(CellValue::String(text.to_string())),
            DataType::MultiValue => serde_json::from_str::<Vec<String>>(text)
                .ok()
                .map(|_| CellValue::MultiValue(text.to_string())),
        }
    }
}

/// Decodes one input line (without its trailing newline).
///
/// Accepts a JSON object with `user_id` (a string valid by [`validate_user_id`], or a
/// non-negative integer, taken as its decimal text), `ts` (integer epoch seconds
/// `0..=MAX_TS`, or an RFC 3339 string, fractional seconds truncated) and `tags` (an object of
/// at most `limits.max_tags` codes; may be empty). The tags' values are checked later, one by
/// one, by [`check_tag`].
///
/// # Errors
/// A [`RejectedEvent`] holding `line`, the reason and the raw bytes. Never panics.
pub fn decode_event(
    line: u64,
    raw: &[u8],
    limits: &EventLimits,
) -> Result<TagEvent, Box<RejectedEvent>> {
    decode(raw, limits).map_err(|reason| RejectedEvent::new(line, raw, reason))
}

fn decode(raw: &[u8], limits: &EventLimits) -> Result<TagEvent, Reason> {
    let [user_id, ts, tags] = json_fields(line_text(raw)?, ["user_id", "ts", "tags"])?;
    let user_id = match user_id {
        None => return Err(LineFault::missing("user_id").into()),
        Some(v) => parse_user_id(v)?,
    };
    let ts = match ts {
        None => return Err(LineFault::missing("ts").into()),
        Some(v) => parse_ts(&v)?,
    };
    let tags = match tags {
        None => return Err(LineFault::missing("tags").into()),
        Some(Value::Object(tags)) => tags,
        Some(other) => {
            return Err(bad(
                "tags",
                format!(
                    "expected an object of tag code -> value, got {}",
                    pipeline::json::kind(&other)
                ),
            ))
        }
    };
    if tags.len() > limits.max_tags {
        return Err(Reason::TooManyTags {
            count: tags.len(),
            limit: limits.max_tags,
        });
    }
    Ok(TagEvent {
        user_id,
        ts,
        tags: tags.into_iter().collect(),
    })
}

fn parse_user_id(v: Value) -> Result<String, Reason> {
    let user = match v {
        Value::String(s) => s,
        Value::Number(n) => match n.as_u64() {
            Some(id) => id.to_string(),
            None => {
                return Err(bad(
                    "user_id",
                    format!("expected a string or a non-negative integer, got {n}"),
                ))
            }
        },
        other => {
            return Err(bad(
                "user_id",
                format!(
                    "expected a string or a non-negative integer, got {}",
                    pipeline::json::kind(&other)
                ),
            ))
        }
    };
    validate_user_id(&user).map_err(|e| bad("user_id", e.to_string()))?;
    Ok(user)
}

fn parse_ts(v: &Value) -> Result<i64, Reason> {
    pipeline::json::event_time(v).map_err(|problem| bad("ts", problem))
}

/// Checks one tag of an event for `user`: the code is defined (`def`, looked up by the
/// caller in the registry read for this flush), the tag is writable for the user
/// ([`check_writable`]) and the value has its type ([`check_value`]).
///
/// # Errors
/// [`Reason::UnknownTag`] when `def` is `None`, then as [`check_writable`] and
/// [`check_value`].
pub fn check_tag(
    def: Option<&TagDef>,
    code: &str,
    user: &str,
    value: &Value,
    gray_users: &HashSet<String>,
    limits: &EventLimits,
) -> Result<CellValue, Reason> {
    let def = def.ok_or_else(|| Reason::UnknownTag(code.to_string()))?;
    check_writable(def, user, gray_users)?;
    check_value(def, value, limits.max_value_bytes)
}

/// Whether `def` is written for `user`: an online tag for everyone, a gray one only for the
/// users of the test list `gray_users`, an offline one for nobody.
///
/// # Errors
/// [`Reason::Offline`], [`Reason::GrayNotTestUser`].
pub fn check_writable(
    def: &TagDef,
    user: &str,
    gray_users: &HashSet<String>,
) -> Result<(), Reason> {
    match def.status {
        TagStatus::Online => Ok(()),
        TagStatus::Gray if gray_users.contains(user) => Ok(()),
        TagStatus::Gray => Err(Reason::GrayNotTestUser {
            code: def.tag_code.clone(),
            user: user.to_string(),
        }),
        TagStatus::Offline => Err(Reason::Offline(def.tag_code.clone())),
    }
}

/// Checks a raw value against the tag's `data_type` and makes it the value to store.
///
/// BOOLEAN: `true`/`false`. INT: a JSON integer within `i64` (`3.0` is refused: a float sent
/// for a count is a producer's bug). FLOAT: any JSON number, as a finite `f64`. STRING: a JSON
/// string of at most `max_bytes` bytes. MULTI_VALUE: a JSON array of strings, stored
/// sorted and without repeats ([`CellValue::MultiValue`]), at most `max_bytes` as
/// text. `null` is no value of any type (removing a tag is `hourglass tags purge` or a later
/// issue's delete, not an event).
///
/// # Errors
/// [`Reason::WrongType`] saying what the value is; [`Reason::TooLarge`].
pub fn check_value(def: &TagDef, value: &Value, max_bytes: usize) -> Result<CellValue, Reason> {
    let code = &def.tag_code;
    let wrong = |problem: String| Reason::WrongType {
        code: code.clone(),
        expected: def.data_type,
        problem,
    };
    let got = || format!("got {}", pipeline::json::kind(value));
    let checked = match (def.data_type, value) {
        (DataType::Boolean, Value::Bool(b)) => CellValue::Boolean(*b),
        (DataType::Int, Value::Number(n)) => CellValue::Int(
            n.as_i64()
                .ok_or_else(|| wrong(format!("{n} is not an integer within 64 bits")))?,
        ),
        (DataType::Float, Value::Number(n)) => CellValue::Float(
            n.as_f64()
                .filter(|f| f.is_finite())
                .ok_or_else(|| wrong(format!("{n} is not a finite number")))?,
        ),
        (DataType::String, Value::String(s)) => CellValue::String(s.clone()),
        (DataType::MultiValue, Value::Array(items)) => {
            let mut strings = Vec::with_capacity(items.len());
            for item in items {
                match item {
                    Value::String(s) => strings.push(s.as_str()),
                    other => {
                        return Err(wrong(format!(
                            "expected an array of strings, it holds {}",
                            pipeline::json::kind(other)
                        )))
                    }
                }
            }
            strings.sort_unstable();
            strings.dedup();
            // Serializing strings cannot fail.
            CellValue::MultiValue(serde_json::to_string(&strings).unwrap_or_default())
        }
        _ => return Err(wrong(got())),
    };
    let bytes = match &checked {
        CellValue::String(s) | CellValue::MultiValue(s) => s.len(),
        _ => 0,
    };
    if bytes > max_bytes {
        return Err(Reason::TooLarge {
            code: code.clone(),
            bytes,
            limit: max_bytes,
        });
    }
    Ok(checked)
}

fn bad(field: &str, problem: impl Into<String>) -> Reason {
    LineFault::bad(field, problem).into()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;
    use crate::tag::ValueType;

    fn tag(code: &str, data_type: DataType, status: TagStatus) -> TagDef {
        TagDef {
            tag_code: code.into(),
            name: code.into(),
            data_type,
            value_type: ValueType::Statistic,
            status,
            ttl_secs: None,
            category: String::new(),
            owner: String::new(),
            update_frequency: String::new(),
        }
    }

    fn decode_str(line: &str) -> Result<TagEvent, Reason> {
        decode_event(7, line.as_bytes(), &EventLimits::default()).map_err(|r| {
            assert_eq!((r.line, r.raw.as_slice()), (7, line.as_bytes()));
            r.reason
        })
    }

    fn bad_field(line: &str) -> (String, String) {
        match decode_str(line) {
            Err(Reason::Line(LineFault::BadField { field, problem })) => (field, problem),
            other => panic!("{line}: expected BadField, got {other:?}"),
        }
    }

    #[test]
    fn the_issues_example_decodes() {
        let e = decode_str(
            r#"{"user_id": "10086", "ts": 1796500000, "tags": {"dim_city": "hz", "beh_buy_30d": 3, "rt_last_cat": "beauty"}, "source": "crm"}"#,
        )
        .unwrap();
        assert_eq!(e.user_id, "10086");
        assert_eq!(e.ts, 1_796_500_000);
        assert_eq!(
            e.tags,
            vec![
                ("beh_buy_30d".to_string(), json!(3)),
                ("dim_city".to_string(), json!("hz")),
                ("rt_last_cat".to_string(), json!("beauty")),
            ]
        );
    }

    #[test]
    fn user_ids_are_normalised_or_refused() {
        let user = |id: &str| decode_str(&format!(r#"{{"user_id":{id},"ts":0,"tags":{{}}}}"#));
        assert_eq!(user("10086").unwrap().user_id, "10086");
        assert_eq!(
            user("18446744073709551615").unwrap().user_id,
            u64::MAX.to_string()
        );
        assert_eq!(
            user(r#""007""#).unwrap().user_id,
            "007",
            "strings as they are"
        );
        for bad in [
            "-1", "1.5", "1e3", "true", "null", r#""""#, r#""a_b""#, r#""a b""#,
        ] {
            assert!(
                matches!(user(bad), Err(Reason::Line(LineFault::BadField { ref field, .. })) if field == "user_id"),
                "{bad}"
            );
        }
        assert_eq!(
            decode_str(r#"{"ts":0,"tags":{}}"#),
            Err(LineFault::missing("user_id").into())
        );
    }

    #[test]
    fn ts_is_epoch_seconds_or_rfc_3339_in_range() {
        let ts = |ts: &str| decode_str(&format!(r#"{{"user_id":1,"ts":{ts},"tags":{{}}}}"#));
        assert_eq!(ts("0").unwrap().ts, 0);
        assert_eq!(ts("9999999999").unwrap().ts, MAX_TS);
        assert_eq!(
            ts(r#""2026-12-06T10:00:00.9+08:00""#).unwrap().ts,
            1_796_522_400
        );
        for bad in [
            "-1",
            "10000000000",
            "1796500000000",
            "18446744073709551615",
            "1.5",
            r#""yesterday""#,
            "[]",
        ] {
            let (field, problem) = bad_field(&format!(r#"{{"user_id":1,"ts":{bad},"tags":{{}}}}"#));
            assert_eq!(field, "ts", "{bad}: {problem}");
        }
        assert!(bad_field(r#"{"user_id":1,"ts":17965000000000,"tags":{}}"#)
            .1
            .contains("milliseconds instead of seconds"));
    }

    #[test]
    fn the_envelope_is_checked() {
        assert_eq!(decode_str("[1]"), Err(LineFault::NotAnObject.into()));
        assert!(matches!(
            decode_str(r#"{"user_id":"#),
            Err(Reason::Line(LineFault::InvalidJson(_)))
        ));
        assert_eq!(
            decode_event(1, b"{\"user_id\":\"\xff\"}", &EventLimits::default())
                .unwrap_err()
                .reason,
            LineFault::NotUtf8.into()
        );
        let long = format!(
            r#"{{"user_id":1,"ts":0,"tags":{{"a":"{}"}}}}"#,
            "x".repeat(MAX_LINE_BYTES)
        );
        assert!(matches!(
            decode_str(&long),
            Err(Reason::Line(LineFault::TooLong(_)))
        ));
        assert_eq!(
            decode_str(r#"{"user_id":1,"ts":0}"#),
            Err(LineFault::missing("tags").into())
        );
        assert_eq!(bad_field(r#"{"user_id":1,"ts":0,"tags":[]}"#).0, "tags");
        let many: Vec<String> = (0..3).map(|i| format!(r#""t{i}":1"#)).collect();
        let line = format!(r#"{{"user_id":1,"ts":0,"tags":{{{}}}}}"#, many.join(","));
        let limits = EventLimits {
            max_tags: 2,
            ..EventLimits::default()
        };
        let r = decode_event(1, line.as_bytes(), &limits).unwrap_err();
        assert_eq!(r.reason, Reason::TooManyTags { count: 3, limit: 2 });
        assert_eq!(r.reason.kind(), "too_many_tags");
        assert!(decode_event(
            1,
            line.as_bytes(),
            &EventLimits {
                max_tags: 3,
                ..EventLimits::default()
            }
        )
        .is_ok());
    }

    #[test]
    fn values_are_checked_against_the_data_type() {
        let ok = |t: DataType, v: Value| {
            check_value(&tag("c", t, TagStatus::Online), &v, MAX_VALUE_BYTES)
        };
        assert_eq!(
            ok(DataType::Boolean, json!(true)),
            Ok(CellValue::Boolean(true))
        );
        assert_eq!(ok(DataType::Int, json!(-3)), Ok(CellValue::Int(-3)));
        assert_eq!(ok(DataType::Float, json!(3)), Ok(CellValue::Float(3.0)));
        assert_eq!(ok(DataType::Float, json!(0.1)), Ok(CellValue::Float(0.1)));
        assert_eq!(
            ok(DataType::String, json!("hz")),
            Ok(CellValue::String("hz".into()))
        );
        assert_eq!(
            ok(DataType::MultiValue, json!(["b", "a", "b"])),
            Ok(CellValue::MultiValue(r#"["a","b"]"#.into()))
        );
        assert_eq!(
            ok(DataType::MultiValue, json!([])),
            Ok(CellValue::MultiValue("[]".into()))
        );
        for (t, v) in [
            (DataType::Boolean, json!("true")),
            (DataType::Boolean, json!(1)),
            (DataType::Int, json!(3.0)),
            (DataType::Int, json!(u64::MAX)),
            (DataType::Int, json!("3")),
            (DataType::Float, json!("0.1")),
            (DataType::String, json!(3)),
            (DataType::String, Value::Null),
            (DataType::MultiValue, json!("a")),
            (DataType::MultiValue, json!(["a", 1])),
        ] {
            let r = ok(t, v.clone());
            assert!(
                matches!(r, Err(Reason::WrongType { expected, .. }) if expected == t),
                "{t} {v}: {r:?}"
            );
        }
        let e = ok(DataType::Int, json!(3.5)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "tag 'c' is INT: 3.5 is not an integer within 64 bits"
        );
        assert_eq!(e.kind(), "wrong_type");
        let big = "x".repeat(MAX_VALUE_BYTES + 1);
        assert_eq!(
            ok(DataType::String, json!(big)),
            Err(Reason::TooLarge {
                code: "c".into(),
                bytes: MAX_VALUE_BYTES + 1,
                limit: MAX_VALUE_BYTES
            })
        );
        assert!(ok(DataType::String, json!("x".repeat(MAX_VALUE_BYTES))).is_ok());
        let many: Vec<String> = (0..1000).map(|i| format!("{i:04}")).collect();
        assert!(matches!(
            ok(DataType::MultiValue, json!(many)),
            Err(Reason::TooLarge { .. })
        ));
    }

    #[test]
    fn unknown_offline_and_gray_tags_are_reasons() {
        let gray_users: HashSet<String> = ["tester".to_string()].into();
        let check = |def: Option<&TagDef>, user: &str| {
            check_tag(
                def,
                "c",
                user,
                &json!(1),
                &gray_users,
                &EventLimits::default(),
            )
        };
        assert_eq!(check(None, "u"), Err(Reason::UnknownTag("c".into())));
        let online = tag("c", DataType::Int, TagStatus::Online);
        assert_eq!(check(Some(&online), "u"), Ok(CellValue::Int(1)));
        let offline = tag("c", DataType::Int, TagStatus::Offline);
        assert_eq!(
            check(Some(&offline), "tester"),
            Err(Reason::Offline("c".into()))
        );
        let gray = tag("c", DataType::Int, TagStatus::Gray);
        assert_eq!(check(Some(&gray), "tester"), Ok(CellValue::Int(1)));
        let e = check(Some(&gray), "u").unwrap_err();
        assert_eq!(e.kind(), "gray_tag");
        assert_eq!(
            e.to_string(),
            "tag 'c' is gray and user 'u' is not in its test list"
        );
        // A wrong type counts only once the tag may be written.
        let wrong = check_tag(
            Some(&offline),
            "c",
            "u",
            &json!("x"),
            &gray_users,
            &EventLimits::default(),
        );
        assert_eq!(wrong, Err(Reason::Offline("c".into())));
    }

    #[test]
    fn cell_texts_read_back_and_kinds_are_distinct() {
        for (t, v, cell, json_text) in [
            (
                DataType::Boolean,
                CellValue::Boolean(false),
                "false",
                "false",
            ),
            (
                DataType::Int,
                CellValue::Int(i64::MIN),
                "-9223372036854775808",
                "-9223372036854775808",
            ),
            (DataType::Float, CellValue::Float(3.0), "3.0", "3.0"),
            (DataType::Float, CellValue::Float(1e300), "1e+300", "1e+300"),
            (
                DataType::String,
                CellValue::String("杭州 \"x\"".into()),
                "杭州 \"x\"",
                r#""杭州 \"x\"""#,
            ),
            (
                DataType::MultiValue,
                CellValue::MultiValue(r#"["a","b"]"#.into()),
                r#"["a","b"]"#,
                r#"["a","b"]"#,
            ),
        ] {
            assert_eq!(v.to_cell(), cell.as_bytes(), "{v:?}");
            assert_eq!(v.to_json(), json_text, "{v:?}");
            assert_eq!(CellValue::from_cell(t, cell.as_bytes()), Some(v));
        }
        assert_eq!(CellValue::from_cell(DataType::Int, b"x"), None);
        let kinds: HashSet<_> = Reason::KINDS.iter().collect();
        assert_eq!(kinds.len(), Reason::KINDS.len());
    }

    proptest! {
        #[test]
        fn any_bytes_decode_or_are_rejected_with_the_line(raw in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Err(r) = decode_event(3, &raw, &EventLimits::default()) {
                prop_assert_eq!(r.line, 3);
                prop_assert_eq!(r.raw, raw);
            }
        }

        #[test]
        fn any_event_shape_never_panics(
            user in prop_oneof![any::<i64>().prop_map(|i| i.to_string()), "[ -~]{0,70}".prop_map(|s| Value::String(s).to_string())],
            ts in prop_oneof![any::<i64>().prop_map(|i| i.to_string()), any::<f64>().prop_map(|f| f.to_string()), "[0-9TZ:+.-]{0,30}".prop_map(|s| Value::String(s).to_string())],
            value in prop_oneof![
                any::<i64>().prop_map(Value::from),
                any::<f64>().prop_map(Value::from),
                any::<bool>().prop_map(Value::from),
                ".{0,20}".prop_map(Value::from),
                proptest::collection::vec(".{0,5}", 0..4).prop_map(Value::from),
            ],
        ) {
            let line = format!(r#"{{"user_id":{user},"ts":{ts},"tags":{{"c":{value}}}}}"#);
            if let Ok(e) = decode_event(1, line.as_bytes(), &EventLimits::default()) {
                prop_assert!(validate_user_id(&e.user_id).is_ok());
                prop_assert!((0..=MAX_TS).contains(&e.ts));
                for t in DataType::ALL {
                    if let Ok(v) = check_value(&tag("c", *t, TagStatus::Online), &e.tags[0].1, MAX_VALUE_BYTES) {
                        prop_assert_eq!(CellValue::from_cell(*t, &v.to_cell()), Some(v));
                    }
                }
            }
        }
    }
}
