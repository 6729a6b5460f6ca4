//! The cache's Redis side: reads (one pipeline of an `MGET` and `HGETALL`s, the keys the near
//! cache holds left out), the backfill thread, and the job's invalidations.

use std::borrow::Cow;
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use redis::{Client, Connection};

use super::near::{Near, Ticket, Value};
use super::{
    bump, entry_key, gen_key, CacheConfig, CacheStats, Entry, BACKFILL_MAX_AGE, GEN_TTL_SECS,
};
use crate::registry::redact;
use crate::{Error, Result};

/// Sets `KEYS[1]` (the entry) to `ARGV[2]` for `ARGV[3]` seconds if `KEYS[2]` (the user's
/// generation) is still `ARGV[1]` (`""`: no generation), atomically: a write of the user since
/// the row was read changed the generation, and the stale entry is not stored.
const SET_IF_GENERATION: &str = "\
local g = redis.call('GET', KEYS[2])
if (g or '') ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3])
return 1";

/// How long the backfill thread and the job wait for Redis a call: they wait for no request.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// A connection with read and write timeouts of `timeout`.
fn connect(client: &Client, timeout: Duration) -> redis::RedisResult<Connection> {
    let conn = client.get_connection_with_timeout(timeout)?;
    conn.set_read_timeout(Some(timeout))?;
    conn.set_write_timeout(Some(timeout))?;
    Ok(conn)
}

fn client(url: &str) -> Result<Client> {
    Client::open(url).map_err(|source| Error::Redis {
        url: redact(url),
        source,
    })
}

/// What [`RedisCache::read`] gives: the values of its keys, and the `(field, value)` pairs of
/// each of its hashes.
pub type Fetched = (Vec<Option<String>>, Vec<Vec<(String, String)>>);

/// One pipeline: `MGET keys` (left out without keys), then `HGETALL` of each of `hashes`.
fn fetch(conn: &mut Connection, keys: &[String], hashes: &[String]) -> redis::RedisResult<Fetched> {
    let mut pipe = redis::pipe();
    if !keys.is_empty() {
        pipe.cmd("MGET").arg(keys);
    }
    for hash in hashes {
        pipe.cmd("HGETALL").arg(hash);
    }
    let mut replies = pipe.query::<Vec<redis::Value>>(conn)?.into_iter();
    let values = match keys {
        [] => Vec::new(),
        _ => redis::from_redis_value(replies.next().unwrap_or(redis::Value::Nil))?,
    };
    let fields = replies
        .map(redis::from_redis_value)
        .collect::<Result<_, _>>()?;
    Ok((values, fields))
}

/// A backfill waiting for the thread.
struct Backfill {
    user: String,
    entry: Entry,
    generation: Option<String>,
    read_at: Instant,
}

/// The read side of the profile cache: `MGET`s on a small pool of connections with short
/// timeouts, and a background thread that stores entries after misses.
///
/// Redis down or slow: a call fails within `[cache] timeout_ms`, is counted
/// ([`CacheStats::redis_errors`]), and for `retry_after_ms` no call is tried (reads go to the
/// store); the next call after that connects again, so caching resumes by itself.
pub struct RedisCache {
    client: Client,
    url: String,
    cfg: CacheConfig,
    stats: Arc<CacheStats>,
    /// Idle connections, each with the subscriber id its tracking redirects to (`None`: not
    /// tracking, what it reads is not kept near).
    pool: Mutex<Vec<(Connection, Option<i64>)>>,
    /// The near cache (`[cache] near_mib` > 0).
    near: Option<Arc<Near>>,
    /// When calls may be tried again, after an error (the monotonic clock: `HOURGLASS_NOW`
    /// fixes the wall clock's now in tests).
    resting_until: Mutex<Option<Instant>>,
    queue: Mutex<Option<SyncSender<Backfill>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for RedisCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisCache")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl RedisCache {
    /// The cache at `url` with `cfg`, counting into `stats`. Connects lazily: a Redis down at
    /// start only makes the first reads go to the store.
    ///
    /// # Errors
    /// [`Error::Redis`] for an invalid URL; [`Error::Io`] when the thread cannot be started.
    pub fn new(url: &str, cfg: &CacheConfig, stats: Arc<CacheStats>) -> Result<Self> {
        let client = client(url)?;
        let (tx, rx) = mpsc::sync_channel(cfg.backfill_queue);
        let thread = {
            let (client, stats, ttl) = (client.clone(), stats.clone(), cfg.ttl_secs);
            std::thread::Builder::new()
                .name("profile-backfill".into())
                .spawn(move || backfill_loop(&client, &rx, &stats, ttl))
                .map_err(|source| Error::Io {
                    path: "the profile cache's backfill thread".into(),
                    source,
                })?
        };
        Ok(RedisCache {
            client,
            url: redact(url),
            cfg: cfg.clone(),
            stats: stats.clone(),
            pool: Mutex::new(Vec::new()),
            near: (cfg.near_mib > 0).then(|| Arc::new(Near::new(cfg.near_mib, stats.clone()))),
            resting_until: Mutex::new(None),
            queue: Mutex::new(Some(tx)),
            thread: Mutex::new(Some(thread)),
        })
    }

