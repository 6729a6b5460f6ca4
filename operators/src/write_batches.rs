//! A sink that hands batches to a writer and reports, through its output frontier, what is durable.

use std::time::{Duration, Instant};

use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Pipeline;
use timely::dataflow::operators::generic::Operator;
use timely::dataflow::operators::CapabilitySet;
use timely::dataflow::StreamVec;

/// A callback a [`BatchWriter`] calls, from any thread, when a background flush completes.
pub type Wake = Box<dyn Fn() + Send + Sync>;

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

    /// Starts making every queued item durable, and returns a number that
    /// [`BatchWriter::flushed`] recognises; a writer that sends in the background returns at
    /// once. Flushes complete in the order they start. The default flushes and returns 0.
    ///
    /// # Errors
    /// As [`BatchWriter::write`].
    fn start_flush(&mut self) -> Result<u64, String> {
        self.flush().map(|()| 0)
    }

    /// Whether the flush `ticket` started is durable (default: always, since it waited).
    ///
    /// # Errors
    /// The flush failed.
    fn flushed(&mut self, ticket: u64) -> Result<bool, String> {
        let _ = ticket;
        Ok(true)
    }

    /// Gives the writer a callback to call, from any thread, when a background flush completes
    /// (default: ignored).
    fn on_progress(&mut self, wake: Wake) {
        let _ = wake;
    }
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
        pace: impl Into<FlushPace>,
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
        pace: impl Into<FlushPace>,
        mut on_error: E,
    ) -> StreamVec<'scope, u64, ()>
    where
        W: BatchWriter<D>,
        E: FnMut(String) + 'static,
    {
        let FlushPace { every, min_gap } = pace.into();
        let scope = self.scope();
        self.unary_frontier::<CapacityContainerBuilder<Vec<()>>, _, _, _>(
            Pipeline,
            name,
            move |_cap, info| {
                let activator = scope.activator_for(info.address.clone());
                let wake = scope.worker().sync_activator_for(info.address.to_vec());
                writer.on_progress(Box::new(move || {
                    // Fails only once the worker is gone, when nobody waits any more.
                    let _ = wake.activate();
                }));
                // The times of items written since the last flush started.
                let mut held = CapabilitySet::new();
                // The flush in flight, with the times it makes durable: at most one, so a
                // worker's items are flushed in order and the next flush takes what came
                // meanwhile, however long the store took.
                let mut in_flight: Option<(u64, CapabilitySet<u64>)> = None;
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
                    let since = last_flush.elapsed();
                    let due =
                        since >= every || (passed && (since >= min_gap || frontier.is_empty()));
                    // Retire the flush in flight first, so that a due flush may start now.
                    for _ in 0..2 {
                        if let Some((ticket, _)) = &in_flight {
                            match writer.flushed(*ticket) {
                                // Dropping its capabilities lets the frontier pass its times.
                                Ok(true) => in_flight = None,
                                Ok(false) => {}
                                Err(e) => {
                                    fail(&mut failed, e);
                                    in_flight = None;
                                }
                            }
                        }
                        if dirty && !failed && due && in_flight.is_none() {
                            match writer.start_flush() {
                                Ok(ticket) => {
                                    in_flight = Some((ticket, std::mem::take(&mut held)));
                                }
                                Err(e) => fail(&mut failed, e),
                            }
                            dirty = false;
                            last_flush = Instant::now();
                        } else {
                            break;
                        }
                    }
                    if dirty && !failed {
                        // Hold what is not durable yet, and come back to flush it on time. A
                        // flush that is due waits for the one in flight, whose completion
                        // wakes the operator.
                        if !(due && in_flight.is_some()) {
                            let wait = if passed { min_gap } else { every };
                            activator.activate_after(wait.saturating_sub(last_flush.elapsed()));
                        }
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
    use std::sync::{Arc, Mutex};
    use timely::dataflow::operators::{Input, Probe};
    use timely::dataflow::ProbeHandle;

    /// Counts flushes and the items they made durable.
    struct Count(Arc<AtomicUsize>, Arc<AtomicUsize>, usize);

    impl BatchWriter<u64> for Count {
        fn write(&mut self, batch: Vec<u64>) -> Result<(), String> {
            self.2 += batch.len();
            Ok(())
        }
        fn flush(&mut self) -> Result<(), String> {
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

    /// A writer that sends in the background: its flushes complete when the test says so.
    struct Background {
        queued: Vec<u64>,
        started: Arc<Mutex<Vec<Vec<u64>>>>,
        completed: Arc<AtomicUsize>,
        wake: Arc<Mutex<Option<Wake>>>,
    }

    impl BatchWriter<u64> for Background {
        fn write(&mut self, batch: Vec<u64>) -> Result<(), String> {
            self.queued.extend(batch);
            Ok(())
        }
        fn flush(&mut self) -> Result<(), String> {
            panic!("the operator starts flushes, it never waits for one");
        }
        fn start_flush(&mut self) -> Result<u64, String> {
            let mut started = self.started.lock().unwrap();
            started.push(std::mem::take(&mut self.queued));
            Ok(started.len() as u64)
        }
        fn flushed(&mut self, ticket: u64) -> Result<bool, String> {
            Ok(self.completed.load(Ordering::SeqCst) as u64 >= ticket)
        }
        fn on_progress(&mut self, wake: Wake) {
            *self.wake.lock().unwrap() = Some(wake);
        }
    }

    #[test]
    fn a_background_flush_holds_its_times_until_it_completes_and_one_is_in_flight() {
        let started = Arc::new(Mutex::new(Vec::new()));
        let completed = Arc::new(AtomicUsize::new(0));
        let wake = Arc::new(Mutex::new(None));
        let (s, c, w) = (started.clone(), completed.clone(), wake.clone());
        timely::execute_directly(move |worker| {
            let probe = ProbeHandle::new();
            let writer = Background {
                queued: Vec::new(),
                started: s.clone(),
                completed: c.clone(),
                wake: w.clone(),
            };
            let mut input = worker.dataflow::<u64, _, _>(|scope| {
                let (input, stream) = scope.new_input::<Vec<u64>>();
                stream
                    .write_batches("Background", writer, Duration::ZERO, |e| panic!("{e}"))
                    .probe_with(&probe);
                input
            });
            let steps = |worker: &mut timely::worker::Worker| {
                for _ in 0..50 {
                    worker.step();
                }
            };
            let complete = |n: usize| {
                c.store(n, Ordering::SeqCst);
                (w.lock()
                    .unwrap()
                    .as_ref()
                    .expect("the operator gave a waker"))();
            };
            input.send(1);
            input.advance_to(1);
            steps(worker);
            assert_eq!(*s.lock().unwrap(), vec![vec![1]]);
            assert!(
                probe.less_than(&1),
                "time 0 is not durable before its flush completes"
            );
            // Written while the first flush is in flight: it waits for the next one.
            input.send(2);
            input.advance_to(2);
            steps(worker);
            assert_eq!(s.lock().unwrap().len(), 1, "one flush in flight at a time");
            complete(1);
            steps(worker);
            assert!(!probe.less_than(&1) && probe.less_than(&2));
            assert_eq!(*s.lock().unwrap(), vec![vec![1], vec![2]]);
            complete(2);
            steps(worker);
            assert!(!probe.less_than(&2));
            input.close();
            steps(worker);
            assert!(probe.done());
        });
        assert_eq!(started.lock().unwrap().len(), 2);
        assert_eq!(completed.load(Ordering::SeqCst), 2);
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
