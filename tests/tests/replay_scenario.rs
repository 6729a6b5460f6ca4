//! Replays `tests/data/scenario.jsonl` (out-of-order, duplicate, late, very late and malformed
//! lines; see `tests/data/make_scenario.py`) and checks the stored tables, the side outputs and
//! the query answers.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use e2e::{assert_golden, data, hourglass, hourglass_ok, read_jsonl};

const H: i64 = 1724101200; // 2024-08-19T21:00:00Z, the recording's first hour

struct Replayed {
    dir: PathBuf,
    stats: serde_json::Value,
}

fn replay_into(dir: &Path, workers: &str, input: &str) -> serde_json::Value {
    hourglass_ok(
        dir,
        &[
            "replay",
            input,
            "--store",
            "store",
            "--workers",
            workers,
            "--stats-json",
            "stats.json",
            "--dead-letter",
            "dead.jsonl",
            "--late-output",
            "late.jsonl",
        ],
    );
    e2e::read_json(&dir.join("stats.json"))
}

/// The shared replay's store, held for a whole test: the embedded store admits one process at
/// a time, and the tests of this file run in parallel.
fn shared() -> (std::sync::MutexGuard<'static, ()>, &'static Path) {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let guard = LOCK
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    (guard, &scenario().dir)
}

/// One replay with a single worker, shared by the tests that only read its results.
fn scenario() -> &'static Replayed {
    static ONCE: OnceLock<Replayed> = OnceLock::new();
    ONCE.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir").keep();
        let stats = replay_into(
            &dir,
            "1",
            data("scenario.jsonl").to_str().expect("utf-8 path"),
        );
        Replayed { dir, stats }
    })
}

fn dump(dir: &Path, table: &str) -> String {
    hourglass_ok(dir, &["tables", "dump", table, "--store", "store"])
}

/// Both tables of the store in `dir` equal those of the store in `want`.
fn assert_same_tables(dir: &Path, want: &Path) {
    for table in ["ts_metric", "ts_metric_hourly"] {
        assert_eq!(
            e2e::without_dirty_marks(&dump(dir, table)),
            e2e::without_dirty_marks(&dump(want, table)),
            "{table}"
        );
    }
}

#[test]
fn stats_count_every_line() {
    let stats = &scenario().stats;
    let keys: Vec<&str> = stats
        .as_object()
        .expect("object")
        .keys()
        .map(String::as_str)
        .collect();
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        [
            "elapsed_s",
            "future",
            "late_dropped",
            "narrow_rows",
            "ok",
            "read",
            "readings_per_s",
            "rejected",
            "repeated",
            "room_rows",
            "wide_cells"
        ]
    );
    assert_eq!(stats["read"], 162);
    assert_eq!(stats["ok"], 150);
    assert_eq!(stats["rejected"], 12);
    assert_eq!(stats["late_dropped"], 2);
    // The exact duplicate: its hour's wide row is marked, so reads take the narrow table.
    assert_eq!(stats["repeated"], 1);
    assert_eq!(stats["narrow_rows"], 150);
    // Every reading reaches its wide row but the two beyond the allowed lateness and the
    // duplicate (its second is already in the row).
    assert_eq!(stats["wide_cells"], 147);
    // The hours are past ("now" is two days later): each of the three devices' room-view rows
    // is written once, when the replay ends.
    assert_eq!(stats["room_rows"], 3);
}

#[test]
fn tables_match_golden_files() {
    let (_store, dir) = shared();
    let narrow = dump(dir, "ts_metric");
    let hourly = dump(dir, "ts_metric_hourly");
    // The duplicate collapses into one row: 150 readings, 149 distinct (device, ts).
    let rows: std::collections::BTreeSet<&str> = narrow
        .lines()
        .map(|l| l.split('\t').next().unwrap_or_default())
        .collect();
    assert_eq!(rows.len(), 149);
    assert_golden("scenario.ts_metric.tsv", &narrow);
    assert_golden("scenario.ts_metric_hourly.tsv", &hourly);
}

#[test]
fn two_workers_store_the_same_tables_as_one() {
    let (_store, one) = shared();
    let two = tempfile::tempdir().expect("tempdir");
    let stats = replay_into(
        two.path(),
        "2",
        data("scenario.jsonl").to_str().expect("utf-8 path"),
    );
    assert_eq!(stats["late_dropped"], 2);
    assert_same_tables(two.path(), one);
}

