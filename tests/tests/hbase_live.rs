//! hourglass against a live HBase (started by `scripts/services.sh up hbase`; `make test` does):
//! parity with the embedded store, pre-split regions, a standard client reading our rows, a
//! restart of HBase in the middle of a replay, and the early-firing and room-view scenarios of
//! the embedded tests (`early_firing_common`, `room_view_common`) run against HBase.
//!
//! Why one long file: as `kafka_job.rs`, the HBase scenarios take minutes each and run in
//! parallel only within one test binary.
//!
//! These tests fail when HBase is not reachable on 127.0.0.1:9090/9091. Outside CI,
//! `HOURGLASS_SKIP_HBASE=1` skips them. HBase tables are global, so the tests run one at a time
//! (a shared lock) and each drops and recreates the tables first.
//!
//! HBase measures TTLs against the real clock, so recordings are replayed with `--rebase-time`
//! and `HOURGLASS_NOW` set to the real time, the same for the HBase and the embedded replays.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use e2e::services::{hbase_up, THRIFT1, THRIFT2};
use e2e::{data, hourglass_command, ok_stdout, repo_root, KillOnDrop};
use sensor::tables;
use sensor::tables::{HOURLY_TABLE, NARROW_TABLE, ROOM_TABLE};
use sinks::admin::Created;
use sinks::hbase::admin;
use sinks::hbase::{HbaseConfig, HbaseStore, HbaseWriter};
use sinks::table::ScanSpec;

mod early_firing_common;
mod room_view_common;

/// Serialises the tests of this file: they share HBase's tables.
static HBASE: Mutex<()> = Mutex::new(());

/// Takes the HBase lock, or returns `None` when the HBase tests are skipped.
///
/// # Panics
/// When HBase is not reachable, with what to do about it.
fn hbase() -> Option<MutexGuard<'static, ()>> {
    let guard = HBASE.lock().unwrap_or_else(PoisonError::into_inner);
    hbase_up("a test against the live HBase").then_some(guard)
}

fn config() -> HbaseConfig {
    let mut cfg = HbaseConfig::new(THRIFT1).with_thrift2(THRIFT2);
    cfg.retry.max_elapsed = Some(Duration::from_secs(120));
    cfg
}

/// The names of every hourglass table.
fn table_names() -> Vec<&'static str> {
    tables::all_tables().iter().map(|t| t.name).collect()
}

/// Drops and recreates the hourglass tables: every test starts from empty tables.
fn reset_tables() {
    let cfg = config();
    admin::drop_tables(&cfg, &table_names()).expect("dropping the tables");
    let created = admin::create_tables(&cfg, &tables::all_tables()).expect("creating the tables");
    assert!(
        created.iter().all(|(_, c)| *c == Created::Created),
        "{created:?}"
    );
}

/// The real time, epoch seconds: HBase's TTL uses it, so the embedded store must too.
fn real_now() -> String {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
        .to_string()
}

/// The real time, epoch milliseconds, for cells written straight through a writer.
fn real_now_ms() -> i64 {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970");
    i64::try_from(since_epoch.as_millis()).expect("ms fit i64")
}

/// Runs `hourglass args…` with `HOURGLASS_NOW=now` and returns its stdout.
fn run(dir: &Path, now: &str, args: &[&str]) -> String {
    let out = hourglass_command(dir, now, args)
        .output()
        .expect("running hourglass");
    ok_stdout(args, out)
}

/// Replays `file` rebased to `now` into HBase and into the embedded store `dir/store`; returns
/// both summaries.
fn replay_both(
    dir: &Path,
    now: &str,
    file: &str,
    extra: &[&str],
) -> (serde_json::Value, serde_json::Value) {
    let mut stats = Vec::new();
    for (name, backend) in [
        ("hbase", ["--hbase", THRIFT1]),
        ("embedded", ["--store", "store"]),
    ] {
        let json = format!("{name}.stats.json");
        let mut args = vec![
            "replay",
            file,
            "--rebase-time",
            "--stats-json",
            &json,
            "--quiet",
        ];
        args.extend(backend);
        args.extend(extra);
        run(dir, now, &args);
        let text = std::fs::read_to_string(dir.join(&json)).expect("stats written");
        stats.push(serde_json::from_str(&text).expect("stats are JSON"));
    }
    let embedded = stats.pop().expect("two replays");
    (stats.pop().expect("two replays"), embedded)
}

fn dump(dir: &Path, now: &str, table: &str, backend: &[&str]) -> String {
    let mut args = vec!["tables", "dump", table];
    args.extend(backend);
    run(dir, now, &args)
}

