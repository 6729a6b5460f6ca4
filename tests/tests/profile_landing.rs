//! `hourglass tables landing-check --table user_profile_tag`: generated users, most of them
//! mobile numbers on a few shared prefixes, crowd a few regions under plain user-id keys and
//! spread evenly under the MD5-salted keys the job writes; the exit code follows the verdict;
//! a `.gz` recording gives the same prediction; against a live HBase whose profile tables
//! `tables create` made, after a `profile replay`, the rows per region are the users the
//! replay stored, in the regions of their salted keys.
//!
//! The live test fails when HBase is not reachable on 127.0.0.1:9090 (outside CI,
//! `HOURGLASS_SKIP_HBASE=1` skips it); it drops and recreates the profile tables, as
//! `profile_job.rs` does.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Output;
use std::time::Duration;

use e2e::hourglass_command;
use e2e::services::{in_ci, THRIFT1};
use serde_json::Value;

/// `HOURGLASS_NOW` of every command, a minute after the generated events.
const NOW: &str = "1796500000";

fn run(dir: &Path, args: &[&str]) -> Output {
    hourglass_command(dir, NOW, args)
        .output()
        .expect("running hourglass")
}

fn ok(dir: &Path, args: &[&str]) -> String {
    e2e::ok_stdout(args, run(dir, args))
}

/// `tables landing-check --table user_profile_tag ARGS --format json`: its exit and JSON.
fn check(dir: &Path, args: &[&str]) -> (Output, Value) {
    let mut all = vec!["tables", "landing-check", "--table", "user_profile_tag"];
    all.extend(args);
    all.extend(["--format", "json"]);
    let out = run(dir, &all);
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "landing-check {args:?} printed no JSON ({e}), exit {}:\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out, json)
}

fn rows_per_region(json: &Value) -> Vec<u64> {
    json["buckets"]
        .as_array()
        .expect("buckets")
        .iter()
        .map(|b| b["rows"].as_u64().expect("rows"))
        .collect()
}

fn ratio(json: &Value) -> f64 {
    json["max_over_mean"].as_f64().expect("max_over_mean")
}

/// Generates `events.jsonl` (3,000 users, a few bad lines) and `tags.csv` in `dir`.
fn generate(dir: &Path, bad_ratio: &str) {
    ok(
        dir,
        &[
            "profile",
            "generate",
            "--users",
            "3000",
            "--events",
            "10000",
            "--seed",
            "41",
            "--bad-ratio",
            bad_ratio,
            "--start",
            "1796400000",
            "--span",
            "86400",
            "--out",
            "events.jsonl",
            "--registry-out",
            "tags.csv",
        ],
    );
}

