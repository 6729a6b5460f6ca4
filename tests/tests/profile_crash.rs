//! `hourglass profile run` killed with SIGKILL at random points while `hourglass produce`
//! publishes generated tag events, restarted each time, then run to idle: the tables, the
//! short-term store and the dead letters end exactly as a `profile replay` of the same file
//! leaves them, and the last run resumed from committed offsets.
//!
//! Why the end state can be compared at all: a restart re-reads the records after the last
//! committed offset, some already written; the newest event time per user and tag wins (cells
//! are stamped with it, history rows keyed by it), so writing them again changes nothing.
//!
//! The `make test` variant runs into the embedded store (Kafka only); the SIGKILL ×20 variant
//! into HBase is a soak test (`#[ignore]`, `make soak`). Without a broker (or HBase) they skip,
//! except in CI (`CI` set), where they fail.

use std::collections::{BTreeMap, BTreeSet};
use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use e2e::job::Rng;
use e2e::services::{kafka_up, service_up, unique, BROKER, THRIFT1};
use e2e::{hourglass_command, read_jsonl, KillOnDrop};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use serde_json::Value;

/// `HOURGLASS_NOW` of every command: the events end a minute before it, so the short-term
/// tags of the last hours are live and what expired is the same for every run.
const NOW: i64 = 1_796_486_460;
/// Seconds the events cover.
const SPAN: i64 = 86_400;
/// Partitions of the topic: `produce --key user_id` keeps each user's events in one of them,
/// in order, as a real producer of tag events would.
const PARTITIONS: &str = "2";

/// Where the run writes its tables.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Store {
    Embedded,
    Hbase,
}

/// How hard a scenario pushes.
struct Plan {
    seed: &'static str,
    users: &'static str,
    events: &'static str,
    /// Records published per second.
    rate: &'static str,
    /// Kills at least (more while the producer runs).
    kills: usize,
    /// A run lives this many milliseconds (from, to) after it starts consuming.
    alive_ms: (u64, u64),
    store: Store,
}

struct Scenario {
    dir: tempfile::TempDir,
    topic: String,
    store: Store,
}

impl Scenario {
    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn command(&self, args: &[&str]) -> std::process::Command {
        hourglass_command(self.path(), &NOW.to_string(), args)
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("running hourglass")
    }

    fn ok(&self, args: &[&str]) -> String {
        e2e::ok_stdout(args, self.run(args))
    }

