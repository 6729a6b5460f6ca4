//! Counters of a job run and the summary written at its end.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::Serialize;

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
    /// Narrow rows written.
    pub narrow_rows: AtomicU64,
    /// Wide cells written.
    pub wide_cells: AtomicU64,
    /// Readings older than the table TTL when read (invisible once written).
    pub expired: AtomicU64,
    /// Input bytes consumed (compressed bytes for compressed input), for progress.
    pub bytes: AtomicU64,
    /// Registry topic records refused (bad key or value) and sent to the dead-letter output.
    pub registry_rejected: AtomicU64,
}

/// Adds `n` to a counter.
pub fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl Stats {
    /// A snapshot of the counters as the end-of-run summary.
    pub fn summary(&self, elapsed_s: f64) -> Summary {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let read = get(&self.read);
        Summary {
            read,
            ok: get(&self.ok),
            rejected: get(&self.rejected),
            late_dropped: get(&self.late_dropped),
            narrow_rows: get(&self.narrow_rows),
            wide_cells: get(&self.wide_cells),
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
    /// Readings beyond the allowed lateness.
    pub late_dropped: u64,
    /// Narrow rows written.
    pub narrow_rows: u64,
    /// Wide cells written.
    pub wide_cells: u64,
    /// Wall-clock duration of the run, seconds.
    pub elapsed_s: f64,
    /// Lines read per second of wall-clock time.
    pub readings_per_s: f64,
}
