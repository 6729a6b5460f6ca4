//! Reading profiles back, cache first: one user's tags (`hourglass profile get`,
//! `GET /api/v1/profile/{user}`), many users' in one multi-get (`profiles:batchGet`), a
//! behaviour tag's last values, and the tags at a past time from the history.
//!
//! A read of stored tags goes to Redis `profile:{user}` first (with the user's generation in one
//! `MGET`, and its short-term hash by an `HGETALL`, in one pipeline); on a miss, to the store
//! (one Get, or one multi-get for a batch), and the entry is handed to the cache's background
//! thread, which stores it unless the job wrote the user meanwhile (`crate::cache`). Without
//! `[redis]` there is no cache and the short-term tags come from their SQLite file.

mod history;
mod selection;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use serde_json::{json, Map, Value};
use sinks::table::{Cell, Row, TableReader};

use crate::cache::{bump, entry_key, gen_key, Entry, RedisCache};
use crate::event::CellValue;
use crate::key::{profile_row, validate_user_id};
use crate::registry::TagRegistry;
use crate::short_term::{self, ShortTermStore};
use crate::tables::{family_of, BEHAVIOR_FAMILY, PROFILE_TABLE};
use crate::tag::TagDef;
use crate::{Error, Result};

pub use selection::Selection;

/// Most users one [`ProfileReader::get_many`] reads: a bigger batch is refused, not split.
pub const MAX_BATCH_USERS: usize = 1000;

/// Where an answer's stored tags came from, its `"source"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Redis `profile:{user}`.
    Cache,
    /// `user_profile_tag`.
    Store,
    /// `user_tag_history` (a read at a past time).
    History,
}

impl Source {
    /// `cache`, `store` or `history`.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Cache => "cache",
            Source::Store => "store",
            Source::History => "history",
        }
    }
}

/// Reads profiles: the registry's definitions (to type the values), the cache (with `[redis]`)
/// or the short-term SQLite file (without). Shared by the server's request threads.
pub struct ProfileReader {
    defs: Mutex<Registered>,
    cache: Option<RedisCache>,
    short_term: Option<Mutex<Box<dyn ShortTermStore>>>,
}

/// How often a reader asks its registry whether the definitions changed: a server started
/// before a `tags import` types the new tags' values within a second, not after a restart.
const REGISTRY_CHECK_EVERY: Duration = Duration::from_secs(1);

/// The definitions a reader types values by, and where they come from.
struct Registered {
    current: Arc<Vec<TagDef>>,
    /// `None`: fixed definitions ([`ProfileReader::new`]).
    registry: Option<Box<dyn TagRegistry>>,
    /// [`TagRegistry::version`] when `current` was read.
    version: Option<u64>,
    checked_at: Instant,
}

impl Registered {
    /// The definitions, read again first if the registry changed (asked at most once per
    /// [`REGISTRY_CHECK_EVERY`]). A registry that cannot be read keeps the last ones (logged):
    /// a read of a profile does not fail for it.
    fn refreshed(&mut self) -> Arc<Vec<TagDef>> {
        if let Some(registry) = self.registry.as_mut() {
            if self.checked_at.elapsed() >= REGISTRY_CHECK_EVERY {
                self.checked_at = Instant::now();
                match crate::registry::read_if_changed(registry.as_mut(), self.version) {
                    Ok(Some((defs, version))) => {
                        self.current = Arc::new(defs);
                        self.version = version;
                    }
                    Ok(None) => {}
                    Err(e) => tracing::warn!(registry = %registry.location(), error = %e,
                        "reading the tag registry failed; typing values by the last definitions read"),
                }
            }
        }
        self.current.clone()
    }
}

impl std::fmt::Debug for ProfileReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProfileReader")
            .field(
                "tags",
                &self
                    .defs
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .current
                    .len(),
            )
            .field("cache", &self.cache)
            .finish_non_exhaustive()
    }
}

/// What Redis gave for one user: its entry, generation and live short-term values.
#[derive(Debug, Default)]
struct Cached {
    entry: Option<Entry>,
    generation: Option<String>,
    short: Vec<(String, String)>,
}

impl ProfileReader {
    /// A reader typing values by `defs`, with the Redis `cache` (which also holds the
    /// short-term tags) or, without one, the short-term store `short_term` (the SQLite file).
    pub fn new(
        defs: Vec<TagDef>,
        cache: Option<RedisCache>,
        short_term: Option<Box<dyn ShortTermStore>>,
    ) -> Self {
        ProfileReader {
            defs: Mutex::new(Registered {
                current: Arc::new(defs),
                registry: None,
                version: None,
                checked_at: Instant::now(),
            }),
            cache,
            short_term: short_term.map(Mutex::new),
        }
    }

