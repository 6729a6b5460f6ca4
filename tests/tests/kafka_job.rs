//! `hourglass run` against a real Kafka broker (`scripts/services.sh up kafka`; `make test`
//! starts it): parity with `hourglass replay`, crash safety under SIGKILL, graceful SIGTERM, the
//! device registry as a compacted topic, and the benchmark of sustained consumption (ignored;
//! see `bench_sustained_consumption`).
//!
//! Why one long file: the tests of a binary run in parallel, and cargo runs test binaries one
//! after the other; the Kafka scenarios take minutes each, so splitting them into several files
//! would add their times up in CI.
//!
//! Without a broker on 127.0.0.1:9092 these tests skip, except in CI (`CI` set), where they fail.
//! Each test uses its own topic and consumer group, so they run in parallel.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use e2e::job::{announced_address, metrics_address, produce_args, sigterm, wait_ok, Rng};
use e2e::services::{kafka_up, unique, BROKER};
use e2e::{data, hourglass, hourglass_command, hourglass_ok, parse_exposition, Exposition, NOW};

/// First hour of the generated recordings (before `NOW`, within the 90-day TTL).
const START: &str = "2024-08-19T21:00:00Z";

fn scratch() -> PathBuf {
    tempfile::tempdir().expect("tempdir").keep()
}

/// A scratch directory and a topic (and group) named after `name` for a test that needs Kafka;
/// `None`, for the test to skip, when Kafka is not up (see [`kafka_up`]).
fn kafka_test(name: &str) -> Option<(PathBuf, String)> {
    kafka_up().then(|| (scratch(), unique(name)))
}

/// Writes the job configuration `job.toml` into `dir` and returns its path.
fn job_config(dir: &Path, topic: &str, extra_window: &str, idle_secs: u64) -> PathBuf {
    job_config_with_store(dir, topic, extra_window, idle_secs, "")
}

/// [`job_config`] with `extra_store` lines in its `[store]` table.
fn job_config_with_store(
    dir: &Path,
    topic: &str,
    extra_window: &str,
    idle_secs: u64,
    extra_store: &str,
) -> PathBuf {
    let path = dir.join("job.toml");
    let text = format!(
        "workers = 2\nstatus_interval_secs = 2\n\n[window]\n{extra_window}\n\n[store]\nkind = \"embedded\"\n\
         dir = \"store\"\n{extra_store}\n\n[source]\nbrokers = \"{BROKER}\"\ntopic = \"{topic}\"\ngroup_id = \"{topic}\"\n\
         idle_partition_timeout_secs = {idle_secs}\n"
    );
    std::fs::write(&path, text).expect("write job.toml");
    path
}

fn generate(dir: &Path, name: &str, args: &[&str]) -> PathBuf {
    let out = dir.join(name);
    let out_s = out.to_str().expect("utf-8 path");
    let mut all = vec!["generate", "--start", START, "--out", out_s];
    all.extend_from_slice(args);
    hourglass_ok(dir, &all);
    out
}

fn spawn(dir: &Path, args: &[&str]) -> Child {
    hourglass_command(dir, NOW, args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting hourglass")
}

/// Publishes `file` to a new 4-partition topic, paced by `pace` (`["--speed", "600"]`, …).
fn produce(dir: &Path, file: &Path, topic: &str, pace: &[&str]) -> Child {
    produce_to(dir, file, topic, "4", pace)
}

/// Publishes `file` to a new topic of `partitions` partitions, paced by `pace`.
fn produce_to(dir: &Path, file: &Path, topic: &str, partitions: &str, pace: &[&str]) -> Child {
    spawn(dir, &produce_args(file, topic, partitions, pace))
}

/// `hourglass run --config CONFIG --stats-json run-stats.json EXTRA…`, as arguments.
fn job_args<'a>(config: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "run",
        "--config",
        config.to_str().expect("utf-8 path"),
        "--stats-json",
        "run-stats.json",
    ];
    args.extend_from_slice(extra);
    args
}

fn run_job(dir: &Path, config: &Path, extra: &[&str]) -> Child {
    spawn(dir, &job_args(config, extra))
}

fn stats(dir: &Path) -> serde_json::Value {
    e2e::read_json(&dir.join("run-stats.json"))
}

fn dump(dir: &Path, store: &str, table: &str) -> String {
    hourglass_ok(dir, &["tables", "dump", table, "--store", store])
}

/// Replays `file` with the job's configuration into `rstore` and checks both tables of `store`
/// are identical to it.
fn assert_same_as_replay(dir: &Path, config: &Path, file: &Path) {
    hourglass_ok(
        dir,
        &[
            "replay",
            file.to_str().expect("utf-8 path"),
            "--config",
            config.to_str().expect("utf-8 path"),
            "--store",
            "rstore",
            "--workers",
            "2",
            "--dead-letter",
            "replay-dead.jsonl",
            "--late-output",
            "replay-late.jsonl",
            "--quiet",
        ],
    );
    for table in ["ts_metric", "ts_metric_hourly"] {
        let (kafka, replay) = (
            e2e::without_dirty_marks(&dump(dir, "store", table)),
            e2e::without_dirty_marks(&dump(dir, "rstore", table)),
        );
        assert!(!replay.is_empty(), "{table}: the replay stored nothing");
        if kafka != replay {
            let first = kafka
                .lines()
                .zip(replay.lines())
                .position(|(k, r)| k != r)
                .unwrap_or_else(|| kafka.lines().count().min(replay.lines().count()));
            panic!(
                "{table} differs from the replay at line {} (of {} vs {}):\n  run:    {:?}\n  replay: {:?}\n(dir {})",
                first + 1,
                kafka.lines().count(),
                replay.lines().count(),
                kafka.lines().nth(first),
                replay.lines().nth(first),
                dir.display()
            );
        }
    }
}

fn reasons(path: &Path) -> Vec<String> {
    let mut r: Vec<String> = e2e::read_jsonl(path)
        .iter()
        .map(|v| v["reason"].as_str().unwrap_or_default().to_string())
        .collect();
    r.sort();
    r
}

/// A generated recording without late lines (reordering stays within the watermark bound), so
/// no reading can be late beyond the allowed lateness whatever the partitions' interleaving:
/// both tables must be exactly the replay's, though produced at full speed before the job starts.
#[test]
fn generated_recording_gives_the_same_tables_as_replay() {
    let Some((dir, topic)) = kafka_test("parity-gen") else {
        return;
    };
    let file = generate(
        &dir,
        "gen.jsonl",
        &[
            "--devices",
            "200",
            "--duration",
            "30m",
            "--malformed-rate",
            "0.01",
            "--duplicate-rate",
            "0.01",
        ],
    );
    wait_ok(produce(&dir, &file, &topic, &[]), "produce");
    let config = job_config(&dir, &topic, "", 1);
    wait_ok(run_job(&dir, &config, &["--exit-on-idle", "5s"]), "run");
    let s = stats(&dir);
    assert_eq!(s["late_dropped"], 0, "{s}");
    assert_same_as_replay(&dir, &config, &file);
    assert_eq!(
        reasons(&dir.join("hourglass-dead-letters.jsonl")),
        reasons(&dir.join("replay-dead.jsonl"))
    );
}

