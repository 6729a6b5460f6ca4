//! A feed's counts of what it read, kept locally and published to the job's [`Stats`] in
//! batches, so that a reading costs no atomic operation.

use crate::stats::{add, Stats};

/// Records read, accepted, rejected and expired since the last [`Counts::publish`].
#[derive(Debug)]
pub(crate) struct Counts {
    pub(crate) read: u64,
    ok: u64,
    rejected: u64,
    expired: u64,
    /// Readings before this (epoch seconds) would already be expired by the TTL.
    expired_before: i64,
}

impl Counts {
    /// Unpublished counts; a reading older than `ttl_secs` before now counts as expired.
    pub(crate) fn new(ttl_secs: u64) -> Self {
        let ttl = i64::try_from(ttl_secs).unwrap_or(i64::MAX);
        Counts {
            read: 0,
            ok: 0,
            rejected: 0,
            expired: 0,
            expired_before: (crate::time::now_ms() / 1000).saturating_sub(ttl),
        }
    }

    /// Counts a reading accepted at event time `ts`.
    pub(crate) fn accepted(&mut self, ts: i64) {
        self.ok += 1;
        if ts < self.expired_before {
            self.expired += 1;
        }
    }

    /// Counts a record rejected.
    pub(crate) fn rejected(&mut self) {
        self.rejected += 1;
    }

    /// Adds the counts to `stats` and starts again from zero.
    pub(crate) fn publish(&mut self, stats: &Stats) {
        for (counter, n) in [
            (&stats.read, &mut self.read),
            (&stats.ok, &mut self.ok),
            (&stats.rejected, &mut self.rejected),
            (&stats.expired, &mut self.expired),
        ] {
            add(counter, std::mem::take(n));
        }
    }
}
