//! `hourglass profile audience`: tag events replayed into the store, then audience queries
//! checked against a brute-force evaluation of the same conditions over every user's tags as
//! `hourglass profile get` prints them; a changed value retracts its old index entry, a late
//! one does not, a purge removes the code's entries; bad queries fail naming the position.
//!
//! Against the embedded store always; the retraction scenario against a live HBase
//! (`scripts/services.sh up hbase`) too, which fails when HBase is not reachable on
//! 127.0.0.1:9090/9091, unless `HOURGLASS_SKIP_HBASE=1` outside CI. The HBase run uses users
//! and values of its own, so rows other runs left in the shared tables do not count.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Output;
use std::time::{SystemTime, UNIX_EPOCH};

mod profile_audience_common;
// Its scenario (registry, config, replays) and `hourglass serve`; not every helper is used here.
#[allow(dead_code)]
mod profile_read_common;

use e2e::services::{hbase_up, THRIFT1, THRIFT2};
use e2e::{hourglass_command, ok_stdout};
use profile::ValueType;
use profile_audience_common::conditions;

/// The job's index is off by default: every test here queries it.
const INDEX_ON: &str = "[index]\nenabled = true\n";
/// A registry and short-term file beside the store, the index on.
const CONFIG: &str = concat!(
    "[registry]\nurl = \"sqlite://tags.sqlite\"\n[short_term]\npath = \"st.sqlite\"\n",
    "[index]\nenabled = true\n"
);
use serde_json::{json, Value};

/// "Now" of every command of the generated scenario: after the last event time (the
/// generator's events start at 1796500000 and span a day).
const NOW: &str = "1796600000";

fn run(dir: &Path, now: &str, args: &[&str]) -> Output {
    hourglass_command(dir, now, args)
        .output()
        .expect("running hourglass")
}

fn ok(dir: &Path, now: &str, args: &[&str]) -> String {
    ok_stdout(args, run(dir, now, args))
}

/// `profile audience QUERY --format ids` as a set.
fn audience(dir: &Path, now: &str, store: &[&str], query: &str) -> BTreeSet<String> {
    let mut args = vec![
        "profile", "audience", query, "--config", "p.toml", "--format", "ids",
    ];
    args.extend(store);
    ok(dir, now, &args).lines().map(str::to_string).collect()
}

/// Generates `users` users' `events` tag events (`--seed seed`) and their registry in `dir`,
/// imports the registry, and writes the events' first `split(n)` of `n` lines to `a.jsonl` and
/// the rest to `b.jsonl`. Returns the events' lines.
fn generate_in_two(
    dir: &Path,
    (users, events, seed): (&str, &str, &str),
    split: impl Fn(usize) -> usize,
) -> Vec<String> {
    ok(
        dir,
        NOW,
        &[
            "profile",
            "generate",
            "--users",
            users,
            "--events",
            events,
            "--seed",
            seed,
            "--out",
            "ev.jsonl",
            "--registry-out",
            "reg.csv",
        ],
    );
    std::fs::write(dir.join("p.toml"), CONFIG).unwrap();
    ok(
        dir,
        NOW,
        &["tags", "import", "reg.csv", "--config", "p.toml"],
    );
    let text = std::fs::read_to_string(dir.join("ev.jsonl")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let (first, second) = lines.split_at(split(lines.len()));
    for (name, part) in [("a.jsonl", first), ("b.jsonl", second)] {
        std::fs::write(dir.join(name), part.join("\n") + "\n").unwrap();
    }
    lines.into_iter().map(str::to_string).collect()
}

/// Generates `users` users' `events` tag events (`--seed seed`) and their registry in `dir`,
/// imports the registry and replays the events into `store` with the index on, in two replays:
/// the second one's changes retract entries of values stored by the first (read from the
/// store), and each one's own repeated users those of its earlier batches (held by the writer
/// until its flush). Returns the events' lines.
fn generate_and_replay_in_halves(dir: &Path, users: &str, events: &str, seed: &str) -> Vec<String> {
    let lines = generate_in_two(dir, (users, events, seed), |n| n / 2);
    for name in ["a.jsonl", "b.jsonl"] {
        ok(
            dir,
            NOW,
            &[
                "profile",
                "replay",
                name,
                "--config",
                "p.toml",
                "--store",
                "store",
                "--quiet",
                // One worker: workers opening a new short-term SQLite file at once failed
                // once here ("opening the short-term store"), which is not this test's subject.
                "--workers",
                "1",
            ],
        );
    }
    lines
}

#[test]
fn generated_traffic_audiences_match_brute_force() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let mut users = BTreeSet::new();
    for line in generate_and_replay_in_halves(dir, "60", "2000", "37") {
        let e: Value = serde_json::from_str(&line).unwrap();
        users.insert(match &e["user_id"] {
            Value::String(s) => s.clone(),
            n => n.to_string(),
        });
    }
    let registry = format!("sqlite://{}", dir.join("tags.sqlite").display());
    let defs = profile::registry::open(&registry).unwrap().list().unwrap();
    let stored: BTreeSet<&str> = defs
        .iter()
        .filter(|d| d.value_type != ValueType::ShortTerm)
        .map(|d| d.tag_code.as_str())
        .collect();
    // Every user's tags, as `profile get` prints them.
    let mut tags = BTreeMap::new();
    for u in &users {
        let args = [
            "profile", "get", u, "--config", "p.toml", "--store", "store",
        ];
        let out = run(dir, NOW, &args);
        if out.status.code() == Some(1) {
            continue;
        }
        let v: Value = serde_json::from_str(&ok_stdout(&args, out)).unwrap();
        let t = v["tags"].as_object().unwrap().clone();
        // NOT is relative to the users with a stored (not short-term) tag.
        if t.keys().any(|c| stored.contains(c.as_str())) {
            tags.insert(u.clone(), t);
        }
    }
    assert!(tags.len() > 40, "{}", tags.len());
    let store = ["--store", "store"];
    let mut nonempty = 0;
    for cond in conditions(&defs, &tags) {
        let want: BTreeSet<String> = tags
            .iter()
            .filter(|(_, t)| (cond.holds)(t))
            .map(|(u, _)| u.clone())
            .collect();
        let got = audience(dir, NOW, &store, &cond.text);
        assert_eq!(got, want, "{}", cond.text);
        nonempty += usize::from(!want.is_empty() && want.len() < tags.len());
        let count_args = [
            "profile", "audience", &cond.text, "--config", "p.toml", "--store", "store",
        ];
        assert_eq!(ok(dir, NOW, &count_args).trim(), want.len().to_string());
    }
    assert!(
        nonempty > 20,
        "the conditions must discriminate: {nonempty}"
    );
}

