//! Timely operators of hourglass: an event-time source, an event-time tumbling window and a batched sink.
//!
//! The operators are generic: they know event times, keys and batches, not sensor readings.
//! Timely timestamps are watermarks in event-time seconds, so a stream's frontier *is* its
//! watermark, and timely's progress tracking takes the minimum over workers and processes.
#![deny(missing_docs)]

pub mod event_source;
pub mod tumbling_window;
pub mod write_batches;

pub use event_source::{event_source, EventFeed, Poll};
pub use tumbling_window::{Accumulate, Firing, Pane, TumblingWindow, WindowOutput, WindowSpec};
pub use write_batches::{BatchWriter, WriteBatches};

use timely::dataflow::operators::{Capability, CapabilitySet};

/// Moves held capabilities up to the input frontier, never below what they hold: data from a
/// worker that is ahead arrives at times beyond the frontier, so `CapabilitySet::downgrade`
/// to the frontier itself would panic. An empty frontier releases everything.
pub(crate) fn downgrade_to_frontier(caps: &mut CapabilitySet<u64>, frontier: &[u64]) {
    match (frontier.first(), least(caps).map(|c| *c.time())) {
        (None, _) => caps.downgrade(&[] as &[u64]),
        (Some(&f), Some(held)) if f > held => caps.downgrade([f]),
        _ => {}
    }
}

/// The capability with the least time.
pub(crate) fn least(caps: &CapabilitySet<u64>) -> Option<&Capability<u64>> {
    caps.iter().min_by_key(|c| *c.time())
}
