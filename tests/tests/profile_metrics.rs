//! The operations lines of issue 37 §4: `hourglass serve --profile-config`'s `/metrics` (the
//! cache counters, Redis errors, the store reads' latency histogram, `user_profile_tag`'s reads
//! per region) and `hourglass profile run`'s `metrics_listen` (Kafka lag, the job's counters).
//!
//! The serve scenario runs on the embedded store with a Redis that cannot be reached (no
//! service needed: that is the point); the HBase one, with its region counts, is in
//! `profile_read.rs`. The `profile run` one needs Kafka (`scripts/services.sh up kafka`;
//! skipped without it, failing in CI).

#[allow(dead_code)] // profile_read.rs uses the rest.
mod profile_read_common;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use e2e::job::{metrics_address, sigterm, wait_ok};
use e2e::services::{kafka_up, unique, BROKER};
use e2e::{hourglass_bin, Exposition};
use profile_read_common::*;
use serde_json::json;

/// Parses a `/metrics` answer in OpenMetrics strictly with the repository's parser, which reads
/// the Prometheus text format: the answer must end with `# EOF`, and a counter family `x`,
/// whose samples are `x_total`, is declared to it under `x_total`.
fn openmetrics(text: &str) -> Exposition {
    let body = text
        .strip_suffix("# EOF\n")
        .unwrap_or_else(|| panic!("no closing # EOF:\n{text}"));
    let counters: Vec<&str> = body
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.strip_suffix(" counter"))
        .collect();
    let mut renamed = String::new();
    for line in body.lines() {
        let mut line = line.to_string();
        for c in &counters {
            for kw in ["# HELP ", "# TYPE "] {
                if let Some(rest) = line.strip_prefix(&format!("{kw}{c} ")) {
                    line = format!("{kw}{c}_total {rest}");
                }
            }
        }
        renamed.push_str(&line);
        renamed.push('\n');
    }
    e2e::parse_exposition(&renamed).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn scrape(server: &Server) -> Exposition {
    let mut r = Server::agent()
        .get(format!("{}/metrics", server.url))
        .header("Authorization", "Bearer s3cret")
        .call()
        .unwrap();
    openmetrics(&r.body_mut().read_to_string().unwrap())
}

const READS: &str = "hourglass_profile_store_read_duration_seconds";

#[test]
fn serve_metrics_count_the_cache_redis_errors_and_time_each_store_call() {
    let s = Scenario::new("", &["--store", "store"]);
    let (u, v, t) = (user("m1"), user("m2"), now() - 600);
    s.replay(&[
        (&u, t, json!({"dim_city": "hz", "beh_buy": 1})),
        (&v, t, json!({"beh_buy": 2})),
    ]);
    // Then a cache in a Redis nobody listens on: every profile is a miss read from the store,
    // and the first Redis call of each rest period an error.
    let config = std::fs::read_to_string(s.path().join("p.toml")).unwrap();
    std::fs::write(
        s.path().join("p.toml"),
        format!("{config}[redis]\nurl = \"redis://127.0.0.1:1/0\"\n[cache]\ntimeout_ms = 50\n"),
    )
    .unwrap();
    let server = s.serve();
    let before = scrape(&server);
    for call in ["get", "multi_get", "versions", "scan"] {
        assert_eq!(
            before.get(&format!("{READS}_count"), &[("call", call)]),
            Some(0.0),
            "{before:#?}"
        );
    }
    let (status, p) = server.get(&format!("/api/v1/profile/{u}"));
    assert_eq!((status, p["source"].clone()), (200, json!("store")), "{p}");
    let (_, b) = server.post(
        "/api/v1/profiles:batchGet",
        &json!({"users": [u, v, "nobody-here"]}).to_string(),
    );
    assert_eq!(b["profiles"][1]["tags"], json!({"beh_buy": 2}), "{b}");
    assert_eq!(
        server.get(&format!("/api/v1/profile/{u}?versions=2")).0,
        200
    );
    assert_eq!(server.get(&format!("/api/v1/profile/{u}?at={t}")).0, 200);

    let m = scrape(&server);
    let get = |name: &str, labels: &[(&str, &str)]| {
        m.get(name, labels)
            .unwrap_or_else(|| panic!("no {name}{labels:?} in {m:#?}"))
    };
    assert_eq!(m.types["hourglass_profile_cache_hits_total"], "counter");
    assert_eq!(get("hourglass_profile_cache_hits_total", &[]), 0.0);
    // The single read and the batch's three users: 4 misses; `versions` and `at` read the
    // store without asking the cache.
    assert_eq!(get("hourglass_profile_cache_misses_total", &[]), 4.0);
    assert!(get("hourglass_profile_cache_redis_errors_total", &[]) >= 1.0);
    assert_eq!(m.types[READS], "histogram");
    for (call, n) in [
        ("get", 1.0),
        ("multi_get", 1.0),
        ("versions", 1.0),
        ("scan", 1.0),
    ] {
        assert_eq!(
            get(&format!("{READS}_count"), &[("call", call)]),
            n,
            "{call}"
        );
        assert_eq!(
            get(
                &format!("{READS}_bucket"),
                &[("call", call), ("le", "+Inf")]
            ),
            n
        );
        assert!(
            get(&format!("{READS}_sum"), &[("call", call)]) > 0.0,
            "{call}"
        );
    }
    // The embedded store has no regions: the family is declared, with no series.
    assert_eq!(
        m.types["hourglass_profile_store_region_reads_total"],
        "counter"
    );
    assert_eq!(
        m.all("hourglass_profile_store_region_reads_total").count(),
        0,
        "{m:#?}"
    );
}

