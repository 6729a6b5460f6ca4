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
    /// Users whose cache entry was invalidated after a durable write (`profile:{user}`).
    pub cache_invalidated: AtomicU64,
    /// Invalidation calls made again after a Redis error.
    pub cache_invalidation_retries: AtomicU64,
    /// Users whose invalidation was given up after Redis failed for longer than an entry
    /// lives (so no entry it would have deleted is left).
    pub cache_invalidations_dropped: AtomicU64,
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

/// Served at `/metrics` as `hourglass_job_profile_*_total`, the engine's decoded records as
/// the profile job's events.
impl JobCounters for ProfileStats {
    fn counters(&self, stats: &Stats) -> Vec<(&'static str, &'static str, u64)> {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        vec![
            (
                "profile_events_decoded",
                "Tag events decoded (their tags are checked at the flush that takes them)",
                get(&stats.ok),
            ),
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
                "Tag values (cells) written to user_profile_tag",
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
            (
                "profile_cache_invalidated",
                "Users whose profile cache entry was invalidated after a durable write",
                get(&self.cache_invalidated),
            ),
            (
                "profile_cache_invalidation_retries",
                "Cache invalidations made again after a Redis error",
                get(&self.cache_invalidation_retries),
            ),
            (
                "profile_cache_invalidations_dropped",
                "Cache invalidations given up after Redis failed for longer than an entry lives",
                get(&self.cache_invalidations_dropped),
            ),
        ]
    }
}

/// The engine's counters of a profile run, under the profile job's names.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EventCounters {
    /// Tag events (lines or Kafka records) read.
    pub read: u64,
    /// Events decoded (their tags checked later, at a flush).
    pub ok: u64,
    /// Dead letters: events rejected whole plus tags refused at a flush.
    pub rejected: u64,
    /// Of the events rejected whole, those too far ahead of the wall clock (kind `future`).
    pub future: u64,
    /// Wall-clock duration of the run, seconds.
    pub elapsed_s: f64,
    /// Events read per second of wall-clock time.
    pub events_per_s: f64,
}

impl From<&Summary> for EventCounters {
    fn from(s: &Summary) -> Self {
        EventCounters {
            read: s.read,
            ok: s.ok,
            rejected: s.rejected,
            future: s.future,
            elapsed_s: s.elapsed_s,
            events_per_s: s.read_per_s(),
        }
    }
}

/// The end-of-run report of `hourglass profile replay|run`: the engine's counters under the
/// profile job's names and the profile job's own; `--stats-json` writes it flat.
#[derive(Debug, Clone, Serialize)]
pub struct ProfileReport {
    /// What the command was, for the headline: `replayed` or `run (job.toml) stopped after`.
    #[serde(skip)]
    pub verb: String,
    /// The engine's counters.
    #[serde(flatten)]
    pub counters: EventCounters,
    /// The profile job's.
    #[serde(flatten)]
    pub profile: ProfileCounters,
    /// For `run`: records re-read after a restart and skipped (stored by the previous run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resume_skipped: Option<u64>,
}

impl Report for ProfileReport {
    fn headline(&self, location: &str) -> String {
        let (c, p) = (&self.counters, &self.profile);
        format!(
            "{} {} events in {:.1}s ({:.0} events/s): {} ok, {} rejected, {} tags refused; wrote \
             {} tags of {} users ({} history rows) to {location} and {} short-term values ({} \
             expired)",
            self.verb,
            c.read,
            c.elapsed_s,
            c.events_per_s,
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

    fn footer(&self, rejected: Option<&Path>, _late: Option<&Path>) -> Vec<String> {
        rejected
            .map(|path| {
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

#[cfg(test)]
mod tests {
    use super::*;

    /// `--stats-json` of the profile job names its own counters (events, tags, users,
    /// short-term values, dead letters by kind), and none of the sensor job's.
    #[test]
    fn the_report_names_the_profile_jobs_counters() {
        let stats = Stats::default();
        stats.read.store(10, Ordering::Relaxed);
        stats.ok.store(8, Ordering::Relaxed);
        stats.rejected.store(3, Ordering::Relaxed);
        stats.rejected_by_kind[Reason::KINDS.len() - 1].store(3, Ordering::Relaxed);
        let profile = ProfileStats::default();
        profile.tags_written.store(20, Ordering::Relaxed);
        profile.users_flushed.store(4, Ordering::Relaxed);
        profile.tags_rejected.store(1, Ordering::Relaxed);
        profile.short_term_written.store(2, Ordering::Relaxed);
        let report = ProfileReport {
            verb: "replayed".into(),
            counters: EventCounters::from(&stats.summary(2.0)),
            profile: profile.snapshot(&stats),
            resume_skipped: None,
        };
        let json = serde_json::to_value(&report).unwrap();
        for (key, want) in [
            ("read", 10.0),
            ("ok", 8.0),
            ("rejected", 3.0),
            ("events_per_s", 5.0),
            ("tags_written", 20.0),
            ("users_flushed", 4.0),
            ("events_rejected", 2.0),
            ("tags_rejected", 1.0),
            ("short_term_written", 2.0),
        ] {
            assert_eq!(json[key].as_f64(), Some(want), "{key} in {json}");
        }
        assert_eq!(json["rejected_by_kind"][*Reason::KINDS.last().unwrap()], 3);
        for sensor in [
            "readings_per_s",
            "narrow_rows",
            "wide_cells",
            "room_rows",
            "late_dropped",
            "repeated",
        ] {
            assert!(json.get(sensor).is_none(), "{sensor} in {json}");
        }
        let names: Vec<&str> = profile
            .counters(&stats)
            .into_iter()
            .map(|(name, _, _)| name)
            .collect();
        assert!(names.contains(&"profile_events_decoded"), "{names:?}");
        assert!(names.iter().all(|n| n.starts_with("profile_")), "{names:?}");
    }
}
