//! The near cache: the Redis keys a reader read lately, kept in its own memory and kept true by
//! Redis' server-assisted client-side caching.
//!
//! **How it stays true.** A thread of the reader subscribes one connection to
//! `__redis__:invalidate`, and every connection that reads is switched to `CLIENT TRACKING ON
//! REDIRECT <that connection's id>`: Redis then remembers the keys each one read (present or
//! not) and, when one of them is written, deleted or expires, publishes its name to the
//! subscriber, which drops it here. A key read through a connection whose redirect is not the
//! current subscriber is not kept. When the subscriber's connection is lost (Redis restarted,
//! a network cut), every key is dropped and none is kept until it subscribed again: the
//! messages in between are lost.
//!
//! **The race it closes.** A read's answer may be overtaken by the invalidation of one of its
//! keys: Redis answers the read, the job writes the key, the subscriber drops the key (absent
//! here yet), and only then does the reader keep the answer it received before the write. So
//! each key falls in one of [`BUCKETS`] counters (by hash), which the subscriber bumps *before*
//! it drops a key; a reader notes the counters of the keys it asks for *before* it asks, keeps
//! an answer only if its counter has not moved, and checks again *after* keeping it (dropping
//! it if the counter moved meanwhile). Either the reader's second check sees the bump, or the
//! bump, and so the drop, comes after the keep. A bump of another key of the same bucket only
//! costs a key not kept.
//!
//! **Staleness.** A write is seen once its invalidation message reached the subscriber, in
//! well under a millisecond on a quiet machine: a read that starts right after another
//! process's write may still see the old value for that long. A key is also never kept longer
//! than [`NEAR_MAX_AGE`], a bound should a message ever be lost.

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use quick_cache::sync::Cache;
use quick_cache::Weighter;
use redis::Client;

/// Counters the keys are spread over (see the module doc).
pub const BUCKETS: usize = 4096;

/// Longest a key is kept, whatever the invalidations say.
pub const NEAR_MAX_AGE: Duration = Duration::from_secs(30);

/// How long the subscriber waits for a message before it looks whether it should stop.
const POLL: Duration = Duration::from_secs(1);

/// A key's value as Redis answered it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A string key's value (`None`: the key did not exist).
    Str(Option<Arc<str>>),
    /// A hash's `(field, value)` pairs (empty: the key did not exist).
    Hash(Arc<[(String, String)]>),
}

#[derive(Debug, Clone)]
struct Kept {
    value: Value,
    at: Instant,
}

/// A kept key's weight: its bytes and the cache's slot.
#[derive(Debug, Clone, Copy)]
struct ByBytes;

impl Weighter<String, Kept> for ByBytes {
    fn weight(&self, key: &String, kept: &Kept) -> u64 {
        let value = match &kept.value {
            Value::Str(s) => s.as_ref().map_or(0, |s| s.len()),
            Value::Hash(fields) => fields.iter().map(|(f, v)| f.len() + v.len() + 48).sum(),
        };
        (key.len() + value + 96) as u64
    }
}

/// What a reader noted of a key before asking Redis for it (see the module doc).
#[derive(Debug, Clone, Copy)]
pub struct Ticket {
    epoch: u64,
    bucket: usize,
    count: u64,
}

/// The near cache of one reader (a [`super::RedisCache`]).
pub struct Near {
    kept: Cache<String, Kept, ByBytes>,
    buckets: Box<[AtomicU64]>,
    /// Bumped when every key is dropped: a flush of the database, the subscriber lost.
    epoch: AtomicU64,
    /// The subscriber's client id while it is subscribed.
    redirect: Mutex<Option<i64>>,
    hasher: std::collections::hash_map::RandomState,
    started: AtomicBool,
    stop: AtomicBool,
    /// Set when Redis refused `CLIENT TRACKING` (before 6.0): the near cache stays empty.
    refused: AtomicBool,
    stats: Arc<super::CacheStats>,
}