/// The committed offset stops at the first reading of the oldest open hour, so a restart re-reads
/// the readings behind it, and some of those may belong to an hour that had closed already
/// (readings arrive out of order across an hour boundary). The restart must keep that hour
/// closed: opening it again would rewrite its summary cells from the few readings re-read.
/// Deterministic: one partition, one device, the hour boundary crossed out of order; the job
/// stops by itself after reading everything and is started again on the same group.
#[test]
fn a_restart_keeps_hours_the_previous_run_closed_closed() {
    let Some((dir, topic)) = kafka_test("resume") else {
        return;
    };
    let h: i64 = 1_724_108_400;
    let line = |ts: i64| {
        format!(
            "{{\"device\":\"dev1\",\"ts\":{ts},\"temp\":{}.5,\"room\":\"r1\"}}\n",
            ts % 97
        )
    };
    // Hour H, then hour H + 1 starting one reading early (H + 3600 before H + 3595), and
    // enough of hours H + 1 and H + 2 that hour H closes (watermark past H + 7200 with the
    // default hour of allowed lateness) while H + 1 stays open.
    let mut text = String::new();
    for ts in (h..h + 3590).step_by(10) {
        text.push_str(&line(ts));
    }
    text.push_str(&line(h + 3600));
    text.push_str(&line(h + 3595));
    // A malformed record behind the committed offset: dead-lettered once, not again on restart.
    text.push_str("{\"device\":\"dev1\",\"ts\":\n");
    for ts in (h + 3610..h + 9000).step_by(10) {
        text.push_str(&line(ts));
    }
    let file = dir.join("resume.jsonl");
    std::fs::write(&file, text).expect("write the recording");
    wait_ok(produce_to(&dir, &file, &topic, "1", &[]), "produce");
    // Early firings every 2 s release the open hours' capabilities, so the durable frontier
    // passes hour H's end plus lateness (and a commit records it) before the job stops.
    let config = job_config(&dir, &topic, FAST_COMMITS, 1);
    wait_ok(
        run_job(&dir, &config, &["--exit-on-idle", "5s"]),
        "first run",
    );
    let first = stats(&dir);
    assert_eq!(first["resume_skipped"], 0, "{first}");
    let stderr = wait_ok(
        run_job(&dir, &config, &["--exit-on-idle", "5s"]),
        "second run",
    );
    let second = stats(&dir);
    // It resumed from the first reading of hour H + 1 (offset 359), behind which stand H + 3595
    // and the malformed record.
    let read = second["read"].as_u64().expect("read");
    assert_eq!(
        read, 542,
        "the second run read {read} records, not the 542 from the committed offset 359\n{stderr}"
    );
    assert_same_as_replay(&dir, &config, &file);
    // H + 3595 was skipped (neither in hour H's window again nor late), and so was the
    // malformed record, whose dead letter the first run had flushed.
    assert_eq!(second["resume_skipped"], 2, "{second}");
    assert_eq!(second["late_dropped"], 0, "{second}");
    let dead = e2e::read_jsonl(&dir.join("hourglass-dead-letters.jsonl"));
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(
        (dead[0]["partition"].as_i64(), dead[0]["line"].as_u64()),
        (Some(0), Some(361))
    );
}

/// `tests/data/scenario.jsonl` has two readings hours beyond the allowed lateness. Whether a
/// reading is late depends on the watermark when it arrives, i.e. on how partitions interleave:
/// published all at once, a whole partition may be read before another has started, and its
/// very late readings then arrive while the watermark is still held back. Published in event
/// time order (600× real time, 24 s), as a live feed would be, lateness is unambiguous: the
/// very late readings come ≥ 5 s of publishing (≥ 55 min of event time) past their limit.
#[test]
fn scenario_published_in_event_time_gives_the_same_tables_as_replay() {
    let Some((dir, topic)) = kafka_test("parity-scenario") else {
        return;
    };
    let file = data("scenario.jsonl");
    let producer = produce(&dir, &file, &topic, &["--speed", "600"]);
    // Some partitions get only a few malformed, keyless lines: they must turn idle quickly.
    let config = job_config(&dir, &topic, "", 1);
    let job = run_job(&dir, &config, &["--exit-on-idle", "8s"]);
    wait_ok(producer, "produce");
    wait_ok(job, "run");
    let s = stats(&dir);
    assert_eq!(s["read"], 162, "{s}");
    assert_eq!(s["rejected"], 12, "{s}");
    assert_eq!(s["late_dropped"], 2, "{s}");
    assert_same_as_replay(&dir, &config, &file);
    assert_eq!(
        reasons(&dir.join("hourglass-dead-letters.jsonl")),
        reasons(&dir.join("replay-dead.jsonl"))
    );
    let mut late: Vec<(String, i64)> = e2e::read_jsonl(&dir.join("hourglass-late.jsonl"))
        .iter()
        .map(|v| {
            (
                v["device"].as_str().unwrap_or_default().to_string(),
                v["ts"].as_i64().unwrap_or_default(),
            )
        })
        .collect();
    // Two devices, two workers, one file: their order in it is not defined.
    late.sort();
    assert_eq!(
        late,
        [
            ("dev00786".to_string(), 1724101300),
            ("sensor-1".to_string(), 1724104900)
        ]
    );
}

/// Waits until the job says it is consuming (its `run: topic …` line on stderr), then keeps
/// draining its stderr in the background.
fn wait_until_consuming(job: &mut Child) {
    use std::io::BufRead;
    let stderr = job.stderr.take().expect("piped stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if line.starts_with("run: topic") {
                if let Some(tx) = tx.take() {
                    let _ = tx.send(());
                }
            }
        }
    });
    rx.recv_timeout(Duration::from_secs(180))
        .expect("the job did not start consuming within 3 minutes");
}

/// Offsets move only past hours that are final (watermark past their end plus the allowed
/// lateness) and once their cells are written (early firings): frequent early firings and
/// recordings whose event time runs thousands of times faster than real time let them move within
/// the seconds a test runs.
const FAST_COMMITS: &str = "early_fire_secs = 2";
/// At thousands of seconds of event time per second, a partition wrongly taken for idle for
/// one second would be hours behind the others; 5 s keeps that from happening on a busy machine.
const IDLE_SECS: u64 = 5;

/// The job is killed with SIGKILL at random points while the recording is being published
/// (≥ 3 times), restarted each time, and finally run to idle: every valid reading is in both
/// tables exactly as in the replay (nothing lost, nothing extra), and the last run resumed from
/// committed offsets rather than from the start.
#[test]
fn sigkill_at_random_points_loses_nothing() {
    sigkill_at_random_points("crash", "");
}