    /// The configuration.
    pub fn config(&self) -> &CacheConfig {
        &self.cfg
    }

    /// The counters.
    pub fn stats(&self) -> &Arc<CacheStats> {
        &self.stats
    }

    /// The near cache, if `[cache] near_mib` is not 0.
    pub fn near(&self) -> Option<&Near> {
        self.near.as_deref()
    }

    /// The values of `keys` (one `MGET`) and the fields of each of `hashes` (one `HGETALL`
    /// each, `(field, value)`), in one pipeline: one round trip, none when the near cache holds
    /// them all. `None` when Redis is resting after an error or fails now (counted; the caller
    /// reads the store).
    pub fn read(&self, keys: &[String], hashes: &[String]) -> Option<Fetched> {
        if keys.is_empty() && hashes.is_empty() {
            return Some((Vec::new(), Vec::new()));
        }
        let near = self.near.as_deref();
        if let Some(n) = &self.near {
            n.start(&self.client, Duration::from_millis(self.cfg.retry_after_ms));
        }
        let redirect = near.and_then(Near::redirect);
        let mut values: Vec<Option<Option<String>>> = vec![None; keys.len()];
        let mut fields: Vec<Option<Vec<(String, String)>>> = vec![None; hashes.len()];
        if let (Some(n), Some(_)) = (near, redirect) {
            for (slot, key) in values.iter_mut().zip(keys) {
                if let Some(Value::Str(v)) = n.get(key) {
                    *slot = Some(v.map(|s| s.to_string()));
                }
            }
            for (slot, key) in fields.iter_mut().zip(hashes) {
                if let Some(Value::Hash(f)) = n.get(key) {
                    *slot = Some(f.to_vec());
                }
            }
        }
        let ask_keys: Vec<usize> = (0..keys.len()).filter(|&i| values[i].is_none()).collect();
        let ask_hashes: Vec<usize> = (0..hashes.len()).filter(|&i| fields[i].is_none()).collect();
        if ask_keys.is_empty() && ask_hashes.is_empty() {
            if let Some(n) = near {
                n.count_read();
            }
            return Some(assemble(values, fields));
        }
        let resting = *self
            .resting_until
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if resting.is_some_and(|until| Instant::now() < until) {
            return None;
        }
        // Without a near cache (or with nothing found in it) every name is asked: no copies.
        let key_names = asked(keys, &ask_keys);
        let hash_names = asked(hashes, &ask_hashes);
        // Noted before the call: an invalidation after it voids the answer's keys.
        let tickets: Option<(Vec<Ticket>, Vec<Ticket>)> =
            near.filter(|_| redirect.is_some()).map(|n| {
                (
                    key_names.iter().map(|k| n.ticket(k)).collect(),
                    hash_names.iter().map(|k| n.ticket(k)).collect(),
                )
            });
        let pooled = self
            .pool
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
            .filter(|(_, tracks)| *tracks == redirect);
        let timeout = Duration::from_millis(self.cfg.timeout_ms);
        let result = pooled
            .map_or_else(|| self.connect_tracking(timeout, redirect), Ok)
            .and_then(|(mut conn, tracks)| {
                let fetched = fetch(&mut conn, &key_names, &hash_names)?;
                Ok((conn, tracks, fetched))
            });
        match result {
            Ok((conn, tracks, (got_values, got_fields))) => {
                if let (Some(n), Some((key_tickets, hash_tickets)), true) =
                    (near, &tickets, tracks.is_some() && tracks == redirect)
                {
                    for ((name, value), t) in key_names.iter().zip(&got_values).zip(key_tickets) {
                        n.keep(name, Value::Str(value.as_deref().map(Arc::from)), *t);
                    }
                    for ((name, f), t) in hash_names.iter().zip(&got_fields).zip(hash_tickets) {
                        n.keep(name, Value::Hash(Arc::from(f.as_slice())), *t);
                    }
                }
                self.pool
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .push((conn, tracks));
                for (i, v) in ask_keys.into_iter().zip(got_values) {
                    values[i] = Some(v);
                }
                for (i, f) in ask_hashes.into_iter().zip(got_fields) {
                    fields[i] = Some(f);
                }
                Some(assemble(values, fields))
            }
            Err(e) => {
                tracing::warn!(error = %e, redis = %self.url, "profile cache unavailable; reading the store");
                bump(&self.stats.redis_errors);
                // Redis sends a key's invalidation only while the connection that read it
                // lives: the keys this one read are no longer watched.
                if let Some(n) = near {
                    n.invalidate_all();
                }
                let rest = Duration::from_millis(self.cfg.retry_after_ms);
                *self
                    .resting_until
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = Instant::now().checked_add(rest);
                None
            }
        }
    }