/// A replay of generated traffic shaped as the benchmark's (`profile generate --seed 7`,
/// docs/BENCHMARKS.md), in two parts so that the second retracts entries the first stored,
/// leaves an index `profile reconcile` finds nothing to repair in: every value changed many
/// times left exactly its newest value's entries.
#[test]
fn a_replay_with_the_index_on_leaves_nothing_to_reconcile() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    generate_and_replay_in_halves(dir, "2000", "30000", "7");
    let args = [
        "profile",
        "reconcile",
        "--config",
        "p.toml",
        "--store",
        "store",
    ];
    let found: Value = serde_json::from_str(&ok(dir, NOW, &args)).unwrap();
    assert_eq!(
        (found["missing"].clone(), found["stale"].clone()),
        (json!(0), json!(0)),
        "{found}"
    );
    assert!(
        found["index_rows"].as_u64().unwrap() > 4000,
        "the replay indexed its users' values: {found}"
    );
}

/// The scenario of one value's changes, on the store `flags` name, with users and values
/// unique to `run_id`.
fn value_changes_retract(flags: &[&str], run_id: &str) {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let now_s = now.to_string();
    let now = i64::try_from(now).unwrap();
    let csv =
        "tag_code,name,data_type,value_type,status,ttl_secs,category,owner,update_frequency\n\
               dim_city,City,STRING,dimension,online,,geo,crm,daily\n\
               beh_buy,Buys,INT,statistic,online,,behaviour,dp,daily\n\
               dim_likes,Likes,MULTI_VALUE,dimension,online,,geo,crm,daily\n\
               rt_cat,Cat,STRING,short_term,online,3600,rt,dp,realtime\n";
    std::fs::write(dir.join("reg.csv"), csv).unwrap();
    std::fs::write(dir.join("p.toml"), CONFIG).unwrap();
    ok(
        dir,
        &now_s,
        &["tags", "import", "reg.csv", "--config", "p.toml"],
    );
    if flags[0] == "--hbase" {
        // A replay creates no table in HBase: this creates the missing ones, keeps the others.
        let mut create = vec!["tables", "create"];
        create.extend(flags);
        ok(dir, &now_s, &create);
    }
    let (u1, u2) = (format!("{run_id}1"), format!("{run_id}2"));
    let city = |c: &str| format!("{c}-{run_id}");
    let replay = |events: &[Value]| {
        let text: String = events.iter().map(|e| format!("{e}\n")).collect();
        std::fs::write(dir.join("ev.jsonl"), text).unwrap();
        let mut args = vec![
            "profile", "replay", "ev.jsonl", "--config", "p.toml", "--quiet",
        ];
        args.extend(flags);
        ok(dir, &now_s, &args);
    };
    let who = |q: &str| -> Vec<String> { audience(dir, &now_s, flags, q).into_iter().collect() };
    let ev = |u: &str, ago: i64, tags: Value| json!({"user_id": u, "ts": now - ago, "tags": tags});
    replay(&[
        ev(
            &u1,
            300,
            json!({"dim_city": city("hz"), "beh_buy": 2, "dim_likes": ["a", "b"]}),
        ),
        ev(
            &u2,
            300,
            json!({"dim_city": city("hz"), "beh_buy": 5, "rt_cat": "x"}),
        ),
    ]);
    let hz = format!("dim_city = '{}'", city("hz"));
    let sh = format!("dim_city = '{}'", city("sh"));
    let bj = format!("dim_city = '{}'", city("bj"));
    let mine = format!(
        "dim_city IN ('{}', '{}', '{}')",
        city("hz"),
        city("sh"),
        city("bj")
    );
    assert_eq!(who(&hz), [u1.as_str(), u2.as_str()]);
    assert_eq!(who(&format!("{hz} AND beh_buy >= 3")), [u2.as_str()]);
    assert_eq!(who(&format!("{hz} AND NOT beh_buy >= 3")), [u1.as_str()]);

    // u1 moves to sh: its hz entry is retracted. Its likes change one element. u2's buys.
    replay(&[
        ev(
            &u1,
            200,
            json!({"dim_city": city("sh"), "dim_likes": ["b", "c"]}),
        ),
        ev(&u2, 200, json!({"beh_buy": 1})),
    ]);
    assert_eq!(who(&hz), [u2.as_str()]);
    assert_eq!(who(&sh), [u1.as_str()]);
    assert_eq!(
        who(&format!("{mine} AND beh_buy >= 3")),
        Vec::<String>::new()
    );
    assert_eq!(
        who(&format!("{mine} AND beh_buy < 3")),
        [u1.as_str(), u2.as_str()]
    );
    assert_eq!(
        who(&format!("{mine} AND dim_likes CONTAINS a")),
        Vec::<String>::new()
    );
    assert_eq!(
        who(&format!("{mine} AND dim_likes CONTAINS c")),
        [u1.as_str()]
    );

    // A late event (older than the stored value) changes neither the profile nor the index;
    // in one replay, a user's value changed twice ends as its newest.
    replay(&[
        ev(&u1, 250, json!({"dim_city": city("bj")})),
        ev(&u2, 100, json!({"dim_city": city("bj")})),
        ev(&u2, 50, json!({"dim_city": city("sh")})),
    ]);
    assert_eq!(who(&bj), Vec::<String>::new());
    assert_eq!(who(&sh), [u1.as_str(), u2.as_str()]);
    assert_eq!(who(&hz), Vec::<String>::new());
    let mut get = vec!["profile", "get", &u1, "--config", "p.toml"];
    get.extend(flags);
    let profile: Value = serde_json::from_str(&ok(dir, &now_s, &get)).unwrap();
    assert_eq!(profile["tags"]["dim_city"], json!(city("sh")));

    // Bad queries: a clear error naming the position, nothing printed.
    for (q, text) in [
        ("dim_town = hz", "at position 0: unknown tag 'dim_town'"),
        (
            "beh_buy >= many",
            "at position 11: 'many' is not an integer",
        ),
        ("dim_city > hz", "operator > is not valid for 'dim_city'"),
        ("rt_cat = x", "short_term"),
        (
            "dim_city = hz AND (beh_buy > 1",
            "at position 30: expected ')'",
        ),
    ] {
        let mut args = vec!["profile", "audience", q, "--config", "p.toml"];
        args.extend(flags);
        let out = run(dir, &now_s, &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && out.stdout.is_empty(),
            "{q}: {stderr}"
        );
        assert!(stderr.contains(text), "{q}: {stderr}");
    }
    // json and --limit, to a file.
    let mut args = vec![
        "profile", "audience", &sh, "--config", "p.toml", "--format", "json", "--limit", "1",
        "--out", "aud.json",
    ];
    args.extend(flags);
    ok(dir, &now_s, &args);
    let answer: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("aud.json")).unwrap()).unwrap();
    assert_eq!(answer["count"], json!(2));
    assert_eq!(answer["truncated"], json!(true));
    assert_eq!(answer["users"].as_array().unwrap().len(), 1);

    // A purged tag's entries are gone with its values.
    let set = [
        "tags",
        "set-status",
        "dim_likes",
        "offline",
        "--config",
        "p.toml",
    ];
    ok(dir, &now_s, &set);
    let mut purge = vec!["tags", "purge", "dim_likes", "--config", "p.toml"];
    purge.extend(flags);
    let out = ok(dir, &now_s, &purge);
    assert!(out.contains("index entries deleted"), "{out}");
    assert_eq!(
        who(&format!("{mine} AND dim_likes CONTAINS b")),
        Vec::<String>::new()
    );
    assert_eq!(
        who(&format!("{mine} AND NOT dim_likes CONTAINS b")),
        [u1.as_str(), u2.as_str()]
    );
}

