//! Gathers each time's updates until the frontier passes the time, then hands them over at once.

use std::collections::BTreeMap;

use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::Operator;
use timely::dataflow::operators::Capability;
use timely::dataflow::StreamVec;
use timely::ExchangeData;

/// A time's capability and the updates gathered for it so far.
type Stashed<D, R> = (Capability<u64>, Vec<(D, u64, R)>);

/// Turns a stream of timed updates into complete per-time batches.
pub trait StashUntilFrontier<'scope, D, R> {
    /// Exchanges `(data, time, diff)` updates (a differential collection's `inner` stream) by
    /// `route(&data)`, stashes them by their `time` until the input frontier has passed it, then
    /// calls `complete` once with all of that time's updates on this worker and emits what it
    /// returns at that time, times in order.
    ///
    /// A time's updates can come in several containers and activations; only once the frontier
    /// has passed the time are they all there, so e.g. a retraction and an insertion of the same
    /// row meet in one call. Updates with equal `route` meet on one worker, in time order. An
    /// update whose `time` is before its container's time (never from differential) is taken
    /// as at the container's time.
    ///
    /// # Examples
    /// ```
    /// use operators::StashUntilFrontier;
    /// use timely::dataflow::operators::capture::Extract;
    /// use timely::dataflow::operators::{Capture, ToStream};
    ///
    /// let captured = timely::example(|scope| {
    ///     // A row moves from "a" to "b" at time 3, and "c" comes at time 1.
    ///     vec![('a', 3u64, -1isize), ('c', 1, 1), ('b', 3, 1)]
    ///         .to_stream(scope)
    ///         .stash_until_frontier(|_row| 0, |batch: Vec<(char, u64, isize)>| {
    ///             vec![batch.iter().map(|(row, _, diff)| format!("{diff:+}{row}")).collect::<String>()]
    ///         })
    ///         .capture()
    /// });
    /// assert_eq!(captured.extract(), vec![(1, vec!["+1c".to_string()]), (3, vec!["-1a+1b".to_string()])]);
    /// ```
    fn stash_until_frontier<O, H, F, I>(self, route: H, complete: F) -> StreamVec<'scope, u64, O>
    where
        O: 'static,
        H: Fn(&D) -> u64 + 'static,
        F: FnMut(Vec<(D, u64, R)>) -> I + 'static,
        I: IntoIterator<Item = O>;
}

impl<'scope, D, R> StashUntilFrontier<'scope, D, R> for StreamVec<'scope, u64, (D, u64, R)>
where
    D: ExchangeData,
    R: ExchangeData,
{
    fn stash_until_frontier<O, H, F, I>(
        self,
        route: H,
        mut complete: F,
    ) -> StreamVec<'scope, u64, O>
    where
        O: 'static,
        H: Fn(&D) -> u64 + 'static,
        F: FnMut(Vec<(D, u64, R)>) -> I + 'static,
        I: IntoIterator<Item = O>,
    {
        let pact = Exchange::new(move |(data, _, _): &(D, u64, R)| route(data));
        self.unary_frontier::<CapacityContainerBuilder<Vec<O>>, _, _, _>(
            pact,
            "StashUntilFrontier",
            |_cap, _info| {
                let mut stash: BTreeMap<u64, Stashed<D, R>> = BTreeMap::new();
                move |(input, frontier), output| {
                    input.for_each(|cap, data| {
                        let Some(least) = cap.retain_least(0) else {
                            return;
                        };
                        for update in data.drain(..) {
                            let time = update.1.max(*least.time());
                            stash
                                .entry(time)
                                .or_insert_with(|| (least.delayed(&time), Vec::new()))
                                .1
                                .push(update);
                        }
                    });
                    let frontier = frontier.frontier();
                    while let Some(entry) = stash.first_entry() {
                        if frontier.less_equal(entry.key()) {
                            break;
                        }
                        let (cap, updates) = entry.remove();
                        output
                            .session(&cap)
                            .give_iterator(complete(updates).into_iter());
                    }
                }
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use timely::dataflow::operators::capture::Extract;
    use timely::dataflow::operators::{Capture, Input, Probe};
    use timely::dataflow::InputHandle;

    #[test]
    fn a_time_sent_in_several_steps_is_handed_over_once() {
        let out = timely::execute_directly(|worker| {
            let mut input = InputHandle::new();
            let (probe, captured) = worker.dataflow(|scope| {
                let out = scope.input_from(&mut input).stash_until_frontier(
                    |_: &u32| 0,
                    |batch: Vec<(u32, u64, isize)>| {
                        let mut rows: Vec<u32> = batch.iter().map(|u| u.0).collect();
                        rows.sort();
                        vec![rows]
                    },
                );
                let (probe, out) = out.probe();
                (probe, out.capture())
            });
            input.send((1u32, 0u64, 1isize));
            input.flush();
            // Single-threaded, so a few steps surely deliver the first container alone.
            for _ in 0..10 {
                worker.step();
            }
            input.send((2, 0, 1));
            input.advance_to(1);
            input.send((3, 1, 1));
            worker.step_while(|| probe.less_than(&1));
            input.close();
            while worker.step() {}
            captured.extract()
        });
        assert_eq!(out, vec![(0, vec![vec![1, 2]]), (1, vec![vec![3]])]);
    }

    #[test]
    fn updates_go_out_at_their_own_time_in_time_order() {
        let out = timely::example(|scope| {
            use timely::dataflow::operators::ToStream;
            vec![(7u32, 5u64, 1isize), (8, 2, 1), (9, 5, -1)]
                .to_stream(scope)
                .stash_until_frontier(|_| 0, |batch: Vec<(u32, u64, isize)>| batch)
                .capture()
        })
        .extract();
        assert_eq!(
            out,
            vec![(2, vec![(8, 2, 1)]), (5, vec![(7, 5, 1), (9, 5, -1)])]
        );
    }
}
