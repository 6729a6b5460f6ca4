//! A sink that hands batches to a writer and reports, through its output frontier, what is durable.

use std::time::{Duration, Instant};

use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Pipeline;
use timely::dataflow::operators::generic::Operator;
use timely::dataflow::operators::CapabilitySet;
use timely::dataflow::StreamVec;

/// The backend side of [`WriteBatches::write_batches`].
pub trait BatchWriter<D>: 'static {
    /// The writer's own error, handed whole to the sink's `on_error` (a backend's typed error
    /// keeps what it knows, such as whether it was retriable, up to the job).
    type Error: std::fmt::Display;

    /// Queues a batch; may write part of it.
    ///
    /// # Errors
    /// A failure that retrying did not cure. The operator reports it and stops writing.
    fn write(&mut self, batch: Vec<D>) -> Result<(), Self::Error>;

    /// Makes every queued item durable.
    ///
    /// # Errors
    /// As [`BatchWriter::write`].
    fn flush(&mut self) -> Result<(), Self::Error>;
}

/// When a [`WriteBatches`] sink flushes its writer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlushPace {
    /// Longest time written data may wait in the writer while data is pending.
    pub every: Duration,
    /// Shortest time between two flushes caused by the input frontier passing; the input's end
    /// always flushes at once. Zero flushes as soon as the frontier passes (least latency);
    /// a replay racing through event time sets it so that each flush writes a large batch.
    pub min_gap: Duration,
}

impl From<Duration> for FlushPace {
    /// Flushes as soon as the frontier passes, and at least every `every`.
    fn from(every: Duration) -> Self {
        FlushPace {
            every,
            min_gap: Duration::ZERO,
        }
    }
}

/// Writes a stream through a [`BatchWriter`].
pub trait WriteBatches<'scope, D> {
    /// Writes every batch of the stream with `writer` (one writer per worker, no exchange).
    ///
    /// The writer is flushed when the input frontier passes the times it holds (at most once
    /// per `pace.min_gap`, and at once when the input ends), and at least every `pace.every`
    /// while data is pending (a `Duration` sets `every` alone). The returned stream carries no data; its
    /// frontier passes time `t` only when every item at a time before `t` has been flushed,
    /// so a probe on it tells what is durable (e.g. which Kafka offsets may be committed).
    ///
    /// After the first error, `on_error` is called once with the writer's error and later input
    /// is discarded (the job is expected to stop its sources).
    ///
    /// # Examples
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use operators::{BatchWriter, WriteBatches};
    /// use timely::dataflow::operators::ToStream;
    ///
    /// struct Collect(Arc<Mutex<Vec<u32>>>, Vec<u32>);
    /// impl BatchWriter<u32> for Collect {
    ///     type Error = std::convert::Infallible;
    ///     fn write(&mut self, batch: Vec<u32>) -> Result<(), Self::Error> { self.1.extend(batch); Ok(()) }
    ///     fn flush(&mut self) -> Result<(), Self::Error> { self.0.lock().unwrap().append(&mut self.1); Ok(()) }
    /// }
    /// let stored = Arc::new(Mutex::new(Vec::new()));
    /// let out = stored.clone();
    /// timely::example(move |scope| {
    ///     (0..5u32).to_stream(scope).write_batches("Store", Collect(out, Vec::new()),
    ///         std::time::Duration::from_secs(1), |e| panic!("{e}"));
    /// });
    /// assert_eq!(*stored.lock().unwrap(), vec![0, 1, 2, 3, 4]);
    /// ```
    fn write_batches<W, E>(
        self,
        name: &str,
        writer: W,
        pace: impl Into<FlushPace>,
        on_error: E,
    ) -> StreamVec<'scope, u64, ()>
    where
        W: BatchWriter<D>,
        E: FnMut(W::Error) + 'static;
}