/// As [`sigkill_at_random_points_loses_nothing`], with `ts_metric`'s readings and
/// `ts_metric_hourly`'s point cells in the series layout (docs/ARCHITECTURE.md §7b): runs sealed per flush and merged as hours close, each merge one
/// atomic batch, so a kill between or during merges loses nothing committed either. The
/// replay compared with is a series-layout store too; their dumps are cells, whatever the
/// layout.
#[test]
fn sigkill_at_random_points_loses_nothing_in_the_series_layout() {
    sigkill_at_random_points("crash-series", "series_layout = true");
}

/// The kills of [`sigkill_at_random_points_loses_nothing`], on a store with `extra_store`.
fn sigkill_at_random_points(name: &str, extra_store: &str) {
    let Some((dir, topic)) = kafka_test(name) else {
        return;
    };
    // 20 devices × 12 h every 10 s: 86k readings, published at 5000/s (~17 s), so an hour of
    // event time passes every ~1.5 s and each run between two kills commits some.
    let file = generate(
        &dir,
        "rec.jsonl",
        &[
            "--devices",
            "20",
            "--duration",
            "12h",
            "--seed",
            "7",
            "--malformed-rate",
            "0.005",
            "--duplicate-rate",
            "0.005",
        ],
    );
    let lines = std::fs::read(&file)
        .expect("read recording")
        .iter()
        .filter(|&&b| b == b'\n')
        .count();
    let config = job_config_with_store(&dir, &topic, FAST_COMMITS, IDLE_SECS, extra_store);
    let mut producer = produce(&dir, &file, &topic, &["--rate", "5000"]);
    let mut rng = Rng::from_clock();
    let mut kills = 0;
    let mut producing = true;
    while kills < 3 || producing {
        assert!(
            kills < 20,
            "the producer is still running after {kills} kills"
        );
        // Kill points count from the start of consumption (the store's recovery after a kill
        // takes seconds in a debug build). The third run is killed at a random point after its
        // first offset commit, so the final run has offsets to resume from however slow the
        // machine is (a job needs the watermark to pass an hour's end plus the lateness before
        // it can commit anything).
        let mut job;
        if kills == 2 {
            job = run_job(&dir, &config, &["--metrics-listen", "127.0.0.1:0"]);
            let (addr, log) = metrics_address(&mut job);
            scrape_until(&addr, &log, "a first offset commit", |m| {
                m.all("hourglass_job_committed_offset")
                    .any(|s| s.value > 0.0)
            });
            std::thread::sleep(rng.millis(0, 3000));
        } else {
            job = run_job(&dir, &config, &[]);
            wait_until_consuming(&mut job);
            std::thread::sleep(rng.millis(500, 8000));
        }
        if let Some(status) = job.try_wait().expect("polling the job") {
            panic!("the job exited by itself ({status})");
        }
        job.kill().expect("SIGKILL");
        job.wait().expect("reaping the job");
        kills += 1;
        if producing {
            if let Some(status) = producer.try_wait().expect("polling the producer") {
                assert!(status.success(), "produce failed: {status}");
                producing = false;
            }
        }
    }
    wait_ok(producer, "produce");
    eprintln!("killed the job {kills} times");
    let stderr = wait_ok(
        run_job(&dir, &config, &["--exit-on-idle", "5s"]),
        "final run",
    );
    let s = stats(&dir);
    let read = s["read"].as_u64().expect("read");
    assert!(
        read < lines as u64,
        "the final run read {read} of {lines} records: it did not resume from committed offsets\n{stderr}"
    );
    assert_same_as_replay(&dir, &config, &file);
    // Every malformed record reached the dead-letter file despite the kills (a restart may
    // write some twice): the dead letters are flushed before offsets past them are committed.
    let dead: std::collections::BTreeSet<(i64, u64)> =
        e2e::read_jsonl(&dir.join("hourglass-dead-letters.jsonl"))
            .iter()
            .map(|v| {
                (
                    v["partition"].as_i64().expect("partition"),
                    v["line"].as_u64().expect("line"),
                )
            })
            .collect();
    let replayed = e2e::read_jsonl(&dir.join("replay-dead.jsonl")).len();
    assert!(
        replayed > 100,
        "the recording has {replayed} malformed lines"
    );
    assert_eq!(
        dead.len(),
        replayed,
        "distinct dead-lettered records vs the replay's"
    );
}

/// A panic in the dataflow (injected in a debug build by `HOURGLASS_DEBUG_PANIC_AFTER`) stops
/// the job at once with exit code 101 and a message that says so, and commits nothing past
/// what is durable: a restart ends with exactly the replay's tables.
#[test]
fn a_panic_in_the_dataflow_stops_the_job_without_a_commit_past_it() {
    let Some((dir, topic)) = kafka_test("panic") else {
        return;
    };
    let file = generate(
        &dir,
        "rec.jsonl",
        &["--devices", "10", "--duration", "12h", "--seed", "5"],
    );
    let config = job_config(&dir, &topic, FAST_COMMITS, IDLE_SECS);
    wait_ok(produce(&dir, &file, &topic, &[]), "produce");
    let out = hourglass_command(&dir, NOW, &job_args(&config, &["--exit-on-idle", "5s"]))
        .env("HOURGLASS_DEBUG_PANIC_AFTER", "15000")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .output()
        .expect("running hourglass");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(101), "{}\n{stderr}", out.status);
    assert!(
        stderr.contains("HOURGLASS_DEBUG_PANIC_AFTER")
            && stderr.contains("hourglass stopped after an internal error"),
        "{stderr}"
    );
    wait_ok(run_job(&dir, &config, &["--exit-on-idle", "5s"]), "restart");
    assert_same_as_replay(&dir, &config, &file);
}

