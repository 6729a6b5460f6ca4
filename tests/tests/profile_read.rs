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

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use e2e::hourglass_bin;
use e2e::services::{hbase_up, redis_up, REDIS, THRIFT1, THRIFT2};
use profile::cache::{entry_key, gen_key, CacheConfig, CacheStats, Invalidator, RedisCache};
use profile::merge::{MergeConfig, TagUpdate, UserMerge};
use profile::{CellValue, DataType, ProfileReader, Selection, TagDef, TagStatus, ValueType};
use serde_json::{json, Value};
use sinks::table::{Row, ScanSpec, TableReader, TimeRange};

const REGISTRY: &str =
    "tag_code,name,data_type,value_type,status,ttl_secs,category,owner,update_frequency\n\
dim_city,City,STRING,dimension,online,,geo,crm,daily\n\
beh_buy,Buys,INT,statistic,online,,behaviour,dp,daily\n\
rt_cat,Last category,STRING,short_term,online,3600,realtime,dp,realtime\n";

fn now() -> i64 {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    i64::try_from(secs).unwrap()
}

/// A user id no other run uses.
fn user(name: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{name}-{}-{nanos}", std::process::id())
}

fn redis_url() -> String {
    format!("redis://{REDIS}/0")
}

/// `hourglass args…` in `dir`, on the real clock (Redis expires on it).
fn run(dir: &Path, args: &[&str]) -> Output {
    Command::new(hourglass_bin())
        .args(args)
        .current_dir(dir)
        .env_remove("HOURGLASS_NOW")
        .env_remove("HOURGLASS_LOG")
        .output()
        .expect("running hourglass")
}

fn ok(dir: &Path, args: &[&str]) -> String {
    e2e::ok_stdout(args, run(dir, args))
}

/// A directory with the registry imported and `p.toml` naming it, the store flags and `extra`.
struct Scenario {
    dir: tempfile::TempDir,
    store: Vec<String>,
}

impl Scenario {
    fn new(extra: &str, store: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("reg.csv"), REGISTRY).unwrap();
        let config = format!(
            "[registry]\nurl = \"sqlite://tags.sqlite\"\n[short_term]\npath = \"st.sqlite\"\n{extra}"
        );
        std::fs::write(dir.path().join("p.toml"), config).unwrap();
        ok(
            dir.path(),
            &["tags", "import", "reg.csv", "--config", "p.toml"],
        );
        Scenario {
            dir,
            store: store.iter().map(|s| (*s).to_string()).collect(),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Replays these events (`(user, ts, tags)`) into the store, one replay each: a replay's
    /// merge writes one put per user with each tag's newest value, and the behaviour versions
    /// are those of separate writes.
    fn replay(&self, events: &[(&str, i64, Value)]) {
        for (u, ts, tags) in events {
            let line = json!({"user_id": u, "ts": ts, "tags": tags});
            std::fs::write(self.path().join("ev.jsonl"), format!("{line}\n")).unwrap();
            let mut args = vec![
                "profile", "replay", "ev.jsonl", "--config", "p.toml", "--quiet",
            ];
            args.extend(self.store.iter().map(String::as_str));
            ok(self.path(), &args);
        }
    }

    /// `profile get USER extra…`: the answer, or `None` when it exits 1.
    fn get(&self, user: &str, extra: &[&str]) -> Option<Value> {
        let mut args = vec!["profile", "get", user, "--config", "p.toml"];
        args.extend(self.store.iter().map(String::as_str));
        args.extend(extra);
        let out = run(self.path(), &args);
        if out.status.code() == Some(1) {
            return None;
        }
        Some(serde_json::from_str(&e2e::ok_stdout(&args, out)).unwrap())
    }

    /// `hourglass serve --profile-config p.toml` on a free port, with a token file.
    fn serve(&self) -> Server {
        std::fs::write(self.path().join("token"), "s3cret\n").unwrap();
        let mut args = vec![
            "serve",
            "--profile-config",
            "p.toml",
            "--listen",
            "127.0.0.1:0",
            "--token-file",
            "token",
        ];
        args.extend(self.store.iter().map(String::as_str));
        let mut child = Command::new(hourglass_bin())
            .args(&args)
            .current_dir(self.path())
            .env_remove("HOURGLASS_NOW")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .expect(&line)
            .to_string();
        Server { child, url }
    }
}

/// A running `hourglass serve`, killed when dropped.
struct Server {
    child: Child,
    url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn agent() -> ureq::Agent {
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into()
    }

    /// `(status, body)` of a GET with the token.
    fn get(&self, path: &str) -> (u16, Value) {
        let mut r = Self::agent()
            .get(format!("{}{path}", self.url))
            .header("Authorization", "Bearer s3cret")
            .call()
            .unwrap();
        let text = r.body_mut().read_to_string().unwrap();
        (
            r.status().as_u16(),
            serde_json::from_str(&text).unwrap_or(json!(text)),
        )
    }

