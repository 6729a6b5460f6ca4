//! A changed tag is visible through the read API of a live job, past a stale cache entry:
//! `hourglass profile run --serve` consumes tag events from Kafka into an embedded store with
//! the Redis cache on; a user read once (so that `profile:{user}` holds the old value, with
//! 10 minutes to live) must show the new value after the job writes it, which only the job's
//! invalidation can make happen. Needs Kafka and Redis (`scripts/services.sh up kafka redis`):
//! skips without them outside CI, fails in CI. No speed is asserted (`hourglass profile
//! bench-live` measures it): each wait polls with a generous give-up.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use e2e::job::{announced_address, sigterm};
use e2e::services::{kafka_up, redis_up, unique, BROKER, REDIS};
use e2e::{hourglass_bin, KillOnDrop};
use serde_json::{json, Value};

/// Longest wait for the job to show what it was given: a bound for a hung job, not a speed.
const GIVE_UP: Duration = Duration::from_secs(120);

const REGISTRY: &str =
    "tag_code,name,data_type,value_type,status,ttl_secs,category,owner,update_frequency\n\
dim_city,City,STRING,dimension,online,,geo,crm,daily\n\
beh_buy,Buys,INT,statistic,online,,behaviour,dp,daily\n";

fn now() -> i64 {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs();
    i64::try_from(secs).expect("seconds fit")
}

/// `hourglass args…` in `dir` on the real clock (Redis expires on it); its stdout.
fn ok(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(hourglass_bin())
        .args(args)
        .current_dir(dir)
        .env_remove("HOURGLASS_NOW")
        .env_remove("HOURGLASS_LOG")
        .output()
        .expect("running hourglass");
    e2e::ok_stdout(args, out)
}

/// Publishes `events` (`(user, ts, tags)`) to `topic`, keyed by user.
fn publish(dir: &Path, topic: &str, events: &[(&str, i64, Value)]) {
    let text: String = events
        .iter()
        .map(|(user, ts, tags)| format!("{}\n", json!({"user_id": user, "ts": ts, "tags": tags})))
        .collect();
    std::fs::write(dir.join("ev.jsonl"), text).expect("writing the events");
    ok(
        dir,
        &[
            "produce",
            "ev.jsonl",
            "--brokers",
            BROKER,
            "--topic",
            topic,
            "--partitions",
            "2",
            "--key",
            "user_id",
        ],
    );
}

/// `GET /api/v1/profile/{user}`: its status and body.
fn get(addr: &str, user: &str) -> (u16, Value) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut r = agent
        .get(format!("http://{addr}/api/v1/profile/{user}"))
        .call()
        .expect("GET /api/v1/profile");
    let text = r.body_mut().read_to_string().expect("a body");
    (
        r.status().as_u16(),
        serde_json::from_str(&text).unwrap_or(json!(text)),
    )
}

/// Reads `user` until `done` says the answer is the one awaited, for at most [`GIVE_UP`];
/// returns the last answer either way.
fn poll(addr: &str, user: &str, done: impl Fn(u16, &Value) -> bool) -> (u16, Value) {
    let started = Instant::now();
    loop {
        let (status, body) = get(addr, user);
        if done(status, &body) || started.elapsed() > GIVE_UP {
            return (status, body);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_changed_tag_replaces_a_stale_cache_entry_through_the_live_read_api() {
    if !kafka_up() || !redis_up() {
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let d = dir.path();
    let topic = unique("profile-fresh");
    std::fs::write(d.join("reg.csv"), REGISTRY).expect("writing the registry");
    std::fs::write(
        d.join("p.toml"),
        format!(
            "[registry]\nurl = \"sqlite://tags.sqlite\"\n[short_term]\npath = \"st.sqlite\"\n\
             [redis]\nurl = \"redis://{REDIS}/0\"\n[source]\nbrokers = {BROKER:?}\n\
             topic = {topic:?}\ngroup_id = {topic:?}\n[store]\nkind = \"embedded\"\n\
             dir = \"store\"\n"
        ),
    )
    .expect("writing the config");
    ok(d, &["tags", "import", "reg.csv", "--config", "p.toml"]);
    let user = format!("fresh-{}", unique("u"));
    let other = format!("other-{}", unique("u"));
    let t = now();
    publish(
        d,
        &topic,
        &[
            (&user, t - 60, json!({"dim_city": "hz", "beh_buy": 1})),
            (&other, t - 60, json!({"dim_city": "bj"})),
        ],
    );

    let mut child = Command::new(hourglass_bin())
        .args([
            "profile",
            "run",
            "--config",
            "p.toml",
            "--serve",
            "127.0.0.1:0",
            "--dead-letter",
            "dead.jsonl",
            "--stats-json",
            "stats.json",
        ])
        .current_dir(d)
        .env_remove("HOURGLASS_NOW")
        .env_remove("HOURGLASS_LOG")
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting profile run");
    let (addr, log) = announced_address(&mut child, "profile api: http://", "/");
    let mut job = KillOnDrop(Some(child));

    // The first value, then the same answer again from the cache: the backfill of the first
    // read is asynchronous, so the entry lands a moment later.
    let (status, first) = poll(&addr, &user, |s, b| {
        s == 200 && b["tags"]["dim_city"] == "hz"
    });
    assert_eq!(status, 200, "{first}\n{}", log.lock().unwrap());
    assert_eq!(first["tags"], json!({"dim_city": "hz", "beh_buy": 1}));
    let (_, cached) = poll(&addr, &user, |_, b| b["source"] == "cache");
    assert_eq!(cached["source"], "cache", "{cached}");
    assert_eq!(cached["tags"]["dim_city"], "hz", "{cached}");

    // The change: the stale entry lives for 10 minutes, so the new value can only show
    // because the job invalidated it after writing the user.
    publish(d, &topic, &[(&user, t, json!({"dim_city": "sh"}))]);
    let (status, changed) = poll(&addr, &user, |_, b| b["tags"]["dim_city"] == "sh");
    assert_eq!(status, 200, "{changed}\n{}", log.lock().unwrap());
    assert_eq!(
        changed["tags"],
        json!({"dim_city": "sh", "beh_buy": 1}),
        "{changed}\n{}",
        log.lock().unwrap()
    );
    // Read again: cached anew or from the store, the answer stays the new one.
    let (_, again) = poll(&addr, &user, |_, b| b["source"] == "cache");
    assert_eq!(again["tags"]["dim_city"], "sh", "{again}");
    // The other user was never changed: its answer is its own. It went to the topic's other
    // partition (or may have), and partitions are read independently: its first record can
    // land after the user's second, so it is polled for, not read once.
    let (_, untouched) = poll(&addr, &other, |s, _| s == 200);
    assert_eq!(untouched["tags"], json!({"dim_city": "bj"}), "{untouched}");

    let child = job.0.take().expect("the job");
    sigterm(&child);
    e2e::job::wait_ok(child, "profile run");
    let stats: Value = serde_json::from_slice(
        &std::fs::read(d.join("stats.json")).expect("the job's --stats-json"),
    )
    .expect("stats JSON");
    assert_eq!(
        (&stats["read"], &stats["rejected"]),
        (&json!(3), &json!(0)),
        "{stats}"
    );
    // The user was written twice, in two flushes.
    assert!(
        stats["users_flushed"].as_u64().is_some_and(|n| n >= 3),
        "{stats}"
    );
}