#[test]
fn shared_number_prefixes_crowd_plain_keys_and_the_salt_spreads_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    generate(d, "0.01");

    let (out, plain) = check(d, &["events.jsonl", "--scheme", "plain"]);
    assert_eq!(out.status.code(), Some(1), "plain must fail: {plain:#}");
    assert_eq!(
        (plain["pass"].as_bool(), plain["scheme"].as_str()),
        (Some(false), Some("plain"))
    );
    let (out, salted) = check(d, &["events.jsonl", "--svg", "salted.svg"]);
    assert_eq!(out.status.code(), Some(0), "salted must pass: {salted:#}");
    assert_eq!(salted["table"], "user_profile_tag");
    assert_eq!(salted["scheme"], "md5-salted");

    // One row per user, the same users under both schemes; the bad lines are counted apart.
    let users = plain["rows"].as_u64().expect("rows");
    assert!((1500..=3000).contains(&users), "{users} users");
    assert_eq!(salted["rows"], users);
    let rejected: u64 = plain["rejected"]
        .as_object()
        .expect("rejected")
        .values()
        .map(|n| n.as_u64().expect("a count"))
        .sum();
    assert!(rejected > 20, "{plain:#}");
    assert_eq!(rows_per_region(&plain).len(), 16);
    assert_eq!(rows_per_region(&salted).len(), 16);

    // Plain keys: a few regions hold most users; salted: every region about its share.
    assert!(
        ratio(&plain) > 5.0 * ratio(&salted),
        "plain {}, salted {}",
        ratio(&plain),
        ratio(&salted)
    );
    assert!(ratio(&salted) < 1.5, "{salted:#}");
    let crowded = rows_per_region(&plain)
        .iter()
        .filter(|&&r| r * 16 > users * 3)
        .count();
    assert!(
        crowded <= 4,
        "{crowded} regions hold over 3/16 of the users: {plain:#}"
    );
    // The hottest number prefix (a mobile carrier's), all of it in one plain region, is spread
    // over the salted ones.
    let hot = plain["hottest_prefixes"]
        .as_array()
        .expect("prefixes")
        .iter()
        .find(|p| {
            p["prefix"]
                .as_str()
                .is_some_and(|p| p.bytes().all(|b| b.is_ascii_digit()))
        })
        .unwrap_or_else(|| panic!("no number prefix among the hottest: {plain:#}"));
    let prefix = hot["prefix"].as_str().expect("prefix");
    assert!(prefix.len() == 3 && prefix.starts_with('1'), "{hot}");
    assert!(hot["users"].as_u64().expect("users") > 50, "{hot}");
    assert_eq!(hot["top_bucket_share"], 1.0, "{hot}");
    let salted_hot = salted["hottest_prefixes"]
        .as_array()
        .expect("prefixes")
        .iter()
        .find(|p| p["prefix"] == prefix)
        .expect("the same prefix under the salt");
    assert!(
        salted_hot["top_bucket_share"].as_f64().expect("share") < 0.3,
        "{salted_hot}"
    );
    let chart = std::fs::read_to_string(d.join("salted.svg")).expect("the chart");
    assert_eq!(chart.matches("<rect").count(), 16);

    // The terminal table names users and the verdict.
    let out = run(
        d,
        &[
            "tables",
            "landing-check",
            "events.jsonl",
            "--table",
            "user_profile_tag",
            "--scheme",
            "plain",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text.contains("hottest user-id prefixes:") && text.contains(" users "),
        "{text}"
    );
    assert!(text.contains("verdict: FAIL"), "{text}");

    // A gzipped recording gives the same prediction.
    let gz = std::fs::File::create(d.join("events.jsonl.gz")).expect("creating the .gz");
    let mut enc = flate2::write::GzEncoder::new(gz, flate2::Compression::fast());
    enc.write_all(&std::fs::read(d.join("events.jsonl")).expect("events"))
        .expect("gzip");
    enc.finish().expect("gzip end");
    let (_, zipped) = check(d, &["events.jsonl.gz"]);
    assert_eq!(rows_per_region(&zipped), rows_per_region(&salted));

    // Exit codes: a stricter threshold fails the same spread; bad flags are errors.
    let strict = format!("{}", (ratio(&salted) - 1.0) / 2.0 + 1.0);
    let (out, _) = check(d, &["events.jsonl", "--max-skew", &strict]);
    assert_eq!(out.status.code(), Some(1));
    let (out, _) = check(
        d,
        &["events.jsonl", "--scheme", "plain", "--max-skew", "1000"],
    );
    assert_eq!(out.status.code(), Some(0));
    let out = run(
        d,
        &[
            "tables",
            "landing-check",
            "events.jsonl",
            "--table",
            "user_profile_tag",
            "--max-skew",
            "0.5",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--max-skew"));
    let out = run(
        d,
        &[
            "tables",
            "landing-check",
            "events.jsonl",
            "--table",
            "user_profile_tag",
            "--scheme",
            "plain",
            "--buckets",
            "0",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--buckets"));
    let out = run(
        d,
        &["tables", "landing-check", "--table", "user_profile_tag"],
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "no FILE and no --hbase is a usage error"
    );
}

/// Whether to run against HBase: it must answer, except outside CI with
/// `HOURGLASS_SKIP_HBASE=1`.
fn hbase_or_skip() -> bool {
    if !in_ci() && std::env::var("HOURGLASS_SKIP_HBASE").is_ok_and(|v| v == "1") {
        eprintln!("HOURGLASS_SKIP_HBASE=1: skipping");
        return false;
    }
    let addr: SocketAddr = THRIFT1.parse().expect("address");
    assert!(
        TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_ok(),
        "HBase is not running on {THRIFT1}: start it with `scripts/services.sh up hbase` \
         (make test does), or set HOURGLASS_SKIP_HBASE=1 outside CI"
    );
    true
}

#[test]
fn live_hbase_after_a_replay_counts_the_stored_users_per_region() {
    if !hbase_or_skip() {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    generate(d, "0");
    std::fs::write(
        d.join("p.toml"),
        format!(
            "[registry]\nurl = \"sqlite://./tags.sqlite\"\n[short_term]\npath = \"short.sqlite\"\n\
             [store]\nkind = \"hbase\"\nhbase = {THRIFT1:?}\n"
        ),
    )
    .expect("writing p.toml");
    ok(d, &["tags", "import", "tags.csv", "--config", "p.toml"]);
    sinks::hbase::admin::drop_tables(
        &sinks::hbase::HbaseConfig::new(THRIFT1),
        &[profile::PROFILE_TABLE, profile::HISTORY_TABLE],
    )
    .expect("dropping the profile tables");
    ok(d, &["tables", "create", "--hbase", THRIFT1]);
    ok(
        d,
        &[
            "profile",
            "replay",
            "events.jsonl",
            "--config",
            "p.toml",
            "--workers",
            "2",
            "--quiet",
        ],
    );

    // The users the replay stored a row for: those with an online tag that is not short-term
    // (the others go to the short-term store, or are refused).
    let defs: Value = serde_json::from_str(&ok(
        d,
        &["tags", "list", "--format", "json", "--config", "p.toml"],
    ))
    .expect("tags JSON");
    let stored_kind: BTreeSet<&str> = defs
        .as_array()
        .expect("tags")
        .iter()
        .filter(|t| t["status"] == "online" && t["value_type"] != "short_term")
        .map(|t| t["tag_code"].as_str().expect("code"))
        .collect();
    let mut per_region: BTreeMap<usize, BTreeSet<String>> = BTreeMap::new();
    let table = profile::tables::profile_table();
    for line in std::fs::read_to_string(d.join("events.jsonl"))
        .expect("events")
        .lines()
    {
        let e: Value = serde_json::from_str(line).expect("a valid event");
        let user = match &e["user_id"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        if e["tags"]
            .as_object()
            .expect("tags")
            .keys()
            .any(|c| stored_kind.contains(c.as_str()))
        {
            per_region
                .entry(table.region_of(&user))
                .or_default()
                .insert(user);
        }
    }
    let expected: Vec<u64> = (0..16)
        .map(|r| per_region.get(&r).map_or(0, |u| u.len() as u64))
        .collect();

    let (out, live) = check(d, &["--hbase", THRIFT1]);
    assert_eq!(out.status.code(), Some(0), "{live:#}");
    assert_eq!(rows_per_region(&live), expected, "{live:#}");
    assert_eq!(
        live["source"],
        format!("hbase {THRIFT1} table user_profile_tag")
    );
    assert!(
        live["rejected"].as_object().is_none_or(|r| r.is_empty()),
        "{live:#}"
    );
    // The file's prediction counts every user with an event: at least the stored ones.
    let (_, file) = check(d, &["events.jsonl"]);
    for (predicted, stored) in rows_per_region(&file).iter().zip(&expected) {
        assert!(predicted >= stored, "{file:#}");
    }
}
