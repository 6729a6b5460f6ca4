//! Hostile event time: a device whose clock is in the future must not move event time for the
//! fleet (issue 14, item 2), and a damaged recording is reported at its own line number, whatever
//! the worker count (item 7).

use std::path::Path;

use e2e::job::produce_args;
use e2e::services::{kafka_up, unique, BROKER};
use e2e::{hourglass, hourglass_ok, read_json, read_jsonl, NOW};

/// 2024-08-19T21:00:00Z: the recordings' first hour, two days before [`NOW`].
const START: i64 = 1724101200;
const DEVICES: u32 = 10;
/// Six hours of a reading a minute: 360 readings per device, 3600 lines.
const PER_DEVICE: usize = 360;
const FUTURE_LINE: &str = r#"{"device":"x","ts":9999999999,"temp":1}"#;

/// Writes `name`: a valid recording with two readings in the year 2286 after line 1000.
fn recording_with_future_lines(dir: &Path, name: &str) {
    let start = START.to_string();
    let devices = DEVICES.to_string();
    hourglass_ok(
        dir,
        &[
            "generate",
            "--devices",
            &devices,
            "--duration",
            "6h",
            "--interval",
            "60",
            "--start",
            &start,
            "--out",
            "valid.jsonl",
        ],
    );
    let valid = std::fs::read_to_string(dir.join("valid.jsonl")).expect("generated");
    let mut lines: Vec<&str> = valid.lines().collect();
    assert_eq!(lines.len(), DEVICES as usize * PER_DEVICE);
    lines.splice(1000..1000, [FUTURE_LINE, FUTURE_LINE]);
    std::fs::write(dir.join(name), lines.join("\n") + "\n").expect("write recording");
}

fn replay(dir: &Path, input: &str, extra: &[&str]) -> (serde_json::Value, String) {
    let mut args = vec![
        "replay",
        input,
        "--store",
        "store",
        "--stats-json",
        "stats.json",
        "--dead-letter",
        "dead.jsonl",
        "--late-output",
        "late.jsonl",
    ];
    args.extend_from_slice(extra);
    let out = hourglass(dir, &args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "replay {args:?} failed:\n{stderr}");
    (read_json(&dir.join("stats.json")), stderr)
}

/// `query curve`'s points as (ts, value): `--source narrow` answers whole readings, the wide
/// table points.
fn curve(dir: &Path, device: &str, from: i64, to: i64, source: &str) -> Vec<(i64, f64)> {
    let (from, to) = (from.to_string(), to.to_string());
    let out = hourglass_ok(
        dir,
        &[
            "query", "curve", "--device", device, "--from", &from, "--to", &to, "--source", source,
            "--format", "json", "--store", "store",
        ],
    );
    let v: serde_json::Value = serde_json::from_str(&out).expect("curve JSON");
    let point = |p: &serde_json::Value| match p {
        serde_json::Value::Array(tv) => (tv[0].as_i64(), tv[1].as_f64()),
        reading => (reading["ts"].as_i64(), reading["value"].as_f64()),
    };
    v["points"]
        .as_array()
        .or_else(|| v["readings"].as_array())
        .unwrap_or_else(|| panic!("no points in {out}"))
        .iter()
        .map(|p| match point(p) {
            (Some(ts), Some(value)) => (ts, value),
            _ => panic!("not a point: {p}"),
        })
        .collect()
}

/// Every valid reading is in both tables, and the two future ones are dead letters.
/// `first` is where the first future line is: its line number, or its Kafka offset.
fn assert_future_lines_refused(dir: &Path, stats: &serde_json::Value, from: i64, first: u64) {
    let valid = DEVICES as u64 * PER_DEVICE as u64;
    assert_eq!(stats["late_dropped"], 0, "{stats}");
    assert_eq!(stats["ok"], valid, "{stats}");
    assert_eq!(stats["narrow_rows"], valid, "{stats}");
    assert_eq!(stats["wide_cells"], valid, "{stats}");
    assert_eq!(stats["rejected"], 2, "{stats}");
    assert_eq!(stats["future"], 2, "{stats}");
    for device in ["dev00000", "dev00007"] {
        let narrow = curve(dir, device, from, from + 6 * 3600, "narrow");
        let auto = curve(dir, device, from, from + 6 * 3600, "auto");
        assert_eq!(narrow.len(), PER_DEVICE, "{device}");
        assert_eq!(
            auto.len(),
            narrow.len(),
            "{device}: the wide table misses readings"
        );
        assert!(auto == narrow, "{device}: the wide table's points differ");
    }
    let dead = read_jsonl(&dir.join("dead.jsonl"));
    // Workers write their dead letters in any order.
    let mut lines: Vec<u64> = dead.iter().filter_map(|d| d["line"].as_u64()).collect();
    lines.sort_unstable();
    assert_eq!(lines, [first, first + 1], "{dead:?}");
    for d in &dead {
        assert_eq!(d["kind"], "future", "{d}");
        let reason = d["reason"].as_str().expect("reason");
        assert!(
            reason.contains("9999999999") && reason.contains("3600 s ahead of"),
            "{reason}"
        );
    }
}