    /// The reader `cfg` describes: the registry's definitions (read now, and again whenever
    /// the registry changed, asked at most once a second), the cache in the Redis
    /// of `[redis]` (which holds the short-term tags; connected lazily, so a Redis down only
    /// sends reads to the store), else the short-term SQLite file. Counts into `stats`.
    ///
    /// # Errors
    /// The registry cannot be read; [`Error::Redis`] for an invalid Redis URL; the SQLite
    /// file cannot be opened.
    pub fn open(
        cfg: &crate::ProfileConfig,
        stats: std::sync::Arc<crate::cache::CacheStats>,
    ) -> Result<Self> {
        let mut registry = crate::registry::open(&cfg.registry.url)?;
        let version = registry.version()?;
        let defs = registry.list()?;
        let mut reader = match cfg.redis_url() {
            Some(url) => {
                ProfileReader::new(defs, Some(RedisCache::new(url, &cfg.cache, stats)?), None)
            }
            None => {
                let st = short_term::SqliteStore::open(&cfg.short_term.path)?;
                ProfileReader::new(defs, None, Some(Box::new(st)))
            }
        };
        let registered = reader
            .defs
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner);
        registered.registry = Some(registry);
        registered.version = version;
        Ok(reader)
    }

    /// The tag definitions it types values by.
    pub fn defs(&self) -> Arc<Vec<TagDef>> {
        self.defs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .refreshed()
    }

    /// The cache, if any.
    pub fn cache(&self) -> Option<&RedisCache> {
        self.cache.as_ref()
    }

    /// Waits for the cache's queued backfills: a command that exits after its answer calls
    /// this after printing it (the answer never waits for a backfill).
    pub fn finish(&self) {
        if let Some(cache) = &self.cache {
            cache.finish();
        }
    }

    /// `user`'s tags chosen by `selection`, as `{"user_id", "tags": {code: value}, "source"}`
    /// (`"short_term_unavailable": true` added when the short-term tags could not be read),
    /// at `now_ms`; `None` when the user has no tag at all. One Redis round trip and, on a miss,
    /// one Get.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a user id that cannot be stored; the store (or the SQLite
    /// short-term file) cannot be read. Redis failing is no error: the store answers.
    pub fn get(
        &self,
        store: &dyn TableReader,
        user: &str,
        selection: &Selection,
        now_ms: i64,
    ) -> Result<Option<Value>> {
        let answer = self.read(store, &[user.to_string()], selection, now_ms)?;
        Ok(answer
            .into_iter()
            .next()
            .filter(|p| p["tags"].as_object().is_some_and(|t| !t.is_empty())))
    }

    /// The profiles of `users` (at most [`MAX_BATCH_USERS`]) as [`ProfileReader::get`] gives
    /// them, in the order asked, a user without tags with `"tags": {}`: one Redis round trip for
    /// the cache and the short-term tags, one multi-get of the store for the misses, never a Get
    /// per user.
    ///
    /// # Errors
    /// [`Error::Invalid`] for more than [`MAX_BATCH_USERS`] users or a user id that cannot be
    /// stored (naming it); as [`ProfileReader::get`].
    pub fn get_many(
        &self,
        store: &dyn TableReader,
        users: &[String],
        selection: &Selection,
        now_ms: i64,
    ) -> Result<Vec<Value>> {
        if users.len() > MAX_BATCH_USERS {
            return Err(Error::Invalid(format!(
                "{} users in one batch: at most {MAX_BATCH_USERS}; split the request",
                users.len()
            )));
        }
        self.read(store, users, selection, now_ms)
    }

    fn read(
        &self,
        store: &dyn TableReader,
        users: &[String],
        selection: &Selection,
        now_ms: i64,
    ) -> Result<Vec<Value>> {
        for user in users {
            validate_user_id(user).map_err(|e| Error::Invalid(format!("user {user:?}: {e}")))?;
        }
        let defs = self.defs();
        let short_codes = selection.short_term_codes(&defs);
        let stored = selection.stored_codes(&defs);
        let read_at = Instant::now();
        let (cached, short_ok) = self.read_redis(users, &short_codes, now_ms)?;
        let core = self.cache.as_ref().map(|c| &c.config().core_tags);
        let served: Vec<bool> = cached
            .iter()
            .map(|c| {
                c.entry
                    .as_ref()
                    .zip(core)
                    .is_some_and(|(e, core)| e.answers(stored.as_ref(), core))
            })
            .collect();
        let missed: Vec<usize> = (0..users.len()).filter(|&i| !served[i]).collect();
        let rows = self.store_rows(store, users, &missed)?;
        let mut rows = rows.into_iter();
        let mut answers = Vec::with_capacity(users.len());
        for (i, (user, c)) in users.iter().zip(cached).enumerate() {
            let (mut tags, source) = if served[i] {
                let entry = c.entry.unwrap_or_else(empty);
                if let Some(cache) = &self.cache {
                    bump(&cache.stats().hits);
                }
                (entry.tags, Source::Cache)
            } else {
                let row = rows.next().flatten();
                let tags = stored_tags(&defs, row.as_ref().map_or(&[][..], |r| &r.cells));
                // Only after a Redis read that worked: it gave the generation to check.
                if short_ok {
                    self.maybe_backfill(user, &tags, row.as_ref(), (c.generation, read_at), now_ms);
                }
                (tags, Source::Store)
            };
            tags.retain(|code, _| selection.wants(code));
            for (code, json) in c.short {
                let value = serde_json::from_str(&json).unwrap_or(Value::String(json));
                tags.insert(code, value);
            }
            let mut answer = json!({ "user_id": user, "tags": tags, "source": source.as_str() });
            if !short_ok && !short_codes.is_empty() {
                answer["short_term_unavailable"] = json!(true);
            }
            answers.push(answer);
        }
        Ok(answers)
    }

    /// Each user's cached entry, generation and short-term values: with Redis, one pipeline of
    /// an `MGET` (entries and generations) and an `HGETALL` per user (its short-term hash, the
    /// fields expired at `now_ms` left out), O(1) keys a user whatever the registry's
    /// short-term tags; the short-term file without. `false` when Redis could not be read (so
    /// neither the short-term tags nor the generations are known).
    fn read_redis(
        &self,
        users: &[String],
        short_codes: &[&str],
        now_ms: i64,
    ) -> Result<(Vec<Cached>, bool)> {
        let Some(cache) = &self.cache else {
            let mut cached: Vec<Cached> = users.iter().map(|_| Cached::default()).collect();
            if let (Some(st), false) = (&self.short_term, short_codes.is_empty()) {
                let ids: Vec<&str> = users.iter().map(String::as_str).collect();
                let mut st = st.lock().unwrap_or_else(PoisonError::into_inner);
                for (c, values) in
                    cached
                        .iter_mut()
                        .zip(st.read_users(&ids, short_codes, now_ms / 1000)?)
                {
                    c.short = values;
                }
            }
            return Ok((cached, true));
        };
        let enabled = cache.config().enabled;
        let keys: Vec<String> = if enabled {
            users
                .iter()
                .flat_map(|u| [entry_key(u), gen_key(u)])
                .collect()
        } else {
            Vec::new()
        };
        let hashes: Vec<String> = if short_codes.is_empty() {
            Vec::new()
        } else {
            users.iter().map(|u| short_term::key(u)).collect()
        };
        if keys.is_empty() && hashes.is_empty() {
            return Ok((users.iter().map(|_| Cached::default()).collect(), true));
        }
        let Some((values, fields)) = cache.read(&keys, &hashes) else {
            return Ok((users.iter().map(|_| Cached::default()).collect(), false));
        };
        let mut values = values.into_iter();
        let mut fields = fields.into_iter();
        let now = now_ms.div_euclid(1000);
        let cached = users
            .iter()
            .map(|_| Cached {
                entry: values.next().flatten().and_then(|t| Entry::from_json(&t)),
                generation: values.next().flatten(),
                short: fields
                    .next()
                    .map(|f| short_term::live(f, short_codes, now))
                    .unwrap_or_default(),
            })
            .collect();
        Ok((cached, true))
    }

    /// The rows of `users[i]` for each `i` of `missed`, in that order: one Get for one user,
    /// one multi-get for more.
    fn store_rows(
        &self,
        store: &dyn TableReader,
        users: &[String],
        missed: &[usize],
    ) -> Result<Vec<Option<Row>>> {
        if let Some(cache) = &self.cache {
            for _ in missed {
                bump(&cache.stats().misses);
            }
        }
        Ok(match missed {
            [] => Vec::new(),
            [one] => vec![store.get(PROFILE_TABLE, &profile_row(&users[*one]), None)?],
            _ => {
                let keys: Vec<Vec<u8>> = missed.iter().map(|&i| profile_row(&users[i])).collect();
                store.get_many(PROFILE_TABLE, &keys, None)?
            }
        })
    }

    /// Queues the entry of a row read on a miss, if the user is one to cache.
    fn maybe_backfill(
        &self,
        user: &str,
        tags: &Map<String, Value>,
        row: Option<&Row>,
        (generation, read_at): (Option<String>, Instant),
        now_ms: i64,
    ) {
        let (Some(cache), Some(row)) = (&self.cache, row) else {
            return;
        };
        if !cache.config().enabled {
            return;
        }
        let newest_ms = row.cells.iter().map(|c| c.ts_ms).max().unwrap_or(i64::MIN);
        let entry = cache
            .config()
            .caches(user, newest_ms, now_ms)
            .then(|| Entry::of_profile(tags, newest_ms, cache.config()))
            .flatten();
        match entry {
            Some(entry) => cache.backfill(user, entry, generation, read_at),
            None => bump(&cache.stats().not_cached),
        }
    }

    /// `user`'s tags as [`ProfileReader::get`] gives them from the store (`"source": "store"`),
    /// plus `"versions": {code: [{"value", "ts_ms"}, …]}`: each behaviour tag's last `n` values
    /// (at most the 3 the table keeps), newest first, with their event times.
    ///
    /// # Errors
    /// As [`ProfileReader::get`].
    pub fn versions(
        &self,
        store: &dyn TableReader,
        user: &str,
        n: u32,
        now_ms: i64,
    ) -> Result<Option<Value>> {
        validate_user_id(user).map_err(|e| Error::Invalid(format!("user {user:?}: {e}")))?;
        let selection = Selection::all();
        let defs = self.defs();
        let codes = selection.short_term_codes(&defs);
        let (cached, short_ok) = self.read_redis(&[user.to_string()], &codes, now_ms)?;
        let row = store.get_versions(PROFILE_TABLE, &profile_row(user), None, n.max(1))?;
        let cells = row.as_ref().map_or(&[][..], |r| &r.cells);
        let mut tags = stored_tags(&defs, cells);
        let mut versions = Map::new();
        for cell in cells.iter().filter(|c| c.family == BEHAVIOR_FAMILY) {
            let code = String::from_utf8_lossy(&cell.qualifier).into_owned();
            let value = typed(&defs, &code, Some(BEHAVIOR_FAMILY), &cell.value);
            if let Value::Array(list) = versions.entry(code).or_insert_with(|| json!([])) {
                list.push(json!({ "value": value, "ts_ms": cell.ts_ms }));
            }
        }
        for c in cached {
            for (code, json) in c.short {
                let value = serde_json::from_str(&json).unwrap_or(Value::String(json));
                tags.insert(code, value);
            }
        }
        if tags.is_empty() {
            return Ok(None);
        }
        let mut answer = json!({
            "user_id": user, "tags": tags, "source": Source::Store.as_str(), "versions": versions,
        });
        if !short_ok && !codes.is_empty() {
            answer["short_term_unavailable"] = json!(true);
        }
        Ok(Some(answer))
    }
}

