//! `map`, `flat_map`, `ok_err` and `exchange` that pass containers on in the order they arrive.
//!
//! timely's own (0.32) take an activation's containers through `for_each_stamp`, which sorts
//! them by timestamp with an unstable sort, so two containers of one activation can change
//! places whether their times differ or not. Timely promises no order within a time, and most
//! dataflows need none. Hourglass's writes do: a window's panes of one key each carry the key's
//! summary so far, and the store keeps the last one written (all cells of a wide row share one
//! timestamp, so HBase's rule is "the later put wins"); a device's resent second is kept as the
//! later write. A restarted Kafka job once wrote an hour's summary from 225 of its 360 readings
//! because timely's `ok_err` put the panes of n = 208..225 after those of n = 226..360.
//!
//! These operators use `for_each`, which hands containers over in channel order. Pipeline
//! channels are FIFO, and so is each sender's part of an Exchange channel, so a chain of them
//! from one operator to a writer keeps that operator's order.

use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::{Exchange, Pipeline};
use timely::dataflow::operators::generic::builder_rc::OperatorBuilder;
use timely::dataflow::operators::generic::{Operator, OutputBuilder};
use timely::dataflow::StreamVec;
use timely::progress::operate::FrontierInterest;
use timely::progress::Timestamp;
use timely::ExchangeData;

/// Per-record operators that keep arrival order (see the module docs).
pub trait InOrder<'scope, T: Timestamp, D> {
    /// `logic` applied to each record, in arrival order.
    fn map_in_order<D2, L>(self, logic: L) -> StreamVec<'scope, T, D2>
    where
        D2: 'static,
        L: FnMut(D) -> D2 + 'static;

    /// What `logic` makes of each record, in arrival order.
    fn flat_map_in_order<I, L>(self, logic: L) -> StreamVec<'scope, T, I::Item>
    where
        I: IntoIterator,
        I::Item: 'static,
        L: FnMut(D) -> I + 'static;

    /// Each record's `Ok` to the first stream and `Err` to the second, each in arrival order.
    #[allow(clippy::type_complexity)]
    fn ok_err_in_order<D1, D2, L>(
        self,
        logic: L,
    ) -> (StreamVec<'scope, T, D1>, StreamVec<'scope, T, D2>)
    where
        D1: 'static,
        D2: 'static,
        L: FnMut(D) -> Result<D1, D2> + 'static;

    /// Records sent to worker `route(record) % peers`, in the order each worker sent them.
    fn exchange_in_order<F>(self, route: F) -> StreamVec<'scope, T, D>
    where
        D: ExchangeData,
        F: Fn(&D) -> u64 + 'static;
}

impl<'scope, T: Timestamp, D: 'static> InOrder<'scope, T, D> for StreamVec<'scope, T, D> {
    fn map_in_order<D2, L>(self, mut logic: L) -> StreamVec<'scope, T, D2>
    where
        D2: 'static,
        L: FnMut(D) -> D2 + 'static,
    {
        self.unary::<CapacityContainerBuilder<Vec<D2>>, _, _, _>(Pipeline, "MapInOrder", |_, _| {
            move |input, output| {
                input.for_each(|cap, data| {
                    output
                        .session(&cap)
                        .give_iterator(data.drain(..).map(&mut logic));
                });
            }
        })
    }

    fn flat_map_in_order<I, L>(self, mut logic: L) -> StreamVec<'scope, T, I::Item>
    where
        I: IntoIterator,
        I::Item: 'static,
        L: FnMut(D) -> I + 'static,
    {
        self.unary::<CapacityContainerBuilder<Vec<I::Item>>, _, _, _>(
            Pipeline,
            "FlatMapInOrder",
            |_, _| {
                move |input, output| {
                    input.for_each(|cap, data| {
                        output
                            .session(&cap)
                            .give_iterator(data.drain(..).flat_map(&mut logic));
                    });
                }
            },
        )
    }