#[test]
fn value_changes_retract_on_the_embedded_store() {
    value_changes_retract(&["--store", "store"], "13900000");
}

#[test]
fn value_changes_retract_on_hbase() {
    if !hbase_up("the audience index on HBase") {
        return;
    }
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    // Decimal ids, as phone numbers are, unique to this run.
    let run_id = format!("{}", 100_000_000 + nanos % 800_000_000);
    value_changes_retract(&["--hbase", THRIFT1, "--thrift2", THRIFT2], &run_id);
}

#[test]
fn the_audience_route_answers_as_the_cli_and_refuses_bad_queries() {
    let s = profile_read_common::Scenario::new(INDEX_ON, &["--store", "store"]);
    let now = profile_read_common::now();
    let events: Vec<(String, i64, Value)> = (0..30)
        .map(|i| {
            let city = ["hz", "sh", "bj"][i % 3];
            (
                format!("1380000{i:04}"),
                now - 60,
                json!({"dim_city": city, "beh_buy": i}),
            )
        })
        .collect();
    let text: String = events
        .iter()
        .map(|(u, ts, t)| format!("{}\n", json!({"user_id": u, "ts": ts, "tags": t})))
        .collect();
    std::fs::write(s.path().join("ev.jsonl"), text).unwrap();
    profile_read_common::ok(
        s.path(),
        &[
            "profile", "replay", "ev.jsonl", "--config", "p.toml", "--store", "store", "--quiet",
        ],
    );
    let q = "dim_city = hz AND beh_buy >= 10";
    let want: Vec<String> = events
        .iter()
        .filter(|(_, _, t)| t["dim_city"] == "hz" && t["beh_buy"].as_i64().unwrap() >= 10)
        .map(|(u, _, _)| u.clone())
        .collect();
    assert_eq!(want.len(), 6);
    let server = s.serve();
    let encoded = q
        .replace(' ', "%20")
        .replace('=', "%3D")
        .replace('>', "%3E");
    let (status, body) = server.get(&format!("/api/v1/audience?q={encoded}&limit=3"));
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["count"], json!(want.len()));
    assert_eq!(body["truncated"], json!(true));
    assert_eq!(body["users"], json!(want[..3]));
    let cli = profile_read_common::ok(
        s.path(),
        &[
            "profile", "audience", q, "--config", "p.toml", "--store", "store", "--format", "ids",
        ],
    );
    assert_eq!(cli.lines().collect::<Vec<_>>(), want);
    for (q, text) in [
        ("dim_city%20%3D", "at position 10: expected a value"),
        ("dim_town%20%3D%20hz", "unknown tag 'dim_town'"),
        ("beh_buy%20%3D%20many", "'many' is not an integer"),
        ("dim_city%20%3E%20hz", "operator > is not valid"),
    ] {
        let (status, body) = server.get(&format!("/api/v1/audience?q={q}"));
        assert_eq!(status, 400, "{q}: {body}");
        assert!(
            body["error"].as_str().unwrap().contains(text),
            "{q}: {body}"
        );
    }
    let (status, _) = server.get("/api/v1/audience");
    assert_eq!(status, 400);
}