#[test]
fn gzip_and_stdin_inputs_store_the_same_tables() {
    use std::io::Write;
    let (_store, one) = shared();
    let raw = std::fs::read(data("scenario.jsonl")).expect("scenario");

    let gz = tempfile::tempdir().expect("tempdir");
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    enc.write_all(&raw).expect("gzip");
    std::fs::write(
        gz.path().join("scenario.jsonl.gz"),
        enc.finish().expect("gzip"),
    )
    .expect("write");
    replay_into(gz.path(), "2", "scenario.jsonl.gz");
    assert_same_tables(gz.path(), one);

    let stdin = tempfile::tempdir().expect("tempdir");
    let mut child = e2e::hourglass_command(
        stdin.path(),
        e2e::NOW,
        &["replay", "-", "--store", "store", "--workers", "2"],
    )
    .stdin(std::process::Stdio::piped())
    .stderr(std::process::Stdio::null())
    .spawn()
    .expect("spawn");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&raw)
        .expect("feed stdin");
    assert!(child.wait().expect("wait").success());
    assert_same_tables(stdin.path(), one);
}

#[test]
fn dead_letters_hold_every_rejected_line_with_its_reason() {
    let (_store, dir) = shared();
    let mut dead = read_jsonl(&dir.join("dead.jsonl"));
    dead.sort_by_key(|v| v["line"].as_u64());
    let summary: Vec<String> = dead
        .iter()
        .map(|v| {
            format!(
                "{}\t{}\t{}",
                v["line"],
                v["kind"].as_str().unwrap_or(""),
                v["reason"].as_str().unwrap_or("")
            )
        })
        .collect();
    assert_golden("scenario.dead_letters.tsv", &(summary.join("\n") + "\n"));
    // Each record holds the raw line exactly as read (bounded for over-long lines).
    let lines: Vec<Vec<u8>> = std::fs::read(data("scenario.jsonl"))
        .expect("scenario")
        .split(|&b| b == b'\n')
        .map(<[u8]>::to_vec)
        .collect();
    for v in &dead {
        let n = v["line"].as_u64().expect("line number") as usize;
        let original = &lines[n - 1];
        match v.get("raw_hex") {
            Some(hex) => {
                let bytes: Vec<u8> = (0..hex.as_str().expect("hex").len())
                    .step_by(2)
                    .map(|i| {
                        u8::from_str_radix(&hex.as_str().expect("hex")[i..i + 2], 16)
                            .expect("hex byte")
                    })
                    .collect();
                assert_eq!(&bytes, original, "line {n}");
            }
            None if v["kind"] == "too_long" => {
                let raw = v["raw"].as_str().expect("raw");
                assert!(
                    original.starts_with(raw.as_bytes()) && raw.len() == 64 * 1024 + 1,
                    "line {n}"
                );
            }
            None => assert_eq!(
                v["raw"].as_str().expect("raw").as_bytes(),
                original.as_slice(),
                "line {n}"
            ),
        }
    }
}

#[test]
fn late_readings_reach_every_read_of_their_hour_and_the_late_data_output() {
    let (_store, dir) = shared();
    let hour0 = hourglass_ok(
        dir,
        &[
            "query",
            "hour",
            "--device",
            "dev00786",
            "--hour",
            &H.to_string(),
            "--store",
            "store",
            "--format",
            "csv",
        ],
    );
    // 20 minutes late, within the allowed hour: in the wide row.
    assert!(hour0.contains(&format!("{},55.5\n", H + 3001)), "{hour0}");
    // Far beyond the allowed lateness: not in the wide row, which is marked dirty, so the hour
    // is read from the narrow table, which has it (one truth) …
    assert!(hour0.contains(&format!("{},77.7\n", H + 100)), "{hour0}");
    let dump = dump(dir, "ts_metric_hourly");
    assert!(
        dump.contains(&format!("dev00786_{H}\tt:dirty\t")),
        "the hour's row is marked"
    );
    assert!(!dump.contains(&format!("dev00786_{H}\tt:100\t")), "{dump}");
    // … but in the narrow table, and in the late-data output.
    let curve = hourglass_ok(
        dir,
        &[
            "query",
            "curve",
            "--device",
            "dev00786",
            "--from",
            &H.to_string(),
            "--to",
            &(H + 200).to_string(),
            "--store",
            "store",
            "--format",
            "csv",
        ],
    );
    assert_eq!(curve, format!("ts,value\n{},20\n{},77.7\n", H, H + 100));
    let late = read_jsonl(&dir.join("late.jsonl"));
    let mut late: Vec<(String, i64)> = late
        .iter()
        .map(|v| {
            (
                v["device"].as_str().unwrap_or("").to_string(),
                v["ts"].as_i64().unwrap_or(0),
            )
        })
        .collect();
    late.sort();
    assert_eq!(
        late,
        vec![
            ("dev00786".to_string(), H + 100),
            ("sensor-1".to_string(), H + 3700)
        ]
    );
}

