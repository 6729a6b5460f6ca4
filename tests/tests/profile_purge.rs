//! `hourglass tags purge CODE`: an offline tag's column leaves every `user_profile_tag` row and
//! its `user_tag_history` rows go, the other tags' stay; an online tag is refused; a second
//! purge is a no-op; a purge stopped after a few pages (as a kill would leave it) resumes to the
//! same end state.
//!
//! Against the embedded store always; against a live HBase (`scripts/services.sh up hbase`)
//! too, which fails when HBase is not reachable on 127.0.0.1:9090/9091, unless
//! `HOURGLASS_SKIP_HBASE=1` outside CI. The HBase run drops and recreates the profile tables.
//!
//! With `[redis]`, a purge invalidates the cached profiles (`profile:{user}`) of the users it
//! changed, and with Redis away it completes, counting those it could not; against the real
//! Redis of `scripts/services.sh up redis` (skipped without it, failing in CI).

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::json;

use e2e::services::{hbase_up, redis_up, THRIFT1, THRIFT2};
use e2e::{hourglass_command, ok_stdout};
use profile::event::CellValue;
use profile::key::parse_history_row;
use profile::purge::PurgeOptions;
use profile::{
    DataType, MergeConfig, PurgeOutcome, TagDef, TagStatus, TagUpdate, UserMerge, ValueType,
    HISTORY_TABLE, PROFILE_TABLE,
};
use sinks::config::{StoreConfig, StoreKind};
use sinks::table::{ScanSpec, TableReader};
use sinks::{OpenOptions, Store};

// Its scenario (registry, config, replays), Redis helpers and proxy; not every one is used here.
#[allow(dead_code)]
mod profile_read_common;

/// The tag purged; `dim_city` and `beh_buy` stay.
const GONE: &str = "dim_old";
const USERS: usize = 7;

fn def(code: &str, value_type: ValueType) -> TagDef {
    TagDef {
        tag_code: code.into(),
        name: code.into(),
        data_type: DataType::Int,
        value_type,
        status: TagStatus::Online,
        ttl_secs: None,
        category: String::new(),
        owner: String::new(),
        update_frequency: "daily".into(),
    }
}

fn tags() -> [TagDef; 3] {
    [
        def("dim_city", ValueType::Dimension),
        def(GONE, ValueType::Dimension),
        def("beh_buy", ValueType::Statistic),
    ]
}

/// Where a scenario runs: the store's flags for the CLI, how the test opens it, its clock.
struct Target {
    /// `--store DIR` or `--hbase … --thrift2 …`.
    flags: Vec<String>,
    cfg: StoreConfig,
    /// "Now", epoch seconds: the CLI's `HOURGLASS_NOW` and the test's store clock.
    now: i64,
}

impl Target {
    fn open(&self) -> Store {
        let now_ms = self.now * 1000;
        let options = OpenOptions {
            clock: Arc::new(move || now_ms),
            retry_limit: Some(Duration::from_secs(60)),
            ..OpenOptions::default()
        };
        sinks::open(&self.cfg, &profile::tables(), &options).expect("opening the store")
    }

    /// Runs `hourglass args… FLAGS` in `dir`.
    fn hourglass(&self, dir: &Path, args: &[&str]) -> std::process::Output {
        let mut all: Vec<&str> = args.to_vec();
        all.extend(self.flags.iter().map(String::as_str));
        hourglass_command(dir, &self.now.to_string(), &all)
            .output()
            .expect("running hourglass")
    }
}

/// Writes every user's three tags, two changes each, as the profile job's merge would.
fn write_profiles(store: &Store, now: i64) {
    let mut merge = UserMerge::new(MergeConfig::default());
    for u in 0..USERS {
        for (i, d) in tags().iter().enumerate() {
            for ts in [now - 3600, now - 60] {
                let value = CellValue::Int(i64::try_from(u * 10 + i).unwrap() + ts % 7);
                merge.push(TagUpdate::new(d, &format!("user{u}"), ts, value));
            }
        }
    }
    let mut w = store.writer();
    w.write(merge.flush().mutations).expect("write");
    w.flush().expect("flush");
}

