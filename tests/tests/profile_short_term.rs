//! The short-term tags' store against the real Redis of `scripts/services.sh` (`make test`
//! starts it) and against its embedded SQLite fallback: one `conforms()` run on both, then
//! what only Redis shows (one hash a user and its TTL, the expired fields dropped, the layout
//! before the hashes migrated, a flushed script cache, an unreachable server).
//!
//! Without Redis on 127.0.0.1:6379 the Redis runs skip, except in CI (`CI` set), where they
//! fail. Each run writes users of its own (`t<pid>-<nanos>-…`) and deletes their keys at the
//! end, so runs never see each other's values.

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use e2e::services::redis_up;
use profile::short_term::{self, is_retriable, Migrated, RedisStore, SqliteStore};
use profile::{CellValue, ShortTermStore, ShortTermValue, Written};

const REDIS_URL: &str = "redis://127.0.0.1:6379/0";

/// The Redis tests run one at a time: one of them flushes the server's script cache.
static SERIAL: Mutex<()> = Mutex::new(());

fn now() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock after 1970")
            .as_secs(),
    )
    .expect("seconds fit")
}

/// User ids of this run only, and the deletion of their keys when dropped.
struct Users {
    prefix: String,
    keys: Vec<String>,
    /// The Redis database of the keys.
    url: &'static str,
}

impl Users {
    fn new(test: &str) -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .expect("clock after 1970")
            .as_nanos();
        Self {
            prefix: format!("t{}-{nanos}-{test}", std::process::id()),
            keys: Vec::new(),
            url: REDIS_URL,
        }
    }

    /// User `n` of this run; its hash, and its keys of `CODES` in the layout before the
    /// hashes, are deleted at the end.
    fn user(&mut self, n: u32) -> String {
        let user = format!("{}-{n}", self.prefix);
        self.keys.push(short_term::key(&user));
        self.keys
            .extend(CODES.iter().map(|c| format!("short:{user}:{c}")));
        user
    }
}

impl Drop for Users {
    fn drop(&mut self) {
        if let Ok(mut conn) = redis::Client::open(self.url).and_then(|c| c.get_connection()) {
            let _: redis::RedisResult<()> = redis::cmd("DEL").arg(&self.keys).query(&mut conn);
        }
    }
}

const CODES: [&str; 4] = ["rt_cart_items", "rt_clicks_1h", "rt_last_cat", "rt_old"];

fn value(user: &str, code: &str, ts: i64, v: CellValue, ttl_secs: u64) -> ShortTermValue {
    ShortTermValue {
        user: user.into(),
        code: code.into(),
        ts,
        value: v,
        ttl_secs,
    }
}

fn text(s: &str) -> CellValue {
    CellValue::String(s.into())
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(c, v)| ((*c).to_string(), (*v).to_string()))
        .collect()
}