/// SIGTERM mid-stream: the job stops reading, writes what it holds, commits and exits 0 within
/// seconds; everything it read is stored; a restart continues from the committed offsets and
/// ends with exactly the replay's tables.
#[test]
fn sigterm_mid_stream_exits_0_and_loses_nothing() {
    let Some((dir, topic)) = kafka_test("sigterm") else {
        return;
    };
    // 10 devices × 24 h every 10 s: 86k readings, published at 4000/s (~22 s): hours become
    // final (so offsets move) every second or so.
    let file = generate(
        &dir,
        "rec.jsonl",
        &["--devices", "10", "--duration", "24h", "--seed", "11"],
    );
    let config = job_config(&dir, &topic, FAST_COMMITS, IDLE_SECS);
    let producer = produce(&dir, &file, &topic, &["--rate", "4000"]);
    let mut job = run_job(&dir, &config, &["--metrics-listen", "127.0.0.1:0"]);
    let (addr, log) = metrics_address(&mut job);
    // SIGTERM once the watermark has made the first three hours final (their end plus the
    // default hour of lateness): from then on the job holds offsets it may commit. Waiting for
    // that, rather than for a fixed time, keeps the test meaningful on a loaded machine, where
    // start-up alone can take seconds.
    let start = 1_724_101_200.0; // START, epoch seconds
    let m = scrape_until(&addr, &log, "three hours final", |m| {
        m.get("hourglass_job_watermark_seconds", &[])
            .is_some_and(|w| w >= start + 4.0 * 3600.0)
    });
    let read_then = value(&m, "hourglass_job_records_read_total", &[]) as u64;
    let stopped_at = Instant::now();
    sigterm(&job);
    let status = job.wait().expect("waiting for the job");
    let took = stopped_at.elapsed();
    // The stderr reader ends at the job's exit; give it a moment to take the last lines.
    std::thread::sleep(Duration::from_millis(200));
    let stderr = log.lock().expect("log lock").clone();
    eprintln!("SIGTERM after {read_then} records → exit took {took:?}");
    assert!(status.success(), "run after SIGTERM: {status}\n{stderr}");
    // A liveness bound, not a speed claim: the stop must not wait for the stream to end.
    assert!(
        took < Duration::from_secs(30),
        "exit took {took:?}\n{stderr}"
    );
    let first = stats(&dir);
    let read = first["read"].as_u64().expect("read");
    assert!(read > 0, "nothing read before SIGTERM: {first}");
    assert_eq!(
        first["narrow_rows"], first["ok"],
        "every reading read was stored: {first}"
    );
    let narrow = dump(&dir, "store", "ts_metric");
    let mut rows: Vec<&str> = narrow
        .lines()
        .filter_map(|l| l.split('\t').next())
        .collect();
    rows.dedup();
    assert_eq!(
        rows.len() as u64,
        first["ok"].as_u64().expect("ok"),
        "every reading read before SIGTERM is in the narrow table (the recording has no duplicates)"
    );
    wait_ok(producer, "produce");
    wait_ok(run_job(&dir, &config, &["--exit-on-idle", "5s"]), "restart");
    let second = stats(&dir);
    let total = std::fs::read_to_string(&file)
        .expect("read recording")
        .lines()
        .count() as u64;
    assert!(
        second["read"].as_u64().expect("read") < total,
        "the restart re-read everything ({second}): nothing was committed at SIGTERM"
    );
    assert_same_as_replay(&dir, &config, &file);
}

/// Publishes raw registry records (key, value), bypassing the checks of
/// `hourglass produce --registry`.
fn publish_raw(topic: &str, records: &[(&[u8], &[u8])]) {
    use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};
    use std::sync::Mutex;
    #[derive(Default)]
    struct Failures(Mutex<Vec<String>>);
    impl rdkafka::ClientContext for Failures {}
    impl ProducerContext for Failures {
        type DeliveryOpaque = ();
        fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
            if let Err((e, _)) = result {
                self.0.lock().expect("lock").push(e.to_string());
            }
        }
    }
    let producer: BaseProducer<Failures> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", BROKER)
        .create_with_context(Failures::default())
        .expect("Kafka producer");
    for (key, value) in records {
        let record = BaseRecord::<[u8], [u8]>::to(topic)
            .key(*key)
            .payload(*value);
        producer.send(record).map_err(|(e, _)| e).expect("send");
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
    let failures = producer.context().0.lock().expect("lock").clone();
    assert!(failures.is_empty(), "not delivered: {failures:?}");
}

fn room_csv(dir: &Path, room: &str) -> String {
    hourglass_ok(
        dir,
        &[
            "query", "room", "--room", room, "--store", "store", "--format", "csv",
        ],
    )
}

/// JSON lines of `devices` reporting every 10 s for `steps` (`from..to`), each with its own
/// `room` field.
fn readings(devices: &[(&str, &str)], steps: std::ops::Range<i64>) -> String {
    const H: i64 = 1724101200;
    let mut out = String::new();
    for i in steps {
        for (device, room) in devices {
            out.push_str(&format!(
                "{{\"device\":\"{device}\",\"ts\":{},\"temp\":{i},\"room\":\"{room}\"}}\n",
                H + i * 10
            ));
        }
    }
    out
}

/// The job config of `job_config(dir, topic, "", 1)` with the device registry read from the
/// topic `registry`.
fn registry_job_config(dir: &Path, topic: &str, registry: &str) -> PathBuf {
    let config = job_config(dir, topic, "", 1);
    let mut text = std::fs::read_to_string(&config).expect("read job.toml");
    text.insert_str(0, &format!("registry_topic = \"{registry}\"\n"));
    std::fs::write(&config, text).expect("write job.toml");
    config
}

