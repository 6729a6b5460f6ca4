//! The replay source: a recording (file or stdin) read line by line, each worker taking its
//! share of the lines, with an event-time watermark and a guard against clocks running ahead.

mod feed;
mod guard;
pub mod input;

pub use feed::{ReplayFeed, ReplayOptions};
pub use guard::{FutureGuard, Verdict};
pub use input::{Line, LineReader};