/// One behaviour, whatever the store.
fn conforms(store: &mut dyn ShortTermStore, users: &mut Users) {
    let (a, b, nobody) = (users.user(1), users.user(2), users.user(3));
    let t = now();
    let written = store
        .write_batch(
            &[
                value(&a, "rt_last_cat", t - 100, text("beauty"), 3600),
                value(
                    &a,
                    "rt_cart_items",
                    t,
                    CellValue::MultiValue(r#"["sku-1","sku-2"]"#.into()),
                    86_400,
                ),
                value(&a, "rt_clicks_1h", t, CellValue::Int(7), 3600),
                // Expired at its event time plus TTL: not written.
                value(&a, "rt_old", t - 7200, text("gone"), 3600),
                value(&b, "rt_last_cat", t, text("food"), 60),
            ],
            t,
        )
        .expect("write a batch");
    assert_eq!(
        written,
        Written {
            written: 4,
            expired: 1
        }
    );

    let read = store
        .read_users(&[&a, &b, &nobody], &CODES, t)
        .expect("read users");
    assert_eq!(
        read,
        vec![
            pairs(&[
                ("rt_cart_items", r#"["sku-1","sku-2"]"#),
                ("rt_clicks_1h", "7"),
                ("rt_last_cat", "\"beauty\""),
            ]),
            pairs(&[("rt_last_cat", "\"food\"")]),
            vec![],
        ]
    );
    assert_eq!(
        store
            .read_user(&a, &["rt_last_cat", "rt_clicks_1h"], t)
            .unwrap(),
        pairs(&[("rt_last_cat", "\"beauty\""), ("rt_clicks_1h", "7")]),
        "in the order of the codes asked"
    );

    // Re-writing a key keeps the newest event: a newer one replaces, a late one in a later
    // batch does not, one of the same event time does (the later write).
    let last_cat =
        |store: &mut dyn ShortTermStore| store.read_user(&a, &["rt_last_cat"], now()).unwrap();
    store
        .write_batch(&[value(&a, "rt_last_cat", t, text("apparel"), 3600)], t)
        .unwrap();
    assert_eq!(last_cat(store), pairs(&[("rt_last_cat", "\"apparel\"")]));
    store
        .write_batch(&[value(&a, "rt_last_cat", t - 50, text("late"), 3600)], t)
        .unwrap();
    assert_eq!(last_cat(store), pairs(&[("rt_last_cat", "\"apparel\"")]));
    store
        .write_batch(&[value(&a, "rt_last_cat", t, text("again"), 3600)], t)
        .unwrap();
    assert_eq!(last_cat(store), pairs(&[("rt_last_cat", "\"again\"")]));

    // Newest wins whatever the order, within one batch too: the later of two values of one
    // (user, tag) in a batch is not the newer one.
    store
        .write_batch(
            &[
                value(&b, "rt_clicks_1h", t - 10, CellValue::Int(2), 3600),
                value(&b, "rt_clicks_1h", t - 20, CellValue::Int(1), 3600),
            ],
            t,
        )
        .unwrap();
    assert_eq!(
        store.read_user(&b, &["rt_clicks_1h"], t).unwrap(),
        pairs(&[("rt_clicks_1h", "2")])
    );

    // One value expires while the others of its user live on: b's rt_last_cat (60 s) is gone
    // a minute later, its rt_clicks_1h is not.
    assert_eq!(
        store.read_user(&b, &CODES, t + 60).unwrap(),
        pairs(&[("rt_clicks_1h", "2")])
    );
    assert_eq!(
        store.read_user(&a, &CODES, t + 3600).unwrap(),
        pairs(&[("rt_cart_items", r#"["sku-1","sku-2"]"#)]),
        "a day's TTL outlives an hour's"
    );
    // Once the stored value has expired, an older event's value with a longer TTL takes its
    // place (the tag's TTL was raised).
    store
        .write_batch(
            &[value(&b, "rt_last_cat", t - 30, text("raised"), 3600)],
            t + 60,
        )
        .unwrap();
    assert_eq!(
        store.read_user(&b, &["rt_last_cat"], t + 60).unwrap(),
        pairs(&[("rt_last_cat", "\"raised\"")])
    );
}

/// The codes `rt_many_0000` … of a user with thousands of short-term tags.
fn many_codes(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("rt_many_{i:04}")).collect()
}

/// A user with thousands of tags: all of them read back in one call, half expiring a minute
/// in, each value still the newest of its tag.
fn conforms_with_thousands_of_tags(store: &mut dyn ShortTermStore, user: &str, t: i64) {
    let codes = many_codes(3000);
    let refs: Vec<&str> = codes.iter().map(String::as_str).collect();
    let batch: Vec<ShortTermValue> = codes
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let ttl = if i % 2 == 0 { 60 } else { 3600 };
            value(user, c, t, CellValue::Int(i as i64), ttl)
        })
        .collect();
    let written = store.write_batch(&batch, t).expect("write 3,000 tags");
    assert_eq!(written.written, 3000);
    let read = store.read_user(user, &refs, t).unwrap();
    assert_eq!(read.len(), 3000);
    assert!(read
        .iter()
        .enumerate()
        .all(|(i, (c, v))| *c == codes[i] && *v == i.to_string()));
    let later = store.read_user(user, &refs, t + 60).unwrap();
    assert_eq!(later.len(), 1500, "the 60 s half has expired");
    assert!(later
        .iter()
        .all(|(c, _)| c.ends_with(['1', '3', '5', '7', '9'])));
    // A late event of one of them, a minute later, changes nothing.
    store
        .write_batch(&[value(user, &codes[1], t - 1, text("late"), 3600)], t + 60)
        .unwrap();
    assert_eq!(
        store.read_user(user, &[refs[1]], t + 60).unwrap(),
        pairs(&[(refs[1], "1")])
    );
}

#[test]
fn the_embedded_store_conforms() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("data/short_term.sqlite");
    let mut store = short_term::open(None, &path).expect("open the SQLite store");
    assert_eq!(store.location(), path.display().to_string());
    let mut users = Users::new("sqlite");
    conforms(store.as_mut(), &mut users);
    let many = users.user(4);
    conforms_with_thousands_of_tags(store.as_mut(), &many, now());
    drop(store);
    let mut again = SqliteStore::open(&path).expect("reopen");
    assert_eq!(
        again
            .read_user(&format!("{}-2", users.prefix), &CODES, now())
            .unwrap(),
        pairs(&[("rt_clicks_1h", "2"), ("rt_last_cat", "\"raised\"")]),
        "the values outlive the process"
    );
}

#[test]
fn redis_conforms_and_keys_expire_at_event_time_plus_ttl() {
    if !redis_up() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut users = Users::new("redis");
    let mut store = short_term::open(Some(REDIS_URL), "unused".as_ref()).expect("connect");
    assert_eq!(store.location(), REDIS_URL);
    conforms(store.as_mut(), &mut users);

    let mut conn = redis::Client::open(REDIS_URL)
        .unwrap()
        .get_connection()
        .unwrap();
    let ttl = |conn: &mut redis::Connection, key: &str| -> i64 {
        redis::cmd("TTL").arg(key).query(conn).unwrap()
    };
    let user = users.user(10);
    let t = now();
    store
        .write_batch(
            &[
                value(&user, "rt_last_cat", t - 600, text("beauty"), 3600),
                value(&user, "rt_clicks_1h", t, CellValue::Int(3), 60),
                value(&user, "rt_old", t - 3600, text("gone"), 3600),
            ],
            t,
        )
        .unwrap();
    let key = short_term::key(&user);
    let kind: String = redis::cmd("TYPE").arg(&key).query(&mut conn).unwrap();
    assert_eq!(kind, "hash", "one hash a user: short-tags:{{user}}");
    let fields: Vec<(String, String)> = redis::cmd("HGETALL").arg(&key).query(&mut conn).unwrap();
    let fields: std::collections::BTreeMap<String, String> = fields.into_iter().collect();
    assert_eq!(
        fields,
        [
            ("rt_clicks_1h", format!("{} {t} 3", t + 60)),
            (
                "rt_last_cat",
                format!("{} {} \"beauty\"", t + 3000, t - 600)
            ),
        ]
        .into_iter()
        .map(|(c, v)| (c.to_string(), v))
        .collect(),
        "each field its expiry, event time and JSON; a value expired at its event time is \
         not written"
    );
    // The key lives as long as its latest field: 3600 - 600 left, less the seconds this took.
    let left = ttl(&mut conn, &key);
    assert!((2990..=3000).contains(&left), "TTL {left}");

    // A write after rt_clicks_1h expired drops its field, and the key keeps its TTL.
    store
        .write_batch(&[value(&user, "rt_cart_items", t, text("x"), 120)], t + 60)
        .unwrap();
    let codes: Vec<String> = redis::cmd("HKEYS").arg(&key).query(&mut conn).unwrap();
    let codes: std::collections::BTreeSet<String> = codes.into_iter().collect();
    assert_eq!(
        codes,
        ["rt_cart_items", "rt_last_cat"]
            .map(String::from)
            .into_iter()
            .collect(),
        "the expired field dropped"
    );
    let left = ttl(&mut conn, &key);
    assert!((2990..=3000).contains(&left), "TTL {left}");
    // A field not written by us is shown as it is, not dropped; it counts as older than ours.
    let () = redis::cmd("HSET")
        .arg(&key)
        .arg("rt_old")
        .arg("\"foreign\"")
        .query(&mut conn)
        .unwrap();
    assert_eq!(
        store.read_user(&user, &["rt_old"], t).unwrap(),
        pairs(&[("rt_old", "\"foreign\"")])
    );
    store
        .write_batch(&[value(&user, "rt_old", t - 10, text("ours"), 3600)], t)
        .unwrap();
    assert_eq!(
        store.read_user(&user, &["rt_old"], t).unwrap(),
        pairs(&[("rt_old", "\"ours\"")])
    );

    // Thousands of tags are one key, which drops what expired at its next write.
    let many = users.user(11);
    conforms_with_thousands_of_tags(store.as_mut(), &many, t);
    let many_key = short_term::key(&many);
    let len: i64 = redis::cmd("HLEN").arg(&many_key).query(&mut conn).unwrap();
    assert_eq!(len, 1500, "the write at t + 60 dropped the expired half");
    let old_keys: i64 = redis::cmd("EXISTS")
        .arg(format!("short:{many}:rt_many_0001"))
        .query(&mut conn)
        .unwrap();
    assert_eq!(old_keys, 0, "no key a tag");
}

/// The Redis database of the migration test: a migration moves every old key of its database,
/// and the other tests' (and other checkouts') keys are in database 0.
const MIGRATE_URL: &str = "redis://127.0.0.1:6379/8";

#[test]
fn the_layout_before_the_hashes_migrates_into_them() {
    if !redis_up() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut users = Users::new("migrate");
    users.url = MIGRATE_URL;
    let (a, b) = (users.user(1), users.user(2));
    let not_ours = format!("short:{}-plain", users.prefix);
    users.keys.push(not_ours.clone());
    let mut conn = redis::Client::open(MIGRATE_URL)
        .unwrap()
        .get_connection()
        .unwrap();
    let t = now();
    let set = |conn: &mut redis::Connection, key: &str, json: &str, at: Option<i64>| {
        let mut cmd = redis::cmd("SET");
        cmd.arg(key).arg(json);
        if let Some(at) = at {
            cmd.arg("EXAT").arg(at);
        }
        let () = cmd.query(conn).unwrap();
    };
    // As the job before the hashes wrote them: the JSON, expiring at event time + TTL.
    set(
        &mut conn,
        &format!("short:{a}:rt_last_cat"),
        "\"beauty\"",
        Some(t + 3000),
    );
    set(
        &mut conn,
        &format!("short:{a}:rt_clicks_1h"),
        "7",
        Some(t + 60),
    );
    // b's rt_last_cat is older than the one the new job wrote meanwhile.
    set(
        &mut conn,
        &format!("short:{b}:rt_last_cat"),
        "\"old\"",
        Some(t + 3000),
    );
    // A tag the registry does not know (its TTL, hence its event time, unknown): left.
    set(&mut conn, &format!("short:{b}:rt_old"), "1", Some(t + 60));
    // Not ours: no expiry; a hash.
    set(&mut conn, &format!("short:{b}:rt_cart_items"), "2", None);
    let () = redis::cmd("HSET")
        .arg(&not_ours)
        .arg("f")
        .arg("v")
        .query(&mut conn)
        .unwrap();
    let mut store = RedisStore::connect(MIGRATE_URL).expect("connect");
    store
        .write_batch(&[value(&b, "rt_last_cat", t, text("new"), 3600)], t)
        .unwrap();

    let ttl_of = |code: &str| match code {
        "rt_last_cat" => Some(3600),
        "rt_clicks_1h" | "rt_cart_items" => Some(86_400),
        _ => None,
    };
    let migrated = store.migrate(&ttl_of, t).expect("migrate");
    assert_eq!(
        migrated,
        Migrated {
            found: 6,
            moved: 3,
            expired: 0,
            unknown_tag: 1,
            not_ours: 2,
        }
    );
    assert_eq!(
        store.read_users(&[&a, &b], &CODES, t).unwrap(),
        vec![
            pairs(&[("rt_clicks_1h", "7"), ("rt_last_cat", "\"beauty\"")]),
            pairs(&[("rt_last_cat", "\"new\"")]),
        ],
        "the old values read from the hashes, the newer event kept"
    );
    assert_eq!(
        store.read_user(&a, &CODES, t + 60).unwrap(),
        pairs(&[("rt_last_cat", "\"beauty\"")]),
        "each keeps its expiry"
    );
    let left: Vec<String> = redis::cmd("KEYS")
        .arg(format!("short:{}*", users.prefix))
        .query(&mut conn)
        .unwrap();
    let left: std::collections::BTreeSet<String> = left.into_iter().collect();
    assert_eq!(
        left,
        [
            format!("short:{b}:rt_old"),
            format!("short:{b}:rt_cart_items"),
            not_ours.clone()
        ]
        .into_iter()
        .collect(),
        "the moved keys deleted, the others left"
    );
    let again = store.migrate(&ttl_of, t).expect("migrate again");
    assert_eq!(again.moved, 0);
    assert_eq!(again.found, 3);
}

#[test]
fn a_flushed_script_cache_and_a_lost_server_are_retriable() {
    if !redis_up() {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mut users = Users::new("retry");
    let user = users.user(1);
    let mut store = RedisStore::connect(REDIS_URL).expect("connect");
    let mut conn = redis::Client::open(REDIS_URL)
        .unwrap()
        .get_connection()
        .unwrap();
    let () = redis::cmd("SCRIPT").arg("FLUSH").query(&mut conn).unwrap();
    let batch = [value(&user, "rt_last_cat", now(), text("home"), 60)];
    let e = store
        .write_batch(&batch, now())
        .expect_err("the script is gone");
    assert!(is_retriable(&e), "{e:?}");
    // The retry connects again, which loads the script again.
    store
        .write_batch(&batch, now())
        .expect("the retry succeeds");
    assert_eq!(
        store.read_user(&user, &["rt_last_cat"], now()).unwrap(),
        pairs(&[("rt_last_cat", "\"home\"")])
    );

    let e = RedisStore::connect("redis://127.0.0.1:1/0").expect_err("nothing listens on port 1");
    assert!(is_retriable(&e), "{e:?}");
    assert!(e.to_string().contains("127.0.0.1:1"), "{e}");
    let e = RedisStore::connect("http://127.0.0.1:6379").expect_err("not a Redis URL");
    assert!(!is_retriable(&e), "{e:?}");
}
