//! The read path on the embedded store without Redis: every read is a store read, the
//! short-term tags come from their SQLite file.

use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;
use sinks::config::StoreConfig;
use sinks::table::{Row, ScanSpec, TimeRange};
use sinks::OpenOptions;
use tempfile::TempDir;

use super::*;
use crate::cache::CacheStats;
use crate::merge::{MergeConfig, TagUpdate, UserMerge};
use crate::short_term::SqliteStore;
use crate::tag::{DataType, TagStatus, ValueType};

/// Event time of the first write, epoch seconds.
const TS: i64 = 1_724_200_000;

fn def(code: &str, data_type: DataType, value_type: ValueType) -> TagDef {
    TagDef {
        tag_code: code.into(),
        name: code.into(),
        data_type,
        value_type,
        status: TagStatus::Online,
        ttl_secs: (value_type == ValueType::ShortTerm).then_some(3600),
        category: String::new(),
        owner: String::new(),
        update_frequency: String::new(),
    }
}

fn defs() -> Vec<TagDef> {
    vec![
        def("dim_city", DataType::String, ValueType::Dimension),
        def("beh_buy", DataType::Int, ValueType::Statistic),
        def("rt_cat", DataType::String, ValueType::ShortTerm),
    ]
}

/// A store where `u1` has `dim_city` and four values of `beh_buy` (one a second from `TS`),
/// `u2` only `dim_city`; `u1`'s short-term `rt_cat` in the SQLite file.
fn setup(dir: &TempDir) -> (sinks::Store, ProfileReader) {
    let cfg = StoreConfig {
        dir: dir.path().join("store"),
        ..StoreConfig::default()
    };
    let options = OpenOptions {
        clock: std::sync::Arc::new(|| (TS + 10) * 1000),
        ..OpenOptions::default()
    };
    let store = sinks::open(&cfg, &crate::tables::tables(), &options).unwrap();
    let defs = defs();
    let mut w = store.writer();
    for (i, n) in [1, 2, 3, 4].into_iter().enumerate() {
        let mut merge = UserMerge::new(MergeConfig::default());
        let ts = TS + i64::try_from(i).unwrap();
        merge.push(TagUpdate::new(&defs[1], "u1", ts, CellValue::Int(n)));
        if i == 0 {
            for user in ["u1", "u2"] {
                let city = CellValue::String(format!("hz-{user}"));
                merge.push(TagUpdate::new(&defs[0], user, ts, city));
            }
            merge.push(TagUpdate::new(
                &defs[2],
                "u1",
                ts,
                CellValue::String("shoes".into()),
            ));
        }
        let flushed = merge.flush();
        w.write(flushed.mutations).unwrap();
        w.flush().unwrap();
        if !flushed.short_term.is_empty() {
            let mut st = SqliteStore::open(&dir.path().join("st.sqlite")).unwrap();
            st.write_batch(&flushed.short_term, TS + 10).unwrap();
        }
    }
    let st = SqliteStore::open(&dir.path().join("st.sqlite")).unwrap();
    (store, ProfileReader::new(defs, None, Some(Box::new(st))))
}

fn now_ms() -> i64 {
    (TS + 10) * 1000
}

#[test]
fn a_profile_is_read_from_the_store_with_its_short_term_tags() {
    let dir = TempDir::new().unwrap();
    let (store, reader) = setup(&dir);
    let all = Selection::all();
    let p = reader.get(&store.reader(), "u1", &all, now_ms()).unwrap();
    assert_eq!(
        p,
        Some(json!({"user_id": "u1", "source": "store",
            "tags": {"dim_city": "hz-u1", "beh_buy": 4, "rt_cat": "shoes"}}))
    );
    assert_eq!(
        reader
            .get(&store.reader(), "nobody", &all, now_ms())
            .unwrap(),
        None
    );
    let e = reader
        .get(&store.reader(), "a_b", &all, now_ms())
        .unwrap_err();
    assert!(matches!(e, Error::Invalid(_)), "{e}");
}

