//! A source that stamps each item with the watermark current when the item arrived.

use std::collections::VecDeque;
use std::time::Duration;

use timely::container::CapacityContainerBuilder;
use timely::dataflow::operators::generic::operator::source;
use timely::dataflow::{ProbeHandle, Scope, StreamVec};

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
    feed: F,
    batch: usize,
) -> StreamVec<'scope, u64, F::Item> {
    bounded_event_source(scope, name, feed, batch, None)
}

/// How far a source may run ahead of the operators that take its items, in items: see
/// [`bounded_event_source`].
#[derive(Debug, Clone)]
pub struct InFlight {
    /// A probe on the stream that takes the source's items (after their exchange between
    /// workers): an item emitted at time `t` is in flight until the probe's frontier passes `t`.
    pub probe: ProbeHandle<u64>,
    /// Items this source may have in flight at times before its current one.
    pub max_items: usize,
}

/// [`event_source`] that stops polling its feed while `in_flight` counts more than
/// `max_items` of its items not yet taken at times before its current one.
///
/// Timely's channels between workers are unbounded: a source whose items go to a worker that
/// is stalled (a store that halts writes while it compacts, a replay of stdin that one worker
/// reads for all) would otherwise buffer them without limit. Items at the source's current
/// time are not counted, since the probe cannot pass that time before the source moves on: a
/// feed whose watermark stands still is not held back (and not bounded).
pub fn bounded_event_source<'scope, F: EventFeed>(
    scope: Scope<'scope, u64>,
    name: &str,
    mut feed: F,
    batch: usize,
    in_flight: Option<InFlight>,
) -> StreamVec<'scope, u64, F::Item> {
    source::<_, CapacityContainerBuilder<Vec<F::Item>>, _, _>(scope, name, move |cap, info| {
        let activator = scope.activator_for(info.address);
        let mut cap = Some(cap);
        let mut buffer = Vec::new();
        let mut sent = Sent::default();
        move |output| {
            let Some(c) = cap.as_mut() else { return };
            if let Some(bound) = &in_flight {
                bound
                    .probe
                    .with_frontier(|f| sent.passed(f.first().copied()));
                if sent.before(*c.time()) > bound.max_items {
                    activator.activate_after(IN_FLIGHT_WAIT);
                    return;
                }
            }
            let counting = in_flight.is_some();
            let mut wait = None;
            let mut done = false;
            for _ in 0..batch.max(1) {
                match feed.poll() {
                    Poll::Ready(item) => {
                        buffer.push(item);
                        let w = feed.watermark();
                        if w > *c.time() {
                            if counting {
                                sent.given(*c.time(), buffer.len());
                            }
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
                if counting {
                    sent.given(*c.time(), buffer.len());
                }
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

/// What a bounded source has given and the probe has not passed: items per time, oldest first.
#[derive(Default)]
struct Sent {
    times: VecDeque<(u64, usize)>,
    total: usize,
}

impl Sent {
    fn given(&mut self, time: u64, items: usize) {
        match self.times.back_mut() {
            Some((t, n)) if *t == time => *n += items,
            _ => self.times.push_back((time, items)),
        }
        self.total += items;
    }

    /// Forgets the times before `frontier` (`None`: the probe saw everything).
    fn passed(&mut self, frontier: Option<u64>) {
        while let Some(&(t, n)) = self.times.front() {
            if frontier.is_some_and(|f| t >= f) {
                break;
            }
            self.times.pop_front();
            self.total -= n;
        }
    }

    /// Items in flight at times before `now`.
    fn before(&self, now: u64) -> usize {
        match self.times.back() {
            Some(&(t, n)) if t >= now => self.total - n,
            _ => self.total,
        }
    }
}

/// How long a source that has too many items in flight waits before it looks again.
const IN_FLIGHT_WAIT: Duration = Duration::from_millis(1);

#[cfg(test)]
mod tests {
    use std::cell::Cell;
    use std::rc::Rc;

    use timely::dataflow::channels::pact::Pipeline;
    use timely::dataflow::operators::generic::operator::Operator;
    use timely::dataflow::operators::{Inspect, Probe};

    use super::*;

    /// Items `0..n`, each its own event time; the watermark is the newest item.
    struct Counter(u64, u64);

    impl EventFeed for Counter {
        type Item = u64;
        fn poll(&mut self) -> Poll<u64> {
            if self.0 == self.1 {
                return Poll::Done;
            }
            self.0 += 1;
            Poll::Ready(self.0 - 1)
        }
        fn watermark(&self) -> u64 {
            self.0
        }
    }

    /// Runs a bounded source of 10,000 items into a gate that takes nothing while it is shut
    /// (as a stalled worker), for 200 steps, then opens it; returns how many items the source
    /// had given while the gate was shut, and every item that passed the gate.
    fn gated(max_items: usize, batch: usize) -> (usize, Vec<u64>) {
        timely::execute_directly(move |worker| {
            let open = Rc::new(Cell::new(false));
            let given = Rc::new(Cell::new(0usize));
            let passed = Rc::new(std::cell::RefCell::new(Vec::new()));
            let probe = ProbeHandle::new();
            let (gate, seen, counted) = (open.clone(), passed.clone(), given.clone());
            worker.dataflow(|scope| {
                let bound = InFlight {
                    probe: probe.clone(),
                    max_items,
                };
                bounded_event_source(scope, "Counter", Counter(0, 10_000), batch, Some(bound))
                    .inspect(move |_| counted.set(counted.get() + 1))
                    .unary(Pipeline, "Gate", move |_, info| {
                        let activator = scope.activator_for(info.address);
                        move |input, output| {
                            if gate.get() {
                                input.for_each(|cap, data| {
                                    seen.borrow_mut().extend(data.iter().copied());
                                    output.session(&cap).give_container(data);
                                });
                            } else {
                                // Scheduled again, as an operator that is busy elsewhere.
                                activator.activate();
                            }
                        }
                    })
                    .probe_with(&probe);
            });
            for _ in 0..200 {
                worker.step();
            }
            let while_shut = given.get();
            open.set(true);
            while worker.step() {}
            let all = passed.borrow().clone();
            (while_shut, all)
        })
    }

    #[test]
    fn a_bounded_source_stops_while_its_items_are_not_taken_and_loses_none() {
        let (while_shut, all) = gated(100, 16);
        // At most the bound, plus one activation's batch, plus the items at its current time.
        assert!(
            (100..=100 + 16 + 1).contains(&while_shut),
            "{while_shut} items given while the gate was shut"
        );
        assert_eq!(all, (0..10_000).collect::<Vec<_>>());
    }

    #[test]
    fn an_unbounded_source_gives_everything_whatever_is_taken() {
        // One batch of 16 per step, for 200 steps.
        let (while_shut, all) = gated(usize::MAX, 16);
        assert!(
            while_shut >= 3_000,
            "{while_shut} items given while the gate was shut"
        );
        assert_eq!(all, (0..10_000).collect::<Vec<_>>());
    }
}