fn assert_same_dumps(dir: &Path, now: &str) -> Vec<String> {
    let mut dumps = Vec::new();
    // The room view too: out-of-order input, moves and deletes must end the same in HBase.
    for table in [NARROW_TABLE, HOURLY_TABLE, ROOM_TABLE] {
        let raw = dump(dir, now, table, &["--hbase", THRIFT1]);
        let hbase = e2e::without_dirty_marks(&raw);
        let embedded = e2e::without_dirty_marks(&dump(dir, now, table, &["--store", "store"]));
        assert!(!hbase.is_empty(), "{table} is empty in HBase");
        if hbase != embedded {
            let first = hbase
                .lines()
                .zip(embedded.lines())
                .position(|(h, e)| h != e)
                .unwrap_or_else(|| hbase.lines().count().min(embedded.lines().count()));
            panic!(
                "{table} differs between HBase and the embedded store at line {}:\n  HBase:    \
                 {:?}\n  embedded: {:?}\n({} vs {} lines)",
                first + 1,
                hbase.lines().nth(first),
                embedded.lines().nth(first),
                hbase.lines().count(),
                embedded.lines().count()
            );
        }
        dumps.push(raw);
    }
    dumps
}

fn scratch() -> tempfile::TempDir {
    tempfile::tempdir().expect("tempdir")
}

/// The device of a narrow row key `<bucket>_<device>_<reversed ts>`.
fn narrow_device(key: &str) -> &str {
    let rest = &key[3..];
    &rest[..rest.rfind('_').expect("narrow key has a timestamp")]
}

#[test]
fn replay_into_hbase_stores_and_answers_exactly_what_the_embedded_store_does() {
    let Some(_hbase) = hbase() else { return };
    let dir = scratch();
    let dir = dir.path();
    let now = real_now();
    let scenario = data("scenario.jsonl");
    let scenario = scenario.to_str().expect("utf-8 path");

    // Without tables, the replay stops at once and says what to do.
    admin::drop_tables(&config(), &table_names()).expect("dropping the tables");
    let args = ["replay", scenario, "--hbase", THRIFT1, "--quiet"];
    let out = hourglass_command(dir, &now, &args)
        .output()
        .expect("running hourglass");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "replay without tables succeeded");
    assert!(
        stderr.contains("not found in HBase") && stderr.contains("hourglass tables create --hbase"),
        "{stderr}"
    );

    reset_tables();
    let (hb, emb) = replay_both(dir, &now, scenario, &["--workers", "2"]);
    for key in [
        "read",
        "ok",
        "rejected",
        "late_dropped",
        "narrow_rows",
        "wide_cells",
    ] {
        assert_eq!(hb[key], emb[key], "{key}: HBase {hb} vs embedded {emb}");
    }
    let dumps = assert_same_dumps(dir, &now);

    // Same answers to every dashboard query, for every device and hour.
    let devices: BTreeSet<&str> = dumps[0]
        .lines()
        .map(|l| narrow_device(l.split('\t').next().expect("row key")))
        .collect();
    let hours: BTreeSet<(&str, &str)> = dumps[1]
        .lines()
        .map(|l| {
            let key = l.split('\t').next().expect("row key");
            key.rsplit_once('_').expect("wide key has an hour")
        })
        .collect();
    assert!(
        devices.len() >= 3 && hours.len() >= 3,
        "{devices:?} {hours:?}"
    );
    let n: i64 = now.parse().expect("now");
    let (from, to) = ((n - 3 * 86_400).to_string(), (n + 3600).to_string());
    let mut queries: Vec<Vec<&str>> = Vec::new();
    for d in &devices {
        queries.push(vec!["query", "latest", "--device", d]);
        queries.push(vec![
            "query", "curve", "--device", d, "--from", &from, "--to", &to,
        ]);
    }
    for (d, h) in &hours {
        queries.push(vec!["query", "hour", "--device", d, "--hour", h]);
    }
    for q in &queries {
        let mut hbase_args = q.clone();
        hbase_args.extend(["--format", "json", "--hbase", THRIFT1]);
        let mut embedded_args = q.clone();
        embedded_args.extend(["--format", "json", "--store", "store"]);
        let from_hbase = run(dir, &now, &hbase_args);
        assert!(!from_hbase.trim().is_empty(), "{q:?} answered nothing");
        assert_eq!(from_hbase, run(dir, &now, &embedded_args), "{q:?}");
    }
    // One truth on HBase: the default curve (wide rows for whole hours; a dirty hour, here the
    // very late and the repeated readings', from the narrow table) equals the narrow scan.
    let dirty = dumps[1]
        .lines()
        .filter(|l| l.contains("\tt:dirty\t"))
        .count();
    assert!(
        dirty >= 2,
        "the scenario's very late readings mark their hours"
    );
    for d in &devices {
        let curve = |source: &str| {
            run(
                dir,
                &now,
                &[
                    "query", "curve", "--device", d, "--from", &from, "--to", &to, "--source",
                    source, "--format", "csv", "--hbase", THRIFT1,
                ],
            )
        };
        assert_eq!(
            curve("auto"),
            curve("narrow"),
            "{d}: auto vs narrow on HBase"
        );
    }
}

