//! Counters of a job run and the summary written at its end.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

/// Most kinds of refusal a job may count (its `source::Refusal::KINDS`).
pub const MAX_REJECT_KINDS: usize = 16;

/// Counters shared by every worker of a job.
#[derive(Debug, Default)]
pub struct Stats {
    /// Input lines read.
    pub read: AtomicU64,
    /// Lines decoded into readings.
    pub ok: AtomicU64,
    /// Lines rejected to the dead-letter output.
    pub rejected: AtomicU64,
    /// Readings beyond the allowed lateness: narrow table and late output only.
    pub late_dropped: AtomicU64,
    /// Readings of a second their hour already had (a resend or a correction): the narrow table
    /// keeps the last, and the hour's wide row is marked so that reads take the narrow table.
    pub repeated: AtomicU64,
    /// Narrow rows written.
    pub narrow_rows: AtomicU64,
    /// Wide cells written.
    pub wide_cells: AtomicU64,
    /// Room view rows written (puts and deletes of `ts_room_latest`).
    pub room_rows: AtomicU64,
    /// Readings older than the table TTL when read (invisible once written).
    pub expired: AtomicU64,
    /// Input bytes consumed (compressed bytes for compressed input), for progress.
    pub bytes: AtomicU64,
    /// Registry topic records refused (bad key or value) and sent to the dead-letter output.
    pub registry_rejected: AtomicU64,
    /// Rejected lines by their kind's index (`source::Refusal::kind_index`), counted when they
    /// reach the dead-letter output ([`Stats::count_rejected`]); their sum equals `rejected`
    /// once the job has drained (sources publish `rejected` in batches, so the two may differ
    /// while it runs).
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
        let read = get(&self.read);
        Summary {
            read,
            ok: get(&self.ok),
            rejected: get(&self.rejected),
            future: get(&self.rejected_future),
            late_dropped: get(&self.late_dropped),
            repeated: get(&self.repeated),
            narrow_rows: get(&self.narrow_rows),
            wide_cells: get(&self.wide_cells),
            room_rows: get(&self.room_rows),
            elapsed_s,
            readings_per_s: if elapsed_s > 0.0 {
                read as f64 / elapsed_s
            } else {
                0.0
            },
        }
    }
}

/// The summary of a run; `--stats-json` writes exactly these keys.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Input lines read.
    pub read: u64,
    /// Lines decoded into readings.
    pub ok: u64,
    /// Lines rejected to the dead-letter output.
    pub rejected: u64,
    /// Of `rejected`, the readings too far ahead of the wall clock or the watermark (kind
    /// `future`): a device clock running ahead.
    pub future: u64,
    /// Readings beyond the allowed lateness.
    pub late_dropped: u64,
    /// Readings of a second their hour already had (a resend or a correction; the last wins).
    pub repeated: u64,
    /// Narrow rows written.
    pub narrow_rows: u64,
    /// Wide cells written.
    pub wide_cells: u64,
    /// Room view rows written (puts and deletes of `ts_room_latest`).
    pub room_rows: u64,
    /// Wall-clock duration of the run, seconds.
    pub elapsed_s: f64,
    /// Lines read per second of wall-clock time.
    pub readings_per_s: f64,
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