    fn spawn(&self, args: &[&str]) -> Child {
        self.command(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting hourglass")
    }

    /// `events.jsonl` (ending a minute before `NOW`, over `SPAN`) and `tags.csv`, generated.
    fn generate(&self, users: &str, events: &str, seed: &str, bad_ratio: &str) {
        let (start, span) = ((NOW - 60 - SPAN).to_string(), SPAN.to_string());
        self.ok(&[
            "profile",
            "generate",
            "--users",
            users,
            "--events",
            events,
            "--seed",
            seed,
            "--bad-ratio",
            bad_ratio,
            "--start",
            &start,
            "--span",
            &span,
            "--out",
            "events.jsonl",
            "--registry-out",
            "tags.csv",
        ]);
    }

    /// `profile run` with the run's config, dead letters appended to `dead.jsonl`.
    fn job(&self, extra: &[&str]) -> Child {
        let mut args = vec![
            "profile",
            "run",
            "--config",
            "run.toml",
            "--dead-letter",
            "dead.jsonl",
            "--stats-json",
            "run-stats.json",
        ];
        args.extend_from_slice(extra);
        self.spawn(&args)
    }

    /// The table's dump: from the run's store, or the replay's (`rstore`).
    fn dump(&self, table: &str, replay: bool) -> String {
        match (replay, self.store) {
            (false, Store::Hbase) => self.ok(&["tables", "dump", table, "--hbase", THRIFT1]),
            (false, Store::Embedded) => self.ok(&["tables", "dump", table, "--store", "store"]),
            (true, _) => self.ok(&["tables", "dump", table, "--store", "rstore"]),
        }
    }
}

/// Writes the configs: `run.toml` (Kafka, the store under test, short-term tags in
/// `run-short.sqlite`) and `replay.toml` (the same registry and merge, `replay-short.sqlite`).
fn write_configs(s: &Scenario) {
    let common = "[registry]\nurl = \"sqlite://./tags.sqlite\"\n[merge]\nmax_users = 300\n\
                  flush_interval_ms = 500\n";
    let store = match s.store {
        Store::Embedded => "kind = \"embedded\"\ndir = \"store\"\n".to_string(),
        Store::Hbase => format!("kind = \"hbase\"\nhbase = {THRIFT1:?}\n"),
    };
    let topic = &s.topic;
    let run = format!(
        "workers = 2\nstatus_interval_secs = 2\n{common}[short_term]\npath = \"run-short.sqlite\"\n\
         [source]\nbrokers = {BROKER:?}\ntopic = {topic:?}\ngroup_id = {topic:?}\n\
         idle_partition_timeout_secs = 5\n[store]\n{store}"
    );
    let replay = format!("{common}[short_term]\npath = \"replay-short.sqlite\"\n");
    std::fs::write(s.path().join("run.toml"), run).expect("writing run.toml");
    std::fs::write(s.path().join("replay.toml"), replay).expect("writing replay.toml");
}

/// A job's stderr, as read so far.
type Log = std::sync::Arc<std::sync::Mutex<String>>;

/// Waits until the job says it consumes (its `profile run: topic …` line), then keeps draining
/// its stderr into `log` in the background.
fn wait_until_consuming(job: &mut Child, log: &Log) {
    let stderr = job.stderr.take().expect("piped stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    let sink = log.clone();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if line.contains("run: topic") {
                if let Some(tx) = tx.take() {
                    let _ = tx.send(());
                }
            }
            let mut text = sink.lock().expect("log");
            text.push_str(&line);
            text.push('\n');
        }
    });
    rx.recv_timeout(Duration::from_secs(180))
        .unwrap_or_else(|_| {
            panic!(
                "the job did not start consuming within 3 minutes:\n{}",
                log_text(log)
            )
        });
}

fn log_text(log: &Log) -> String {
    log.lock().expect("log").clone()
}

/// The group's committed offsets, summed over the partitions (0 before any commit).
fn committed(topic: &str) -> i64 {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", BROKER)
        .set("group.id", topic)
        .set("enable.auto.commit", "false")
        .create()
        .expect("a Kafka consumer");
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS.parse::<i32>().expect("partitions") {
        tpl.add_partition(topic, p);
    }
    let Ok(offsets) = consumer.committed_offsets(tpl, Duration::from_secs(10)) else {
        return 0;
    };
    offsets
        .elements()
        .iter()
        .map(|e| match e.offset() {
            Offset::Offset(n) => n,
            _ => 0,
        })
        .sum()
}

/// The (user, tag) pairs of the file with two different values at one event time: which wins
/// depends on the order they arrive in, which the partitions' interleaving decides.
fn ties(events: &Path) -> BTreeSet<(String, String)> {
    let mut seen: BTreeMap<(String, String, i64), Value> = BTreeMap::new();
    let mut ties = BTreeSet::new();
    let bytes = std::fs::read(events).expect("events");
    for raw in bytes.split(|&b| b == b'\n') {
        let Ok(Value::Object(o)) = serde_json::from_slice::<Value>(raw) else {
            continue;
        };
        let user = match o.get("user_id") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Number(n)) => n.to_string(),
            _ => continue,
        };
        let (Some(ts), Some(Value::Object(tags))) =
            (o.get("ts").and_then(Value::as_i64), o.get("tags"))
        else {
            continue;
        };
        for (code, v) in tags {
            let key = (user.clone(), code.clone(), ts);
            if seen.get(&key).is_some_and(|old| old != v) {
                ties.insert((user.clone(), code.clone()));
            }
            seen.insert(key, v.clone());
        }
    }
    ties
}

