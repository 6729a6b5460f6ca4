//! `hourglass run` and `hourglass replay` as a timely cluster of two processes of one worker on
//! loopback, against the real Kafka and HBase (`scripts/services.sh up`; `make test` starts
//! them): the same rows in all three tables as a one-process replay, a SIGKILL of one process
//! that stops the other and loses nothing after a restart of both, processes that disagree on
//! their settings refused at start, a process whose peer never starts stopped at the connect
//! timeout with the peer named, and the embedded store refused in a cluster.
//!
//! Without Kafka on 127.0.0.1:9092 the Kafka tests skip, except in CI (`CI` set), where they
//! fail; a missing HBase fails them (outside CI, `HOURGLASS_SKIP_HBASE=1` skips them).
//!
//! HBase's tables are shared with every other test and run, and hourglass has no table prefix:
//! each test renames the devices of its recording with a prefix of its own and compares only
//! the rows of those devices. HBase measures TTLs against the real clock, so recordings end
//! at the real time, which `HOURGLASS_NOW` is set to.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use e2e::job::produce_args;
use e2e::services::{self, kafka_up, BROKER, THRIFT1, THRIFT2};
use e2e::{hourglass_command, KillOnDrop};
const TABLES: [&str; 3] = ["ts_metric", "ts_metric_hourly", "ts_room_latest"];

/// Whether Kafka and HBase are up: a missing Kafka skips outside CI, a missing HBase fails
/// unless `HOURGLASS_SKIP_HBASE=1` (outside CI).
fn services_up() -> bool {
    kafka_up() && hbase_up()
}

/// Creates the hourglass tables once per run of this file, as a user would before a first
/// `run --hbase` (`tables create` keeps tables that exist with the same schema): a fresh HBase
/// has none, and the tests of another file may have dropped them.
fn tables_exist() {
    static CREATED: std::sync::Once = std::sync::Once::new();
    CREATED.call_once(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = run_ok(
            dir.path(),
            real_now(),
            &["tables", "create", "--hbase", THRIFT1],
        );
        for table in TABLES {
            assert!(
                out.contains(table),
                "`tables create` said nothing of {table}:\n{out}"
            );
        }
    });
}

/// A name no other test or run uses: a topic, a group, a device prefix (letters and digits).
fn unique(name: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos();
    format!("{name}{}x{nanos}", std::process::id())
}

fn real_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
}

fn scratch() -> PathBuf {
    tempfile::tempdir().expect("tempdir").keep()
}

fn command(dir: &Path, now: u64, args: &[&str]) -> std::process::Command {
    hourglass_command(dir, &now.to_string(), args)
}

fn spawn(dir: &Path, now: u64, args: &[&str]) -> Child {
    command(dir, now, args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("starting hourglass")
}

fn ok(out: Output, what: &str) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{stderr}",
        out.status
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn run_ok(dir: &Path, now: u64, args: &[&str]) -> String {
    let out = command(dir, now, args).output().expect("running hourglass");
    ok(out, &args.join(" "))
}

/// A recording of `devices` devices over `hours` hours every 10 s, ending at the start of the
/// current hour of `now`, its device ids prefixed with `prefix`.
fn recording(dir: &Path, now: u64, prefix: &str, devices: usize, hours: u64) -> PathBuf {
    let raw = dir.join("raw.jsonl");
    let start = (now / 3600 - hours) * 3600;
    run_ok(
        dir,
        now,
        &[
            "generate",
            "--devices",
            &devices.to_string(),
            "--duration",
            &format!("{hours}h"),
            "--start",
            &start.to_string(),
            "--out",
            raw.to_str().expect("utf-8 path"),
        ],
    );
    let text = std::fs::read_to_string(&raw).expect("read the recording");
    let renamed = text.replace("\"device\":\"dev", &format!("\"device\":\"{prefix}dev"));
    assert_ne!(text, renamed, "the recording has no device field to rename");
    let file = dir.join("rec.jsonl");
    std::fs::write(&file, renamed).expect("write the recording");
    file
}

/// Publishes `file` to a new 4-partition `topic`, paced by `pace`.
fn produce(dir: &Path, now: u64, file: &Path, topic: &str, pace: &[&str]) -> Child {
    spawn(dir, now, &produce_args(file, topic, "4", pace))
}

/// Two free loopback ports, as a hosts file `hosts` in `dir`.
fn hosts_file(dir: &Path) -> PathBuf {
    // Both listeners live until both ports are known, so they differ.
    let listeners: Vec<TcpListener> = (0..2)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("a free port"))
        .collect();
    let text: String = listeners
        .iter()
        .map(|l| format!("{}\n", l.local_addr().expect("local address")))
        .collect();
    let path = dir.join("hosts");
    std::fs::write(&path, format!("# the test's cluster\n{text}")).expect("write hosts");
    path
}