/// The registry as a compacted topic: published with `produce --registry` (the topic is created
/// compacted), read whole before the room view writes anything, then followed while the job
/// runs: a move deletes the device's old row, a tombstone sends it back to its readings' room,
/// and malformed records are dead-lettered and counted without stopping the job.
#[test]
fn registry_topic_rooms_moves_tombstones_and_bad_records() {
    let Some((dir, topic)) = kafka_test("reg-readings") else {
        return;
    };
    let registry = unique("reg-devices");
    std::fs::write(
        dir.join("devices.csv"),
        "device,room,gateway\ndevA,lab1,gw1\ndevB,lab1,gw1\ndevC,lab2,gw2\n",
    )
    .expect("write registry");
    let args = [
        "--brokers",
        BROKER,
        "--topic",
        &registry,
        "--partitions",
        "2",
    ];
    let out = hourglass_ok(
        &dir,
        &[&["produce", "--registry", "devices.csv"][..], &args].concat(),
    );
    assert!(out.is_empty(), "{out}");
    let source = pipeline::config::SourceConfig {
        brokers: BROKER.into(),
        ..Default::default()
    };
    let admin = pipeline::source::kafka::admin_config(&source);
    assert_eq!(
        sensor::registry_topic::cleanup_policy(&admin, &registry).expect("describe topic"),
        Some("compact".to_string())
    );

    let own = [
        ("devA", "own"),
        ("devB", "own"),
        ("devC", "own"),
        ("devD", "ownD"),
    ];
    std::fs::write(dir.join("r1.jsonl"), readings(&own, 0..5)).expect("write");
    wait_ok(produce(&dir, &dir.join("r1.jsonl"), &topic, &[]), "produce");
    // The readings' topic is not compacted: it cannot take a registry.
    let out = hourglass(
        &dir,
        &[
            "produce",
            "--registry",
            "devices.csv",
            "--brokers",
            BROKER,
            "--topic",
            &topic,
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && stderr.contains("must be compacted"),
        "{stderr}"
    );

    let config = registry_job_config(&dir, &topic, &registry);
    let stderr = wait_ok(run_job(&dir, &config, &["--exit-on-idle", "3s"]), "run");
    assert!(stderr.contains("device registry: read topic"), "{stderr}");
    let (h4, h9) = (1724101200 + 40, 1724101200 + 90);
    assert_eq!(
        room_csv(&dir, "lab1"),
        format!("device,ts,value\ndevA,{h4},4\ndevB,{h4},4\n")
    );
    assert_eq!(
        room_csv(&dir, "lab2"),
        format!("device,ts,value\ndevC,{h4},4\n")
    );
    assert_eq!(room_csv(&dir, "own"), "device,ts,value\n");
    assert_eq!(
        room_csv(&dir, "ownD"),
        format!("device,ts,value\ndevD,{h4},4\n")
    );

    // While the job runs (it re-reads the open hour and rebuilds the view): devA moves, devB
    // leaves the registry, bad records arrive, then newer readings.
    let mut job = run_job(&dir, &config, &["--exit-on-idle", "15s"]);
    wait_until_consuming(&mut job);
    std::thread::sleep(Duration::from_secs(3));
    std::fs::write(dir.join("move.csv"), "device,room,gateway\ndevA,lab2,gw9\n").expect("write");
    hourglass_ok(
        &dir,
        &[&["produce", "--registry", "move.csv"][..], &args].concat(),
    );
    hourglass_ok(
        &dir,
        &[
            "produce",
            "--delete",
            "devB",
            "--brokers",
            BROKER,
            "--topic",
            &registry,
        ],
    );
    publish_raw(
        &registry,
        &[
            (b"bad_id", b"lab1"),
            (b"devC", b"room_x,gw2"),
            (b"devC", b"lab\xff"),
            // Brokers refuse keyless records in a compacted topic, but not an empty key.
            (b"", b"lab1"),
        ],
    );
    std::thread::sleep(Duration::from_secs(2));
    std::fs::write(dir.join("r2.jsonl"), readings(&own[..3], 5..10)).expect("write");
    wait_ok(produce(&dir, &dir.join("r2.jsonl"), &topic, &[]), "produce");
    let out = job.wait_with_output().expect("waiting for the job");
    assert!(out.status.success(), "run: {}", out.status);

    let s = stats(&dir);
    assert_eq!(s["registry_rejected"], 4, "{s}");
    assert_eq!(s["rejected"], 0, "{s}");
    let dead = e2e::read_jsonl(&dir.join("hourglass-dead-letters.jsonl"));
    let mut kinds: Vec<&str> = dead
        .iter()
        .filter(|v| v["registry_topic"] == registry.as_str())
        .map(|v| v["kind"].as_str().unwrap_or_default())
        .collect();
    kinds.sort_unstable();
    assert_eq!(
        kinds,
        ["bad_device", "bad_room", "no_key", "value_not_utf8"],
        "{dead:?}"
    );
    assert!(dead.iter().all(|v| v["offset"].is_i64()), "{dead:?}");

    assert_eq!(room_csv(&dir, "lab1"), "device,ts,value\n");
    // The bad records changed nothing: devC stays in lab2.
    assert_eq!(
        room_csv(&dir, "lab2"),
        format!("device,ts,value\ndevA,{h9},9\ndevC,{h9},9\n")
    );
    assert_eq!(
        room_csv(&dir, "own"),
        format!("device,ts,value\ndevB,{h9},9\n")
    );
    assert_eq!(
        room_csv(&dir, "ownD"),
        format!("device,ts,value\ndevD,{h4},4\n")
    );
    let mut rows: Vec<String> = dump(&dir, "store", "ts_room_latest")
        .lines()
        .filter_map(|l| l.split('\t').next().map(str::to_string))
        .collect();
    rows.dedup();
    assert_eq!(
        rows,
        ["lab2_devA", "lab2_devC", "ownD_devD", "own_devB"],
        "old rows deleted"
    );
}

/// The registry a topic holds, read to its end the way the job reads it at start.
fn registry_of_topic(topic: &str) -> BTreeMap<String, String> {
    let source = pipeline::config::SourceConfig {
        brokers: BROKER.into(),
        ..Default::default()
    };
    sensor::registry_topic::RegistryTopic::open(&source, topic)
        .expect("open the topic")
        .read_to_end(Duration::from_secs(60))
        .expect("the topic read to its end")
}

/// `produce --registry FILE --prune` makes the topic's registry the file's: devices the file no
/// longer lists get tombstones; without `--prune` they stay.
#[test]
fn produce_registry_prune_removes_the_devices_the_file_no_longer_lists() {
    if !kafka_up() {
        return;
    }
    let dir = scratch();
    let registry = unique("reg-prune");
    let publish = |file: &str, extra: &[&str]| {
        let out = hourglass(
            &dir,
            &[
                &[
                    "produce",
                    "--registry",
                    file,
                    "--brokers",
                    BROKER,
                    "--topic",
                ][..],
                &[registry.as_str(), "--partitions", "2"],
                extra,
            ]
            .concat(),
        );
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "produce {file}: {stderr}");
        stderr
    };
    let rooms = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(d, r)| ((*d).to_string(), (*r).to_string()))
            .collect()
    };
    std::fs::write(
        dir.join("all.csv"),
        "device,room\ndevA,lab1\ndevB,lab1\ndevC,lab2\n",
    )
    .expect("write");
    std::fs::write(dir.join("fewer.csv"), "device,room\ndevA,lab3\n").expect("write");
    publish("all.csv", &[]);
    // Without --prune, publishing a shorter file only adds and updates.
    publish("fewer.csv", &[]);
    assert_eq!(
        registry_of_topic(&registry),
        rooms(&[("devA", "lab3"), ("devB", "lab1"), ("devC", "lab2")])
    );
    let stderr = publish("fewer.csv", &["--prune"]);
    assert!(
        stderr.contains("--prune: 2 devices in") && stderr.contains("and 2 tombstones"),
        "{stderr}"
    );
    assert_eq!(registry_of_topic(&registry), rooms(&[("devA", "lab3")]));
    // Nothing left to prune.
    let stderr = publish("fewer.csv", &["--prune"]);
    assert!(stderr.contains("--prune: 0 devices in"), "{stderr}");
    assert_eq!(registry_of_topic(&registry), rooms(&[("devA", "lab3")]));
}