#[test]
fn two_readings_from_the_future_do_not_wipe_the_wide_table() {
    for workers in ["1", "2"] {
        let dir = tempfile::tempdir().expect("tempdir");
        recording_with_future_lines(dir.path(), "hostile.jsonl");
        let (stats, _) = replay(dir.path(), "hostile.jsonl", &["--workers", workers]);
        assert_future_lines_refused(dir.path(), &stats, START, 1001);
    }
}

#[test]
fn future_lines_do_not_wreck_the_rebase_shift() {
    let dir = tempfile::tempdir().expect("tempdir");
    recording_with_future_lines(dir.path(), "hostile.jsonl");
    let (stats, stderr) = replay(
        dir.path(),
        "hostile.jsonl",
        &["--workers", "2", "--rebase-time"],
    );
    // The newest valid reading (the recording's last hour) moves to the hour of NOW.
    let now: i64 = NOW.parse().expect("NOW");
    let last_hour = START + 5 * 3600;
    let shift = (now - now % 3600) - last_hour;
    assert!(
        stderr.contains(&format!("shifting timestamps by {} h", shift / 3600)),
        "{stderr}"
    );
    assert_future_lines_refused(dir.path(), &stats, START + shift, 1001);
}

/// Cuts the gzip file `name` to `keep` of its bytes and counts the lines before the damage.
fn truncate_gz(dir: &Path, name: &str, keep: f64) -> usize {
    use std::io::Read;
    let path = dir.join(name);
    let bytes = std::fs::read(&path).expect("read gz");
    let cut = (bytes.len() as f64 * keep) as usize;
    std::fs::write(&path, &bytes[..cut]).expect("truncate gz");
    // `read_to_end` keeps what it decompressed before the error.
    let mut text = Vec::new();
    flate2::read::MultiGzDecoder::new(&bytes[..cut])
        .read_to_end(&mut text)
        .expect_err("a truncated gzip file fails to decompress");
    text.iter().filter(|&&b| b == b'\n').count()
}

#[test]
fn a_damaged_recording_is_reported_at_its_own_line_number() {
    let dir = tempfile::tempdir().expect("tempdir");
    let start = START.to_string();
    hourglass_ok(
        dir.path(),
        &[
            "generate",
            "--devices",
            "20",
            "--duration",
            "10h",
            "--interval",
            "60",
            "--start",
            &start,
            "--out",
            "rec.jsonl.gz",
        ],
    );
    let complete = truncate_gz(dir.path(), "rec.jsonl.gz", 0.7);
    // Past the 4096 lines after which a worker publishes (and used to reset) its counters.
    assert!(complete > 2 * 4096, "{complete} complete lines");
    for workers in ["1", "2"] {
        let out = hourglass(
            dir.path(),
            &[
                "replay",
                "rec.jsonl.gz",
                "--store",
                &format!("store{workers}"),
                "--workers",
                workers,
            ],
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{stderr}");
        let line: usize = stderr
            .split("failed at line ")
            .nth(1)
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no line number in {stderr}"));
        assert!(
            line >= complete,
            "--workers {workers}: line {line}, but {complete} complete lines come before the \
             damage:\n{stderr}"
        );
    }
}

/// The same two readings published to Kafka: `hourglass run` refuses them against the wall
/// clock. One partition, so that before the fix its watermark jumped to 2286 deterministically.
#[test]
fn the_kafka_feed_refuses_readings_from_the_future() {
    if !kafka_up() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    recording_with_future_lines(dir, "hostile.jsonl");
    let topic = unique("hostile-clock");
    hourglass_ok(
        dir,
        &produce_args(Path::new("hostile.jsonl"), &topic, "1", &[]),
    );
    let config = format!(
        "workers = 1\n[store]\nkind = \"embedded\"\ndir = \"store\"\n[source]\nbrokers = \
         \"{BROKER}\"\ntopic = \"{topic}\"\ngroup_id = \"{topic}\"\nidle_partition_timeout_secs = 1\n"
    );
    std::fs::write(dir.join("job.toml"), config).expect("write job.toml");
    hourglass_ok(
        dir,
        &[
            "run",
            "--config",
            "job.toml",
            "--exit-on-idle",
            "5s",
            "--stats-json",
            "stats.json",
            "--dead-letter",
            "dead.jsonl",
            "--late-output",
            "late.jsonl",
        ],
    );
    let stats = read_json(&dir.join("stats.json"));
    // A record's dead letter names its offset: lines 1001 and 1002 are offsets 1000 and 1001.
    assert_future_lines_refused(dir, &stats, START, 1000);
}