#[test]
fn reconcile_finds_missing_and_stale_entries_and_repairs_them() {
    let s = profile_read_common::Scenario::new(INDEX_ON, &["--store", "store"]);
    let now = profile_read_common::now();
    let (u1, u2) = ("13800000001", "13800000002");
    s.replay(&[
        (u1, now - 60, json!({"dim_city": "hz", "beh_buy": 4})),
        (u2, now - 60, json!({"dim_city": "sh", "beh_buy": 1})),
    ]);
    let reconcile = |repair: bool| -> (bool, Value) {
        let mut args = vec![
            "profile",
            "reconcile",
            "--config",
            "p.toml",
            "--store",
            "store",
        ];
        if repair {
            args.push("--repair");
        }
        let out = profile_read_common::run(s.path(), &args);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        (
            out.status.success(),
            serde_json::from_str(&text).expect(&text),
        )
    };
    let (ok_, found) = reconcile(false);
    assert!(ok_, "{found}");
    assert_eq!(
        (found["missing"].clone(), found["stale"].clone()),
        (json!(0), json!(0))
    );
    assert_eq!(found["index_rows"], json!(4));

    // u1 moves to gz in the profile table alone, as a job with the index off writes it: its
    // gz entry is missing, its hz entry stale.
    {
        use sinks::table::{Cell, Mutation};
        let cfg = sinks::config::StoreConfig {
            dir: s.path().join("store"),
            ..sinks::config::StoreConfig::default()
        };
        let store = sinks::open(&cfg, &profile::tables(), &sinks::OpenOptions::default()).unwrap();
        let mut w = store.writer();
        w.write(vec![Mutation::Put {
            table: profile::PROFILE_TABLE,
            row: profile::profile_row(u1),
            cells: vec![Cell {
                family: "dimension".into(),
                qualifier: b"dim_city".to_vec(),
                ts_ms: (now - 30) * 1000,
                value: b"gz".to_vec(),
            }],
        }])
        .unwrap();
        w.flush().unwrap();
        store.persist().unwrap();
    }
    let who = |q: &str| audience(s.path(), NOW, &["--store", "store"], q);
    assert_eq!(who("dim_city = hz").len(), 1);
    assert!(who("dim_city = gz").is_empty());
    let (ok_, found) = reconcile(false);
    assert!(!ok_, "a mismatch exits 1");
    assert_eq!(
        (found["missing"].clone(), found["stale"].clone()),
        (json!(1), json!(1))
    );
    let (ok_, found) = reconcile(true);
    assert!(ok_ && found["repaired"] == json!(true), "{found}");
    let (ok_, found) = reconcile(false);
    assert!(ok_, "{found}");
    assert_eq!(who("dim_city = gz").into_iter().collect::<Vec<_>>(), [u1]);
    assert!(who("dim_city = hz").is_empty());
}