impl<'scope, D: 'static> WriteBatches<'scope, D> for StreamVec<'scope, u64, D> {
    fn write_batches<W, E>(
        self,
        name: &str,
        mut writer: W,
        pace: impl Into<FlushPace>,
        mut on_error: E,
    ) -> StreamVec<'scope, u64, ()>
    where
        W: BatchWriter<D>,
        E: FnMut(W::Error) + 'static,
    {
        let FlushPace { every, min_gap } = pace.into();
        let scope = self.scope();
        self.unary_frontier::<CapacityContainerBuilder<Vec<()>>, _, _, _>(
            Pipeline,
            name,
            move |_cap, info| {
                let activator = scope.activator_for(info.address);
                let mut held = CapabilitySet::new();
                let mut dirty = false;
                let mut failed = false;
                let mut last_flush = Instant::now();
                let mut fail = move |failed: &mut bool, e: W::Error| {
                    if !*failed {
                        *failed = true;
                        on_error(e);
                    }
                };
                move |(input, frontier), _output| {
                    input.for_each(|cap, data| {
                        if let Some(c) = cap.retain_least(0) {
                            held.insert(c);
                        }
                        let batch = std::mem::take(data);
                        if !failed {
                            dirty = true;
                            if let Err(e) = writer.write(batch) {
                                fail(&mut failed, e);
                            }
                        }
                    });
                    let frontier = frontier.frontier();
                    let passed = held.iter().any(|c| !frontier.less_equal(c.time()));
                    let since = last_flush.elapsed();
                    let due =
                        since >= every || (passed && (since >= min_gap || frontier.is_empty()));
                    if dirty && !failed && due {
                        if let Err(e) = writer.flush() {
                            fail(&mut failed, e);
                        }
                        dirty = false;
                        last_flush = Instant::now();
                    }
                    if dirty && !failed {
                        // Hold what is not durable yet; come back to flush it on time.
                        let wait = if passed { min_gap } else { every };
                        activator.activate_after(wait.saturating_sub(last_flush.elapsed()));
                    } else {
                        crate::downgrade_to_frontier(&mut held, &frontier);
                    }
                }
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use timely::dataflow::operators::{Input, Probe};
    use timely::dataflow::ProbeHandle;

    /// Counts flushes and the items they made durable.
    struct Count(Arc<AtomicUsize>, Arc<AtomicUsize>, usize);

    impl BatchWriter<u64> for Count {
        type Error = std::convert::Infallible;
        fn write(&mut self, batch: Vec<u64>) -> Result<(), Self::Error> {
            self.2 += batch.len();
            Ok(())
        }
        fn flush(&mut self) -> Result<(), Self::Error> {
            self.0.fetch_add(1, Ordering::SeqCst);
            self.1
                .fetch_add(std::mem::take(&mut self.2), Ordering::SeqCst);
            Ok(())
        }
    }

    /// Sends one item at each of 50 times, stepping the worker after each, and returns the
    /// flushes made and the items they flushed once the input has ended.
    fn flushes_with(min_gap: Duration) -> (usize, usize) {
        let (flushes, flushed) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (f, d) = (flushes.clone(), flushed.clone());
        timely::execute_directly(move |worker| {
            let probe = ProbeHandle::new();
            let mut input = worker.dataflow::<u64, _, _>(|scope| {
                let (input, stream) = scope.new_input::<Vec<u64>>();
                let pace = FlushPace {
                    every: Duration::from_secs(3600),
                    min_gap,
                };
                stream
                    .write_batches("Count", Count(f, d, 0), pace, |e| panic!("{e}"))
                    .probe_with(&probe);
                input
            });
            for t in 0..50u64 {
                input.send(t);
                input.advance_to(t + 1);
                while probe.less_than(&(t + 1)) && min_gap.is_zero() {
                    worker.step();
                }
                worker.step();
            }
        });
        (
            flushes.load(Ordering::SeqCst),
            flushed.load(Ordering::SeqCst),
        )
    }

    #[test]
    fn a_min_gap_coalesces_flushes_and_the_end_flushes_everything() {
        // Without a gap, each time the frontier passes is a flush.
        assert_eq!(flushes_with(Duration::ZERO), (50, 50));
        // With a gap longer than the run, the frontier's progress flushes nothing and the
        // input's end flushes every item at once.
        assert_eq!(flushes_with(Duration::from_secs(3600)), (1, 50));
    }
}