/// The user and tag code of a dump line of `user_profile_tag` (`<salt:4><user>\tfamily:code…`)
/// or `user_tag_history` (`<salt>_<user>_<code>_<reversed ts>\th:v…`).
fn user_and_tag(table: &str, line: &str) -> (String, String) {
    let mut fields = line.split('\t');
    let row = fields.next().unwrap_or_default();
    let column = fields.next().unwrap_or_default();
    if table == profile::PROFILE_TABLE {
        let code = column.split_once(':').map_or("", |(_, q)| q);
        return (
            row.get(4..).unwrap_or_default().to_string(),
            code.to_string(),
        );
    }
    let parts: Vec<&str> = row.split('_').collect();
    let code = parts
        .get(2..parts.len().saturating_sub(1))
        .unwrap_or_default()
        .join("_");
    (parts.get(1).copied().unwrap_or_default().to_string(), code)
}

/// Asserts the run's `table` is the replay's, but for the cells of tied (user, tag) pairs.
fn assert_table_as_replayed(s: &Scenario, table: &str, ties: &BTreeSet<(String, String)>) {
    let keep = |dump: String| -> Vec<String> {
        dump.lines()
            .filter(|l| !ties.contains(&user_and_tag(table, l)))
            .map(str::to_string)
            .collect()
    };
    let (run, replay) = (keep(s.dump(table, false)), keep(s.dump(table, true)));
    assert!(
        replay.len() > 1000,
        "{table}: the replay stored {} cells",
        replay.len()
    );
    if run != replay {
        let first = run
            .iter()
            .zip(&replay)
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| run.len().min(replay.len()));
        panic!(
            "{table} differs from the replay's at line {} (of {} vs {}):\n  run:    {:?}\n  replay: {:?}\n(dir {})",
            first + 1,
            run.len(),
            replay.len(),
            run.get(first),
            replay.get(first),
            s.path().display()
        );
    }
}

/// The live short-term values of a SQLite short-term store: (user, code) → (value, ts, expiry).
fn short_term(path: &Path) -> BTreeMap<(String, String), (String, i64, i64)> {
    let conn = rusqlite::Connection::open(path).expect("opening the short-term store");
    let mut stmt = conn
        .prepare(
            "SELECT user_id, tag_code, value, ts, expires_at FROM short_term_tag \
             WHERE expires_at > ?1",
        )
        .expect("a short-term query");
    let rows = stmt
        .query_map([NOW], |r| {
            Ok(((r.get(0)?, r.get(1)?), (r.get(2)?, r.get(3)?, r.get(4)?)))
        })
        .expect("querying the short-term store");
    rows.collect::<Result<_, _>>().expect("short-term rows")
}

/// Dead letters as (kind, user, tag, raw), one per record: the run's deduplicated by where the
/// record was read (a restart re-reads, and may write again, those after the last commit).
fn dead_letters(path: &Path, by_position: bool) -> Vec<(String, String, String, String)> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for d in read_jsonl(path) {
        let text = |k: &str| d[k].as_str().unwrap_or_default().to_string();
        // A too long line is cut where its reader stopped, which differs between a file and
        // a Kafka record: its start identifies it.
        let raw: String = text("raw").chars().take(200).collect();
        let letter = (text("kind"), text("user_id"), text("tag"), raw);
        let position = (d["partition"].as_i64(), d["line"].as_u64(), letter.clone());
        // Every dead letter of a Kafka record says where the record is, a refused tag's too.
        assert!(
            !by_position || position.0.is_some(),
            "a dead letter without its partition: {d}"
        );
        if !by_position || seen.insert(position) {
            out.push(letter);
        }
    }
    out.sort();
    out
}