/// `profile reconcile`'s answer in `dir`'s store, whatever its exit status.
fn reconciled(dir: &Path) -> Value {
    let out = run(
        dir,
        NOW,
        &[
            "profile",
            "reconcile",
            "--config",
            "p.toml",
            "--store",
            "store",
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{e}: {text}\n{}", String::from_utf8_lossy(&out.stderr)))
}

/// A replay into an empty store builds the index at its end; one killed (SIGKILL) before its
/// build is written leaves profiles without entries, which `reconcile` reports (and the row
/// saying the build is pending, as stale), and the next replay into the store repairs the
/// index, saying so: nothing is left to reconcile.
#[test]
fn a_replay_killed_before_its_index_build_is_repaired_by_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    generate_in_two(dir, ("3000", "40000", "5"), |n| n - 200);
    let replay = |file: &str| {
        hourglass_command(
            dir,
            NOW,
            &[
                "profile",
                "replay",
                file,
                "--config",
                "p.toml",
                "--store",
                "store",
                "--workers",
                "1",
            ],
        )
    };
    // Killed after a delay that grows until the kill finds profiles written and no index built
    // (how long the job takes depends on the build and the machine; the outcome does not).
    let mut pending = None;
    for delay_ms in [300, 600, 1200, 100, 2400, 50, 4800] {
        let _ = std::fs::remove_dir_all(dir.join("store"));
        let mut child = replay("a.jsonl")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("running hourglass");
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        child.kill().expect("SIGKILL");
        child.wait().unwrap();
        if !dir.join("store").exists() {
            continue;
        }
        let found = reconciled(dir);
        if found["stale"] == json!(1) && found["missing"].as_u64().unwrap() > 0 {
            pending = Some(found);
            break;
        }
    }
    let killed = pending.expect("no kill landed between the profiles' writes and the build's end");

    let out = replay("b.jsonl").output().expect("running hourglass");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("an earlier replay's build was interrupted; repaired"),
        "{stderr}"
    );
    let found = reconciled(dir);
    assert_eq!(
        (found["missing"].clone(), found["stale"].clone()),
        (json!(0), json!(0)),
        "{found}"
    );
    assert!(
        found["index_rows"].as_u64() > Some(0),
        "{found} after {killed}"
    );
}
