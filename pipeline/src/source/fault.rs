//! The refusals every job makes alike: of a line, before its domain has a say ([`LineFault`]),
//! and of a record too far ahead of a reference time ([`Ahead`]).

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::MAX_LINE_BYTES;

/// Why a line is refused whatever the job: too long, not UTF-8, not a JSON object, a field
/// absent or wrong. A job's reason embeds it as one variant (`#[serde(untagged)]`,
/// `#[error(transparent)]`), so that its dead-letter `kind`, message and serde form are this
/// enum's. `Display` gives the dead-letter message.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[serde(tag = "kind", content = "detail", rename_all = "snake_case")]
#[non_exhaustive]
pub enum LineFault {
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
}

impl LineFault {
    /// Every kind of line fault, as a job's reason names it: the first kinds of every job's
    /// [`super::Refusal::KINDS`], in this order.
    pub const KINDS: [&'static str; 6] = [
        "too_long",
        "not_utf8",
        "invalid_json",
        "not_an_object",
        "missing_field",
        "bad_field",
    ];

    /// The position of this fault's kind in [`LineFault::KINDS`].
    pub fn kind_index(&self) -> usize {
        match self {
            LineFault::TooLong(_) => 0,
            LineFault::NotUtf8 => 1,
            LineFault::InvalidJson(_) => 2,
            LineFault::NotAnObject => 3,
            LineFault::MissingField(_) => 4,
            LineFault::BadField { .. } => 5,
        }
    }

    /// Field `field` is wrong: `problem` says how.
    pub fn bad(field: &str, problem: impl Into<String>) -> Self {
        LineFault::BadField {
            field: field.to_string(),
            problem: problem.into(),
        }
    }

    /// Field `field` is absent.
    pub fn missing(field: &str) -> Self {
        LineFault::MissingField(field.to_string())
    }
}

/// How far a record is ahead of a reference time: a refusal the sources make (a replay's
/// [`super::replay::FutureGuard`], a Kafka feed's wall-clock check), of kind
/// [`super::FUTURE_KIND`]. A job's reason holds it as its `future` variant, with its own
/// message; its serde form is that variant's `detail`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ahead {
    /// The record's event time, epoch seconds.
    pub ts: i64,
    /// What it was compared with: `the wall clock` or `the watermark`.
    pub reference: Cow<'static, str>,
    /// The reference time, epoch seconds.
    pub reference_ts: i64,
    /// The allowed skew, seconds.
    pub limit_secs: u64,
}

