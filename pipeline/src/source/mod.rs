//! Where records come from: a recording replayed from a file ([`replay`]) or a Kafka topic
//! ([`kafka`]); each source is an [`operators::EventFeed`] of [`Decoded`] items, decoded by its
//! job's [`LineDecoder`].

mod clock;
mod counts;
mod fault;
pub mod kafka;
pub mod replay;

pub use clock::Clock;
pub use fault::{job_kinds, json_fields, json_object, line_text, Ahead, LineFault};

use serde::{Deserialize, Serialize};

/// Longest accepted input line, in bytes.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// The kind of the refusals of records too far ahead of a reference time ([`Ahead`]).
pub const FUTURE_KIND: &str = "future";

/// Why a job refused a record: a kind (a label with few values, the `kind` of its dead-letter
/// record) and a message (its `Display`, the dead-letter record's `reason`): a [`LineFault`],
/// or the job's own. The sources make the two refusals of their own, a line too long
/// ([`LineFault::TooLong`]) and a record too far ahead ([`Ahead`], of kind [`FUTURE_KIND`]).
pub trait Refusal:
    From<LineFault> + From<Ahead> + std::fmt::Display + std::fmt::Debug + Send + 'static
{
    /// Every kind the job gives, at most [`crate::stats::MAX_REJECT_KINDS`], those of
    /// [`LineFault::KINDS`] first (see [`job_kinds`]); [`Refusal::kind_index`] indexes it.
    const KINDS: &'static [&'static str];

    /// The position of this refusal's kind in [`Refusal::KINDS`].
    fn kind_index(&self) -> usize;

    /// This refusal's kind, from [`Refusal::KINDS`].
    fn kind(&self) -> &'static str {
        Self::KINDS[self.kind_index()]
    }
}

/// A record that could not be decoded or was refused, for the dead-letter output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rejected<R> {
    /// 1-based line number in the input, or the record's offset in its Kafka partition.
    pub line: u64,
    /// The Kafka partition the record came from (`None` for a file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<i32>,
    /// Why it was rejected.
    pub reason: R,
    /// The raw line (without its newline).
    pub raw: Vec<u8>,
}

/// What a source emits: a record, or a rejected one for the dead-letter output.
pub type Decoded<T, R> = Result<T, Box<Rejected<R>>>;

/// A job's decoder of input lines (or Kafka record values): what the sources know of a domain.
/// Sources are generic over it, so each record's decode is a direct, inlinable call.
pub trait LineDecoder: Send + 'static {
    /// The decoded record.
    type Record: Send + 'static;
    /// Why a line is refused.
    type Reason: Refusal;

    /// Decodes one line (without its newline), `line` being its number or Kafka offset.
    ///
    /// # Errors
    /// The rejected line with its reason. Never panics.
    fn decode(&self, line: u64, raw: &[u8]) -> Decoded<Self::Record, Self::Reason>;

    /// The record's event time, epoch seconds.
    fn event_time(record: &Self::Record) -> i64;

    /// Sets the record's event time (a replay's `--rebase-time` shift).
    fn set_event_time(record: &mut Self::Record, ts: i64);

    /// The record's key (a device id): the unit whose clock a replay's future guard follows.
    fn key(record: &Self::Record) -> &str;

    /// Notes on a record read from a Kafka topic the partition it came from (its line number
    /// being its offset there), for a job that may refuse the record later and must then name
    /// where it was, as a rejected record's [`Rejected::partition`] does. By default nothing.
    #[inline]
    fn set_partition(_record: &mut Self::Record, _partition: i32) {}

    /// The key of a line found without decoding it, by which a replay routes lines to workers
    /// (so that one worker reads every line of a key in order); `None` routes by line number.
    fn route_hint(raw: &[u8]) -> Option<&str>;
}

/// Boxes a rejection of `raw` (line `line`) for `reason`.
pub fn rejected<R>(line: u64, raw: impl Into<Vec<u8>>, reason: R) -> Box<Rejected<R>> {
    Box::new(Rejected {
        line,
        partition: None,
        reason,
        raw: raw.into(),
    })
}
