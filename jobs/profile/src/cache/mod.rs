//! The profile cache in Redis: `profile:{user}` entries read before the store, filled
//! asynchronously on a miss, and invalidated by the job after each durable table write.
//!
//! **Keys.** `profile:{user}` holds an [`Entry`] (JSON) and expires after `[cache] ttl_secs`;
//! `profile-gen:{user}` holds the user's *generation*, a token the job replaces (with a fresh,
//! never-reused one) each time it writes the user, and [`GEN_TTL_SECS`] after that.
//!
//! **The race it closes.** A reader that misses reads the generation in the same `MGET` as the
//! entry, then Gets the row, then hands the entry to a background thread. The thread stores it
//! only if the generation is still the one read (a Lua script compares and sets atomically).
//! The job, after a flush made the user's row durable, sets a new generation and deletes the
//! entry in one `MULTI`. So a backfill of a row read before the write either lands before the
//! invalidation (and is deleted by it) or after it (and finds another generation and is
//! dropped); a row read after the write is the new one. A generation that expired reads as
//! none, which no live reader holds past [`BACKFILL_MAX_AGE`] ≪ [`GEN_TTL_SECS`].
//!
//! **Capped entries.** An entry holds at most the configured core tags (`[cache] core_tags`;
//! none configured: every tag, if there are at most `max_tags`, else the user is not cached)
//! and says whether it is the user's whole stored profile (`complete`). A read is served from
//! an entry only if the entry is complete, or the request selects tags that are all core tags
//! (then a core tag absent from the entry is absent from the row): a capped entry is never
//! answered as the whole profile.

mod entry;
pub mod near;
mod redis;

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};

use serde::Deserialize;

pub use self::entry::Entry;
pub use self::redis::{Invalidator, RedisCache, WRITE_TIMEOUT};

/// How long a generation token lives after the job's last write of its user: far longer than
/// a backfill may take from its read of the generation to its `EVAL` ([`BACKFILL_MAX_AGE`]
/// plus a Redis timeout), so that a reader which saw no generation before a write cannot find
/// none again after it. Tokens are never reused, so an expired one is never mistaken for a
/// current one.
pub const GEN_TTL_SECS: u64 = 300;

/// A backfill is dropped, not written, when more than this passed since its read of the
/// generation: its row may be old. The job gives up retrying an invalidation only after the
/// cache TTL plus [`INVALIDATION_GRACE`], when every entry it would delete has expired.
pub const BACKFILL_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(5);

/// What the job adds to the cache TTL before it gives up invalidating a user while Redis
/// fails: more than [`BACKFILL_MAX_AGE`] plus a Redis timeout, the longest a backfill of a row
/// read before the write can land after it.
pub const INVALIDATION_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// The Redis key of a user's cached profile: `profile:{user}`.
pub fn entry_key(user: &str) -> String {
    format!("profile:{user}")
}

/// The Redis key of a user's generation token: `profile-gen:{user}`.
pub fn gen_key(user: &str) -> String {
    format!("profile-gen:{user}")
}

/// `[cache]`: the profile cache in front of the store, in the Redis of `[redis]` (no
/// `[redis]`: no cache, every read is a store read).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CacheConfig {
    /// Whether reads use the cache at all (default true; without `[redis]` there is none).
    #[serde(default = "default_enabled")]
    pub enabled: bool,
    /// Seconds an entry lives (default 600).
    #[serde(default = "default_ttl_secs")]
    pub ttl_secs: u64,
    /// Only users whose newest stored tag is at most this many days old are cached
    /// (default 7), besides `high_value_users`.
    #[serde(default = "default_active_days")]
    pub active_days: u32,
    /// Users cached whatever their activity (default none).
    #[serde(default)]
    pub high_value_users: HashSet<String>,
    /// The tags an entry holds (default none: every tag of the user, up to `max_tags`). A user
    /// with other tags gets a capped entry, served only to requests for core tags alone.
    #[serde(default)]
    pub core_tags: HashSet<String>,
    /// Most tags an entry holds when `core_tags` is empty (default 256): a user with more is
    /// not cached, so that no entry becomes a big key.
    #[serde(default = "default_max_tags")]
    pub max_tags: usize,
    /// Milliseconds a read waits for Redis, connecting or answering, before it reads the store
    /// instead (default 50).
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// After a Redis error, milliseconds reads go to the store without trying Redis (default
    /// 1000); then the next read connects again, and caching resumes by itself.
    #[serde(default = "default_retry_after_ms")]
    pub retry_after_ms: u64,
    /// Backfills waiting for the background thread at most (default 1024); more are dropped
    /// and counted, never waited for.
    #[serde(default = "default_backfill_queue")]
    pub backfill_queue: usize,
    /// MiB of the near cache: the Redis keys a reader read lately, kept in its memory and
    /// dropped when Redis says they changed (`cache::near`), so that a hot user's read makes no
    /// Redis call. Default 0 (off): with it, a read right after another process's write may
    /// see the old value for as long as the invalidation takes to arrive (under a millisecond
    /// on a quiet machine).
    #[serde(default)]
    pub near_mib: u64,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            enabled: default_enabled(),
            ttl_secs: default_ttl_secs(),
            active_days: default_active_days(),
            high_value_users: HashSet::new(),
            core_tags: HashSet::new(),
            max_tags: default_max_tags(),
            timeout_ms: default_timeout_ms(),
            retry_after_ms: default_retry_after_ms(),
            backfill_queue: default_backfill_queue(),
            near_mib: 0,
        }
    }
}

