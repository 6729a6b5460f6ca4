//! A source that stamps each item with the watermark current when the item arrived.

use std::time::Duration;

use timely::container::CapacityContainerBuilder;
use timely::dataflow::operators::generic::operator::source;
use timely::dataflow::{Scope, StreamVec};

/// What an [`EventFeed`] has for the source when polled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Poll<D> {
    /// The next item.
    Ready(D),
    /// Nothing now; poll again after this long (pacing, or an empty Kafka poll).
    Pending(Duration),
    /// The feed is exhausted: the source releases its capability, which closes every window.
    Done,
}

/// A pull-based feed of items with an event-time watermark.
pub trait EventFeed: 'static {
    /// The items the feed produces.
    type Item: 'static;

    /// The next item, or why there is none.
    fn poll(&mut self) -> Poll<Self::Item>;

    /// Event time (seconds) below which the feed promises no more on-time items. Must never
    /// decrease. Items with an event time below it may still come: they are *late*.
    fn watermark(&self) -> u64;
}

/// Reads `feed` on every worker and emits each item at the timely time equal to the feed's
/// watermark just before the item arrived, so an item's time tells whether it was late.
///
/// The source polls at most `batch` items per activation, then yields to other operators.
///
/// # Examples
/// ```
/// use operators::{event_source, EventFeed, Poll};
/// use timely::dataflow::operators::Capture;
/// use timely::dataflow::operators::capture::Extract;
///
/// struct Items(std::vec::IntoIter<u64>, u64);
/// impl EventFeed for Items {
///     type Item = u64;
///     fn poll(&mut self) -> Poll<u64> {
///         match self.0.next() {
///             Some(ts) => { self.1 = self.1.max(ts.saturating_sub(5)); Poll::Ready(ts) }
///             None => Poll::Done,
///         }
///     }
///     fn watermark(&self) -> u64 { self.1 }
/// }
///
/// let captured = timely::example(|scope| {
///     event_source(scope, "Items", Items(vec![10, 20, 12].into_iter(), 0), 1024).capture()
/// });
/// // 10 arrives at watermark 0, 20 at watermark 5, 12 at watermark 15: 12 is late.
/// assert_eq!(captured.extract(), vec![(0, vec![10]), (5, vec![20]), (15, vec![12])]);
/// ```
pub fn event_source<'scope, F: EventFeed>(
    scope: Scope<'scope, u64>,
    name: &str,
    mut feed: F,
    batch: usize,
) -> StreamVec<'scope, u64, F::Item> {
    source::<_, CapacityContainerBuilder<Vec<F::Item>>, _, _>(scope, name, move |cap, info| {
        let activator = scope.activator_for(info.address);
        let mut cap = Some(cap);
        let mut buffer = Vec::new();
        move |output| {
            let Some(c) = cap.as_mut() else { return };
            let mut wait = None;
            let mut done = false;
            for _ in 0..batch.max(1) {
                match feed.poll() {
                    Poll::Ready(item) => {
                        buffer.push(item);
                        let w = feed.watermark();
                        if w > *c.time() {
                            output.session(c).give_iterator(buffer.drain(..));
                            c.downgrade(&w);
                        }
                    }
                    Poll::Pending(d) => {
                        wait = Some(d);
                        break;
                    }
                    Poll::Done => {
                        done = true;
                        break;
                    }
                }
            }
            if !buffer.is_empty() {
                output.session(c).give_iterator(buffer.drain(..));
            }
            // An idle feed may still advance its watermark (idle partitions, wall clock).
            let w = feed.watermark();
            if w > *c.time() {
                c.downgrade(&w);
            }
            if done {
                cap = None;
            } else if let Some(d) = wait {
                activator.activate_after(d);
            } else {
                activator.activate();
            }
        }
    })
}