/// Every table's rows as `key -> [family:qualifier@ts=value]`.
fn dump(store: &Store) -> BTreeMap<String, Vec<String>> {
    let reader = store.reader();
    let mut out = BTreeMap::new();
    for table in [PROFILE_TABLE, HISTORY_TABLE] {
        let spec = ScanSpec {
            max_versions: 10,
            ..ScanSpec::default()
        };
        for row in reader.scan(table, &spec).expect("scan") {
            let cells = row
                .cells
                .iter()
                .map(|c| {
                    format!(
                        "{}:{}@{}={}",
                        c.family,
                        String::from_utf8_lossy(&c.qualifier),
                        c.ts_ms,
                        String::from_utf8_lossy(&c.value)
                    )
                })
                .collect();
            out.insert(
                format!("{table}/{}", String::from_utf8_lossy(&row.key)),
                cells,
            );
        }
    }
    out
}

/// Checks that `GONE` is gone from both tables and the other tags are whole.
fn assert_purged(before: &BTreeMap<String, Vec<String>>, after: &BTreeMap<String, Vec<String>>) {
    let mut want = before.clone();
    want.retain(|key, _| {
        let history = key.strip_prefix(&format!("{HISTORY_TABLE}/"));
        history.is_none_or(|row| parse_history_row(row.as_bytes()).unwrap().1 != GONE)
    });
    for (key, cells) in &mut want {
        if key.starts_with(&format!("{PROFILE_TABLE}/")) {
            cells.retain(|c| !c.starts_with(&format!("dimension:{GONE}@")));
        }
    }
    assert_eq!(after, &want);
    let profiles = after
        .keys()
        .filter(|k| k.starts_with(PROFILE_TABLE))
        .count();
    assert_eq!(profiles, USERS, "every user keeps a row");
    assert_eq!(after.len(), USERS + USERS * 2 * 2, "two tags' history kept");
}

/// The whole scenario on one target, in `dir`.
fn purge_scenario(dir: &Path, target: &Target, fresh: &dyn Fn() -> Target) {
    let registry = format!("sqlite://{}", dir.join("tags.sqlite").display());
    let mut reg = profile::open(&registry).expect("registry");
    for outcome in reg.upsert(&tags()).expect("upsert") {
        outcome.expect("a valid definition");
    }
    let before = {
        let store = target.open();
        write_profiles(&store, target.now);
        dump(&store)
    };
    assert_eq!(before.len(), USERS + USERS * 3 * 2);

    let purge = ["tags", "purge", GONE, "--registry", &registry];
    let refused = target.hourglass(dir, &purge);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "an online tag is refused");
    assert!(
        stderr.contains(&format!("hourglass tags set-status {GONE} offline")),
        "{stderr}"
    );
    assert_eq!(dump(&target.open()), before, "a refusal changes nothing");

    let offline = [
        "tags",
        "set-status",
        GONE,
        "offline",
        "--registry",
        &registry,
    ];
    let set = hourglass_command(dir, &target.now.to_string(), &offline).output();
    ok_stdout(&offline, set.expect("running hourglass"));
    let out = ok_stdout(&purge, target.hourglass(dir, &purge));
    assert!(out.contains(&format!("purged tag {GONE}")), "{out}");
    assert!(out.contains(&format!("{USERS} columns deleted")), "{out}");
    assert!(out.contains(&format!("{} deleted", USERS * 2)), "{out}");
    let after = dump(&target.open());
    assert_purged(&before, &after);

    let again = ok_stdout(&purge, target.hourglass(dir, &purge));
    assert!(again.contains("already purged"), "{again}");
    assert_eq!(dump(&target.open()), after);

    // A purge stopped after two pages of three rows, as a kill leaves it, resumed by the CLI
    // from its checkpoint, on a store holding the same rows: the same end state.
    let target = fresh();
    let checkpoint = dir.join("stopped.json");
    let before = {
        let store = target.open();
        write_profiles(&store, target.now);
        dump(&store)
    };
    {
        let store = target.open();
        let options = PurgeOptions {
            page_rows: 3,
            max_pages: Some(2),
            ..PurgeOptions::new(GONE, &checkpoint)
        };
        let outcome = profile::purge(&store, reg.as_mut(), &options, &mut |_| {});
        assert!(
            matches!(outcome, Ok(PurgeOutcome::Stopped(c)) if c.profile_rows == 6),
            "{outcome:?}"
        );
        let partial = dump(&store);
        assert_ne!(partial, before, "the pages done are purged");
        let profile_left = partial
            .iter()
            .filter(|(k, cells)| {
                k.starts_with(PROFILE_TABLE) && cells.iter().any(|c| c.contains(GONE))
            })
            .count();
        assert_eq!(profile_left, USERS - 6, "the rest is not");
    }
    let checkpoint = checkpoint.display().to_string();
    let resume = [
        &purge[..],
        &["--checkpoint", &checkpoint, "--page-rows", "3"],
    ]
    .concat();
    let out = ok_stdout(&resume, target.hourglass(dir, &resume));
    assert!(out.contains(&format!("{USERS} columns deleted")), "{out}");
    assert_purged(&before, &dump(&target.open()));
}

