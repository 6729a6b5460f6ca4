//! The table writer that measures produce → durable delays into the workers' shared
//! histograms ([`super::histogram`]).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use super::metadata::KafkaShared;
use sinks::table::{KeyBatch, Mutation, TableWriter};

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

impl TimedWriter {
    /// Records how long a write call that began at `started` took.
    fn record_write(&self, started: std::time::Instant) {
        self.shared
            .writes
            .record([started.elapsed().as_millis() as i64]);
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
        self.record_write(started);
        written
    }

    /// Forwarded as a batch, so the backend's fast path stays (the default would make a
    /// mutation per entry); its puts count as rows when they are of the record table.
    fn write_keys(&mut self, keys: &KeyBatch) -> sinks::Result<()> {
        if keys.table() == self.table {
            self.unflushed += keys.iter().filter(|(_, _, put)| *put).count();
        }
        let started = std::time::Instant::now();
        let written = self.inner.write_keys(keys);
        self.record_write(started);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// What reached the wrapped writer: mutation batches and key batches, in order.
    #[derive(Default)]
    struct Seen {
        writes: usize,
        keys: Vec<usize>,
    }

    struct Recording(Arc<Mutex<Seen>>);

    impl TableWriter for Recording {
        fn write(&mut self, _: Vec<Mutation>) -> sinks::Result<()> {
            self.0.lock().unwrap().writes += 1;
            Ok(())
        }
        fn flush(&mut self) -> sinks::Result<()> {
            Ok(())
        }
        fn write_keys(&mut self, keys: &KeyBatch) -> sinks::Result<()> {
            self.0.lock().unwrap().keys.push(keys.len());
            Ok(())
        }
    }

    /// A key batch reaches the wrapped writer as one (its fast path), not as mutations; its
    /// puts into the record table each take a produce time at the flush, as rows do.
    #[test]
    fn key_batches_pass_through_as_batches_and_count_the_record_tables_puts() {
        let seen = Arc::new(Mutex::new(Seen::default()));
        let arrivals = Arc::new(Mutex::new(VecDeque::from([1, 2, 3, 4])));
        let shared = Arc::new(KafkaShared::new(1, 1));
        let mut w = TimedWriter::new(
            Box::new(Recording(seen.clone())),
            "records",
            arrivals.clone(),
            shared,
        );
        let mut other = KeyBatch::new("index", "i", b"", b"");
        other.put(b"a", 1);
        w.write_keys(&other).unwrap();
        let mut records = KeyBatch::new("records", "f", b"q", b"v");
        records.put(b"r1", 1);
        records.delete(b"r0", 1);
        records.put(b"r2", 2);
        w.write_keys(&records).unwrap();
        assert_eq!(seen.lock().unwrap().keys, [1, 3]);
        assert_eq!(seen.lock().unwrap().writes, 0);
        w.flush().unwrap();
        // Two puts of the record table: two produce times taken, two left.
        assert_eq!(arrivals.lock().unwrap().len(), 2);
    }
}
