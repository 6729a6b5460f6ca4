//! The profile job's [`LineDecoder`]: a tag event line into a [`ProfileEvent`], routed by its
//! user id.

use pipeline::source::{rejected, Decoded, LineDecoder, Refusal};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::event::{decode_event, EventLimits, Reason};

/// A decoded tag event on its way to the merge: the envelope checked, the tags not yet (they
/// are checked against the registry read at the flush that takes them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileEvent {
    /// The user id (valid by [`crate::key::validate_user_id`]).
    pub user_id: String,
    /// Event time, epoch seconds.
    pub ts: i64,
    /// Tag code and raw value, ordered by code. Crossing processes as JSON text: bincode, the
    /// exchange's encoding, cannot decode a `serde_json::Value`.
    #[serde(with = "json_text")]
    pub tags: Vec<(String, Value)>,
    /// 1-based line number in the input, or the record's offset in its Kafka partition.
    pub line: u64,
    /// The Kafka partition the event was read from (`None` for a file), for the dead letter of
    /// a tag the flush refuses.
    pub partition: Option<i32>,
    /// The raw line, for the dead letter of a tag the flush refuses.
    pub raw: Vec<u8>,
}

/// Why a line or a tag was refused: the profile domain's [`Reason`].
impl Refusal for Reason {
    const KINDS: &'static [&'static str] = &Reason::KINDS;

    fn kind_index(&self) -> usize {
        Reason::kind_index(self)
    }
}

/// Decodes tag event lines with [`decode_event`] under the job's [`EventLimits`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ProfileDecoder {
    /// Limits of one event.
    pub limits: EventLimits,
}

impl LineDecoder for ProfileDecoder {
    type Record = ProfileEvent;
    type Reason = Reason;

    fn decode(&self, line: u64, raw: &[u8]) -> Decoded<ProfileEvent, Reason> {
        match decode_event(line, raw, &self.limits) {
            Ok(e) => Ok(ProfileEvent {
                user_id: e.user_id,
                ts: e.ts,
                tags: e.tags,
                line,
                partition: None,
                raw: raw.to_vec(),
            }),
            Err(r) => Err(rejected(r.line, r.raw, r.reason)),
        }
    }

    #[inline]
    fn event_time(record: &ProfileEvent) -> i64 {
        record.ts
    }

    #[inline]
    fn set_event_time(record: &mut ProfileEvent, ts: i64) {
        record.ts = ts;
    }

    #[inline]
    fn set_partition(record: &mut ProfileEvent, partition: i32) {
        record.partition = Some(partition);
    }

    #[inline]
    fn key(record: &ProfileEvent) -> &str {
        &record.user_id
    }

    #[inline]
    fn route_hint(raw: &[u8]) -> Option<&str> {
        user_hint(raw)
    }
}

/// The user id of a line found without decoding it: the value of the first `"user_id"` key
/// followed by `:` and a string without escapes or an unsigned integer, as [`decode_event`]
/// reads it (`10086` and `"10086"` are one user). A replay routes lines by it, so one worker
/// reads a user's lines in order; on odd lines (an escaped id, a repeated key) it may disagree
/// with the decoder, and the line then only goes to another worker. `None` when there is none.
pub fn user_hint(raw: &[u8]) -> Option<&str> {
    let mut rest = raw;
    while let Some(at) = memchr::memmem::find(rest, br#""user_id""#) {
        rest = &rest[at + 9..];
        let Some(value) = rest.trim_ascii_start().strip_prefix(b":") else {
            continue;
        };
        let value = value.trim_ascii_start();
        if let Some(text) = value.strip_prefix(b"\"") {
            let end = memchr::memchr2(b'"', b'\\', text)?;
            return (text[end] == b'"')
                .then(|| std::str::from_utf8(&text[..end]).ok())
                .flatten();
        }
        let digits = value.iter().take_while(|b| b.is_ascii_digit()).count();
        return (digits > 0)
            .then(|| std::str::from_utf8(&value[..digits]).ok())
            .flatten();
    }
    None
}

/// (De)serializes tag values as JSON text, which any serde format carries.
mod json_text {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use serde_json::Value;

    pub(super) fn serialize<S: Serializer>(
        tags: &[(String, Value)],
        s: S,
    ) -> Result<S::Ok, S::Error> {
        let text: Vec<(&str, String)> = tags
            .iter()
            .map(|(code, v)| (code.as_str(), v.to_string()))
            .collect();
        text.serialize(s)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Vec<(String, Value)>, D::Error> {
        Vec::<(String, String)>::deserialize(d)?
            .into_iter()
            .map(|(code, text)| {
                serde_json::from_str(&text)
                    .map(|v| (code, v))
                    .map_err(serde::de::Error::custom)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pipeline::source::LineFault;

    #[test]
    fn the_hint_is_the_user_the_decoder_reads() {
        let cases: [(&[u8], Option<&str>); 6] = [
            (br#"{"user_id":"10086","ts":1,"tags":{}}"#, Some("10086")),
            (br#"{"user_id" : 10086,"ts":1,"tags":{}}"#, Some("10086")),
            (br#"{"x":"user_id","user_id":"a"}"#, Some("a")),
            (br#"{"user_id":"a\u0062","ts":1}"#, None),
            (br#"{"user_id":true}"#, None),
            (b"{\"user_id\":\"caf\xE9\"}", None),
        ];
        for (raw, want) in cases {
            assert_eq!(user_hint(raw), want, "{}", String::from_utf8_lossy(raw));
        }
        let d = ProfileDecoder::default();
        for raw in [cases[0].0, cases[1].0] {
            let e = d.decode(3, raw).unwrap();
            assert_eq!(Some(e.user_id.as_str()), user_hint(raw));
            assert_eq!((e.line, e.raw.as_slice()), (3, raw));
        }
    }

    #[test]
    fn a_bad_line_is_rejected_with_its_kind() {
        let r = ProfileDecoder::default()
            .decode(9, b"{\"user_id\":")
            .unwrap_err();
        assert_eq!((r.line, r.reason.kind()), (9, "invalid_json"));
        let ahead = pipeline::source::Ahead {
            ts: 5,
            reference: "the wall clock".into(),
            reference_ts: 1,
            limit_secs: 2,
        };
        assert_eq!(Reason::from(ahead).kind(), "future");
        assert_eq!(Reason::from(LineFault::TooLong(70_000)).kind(), "too_long");
    }

    #[test]
    fn events_cross_processes_as_json_text() {
        let e = ProfileDecoder::default()
            .decode(
                1,
                br#"{"user_id":"u","ts":1,"tags":{"a":[1,"x"],"b":{"c":null}}}"#,
            )
            .unwrap();
        let text = serde_json::to_string(&e).unwrap();
        assert_eq!(serde_json::from_str::<ProfileEvent>(&text).unwrap(), e);
    }
}
