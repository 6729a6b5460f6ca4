//! `hourglass bench profile`: profile reads through the real read path (Redis cache first, then
//! the store), Zipf-distributed over a populated store's users, as reads/s, hit ratio and
//! latencies of hits and misses apart; batch reads; audience queries timed over repeats.
//!
//! **The cache's size.** Redis' `maxmemory` is the server's, shared with everyone using it, so
//! the benchmark does not size the cache there: it makes only the hottest `--cache-fraction`
//! of the ranks cacheable (`[cache] high_value_users` = those users, `active_days = 0` so that
//! no other user is), and fills their entries before it measures. That is the steady state of
//! a cache holding that fraction of the users, filled by the reads themselves (an LRU or LFU
//! cache of that size keeps about the same users under a Zipf law). Use a Redis database of its
//! own (`redis://127.0.0.1:6379/13`): entries of another writer would count as hits.

mod http;
pub mod live;
mod reads;
mod users;

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use pipeline::store::BackendArgs;
use serde_json::{json, Map, Value};
use sinks::Reader;

use crate::cache::CacheStats;
use crate::query::{ProfileReader, Selection, MAX_BATCH_USERS};
use crate::{Error, ProfileConfig, Result};

pub use reads::{latencies, Client, Samples};
pub use users::{read_users, scan_users, write_users, Zipf};

/// Flags of `hourglass bench profile`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Profile job configuration (TOML): the registry, `[redis]` (the cache; without it every
    /// read goes to the store), `[cache]`, `[store]`, `[index]`.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Where the tables are: `--store DIR` (embedded) or `--hbase HOST:PORT`.
    #[command(flatten)]
    pub backend: BackendArgs,
    /// Read through `hourglass serve --profile-config` at this base URL
    /// (`http://127.0.0.1:8080`) instead of in-process; the server's own `[cache]` then decides
    /// which users are cached.
    #[arg(long, value_name = "URL")]
    pub http: Option<String>,
    /// Bearer token of the server (`--http`).
    #[arg(long, requires = "http")]
    pub token: Option<String>,
    /// Users the reads are drawn from: the first N of the profile table in key order (MD5
    /// salted, so unrelated to their activity), or of --users-file.
    #[arg(long, default_value_t = 1_000_000)]
    pub users: usize,
    /// User ids, one a line, hottest first; read if it exists, else listed from the store and
    /// written here (a peer then reads the same users).
    #[arg(long, value_name = "FILE")]
    pub users_file: Option<PathBuf>,
    /// Exponent of the Zipf law over the users' ranks.
    #[arg(long, default_value_t = 1.1)]
    pub zipf: f64,
    /// Share of the users the cache holds: the hottest ranks are cacheable, the others not
    /// (see the module doc; in-process only).
    #[arg(long, default_value_t = 0.1)]
    pub cache_fraction: f64,
    /// Timed single reads.
    #[arg(long, default_value_t = 200_000)]
    pub reads: u64,
    /// Untimed Zipf reads after the cache's fill, before the timed ones.
    #[arg(long, default_value_t = 20_000)]
    pub warmup: u64,
    /// Client threads reading at once.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Time batch reads of this many distinct users (`profiles:batchGet`, at most 1000)
    /// instead of single reads.
    #[arg(long, value_name = "USERS")]
    pub batch: Option<usize>,
    /// Timed batches (--batch).
    #[arg(long, default_value_t = 200)]
    pub batches: u64,
    /// Time this audience query instead (`hourglass profile audience`'s language), --repeats
    /// times, from the index of the store (in-process).
    #[arg(long, value_name = "EXPR")]
    pub audience: Option<String>,
    /// Runs of --audience.
    #[arg(long, default_value_t = 20)]
    pub repeats: u32,
    /// Seed of the draws.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Also write the result as JSON to this file.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// Runs the benchmark `args` ask for and returns its result (progress on stderr).