const fn default_enabled() -> bool {
    true
}
const fn default_ttl_secs() -> u64 {
    600
}
const fn default_active_days() -> u32 {
    7
}
const fn default_max_tags() -> usize {
    256
}
const fn default_timeout_ms() -> u64 {
    50
}
const fn default_retry_after_ms() -> u64 {
    1000
}
const fn default_backfill_queue() -> usize {
    1024
}

impl CacheConfig {
    /// Checks values that parse but make no sense; the message names the key.
    ///
    /// # Errors
    /// The key at fault and what it must be.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.ttl_secs == 0 {
            return Err("cache.ttl_secs must be at least 1".into());
        }
        if self.max_tags == 0 || self.backfill_queue == 0 || self.timeout_ms == 0 {
            return Err(
                "cache.max_tags, cache.backfill_queue and cache.timeout_ms must be at least 1"
                    .into(),
            );
        }
        Ok(())
    }

    /// Whether a user whose newest stored tag is stamped `newest_ms` is cached at `now_ms`:
    /// active within `active_days`, or a high-value user.
    pub fn caches(&self, user: &str, newest_ms: i64, now_ms: i64) -> bool {
        let window = i64::from(self.active_days).saturating_mul(86_400_000);
        self.high_value_users.contains(user) || newest_ms >= now_ms.saturating_sub(window)
    }
}

/// The read path's counters (served at `/metrics` as `hourglass_profile_cache_*_total`).
#[derive(Debug, Default)]
pub struct CacheStats {
    /// Profiles answered from the cache.
    pub hits: AtomicU64,
    /// Profiles read from the store: no entry, an entry that cannot answer the request (capped),
    /// or Redis unavailable.
    pub misses: AtomicU64,
    /// Redis calls that failed or timed out (the read went to the store).
    pub redis_errors: AtomicU64,
    /// Entries written by the background thread.
    pub backfilled: AtomicU64,
    /// Backfills not written: the user was written since its row was read (or the entry is
    /// too old).
    pub backfills_stale: AtomicU64,
    /// Backfills dropped because the queue was full or Redis failed.
    pub backfills_dropped: AtomicU64,
    /// Users not cached: inactive, or more tags than `max_tags` without core tags.
    pub not_cached: AtomicU64,
    /// Reads whose keys the near cache held all of: no Redis call.
    pub near_reads: AtomicU64,
    /// Keys the near cache dropped because Redis said they changed.
    pub near_invalidations: AtomicU64,
}

impl CacheStats {
    /// `(name, help, value)` of each counter, for a Prometheus exposition.
    pub fn counters(&self) -> Vec<(&'static str, &'static str, u64)> {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        vec![
            ("hits", "Profiles answered from the cache", get(&self.hits)),
            (
                "misses",
                "Profiles read from the store (no entry, a capped one, or Redis unavailable)",
                get(&self.misses),
            ),
            (
                "redis_errors",
                "Redis calls of the read path that failed or timed out",
                get(&self.redis_errors),
            ),
            (
                "backfilled",
                "Entries written after a miss",
                get(&self.backfilled),
            ),
            (
                "backfills_stale",
                "Backfills dropped because the user was written since the read",
                get(&self.backfills_stale),
            ),
            (
                "backfills_dropped",
                "Backfills dropped: queue full or Redis failed",
                get(&self.backfills_dropped),
            ),
            (
                "not_cached",
                "Misses whose user is not cached (inactive, or too many tags)",
                get(&self.not_cached),
            ),
            (
                "near_reads",
                "Reads answered from the near cache, with no Redis call",
                get(&self.near_reads),
            ),
            (
                "near_invalidations",
                "Keys the near cache dropped because Redis said they changed",
                get(&self.near_invalidations),
            ),
        ]
    }

    /// The counters as OpenMetrics text lines (`hourglass_profile_cache_{name}_total`), without
    /// the closing `# EOF`.
    pub fn exposition(&self) -> String {
        use std::fmt::Write as _;
        let mut text = String::new();
        for (name, help, value) in self.counters() {
            let _ = writeln!(text, "# HELP hourglass_profile_cache_{name} {help}.");
            let _ = writeln!(text, "# TYPE hourglass_profile_cache_{name} counter");
            let _ = writeln!(text, "hourglass_profile_cache_{name}_total {value}");
        }
        text
    }
}

pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activity_or_the_high_value_list_decides() {
        let mut c = CacheConfig::default();
        let now = 100 * 86_400_000;
        assert!(c.caches("u", now - 7 * 86_400_000, now), "7 days is active");
        assert!(!c.caches("u", now - 7 * 86_400_000 - 1, now));
        c.high_value_users.insert("u".into());
        assert!(c.caches("u", 0, now));
        assert!(!c.caches("v", 0, now));
        assert_eq!(entry_key("10086"), "profile:10086");
        assert_eq!(gen_key("10086"), "profile-gen:10086");
    }

    #[test]
    fn the_exposition_names_each_counter() {
        let s = CacheStats::default();
        bump(&s.hits);
        let text = s.exposition();
        assert!(
            text.contains("hourglass_profile_cache_hits_total 1\n"),
            "{text}"
        );
        assert!(text.contains("# TYPE hourglass_profile_cache_redis_errors counter"));
    }
}