#[test]
fn queries_match_golden_answers() {
    let (_store, dir) = shared();
    let q = |args: &[&str]| {
        let mut all = vec!["query"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--store", "store"]);
        hourglass_ok(dir, &all)
    };
    assert_golden(
        "scenario.curve.csv",
        &q(&[
            "curve",
            "--device",
            "sensor-1",
            "--from",
            "2024-08-19T21:00:00Z",
            "--to",
            "2024-08-19T23:00:00Z",
            "--format",
            "csv",
            "--source",
            "narrow",
        ]),
    );
    assert_golden(
        "scenario.hour.json",
        &q(&[
            "hour",
            "--device",
            "gateway-7:temp.sensor-000123",
            "--hour",
            "2024-08-19T22:30:00Z",
            "--format",
            "json",
        ]),
    );
    assert_golden(
        "scenario.latest.txt",
        &q(&["latest", "--device", "dev00786"]),
    );
    // The RFC 3339 reading at 22:20:03.9 is stored at 22:20:03.
    assert!(q(&[
        "curve",
        "--device",
        "sensor-1",
        "--from",
        "1724106003",
        "--to",
        "1724106004",
        "--format",
        "csv"
    ])
    .ends_with("1724106003,-3\n"));
}

#[test]
fn curve_ranges_are_half_open() {
    let (_store, dir) = shared();
    let csv = |from: i64, to: i64| {
        hourglass_ok(
            dir,
            &[
                "query",
                "curve",
                "--device",
                "dev00786",
                "--from",
                &from.to_string(),
                "--to",
                &to.to_string(),
                "--store",
                "store",
                "--format",
                "csv",
            ],
        )
    };
    // Readings at H+300 and H+600: [H+300, H+600) holds only the first.
    assert_eq!(
        csv(H + 300, H + 600),
        format!("ts,value\n{},20.1\n", H + 300)
    );
    assert_eq!(csv(H + 301, H + 600), "ts,value\n");
}

#[test]
fn bad_queries_fail_with_a_clear_message() {
    let (_store, dir) = shared();
    let run = |args: &[&str]| hourglass(dir, args);
    let unknown = run(&[
        "query", "curve", "--device", "nosuch", "--from", "0", "--to", "10", "--store", "store",
    ]);
    assert!(!unknown.status.success());
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("unknown device nosuch"));
    let reversed = run(&[
        "query", "curve", "--device", "dev00786", "--from", "10", "--to", "5", "--store", "store",
    ]);
    assert!(!reversed.status.success());
    assert!(String::from_utf8_lossy(&reversed.stderr).contains("--from must be before --to"));
    let bad_time = run(&[
        "query", "hour", "--device", "dev00786", "--hour", "noon", "--store", "store",
    ]);
    assert!(String::from_utf8_lossy(&bad_time.stderr).contains("epoch seconds"));
    assert!(!bad_time.status.success());
    let bad_id = run(&["query", "latest", "--device", "a_b", "--store", "store"]);
    assert!(!bad_id.status.success());
    assert!(String::from_utf8_lossy(&bad_id.stderr).contains("'_'"));
    let no_store = run(&[
        "query", "latest", "--device", "dev00786", "--store", "missing",
    ]);
    assert!(String::from_utf8_lossy(&no_store.stderr).contains("no embedded store"));
    // An empty range of a known device is an empty answer, not an error.
    let empty = run(&[
        "query", "curve", "--device", "dev00786", "--from", "0", "--to", "10", "--store", "store",
        "--format", "csv",
    ]);
    assert!(empty.status.success());
    assert_eq!(String::from_utf8_lossy(&empty.stdout), "ts,value\n");
}