#[test]
fn tables_are_pre_split_and_every_region_receives_writes() {
    let Some(_hbase) = hbase() else { return };
    let cfg = config();
    reset_tables();
    let dir = scratch();
    let dir = dir.path();
    let now = real_now();

    let described = run(dir, &now, &["tables", "describe", "--hbase", THRIFT1]);
    assert!(
        described
            .contains("family t: TTL 7776000, COMPRESSION SNAPPY, BLOOMFILTER ROW, VERSIONS 1"),
        "{described}"
    );
    assert!(described.contains("16 regions:"), "{described}");
    // Each sensor table's section says its 15 split points are region boundaries; the profile
    // job's tables are described too, or named as not created yet.
    for table in table_names() {
        let section = described
            .split("\ntable ")
            .find(|s| s.starts_with(&format!("{table}\n")))
            .unwrap_or_else(|| panic!("no section of {table}: {described}"));
        assert!(
            section.contains("split points: all 15 present as region boundaries"),
            "{described}"
        );
    }
    for table in [profile::PROFILE_TABLE, profile::HISTORY_TABLE] {
        assert!(
            described.contains(&format!("\ntable {table}\n"))
                || described.contains(&format!(
                    "table {table}: not in HBase; `hourglass tables create` creates it"
                )),
            "{described}"
        );
    }
    let ddl = run(dir, &now, &["tables", "ddl"]);
    assert!(
        ddl.starts_with("# split points: default")
            && ddl.contains("create 'ts_room_latest', {NAME => 't'")
            && ddl.contains("SPLITS => ['dev06250_', 'dev12500_'")
            && ddl.contains("SPLITS => ['room062_', 'room125_'"),
        "{ddl}"
    );
    let again = run(dir, &now, &["tables", "create", "--hbase", THRIFT1]);
    assert!(
        again.contains("ts_metric: exists with the same schema"),
        "{again}"
    );
    // `tables create` makes the profile job's tables too, pre-split over their salt.
    for table in [profile::PROFILE_TABLE, profile::HISTORY_TABLE] {
        assert!(
            again.contains(&format!("{table}: created"))
                || again.contains(&format!("{table}: exists with the same schema")),
            "{again}"
        );
        assert_eq!(
            admin::table_regions(&cfg, table).expect("regions").len(),
            16,
            "{table}"
        );
    }

    let regions = admin::table_regions(&cfg, NARROW_TABLE).expect("regions");
    let bounds: Vec<(String, String)> = regions
        .iter()
        .map(|r| {
            (
                String::from_utf8_lossy(&r.start).into_owned(),
                String::from_utf8_lossy(&r.end).into_owned(),
            )
        })
        .collect();
    let mut expected = vec![(String::new(), "01".to_string())];
    expected.extend((1..15).map(|b| (format!("{b:02}"), format!("{:02}", b + 1))));
    expected.push(("15".to_string(), String::new()));
    assert_eq!(bounds, expected);

    run(
        dir,
        &now,
        &[
            "generate",
            "--devices",
            "500",
            "--duration",
            "10m",
            "--out",
            "traffic.jsonl",
        ],
    );
    let stats = run(
        dir,
        &now,
        &[
            "replay",
            "traffic.jsonl",
            "--rebase-time",
            "--hbase",
            THRIFT1,
            "--quiet",
            "--stats-json",
            "/dev/stdout",
        ],
    );
    let stats: serde_json::Value = serde_json::from_str(&stats).expect("stats JSON");
    assert_eq!(stats["narrow_rows"], 500 * 60, "{stats}");

    let store = HbaseStore::new(&cfg);
    for r in &regions {
        let spec = ScanSpec {
            start: r.start.clone(),
            stop: r.end.clone(),
            limit: Some(1),
            columns: Vec::new(),
            time_range: None,
            ..ScanSpec::default()
        };
        let rows = store.scan_rows(NARROW_TABLE, &spec).expect("scan a region");
        assert_eq!(
            rows.len(),
            1,
            "region [{:?}, {:?}) received no write",
            String::from_utf8_lossy(&r.start),
            String::from_utf8_lossy(&r.end)
        );
    }

    // A table made before the pre-split: `create` says it is hot and how to split it, `split`
    // prints the shell commands, and recreates it pre-split while it is empty.
    assert!(
        !admin::recreate_if_empty(&cfg, &tables::hourly_table()).expect("recreate"),
        "a table with rows was recreated"
    );
    admin::drop_tables(&cfg, &[HOURLY_TABLE]).expect("drop");
    let unsplit = tables::hourly_table_split(&tables::IdSplits::none());
    admin::create_tables(&cfg, &[unsplit]).expect("create an unsplit table");
    let again = run(dir, &now, &["tables", "create", "--hbase", THRIFT1]);
    assert!(
        again.contains(
            "ts_metric_hourly: exists with the same schema, but in 1 region without 15 of the 15 \
             split points asked for (dev06250_, dev12500_, dev18750_, dev25000_, … 11 more): every \
             read and write of it goes to one region server"
        ) && again.contains("`hourglass tables split --table ts_metric_hourly`"),
        "{again}"
    );
    let described = run(dir, &now, &["tables", "describe", "--hbase", THRIFT1]);
    assert!(
        described.contains("split points: 15 of 15 missing"),
        "{described}"
    );
    let split_args = [
        "tables",
        "split",
        "--table",
        HOURLY_TABLE,
        "--hbase",
        THRIFT1,
    ];
    let script = run(dir, &now, &split_args);
    let commands: Vec<&str> = script.lines().filter(|l| !l.starts_with('#')).collect();
    let expected: Vec<String> = (1..16)
        .map(|k| format!("split 'ts_metric_hourly', 'dev{:05}_'", k * 6250))
        .collect();
    assert_eq!(commands, expected, "{script}");
    assert!(script.contains("hbase shell -n split.rb"), "{script}");
    let mut recreate = split_args.to_vec();
    recreate.push("--recreate-if-empty");
    let recreated = run(dir, &now, &recreate);
    assert!(
        recreated.contains("ts_metric_hourly: was empty; created again with 16 regions"),
        "{recreated}"
    );
    let starts: Vec<Vec<u8>> = admin::table_regions(&cfg, HOURLY_TABLE)
        .expect("regions")
        .into_iter()
        .skip(1)
        .map(|r| r.start)
        .collect();
    assert_eq!(starts, tables::hourly_table().split_keys);
    let done = run(dir, &now, &split_args);
    assert!(done.contains("already split at all 15"), "{done}");

    // A table with another schema is refused with what differs.
    admin::drop_tables(&cfg, &[HOURLY_TABLE]).expect("drop");
    let mut other = tables::hourly_table();
    other.families[0].ttl_secs = Some(86_400);
    other.families[0].compression = sinks::schema::Compression::None;
    admin::create_tables(&cfg, &[other]).expect("create a different table");
    let err = run_err(dir, &now, &["tables", "create", "--hbase", THRIFT1]);
    assert!(
        err.contains("ts_metric_hourly exists in HBase with a different schema")
            && err.contains("TTL is 86400, want 7776000")
            && err.contains("COMPRESSION is NONE, want SNAPPY"),
        "{err}"
    );
    reset_tables();
}