/// The job's configuration in `dir/name`: one worker per process, HBase, `topic`.
fn job_config(dir: &Path, name: &str, topic: &str, window: &str) -> PathBuf {
    let path = dir.join(name);
    let text = format!(
        "workers = 1\nstatus_interval_secs = 2\n\n[window]\n{window}\n\n[store]\nkind = \"hbase\"\n\
         hbase = \"{THRIFT1}\"\n\n[store.hbase_client]\nthrift2 = \"{THRIFT2}\"\n\n[source]\n\
         brokers = \"{BROKER}\"\ntopic = \"{topic}\"\ngroup_id = \"{topic}\"\n\
         idle_partition_timeout_secs = 5\n"
    );
    std::fs::write(&path, text).expect("write the config");
    path
}

/// Process `process` of the 2-process cluster of `hosts` running `args` (with its own output
/// files), as a child with stderr piped.
fn cluster_process(dir: &Path, now: u64, hosts: &Path, process: usize, args: &[&str]) -> Child {
    let p = process.to_string();
    let dead = format!("dead-{process}.jsonl");
    let late = format!("late-{process}.jsonl");
    let mut all = args.to_vec();
    all.extend_from_slice(&[
        "--processes",
        "2",
        "--process",
        &p,
        "--hosts",
        hosts.to_str().expect("utf-8 path"),
        "--dead-letter",
        &dead,
        "--late-output",
        &late,
    ]);
    spawn(dir, now, &all)
}

fn run_args<'a>(config: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["run", "--config", config.to_str().expect("utf-8 path")];
    args.extend_from_slice(extra);
    args
}

/// Runs both processes of the cluster to their end (`--exit-on-idle`); both must exit 0.
fn run_cluster_to_idle(dir: &Path, now: u64, hosts: &Path, config: &Path) {
    let args = run_args(config, &["--exit-on-idle", "5s"]);
    let children: Vec<Child> = (0..2)
        .map(|i| cluster_process(dir, now, hosts, i, &args))
        .collect();
    for (i, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().expect("waiting for hourglass");
        ok(out, &format!("process {i}"));
    }
}

/// The rows of the devices of `prefix` in HBase's `table`, sorted.
fn hbase_rows(dir: &Path, now: u64, table: &str, prefix: &str) -> Vec<String> {
    let text = run_ok(
        dir,
        now,
        &[
            "tables",
            "dump",
            table,
            "--hbase",
            THRIFT1,
            "--thrift2",
            THRIFT2,
        ],
    );
    // Dirty marks depend on the order readings reach the window (e2e::without_dirty_marks).
    let text = e2e::without_dirty_marks(&text);
    let mut rows: Vec<String> = text
        .lines()
        .filter(|l| l.contains(prefix))
        .map(str::to_string)
        .collect();
    rows.sort();
    rows
}

/// Replays `file` with one process and one worker into the embedded store `dir/reference`, and
/// checks that the rows of every table in HBase of the devices of `prefix` are the same.
fn assert_same_as_one_process_replay(
    dir: &Path,
    now: u64,
    file: &Path,
    window: &str,
    prefix: &str,
) {
    let config = dir.join("reference.toml");
    std::fs::write(&config, format!("[window]\n{window}\n")).expect("write the config");
    run_ok(
        dir,
        now,
        &[
            "replay",
            file.to_str().expect("utf-8 path"),
            "--config",
            config.to_str().expect("utf-8 path"),
            "--store",
            "reference",
            "--workers",
            "1",
            "--dead-letter",
            "reference-dead.jsonl",
            "--late-output",
            "reference-late.jsonl",
            "--quiet",
        ],
    );
    for table in TABLES {
        let text = e2e::without_dirty_marks(&run_ok(
            dir,
            now,
            &["tables", "dump", table, "--store", "reference"],
        ));
        let mut expected: Vec<&str> = text.lines().collect();
        expected.sort();
        assert!(!expected.is_empty(), "{table}: the replay stored nothing");
        let got = hbase_rows(dir, now, table, prefix);
        if got != expected {
            let first = got
                .iter()
                .zip(&expected)
                .position(|(g, e)| g != e)
                .unwrap_or(got.len().min(expected.len()));
            panic!(
                "{table}: the cluster's rows differ from the replay's at row {} ({} vs {}):\n  \
                 cluster: {:?}\n  replay:  {:?}\n(dir {})",
                first + 1,
                got.len(),
                expected.len(),
                got.get(first),
                expected.get(first),
                dir.display()
            );
        }
    }
}