impl std::fmt::Debug for Near {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Near")
            .field("keys", &self.kept.len())
            .field("bytes", &self.kept.weight())
            .finish_non_exhaustive()
    }
}

impl Near {
    /// A near cache of at most `mib` MiB, counting into `stats`.
    pub fn new(mib: u64, stats: Arc<super::CacheStats>) -> Self {
        let bytes = mib.saturating_mul(1 << 20);
        Near {
            // The estimate sizes the cache's table: about 2 KiB a key (an entry and its hash).
            kept: Cache::with_weighter((bytes / 2048).max(16) as usize, bytes, ByBytes),
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
            epoch: AtomicU64::new(0),
            redirect: Mutex::new(None),
            hasher: std::collections::hash_map::RandomState::new(),
            started: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            refused: AtomicBool::new(false),
            stats,
        }
    }

    fn bucket(&self, key: &str) -> usize {
        (self.hasher.hash_one(key) % BUCKETS as u64) as usize
    }

    /// The subscriber's client id, which a reading connection must redirect its tracking to;
    /// `None` while there is no subscriber (nothing is kept then).
    pub fn redirect(&self) -> Option<i64> {
        if self.refused.load(Ordering::Relaxed) {
            return None;
        }
        *self.redirect.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Redis refused `CLIENT TRACKING`: nothing is kept from now on.
    pub fn refuse(&self) {
        if !self.refused.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "Redis refused CLIENT TRACKING (it needs Redis 6 or later): the profile near cache is off"
            );
        }
    }

    /// The value kept for `key`, if any and younger than [`NEAR_MAX_AGE`].
    pub fn get(&self, key: &str) -> Option<Value> {
        let kept = self.kept.get(key)?;
        (kept.at.elapsed() < NEAR_MAX_AGE).then_some(kept.value)
    }

    /// What to note of `key` before asking Redis for it.
    pub fn ticket(&self, key: &str) -> Ticket {
        let bucket = self.bucket(key);
        Ticket {
            epoch: self.epoch.load(Ordering::SeqCst),
            bucket,
            count: self.buckets[bucket].load(Ordering::SeqCst),
        }
    }

    fn unchanged(&self, t: Ticket) -> bool {
        self.buckets[t.bucket].load(Ordering::SeqCst) == t.count
            && self.epoch.load(Ordering::SeqCst) == t.epoch
    }

    /// Keeps `value`, read for `key` after `ticket` was taken through a connection that tracks
    /// for the current subscriber, unless an invalidation may have overtaken it.
    pub fn keep(&self, key: &str, value: Value, ticket: Ticket) {
        if !self.unchanged(ticket) {
            return;
        }
        let kept = Kept {
            value,
            at: Instant::now(),
        };
        self.kept.insert(key.to_string(), kept);
        if !self.unchanged(ticket) {
            self.kept.remove(key);
        }
    }

    /// Drops `key` (an invalidation message named it).
    pub fn invalidate(&self, key: &str) {
        self.buckets[self.bucket(key)].fetch_add(1, Ordering::SeqCst);
        self.kept.remove(key);
        super::bump(&self.stats.near_invalidations);
    }

    /// Counts a read answered here, with no Redis call.
    pub fn count_read(&self) {
        super::bump(&self.stats.near_reads);
    }

    /// Drops every key.
    pub fn invalidate_all(&self) {
        self.epoch.fetch_add(1, Ordering::SeqCst);
        self.kept.clear();
    }

    /// Starts the subscriber thread (once): `client` is the cache's Redis, `retry_after` the
    /// wait before connecting again after a failure.
    pub fn start(self: &Arc<Self>, client: &Client, retry_after: Duration) {
        if self.started.swap(true, Ordering::SeqCst) {
            return;
        }
        let (near, client) = (Arc::clone(self), client.clone());
        let spawned = std::thread::Builder::new()
            .name("profile-near-cache".into())
            .spawn(move || subscribe_loop(&near, &client, retry_after));
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "the profile near cache's thread did not start: it stays empty");
        }
    }

    /// Stops the subscriber thread (within [`POLL`]); nothing is kept from then on.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        *self.redirect.lock().unwrap_or_else(PoisonError::into_inner) = None;
        self.invalidate_all();
    }
}