///
/// # Errors
/// The config, the store or the registry cannot be opened; the store holds no profile; a
/// read fails; invalid flags.
pub fn run(args: &BenchArgs) -> Result<Value> {
    if !(0.0..=1.0).contains(&args.cache_fraction) || args.zipf <= 0.0 || args.users == 0 {
        return Err(Error::Invalid(
            "--cache-fraction is 0 to 1, --zipf above 0, --users at least 1".into(),
        ));
    }
    if args.batch.is_some_and(|b| b == 0 || b > MAX_BATCH_USERS) {
        return Err(Error::Invalid(format!(
            "--batch is 1 to {MAX_BATCH_USERS} users"
        )));
    }
    let mut cfg = match &args.config {
        Some(path) => ProfileConfig::load(path)?,
        None => ProfileConfig::default(),
    };
    args.backend.apply(&mut cfg.store);
    let load_before = load_average();
    // With --http the server reads the store: it is opened here only to list the users.
    let listed = args
        .users_file
        .as_deref()
        .is_some_and(std::path::Path::exists);
    let (mut result, location) = if args.http.is_some() && args.audience.is_none() && listed {
        let url = args.http.clone().unwrap_or_default();
        (reads(args, &mut cfg, None)?, url)
    } else {
        let backend =
            pipeline::store::open(&cfg.store, &crate::tables(), &args.backend, true, false)?;
        let store = backend.reader();
        let location = backend.location();
        let result = match &args.audience {
            Some(expr) => audience(&cfg, &store, expr, args.repeats)?,
            None => reads(args, &mut cfg, Some((&store, &location)))?,
        };
        (result, location)
    };
    result["command"] = json!(std::env::args().collect::<Vec<_>>().join(" "));
    result["store"] = json!(location);
    result["load_average"] = json!({ "before": load_before, "after": load_average() });
    if let Some(path) = &args.json {
        let text = serde_json::to_vec_pretty(&result).unwrap_or_default();
        std::fs::write(path, text).map_err(|source| Error::Io {
            path: path.display().to_string(),
            source,
        })?;
    }
    Ok(result)
}

/// The 1-, 5- and 15-minute load averages, if the system gives them.
fn load_average() -> Option<[f64; 3]> {
    let text = std::fs::read_to_string("/proc/loadavg").ok()?;
    let mut it = text.split_whitespace().map(|s| s.parse::<f64>().ok());
    Some([it.next()??, it.next()??, it.next()??])
}

/// The users to draw from, hottest first.
fn user_list(args: &BenchArgs, store: Option<(&Reader, &str)>) -> Result<Vec<String>> {
    let mut ids = match (&args.users_file, store) {
        (Some(path), _) if path.exists() => read_users(path)?,
        (_, None) => {
            return Err(Error::Invalid(
                "no users to read: give --users-file FILE listing them, or --store/--hbase to \
                 list them from the store"
                    .into(),
            ))
        }
        (_, Some((store, location))) => {
            let ids = scan_users(store, args.users, location)?;
            if let Some(path) = &args.users_file {
                write_users(path, &ids)?;
            }
            ids
        }
    };
    if ids.len() < args.users {
        eprintln!(
            "bench profile: only {} users (--users {}): drawing from those",
            ids.len(),
            args.users
        );
    }
    ids.truncate(args.users);
    Ok(ids)
}

/// Whether the Redis at `url` answers a `PING` within a second.
fn redis_answers(url: &str) -> std::result::Result<(), String> {
    let client = redis::Client::open(url).map_err(|e| e.to_string())?;
    let mut conn = client
        .get_connection_with_timeout(Duration::from_secs(1))
        .map_err(|e| e.to_string())?;
    redis::cmd("PING")
        .query::<String>(&mut conn)
        .map(drop)
        .map_err(|e| e.to_string())
}

/// The in-process read path: [`ProfileReader`] over the store.
struct InProcess<'a> {
    reader: &'a ProfileReader,
    store: &'a Reader,
    selection: Selection,
    now_ms: i64,
}

impl Client for InProcess<'_> {
    fn get(&self, user: &str) -> Result<Option<bool>> {
        let answer = self
            .reader
            .get(self.store, user, &self.selection, self.now_ms)?;
        Ok(answer.map(|a| a["source"] == "cache"))
    }

    fn batch(&self, users: &[String]) -> Result<(u64, u64)> {
        let answers = self
            .reader
            .get_many(self.store, users, &self.selection, self.now_ms)?;
        let hits = answers.iter().filter(|a| a["source"] == "cache").count() as u64;
        Ok((hits, answers.len() as u64 - hits))
    }
}

/// The cache's counters as JSON.
fn counters(stats: &CacheStats) -> Value {
    let map: Map<String, Value> = stats
        .counters()
        .into_iter()
        .map(|(name, _, value)| (name.to_string(), json!(value)))
        .collect();
    Value::Object(map)
}