/// A job's kinds of refusal: [`LineFault::KINDS`], then the job's own `kinds`, as one array
/// of `N` (their count: a job's `KINDS` constant states it).
///
/// # Panics
/// When `N` is not `LineFault::KINDS.len() + kinds.len()`: in a constant, at compile time.
pub const fn job_kinds<const N: usize>(kinds: &[&'static str]) -> [&'static str; N] {
    let line = LineFault::KINDS;
    assert!(
        N == line.len() + kinds.len(),
        "N is not the number of kinds"
    );
    let mut all = [""; N];
    let mut i = 0;
    while i < N {
        all[i] = if i < line.len() {
            line[i]
        } else {
            kinds[i - line.len()]
        };
        i += 1;
    }
    all
}

/// The text of a raw line (without its newline).
///
/// # Errors
/// [`LineFault::TooLong`] over [`MAX_LINE_BYTES`], [`LineFault::NotUtf8`].
pub fn line_text(raw: &[u8]) -> Result<&str, LineFault> {
    if raw.len() > MAX_LINE_BYTES {
        return Err(LineFault::TooLong(raw.len()));
    }
    std::str::from_utf8(raw).map_err(|_| LineFault::NotUtf8)
}

/// The fields of a line that is one JSON object.
///
/// # Errors
/// [`LineFault::InvalidJson`], or [`LineFault::NotAnObject`] for other JSON.
pub fn json_object(text: &str) -> Result<Map<String, Value>, LineFault> {
    match serde_json::from_str(text) {
        Ok(Value::Object(fields)) => Ok(fields),
        Ok(_) => Err(LineFault::NotAnObject),
        Err(e) => Err(LineFault::InvalidJson(e.to_string())),
    }
}

/// The values of the top-level fields `names` of a line that is one JSON object, each `None`
/// when absent (a repeated field gives its last value, as [`json_object`] keeps it): what
/// [`json_object`] gives of them, without building the other fields or the map.
///
/// # Errors
/// As [`json_object`], for the same lines.
pub fn json_fields<const N: usize>(
    text: &str,
    names: [&str; N],
) -> Result<[Option<Value>; N], LineFault> {
    use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

    /// The fields, or `None` for JSON that is not an object.
    struct Fields<'n, const N: usize>(&'n [&'n str; N]);

    /// A key as the position of its name in `names`, if it is one.
    struct Key<'n, const N: usize>(&'n [&'n str; N]);

    impl<'de, const N: usize> DeserializeSeed<'de> for Key<'_, N> {
        type Value = Option<usize>;
        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
            d.deserialize_str(self)
        }
    }

    impl<const N: usize> Visitor<'_> for Key<'_, N> {
        type Value = Option<usize>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a field name")
        }
        fn visit_str<E: serde::de::Error>(self, key: &str) -> Result<Option<usize>, E> {
            Ok(self.0.iter().position(|n| *n == key))
        }
    }

    impl<'de, const N: usize> Visitor<'de> for Fields<'_, N> {
        type Value = Option<[Option<Value>; N]>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON value")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut found: [Option<Value>; N] = std::array::from_fn(|_| None);
            while let Some(at) = map.next_key_seed(Key(self.0))? {
                match at {
                    Some(i) => found[i] = Some(map.next_value()?),
                    None => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(Some(found))
        }
        // Any other JSON: read whole (so that a syntax error is one), and not an object.
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(None)
        }
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    }

    let mut de = serde_json::Deserializer::from_str(text);
    let parsed = de
        .deserialize_any(Fields(&names))
        .and_then(|fields| de.end().map(|()| fields));
    match parsed {
        Ok(Some(fields)) => Ok(fields),
        Ok(None) => Err(LineFault::NotAnObject),
        Err(e) => Err(LineFault::InvalidJson(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_the_serde_tags_and_come_first() {
        let all = [
            LineFault::TooLong(1),
            LineFault::NotUtf8,
            LineFault::InvalidJson(String::new()),
            LineFault::NotAnObject,
            LineFault::missing("x"),
            LineFault::bad("ts", "x"),
        ];
        for (i, f) in all.iter().enumerate() {
            assert_eq!(f.kind_index(), i);
            assert_eq!(
                serde_json::to_value(f).unwrap()["kind"],
                LineFault::KINDS[i]
            );
        }
        const KINDS: [&str; 7] = job_kinds(&["future"]);
        assert_eq!(KINDS[..6], LineFault::KINDS);
        assert_eq!(KINDS[6], "future");
    }

    #[test]
    fn a_line_is_an_object_of_at_most_64_kib_of_utf8() {
        assert_eq!(
            line_text(&[b' '; MAX_LINE_BYTES + 1]),
            Err(LineFault::TooLong(65537))
        );
        assert_eq!(line_text(b"caf\xE9"), Err(LineFault::NotUtf8));
        assert_eq!(json_object("[1]"), Err(LineFault::NotAnObject));
        assert!(matches!(json_object("{"), Err(LineFault::InvalidJson(_))));
        assert_eq!(json_object(r#"{"a":1}"#).unwrap().len(), 1);
    }

    #[test]
    fn fields_are_what_the_object_holds_and_faults_the_same() {
        let lines = [
            r#"{"a":1,"b":[2,{"x":null}],"c":"z","a":3}"#,
            r#" {"b": {"a": 1}} "#,
            "[1",
            "[1,2]",
            "\"a\"",
            "12",
            "null",
            "true",
            "{\"a\":1} x",
            r#"{"a":1,}"#,
            r#"{"\u0061":5}"#,
            "",
            "{",
        ];
        for line in lines {
            let fields = json_fields(line, ["a", "b", "d"]);
            match json_object(line) {
                Ok(map) => {
                    let want = ["a", "b", "d"].map(|n| map.get(n).cloned());
                    assert_eq!(fields, Ok(want), "{line}");
                }
                Err(e) => assert_eq!(fields, Err(e), "{line}"),
            }
        }
    }
}
