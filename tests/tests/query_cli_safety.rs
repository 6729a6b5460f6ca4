//! `hourglass query`'s hostile arguments: times near `i64::MIN`/`MAX` and ranges that would
//! read a wide row per hour for centuries fail with a message naming the limit, at once.

use e2e::{hourglass, hourglass_ok};

/// A scratch directory holding a store with the scenario replayed.
fn store() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = e2e::data("scenario.jsonl");
    hourglass_ok(
        dir.path(),
        &["replay", input.to_str().expect("utf-8"), "--store", "store"],
    );
    dir
}

fn fails_naming(dir: &std::path::Path, args: &[&str], limit: &str) {
    let mut all = args.to_vec();
    all.extend(["--store", "store"]);
    let out = hourglass(dir, &all);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
    assert!(stderr.contains(limit), "{args:?}: {stderr}");
}

/// `query curve` arguments; `--from=…` keeps clap from reading a negative time as a flag.
fn curve(from: &str, to: &str, source: &str) -> Vec<String> {
    ["query", "curve", "--device", "dev00786"]
        .into_iter()
        .map(String::from)
        .chain([
            format!("--from={from}"),
            format!("--to={to}"),
            format!("--source={source}"),
        ])
        .collect()
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

#[test]
fn absurd_times_and_ranges_are_refused_naming_the_limit() {
    let dir = store();
    for source in ["auto", "wide", "narrow"] {
        fails_naming(
            dir.path(),
            &strs(&curve(
                "-9223372036854775808",
                "9223372036854775807",
                source,
            )),
            "253402300799",
        );
    }
    for source in ["auto", "wide"] {
        fails_naming(
            dir.path(),
            &strs(&curve("-60000000000", "0", source)),
            "366 days",
        );
    }
    fails_naming(
        dir.path(),
        &[
            "query",
            "hour",
            "--device",
            "dev00786",
            "--hour=-9223372036854775808",
        ],
        "253402300799",
    );
    // One scan, however long the range: the narrow table answers it.
    let mut args = curve("-60000000000", "253402300799", "narrow");
    args.extend(["--store", "store", "--format", "csv"].map(String::from));
    let out = hourglass_ok(dir.path(), &strs(&args));
    assert!(out.lines().count() > 1, "{out}");
}

/// `bench queries` times each dashboard query it reports, the month curve included, once per
/// iteration, on a store holding the devices it samples.
#[test]
fn bench_queries_times_each_dashboard_query() {
    let dir = tempfile::tempdir().expect("tempdir");
    let d = dir.path();
    hourglass_ok(
        d,
        &[
            "generate",
            "--devices",
            "4",
            "--duration",
            "2h",
            "--rooms",
            "2",
            "--out",
            "rec.jsonl",
        ],
    );
    hourglass_ok(d, &["replay", "rec.jsonl", "--store", "store", "--quiet"]);
    hourglass_ok(
        d,
        &[
            "bench",
            "queries",
            "--store",
            "store",
            "--devices",
            "4",
            "--iterations",
            "3",
            "--json",
            "q.json",
        ],
    );
    let q: serde_json::Value =
        serde_json::from_slice(&std::fs::read(d.join("q.json")).expect("q.json")).expect("JSON");
    for kind in [
        "query_hour",
        "query_curve_24h_auto",
        "query_curve_24h_narrow",
        "query_curve_30d_auto",
        "query_room_view",
        "query_room_fanout",
    ] {
        assert_eq!(q[kind]["n"], 3, "{kind}: {q}");
        let (p50, p99) = (q[kind]["p50_ms"].as_f64(), q[kind]["p99_ms"].as_f64());
        assert!(
            p50.zip(p99).is_some_and(|(a, b)| 0.0 <= a && a <= b),
            "{kind}: {q}"
        );
    }
}