#[test]
fn rebase_time_moves_the_newest_reading_into_the_current_hour() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = data("scenario.jsonl");
    hourglass_ok(
        dir.path(),
        &[
            "replay",
            input.to_str().expect("utf-8"),
            "--store",
            "store",
            "--rebase-time",
            "--workers",
            "1",
        ],
    );
    let latest = hourglass_ok(
        dir.path(),
        &[
            "query", "latest", "--device", "dev00786", "--store", "store", "--format", "json",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&latest).expect("json");
    let now: i64 = e2e::NOW.parse().expect("number");
    let ts = v["ts"].as_i64().expect("ts");
    assert_eq!(
        ts - ts % 3600,
        now - now % 3600,
        "newest reading {ts} not in the hour of {now}"
    );
    // Offsets within the hour keep their meaning: the original newest was at :55:00.
    assert_eq!(ts % 3600, (H + 47 * 300) % 3600);
}

#[test]
fn old_recordings_without_rebase_warn_about_the_ttl() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = e2e::hourglass_command(
        dir.path(),
        &(H + 100 * 86400).to_string(),
        &[
            "replay",
            data("scenario.jsonl").to_str().expect("utf-8"),
            "--store",
            "store",
        ],
    )
    .output()
    .expect("run");
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("150 readings are older than the tables' 90-day TTL"),
        "{stderr}"
    );
}

#[test]
fn curve_from_wide_rows_equals_the_narrow_scan() {
    let (_store, dir) = shared();
    let csv = |device: &str, from: i64, to: i64, source: &str| {
        hourglass_ok(
            dir,
            &[
                "query",
                "curve",
                "--device",
                device,
                "--from",
                &from.to_string(),
                "--to",
                &to.to_string(),
                "--store",
                "store",
                "--format",
                "csv",
                "--source",
                source,
            ],
        )
    };
    // Ranges with and without whole hours, aligned and not, for a device with no dropped reading.
    let device = "gateway-7:temp.sensor-000123";
    for (from, to) in [
        (H, H + 4 * 3600),
        (H + 1234, H + 3 * 3600 + 17),
        (H + 10, H + 200),
        (H - 5000, H + 9000),
    ] {
        let narrow = csv(device, from, to, "narrow");
        assert!(
            narrow.lines().count() > 1 || to - from < 300,
            "{from}..{to} is empty"
        );
        assert_eq!(
            csv(device, from, to, "auto"),
            narrow,
            "auto vs narrow over [{from}, {to})"
        );
        assert_eq!(
            csv(device, from, to, "wide"),
            narrow,
            "wide vs narrow over [{from}, {to})"
        );
    }
    // A reading beyond the allowed lateness is only in the narrow table; its hour's wide row is
    // marked dirty, so every source reads that hour from the narrow table and has it too.
    for (device, from, to) in [
        ("dev00786", H, H + 2 * 3600),
        ("dev00786", H + 50, H + 3 * 3600 + 5),
        ("sensor-1", H, H + 3 * 3600),
    ] {
        let narrow = csv(device, from, to, "narrow");
        assert!(
            narrow.lines().count() > 2,
            "{device} [{from}, {to}) is empty"
        );
        for source in ["auto", "wide"] {
            assert_eq!(
                csv(device, from, to, source),
                narrow,
                "{source} vs narrow of {device} over [{from}, {to})"
            );
        }
    }
    assert!(csv("dev00786", H, H + 3600, "auto").contains(&format!("{},77.7", H + 100)));
}

#[test]
fn hour_summaries_equal_a_recomputation_from_the_cells() {
    let (_store, dir) = shared();
    for device in ["dev00786", "sensor-1", "gateway-7:temp.sensor-000123"] {
        for hour in 0..4 {
            let at = (H + hour * 3600).to_string();
            let json = hourglass_ok(
                dir,
                &[
                    "query", "hour", "--device", device, "--hour", &at, "--store", "store",
                    "--format", "json",
                ],
            );
            let v: serde_json::Value = serde_json::from_str(&json).expect("json");
            let points: Vec<f64> = v["points"]
                .as_array()
                .expect("points")
                .iter()
                .map(|p| p[1].as_f64().expect("value"))
                .collect();
            let s = &v["summary"];
            assert_eq!(
                s["n"].as_u64(),
                Some(points.len() as u64),
                "{device} hour {hour}"
            );
            let sum: f64 = points.iter().sum();
            assert!(
                (s["sum"].as_f64().expect("sum") - sum).abs() < 1e-9,
                "{device} hour {hour}"
            );
            assert_eq!(s["min"].as_f64(), points.iter().copied().reduce(f64::min));
            assert_eq!(s["max"].as_f64(), points.iter().copied().reduce(f64::max));
            assert_eq!(s["first"].as_f64(), points.first().copied());
            assert_eq!(s["last"].as_f64(), points.last().copied());
        }
    }
}