/// The store reader's call counters (HBase's gateway calls; the embedded store has none).
fn store_calls(store: &Reader) -> Map<String, Value> {
    store
        .stats()
        .into_iter()
        .map(|(name, value)| (name, json!(value.value())))
        .collect()
}

/// Each counter of `after` less its value in `before`.
fn diff(before: &Map<String, Value>, after: &Map<String, Value>) -> Value {
    let get = |m: &Map<String, Value>, k: &str| m.get(k).and_then(Value::as_u64).unwrap_or(0);
    Value::Object(
        after
            .keys()
            .map(|k| {
                (
                    k.clone(),
                    json!(get(after, k).saturating_sub(get(before, k))),
                )
            })
            .collect(),
    )
}

/// Reads the cacheable users once, a batch of [`MAX_BATCH_USERS`] at a time, each batch's
/// backfills written before the next (the queue holds about one batch), so the cache holds
/// them all before the timed reads.
fn fill_cache(client: &InProcess<'_>, cacheable: &[String]) -> Result<Value> {
    let Some(cache) = client.reader.cache() else {
        return Ok(json!(null));
    };
    let stats = cache.stats().clone();
    let started = Instant::now();
    let mut said = Instant::now();
    let written = |s: &CacheStats| {
        s.backfilled.load(Ordering::Relaxed)
            + s.backfills_stale.load(Ordering::Relaxed)
            + s.backfills_dropped.load(Ordering::Relaxed)
    };
    let (mut hits, mut misses) = (0, 0);
    for (i, chunk) in cacheable.chunks(MAX_BATCH_USERS).enumerate() {
        let before = written(&stats) + stats.not_cached.load(Ordering::Relaxed);
        let (h, m) = client.batch(chunk)?;
        (hits, misses) = (hits + h, misses + m);
        let waited = Instant::now();
        while written(&stats) + stats.not_cached.load(Ordering::Relaxed) < before + m
            && waited.elapsed() < Duration::from_secs(10)
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        if said.elapsed() >= Duration::from_secs(5) {
            said = Instant::now();
            eprintln!(
                "bench profile: filling the cache: {} of {} users",
                (i + 1) * MAX_BATCH_USERS,
                cacheable.len()
            );
        }
    }
    Ok(json!({
        "users": cacheable.len(),
        "already_cached": hits,
        "read_from_store": misses,
        "secs": reads::round(started.elapsed().as_secs_f64(), 1),
    }))
}

/// Single or batch reads: lists the users, makes the hottest cacheable, fills the cache,
/// warms up, then times.
fn reads(
    args: &BenchArgs,
    cfg: &mut ProfileConfig,
    store: Option<(&Reader, &str)>,
) -> Result<Value> {
    let listed = Instant::now();
    let ids = user_list(args, store)?;
    eprintln!(
        "bench profile: {} users in {:.1} s; Zipf({}) over their ranks",
        ids.len(),
        listed.elapsed().as_secs_f64(),
        args.zipf
    );
    let zipf = Zipf::new(ids.len(), args.zipf);
    let cacheable = ((ids.len() as f64) * args.cache_fraction).round() as usize;
    let mut result = json!({
        "bench": "profile",
        "mode": if args.batch.is_some() { "batch" } else { "single" },
        "users": ids.len(),
        "zipf": args.zipf,
        "threads": args.threads,
        "cacheable_users": cacheable,
        "expected_hit_ratio": reads::round(zipf.mass_of_top(cacheable), 4),
    });
    if let Some(url) = &args.http {
        let client = http::Http::new(url, args.token.as_deref());
        result["read_path"] = json!(format!("HTTP: {url}"));
        result["redis"] = json!("as the server's --profile-config says");
        return measure(args, &client, &ids, &zipf, result);
    }
    let Some((store, _)) = store else {
        return Err(Error::Invalid(
            "reading in-process needs the store: --store DIR or --hbase HOST:PORT".into(),
        ));
    };
    let redis = match cfg.redis_url() {
        None => "none: the config has no [redis], every read goes to the store".to_string(),
        Some(url) => match redis_answers(url) {
            Ok(()) => format!("{} (answers)", crate::registry::redact(url)),
            Err(e) => {
                eprintln!(
                    "bench profile: Redis at {} does not answer ({e}): measuring store-only reads",
                    crate::registry::redact(url)
                );
                format!("unreachable ({e}): every read went to the store")
            }
        },
    };
    result["redis"] = json!(redis);
    cfg.cache.active_days = 0;
    cfg.cache.high_value_users = ids[..cacheable].iter().cloned().collect();
    let stats = Arc::new(CacheStats::default());
    let reader = ProfileReader::open(cfg, stats.clone())?;
    let client = InProcess {
        reader: &reader,
        store,
        selection: Selection::all(),
        now_ms: pipeline::time::now_ms(),
    };
    result["read_path"] =
        json!("in-process: ProfileReader (one Redis pipeline: MGET + HGETALLs, then one Get or multi-get)");
    if redis.ends_with("(answers)") {
        result["fill"] = fill_cache(&client, &ids[..cacheable])?;
    }
    let calls_before = store_calls(store);
    let stats_before = counters(&stats);
    let mut result = measure(args, &client, &ids, &zipf, result)?;
    let stats_after = counters(&stats);
    result["store_calls"] = diff(&calls_before, &store_calls(store));
    if let (Some(before), Some(after)) = (stats_before.as_object(), stats_after.as_object()) {
        result["cache_counters"] = diff(before, after);
    }
    reader.finish();
    Ok(result)
}