/// The typed tags of a row's cells (each column's newest version).
fn stored_tags(defs: &[TagDef], cells: &[Cell]) -> Map<String, Value> {
    let mut tags = Map::new();
    for cell in cells {
        let code = String::from_utf8_lossy(&cell.qualifier).into_owned();
        if !tags.contains_key(&code) {
            let value = typed(defs, &code, Some(&cell.family), &cell.value);
            tags.insert(code, value);
        }
    }
    tags
}

/// A stored value typed by its tag's `data_type` (the definition of that family, if
/// `family` is given); a cell whose tag the registry no longer defines, or whose text does
/// not read as its type, is given as its text: what is stored is shown, never dropped.
pub(super) fn typed(defs: &[TagDef], code: &str, family: Option<&str>, value: &[u8]) -> Value {
    defs.iter()
        .find(|d| d.tag_code == code && family.is_none_or(|f| family_of(d.value_type) == Some(f)))
        .and_then(|d| CellValue::from_cell(d.data_type, value))
        .and_then(|v| serde_json::from_str(&v.to_json()).ok())
        .unwrap_or_else(|| Value::String(String::from_utf8_lossy(value).into()))
}

fn empty() -> Entry {
    Entry {
        complete: true,
        newest_ms: 0,
        tags: Map::new(),
    }
}

#[cfg(test)]
mod tests;
