//! A purge's invalidation of the profile cache: once a page's deletes are durable, the users
//! whose `user_profile_tag` row they changed get a new generation and lose their
//! `profile:{user}` entry, as after a write of the job (`crate::cache`).

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use sinks::table::Mutation;

use super::PurgeCounts;
use crate::cache::Invalidator;
use crate::key::parse_profile_row;
use crate::tables::PROFILE_TABLE;
use crate::Result;

/// How long pages skip Redis after it failed (their users counted as not invalidated): a
/// Redis that is away costs a purge one timeout per this, not one per page.
const RETRY_AFTER: Duration = Duration::from_secs(5);

/// The purge's side of the cache.
pub(super) struct PurgeCache {
    invalidator: Invalidator,
    /// When Redis last failed, while it keeps failing.
    failed_at: Option<Instant>,
}

impl PurgeCache {
    /// Invalidates the cache in the Redis at `url`; connects at the first page.
    pub(super) fn new(url: &str) -> Result<Self> {
        Ok(PurgeCache {
            invalidator: Invalidator::new(url)?,
            failed_at: None,
        })
    }

    /// The users whose `user_profile_tag` row `deletes` change, each once.
    pub(super) fn changed_users(deletes: &[Mutation]) -> Vec<String> {
        let users: BTreeSet<&str> = deletes
            .iter()
            .filter_map(|m| match m {
                Mutation::DeleteColumn { table, row, .. } if *table == PROFILE_TABLE => {
                    parse_profile_row(row)
                }
                _ => None,
            })
            .collect();
        users.into_iter().map(str::to_string).collect()
    }

    /// Invalidates `users`, adding them to `counts.cache_invalidated`, or, when Redis fails
    /// (one try; none within [`RETRY_AFTER`] of a failure), to `counts.cache_not_invalidated`:
    /// their entries then expire by their TTL. Never an error: the purge goes on.
    pub(super) fn invalidate(&mut self, users: &[String], counts: &mut PurgeCounts) {
        if users.is_empty() {
            return;
        }
        let n = users.len() as u64;
        if self.failed_at.is_some_and(|t| t.elapsed() < RETRY_AFTER) {
            counts.cache_not_invalidated += n;
            return;
        }
        let refs: Vec<&str> = users.iter().map(String::as_str).collect();
        match self.invalidator.invalidate(&refs) {
            Ok(()) => {
                self.failed_at = None;
                counts.cache_invalidated += n;
            }
            Err(e) => {
                if self.failed_at.is_none() {
                    tracing::warn!(error = %e, cache = %self.invalidator.location(),
                        "the profile cache failed: the purged users' cached profiles are left \
                         to expire while it fails (tried again every 5 s)");
                }
                self.failed_at = Some(Instant::now());
                counts.cache_not_invalidated += n;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_users_are_those_of_the_profile_rows_changed_each_once() {
        let row = crate::key::profile_row("10086");
        let column = |family: &str, table| Mutation::DeleteColumn {
            table,
            row: row.clone(),
            family: family.into(),
            qualifier: b"dim_a".to_vec(),
            ts_ms: 1,
        };
        let deletes = [
            column("dimension", PROFILE_TABLE),
            column("behavior", PROFILE_TABLE),
            column("dimension", crate::tables::HISTORY_TABLE),
        ];
        assert_eq!(PurgeCache::changed_users(&deletes), ["10086"]);
    }

    #[test]
    fn redis_away_counts_the_users_and_is_no_error() {
        // Nothing listens on port 1.
        let mut cache = PurgeCache::new("redis://127.0.0.1:1/0").unwrap();
        let mut counts = PurgeCounts::default();
        let users = ["a".to_string(), "b".to_string()];
        cache.invalidate(&users, &mut counts);
        cache.invalidate(&users[..1], &mut counts);
        assert_eq!(
            (counts.cache_invalidated, counts.cache_not_invalidated),
            (0, 3)
        );
    }
}
