//! Hostile command lines and leftovers of crashed runs: the real binary must refuse with
//! `error: …` and exit 1, or repair, never abort.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Output, Stdio};

use e2e::{data, hourglass, hourglass_command, hourglass_ok, KillOnDrop, NOW};

/// Fails the test unless `out` is a refusal: exit 1 (not an abort's 134), `error:` on stderr
/// naming every one of `words`.
fn refused(args: &[&str], out: &Output, words: &[&str]) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(1),
        "hourglass {args:?}: {}\n{stderr}",
        out.status
    );
    assert!(stderr.starts_with("error: "), "{args:?}: {stderr}");
    for word in words {
        assert!(stderr.contains(word), "{args:?}: no {word:?} in {stderr}");
    }
}

/// Runs `hourglass run args…`, failing the test if it starts waiting for the (absent) brokers
/// instead of exiting: the config must be refused at load.
fn refused_before_kafka(dir: &Path, args: &[&str]) -> Output {
    let child = hourglass_command(dir, NOW, args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(Some(child));
    let proc = child.0.as_mut().unwrap();
    let mut stderr = Vec::new();
    for line in BufReader::new(proc.stderr.take().unwrap()).split(b'\n') {
        let line = line.unwrap();
        assert!(
            !String::from_utf8_lossy(&line).contains("waiting for topic"),
            "hourglass {args:?} started the job instead of refusing its config:\n{}",
            String::from_utf8_lossy(&stderr)
        );
        stderr.extend(line);
        stderr.push(b'\n');
    }
    let status = proc.wait().unwrap();
    Output {
        status,
        stdout: Vec::new(),
        stderr,
    }
}

#[test]
fn replay_refuses_a_worker_count_out_of_range() {
    let dir = tempfile::tempdir().unwrap();
    let input = data("scenario.jsonl");
    for workers in ["100000", "1000", "0"] {
        let args = [
            "replay",
            input.to_str().unwrap(),
            "--store",
            "store",
            "--workers",
            workers,
        ];
        let out = hourglass(dir.path(), &args);
        refused(&args, &out, &[&format!("--workers {workers}"), "1..=256"]);
        assert!(
            !dir.path().join("store").exists(),
            "{args:?} opened the store"
        );
    }
}

#[test]
fn the_config_key_workers_is_range_checked_by_run_and_replay() {
    let dir = tempfile::tempdir().unwrap();
    let input = data("scenario.jsonl");
    for workers in ["100000", "1000"] {
        // No broker at port 1: a job that got past the config must not touch the shared Kafka.
        std::fs::write(
            dir.path().join("job.toml"),
            format!(
                "workers = {workers}\n[store]\ndir = \"store\"\n\
                 [source]\nbrokers = \"127.0.0.1:1\"\n"
            ),
        )
        .unwrap();
        let args = ["run", "--config", "job.toml", "--exit-on-idle", "1s"];
        let out = refused_before_kafka(dir.path(), &args);
        refused(&args, &out, &[&format!("workers = {workers}"), "1..=256"]);
        let args = ["replay", input.to_str().unwrap(), "--config", "job.toml"];
        let out = hourglass(dir.path(), &args);
        refused(&args, &out, &[&format!("workers = {workers}"), "1..=256"]);
    }
}

/// `run`, like `replay`, refuses a malformed device registry at start (it used to log "not
/// reloaded, keeping the previous one" and run with no registry at all).
#[test]
fn run_refuses_a_malformed_registry_at_start() {
    let dir = tempfile::tempdir().unwrap();
    // A device id the decoder would reject, as a generator's malformed line could give.
    std::fs::write(dir.path().join("rooms.csv"), "dev_00000,kitchen\n").unwrap();
    std::fs::write(
        dir.path().join("job.toml"),
        "registry = \"rooms.csv\"\n[store]\ndir = \"store\"\n\
         [source]\nbrokers = \"127.0.0.1:1\"\n",
    )
    .unwrap();
    let args = ["run", "--config", "job.toml", "--exit-on-idle", "1s"];
    let out = refused_before_kafka(dir.path(), &args);
    refused(&args, &out, &["rooms.csv", "dev_00000"]);
    assert!(
        !dir.path().join("store").exists(),
        "{args:?} opened the store"
    );
}

fn assert_json_lines(path: &Path) -> usize {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.ends_with('\n'), "{}: {text:?}", path.display());
    for (i, line) in text.lines().enumerate() {
        if let Err(e) = serde_json::from_str::<serde_json::Value>(line) {
            panic!("{} line {}: {e}: {line:?}", path.display(), i + 1);
        }
    }
    text.lines().count()
}

#[test]
fn a_torn_last_line_left_by_a_killed_run_is_dropped_before_appending() {
    let dir = tempfile::tempdir().unwrap();
    // What a run killed in the middle of a write leaves: whole lines, then half a record.
    let whole = "{\"line\":1,\"kind\":\"invalid_json\",\"reason\":\"r\",\"raw\":\"{\"}\n";
    std::fs::write(
        dir.path().join("dead.jsonl"),
        format!("{whole}{{\"line\":5,\"kind\":\"inva"),
    )
    .unwrap();
    std::fs::write(dir.path().join("late.jsonl"), "{\"device\":\"d").unwrap();
    let input = data("scenario.jsonl");
    let args = [
        "replay",
        input.to_str().unwrap(),
        "--store",
        "store",
        "--workers",
        "2",
        "--dead-letter",
        "dead.jsonl",
        "--late-output",
        "late.jsonl",
        "--stats-json",
        "stats.json",
    ];
    let out = hourglass(dir.path(), &args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{args:?}: {}\n{stderr}", out.status);
    assert!(
        stderr.contains("dead.jsonl: dropped a torn last line (22 bytes"),
        "{stderr}"
    );
    assert!(
        stderr.contains("late.jsonl: dropped a torn last line (12 bytes"),
        "{stderr}"
    );
    let stats: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("stats.json")).unwrap())
            .unwrap();
    let dead = assert_json_lines(&dir.path().join("dead.jsonl"));
    assert_eq!(dead as u64, 1 + stats["rejected"].as_u64().unwrap());
    let late = assert_json_lines(&dir.path().join("late.jsonl"));
    assert_eq!(late as u64, stats["late_dropped"].as_u64().unwrap());
    assert!(
        late > 0,
        "the scenario has readings beyond the allowed lateness"
    );
    // A clean file is left alone.
    hourglass_ok(dir.path(), &args);
    assert_eq!(
        assert_json_lines(&dir.path().join("dead.jsonl")),
        2 * dead - 1
    );
}
