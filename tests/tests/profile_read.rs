//! The profile read path end to end (issue 37 §1–2): `hourglass profile get` (cache first,
//! `--versions`, `--at`), `hourglass serve --profile-config` (`GET /api/v1/profile/{user}`,
//! `POST /api/v1/profiles:batchGet`), the job invalidating `profile:{user}` after it writes the
//! user, the backfill race closed by the generation check, capped entries, and a Redis that
//! goes away and comes back.
//!
//! The embedded store without Redis always runs; the Redis scenarios need the real Redis of
//! `scripts/services.sh up redis` (skipped without it, failing in CI), and the HBase one the
//! live HBase (`scripts/services.sh up hbase`, the same rule). Users have ids unique to the
//! run, so the shared Redis and HBase need no cleaning.

mod profile_read_common;

use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::Duration;

use e2e::services::{hbase_up, redis_up, THRIFT1, THRIFT2};
use profile::cache::{entry_key, gen_key, CacheConfig, Invalidator};
use profile::{ProfileReader, Selection};
use profile_read_common::*;
use serde_json::{json, Value};

/// Events of `u`: a city, three buys a second apart from `t`, a short-term category.
fn events(u: &str, t: i64) -> Vec<(&str, i64, Value)> {
    vec![
        (
            u,
            t,
            json!({"dim_city": "hz", "beh_buy": 1, "rt_cat": "shoes"}),
        ),
        (u, t + 1, json!({"beh_buy": 2})),
        (u, t + 2, json!({"beh_buy": 3})),
    ]
}

/// The CLI and the HTTP API over one store: details, versions, history, batch and errors.
fn reads_agree(s: &Scenario, u: &str, t: i64, source: &str) {
    let p = s.get(u, &[]).expect("a profile");
    assert_eq!(
        p["tags"],
        json!({"dim_city": "hz", "beh_buy": 3, "rt_cat": "shoes"}),
        "{p}"
    );
    assert_eq!(p["source"], source);
    let v = s.get(u, &["--versions", "2"]).unwrap();
    assert_eq!(
        v["versions"]["beh_buy"],
        json!([{"value": 3, "ts_ms": (t + 2) * 1000}, {"value": 2, "ts_ms": (t + 1) * 1000}])
    );
    let at = s.get(u, &["--at", &(t + 1).to_string()]).unwrap();
    assert_eq!(
        (at["tags"].clone(), at["source"].clone()),
        (json!({"dim_city": "hz", "beh_buy": 2}), json!("history"))
    );
    assert_eq!(s.get(u, &["--at", &(t - 1).to_string()]), None);
    assert_eq!(s.get(&user("nobody"), &[]), None);
    let only = s.get(u, &["--families", "dimension,short_term"]).unwrap();
    assert_eq!(only["tags"], json!({"dim_city": "hz", "rt_cat": "shoes"}));
}

fn http_reads(s: &Scenario, u: &str, t: i64) {
    let server = s.serve();
    let (status, p) = server.get(&format!("/api/v1/profile/{u}"));
    assert_eq!(status, 200, "{p}");
    assert_eq!(
        p["tags"],
        json!({"dim_city": "hz", "beh_buy": 3, "rt_cat": "shoes"})
    );
    let (_, v) = server.get(&format!("/api/v1/profile/{u}?versions=3"));
    assert_eq!(
        v["versions"]["beh_buy"].as_array().map(Vec::len),
        Some(3),
        "{v}"
    );
    let (_, at) = server.get(&format!("/api/v1/profile/{u}?at={}", t + 1));
    assert_eq!(at["tags"]["beh_buy"], 2, "{at}");
    assert_eq!(server.get("/api/v1/profile/nobody-here").0, 404);
    assert_eq!(server.get("/api/v1/profile/a_b").0, 400);
    assert_eq!(server.get(&format!("/api/v1/profile/{u}?tags=nope")).0, 400);
    let body = json!({"users": [u, "nobody-here"], "tags": ["beh_buy", "rt_cat"]}).to_string();
    let (status, b) = server.post("/api/v1/profiles:batchGet", &body);
    assert_eq!(status, 200, "{b}");
    assert_eq!(
        b["profiles"][0]["tags"],
        json!({"beh_buy": 3, "rt_cat": "shoes"}),
        "{b}"
    );
    assert_eq!(
        (
            b["profiles"][1]["user_id"].clone(),
            b["profiles"][1]["tags"].clone()
        ),
        (json!("nobody-here"), json!({}))
    );
    let fam = json!({"users": [u], "families": ["dimension"]}).to_string();
    assert_eq!(
        server.post("/api/v1/profiles:batchGet", &fam).1["profiles"][0]["tags"],
        json!({"dim_city": "hz"})
    );
    let many: Vec<String> = (0..1001).map(|i| format!("u{i}")).collect();
    let (status, e) = server.post(
        "/api/v1/profiles:batchGet",
        &json!({"users": many}).to_string(),
    );
    assert_eq!(status, 400, "{e}");
    assert!(e["error"].as_str().unwrap().contains("at most 1000"), "{e}");
    assert_eq!(
        server.post("/api/v1/profiles:batchGet", "{\"user\": []}").0,
        400
    );
    assert_eq!(server.post("/api/v1/profiles:batchGet", "not json").0, 400);
    let unauthorized = Server::agent()
        .get(format!("{}/api/v1/profile/{u}", server.url))
        .call()
        .unwrap();
    assert_eq!(unauthorized.status().as_u16(), 401);
}