fn embedded(dir: &Path, name: &str) -> Target {
    let store = dir.join(name);
    Target {
        flags: vec!["--store".into(), store.display().to_string()],
        cfg: StoreConfig {
            dir: store,
            ..StoreConfig::default()
        },
        now: e2e::NOW.parse().unwrap(),
    }
}

#[test]
fn purge_on_the_embedded_store() {
    let dir = tempfile::tempdir().unwrap();
    let target = embedded(dir.path(), "store");
    purge_scenario(dir.path(), &target, &|| embedded(dir.path(), "store2"));
}

/// HBase with empty profile tables, measuring TTLs against the real clock.
fn hbase() -> Target {
    let mut cfg = StoreConfig {
        kind: StoreKind::Hbase,
        hbase: Some(THRIFT1.into()),
        ..StoreConfig::default()
    };
    cfg.hbase_client.thrift2 = Some(THRIFT2.into());
    cfg.hbase_client.retry_max_elapsed_secs = Some(120);
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let target = Target {
        flags: vec![
            "--hbase".into(),
            THRIFT1.into(),
            "--thrift2".into(),
            THRIFT2.into(),
        ],
        cfg,
        now: i64::try_from(now).unwrap(),
    };
    let store = target.open();
    let hbase = store
        .downcast_ref::<sinks::hbase::HbaseStorage>()
        .expect("an HBase store");
    sinks::hbase::admin::drop_tables(hbase.config(), &[PROFILE_TABLE, HISTORY_TABLE])
        .expect("dropping the profile tables");
    store
        .admin()
        .create_tables()
        .expect("creating the profile tables");
    target
}

#[test]
fn purge_on_hbase() {
    if !hbase_up("the purge against HBase") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    purge_scenario(dir.path(), &hbase(), &hbase);
}

/// A scenario whose cache is in the Redis at `url`, with three users cached: two with a city,
/// one without; their ids.
fn cached_scenario(url: &str) -> (profile_read_common::Scenario, [String; 3]) {
    use profile_read_common::{now, user, Scenario};
    // Reads wait for Redis up to 2 s: the proxy's added connection (on a loaded machine) must
    // not turn a hit into a miss.
    let config =
        format!("[redis]\nurl = {url:?}\n[cache]\nretry_after_ms = 100\ntimeout_ms = 2000\n");
    let s = Scenario::new(&config, &["--store", "store"]);
    let users = [user("pa"), user("pb"), user("pc")];
    let t = now() - 60;
    s.replay(&[
        (&users[0], t, json!({"dim_city": "hz", "beh_buy": 1})),
        (&users[1], t, json!({"dim_city": "sh", "beh_buy": 2})),
        (&users[2], t, json!({"beh_buy": 3})),
    ]);
    for u in &users {
        assert_eq!(s.get(u, &[]).unwrap()["source"], "store", "{u}: a miss");
        // The miss's backfill was written before its process exited.
        assert_eq!(s.get(u, &[]).unwrap()["source"], "cache", "{u}: then a hit");
    }
    let set = [
        "tags",
        "set-status",
        "dim_city",
        "offline",
        "--config",
        "p.toml",
    ];
    profile_read_common::ok(s.path(), &set);
    (s, users)
}