/// The subscriber: connects, subscribes, drops the keys each message names; on a lost
/// connection, drops every key and connects again after `retry_after`.
fn subscribe_loop(near: &Near, client: &Client, retry_after: Duration) {
    while !near.stop.load(Ordering::SeqCst) {
        if let Err(e) = subscribe_once(near, client) {
            tracing::debug!(error = %e, "profile near cache: subscriber lost");
        }
        *near.redirect.lock().unwrap_or_else(PoisonError::into_inner) = None;
        near.invalidate_all();
        if near.stop.load(Ordering::SeqCst) {
            return;
        }
        std::thread::sleep(retry_after);
    }
}

fn subscribe_once(near: &Near, client: &Client) -> redis::RedisResult<()> {
    let mut conn = client.get_connection_with_timeout(super::WRITE_TIMEOUT)?;
    conn.set_write_timeout(Some(super::WRITE_TIMEOUT))?;
    conn.set_read_timeout(Some(super::WRITE_TIMEOUT))?;
    let id: i64 = redis::cmd("CLIENT").arg("ID").query(&mut conn)?;
    let mut sub = conn.as_pubsub();
    sub.subscribe("__redis__:invalidate")?;
    sub.set_read_timeout(Some(POLL))?;
    // Keys read before this subscription were tracked for no one (or a lost subscriber).
    near.invalidate_all();
    *near.redirect.lock().unwrap_or_else(PoisonError::into_inner) = Some(id);
    loop {
        if near.stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        let msg = match sub.get_message() {
            Ok(msg) => msg,
            Err(e) if e.is_timeout() => continue,
            Err(e) => return Err(e),
        };
        // An array of key names; nil when the whole database was flushed.
        match msg.get_payload::<Option<Vec<String>>>() {
            Ok(Some(keys)) => keys.iter().for_each(|k| near.invalidate(k)),
            Ok(None) | Err(_) => near.invalidate_all(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &str) -> Value {
        Value::Str(Some(v.into()))
    }

    #[test]
    fn a_key_invalidated_after_its_ticket_is_not_kept() {
        let near = Near::new(1, Arc::default());
        let t = near.ticket("profile:u1");
        near.invalidate("profile:u1");
        near.keep("profile:u1", s("old"), t);
        assert_eq!(near.get("profile:u1"), None, "the read was overtaken");
        let t = near.ticket("profile:u1");
        near.keep("profile:u1", s("new"), t);
        assert_eq!(near.get("profile:u1"), Some(s("new")));
        near.invalidate("profile:u1");
        assert_eq!(near.get("profile:u1"), None);
    }

    #[test]
    fn dropping_everything_voids_every_ticket() {
        let near = Near::new(1, Arc::default());
        let (a, b) = (near.ticket("a"), near.ticket("b"));
        near.keep("a", s("1"), a);
        near.invalidate_all();
        near.keep(
            "b",
            Value::Hash(Arc::from(vec![("f".into(), "v".into())])),
            b,
        );
        assert_eq!((near.get("a"), near.get("b")), (None, None));
    }

    #[test]
    fn the_cache_holds_at_most_its_bytes() {
        let near = Near::new(1, Arc::default());
        let big: String = "x".repeat(10_000);
        for i in 0..1000 {
            let key = format!("profile:u{i}");
            let t = near.ticket(&key);
            near.keep(&key, s(&big), t);
        }
        assert!(near.kept.weight() <= 1 << 20, "{}", near.kept.weight());
        assert!(near.kept.len() < 1000);
    }
}
