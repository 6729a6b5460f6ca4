//! The profile job's own counters, beside the engine's [`Stats`], and its end-of-run report.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use pipeline::driver::Report;
use pipeline::job_metrics::JobCounters;
use pipeline::stats::{Stats, Summary};
use serde::Serialize;

use crate::event::Reason;

/// What the profile job counts that the engine's [`Stats`] does not: its merge's flushes and
/// what they wrote. Shared by the workers; relaxed atomics, added once per flush.
#[derive(Debug, Default)]
pub struct ProfileStats {
    /// Flushes of the per-user merge (all workers).
    pub flushes: AtomicU64,
    /// Users written: one put of `user_profile_tag` each, per flush.
    pub users_flushed: AtomicU64,
    /// Tag cells of those puts.
    pub tags_written: AtomicU64,
    /// Rows of `user_tag_history` written (one per change).
    pub history_rows: AtomicU64,
    /// Tags refused at a flush (unknown, offline, gray, wrong type, too large), each a dead
    /// letter; also in the engine's `rejected` and `rejected_by_kind`.
    pub tags_rejected: AtomicU64,
    /// Short-term values written to Redis (or the embedded fallback).
    pub short_term_written: AtomicU64,
    /// Short-term values not written: already expired at event time plus TTL.
    pub short_term_expired: AtomicU64,
    /// Short-term batches written again after a retriable error.
    pub short_term_retries: AtomicU64,
}

/// A snapshot of [`ProfileStats`], as `--stats-json` writes it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ProfileCounters {
    /// Merge flushes.
    pub flushes: u64,
    /// Users written (profile puts).
    pub users_flushed: u64,
    /// Tag cells written to `user_profile_tag`.
    pub tags_written: u64,
    /// Rows written to `user_tag_history`.
    pub history_rows: u64,
    /// Lines rejected whole (`rejected` − `tags_rejected`).
    pub events_rejected: u64,
    /// Tags refused at a flush.
    pub tags_rejected: u64,
    /// Short-term values written.
    pub short_term_written: u64,
    /// Short-term values expired before they were written.
    pub short_term_expired: u64,
    /// Short-term batches retried.
    pub short_term_retries: u64,
    /// Dead letters by kind (every kind of [`Reason::KINDS`], zeros included): the `kind`s of
    /// the dead-letter file, counted.
    pub rejected_by_kind: BTreeMap<&'static str, u64>,
}

impl ProfileStats {
    /// The counters now, with the engine's `stats` (for the dead letters by kind).
    pub fn snapshot(&self, stats: &Stats) -> ProfileCounters {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let tags_rejected = get(&self.tags_rejected);
        ProfileCounters {
            flushes: get(&self.flushes),
            users_flushed: get(&self.users_flushed),
            tags_written: get(&self.tags_written),
            history_rows: get(&self.history_rows),
            events_rejected: get(&stats.rejected).saturating_sub(tags_rejected),
            tags_rejected,
            short_term_written: get(&self.short_term_written),
            short_term_expired: get(&self.short_term_expired),
            short_term_retries: get(&self.short_term_retries),
            rejected_by_kind: Reason::KINDS
                .iter()
                .zip(&stats.rejected_by_kind)
                .map(|(kind, n)| (*kind, get(n)))
                .collect(),
        }
    }
}

/// Served at `/metrics` as `hourglass_job_profile_*_total`.
impl JobCounters for ProfileStats {
    fn counters(&self) -> Vec<(&'static str, &'static str, u64)> {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        vec![
            (
                "profile_flushes",
                "Flushes of the per-user merge",
                get(&self.flushes),
            ),
            (
                "profile_users_flushed",
                "Users written, one put of user_profile_tag each per flush",
                get(&self.users_flushed),
            ),
            (
                "profile_tags_written",
                "Tag cells written to user_profile_tag",
                get(&self.tags_written),
            ),
            (
                "profile_history_rows",
                "Rows written to user_tag_history, one per change",
                get(&self.history_rows),
            ),
            (
                "profile_tags_rejected",
                "Tags refused at a flush (also in rejected, by reason)",
                get(&self.tags_rejected),
            ),
            (
                "profile_short_term_written",
                "Short-term tag values written to Redis or the embedded fallback",
                get(&self.short_term_written),
            ),
            (
                "profile_short_term_expired",
                "Short-term tag values not written: expired at event time plus TTL",
                get(&self.short_term_expired),
            ),
            (
                "profile_short_term_retries",
                "Short-term batches written again after a retriable error",
                get(&self.short_term_retries),
            ),
        ]
    }
}

/// The end-of-run report of `hourglass profile replay|run`: the engine's counters (the
/// sensor-specific ones stay 0) and the profile job's; `--stats-json` writes it flat.
#[derive(Debug, Clone, Serialize)]
pub struct ProfileReport {
    /// What the command was, for the headline: `replayed` or `run (job.toml) stopped after`.
    #[serde(skip)]
    pub verb: String,
    /// The engine's counters.
    #[serde(flatten)]
    pub counters: Summary,
    /// The profile job's.
    #[serde(flatten)]
    pub profile: ProfileCounters,
    /// For `run`: records re-read after a restart and skipped (stored by the previous run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resume_skipped: Option<u64>,
}

impl Report for ProfileReport {
    fn counters(&self) -> &Summary {
        &self.counters
    }

    fn headline(&self, location: &str) -> String {
        let (c, p) = (&self.counters, &self.profile);
        format!(
            "{} {} events in {:.1}s ({:.0} events/s): {} ok, {} rejected, {} tags refused; wrote \
             {} tags of {} users ({} history rows) to {location} and {} short-term values ({} \
             expired)",
            self.verb,
            c.read,
            c.elapsed_s,
            c.readings_per_s,
            c.ok,
            p.events_rejected,
            p.tags_rejected,
            p.tags_written,
            p.users_flushed,
            p.history_rows,
            p.short_term_written,
            p.short_term_expired,
        )
    }

    fn expired_advice(&self) -> &'static str {
        ""
    }

    fn dead_letters(&self, path: Option<&Path>, _registry_rejected: u64) -> Vec<String> {
        path.map(|path| {
            format!(
                "{} dead letters ({} events, {} tags) written to {}",
                self.counters.rejected,
                self.profile.events_rejected,
                self.profile.tags_rejected,
                path.display()
            )
        })
        .into_iter()
        .collect()
    }
}