/// The warm-up and the timed reads of `args` through `client`, into `result`.
fn measure(
    args: &BenchArgs,
    client: &dyn Client,
    ids: &[String],
    zipf: &Zipf,
    mut result: Value,
) -> Result<Value> {
    if args.warmup > 0 {
        let warm = reads::single_reads(
            client,
            ids,
            zipf,
            args.warmup,
            args.threads,
            args.seed + 1_000_000,
            "warm-up",
        )?;
        result["warmup"] =
            json!({ "reads": warm.reads(), "hit_ratio": reads::round(warm.hit_ratio(), 4) });
    }
    match args.batch {
        None => {
            let samples = reads::single_reads(
                client,
                ids,
                zipf,
                args.reads,
                args.threads,
                args.seed,
                "reads",
            )?;
            if samples.empty > samples.reads() / 100 {
                return Err(Error::Invalid(format!(
                    "{} of {} reads found no profile: the table changed under the benchmark \
                     (emptied or dropped by another process?); populate it again",
                    samples.empty,
                    samples.reads()
                )));
            }
            if let (Value::Object(map), Value::Object(figures)) = (&mut result, samples.to_json()) {
                map.extend(figures);
            }
        }
        Some(size) => {
            let b = reads::batch_reads(
                client,
                ids,
                zipf,
                (args.batches, size),
                args.threads,
                args.seed,
            )?;
            let secs = b.samples.elapsed.as_secs_f64();
            result["batch_users"] = json!(size);
            result["batches"] = json!(b.samples.reads());
            result["secs"] = json!(reads::round(secs, 2));
            result["users_per_s"] =
                json!(((b.hits + b.misses) as f64 / secs.max(1e-9)).round() as u64);
            result["hit_ratio"] = json!(reads::round(
                b.hits as f64 / (b.hits + b.misses).max(1) as f64,
                4
            ));
            result["batch_latency"] = latencies(b.samples.hits);
        }
    }
    Ok(result)
}

/// Times `expr` over `repeats` runs against the index in `store`.
fn audience(cfg: &ProfileConfig, store: &Reader, expr: &str, repeats: u32) -> Result<Value> {
    let defs = crate::registry::open(&cfg.registry.url)?.list()?;
    let mut us = Vec::new();
    let mut found = None;
    for i in 0..repeats.max(1) {
        let started = Instant::now();
        let audience = crate::audience::select(store, expr, &defs, cfg.index.limits())?;
        us.push(u32::try_from(started.elapsed().as_micros()).unwrap_or(u32::MAX));
        if i == 0 {
            eprintln!(
                "bench profile: audience: {} users, {} index rows read, {:.1} ms",
                audience.len(),
                audience.work.index_rows,
                f64::from(us[0]) / 1000.0
            );
        }
        found = Some(audience);
    }
    let found = found.ok_or_else(|| Error::Invalid("no run".into()))?;
    Ok(json!({
        "bench": "profile",
        "mode": "audience",
        "query": expr,
        "repeats": us.len(),
        "count": found.len(),
        "index_rows_read": found.work.index_rows,
        "universe_rows_read": found.work.universe_rows,
        "latency": latencies(us),
    }))
}