    fn ok_err_in_order<D1, D2, L>(
        self,
        mut logic: L,
    ) -> (StreamVec<'scope, T, D1>, StreamVec<'scope, T, D2>)
    where
        D1: 'static,
        D2: 'static,
        L: FnMut(D) -> Result<D1, D2> + 'static,
    {
        let mut builder = OperatorBuilder::new("OkErrInOrder".to_owned(), self.scope());
        let mut input = builder.new_input(self, Pipeline);
        builder.set_notify_for(0, FrontierInterest::Never);
        let (ok, ok_stream) = builder.new_output();
        let (err, err_stream) = builder.new_output();
        let mut ok = OutputBuilder::<_, CapacityContainerBuilder<Vec<D1>>>::from(ok);
        let mut err = OutputBuilder::<_, CapacityContainerBuilder<Vec<D2>>>::from(err);
        builder.build(move |_| {
            move |_frontiers| {
                let mut ok = ok.activate();
                let mut err = err.activate();
                input.for_each(|cap, data| {
                    let mut ok = ok.session(&cap);
                    let mut err = err.session(&cap);
                    for record in data.drain(..) {
                        match logic(record) {
                            Ok(record) => ok.give(record),
                            Err(record) => err.give(record),
                        }
                    }
                });
            }
        });
        (ok_stream, err_stream)
    }

    fn exchange_in_order<F>(self, route: F) -> StreamVec<'scope, T, D>
    where
        D: ExchangeData,
        F: Fn(&D) -> u64 + 'static,
    {
        self.unary::<CapacityContainerBuilder<Vec<D>>, _, _, _>(
            Exchange::new(move |record: &D| route(record)),
            "ExchangeInOrder",
            |_, _| {
                move |input, output| {
                    input.for_each(|cap, data| {
                        output.session(&cap).give_container(data);
                    });
                }
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use timely::dataflow::operators::generic::operator::source;
    use timely::dataflow::operators::vec::Map;
    use timely::dataflow::operators::{Capture, OkErr};

    /// A source that, in its one activation, sends `batches` in order, each at its time, as a
    /// window sends a late item's pane at its arrival time and then an older firing's panes at
    /// the time it holds.
    fn sent_out_of_time_order<'scope>(
        scope: timely::dataflow::Scope<'scope, u64>,
        batches: Vec<(u64, Vec<u32>)>,
    ) -> StreamVec<'scope, u64, u32> {
        source(scope, "OutOfTimeOrder", move |cap, _info| {
            let mut cap = Some(cap);
            let mut batches = Some(batches);
            move |output| {
                if let (Some(c), Some(batches)) = (cap.take(), batches.take()) {
                    for (time, batch) in batches {
                        let at = c.delayed(&time);
                        output.session(&at).give_iterator(batch.into_iter());
                    }
                }
            }
        })
    }

    /// The records in the order the operator emitted them, whatever their times.
    fn arrival_order(f: fn(StreamVec<'_, u64, u32>) -> StreamVec<'_, u64, u32>) -> Vec<u32> {
        use timely::dataflow::operators::capture::Event;
        let captured = timely::example(move |scope| {
            let mut batches = vec![(5, vec![1, 2]), (3, vec![3, 4])];
            batches.extend((0..64).map(|i| (7, vec![100 + i])));
            f(sent_out_of_time_order(scope, batches)).capture()
        });
        captured
            .try_iter()
            .flat_map(|event| match event {
                Event::Messages(_, data) => data,
                Event::Progress(_) => Vec::new(),
            })
            .collect()
    }

    fn sent() -> Vec<u32> {
        let mut all = vec![1, 2, 3, 4];
        all.extend(100..164);
        all
    }

    #[test]
    fn each_keeps_the_order_records_were_sent_in() {
        assert_eq!(arrival_order(|s| s.map_in_order(|x| x)), sent());
        assert_eq!(arrival_order(|s| s.flat_map_in_order(|x| [x])), sent());
        assert_eq!(
            arrival_order(|s| s.ok_err_in_order(Ok::<u32, u32>).0),
            sent()
        );
        assert_eq!(arrival_order(|s| s.exchange_in_order(|_| 0)), sent());
    }

    /// The reason these exist: timely's own reorder an activation's containers by time.
    #[test]
    fn timelys_own_reorder_them() {
        assert_ne!(arrival_order(|s| s.map(|x| x)), sent());
        assert_ne!(
            arrival_order(|s| s.ok_err::<Vec<_>, _, Vec<_>, _, _>(Ok::<u32, u32>).0),
            sent()
        );
    }
}