#[test]
fn embedded_store_without_redis() {
    let s = Scenario::new("", &["--store", "store"]);
    let (u, t) = (user("emb"), now() - 600);
    s.replay(&events(&u, t));
    reads_agree(&s, &u, t, "store");
    http_reads(&s, &u, t);
}

#[test]
fn the_cache_fills_after_a_miss_and_the_job_invalidates_it() {
    if !redis_up() {
        return;
    }
    let s = Scenario::new(&redis_config(""), &["--store", "store"]);
    let (u, t) = (user("hot"), now() - 600);
    s.replay(&events(&u, t));
    let mut conn = redis();
    assert_eq!(cached(&mut conn, &u), None, "the job's write left no entry");
    reads_agree(&s, &u, t, "store");
    // The first read's backfill was written before its process exited.
    let entry = cached(&mut conn, &u).expect("an entry after the miss");
    assert_eq!(
        entry["tags"],
        json!({"dim_city": "hz", "beh_buy": 3}),
        "{entry}"
    );
    assert_eq!(entry["complete"], true);
    let ttl: i64 = redis::cmd("TTL")
        .arg(entry_key(&u))
        .query(&mut conn)
        .unwrap();
    assert!((1..=600).contains(&ttl), "{ttl}");
    let hit = s.get(&u, &[]).unwrap();
    assert_eq!(
        (hit["source"].clone(), hit["tags"]["rt_cat"].clone()),
        (json!("cache"), json!("shoes"))
    );
    // A new value: the job deletes the entry once the row is durable, the next read sees it.
    s.replay(&[(&u, t + 3, json!({"beh_buy": 4}))]);
    assert_eq!(cached(&mut conn, &u), None, "invalidated by the job");
    let gen: Option<String> = redis::cmd("GET").arg(gen_key(&u)).query(&mut conn).unwrap();
    assert!(gen.is_some(), "a new generation");
    let fresh = s.get(&u, &[]).unwrap();
    assert_eq!(
        (fresh["source"].clone(), fresh["tags"]["beh_buy"].clone()),
        (json!("store"), json!(4))
    );
    assert_eq!(s.get(&u, &[]).unwrap()["source"], "cache");
    // An inactive user (newest tag 8 days old) is read but not cached.
    let old = user("old");
    s.replay(&[(&old, now() - 8 * 86_400, json!({"dim_city": "sh"}))]);
    assert_eq!(s.get(&old, &[]).unwrap()["source"], "store");
    assert_eq!(cached(&mut conn, &old), None);
    // Served over HTTP: a hit, and the counters in /metrics.
    let server = s.serve();
    let (_, p) = server.get(&format!("/api/v1/profile/{u}"));
    assert_eq!(p["source"], "cache", "{p}");
    let (_, b) = server.post(
        "/api/v1/profiles:batchGet",
        &json!({"users": [u, old]}).to_string(),
    );
    let sources: Vec<&Value> = b["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["source"])
        .collect();
    assert_eq!(sources, [&json!("cache"), &json!("store")], "{b}");
    let mut r = Server::agent()
        .get(format!("{}/metrics", server.url))
        .header("Authorization", "Bearer s3cret")
        .call()
        .unwrap();
    let metrics = r.body_mut().read_to_string().unwrap();
    let sample = |name: &str| {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse::<f64>().ok())
    };
    assert!(metrics.ends_with("# EOF\n"), "{metrics}");
    assert_eq!(
        sample("hourglass_profile_cache_hits_total"),
        Some(2.0),
        "{metrics}"
    );
    assert_eq!(
        sample("hourglass_profile_cache_misses_total"),
        Some(1.0),
        "{metrics}"
    );
    assert_eq!(
        sample("hourglass_profile_cache_redis_errors_total"),
        Some(0.0),
        "{metrics}"
    );
}