    /// A new connection, tracking its reads for the subscriber `redirect` if there is one.
    /// A Redis that refuses tracking (before 6.0) turns the near cache off; a subscriber gone
    /// meanwhile leaves the connection untracked.
    fn connect_tracking(
        &self,
        timeout: Duration,
        redirect: Option<i64>,
    ) -> redis::RedisResult<(Connection, Option<i64>)> {
        let mut conn = connect(&self.client, timeout)?;
        let Some(id) = redirect else {
            return Ok((conn, None));
        };
        let on: redis::RedisResult<()> = redis::cmd("CLIENT")
            .arg("TRACKING")
            .arg("ON")
            .arg("REDIRECT")
            .arg(id)
            .query(&mut conn);
        match on {
            Ok(()) => Ok((conn, Some(id))),
            Err(e) if matches!(e.kind(), redis::ErrorKind::Server(_)) => {
                if !e.to_string().contains("redirect") {
                    if let Some(n) = self.near.as_deref() {
                        n.refuse();
                    }
                }
                Ok((conn, None))
            }
            Err(e) => Err(e),
        }
    }

    /// Queues `entry` for `user`, to be stored if the user's generation is still `generation`
    /// (as read with the miss, at `read_at`, before the store was read). Never waits: a full
    /// queue drops it (counted).
    pub fn backfill(&self, user: &str, entry: Entry, generation: Option<String>, read_at: Instant) {
        let queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(tx) = queue.as_ref() else { return };
        let job = Backfill {
            user: user.to_string(),
            entry,
            generation,
            read_at,
        };
        if let Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) = tx.try_send(job) {
            bump(&self.stats.backfills_dropped);
        }
    }

    /// Stops taking backfills and waits for the queued ones (at most [`BACKFILL_MAX_AGE`]
    /// each): a command that exits after its answer calls this, after printing it.
    pub fn finish(&self) {
        drop(
            self.queue
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        if let Some(thread) = self
            .thread
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            let _ = thread.join();
        }
    }
}

impl Drop for RedisCache {
    fn drop(&mut self) {
        self.finish();
        if let Some(n) = &self.near {
            n.stop();
        }
    }
}

/// The names of `names` at `ask` (indexes in order): `names` itself when that is all of them.
fn asked<'n>(names: &'n [String], ask: &[usize]) -> Cow<'n, [String]> {
    if ask.len() == names.len() {
        Cow::Borrowed(names)
    } else {
        Cow::Owned(ask.iter().map(|&i| names[i].clone()).collect())
    }
}