#[test]
fn invalid_config_fails_at_start_naming_the_key() {
    let dir = scratch();
    std::fs::write(
        dir.join("bad.toml"),
        "[source]\ntopic = \"t\"\n[source.rdkafka]\n\"enable.auto.commit\" = \"true\"\n",
    )
    .expect("write");
    let out = hourglass(&dir, &["run", "--config", "bad.toml"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("enable.auto.commit"), "{stderr}");
    std::fs::write(dir.join("bad.toml"), "[source]\ngroup = \"g\"\n").expect("write");
    let out = hourglass(&dir, &["run", "--config", "bad.toml"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("group"));
}

#[test]
fn example_config_is_printed_and_runs_as_is() {
    let dir = scratch();
    let text = hourglass_ok(&dir, &["run", "--example-config"]);
    assert!(
        text.contains("[source]") && text.contains("group_id"),
        "{text}"
    );
    std::fs::write(dir.join("job.toml"), &text).expect("write");
    // Parsed and validated like any config: a bad flag is the only error left.
    let out = hourglass(
        &dir,
        &["run", "--config", "job.toml", "--exit-on-idle", "soon"],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("duration \"soon\""), "{stderr}");
}

/// `hourglass run --serve`: dashboards read the embedded store while the job writes it (the
/// store admits one process, so `hourglass serve` could not open it), and their curve ends up
/// identical to `hourglass query curve` on the stopped job's store.
#[test]
fn run_serves_dashboards_from_its_own_store() {
    let Some((dir, topic)) = kafka_test("dashboards") else {
        return;
    };
    wait_ok(
        produce_to(&dir, &data("scenario.jsonl"), &topic, "1", &[]),
        "produce",
    );
    let config = job_config(&dir, &topic, FAST_COMMITS, IDLE_SECS);
    let mut job = run_job(&dir, &config, &["--serve", "127.0.0.1:0"]);
    let (addr, log) = announced_address(&mut job, "dashboards: http://", "/");
    let (from, to) = ("1724000000", NOW);
    let path = format!("/api/v1/curve?device=dev00786&from={from}&to={to}");
    // Whole hours come from the wide rows: dev00786 has 50 point cells in the golden table; its
    // 51st reading is beyond the allowed lateness, in the narrow table only, and its hour's row
    // is marked dirty, so the served curve reads that hour from the narrow table (one truth).
    let deadline = Instant::now() + Duration::from_secs(180);
    let served = loop {
        let (status, _, body) = http_get(&addr, &path);
        assert_eq!(status, 200, "{body}");
        let answer: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        if answer["points"].as_array().map(Vec::len) == Some(51) {
            break answer["points"].clone();
        }
        assert!(
            Instant::now() < deadline,
            "the served curve never reached 51 points: {body}\n{}",
            log.lock().expect("log lock")
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let (status, _, page) = http_get(&addr, "/");
    assert_eq!(status, 200);
    assert!(page.contains("<script"), "{page}");
    let (status, _, room) = http_get(&addr, "/api/v1/room/room031");
    assert_eq!(status, 200, "{room}");
    sigterm(&job);
    let status = job.wait().expect("waiting for the job");
    assert!(
        status.success(),
        "{status}\n{}",
        log.lock().expect("log lock")
    );
    let cli: serde_json::Value = serde_json::from_str(&hourglass_ok(
        &dir,
        &[
            "query", "curve", "--device", "dev00786", "--from", from, "--to", to, "--format",
            "json", "--store", "store",
        ],
    ))
    .expect("CLI JSON");
    assert_eq!(served, cli["points"]);
}

/// GET `http://addr{path}`: status, content type and body.
fn http_get(addr: &str, path: &str) -> (u16, String, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut res = agent
        .get(format!("http://{addr}{path}"))
        .call()
        .unwrap_or_else(|e| panic!("GET http://{addr}{path}: {e}"));
    let content_type = res
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = res.body_mut().read_to_string().expect("body");
    (res.status().as_u16(), content_type, body)
}

/// Scrapes `/metrics` and parses it strictly (see `e2e::parse_exposition`).
fn scrape(addr: &str) -> Exposition {
    let (status, content_type, text) = http_get(addr, "/metrics");
    assert_eq!(status, 200, "{text}");
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    parse_exposition(&text).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// Scrapes every 200 ms until `done` holds. The 3-minute deadline is a liveness bound for a
/// hung job, not a speed claim.
fn scrape_until(
    addr: &str,
    log: &Mutex<String>,
    what: &str,
    done: impl Fn(&Exposition) -> bool,
) -> Exposition {
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let metrics = scrape(addr);
        if done(&metrics) {
            return metrics;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not reached within 3 minutes; last scrape:\n{metrics:#?}\njob:\n{}",
            log.lock().expect("log lock")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn value(m: &Exposition, name: &str, labels: &[(&str, &str)]) -> f64 {
    m.get(name, labels)
        .unwrap_or_else(|| panic!("no sample {name}{labels:?} in {m:#?}"))
}

/// The scenario (162 records: 12 malformed of each kind, 2 readings hours beyond the allowed
/// lateness) on a one-partition topic, so that arrival order is file order and both the late
/// readings and the watermark are exact. `/metrics`, scraped while the job runs, counts what
/// the job did, agrees with the end-of-run stats and the dead letters, and is well-formed.
#[test]
fn run_serves_its_metrics_while_it_runs() {
    let Some((dir, topic)) = kafka_test("metrics") else {
        return;
    };
    let file = data("scenario.jsonl");
    wait_ok(produce_to(&dir, &file, &topic, "1", &[]), "produce");
    let config = job_config(&dir, &topic, FAST_COMMITS, IDLE_SECS);
    let mut job = run_job(&dir, &config, &["--metrics-listen", "127.0.0.1:0"]);
    let (addr, log) = metrics_address(&mut job);

    let golden = |name: &str| {
        std::fs::read_to_string(e2e::repo_root().join("tests/golden").join(name))
            .expect("golden file")
    };
    // Point cells (numeric qualifiers) of the wide table, and the newest stored reading.
    let wide_cells = golden("scenario.ts_metric_hourly.tsv")
        .lines()
        .filter(|l| {
            l.split('\t')
                .nth(1)
                .and_then(|c| c.strip_prefix("t:"))
                .is_some_and(|q| q.bytes().all(|b| b.is_ascii_digit()))
        })
        .count() as f64;
    let newest = golden("scenario.ts_metric.tsv")
        .lines()
        .filter_map(|l| l.split('\t').nth(2)?.parse::<i64>().ok())
        .max()
        .expect("readings")
        / 1000;

    let m = scrape_until(&addr, &log, "every record read and written", |m| {
        m.get("hourglass_job_records_read_total", &[]) == Some(162.0)
            && m.get("hourglass_job_consumer_lag", &[("partition", "0")]) == Some(0.0)
            && m.get("hourglass_job_narrow_rows_written_total", &[]) == Some(150.0)
            && m.get("hourglass_job_wide_cells_written_total", &[]) == Some(wide_cells)
            && m.get("hourglass_job_late_dropped_total", &[]) == Some(2.0)
            // Every reading's produce → durable delay, once its narrow row is flushed.
            && m.get("hourglass_produce_to_durable_seconds_count", &[]) == Some(150.0)
            && m.all("hourglass_job_rejected_total")
                .map(|s| s.value)
                .sum::<f64>()
                == 12.0
    });
    let get = |name: &str| value(&m, name, &[]);
    assert_eq!(get("hourglass_job_readings_decoded_total"), 150.0);
    assert_eq!(get("hourglass_job_expired_total"), 0.0);
    assert_eq!(get("hourglass_job_sink_retries_total"), 0.0);
    assert_eq!(get("hourglass_job_failed"), 0.0);
    // The topic's one partition is read by worker 0; worker 1 has none and stopped at once,
    // so the job's watermark is that partition's newest event time minus the 30 s bound.
    let watermark = newest - 30;
    assert_eq!(get("hourglass_job_watermark_seconds"), watermark as f64);
    let now: i64 = NOW.parse().expect("NOW");
    assert_eq!(
        get("hourglass_job_watermark_delay_seconds"),
        (now - watermark) as f64
    );
    assert_eq!(m.all("hourglass_job_consumer_lag").count(), 1, "{m:#?}");
    assert_eq!(m.types["hourglass_job_sink_batch_rows"], "histogram");
    let batches = get("hourglass_job_sink_batch_rows_count");
    assert!(batches > 0.0, "{m:#?}");
    // Every narrow row is one mutation of some flushed batch (wide and room rows add more).
    assert!(get("hourglass_job_sink_batch_rows_sum") >= 150.0, "{m:#?}");
    assert_eq!(m.types["hourglass_produce_to_durable_seconds"], "histogram");
    assert_eq!(
        value(
            &m,
            "hourglass_produce_to_durable_seconds_bucket",
            &[("le", "+Inf")]
        ),
        150.0
    );
    assert!(
        get("hourglass_produce_to_durable_seconds_sum") >= 0.0,
        "{m:#?}"
    );
    assert_eq!(m.types["hourglass_job_records_read_total"], "counter");
    assert_eq!(m.types["hourglass_job_watermark_delay_seconds"], "gauge");
    let (status, _, body) = http_get(&addr, "/healthz");
    assert_eq!((status, body.trim()), (200, "ok"));

    sigterm(&job);
    let status = job.wait().expect("waiting for the job");
    assert!(
        status.success(),
        "run after SIGTERM: {status}\n{}",
        log.lock().expect("log lock")
    );
    let s = stats(&dir);
    for (key, name) in [
        ("read", "hourglass_job_records_read_total"),
        ("ok", "hourglass_job_readings_decoded_total"),
        ("late_dropped", "hourglass_job_late_dropped_total"),
        ("narrow_rows", "hourglass_job_narrow_rows_written_total"),
        ("wide_cells", "hourglass_job_wide_cells_written_total"),
    ] {
        assert_eq!(s[key].as_f64(), Some(get(name)), "{key}: {s}");
    }
    // Rejected, by reason: the kinds of the dead-letter records.
    let mut kinds: BTreeMap<String, f64> = BTreeMap::new();
    for record in e2e::read_jsonl(&dir.join("hourglass-dead-letters.jsonl")) {
        *kinds
            .entry(record["kind"].as_str().expect("kind").to_string())
            .or_default() += 1.0;
    }
    assert_eq!(s["rejected"].as_f64(), Some(kinds.values().sum()), "{s}");
    for sample in m.all("hourglass_job_rejected_total") {
        let reason = &sample.labels["reason"];
        assert_eq!(
            sample.value,
            kinds.get(reason).copied().unwrap_or(0.0),
            "rejected {reason}"
        );
    }
}

/// A generated recording on four partitions: the lag of each partition reaches 0 once the job
/// has read every record, and the offset gauges are per partition.
#[test]
fn run_reports_consumer_lag_per_partition() {
    let Some((dir, topic)) = kafka_test("metrics-lag") else {
        return;
    };
    let file = generate(
        &dir,
        "rec.jsonl",
        &[
            "--devices",
            "40",
            "--duration",
            "30m",
            "--malformed-rate",
            "0.01",
        ],
    );
    // Malformed lines include invalid UTF-8: count newlines.
    let lines = std::fs::read(&file)
        .expect("read recording")
        .iter()
        .filter(|&&b| b == b'\n')
        .count() as f64;
    wait_ok(produce(&dir, &file, &topic, &[]), "produce");
    let config = job_config(&dir, &topic, FAST_COMMITS, IDLE_SECS);
    let mut job = run_job(&dir, &config, &["--metrics-listen", "127.0.0.1:0"]);
    let (addr, log) = metrics_address(&mut job);
    let partitions = ["0", "1", "2", "3"];
    let m = scrape_until(&addr, &log, "every partition read to its end", |m| {
        m.get("hourglass_job_records_read_total", &[]) == Some(lines)
            && partitions
                .iter()
                .all(|p| m.get("hourglass_job_consumer_lag", &[("partition", p)]) == Some(0.0))
    });
    assert_eq!(m.all("hourglass_job_consumer_lag").count(), 4, "{m:#?}");
    // Offsets are committed only up to what is durable and final: never past what was read.
    let committed: f64 = m
        .all("hourglass_job_committed_offset")
        .map(|s| s.value)
        .sum();
    assert!(committed <= lines, "{m:#?}");
    for sample in m.all("hourglass_job_committed_offset") {
        assert!(
            partitions.contains(&sample.labels["partition"].as_str()),
            "{sample:?}"
        );
    }
    sigterm(&job);
    let status = job.wait().expect("waiting for the job");
    assert!(
        status.success(),
        "{status}\n{}",
        log.lock().expect("log lock")
    );
    assert_eq!(stats(&dir)["read"].as_f64(), Some(lines));
}

/// Partitions added to the topic while the job runs are not read until a restart: the job says
/// so instead of leaving their records waiting unnoticed, and the restart reads them.
#[test]
fn partitions_added_while_running_are_announced_and_read_after_a_restart() {
    let Some((dir, topic)) = kafka_test("grow") else {
        return;
    };
    let first = readings(&[("devA", "r1")], 0..5);
    std::fs::write(dir.join("first.jsonl"), &first).expect("write");
    wait_ok(
        produce_to(&dir, &dir.join("first.jsonl"), &topic, "1", &[]),
        "produce",
    );
    let config = job_config(&dir, &topic, FAST_COMMITS, IDLE_SECS);
    let mut job = run_job(&dir, &config, &["--metrics-listen", "127.0.0.1:0"]);
    let (_addr, log) = metrics_address(&mut job);
    let log_has = |text: &str| log.lock().expect("log lock").contains(text);
    let start = Instant::now();
    while !log_has("(1 partitions)") {
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "the job did not start"
        );
        std::thread::sleep(Duration::from_millis(100));
    }

    add_partitions(&topic, 2);
    let start = Instant::now();
    while !log_has(&format!("topic {topic} now has 2 partitions")) {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the job did not announce the new partition:\n{}",
            log.lock().expect("log lock")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // A record in the new partition waits for the restart.
    let newer = readings(&[("devB", "r1")], 5..6);
    publish_to_partition(&topic, 1, b"devB", newer.trim_end().as_bytes());
    sigterm(&job);
    assert!(job.wait().expect("wait").success());
    let second = wait_ok(run_job(&dir, &config, &["--exit-on-idle", "3s"]), "run");
    assert!(second.contains("(2 partitions)"), "{second}");
    let room = room_csv(&dir, "r1");
    assert!(room.contains("\ndevB,"), "{room}");
}

/// Grows `topic` to `partitions` partitions.
fn add_partitions(topic: &str, partitions: usize) {
    use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", BROKER)
        .create()
        .expect("admin client");
    let results = pipeline::source::kafka::block_on(admin.create_partitions(
        [&NewPartitions::new(topic, partitions)],
        &AdminOptions::new(),
    ))
    .expect("create partitions");
    assert!(results.iter().all(Result::is_ok), "{results:?}");
}

/// Partitions added to the registry topic while the job runs are read from their beginning: a
/// device whose entry lands in the new partition moves.
#[test]
fn registry_topic_partitions_added_while_running_are_read() {
    let Some((dir, topic)) = kafka_test("regp-readings") else {
        return;
    };
    let registry = unique("regp-devices");
    std::fs::write(dir.join("devices.csv"), "device,room\ndevA,lab1\n").expect("write");
    hourglass_ok(
        &dir,
        &[
            "produce",
            "--registry",
            "devices.csv",
            "--brokers",
            BROKER,
            "--topic",
            &registry,
            "--partitions",
            "1",
        ],
    );
    std::fs::write(
        dir.join("r.jsonl"),
        readings(&[("devA", "own"), ("devB", "own")], 0..5),
    )
    .expect("write");
    wait_ok(produce(&dir, &dir.join("r.jsonl"), &topic, &[]), "produce");
    let config = registry_job_config(&dir, &topic, &registry);
    let mut job = run_job(
        &dir,
        &config,
        &["--exit-on-idle", "30s", "--metrics-listen", "127.0.0.1:0"],
    );
    let (_addr, log) = metrics_address(&mut job);
    let start = Instant::now();
    while !log
        .lock()
        .expect("log lock")
        .contains("device registry: read topic")
    {
        assert!(
            start.elapsed() < Duration::from_secs(180),
            "registry not read"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    add_partitions(&registry, 2);
    publish_to_partition(&registry, 1, b"devB", b"lab2");
    assert!(
        job.wait().expect("wait").success(),
        "{}",
        log.lock().expect("log lock")
    );
    let (h4, lab) = (1724101200 + 40, room_csv(&dir, "lab2"));
    assert_eq!(lab, format!("device,ts,value\ndevB,{h4},4\n"));
    assert_eq!(
        room_csv(&dir, "lab1"),
        format!("device,ts,value\ndevA,{h4},4\n")
    );
    assert_eq!(room_csv(&dir, "own"), "device,ts,value\n");
}

/// Publishes one record to one partition of `topic`.
fn publish_to_partition(topic: &str, partition: i32, key: &[u8], value: &[u8]) {
    use rdkafka::producer::{BaseRecord, Producer};
    let producer: rdkafka::producer::BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", BROKER)
        .create()
        .expect("Kafka producer");
    producer
        .send(
            BaseRecord::<[u8], [u8]>::to(topic)
                .partition(partition)
                .key(key)
                .payload(value),
        )
        .map_err(|(e, _)| e)
        .expect("send");
    producer.flush(Duration::from_secs(30)).expect("flush");
}

#[test]
fn metrics_listen_on_a_taken_port_fails_at_start() {
    let dir = scratch();
    let config = job_config(&dir, "unused", "", 60);
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = taken.local_addr().expect("address").to_string();
    let out = hourglass(
        &dir,
        &["run", "--config", "job.toml", "--metrics-listen", &addr],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains(&format!("cannot serve metrics on {addr}")) && stderr.contains("in use"),
        "{stderr}"
    );
    drop(taken);
    std::fs::write(&config, "metrics_listen = \"9464\"\n").expect("write");
    let out = hourglass(&dir, &["run", "--config", "job.toml"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("metrics_listen = \"9464\""), "{stderr}");
    std::fs::write(&config, "").expect("write");
    let out = hourglass(
        &dir,
        &[
            "run",
            "--config",
            "job.toml",
            "--metrics-listen",
            "localhost",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("--metrics-listen"), "{stderr}");
}

/// The benchmark of sustained consumption (ignored: run it on purpose, on a release build):
///
/// ```text
/// scripts/services.sh up kafka
/// cargo test --release -p hourglass-tests --test kafka_job -- --ignored --nocapture bench
/// ```
///
/// 10k devices reporting every second for 1 min (600k readings), published (a) in real time,
/// 10k readings/s, with the job running, and (b) as fast as the producer can. Reports records/s
/// while consuming and the delay from produce (record timestamp) to durable in the narrow table,
/// p50/p99, into `target/bench-kafka.json`.
#[test]
#[ignore]
fn bench_sustained_consumption() {
    if !kafka_up() {
        return;
    }
    let dir = scratch();
    let file = generate(
        &dir,
        "bench.jsonl",
        &["--devices", "10000", "--interval", "1", "--duration", "1m"],
    );
    let mut results = Vec::new();
    for (name, pace) in [("10k_per_s", &["--rate", "10000"][..]), ("max", &[][..])] {
        let topic = unique(&format!("bench-{name}"));
        let config = job_config(&dir, &topic, "", 5);
        let _ = std::fs::remove_dir_all(dir.join("store"));
        let producer = produce(&dir, &file, &topic, pace);
        std::thread::sleep(Duration::from_millis(500));
        let job = run_job(&dir, &config, &["--exit-on-idle", "5s"]);
        let produced = wait_ok(producer, "produce");
        wait_ok(job, "run");
        let s = stats(&dir);
        eprintln!("{name}: {}\n{s}", produced.trim());
        results.push(serde_json::json!({
            "case": name,
            "producer": produced.trim(),
            "consume_per_s": s["consume_per_s"],
            "delay_p50_ms": s["delay_p50_ms"],
            "delay_p99_ms": s["delay_p99_ms"],
            "delay_max_ms": s["delay_max_ms"],
            "read": s["read"],
        }));
    }
    let out = e2e::repo_root().join("target/bench-kafka.json");
    let json = serde_json::json!({
        "command": "cargo test --release -p hourglass-tests --test kafka_job -- --ignored --nocapture bench",
        "recording": "generate --devices 10000 --interval 1 --duration 1m (600k readings)",
        "workers": 2,
        "results": results,
    });
    std::fs::create_dir_all(out.parent().expect("target dir")).expect("create target dir");
    std::fs::write(&out, serde_json::to_vec_pretty(&json).expect("json")).expect("write");
    eprintln!("wrote {}", out.display());
}