#[test]
fn a_capped_entry_is_not_served_as_the_whole_profile() {
    if !redis_up() {
        return;
    }
    let s = Scenario::new(
        &redis_config("core_tags = [\"dim_city\"]\n"),
        &["--store", "store"],
    );
    let (u, t) = (user("cap"), now() - 60);
    s.replay(&events(&u, t));
    assert_eq!(s.get(&u, &[]).unwrap()["source"], "store");
    let entry = cached(&mut redis(), &u).expect("a capped entry");
    assert_eq!(
        (entry["complete"].clone(), entry["tags"].clone()),
        (json!(false), json!({"dim_city": "hz"}))
    );
    let whole = s.get(&u, &[]).unwrap();
    assert_eq!(
        whole["source"], "store",
        "the whole profile is not the capped entry"
    );
    assert_eq!(whole["tags"]["beh_buy"], 3);
    let core = s.get(&u, &["--tags", "dim_city"]).unwrap();
    assert_eq!(
        (core["source"].clone(), core["tags"].clone()),
        (json!("cache"), json!({"dim_city": "hz"}))
    );
    let mixed = s.get(&u, &["--tags", "dim_city,beh_buy"]).unwrap();
    assert_eq!(mixed["source"], "store");
}

#[test]
fn a_backfill_of_a_row_read_before_a_write_is_not_stored() {
    if !redis_up() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = sinks::config::StoreConfig {
        dir: dir.path().join("store"),
        ..Default::default()
    };
    let store = sinks::open(&cfg, &profile::tables(), &sinks::OpenOptions::default()).unwrap();
    let (u, t) = (user("race"), now() - 60);
    write_buy(&store, &u, t, 1);
    let inner = store.reader();
    let racing = Racing {
        inner: &inner,
        hook: Mutex::new(Some(Box::new(|| {
            write_buy(&store, &u, t + 1, 2);
            Invalidator::new(&redis_url())
                .unwrap()
                .invalidate(&[&u])
                .unwrap();
        }))),
    };
    let (reader, stats) = cache_reader(&redis_url(), &CacheConfig::default());
    let now_ms = now() * 1000;
    let old = reader
        .get(&racing, &u, &Selection::all(), now_ms)
        .unwrap()
        .unwrap();
    assert_eq!(old["tags"]["beh_buy"], 1, "read before the write");
    reader.finish();
    assert_eq!(stats.backfills_stale.load(Ordering::Relaxed), 1);
    assert_eq!(
        cached(&mut redis(), &u),
        None,
        "the stale backfill was not stored"
    );
    // Without a write in between, the backfill is stored and the next read hits.
    let (reader, stats) = cache_reader(&redis_url(), &CacheConfig::default());
    let fresh = reader
        .get(&inner, &u, &Selection::all(), now_ms)
        .unwrap()
        .unwrap();
    assert_eq!(
        (fresh["source"].clone(), fresh["tags"]["beh_buy"].clone()),
        (json!("store"), json!(2))
    );
    reader.finish();
    assert_eq!(stats.backfilled.load(Ordering::Relaxed), 1);
    let (reader, _) = cache_reader(&redis_url(), &CacheConfig::default());
    assert_eq!(
        reader
            .get(&inner, &u, &Selection::all(), now_ms)
            .unwrap()
            .unwrap()["source"],
        "cache"
    );
}

/// An embedded store holding one user's `beh_buy`, read through the cache in a Redis reached
/// through a [`Proxy`] that can be cut (`retry_after_ms` 100).
struct Proxied {
    _dir: tempfile::TempDir,
    store: sinks::Store,
    inner: sinks::Reader,
    proxy: Proxy,
    reader: ProfileReader,
    stats: std::sync::Arc<profile::cache::CacheStats>,
    user: String,
    /// The stamp of the user's value, seconds.
    t: i64,
}

