//! The table sink's cache invalidation: after a flush made users' rows durable, their
//! `profile:{user}` entries are deleted and their generations replaced (`crate::cache`).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use operators::BatchWriter;
use pipeline::control::JobControl;
use pipeline::stats::add;
use sinks::table::Mutation;

use super::stats::ProfileStats;
use super::writers::{FIRST_BACKOFF, MAX_BACKOFF};
use crate::cache::{Invalidator, INVALIDATION_GRACE};
use crate::key::parse_profile_row;
use crate::short_term::is_retriable;
use crate::tables::PROFILE_TABLE;

/// Wraps the table writer: remembers the users of the `user_profile_tag` puts it passes on,
/// and after each successful flush (the rows durable) invalidates their cache entries, so the
/// sink's frontier, and the Kafka offsets, pass a write only once its stale entry is gone.
///
/// Redis failing: the call is retried with backoff, blocking the worker as the short-term sink
/// does, for at most the cache TTL plus [`INVALIDATION_GRACE`] from the first failure; then
/// every entry the invalidation would have deleted has expired (Redis expires on absolute
/// times, also across a restart) and no backfill of an older read can land, so the users are
/// dropped (counted) and the job goes on; while Redis stays down, later flushes try once.
pub(crate) struct InvalidatingWriter<W> {
    inner: W,
    /// `None`: no cache to invalidate (no `[redis]`, or `[cache] enabled = false`).
    invalidator: Option<Invalidator>,
    users: BTreeSet<String>,
    give_up_after: Duration,
    failing_since: Option<Instant>,
    profile: Arc<ProfileStats>,
    control: Arc<JobControl>,
}

impl<W> InvalidatingWriter<W> {
    /// `inner`, invalidating through `invalidator` entries that live `ttl_secs`.
    pub(crate) fn new(
        inner: W,
        invalidator: Option<Invalidator>,
        ttl_secs: u64,
        profile: Arc<ProfileStats>,
        control: Arc<JobControl>,
    ) -> Self {
        InvalidatingWriter {
            inner,
            invalidator,
            users: BTreeSet::new(),
            give_up_after: Duration::from_secs(ttl_secs) + INVALIDATION_GRACE,
            failing_since: None,
            profile,
            control,
        }
    }

    fn invalidate(&mut self) {
        let Some(invalidator) = self.invalidator.as_mut() else {
            return;
        };
        if self.users.is_empty() {
            return;
        }
        let users: Vec<&str> = self.users.iter().map(String::as_str).collect();
        let mut backoff = FIRST_BACKOFF;
        loop {
            match invalidator.invalidate(&users) {
                Ok(()) => {
                    add(&self.profile.cache_invalidated, users.len() as u64);
                    self.failing_since = None;
                    break;
                }
                Err(e) => {
                    let since = *self.failing_since.get_or_insert_with(Instant::now);
                    if !is_retriable(&e)
                        || since.elapsed() >= self.give_up_after
                        || self.control.error().is_some()
                    {
                        tracing::warn!(error = %e, cache = %invalidator.location(), users = users.len(),
                            "profile cache invalidation given up: Redis failed longer than an entry lives");
                        add(
                            &self.profile.cache_invalidations_dropped,
                            users.len() as u64,
                        );
                        break;
                    }
                    tracing::warn!(error = %e, cache = %invalidator.location(), "profile cache invalidation failed; retrying");
                    add(&self.profile.cache_invalidation_retries, 1);
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
        }
        self.users.clear();
    }
}

impl<W: BatchWriter<Mutation>> BatchWriter<Mutation> for InvalidatingWriter<W> {
    type Error = W::Error;

    fn write(&mut self, batch: Vec<Mutation>) -> Result<(), W::Error> {
        if self.invalidator.is_some() {
            for m in &batch {
                if let Mutation::Put { table, row, .. } = m {
                    if *table == PROFILE_TABLE {
                        if let Some(user) = parse_profile_row(row) {
                            self.users.insert(user.to_string());
                        }
                    }
                }
            }
        }
        self.inner.write(batch)
    }

    fn flush(&mut self) -> Result<(), W::Error> {
        self.inner.flush()?;
        self.invalidate();
        Ok(())
    }
}