fn run_err(dir: &Path, now: &str, args: &[&str]) -> String {
    let out = hourglass_command(dir, now, args)
        .output()
        .expect("running hourglass");
    assert!(!out.status.success(), "hourglass {args:?} succeeded");
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn venv_python() -> PathBuf {
    let python = repo_root().join(".services/venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: `scripts/services.sh up hbase` creates the venv with happybase",
        python.display()
    );
    python
}

#[test]
fn happybase_reads_our_rows_with_the_seed_conventions() {
    let Some(_hbase) = hbase() else { return };
    reset_tables();
    let dir = scratch();
    let dir = dir.path();
    let now = real_now();
    let scenario = data("scenario.jsonl");
    run(
        dir,
        &now,
        &[
            "replay",
            scenario.to_str().expect("utf-8"),
            "--rebase-time",
            "--hbase",
            THRIFT1,
            "--quiet",
        ],
    );
    let narrow = dump(dir, &now, NARROW_TABLE, &["--hbase", THRIFT1]);
    let hourly = dump(dir, &now, HOURLY_TABLE, &["--hbase", THRIFT1]);

    // One reading of each device, found by hourglass; Python recomputes its keys on its own.
    let mut checked = 0;
    let mut seen = BTreeSet::new();
    for line in narrow.lines().filter(|l| l.contains("\tt:v\t")) {
        let cols: Vec<&str> = line.split('\t').collect();
        let device = narrow_device(cols[0]);
        if !seen.insert(device.to_string()) {
            continue;
        }
        let ts_ms: i64 = cols[2].parse().expect("ts");
        let ts = (ts_ms / 1000).to_string();
        let out = Command::new(venv_python())
            .arg(repo_root().join("scripts/hbase_read.py"))
            .args([device, &ts, "--port", "9090"])
            .stderr(Stdio::inherit())
            .output()
            .expect("running scripts/hbase_read.py");
        assert!(out.status.success(), "hbase_read.py {device} {ts} failed");
        let read: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");

        assert_eq!(read["narrow_key"], cols[0], "{read}");
        let value = serde_json::json!([cols[3], ts_ms]);
        assert_eq!(read["narrow"]["t:v"], value, "{read}");
        let extra = narrow
            .lines()
            .find(|l| l.starts_with(&format!("{}\tt:x\t", cols[0])))
            .map(|l| l.split('\t').nth(3).expect("value"));
        if let Some(extra) = extra {
            assert_eq!(
                read["narrow"]["t:x"],
                serde_json::json!([extra, ts_ms]),
                "{read}"
            );
        }

        let hour_key = read["hourly_key"].as_str().expect("hourly key");
        let (qualifier, cell) = read["hourly"]
            .as_object()
            .expect("hourly cells")
            .iter()
            .next()
            .unwrap_or_else(|| panic!("no hourly cell for {device} at {ts}: {read}"));
        // Every cell of a wide row is stamped with the hour's last millisecond.
        let hour_start: i64 = hour_key
            .rsplit('_')
            .next()
            .and_then(|s| s.parse().ok())
            .expect("hour start");
        assert_eq!(cell[1], hour_start * 1000 + 3_599_999, "{read}");
        let stored = format!(
            "{hour_key}\t{qualifier}\t{}\t{}",
            cell[1],
            cell[0].as_str().expect("value")
        );
        assert!(
            hourly.lines().any(|l| l == stored),
            "happybase read {stored:?}, which hourglass did not store"
        );
        assert_eq!(cell[0], cols[3], "wide and narrow values differ: {read}");
        checked += 1;
    }
    assert!(checked >= 3, "only {checked} devices checked");
}

#[test]
fn an_hbase_restart_in_the_middle_of_a_replay_loses_nothing() {
    let Some(_hbase) = hbase() else { return };
    reset_tables();
    let dir = scratch();
    let dir = dir.path();
    let now = real_now();
    run(
        dir,
        &now,
        &[
            "generate",
            "--devices",
            "2000",
            "--duration",
            "20m",
            "--out",
            "traffic.jsonl",
        ],
    );

    // 20 recorded minutes at 40x: about 30 s of replay, plus the restarts.
    let args = [
        "replay",
        "traffic.jsonl",
        "--rebase-time",
        "--speed",
        "40",
        "--hbase",
        THRIFT1,
        "--stats-json",
        "hbase.stats.json",
        "--quiet",
    ];
    let mut replay = KillOnDrop(Some(
        hourglass_command(dir, &now, &args)
            .env("HOURGLASS_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting the replay"),
    ));
    std::thread::sleep(Duration::from_secs(5));
    let services = repo_root().join("scripts/services.sh");
    let started = Instant::now();
    let status = Command::new(&services)
        .args(["restart", "hbase"])
        .status()
        .expect("running scripts/services.sh restart hbase");
    assert!(status.success(), "restarting HBase failed");
    eprintln!("HBase restarted in {:.0?}", started.elapsed());
    assert!(
        replay
            .0
            .as_mut()
            .expect("running")
            .try_wait()
            .expect("replay status")
            .is_none(),
        "the replay ended before HBase was back: the restart did not happen mid-replay"
    );
    // The gateways too: the writers see refused connections and must reconnect.
    let status = Command::new(&services)
        .args(["restart", "thrift"])
        .status()
        .expect("running scripts/services.sh restart thrift");
    assert!(status.success(), "restarting the Thrift gateways failed");

    let out = replay
        .0
        .take()
        .expect("running")
        .wait_with_output()
        .expect("waiting for the replay");
    ok_stdout(&args, out);
    let text = std::fs::read_to_string(dir.join("hbase.stats.json")).expect("stats written");
    let stats: serde_json::Value = serde_json::from_str(&text).expect("stats JSON");
    assert_eq!(stats["ok"], 2000 * 120, "{stats}");

    // The same file into the embedded store at full speed: identical tables.
    run(
        dir,
        &now,
        &[
            "replay",
            "traffic.jsonl",
            "--rebase-time",
            "--store",
            "store",
            "--quiet",
        ],
    );
    let dumps = assert_same_dumps(dir, &now);
    let narrow_rows = dumps[0]
        .lines()
        .map(|l| l.split('\t').next().expect("key"))
        .collect::<BTreeSet<_>>()
        .len();
    let point_cells = dumps[1]
        .lines()
        .filter(|l| {
            l.split('\t')
                .nth(1)
                .is_some_and(|c| c.starts_with("t:") && c[2..].bytes().all(|b| b.is_ascii_digit()))
        })
        .count();
    assert_eq!(
        narrow_rows as u64,
        stats["narrow_rows"].as_u64().expect("count")
    );
    assert_eq!(
        point_cells as u64,
        stats["wide_cells"].as_u64().expect("count")
    );
}

#[test]
fn deletes_hide_the_cells_up_to_their_timestamp_as_in_the_embedded_store() {
    use sinks::hbase::HbaseWriter;
    use sinks::table::{Cell, Mutation, TableReader, TableWriter};

    let Some(_hbase) = hbase() else { return };
    reset_tables();
    let cfg = config();
    let t0 = real_now_ms() - 60_000;
    let put = |row: &str, q: &str, ts: i64, v: &str| Mutation::Put {
        table: HOURLY_TABLE,
        row: row.as_bytes().to_vec(),
        cells: vec![Cell {
            family: "t".into(),
            qualifier: q.as_bytes().to_vec(),
            ts_ms: t0 + ts,
            value: v.as_bytes().to_vec(),
        }],
    };
    let delete = |row: &str, ts: i64| Mutation::DeleteRow {
        table: HOURLY_TABLE,
        row: row.as_bytes().to_vec(),
        ts_ms: t0 + ts,
    };
    let batches = [
        vec![
            put("r1", "1", 1000, "a"),
            put("r1", "3", 3000, "c"),
            put("r2", "1", 1000, "x"),
            delete("r1", 2000),
            put("r3", "1", 1000, "y"),
        ],
        vec![delete("r3", 1000), put("r2", "2", 2000, "z")],
    ];

    let dir = scratch();
    let embedded = sinks::embedded::EmbeddedStore::open(dir.path(), &tables::all_tables())
        .expect("embedded store");
    let mut embedded_writer = embedded.writer();
    // With the tables' families, deletes travel in the batches; without, each is one
    // deleteAllRowTs call.
    let mut batched = HbaseWriter::new(&cfg).for_tables(&tables::all_tables());
    let mut single = HbaseWriter::new(&cfg);
    for (i, batch) in batches.into_iter().enumerate() {
        embedded_writer
            .write(batch.clone())
            .expect("embedded write");
        embedded_writer.flush().expect("embedded flush");
        let writer = if i == 0 { &mut batched } else { &mut single };
        writer.write(batch).expect("HBase write");
        writer.flush().expect("HBase flush");
    }
    let store = HbaseStore::new(&cfg);
    let all = ScanSpec::default();
    let from_hbase = store.scan(HOURLY_TABLE, &all).expect("scan HBase");
    let from_embedded = embedded.scan(HOURLY_TABLE, &all).expect("scan embedded");
    let cells = |rows: &[sinks::table::Row]| -> Vec<(String, String, String)> {
        rows.iter()
            .flat_map(|r| {
                r.cells.iter().map(|c| {
                    (
                        String::from_utf8_lossy(&r.key).into_owned(),
                        String::from_utf8_lossy(&c.qualifier).into_owned(),
                        String::from_utf8_lossy(&c.value).into_owned(),
                    )
                })
            })
            .collect()
    };
    let expected: Vec<(String, String, String)> =
        [("r1", "3", "c"), ("r2", "1", "x"), ("r2", "2", "z")]
            .iter()
            .map(|(r, q, v)| ((*r).into(), (*q).into(), (*v).into()))
            .collect();
    assert_eq!(cells(&from_hbase), expected);
    assert_eq!(from_hbase, from_embedded);
}

#[test]
fn early_firings_keep_the_open_hour_in_step_with_the_narrow_table_in_hbase() {
    let Some(_hbase) = hbase() else { return };
    reset_tables();
    let cfg = config();
    // The hour before the current one: HBase hides cells older than the TTL by the real clock.
    let now: i64 = real_now().parse().expect("now");
    let h = now - now % 3600 - 3600;
    let dir = scratch();
    let job_cfg = cfg.clone();
    early_firing_common::open_hour_follows_the_narrow_table(
        h,
        &HbaseStore::new(&cfg),
        Arc::new(move || Box::new(HbaseWriter::new(&job_cfg).for_tables(&tables::all_tables()))),
        dir.path(),
    );
}

/// A dashboard's `Get` of a wide row sees each window pane whole: the pane's points with the
/// summary that counts them, never points that the summary does not count yet. (With event-time
/// cell stamps a pane went out as one `mutateRowsTs` call per timestamp, and a `Get` in between
/// saw the new points with the old summary.)
#[test]
fn a_get_of_a_wide_row_never_sees_points_without_their_summary() {
    use sensor::codec::hourly::wide_put;
    use sensor::query;
    use sensor::summary::HourSummary;
    use sinks::table::TableWriter;
    use std::sync::atomic::{AtomicBool, Ordering};

    let Some(_hbase) = hbase() else { return };
    reset_tables();
    let cfg = config();
    let now: i64 = real_now().parse().expect("now");
    let h = now - now % 3600 - 3600;
    const PANES: i64 = 60;
    let done = Arc::new(AtomicBool::new(false));
    // The writer starts once the reader has read (the empty row), and paces its panes, so that
    // reads land while the row is being written however busy the machine is.
    let reading = Arc::new(std::sync::Barrier::new(2));
    let writer = {
        let cfg = cfg.clone();
        let done = done.clone();
        let reading = reading.clone();
        std::thread::spawn(move || {
            let mut writer = HbaseWriter::new(&cfg).for_tables(&tables::all_tables());
            let mut all = Vec::new();
            reading.wait();
            for pane in 0..PANES {
                std::thread::sleep(Duration::from_millis(10));
                // 60 points a pane, each second of its minute, in a different order each time.
                let points: Vec<(i64, f64)> = (0..60)
                    .map(|i| (h + pane * 60 + (i * 7 + pane) % 60, (pane * 60 + i) as f64))
                    .collect();
                all.extend_from_slice(&points);
                let summary = HourSummary::of_points(&all).expect("points");
                writer
                    .write(vec![wide_put("dev1", h, &points, Some(&summary))])
                    .expect("write");
                writer.flush().expect("flush");
            }
            done.store(true, Ordering::SeqCst);
        })
    };
    let store = HbaseStore::new(&cfg);
    let empty =
        query::hour(&store, sensor::codec::narrow::KeyScheme::Salted, "dev1", h).expect("hour");
    assert!(
        empty.points.is_empty() && empty.summary.is_none(),
        "{empty:?}"
    );
    reading.wait();
    let (mut gets, mut partial) = (0, 0);
    while !done.load(Ordering::SeqCst) {
        let hour =
            query::hour(&store, sensor::codec::narrow::KeyScheme::Salted, "dev1", h).expect("hour");
        gets += 1;
        if hour.points.is_empty() {
            assert_eq!(hour.summary, None, "a summary without points");
            continue;
        }
        assert_eq!(
            hour.summary,
            HourSummary::of_points(&hour.points),
            "get {gets}: the summary does not count the row's {} points",
            hour.points.len()
        );
        if hour.points.len() < (PANES * 60) as usize {
            partial += 1;
        }
    }
    writer.join().expect("writer");
    let hour =
        query::hour(&store, sensor::codec::narrow::KeyScheme::Salted, "dev1", h).expect("hour");
    assert_eq!(hour.points.len(), (PANES * 60) as usize);
    assert_eq!(hour.summary, HourSummary::of_points(&hour.points));
    // Not vacuous: reads landed while the row was still being written.
    assert!(
        partial >= 10,
        "only {partial} of {gets} gets saw the row mid-way"
    );
}

/// The room-view scenarios' target: HBase, recordings rebased to the real time.
fn hbase_target() -> room_view_common::Target {
    room_view_common::Target {
        backend: vec!["--hbase".into(), THRIFT1.into()],
        now: real_now(),
        rebase: true,
        live_reads: true,
    }
}

#[test]
fn room_view_in_hbase_devices_follow_their_newest_reading_between_rooms() {
    let Some(_hbase) = hbase() else { return };
    reset_tables();
    let dir = scratch();
    room_view_common::devices_follow_their_newest_reading_between_rooms(
        &hbase_target(),
        dir.path(),
    );
}

#[test]
fn room_view_in_hbase_the_registry_overrides_rooms_and_fanout_gives_the_same_answer() {
    let Some(_hbase) = hbase() else { return };
    reset_tables();
    let dir = scratch();
    room_view_common::the_registry_overrides_rooms_and_fanout_gives_the_same_answer(
        &hbase_target(),
        dir.path(),
    );
}

#[test]
fn room_view_in_hbase_a_registry_change_while_running_moves_the_device() {
    let Some(_hbase) = hbase() else { return };
    reset_tables();
    let dir = scratch();
    room_view_common::a_registry_change_while_running_moves_the_device(&hbase_target(), dir.path());
}

#[test]
fn room_view_in_hbase_a_registry_change_between_runs_moves_the_device_at_the_next_run() {
    let Some(_hbase) = hbase() else { return };
    reset_tables();
    let dir = scratch();
    room_view_common::a_registry_change_between_runs_moves_the_device_at_the_next_run(
        &hbase_target(),
        dir.path(),
    );
}

/// Narrow rows of many event-time seconds, across the table's regions, go out in one Thrift2
/// `putMultiple` call, and every cell reads back with its own timestamp (Thrift1's
/// `mutateRowsTs` took one timestamp per call, so these were 120 calls).
#[test]
fn one_write_call_carries_rows_of_many_seconds_each_cell_with_its_own_timestamp() {
    use sinks::table::{Cell, Mutation, TableReader, TableWriter};
    use std::sync::atomic::Ordering;

    let Some(_hbase) = hbase() else { return };
    reset_tables();
    let cfg = config();
    let t0 = real_now_ms() - 3_600_000;
    let rows: Vec<(Vec<u8>, i64, Vec<u8>)> = (0..120i64)
        .map(|i| {
            // Salts 00..15: the rows span every region of the pre-split table.
            let key = format!("{:02}_dev{i:03}_{}", i % 16, t0 / 1000 + i);
            (key.into_bytes(), t0 + i * 1000, i.to_string().into_bytes())
        })
        .collect();
    let stats = Arc::new(sinks::hbase::WriterStats::default());
    let mut writer = HbaseWriter::with_stats(&cfg, stats.clone()).for_tables(&tables::all_tables());
    writer
        .write(
            rows.iter()
                .map(|(key, ts_ms, value)| Mutation::Put {
                    table: NARROW_TABLE,
                    row: key.clone(),
                    cells: vec![Cell {
                        family: tables::FAMILY.into(),
                        qualifier: b"v".to_vec(),
                        ts_ms: *ts_ms,
                        value: value.clone(),
                    }],
                })
                .collect(),
        )
        .expect("write");
    writer.flush().expect("flush");
    assert_eq!(
        (
            stats.calls.load(Ordering::Relaxed),
            stats.rows.load(Ordering::Relaxed),
            stats.cells.load(Ordering::Relaxed)
        ),
        (1, 120, 120),
        "one call for 120 rows of 120 seconds"
    );

    let keys: Vec<Vec<u8>> = rows.iter().map(|(k, _, _)| k.clone()).collect();
    let got = HbaseStore::new(&cfg)
        .get_many(NARROW_TABLE, &keys, None)
        .expect("get_many");
    let got: Vec<(Vec<u8>, i64, Vec<u8>)> = got
        .into_iter()
        .zip(&keys)
        .map(|(row, key)| {
            let row = row.unwrap_or_else(|| panic!("row {key:?} missing"));
            assert_eq!(row.cells.len(), 1, "{row:?}");
            let cell = &row.cells[0];
            (row.key.clone(), cell.ts_ms, cell.value.clone())
        })
        .collect();
    assert_eq!(got, rows, "each cell with its own timestamp and value");
}

#[test]
fn create_names_the_split_points_an_existing_table_lacks() {
    let Some(_hbase) = hbase() else { return };
    let cfg = config();
    // A table of its own: the hourglass tables' names are shared with every other test.
    let name: &'static str = Box::leak(
        format!(
            "split_test_{}_{}",
            std::process::id(),
            real_now_ms().rem_euclid(1_000_000)
        )
        .into_boxed_str(),
    );
    let spec = |splits: &tables::IdSplits| sinks::schema::TableSpec {
        key: sinks::schema::KeyCodec::raw(),
        name,
        ..tables::room_table_split(splits)
    };
    let wanted = spec(&tables::IdSplits::generator_default(4));
    admin::create_tables(&cfg, &[spec(&tables::IdSplits::none())]).expect("create unsplit");
    let created = admin::create_tables(&cfg, std::slice::from_ref(&wanted)).expect("create again");
    let missing = wanted.split_keys.clone();
    assert_eq!(
        created,
        vec![(
            name.to_string(),
            Created::ExistsWithOtherSplits {
                regions: 1,
                missing: missing.clone()
            }
        )]
    );
    assert_eq!(admin::split_state(&cfg, &wanted).expect("state").1, missing);
    assert!(admin::recreate_if_empty(&cfg, &wanted).expect("recreate"));
    let created = admin::create_tables(&cfg, std::slice::from_ref(&wanted)).expect("create again");
    assert_eq!(created, vec![(name.to_string(), Created::AlreadyExists)]);
    assert_eq!(admin::table_regions(&cfg, name).expect("regions").len(), 4);
    admin::drop_tables(&cfg, &[name]).expect("drop");
}