impl Proxied {
    /// `user(name)` with `beh_buy = n`, stamped a minute ago, and a reader with `cache`.
    fn new(name: &str, n: i64, cache: CacheConfig) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let cfg = sinks::config::StoreConfig {
            dir: dir.path().join("store"),
            ..Default::default()
        };
        let store = sinks::open(&cfg, &profile::tables(), &sinks::OpenOptions::default()).unwrap();
        let (user, t) = (user(name), now() - 60);
        write_buy(&store, &user, t, n);
        let proxy = Proxy::start();
        let url = format!("redis://{}/0", proxy.addr);
        let cache = CacheConfig {
            retry_after_ms: 100,
            ..cache
        };
        let (reader, stats) = cache_reader(&url, &cache);
        Proxied {
            _dir: dir,
            inner: store.reader(),
            store,
            proxy,
            reader,
            stats,
            user,
            t,
        }
    }

    /// The user's profile, read now.
    fn read(&self) -> Value {
        self.reader
            .get(&self.inner, &self.user, &Selection::all(), now() * 1000)
            .unwrap()
            .unwrap()
    }
}

/// Reads until `done` holds of the answer, at most a minute (a liveness bound, not a speed
/// claim: the near cache's invalidations are asynchronous).
fn read_until(read: impl Fn() -> Value, done: impl Fn(&Value) -> bool) -> Value {
    let mut p = read();
    for _ in 0..600 {
        if done(&p) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
        p = read();
    }
    p
}

#[test]
fn redis_down_reads_the_store_and_caching_resumes_when_it_returns() {
    if !redis_up() {
        return;
    }
    let p = Proxied::new("down", 7, CacheConfig::default());
    let (proxy, stats) = (&p.proxy, &p.stats);
    let read = || p.read();
    proxy.set_up(false);
    let p = read();
    assert_eq!(
        (p["source"].clone(), p["tags"]["beh_buy"].clone()),
        (json!("store"), json!(7))
    );
    assert!(stats.redis_errors.load(Ordering::Relaxed) >= 1, "counted");
    proxy.set_up(true);
    // The reader rests 100 ms after an error, then connects again by itself; the backfill
    // thread is asynchronous, so the first hit comes a few reads later (a liveness bound of
    // a minute, not a speed claim).
    let source = read_until(read, |p| p["source"] == "cache")["source"].clone();
    assert_eq!(
        source,
        "cache",
        "caching resumed after Redis returned: {:?}",
        stats.counters()
    );
}

#[test]
fn hbase_reads_and_one_multi_get_per_batch() {
    if !redis_up() || !hbase_up("the profile reads against HBase") {
        return;
    }
    let hbase = ["--hbase", THRIFT1, "--thrift2", THRIFT2];
    let s = Scenario::new(&redis_config(""), &hbase);
    // Both jobs' tables, made if missing (a table that exists is left as it is).
    ok(s.path(), &["tables", "create", "--hbase", THRIFT1]);
    let (u, t) = (user("hb"), now() - 600);
    let (v, w) = (user("hbv"), user("hbw"));
    let mut all = events(&u, t);
    all.push((&v, t, json!({"dim_city": "bj"})));
    all.push((&w, t, json!({"beh_buy": 9})));
    s.replay(&all);
    reads_agree(&s, &u, t, "store");
    assert_eq!(s.get(&u, &[]).unwrap()["source"], "cache");
    s.replay(&[(&u, t + 3, json!({"beh_buy": 4}))]);
    assert_eq!(
        cached(&mut redis(), &u),
        None,
        "invalidated after the HBase flush"
    );
    let mut cfg = sinks::config::StoreConfig {
        kind: sinks::config::StoreKind::Hbase,
        hbase: Some(THRIFT1.into()),
        ..Default::default()
    };
    cfg.hbase_client.thrift2 = Some(THRIFT2.into());
    let store = sinks::open(&cfg, &profile::tables(), &sinks::OpenOptions::default()).unwrap();
    let reader = store.reader();
    let before = (reader.stat("get_row_calls"), reader.stat("get_rows_calls"));
    let profiles = ProfileReader::new(defs(), None, None)
        .get_many(
            &reader,
            &[u.clone(), v.clone(), w.clone()],
            &Selection::all(),
            now() * 1000,
        )
        .unwrap();
    assert_eq!(profiles[0]["tags"], json!({"dim_city": "hz", "beh_buy": 4}));
    assert_eq!(profiles[1]["tags"], json!({"dim_city": "bj"}));
    assert_eq!(profiles[2]["tags"], json!({"beh_buy": 9}));
    let after = (reader.stat("get_row_calls"), reader.stat("get_rows_calls"));
    assert_eq!(after.0, before.0, "no Get per user");
    // Three rows are one getMultiple (fewer than a call's rows, fewer than it takes to cut
    // them into parallel calls), whatever regions they fall in.
    assert_eq!(
        after.1.zip(before.1).map(|(a, b)| a - b),
        Some(1),
        "one getMultiple for three users"
    );
    let counted: u64 = reader
        .region_reads()
        .iter()
        .filter(|r| r.table == profile::PROFILE_TABLE)
        .map(|r| r.rows)
        .sum();
    assert_eq!(counted, 3, "each row counted in its region");

    // The server's /metrics: the reads per region of the profile reads it served.
    let server = s.serve();
    let body = json!({"users": [u, v, w]}).to_string();
    assert_eq!(server.post("/api/v1/profiles:batchGet", &body).0, 200);
    let mut r = Server::agent()
        .get(format!("{}/metrics", server.url))
        .header("Authorization", "Bearer s3cret")
        .call()
        .unwrap();
    let text = r.body_mut().read_to_string().unwrap();
    let regions: Vec<(&str, f64)> = text
        .lines()
        .filter_map(|l| {
            let rest = l.strip_prefix("hourglass_profile_store_region_reads_total{region=\"")?;
            let (labels, value) = rest.rsplit_once("} ")?;
            Some((labels, value.parse().ok()?))
        })
        .collect();
    // The batch's rows are cache hits or misses; the misses were read, each in its region,
    // labelled with its encoded name and start key.
    assert!(!regions.is_empty(), "{text}");
    assert!(
        regions
            .iter()
            .all(|(labels, n)| labels.contains("\",start=\"") && *n >= 1.0),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with(
            "hourglass_profile_store_read_duration_seconds_count{call=\"multi_get\"} "
        )),
        "{text}"
    );
}

