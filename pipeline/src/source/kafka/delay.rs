//! The table writer that measures produce → durable delays into the workers' shared
//! histograms ([`super::histogram`]).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use super::metadata::KafkaShared;
use sinks::table::{Mutation, TableWriter};

/// A [`TableWriter`] that measures produce → durable delays of the rows of the job's record
/// table, one per record read (see [`KafkaFeed::timed_writer`](super::KafkaFeed::timed_writer)).
/// Those rows reach a worker's writer in the order its feed read them, so the n-th row flushed
/// belongs to the n-th record read.
pub struct TimedWriter {
    inner: Box<dyn TableWriter>,
    table: &'static str,
    arrivals: Arc<Mutex<VecDeque<i64>>>,
    shared: Arc<KafkaShared>,
    unflushed: usize,
}

impl TimedWriter {
    /// Wraps `inner`; `arrivals` holds the produce times (ms) of the readings read, in order.
    pub(super) fn new(
        inner: Box<dyn TableWriter>,
        table: &'static str,
        arrivals: Arc<Mutex<VecDeque<i64>>>,
        shared: Arc<KafkaShared>,
    ) -> Self {
        TimedWriter {
            inner,
            table,
            arrivals,
            shared,
            unflushed: 0,
        }
    }
}

impl std::fmt::Debug for TimedWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimedWriter")
            .field("unflushed", &self.unflushed)
            .finish_non_exhaustive()
    }
}

impl TableWriter for TimedWriter {
    fn write(&mut self, mutations: Vec<Mutation>) -> sinks::Result<()> {
        self.unflushed += mutations
            .iter()
            .filter(|m| matches!(m, Mutation::Put { table, .. } if *table == self.table))
            .count();
        let started = std::time::Instant::now();
        let written = self.inner.write(mutations);
        self.shared
            .writes
            .record([started.elapsed().as_millis() as i64]);
        written
    }

    fn flush(&mut self) -> sinks::Result<()> {
        let started = std::time::Instant::now();
        self.inner.flush()?;
        self.shared
            .flushes
            .record([started.elapsed().as_millis() as i64]);
        let now = chrono::Utc::now().timestamp_millis();
        let produced: Vec<i64> = match self.arrivals.lock() {
            Ok(mut q) => {
                let n = self.unflushed.min(q.len());
                q.drain(..n).collect()
            }
            Err(_) => Vec::new(),
        };
        self.unflushed = 0;
        self.shared
            .delays
            .record(produced.into_iter().map(|p| now - p));
        Ok(())
    }
}
