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
}