/// Without reordering beyond the watermark bound, the partitions' interleaving cannot make a
/// reading late, so the cluster must write exactly the replay's rows; early firings every 2 s
/// move the offsets within the seconds a test runs.
const WINDOW: &str = "early_fire_secs = 2";

#[test]
fn a_two_process_cluster_writes_the_rows_of_a_one_process_replay() {
    if !services_up() {
        return;
    }
    let dir = scratch();
    let now = real_now();
    let prefix = unique("pa");
    let topic = unique("hg-cluster-");
    let file = recording(&dir, now, &prefix, 20, 3);
    let producer = produce(&dir, now, &file, &topic, &[]);
    ok(producer.wait_with_output().expect("produce"), "produce");
    let hosts = hosts_file(&dir);
    let config = job_config(&dir, "job.toml", &topic, WINDOW);
    run_cluster_to_idle(&dir, now, &hosts, &config);
    assert_same_as_one_process_replay(&dir, now, &file, WINDOW, &prefix);
}

/// Waits until `job` says it is consuming (`run: topic …` on stderr); returns the rest of its
/// stderr, collected in the background.
fn wait_until_consuming(job: &mut Child) -> std::sync::mpsc::Receiver<String> {
    use std::io::BufRead;
    let stderr = job.stderr.take().expect("piped stderr");
    let (started_tx, started) = std::sync::mpsc::channel();
    let (rest_tx, rest) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut started_tx = Some(started_tx);
        let mut text = String::new();
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if line.starts_with("run: topic") {
                if let Some(tx) = started_tx.take() {
                    let _ = tx.send(());
                }
            }
            text.push_str(&line);
            text.push('\n');
        }
        let _ = rest_tx.send(text);
    });
    started
        .recv_timeout(Duration::from_secs(180))
        .expect("the job did not start consuming within 3 minutes");
    rest
}

#[test]
fn sigkill_of_one_process_stops_the_other_and_a_restart_loses_nothing() {
    if !services_up() {
        return;
    }
    let dir = scratch();
    let now = real_now();
    let prefix = unique("pb");
    let topic = unique("hg-cluster-kill-");
    // 20 devices × 6 h every 10 s: 43k readings published at 4000/s (~11 s), so the kill
    // falls mid-stream, after some hours were final and their offsets committed.
    let file = recording(&dir, now, &prefix, 20, 6);
    let producer = KillOnDrop(Some(produce(&dir, now, &file, &topic, &["--rate", "4000"])));
    let hosts = hosts_file(&dir);
    let config = job_config(&dir, "job.toml", &topic, WINDOW);
    let args = run_args(&config, &[]);
    let mut survivor = KillOnDrop(Some(cluster_process(&dir, now, &hosts, 0, &args)));
    let mut victim = KillOnDrop(Some(cluster_process(&dir, now, &hosts, 1, &args)));
    let survivor_log = wait_until_consuming(survivor.0.as_mut().expect("process 0"));
    let _victim_log = wait_until_consuming(victim.0.as_mut().expect("process 1"));
    std::thread::sleep(Duration::from_secs(4));
    let mut victim = victim.0.take().expect("process 1");
    assert!(
        victim.try_wait().expect("polling").is_none(),
        "process 1 exited before the kill"
    );
    victim.kill().expect("SIGKILL");
    victim.wait().expect("reaping process 1");

    let mut survivor = survivor.0.take().expect("process 0");
    let status = survivor.wait().expect("waiting for process 0");
    let stderr = survivor_log.recv().expect("process 0's stderr");
    assert!(
        !status.success(),
        "process 0 went on after its peer was killed ({status}):\n{stderr}"
    );
    assert!(
        stderr.contains("lost the connection to another process of the cluster")
            && stderr.contains("restart every process"),
        "process 0 did not say why it stopped ({status}):\n{stderr}"
    );

    let mut producer = producer;
    let out = producer
        .0
        .take()
        .expect("producer")
        .wait_with_output()
        .expect("produce");
    ok(out, "produce");
    run_cluster_to_idle(&dir, now, &hosts, &config);
    assert_same_as_one_process_replay(&dir, now, &file, WINDOW, &prefix);
}

