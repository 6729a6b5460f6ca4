//! The short-term tags' store against the real Redis of `scripts/services.sh` (`make test`
//! starts it) and against its embedded SQLite fallback: one `conforms()` run on both, then
//! what only Redis shows (each key's TTL, a flushed script cache, an unreachable server).
//!
//! Without Redis on 127.0.0.1:6379 the Redis runs skip, except in CI (`CI` set), where they
//! fail. Each run writes users of its own (`t<pid>-<nanos>-…`) and deletes their keys at the
//! end, so runs never see each other's values.

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use e2e::services::redis_up;
use profile::short_term::{self, is_retriable, RedisStore, SqliteStore};
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
        }
    }

    /// User `n` of this run; its keys of `CODES` are deleted at the end.
    fn user(&mut self, n: u32) -> String {
        let user = format!("{}-{n}", self.prefix);
        self.keys
            .extend(CODES.iter().map(|c| short_term::key(&user, c)));
        user
    }
}

impl Drop for Users {
    fn drop(&mut self) {
        if let Ok(mut conn) = redis::Client::open(REDIS_URL).and_then(|c| c.get_connection()) {
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
}

#[test]
fn the_embedded_store_conforms() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("data/short_term.sqlite");
    let mut store = short_term::open(None, &path).expect("open the SQLite store");
    assert_eq!(store.location(), path.display().to_string());
    let mut users = Users::new("sqlite");
    conforms(store.as_mut(), &mut users);
    drop(store);
    let mut again = SqliteStore::open(&path).expect("reopen");
    assert_eq!(
        again
            .read_user(&format!("{}-2", users.prefix), &CODES, now())
            .unwrap(),
        pairs(&[("rt_last_cat", "\"food\"")]),
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
    let key = short_term::key(&user, "rt_last_cat");
    let value: String = redis::cmd("GET").arg(&key).query(&mut conn).unwrap();
    assert_eq!(
        value, "\"beauty\"",
        "the value's JSON under short:{{user}}:{{code}}"
    );
    // Counted from the event time: 3600 - 600 left, less the seconds this test took.
    let left = ttl(&mut conn, &key);
    assert!((2990..=3000).contains(&left), "TTL {left}");
    let left = ttl(&mut conn, &short_term::key(&user, "rt_clicks_1h"));
    assert!((50..=60).contains(&left), "TTL {left}");
    let exists: i64 = redis::cmd("EXISTS")
        .arg(short_term::key(&user, "rt_old"))
        .query(&mut conn)
        .unwrap();
    assert_eq!(
        exists, 0,
        "a value expired at its event time is not written"
    );
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