    /// `(status, body)` of a POST of `body` with the token.
    fn post(&self, path: &str, body: &str) -> (u16, Value) {
        let mut r = Self::agent()
            .post(format!("{}{path}", self.url))
            .header("Authorization", "Bearer s3cret")
            .header("Content-Type", "application/json")
            .send(body)
            .unwrap();
        let text = r.body_mut().read_to_string().unwrap();
        (
            r.status().as_u16(),
            serde_json::from_str(&text).unwrap_or(json!(text)),
        )
    }
}

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

fn redis_config(extra: &str) -> String {
    format!(
        "[redis]\nurl = {:?}\n[cache]\nretry_after_ms = 100\n{extra}",
        redis_url()
    )
}

fn redis() -> redis::Connection {
    redis::Client::open(redis_url())
        .unwrap()
        .get_connection()
        .unwrap()
}

fn cached(conn: &mut redis::Connection, u: &str) -> Option<Value> {
    let text: Option<String> = redis::cmd("GET").arg(entry_key(u)).query(conn).unwrap();
    text.map(|t| serde_json::from_str(&t).unwrap())
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

fn defs() -> Vec<TagDef> {
    let def = |code: &str, data_type, value_type| TagDef {
        tag_code: code.into(),
        name: code.into(),
        data_type,
        value_type,
        status: TagStatus::Online,
        ttl_secs: None,
        category: String::new(),
        owner: String::new(),
        update_frequency: String::new(),
    };
    vec![def("beh_buy", DataType::Int, ValueType::Statistic)]
}

fn write_buy(store: &sinks::Store, u: &str, ts: i64, n: i64) {
    let mut merge = UserMerge::new(MergeConfig::default());
    merge.push(TagUpdate::new(&defs()[0], u, ts, CellValue::Int(n)));
    let mut w = store.writer();
    w.write(merge.flush().mutations).unwrap();
    w.flush().unwrap();
}

/// A reader whose first `get` runs `hook` after reading the row: the job's write and
/// invalidation landing between a miss's store read and its backfill.
struct Racing<'a> {
    inner: &'a dyn TableReader,
    hook: Mutex<Option<Box<dyn FnOnce() + Send + 'a>>>,
}

impl TableReader for Racing<'_> {
    fn get(&self, table: &str, row: &[u8], time: Option<TimeRange>) -> sinks::Result<Option<Row>> {
        let read = self.inner.get(table, row, time);
        if let Some(hook) = self.hook.lock().unwrap().take() {
            hook();
        }
        read
    }

    fn scan(&self, table: &str, spec: &ScanSpec) -> sinks::Result<Vec<Row>> {
        self.inner.scan(table, spec)
    }
}

fn cache_reader(url: &str, cfg: &CacheConfig) -> (ProfileReader, Arc<CacheStats>) {
    let stats = Arc::new(CacheStats::default());
    let cache = RedisCache::new(url, cfg, stats.clone()).unwrap();
    (ProfileReader::new(defs(), Some(cache), None), stats)
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

/// A TCP proxy to the real Redis that can be taken down (connections cut and refused) and
/// brought back: Redis going away under a running reader.
struct Proxy {
    addr: String,
    up: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let up = Arc::new(AtomicBool::new(true));
        let open: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let (up2, open2) = (up.clone(), open.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                if !up2.load(Ordering::SeqCst) {
                    continue; // dropped: closed at once
                }
                let Ok(server) = TcpStream::connect(REDIS) else {
                    continue;
                };
                let mut open = open2.lock().unwrap();
                open.extend([client.try_clone().unwrap(), server.try_clone().unwrap()]);
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16 * 1024];
                        while let Ok(n @ 1..) = from.read(&mut buf) {
                            if to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = to.shutdown(std::net::Shutdown::Both);
                    });
                }
            }
        });
        Proxy { addr, up, open }
    }

    fn set_up(&self, up: bool) {
        self.up.store(up, Ordering::SeqCst);
        if !up {
            for s in self.open.lock().unwrap().drain(..) {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        }
    }
}

#[test]
fn redis_down_reads_the_store_and_caching_resumes_when_it_returns() {
    if !redis_up() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let cfg = sinks::config::StoreConfig {
        dir: dir.path().join("store"),
        ..Default::default()
    };
    let store = sinks::open(&cfg, &profile::tables(), &sinks::OpenOptions::default()).unwrap();
    let (u, t) = (user("down"), now() - 60);
    write_buy(&store, &u, t, 7);
    let proxy = Proxy::start();
    let url = format!("redis://{}/0", proxy.addr);
    let cache_cfg = CacheConfig {
        retry_after_ms: 100,
        ..CacheConfig::default()
    };
    let (reader, stats) = cache_reader(&url, &cache_cfg);
    let inner = store.reader();
    let read = || {
        reader
            .get(&inner, &u, &Selection::all(), now() * 1000)
            .unwrap()
            .unwrap()
    };
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
    let mut source = json!("store");
    for _ in 0..600 {
        std::thread::sleep(Duration::from_millis(100));
        source = read()["source"].clone();
        if source == "cache" {
            break;
        }
    }
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
    assert_eq!(
        after.1.zip(before.1).map(|(a, b)| a - b),
        Some(1),
        "one getMultiple"
    );
}