const PURGE_CITY: [&str; 7] = [
    "tags", "purge", "dim_city", "--config", "p.toml", "--store", "store",
];

#[test]
fn a_purge_invalidates_the_cached_profiles_it_changed() {
    use profile_read_common::{cached, redis, redis_url};
    if !redis_up() {
        return;
    }
    let (s, users) = cached_scenario(&redis_url());
    let mut conn = redis();
    let gen = |conn: &mut redis::Connection, u: &str| -> Option<String> {
        redis::cmd("GET")
            .arg(profile::cache::gen_key(u))
            .query(conn)
            .unwrap()
    };
    let gens: Vec<Option<String>> = users.iter().map(|u| gen(&mut conn, u)).collect();
    assert_eq!(
        cached(&mut conn, &users[0]).unwrap()["tags"]["dim_city"],
        "hz"
    );

    let out = profile_read_common::ok(s.path(), &PURGE_CITY);
    assert!(out.contains("2 columns deleted"), "{out}");
    assert!(
        out.contains("2 users' cached profiles invalidated"),
        "{out}"
    );
    for u in &users[..2] {
        assert_eq!(cached(&mut conn, u), None, "{u}: the entry is deleted");
        let now = gen(&mut conn, u);
        assert!(now.is_some(), "{u}: a new generation");
        assert_ne!(now, gens[users.iter().position(|x| x == u).unwrap()]);
    }
    let kept = cached(&mut conn, &users[2]).expect("an unchanged user's entry stays");
    assert_eq!(kept["tags"], json!({"beh_buy": 3}));
    assert_eq!(gen(&mut conn, &users[2]), gens[2]);

    // Read again: from the store without the city, then from the refilled cache, still without.
    for (u, buys) in users[..2].iter().zip([1, 2]) {
        let fresh = s.get(u, &[]).unwrap();
        assert_eq!(
            (fresh["source"].clone(), fresh["tags"].clone()),
            (json!("store"), json!({"beh_buy": buys}))
        );
        let hit = s.get(u, &[]).unwrap();
        assert_eq!(
            (hit["source"].clone(), hit["tags"].clone()),
            (json!("cache"), json!({"beh_buy": buys}))
        );
    }
}

#[test]
fn a_purge_with_redis_away_completes_and_counts_the_users_left_cached() {
    use profile_read_common::{cached, redis, Proxy};
    if !redis_up() {
        return;
    }
    let proxy = Proxy::start();
    let (s, users) = cached_scenario(&format!("redis://{}/0", proxy.addr));
    proxy.set_up(false);
    let out = profile_read_common::run(s.path(), &PURGE_CITY);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("2 columns deleted"), "{stdout}");
    assert!(
        stdout.contains("0 users' cached profiles invalidated, 2 could not be"),
        "{stdout}"
    );
    assert!(
        stderr.contains("2 users' cached profiles could not be invalidated")
            && stderr.contains("until they expire"),
        "{stderr}"
    );
    // Still cached (Redis was away): the entries expire by their TTL.
    let mut conn = redis();
    assert_eq!(
        cached(&mut conn, &users[0]).unwrap()["tags"]["dim_city"],
        "hz"
    );
    let ttl: i64 = redis::cmd("TTL")
        .arg(profile::cache::entry_key(&users[0]))
        .query(&mut conn)
        .unwrap();
    assert!((1..=600).contains(&ttl), "{ttl}");
}
