//! Where readings come from: a recording replayed from a file ([`replay`]) or a Kafka topic
//! ([`kafka`]); each source is an [`operators::EventFeed`] of [`Decoded`] items.

mod clock;
mod counts;
pub mod kafka;
pub mod replay;

pub use clock::Clock;

use crate::decode::Rejected;
use crate::reading::Reading;

/// What a source emits: a reading, or a rejected record for the dead-letter output.
pub type Decoded = Result<Reading, Box<Rejected>>;