/// The scenario: publish, kill the job at random points (`plan.kills` times at least, and
/// while the producer runs), run it to idle, and compare everything with a replay.
fn killed_at_random_points_ends_as_replayed(plan: &Plan) {
    let started = Instant::now();
    let s = Scenario {
        dir: tempfile::tempdir().expect("tempdir"),
        topic: unique("profile-crash"),
        store: plan.store,
    };
    s.generate(plan.users, plan.events, plan.seed, "0.02");
    let lines: u64 = plan.events.parse().expect("events");
    let ties = ties(&s.path().join("events.jsonl"));
    assert!(
        (ties.len() as u64) * 1000 < lines,
        "{} tied (user, tag) pairs in {lines} events",
        ties.len()
    );
    write_configs(&s);
    s.ok(&["tags", "import", "tags.csv", "--config", "run.toml"]);
    if s.store == Store::Hbase {
        // From empty profile tables, made as a user makes them.
        sinks::hbase::admin::drop_tables(
            &sinks::hbase::HbaseConfig::new(THRIFT1),
            &[profile::PROFILE_TABLE, profile::HISTORY_TABLE],
        )
        .expect("dropping the profile tables");
        s.ok(&["tables", "create", "--hbase", THRIFT1]);
    }
    let producer = s.spawn(&[
        "produce",
        "events.jsonl",
        "--brokers",
        BROKER,
        "--topic",
        &s.topic,
        "--partitions",
        PARTITIONS,
        "--key",
        "user_id",
        "--rate",
        plan.rate,
    ]);
    let mut producer = KillOnDrop(Some(producer));
    let mut rng = Rng::from_clock();
    let mut kills = 0;
    let mut producing = true;
    while kills < plan.kills || producing {
        assert!(
            kills < plan.kills + 20,
            "the producer is still running after {kills} kills"
        );
        let log = Log::default();
        let mut job = KillOnDrop(Some(s.job(&[])));
        let child = job.0.as_mut().expect("the job");
        wait_until_consuming(child, &log);
        // The third run is killed only after an offset commit, so the last run has offsets to
        // resume from however slow the machine is.
        if kills == 2 {
            let waiting = Instant::now();
            while committed(&s.topic) == 0 {
                assert!(
                    waiting.elapsed() < Duration::from_secs(180),
                    "no offset committed in 3 minutes:\n{}",
                    log_text(&log)
                );
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        std::thread::sleep(rng.millis(plan.alive_ms.0, plan.alive_ms.1));
        if let Some(status) = child.try_wait().expect("polling the job") {
            panic!("the job exited by itself ({status}):\n{}", log_text(&log));
        }
        child.kill().expect("SIGKILL");
        child.wait().expect("reaping the job");
        job.0 = None;
        kills += 1;
        if producing {
            let p = producer.0.as_mut().expect("the producer");
            if let Some(status) = p.try_wait().expect("polling the producer") {
                assert!(status.success(), "produce failed: {status}");
                producing = false;
            }
        }
    }
    let out = producer
        .0
        .take()
        .expect("the producer")
        .wait_with_output()
        .expect("waiting for produce");
    assert!(out.status.success(), "produce failed: {out:?}");
    eprintln!(
        "killed the job {kills} times in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let t = Instant::now();
    let out = s.run(&[
        "profile",
        "run",
        "--config",
        "run.toml",
        "--dead-letter",
        "dead.jsonl",
        "--stats-json",
        "run-stats.json",
        "--exit-on-idle",
        "5s",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "final run failed:\n{stderr}");
    let stats: Value = serde_json::from_slice(
        &std::fs::read(s.path().join("run-stats.json")).expect("run-stats.json"),
    )
    .expect("stats JSON");
    let read = stats["read"].as_u64().expect("read");
    assert!(
        read < lines,
        "the final run read {read} of {lines} records: it did not resume from committed offsets\n{stderr}"
    );
    eprintln!("final run {:.1} s", t.elapsed().as_secs_f64());
    let t = Instant::now();
    s.ok(&[
        "profile",
        "replay",
        "events.jsonl",
        "--config",
        "replay.toml",
        "--store",
        "rstore",
        "--workers",
        "2",
        "--dead-letter",
        "replay-dead.jsonl",
        "--quiet",
    ]);
    eprintln!("replay {:.1} s", t.elapsed().as_secs_f64());
    let t = Instant::now();
    // Every cell of both tables, its value and its event-time stamp, versions included.
    for table in [profile::PROFILE_TABLE, profile::HISTORY_TABLE] {
        assert_table_as_replayed(&s, table, &ties);
    }
    eprintln!("dumps {:.1} s", t.elapsed().as_secs_f64());
    // The short-term tags, every live one.
    let untied = |m: BTreeMap<(String, String), (String, i64, i64)>| {
        m.into_iter()
            .filter(|(k, _)| !ties.contains(k))
            .collect::<BTreeMap<_, _>>()
    };
    let run_short = untied(short_term(&s.path().join("run-short.sqlite")));
    let replay_short = untied(short_term(&s.path().join("replay-short.sqlite")));
    assert!(
        replay_short.len() > 50,
        "{} live short-term values",
        replay_short.len()
    );
    assert!(
        run_short == replay_short,
        "the short-term values differ from the replay's"
    );
    // The read path agrees: `profile get` of the users with the most values.
    let mut users: BTreeMap<&str, usize> = BTreeMap::new();
    for (user, _) in replay_short
        .keys()
        .filter(|k| !ties.iter().any(|t| t.0 == k.0))
    {
        *users.entry(user).or_default() += 1;
    }
    let mut users: Vec<(&str, usize)> = users.into_iter().collect();
    users.sort_by_key(|&(u, n)| (std::cmp::Reverse(n), u));
    for (user, _) in users.iter().take(3) {
        let run_args = match s.store {
            Store::Embedded => ["--store", "store"],
            Store::Hbase => ["--hbase", THRIFT1],
        };
        let mut args = vec!["profile", "get", user, "--config", "run.toml"];
        args.extend_from_slice(&run_args);
        let got = s.ok(&args);
        let want = s.ok(&[
            "profile",
            "get",
            user,
            "--config",
            "replay.toml",
            "--store",
            "rstore",
        ]);
        assert_eq!(got, want, "profile get {user} (left: run, right: replay)");
    }
    // Every dead letter of the replay, and no other, despite the kills.
    let replayed = dead_letters(&s.path().join("replay-dead.jsonl"), false);
    assert!(
        replayed.len() > 50,
        "the replay wrote {} dead letters",
        replayed.len()
    );
    let run_dead = dead_letters(&s.path().join("dead.jsonl"), true);
    if run_dead != replayed {
        let only_run: Vec<_> = run_dead
            .iter()
            .filter(|d| !replayed.contains(d))
            .take(2)
            .collect();
        let only_replay: Vec<_> = replayed
            .iter()
            .filter(|d| !run_dead.contains(d))
            .take(2)
            .collect();
        panic!(
            "dead letters: {} distinct from the runs, {} from the replay; only in the runs: \
             {only_run:?}; only in the replay: {only_replay:?}",
            run_dead.len(),
            replayed.len()
        );
    }
    eprintln!(
        "{kills} kills, final run read {read} of {lines}; {:.1} s in all",
        started.elapsed().as_secs_f64()
    );
}

/// 10,000 events of 800 users at 1,500 a second into the embedded store, at least 3 kills.
#[test]
fn sigkill_at_random_points_ends_as_a_replay_does() {
    if !kafka_up() {
        return;
    }
    killed_at_random_points_ends_as_replayed(&Plan {
        seed: "31",
        users: "800",
        events: "10000",
        rate: "1500",
        kills: 3,
        alive_ms: (300, 2500),
        store: Store::Embedded,
    });
}

/// The soak: 200,000 events of 20,000 users at 2,000 a second into HBase, at least 20 kills.
#[test]
#[ignore = "soak: minutes against Kafka and HBase; `make soak` runs it"]
fn soak_sigkill_20_times_into_hbase_ends_as_a_replay_does() {
    if !kafka_up() || !service_up(THRIFT1, "HBase", "hbase") {
        return;
    }
    killed_at_random_points_ends_as_replayed(&Plan {
        seed: "32",
        users: "20000",
        events: "200000",
        rate: "2000",
        kills: 20,
        alive_ms: (500, 6000),
        store: Store::Hbase,
    });
}

/// Offsets follow what is durable while records keep coming: a merge whose buffer fills before
/// it is due (`max_users` small, `flush_interval_ms` ten minutes) used to hold the time of its
/// first event for good, and the job committed almost nothing; and once the producer stops,
/// every record is committed without the job stopping (no event-time window holds the last
/// records back).
#[test]
fn offsets_are_committed_while_records_keep_coming() {
    if !service_up(BROKER, "Kafka", "kafka") {
        return;
    }
    const EVENTS: i64 = 10_000;
    let s = Scenario {
        dir: tempfile::tempdir().expect("tempdir"),
        topic: unique("profile-commits"),
        store: Store::Embedded,
    };
    s.generate("1000", &EVENTS.to_string(), "33", "0");
    let topic = &s.topic;
    let run = format!(
        "workers = 2\n[registry]\nurl = \"sqlite://./tags.sqlite\"\n[merge]\nmax_users = 100\n\
         flush_interval_ms = 600000\n[short_term]\npath = \"run-short.sqlite\"\n[source]\n\
         brokers = {BROKER:?}\ntopic = {topic:?}\ngroup_id = {topic:?}\n[store]\n\
         kind = \"embedded\"\ndir = \"store\"\n"
    );
    std::fs::write(s.path().join("run.toml"), run).expect("writing run.toml");
    s.ok(&["tags", "import", "tags.csv", "--config", "run.toml"]);
    // The topic exists before the job starts, so that it reads both partitions from offset 0.
    s.ok(&[
        "produce",
        "/dev/null",
        "--brokers",
        BROKER,
        "--topic",
        topic,
        "--partitions",
        PARTITIONS,
    ]);
    // A first tenth, until something is committed: the job is up and the group's coordinator
    // answers (a fresh broker takes seconds), then the rest at a steady rate.
    let text = std::fs::read_to_string(s.path().join("events.jsonl")).expect("events");
    let lines: Vec<&str> = text.lines().collect();
    let first = lines.len() / 10;
    for (file, part) in [
        ("first.jsonl", &lines[..first]),
        ("rest.jsonl", &lines[first..]),
    ] {
        std::fs::write(s.path().join(file), part.join("\n") + "\n").expect("writing a part");
    }
    let log = Log::default();
    let mut job = KillOnDrop(Some(s.job(&[])));
    wait_until_consuming(job.0.as_mut().expect("the job"), &log);
    let produce = |file: &str, rate: &str| {
        s.spawn(&[
            "produce",
            file,
            "--brokers",
            BROKER,
            "--topic",
            topic,
            "--key",
            "user_id",
            "--rate",
            rate,
        ])
    };
    assert!(produce("first.jsonl", "100000")
        .wait()
        .expect("produce")
        .success());
    let waiting = Instant::now();
    while committed(topic) == 0 {
        assert!(
            waiting.elapsed() < Duration::from_secs(180),
            "no offset committed in 3 minutes:\n{}",
            log_text(&log)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let before = committed(topic);
    let mut producer = KillOnDrop(Some(produce("rest.jsonl", "500")));
    let mut while_producing = before;
    loop {
        let p = producer.0.as_mut().expect("the producer");
        if let Some(status) = p.try_wait().expect("polling the producer") {
            assert!(status.success(), "produce failed: {status}");
            break;
        }
        while_producing = while_producing.max(committed(topic));
        std::thread::sleep(Duration::from_millis(500));
    }
    producer.0 = None;
    let rest = EVENTS - first as i64;
    assert!(
        while_producing - before > rest / 4,
        "{} of the {rest} records produced at 500/s committed while they kept coming \
         ({before} before):\n{}",
        while_producing - before,
        log_text(&log)
    );
    // Everything, while the job runs on: no stop, no later record needed.
    let waiting = Instant::now();
    while committed(topic) < EVENTS {
        assert!(
            waiting.elapsed() < Duration::from_secs(60),
            "{} of {EVENTS} records committed a minute after the last was produced:\n{}",
            committed(topic),
            log_text(&log)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let child = job.0.as_mut().expect("the job");
    assert!(
        child.try_wait().expect("polling the job").is_none(),
        "the job stopped:\n{}",
        log_text(&log)
    );
}