/// `profile run` with `--metrics-listen`: the Kafka lag of its partition reaches 0 once every
/// event is read, beside the profile job's counters (Redis retries and dropped invalidations
/// among them).
#[test]
fn profile_run_reports_kafka_lag_and_its_counters() {
    if !kafka_up() {
        return;
    }
    let s = Scenario::new("", &[]);
    let dir = s.path();
    let topic = unique("profile-metrics");
    let (t, n) = (now() - 600, 40i32);
    let lines: String = (0..n)
        .map(|i| {
            format!(
                "{}\n",
                json!({"user_id": format!("lag-{i}"), "ts": t + i64::from(i), "tags": {"beh_buy": i}})
            )
        })
        .collect();
    std::fs::write(dir.join("ev.jsonl"), lines).unwrap();
    let config = std::fs::read_to_string(dir.join("p.toml")).unwrap();
    std::fs::write(
        dir.join("p.toml"),
        format!(
            "{config}[source]\nbrokers = {BROKER:?}\ntopic = {topic:?}\ngroup_id = {topic:?}\n\
             idle_partition_timeout_secs = 2\n[store]\nkind = \"embedded\"\ndir = \"store\"\n"
        ),
    )
    .unwrap();
    let produce = hourglass(dir)
        .args(e2e::job::produce_args(
            Path::new("ev.jsonl"),
            &topic,
            "1",
            &[],
        ))
        .spawn()
        .unwrap();
    wait_ok(produce, "produce");
    let mut job = hourglass(dir)
        .args([
            "profile",
            "run",
            "--config",
            "p.toml",
            "--metrics-listen",
            "127.0.0.1:0",
        ])
        .spawn()
        .unwrap();
    let (addr, log) = metrics_address(&mut job);
    let deadline = Instant::now() + Duration::from_secs(180);
    let m = loop {
        let text = ureq::get(format!("http://{addr}/metrics"))
            .call()
            .unwrap()
            .body_mut()
            .read_to_string()
            .unwrap();
        let m = e2e::parse_exposition(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
        if m.get("hourglass_job_records_read_total", &[]) == Some(f64::from(n))
            && m.get("hourglass_job_consumer_lag", &[("partition", "0")]) == Some(0.0)
            && m.get("hourglass_job_profile_users_flushed_total", &[]) == Some(f64::from(n))
        {
            break m;
        }
        assert!(
            Instant::now() < deadline,
            "every event read and written: not within 3 minutes (a liveness bound); last \
             scrape:\n{text}\njob:\n{}",
            log.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(m.types["hourglass_job_consumer_lag"], "gauge");
    for counter in [
        "hourglass_job_profile_cache_invalidation_retries_total",
        "hourglass_job_profile_cache_invalidations_dropped_total",
        "hourglass_job_profile_short_term_retries_total",
    ] {
        assert_eq!(m.get(counter, &[]), Some(0.0), "{counter}: {m:#?}");
    }
    sigterm(&job);
    let status = job.wait().unwrap();
    assert!(status.success(), "{status}\n{}", log.lock().unwrap());
}

/// `hourglass` in `dir`, stdout discarded and stderr piped (the metrics address comes there).
fn hourglass(dir: &Path) -> Command {
    let mut cmd = Command::new(hourglass_bin());
    cmd.current_dir(dir)
        .env_remove("HOURGLASS_NOW")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}