/// A process that fails (here: its dead-letter file cannot be written) exits instead of
/// waiting for workers that cannot finish, and its exit stops the other process.
#[test]
fn a_failed_process_stops_the_whole_cluster() {
    if !services_up() {
        return;
    }
    let dir = scratch();
    let now = real_now();
    let prefix = unique("pd");
    let topic = unique("hg-cluster-fail-");
    let file = recording(&dir, now, &prefix, 20, 1);
    // Every partition gets records that are not readings: they go to the dead letters.
    let mut text = std::fs::read_to_string(&file).expect("read the recording");
    for i in 0..40 {
        text.push_str(&format!(
            "{{\"device\":\"{prefix}bad{i}\",\"ts\":\"soon\"}}\n"
        ));
    }
    std::fs::write(&file, text).expect("write the recording");
    ok(
        produce(&dir, now, &file, &topic, &[])
            .wait_with_output()
            .expect("produce"),
        "produce",
    );
    let hosts = hosts_file(&dir);
    let config = job_config(&dir, "job.toml", &topic, WINDOW);
    // Process 1's dead-letter file is a directory: it cannot be written, whoever runs the test.
    std::fs::create_dir(dir.join("dead-1.jsonl")).expect("create the directory");
    // Without the failed process's exit, process 0 would read on until idle and end the job
    // normally: an exit 0 the test tells apart.
    let args = run_args(&config, &["--exit-on-idle", "30s"]);
    let healthy = cluster_process(&dir, now, &hosts, 0, &args);
    let failing = cluster_process(&dir, now, &hosts, 1, &args);
    let failing = failing.wait_with_output().expect("waiting for process 1");
    let healthy = healthy.wait_with_output().expect("waiting for process 0");
    let (e1, e0) = (
        String::from_utf8_lossy(&failing.stderr),
        String::from_utf8_lossy(&healthy.stderr),
    );
    assert!(
        !failing.status.success()
            && e1.contains("dead-letter output")
            && e1.contains("which stops the others"),
        "process 1 ({}):\n{e1}",
        failing.status
    );
    assert!(
        !healthy.status.success() && e0.contains("lost the connection to another process"),
        "process 0 ({}):\n{e0}",
        healthy.status
    );
}

#[test]
fn processes_that_disagree_are_refused_naming_the_setting() {
    if !services_up() {
        return;
    }
    let dir = scratch();
    let now = real_now();
    let prefix = unique("pc");
    let file = recording(&dir, now, &prefix, 2, 1);
    let hosts = hosts_file(&dir);
    let file_s = file.to_str().expect("utf-8 path");
    let children: Vec<Child> = [30, 60]
        .iter()
        .enumerate()
        .map(|(i, bound)| {
            let config = dir.join(format!("job-{i}.toml"));
            std::fs::write(
                &config,
                format!(
                    "[window]\nwatermark_bound_secs = {bound}\n[store]\nkind = \"hbase\"\n\
                     hbase = \"{THRIFT1}\"\n[store.hbase_client]\nthrift2 = \"{THRIFT2}\"\n"
                ),
            )
            .expect("write the config");
            let config = config.to_str().expect("utf-8 path").to_string();
            cluster_process(
                &dir,
                now,
                &hosts,
                i,
                &[
                    "replay",
                    file_s,
                    "--config",
                    &config,
                    "--workers",
                    "1",
                    "--quiet",
                ],
            )
        })
        .collect();
    for (i, child) in children.into_iter().enumerate() {
        let out = child.wait_with_output().expect("waiting for hourglass");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "process {i} ran:\n{stderr}");
        assert!(
            stderr.contains("window.watermark_bound_secs")
                && stderr.contains("start every process with the same settings"),
            "process {i} did not name the setting:\n{stderr}"
        );
    }
    assert!(
        hbase_rows(&dir, now, "ts_metric", &prefix).is_empty(),
        "a refused cluster wrote rows"
    );
}

