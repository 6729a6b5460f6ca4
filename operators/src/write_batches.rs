//! A sink that hands batches to a writer and reports, through its output frontier, what is durable.

use std::time::{Duration, Instant};

use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Pipeline;
use timely::dataflow::operators::generic::Operator;
use timely::dataflow::operators::CapabilitySet;
use timely::dataflow::StreamVec;

/// The backend side of [`WriteBatches::write_batches`].
pub trait BatchWriter<D>: 'static {
    /// Queues a batch; may write part of it.
    ///
    /// # Errors
    /// A failure that retrying did not cure. The operator reports it and stops writing.
    fn write(&mut self, batch: Vec<D>) -> Result<(), String>;

    /// Makes every queued item durable.
    ///
    /// # Errors
    /// As [`BatchWriter::write`].
    fn flush(&mut self) -> Result<(), String>;
}

/// Writes a stream through a [`BatchWriter`].
pub trait WriteBatches<'scope, D> {
    /// Writes every batch of the stream with `writer` (one writer per worker, no exchange).
    ///
    /// The writer is flushed when the input frontier passes the times it holds, and at least
    /// every `flush_every` while data is pending. The returned stream carries no data; its
    /// frontier passes time `t` only when every item at a time before `t` has been flushed,
    /// so a probe on it tells what is durable (e.g. which Kafka offsets may be committed).
    ///
    /// After the first error, `on_error` is called once with the message and later input is
    /// discarded (the job is expected to stop its sources).
    ///
    /// # Examples
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use operators::{BatchWriter, WriteBatches};
    /// use timely::dataflow::operators::ToStream;
    ///
    /// struct Collect(Arc<Mutex<Vec<u32>>>, Vec<u32>);
    /// impl BatchWriter<u32> for Collect {
    ///     fn write(&mut self, batch: Vec<u32>) -> Result<(), String> { self.1.extend(batch); Ok(()) }
    ///     fn flush(&mut self) -> Result<(), String> { self.0.lock().unwrap().append(&mut self.1); Ok(()) }
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
        flush_every: Duration,
        on_error: E,
    ) -> StreamVec<'scope, u64, ()>
    where
        W: BatchWriter<D>,
        E: FnMut(String) + 'static;
}

impl<'scope, D: 'static> WriteBatches<'scope, D> for StreamVec<'scope, u64, D> {
    fn write_batches<W, E>(
        self,
        name: &str,
        mut writer: W,
        flush_every: Duration,
        mut on_error: E,
    ) -> StreamVec<'scope, u64, ()>
    where
        W: BatchWriter<D>,
        E: FnMut(String) + 'static,
    {
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
                let mut fail = move |failed: &mut bool, e: String| {
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
                    if dirty && !failed && (passed || last_flush.elapsed() >= flush_every) {
                        if let Err(e) = writer.flush() {
                            fail(&mut failed, e);
                        }
                        dirty = false;
                        last_flush = Instant::now();
                    }
                    if dirty && !failed {
                        // Hold what is not durable yet; come back to flush it on time.
                        activator.activate_after(flush_every);
                    } else {
                        crate::downgrade_to_frontier(&mut held, &frontier);
                    }
                }
            },
        )
    }
}
