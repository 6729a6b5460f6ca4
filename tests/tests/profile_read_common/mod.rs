//! Shared by `profile_read.rs`: a scenario directory (registry, config, store flags), the
//! `hourglass` commands and server it runs, Redis helpers, and a proxy that takes Redis away.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use e2e::hourglass_bin;
use e2e::services::REDIS;
use profile::cache::{entry_key, CacheConfig, CacheStats, RedisCache};
use profile::merge::{MergeConfig, TagUpdate, UserMerge};
use profile::{CellValue, DataType, ProfileReader, TagDef, TagStatus, ValueType};
use serde_json::{json, Value};
use sinks::table::{Row, ScanSpec, TableReader, TimeRange};

pub const REGISTRY: &str =
    "tag_code,name,data_type,value_type,status,ttl_secs,category,owner,update_frequency\n\
dim_city,City,STRING,dimension,online,,geo,crm,daily\n\
beh_buy,Buys,INT,statistic,online,,behaviour,dp,daily\n\
rt_cat,Last category,STRING,short_term,online,3600,realtime,dp,realtime\n";

pub fn now() -> i64 {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    i64::try_from(secs).unwrap()
}

/// A user id no other run uses.
pub fn user(name: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{name}-{}-{nanos}", std::process::id())
}

pub fn redis_url() -> String {
    format!("redis://{REDIS}/0")
}

/// `hourglass args…` in `dir`, on the real clock (Redis expires on it).
pub fn run(dir: &Path, args: &[&str]) -> Output {
    Command::new(hourglass_bin())
        .args(args)
        .current_dir(dir)
        .env_remove("HOURGLASS_NOW")
        .env_remove("HOURGLASS_LOG")
        .output()
        .expect("running hourglass")
}

pub fn ok(dir: &Path, args: &[&str]) -> String {
    e2e::ok_stdout(args, run(dir, args))
}

/// A directory with the registry imported and `p.toml` naming it, the store flags and `extra`.
pub struct Scenario {
    pub dir: tempfile::TempDir,
    pub store: Vec<String>,
}

impl Scenario {
    pub fn new(extra: &str, store: &[&str]) -> Self {
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

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Replays these events (`(user, ts, tags)`) into the store, one replay each: a replay's
    /// merge writes one put per user with each tag's newest value, and the behaviour versions
    /// are those of separate writes.
    pub fn replay(&self, events: &[(&str, i64, Value)]) {
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
    pub fn get(&self, user: &str, extra: &[&str]) -> Option<Value> {
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
    pub fn serve(&self) -> Server {
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
pub struct Server {
    child: Child,
    pub url: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    pub fn agent() -> ureq::Agent {
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into()
    }

    /// `(status, body)` of a GET with the token.
    pub fn get(&self, path: &str) -> (u16, Value) {
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
    pub fn post(&self, path: &str, body: &str) -> (u16, Value) {
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

pub fn redis_config(extra: &str) -> String {
    format!(
        "[redis]\nurl = {:?}\n[cache]\nretry_after_ms = 100\n{extra}",
        redis_url()
    )
}

pub fn redis() -> redis::Connection {
    redis::Client::open(redis_url())
        .unwrap()
        .get_connection()
        .unwrap()
}

pub fn cached(conn: &mut redis::Connection, u: &str) -> Option<Value> {
    let text: Option<String> = redis::cmd("GET").arg(entry_key(u)).query(conn).unwrap();
    text.map(|t| serde_json::from_str(&t).unwrap())
}

pub fn defs() -> Vec<TagDef> {
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

pub fn write_buy(store: &sinks::Store, u: &str, ts: i64, n: i64) {
    let mut merge = UserMerge::new(MergeConfig::default());
    merge.push(TagUpdate::new(&defs()[0], u, ts, CellValue::Int(n)));
    let mut w = store.writer();
    w.write(merge.flush().mutations).unwrap();
    w.flush().unwrap();
}

/// A reader whose first `get` runs `hook` after reading the row: the job's write and
/// invalidation landing between a miss's store read and its backfill.
pub struct Racing<'a> {
    pub inner: &'a dyn TableReader,
    pub hook: Mutex<Option<Box<dyn FnOnce() + Send + 'a>>>,
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

pub fn cache_reader(url: &str, cfg: &CacheConfig) -> (ProfileReader, Arc<CacheStats>) {
    let stats = Arc::new(CacheStats::default());
    let cache = RedisCache::new(url, cfg, stats.clone()).unwrap();
    (ProfileReader::new(defs(), Some(cache), None), stats)
}

/// A TCP proxy to the real Redis that can be taken down (connections cut and refused) and
/// brought back: Redis going away under a running reader.
pub struct Proxy {
    pub addr: String,
    up: Arc<AtomicBool>,
    open: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    pub fn start() -> Self {
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

    pub fn set_up(&self, up: bool) {
        self.up.store(up, Ordering::SeqCst);
        if !up {
            for s in self.open.lock().unwrap().drain(..) {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        }
    }
}