#[test]
fn a_selection_keeps_the_named_tags_and_families() {
    let dir = TempDir::new().unwrap();
    let (store, reader) = setup(&dir);
    let sel = |tags: &[&str], fams: &[&str]| {
        let own = |v: &[&str]| v.iter().map(|s| (*s).to_string()).collect::<Vec<_>>();
        Selection::new(&defs(), &own(tags), &own(fams))
    };
    let read = |s: &Selection| {
        reader
            .get(&store.reader(), "u1", s, now_ms())
            .unwrap()
            .unwrap()
    };
    assert_eq!(
        read(&sel(&["beh_buy"], &[]).unwrap())["tags"],
        json!({"beh_buy": 4})
    );
    assert_eq!(
        read(&sel(&[], &["dimension", "short_term"]).unwrap())["tags"],
        json!({"dim_city": "hz-u1", "rt_cat": "shoes"})
    );
    assert!(matches!(sel(&["nope"], &[]), Err(Error::UnknownTag(_))));
    assert!(matches!(sel(&[], &["other"]), Err(Error::Invalid(_))));
    // u2 has no behaviour tag: nothing selected is nothing found.
    let only_buy = sel(&["beh_buy"], &[]).unwrap();
    assert_eq!(
        reader
            .get(&store.reader(), "u2", &only_buy, now_ms())
            .unwrap(),
        None
    );
}

#[test]
fn versions_give_the_last_behaviour_values_with_their_times() {
    let dir = TempDir::new().unwrap();
    let (store, reader) = setup(&dir);
    let p = reader
        .versions(&store.reader(), "u1", 2, now_ms())
        .unwrap()
        .unwrap();
    assert_eq!(
        p["versions"],
        json!({"beh_buy": [
            {"value": 4, "ts_ms": (TS + 3) * 1000},
            {"value": 3, "ts_ms": (TS + 2) * 1000},
        ]})
    );
    assert_eq!(p["tags"]["beh_buy"], 4);
    let three = reader
        .versions(&store.reader(), "u1", 10, now_ms())
        .unwrap()
        .unwrap();
    assert_eq!(
        three["versions"]["beh_buy"].as_array().unwrap().len(),
        3,
        "the table keeps 3"
    );
}

#[test]
fn at_answers_from_the_history() {
    let dir = TempDir::new().unwrap();
    let (store, reader) = setup(&dir);
    let p = reader
        .at(&store.reader(), "u1", (TS + 1) * 1000)
        .unwrap()
        .unwrap();
    assert_eq!(p["tags"], json!({"dim_city": "hz-u1", "beh_buy": 2}));
    assert_eq!(p["source"], "history");
    let later = reader
        .at(&store.reader(), "u1", (TS + 1) * 1000 + 999)
        .unwrap()
        .unwrap();
    assert_eq!(later["tags"]["beh_buy"], 2);
    assert_eq!(
        reader.at(&store.reader(), "u1", TS * 1000 - 1).unwrap(),
        None
    );
}

/// A reader that counts the calls a read makes.
struct Counting<'a> {
    inner: &'a dyn TableReader,
    gets: AtomicUsize,
    multi_gets: AtomicUsize,
}

impl TableReader for Counting<'_> {
    fn get(&self, table: &str, row: &[u8], time: Option<TimeRange>) -> sinks::Result<Option<Row>> {
        self.gets.fetch_add(1, Ordering::Relaxed);
        self.inner.get(table, row, time)
    }

    fn get_many(
        &self,
        table: &str,
        rows: &[Vec<u8>],
        time: Option<TimeRange>,
    ) -> sinks::Result<Vec<Option<Row>>> {
        self.multi_gets.fetch_add(1, Ordering::Relaxed);
        self.inner.get_many(table, rows, time)
    }

    fn scan(&self, table: &str, spec: &ScanSpec) -> sinks::Result<Vec<Row>> {
        self.inner.scan(table, spec)
    }
}

#[test]
fn a_batch_is_one_multi_get_in_the_order_asked() {
    let dir = TempDir::new().unwrap();
    let (store, reader) = setup(&dir);
    let inner = store.reader();
    let counting = Counting {
        inner: &inner,
        gets: AtomicUsize::new(0),
        multi_gets: AtomicUsize::new(0),
    };
    let users: Vec<String> = ["u2", "nobody", "u1"]
        .iter()
        .map(|s| (*s).to_string())
        .collect();
    let answers = reader
        .get_many(&counting, &users, &Selection::all(), now_ms())
        .unwrap();
    assert_eq!(
        answers,
        vec![
            json!({"user_id": "u2", "source": "store", "tags": {"dim_city": "hz-u2"}}),
            json!({"user_id": "nobody", "source": "store", "tags": {}}),
            json!({"user_id": "u1", "source": "store",
                "tags": {"dim_city": "hz-u1", "beh_buy": 4, "rt_cat": "shoes"}}),
        ]
    );
    assert_eq!(
        (
            counting.gets.load(Ordering::Relaxed),
            counting.multi_gets.load(Ordering::Relaxed)
        ),
        (0, 1)
    );
    let too_many: Vec<String> = (0..=MAX_BATCH_USERS).map(|i| format!("u{i}")).collect();
    let e = reader
        .get_many(&inner, &too_many, &Selection::all(), now_ms())
        .unwrap_err();
    assert!(e.to_string().contains("at most 1000"), "{e}");
    let bad = vec!["u1".to_string(), String::new()];
    let e = reader
        .get_many(&inner, &bad, &Selection::all(), now_ms())
        .unwrap_err();
    assert!(matches!(e, Error::Invalid(_)), "{e}");
}

