//! Counters of a job run and the summary written at its end.

use std::sync::atomic::{AtomicU64, Ordering};

/// Most kinds of refusal a job may count (its `source::Refusal::KINDS`).
pub const MAX_REJECT_KINDS: usize = 16;

/// Counters shared by every worker of a job: what every job counts, by the engine's names
/// (records read, decoded and rejected, dead letters by kind, records past a TTL or the allowed
/// lateness, the table writers' batches). A job's own counters live in its crate and reach
/// `/metrics` through its `JobCounters` and the end-of-run report through its `Report`.
#[derive(Debug, Default)]
pub struct Stats {
    /// Input records (lines) read.
    pub read: AtomicU64,
    /// Records decoded.
    pub ok: AtomicU64,
    /// Records rejected to the dead-letter output (by their source, or later by the job).
    pub rejected: AtomicU64,
    /// Records beyond the job's allowed lateness (a job with a window; 0 for the others).
    pub late_dropped: AtomicU64,
    /// Records already older than the tables' TTL when read (invisible once written).
    pub expired: AtomicU64,
    /// Input bytes consumed (compressed bytes for compressed input), for progress.
    pub bytes: AtomicU64,
    /// Rejected records by their kind's index (`source::Refusal::kind_index`), counted when
    /// they reach the dead-letter output ([`Stats::count_rejected`]); their sum equals
    /// `rejected` once the job has drained (sources publish `rejected` in batches, so the two
    /// may differ while it runs).
    pub rejected_by_kind: [AtomicU64; MAX_REJECT_KINDS],
    /// Of those, the ones of kind `future` (`source::FUTURE_KIND`): a clock running ahead.
    pub rejected_future: AtomicU64,
    /// Mutations per flush of a worker's table writer.
    pub sink_batches: BatchSizes,
}

/// Upper bounds of the [`BatchSizes`] buckets: powers of 4, 1 … 65536.
pub const BATCH_SIZE_BOUNDS: [u64; 9] = [1, 4, 16, 64, 256, 1024, 4096, 16_384, 65_536];

/// A histogram of batch sizes with fixed buckets ([`BATCH_SIZE_BOUNDS`] and one above them),
/// updated with relaxed atomics: cheap enough to observe every flush from every worker.
#[derive(Debug, Default)]
pub struct BatchSizes {
    /// Observations per bucket (not cumulative); the last one counts sizes above the bounds.
    buckets: [AtomicU64; BATCH_SIZE_BOUNDS.len() + 1],
    sum: AtomicU64,
}

/// A copy of a [`BatchSizes`] at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchSizesSnapshot {
    /// Observations per bucket of [`BATCH_SIZE_BOUNDS`], then above them (not cumulative).
    pub buckets: Vec<u64>,
    /// Sum of the observed sizes.
    pub sum: u64,
    /// Number of observations.
    pub count: u64,
}

impl BatchSizes {
    /// Records one batch of `size` items.
    pub fn observe(&self, size: u64) {
        let bucket = BATCH_SIZE_BOUNDS.partition_point(|&b| b < size);
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum.fetch_add(size, Ordering::Relaxed);
    }

    /// The counts so far. `count` is the bucket total; an observation racing the snapshot may
    /// be in `count` but not yet in `sum`, or the reverse.
    pub fn snapshot(&self) -> BatchSizesSnapshot {
        let buckets: Vec<u64> = self
            .buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        let sum = self.sum.load(Ordering::Relaxed);
        let count = buckets.iter().sum();
        BatchSizesSnapshot {
            buckets,
            sum,
            count,
        }
    }
}

/// Adds `n` to a counter.
pub fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl Stats {
    /// Counts a rejection that reached the dead-letter output, by its kind's index; `future`
    /// if it is of the `future` kind.
    ///
    /// # Panics
    /// If `kind_index` is [`MAX_REJECT_KINDS`] or more.
    pub fn count_rejected(&self, kind_index: usize, future: bool) {
        add(&self.rejected_by_kind[kind_index], 1);
        if future {
            add(&self.rejected_future, 1);
        }
    }

    /// A snapshot of the counters as the end-of-run summary.
    pub fn summary(&self, elapsed_s: f64) -> Summary {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Summary {
            read: get(&self.read),
            ok: get(&self.ok),
            rejected: get(&self.rejected),
            future: get(&self.rejected_future),
            late_dropped: get(&self.late_dropped),
            expired: get(&self.expired),
            elapsed_s,
        }
    }
}

/// The engine's counters at the end of a run, which each job's report (the driver's `Report`)
/// names and writes as it says (`--stats-json`).
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    /// Input records read.
    pub read: u64,
    /// Records decoded.
    pub ok: u64,
    /// Records rejected to the dead-letter output.
    pub rejected: u64,
    /// Of `rejected`, the records too far ahead of the wall clock or the watermark (kind
    /// `future`).
    pub future: u64,
    /// Records beyond the allowed lateness.
    pub late_dropped: u64,
    /// Records already older than the tables' TTL when read.
    pub expired: u64,
    /// Wall-clock duration of the run, seconds.
    pub elapsed_s: f64,
}

impl Summary {
    /// Records read per second of wall-clock time (0 for no time).
    pub fn read_per_s(&self) -> f64 {
        if self.elapsed_s > 0.0 {
            self.read as f64 / self.elapsed_s
        } else {
            0.0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_sizes_fall_in_their_buckets() {
        let h = BatchSizes::default();
        for size in [0, 1, 2, 4, 5, 4096, 4097, 65_536, 1_000_000] {
            h.observe(size);
        }
        let s = h.snapshot();
        assert_eq!(s.buckets, vec![2, 2, 1, 0, 0, 0, 1, 1, 1, 1]);
        assert_eq!(s.count, 9);
        assert_eq!(s.sum, 1 + 2 + 4 + 5 + 4096 + 4097 + 65_536 + 1_000_000);
    }
}