/// A read's answer from the values and fields each found near or in Redis (every slot filled).
fn assemble(
    values: Vec<Option<Option<String>>>,
    fields: Vec<Option<Vec<(String, String)>>>,
) -> Fetched {
    (
        values.into_iter().map(Option::flatten).collect(),
        fields.into_iter().map(Option::unwrap_or_default).collect(),
    )
}

fn backfill_loop(client: &Client, rx: &Receiver<Backfill>, stats: &CacheStats, ttl: u64) {
    let mut conn: Option<Connection> = None;
    for job in rx {
        if job.read_at.elapsed() > BACKFILL_MAX_AGE {
            bump(&stats.backfills_stale);
            continue;
        }
        let result = conn
            .take()
            .map_or_else(|| connect(client, WRITE_TIMEOUT), Ok)
            .and_then(|mut c| {
                let set: i64 = redis::cmd("EVAL")
                    .arg(SET_IF_GENERATION)
                    .arg(2)
                    .arg(entry_key(&job.user))
                    .arg(gen_key(&job.user))
                    .arg(job.generation.as_deref().unwrap_or(""))
                    .arg(job.entry.to_json())
                    .arg(ttl)
                    .query(&mut c)?;
                Ok((c, set))
            });
        match result {
            Ok((c, set)) => {
                conn = Some(c);
                bump(if set == 1 {
                    &stats.backfilled
                } else {
                    &stats.backfills_stale
                });
            }
            Err(e) => {
                tracing::debug!(error = %e, "profile cache backfill failed");
                bump(&stats.redis_errors);
                bump(&stats.backfills_dropped);
            }
        }
    }
}

/// The job's side of the cache: after a flush made users' rows durable, gives each a new
/// generation and deletes its entry, in one `MULTI` (see the module's doc for why both).
pub struct Invalidator {
    client: Client,
    url: String,
    conn: Option<Connection>,
    /// Unique to this invalidator (random), so that no two writers' tokens are equal.
    prefix: String,
    seq: u64,
}

impl std::fmt::Debug for Invalidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Invalidator")
            .field("url", &self.url)
            .finish_non_exhaustive()
    }
}

impl Invalidator {
    /// An invalidator of the cache at `url`; it connects at its first call.
    ///
    /// # Errors
    /// [`Error::Redis`] for an invalid URL.
    pub fn new(url: &str) -> Result<Self> {
        Ok(Invalidator {
            client: client(url)?,
            url: redact(url),
            conn: None,
            prefix: format!("{:016x}", rand::random::<u64>()),
            seq: 0,
        })
    }

    /// Where the cache is, for messages.
    pub fn location(&self) -> &str {
        &self.url
    }

    /// Gives each of `users` a new generation (living [`GEN_TTL_SECS`]) and deletes its entry.
    ///
    /// # Errors
    /// [`Error::Redis`]; [`crate::short_term::is_retriable`] tells whether to try again (the
    /// connection is made again on the next call). A failed call may have invalidated some
    /// users; calling again with the same users is harmless.
    pub fn invalidate(&mut self, users: &[&str]) -> Result<()> {
        if users.is_empty() {
            return Ok(());
        }
        let mut pipe = redis::pipe();
        pipe.atomic();
        for user in users {
            self.seq += 1;
            let token = format!("{}-{:x}", self.prefix, self.seq);
            pipe.cmd("SET")
                .arg(gen_key(user))
                .arg(token)
                .arg("EX")
                .arg(GEN_TTL_SECS)
                .ignore();
            pipe.cmd("DEL").arg(entry_key(user)).ignore();
        }
        let result = self
            .conn
            .take()
            .map_or_else(|| connect(&self.client, WRITE_TIMEOUT), Ok)
            .and_then(|mut conn| pipe.exec(&mut conn).map(|()| conn));
        match result {
            Ok(conn) => {
                self.conn = Some(conn);
                Ok(())
            }
            Err(source) => Err(Error::Redis {
                url: self.url.clone(),
                source,
            }),
        }
    }
}