/// A cache at an address where nothing listens: Redis is down.
fn unreachable_cache(cfg: crate::cache::CacheConfig) -> (RedisCache, std::sync::Arc<CacheStats>) {
    let stats = std::sync::Arc::new(CacheStats::default());
    let cache = RedisCache::new("redis://127.0.0.1:1/0", &cfg, stats.clone()).unwrap();
    (cache, stats)
}

#[test]
fn redis_down_is_a_store_read_counted_once_per_rest() {
    let dir = TempDir::new().unwrap();
    let (store, _) = setup(&dir);
    let (cache, stats) = unreachable_cache(crate::cache::CacheConfig {
        retry_after_ms: 60_000,
        ..Default::default()
    });
    let reader = ProfileReader::new(defs(), Some(cache), None);
    for _ in 0..2 {
        let p = reader
            .get(&store.reader(), "u1", &Selection::all(), now_ms())
            .unwrap()
            .unwrap();
        assert_eq!(p["source"], "store");
        assert_eq!(p["tags"], json!({"dim_city": "hz-u1", "beh_buy": 4}));
        assert_eq!(p["short_term_unavailable"], true);
    }
    assert_eq!(
        stats.redis_errors.load(Ordering::Relaxed),
        1,
        "resting after the error"
    );
    assert_eq!(stats.misses.load(Ordering::Relaxed), 2);
}

#[test]
fn a_disabled_cache_without_short_term_codes_asks_redis_nothing() {
    let dir = TempDir::new().unwrap();
    let (store, _) = setup(&dir);
    let (cache, stats) = unreachable_cache(crate::cache::CacheConfig {
        enabled: false,
        ..Default::default()
    });
    let reader = ProfileReader::new(defs(), Some(cache), None);
    let users = vec!["u1".to_string(), "u2".to_string()];
    let only = Selection::new(&defs(), &[], &["dimension".to_string()]).unwrap();
    let answers = reader
        .get_many(&store.reader(), &users, &only, now_ms())
        .unwrap();
    assert_eq!(answers.len(), 2);
    assert_eq!(answers[1]["tags"], json!({"dim_city": "hz-u2"}));
    assert_eq!(stats.redis_errors.load(Ordering::Relaxed), 0);
}

/// A reader opened before a tag is defined types its values once the registry has it: it asks
/// the registry whether it changed (at most once a second), not only at start.
#[test]
fn a_tag_defined_after_the_reader_opened_is_typed() {
    let dir = TempDir::new().unwrap();
    let (store, _) = setup(&dir);
    let registry_path = dir.path().join("tags.sqlite");
    let mut registry = crate::registry::SqliteRegistry::open(&registry_path).unwrap();
    registry.upsert(&defs()[..1]).unwrap();
    let toml = format!(
        "[registry]\nurl = \"sqlite://{}\"\n[short_term]\npath = \"{}\"\n",
        registry_path.display(),
        dir.path().join("st.sqlite").display()
    );
    let cfg = crate::ProfileConfig::parse("p.toml", &toml).unwrap();
    let reader = ProfileReader::open(&cfg, Arc::default()).unwrap();
    let all = Selection::all();
    let tags = |reader: &ProfileReader| {
        reader
            .get(&store.reader(), "u1", &all, now_ms())
            .unwrap()
            .unwrap()["tags"]
            .clone()
    };
    assert_eq!(
        tags(&reader)["beh_buy"],
        json!("4"),
        "not defined: its text"
    );
    registry.upsert(&defs()[1..]).unwrap();
    std::thread::sleep(REGISTRY_CHECK_EVERY + Duration::from_millis(100));
    assert_eq!(tags(&reader)["beh_buy"], json!(4), "defined since: an INT");
    assert_eq!(tags(&reader)["rt_cat"], json!("shoes"));
}