#[test]
fn the_near_cache_answers_hot_reads_and_drops_what_redis_says_changed() {
    if !redis_up() {
        return;
    }
    let p = Proxied::new(
        "near",
        1,
        CacheConfig {
            near_mib: 8,
            ..CacheConfig::default()
        },
    );
    let (u, t, proxy, stats) = (&p.user, p.t, &p.proxy, &p.stats);
    let read = || p.read();
    let near_reads = || stats.near_reads.load(Ordering::Relaxed);
    // A miss, its backfill, then hits: once the subscriber is up, a hit's keys are kept and
    // the next read makes no Redis call.
    assert_eq!(read()["source"], "store");
    let hit = read_until(read, |_| near_reads() > 0);
    assert_eq!(
        (hit["source"].clone(), hit["tags"]["beh_buy"].clone()),
        (json!("cache"), json!(1))
    );
    assert!(near_reads() > 0, "{:?}", stats.counters());
    let before = near_reads();
    assert_eq!(read()["tags"]["beh_buy"], 1);
    assert_eq!(near_reads(), before + 1, "answered near, no Redis call");

    // The job writes the user and invalidates it: Redis tells the subscriber, the near copy is
    // dropped, and a read sees the new value (from the store, then cached again).
    write_buy(&p.store, u, t + 1, 2);
    Invalidator::new(&redis_url())
        .unwrap()
        .invalidate(&[u])
        .unwrap();
    let fresh = read_until(read, |p| p["tags"]["beh_buy"] == 2);
    assert_eq!(fresh["tags"]["beh_buy"], 2, "{:?}", stats.counters());
    assert!(
        stats.near_invalidations.load(Ordering::Relaxed) >= 2,
        "entry and generation"
    );

    // A key changed by any client (here the entry deleted by hand) is dropped as well. The
    // backfills are stopped first, so that none queued by an earlier miss puts the entry back.
    let hot = read_until(read, |_| near_reads() > before + 1);
    assert_eq!(hot["tags"]["beh_buy"], 2);
    p.reader.finish();
    let _: () = redis::cmd("DEL")
        .arg(entry_key(u))
        .query(&mut redis())
        .unwrap();
    let missed = read_until(read, |p| p["source"] == "store");
    assert_eq!(missed["source"], "store", "the deleted entry is not served");

    // The subscriber lost (Redis cut): nothing near survives it, reads go to the store, and
    // the near cache works again once Redis is back.
    proxy.set_up(false);
    let cut = read_until(read, |p| p["source"] == "store");
    assert_eq!(
        (cut["source"].clone(), cut["tags"]["beh_buy"].clone()),
        (json!("store"), json!(2))
    );
    proxy.set_up(true);
    let again = near_reads();
    read_until(read, |_| near_reads() > again);
    assert!(near_reads() > again, "{:?}", stats.counters());
}