#[test]
fn the_embedded_store_is_refused_in_a_cluster() {
    let dir = scratch();
    let file = dir.join("one.jsonl");
    std::fs::write(
        &file,
        "{\"device\":\"d1\",\"ts\":1724101200,\"temp\":20.5}\n",
    )
    .expect("write the recording");
    let hosts = dir.join("hosts");
    std::fs::write(&hosts, "127.0.0.1:1\n127.0.0.1:2\n").expect("write hosts");
    let out = command(
        &dir,
        1_724_104_800,
        &[
            "replay",
            file.to_str().expect("utf-8 path"),
            "--store",
            "store",
            "--processes",
            "2",
            "--process",
            "0",
            "--hosts",
            hosts.to_str().expect("utf-8 path"),
        ],
    )
    .output()
    .expect("running hourglass");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the cluster ran:\n{stderr}");
    assert!(
        stderr.contains("embedded store cannot be used by a cluster") && stderr.contains("HBase"),
        "{stderr}"
    );
    assert!(
        !dir.join("store").exists(),
        "the store was created before the refusal"
    );
}

/// HBase for a test that needs no Kafka: `false` to skip (outside CI, `HOURGLASS_SKIP_HBASE=1`),
/// a panic when it is unreachable.
fn hbase_up() -> bool {
    if !services::hbase_up("a test against the live HBase") {
        return false;
    }
    tables_exist();
    true
}

/// Waits for `child` to exit, at most `bound`; kills it and fails past it.
fn wait_at_most(mut child: Child, bound: Duration, what: &str) -> Output {
    let start = std::time::Instant::now();
    while child.try_wait().expect("polling hourglass").is_none() {
        if start.elapsed() > bound {
            let _ = child.kill();
            let out = child.wait_with_output().expect("waiting for hourglass");
            panic!(
                "{what} still waited after {bound:?}:\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    child.wait_with_output().expect("waiting for hourglass")
}

#[test]
fn a_process_whose_peer_never_starts_stops_at_the_connect_timeout_naming_it() {
    if !hbase_up() {
        return;
    }
    let dir = scratch();
    let now = real_now();
    let file = dir.join("one.jsonl");
    std::fs::write(
        &file,
        format!("{{\"device\":\"d1\",\"ts\":{},\"temp\":20.5}}\n", now - 60),
    )
    .expect("write the recording");
    let file_s = file.to_str().expect("utf-8 path");
    // Two clusters of two processes, of which only one process is started each: process 0
    // waits for process 1 to connect to it, process 1 for process 0 to listen.
    let started: Vec<(usize, Vec<String>, Child)> = [0usize, 1]
        .into_iter()
        .map(|process| {
            let sub = dir.join(format!("cluster-{process}"));
            std::fs::create_dir_all(&sub).expect("mkdir");
            let hosts = hosts_file(&sub);
            let addresses: Vec<String> = std::fs::read_to_string(&hosts)
                .expect("read hosts")
                .lines()
                .filter(|l| !l.starts_with('#') && !l.is_empty())
                .map(str::to_string)
                .collect();
            let child = cluster_process(
                &sub,
                now,
                &hosts,
                process,
                &[
                    "replay",
                    file_s,
                    "--hbase",
                    THRIFT1,
                    "--thrift2",
                    THRIFT2,
                    "--workers",
                    "1",
                    "--quiet",
                    "--connect-timeout",
                    "2s",
                ],
            );
            (process, addresses, child)
        })
        .collect();
    for (process, addresses, child) in started {
        // Generous: the bound is the harness's, not a speed the test asserts.
        let out = wait_at_most(
            child,
            Duration::from_secs(120),
            &format!("process {process}"),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "process {process} ran:\n{stderr}");
        let expected = if process == 0 {
            format!("process 1 at {} never connected", addresses[1])
        } else {
            format!("process 0 at {} could not be reached", addresses[0])
        };
        assert!(
            stderr.contains("the cluster did not connect within 2s") && stderr.contains(&expected),
            "process {process} did not name its missing peer ({expected}):\n{stderr}"
        );
    }
}
