//! Timely operators of hourglass: an event-time source, an event-time tumbling window, newest per
//! key, per-time batches of updates and a batched sink.
//!
//! The operators are generic: they know event times, keys and batches, not sensor readings.
//! Timely timestamps are watermarks in event-time seconds, so a stream's frontier *is* its
//! watermark, and timely's progress tracking takes the minimum over workers and processes.
#![deny(missing_docs)]

pub mod event_source;
pub mod in_order;
pub mod newest_per_key;
pub mod stash_until_frontier;
pub mod tumbling_window;
pub mod write_batches;

pub use event_source::{bounded_event_source, event_source, EventFeed, InFlight, Poll};
pub use in_order::InOrder;
pub use newest_per_key::NewestPerKey;
pub use stash_until_frontier::StashUntilFrontier;
pub use tumbling_window::{Accumulate, Firing, Pane, TumblingWindow, WindowOutput, WindowSpec};
pub use write_batches::{BatchWriter, FlushPace, WriteBatches};

use std::hash::{Hash, Hasher};

use timely::dataflow::operators::{Capability, CapabilitySet};

/// The hash the keyed operators route a key by: the same in every process, since
/// `DefaultHasher::new()` has fixed keys, so a key goes to the same worker everywhere.
pub fn key_hash<K: Hash + ?Sized>(key: &K) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    key.hash(&mut h);
    h.finish()
}

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
