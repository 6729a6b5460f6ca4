//! Purges of a store and a registry of their own: refusals, resuming, and the checkpoint's
//! checks.

use super::*;
use crate::event::CellValue;
use crate::merge::{MergeConfig, TagUpdate, UserMerge};
use crate::registry::SqliteRegistry;
use crate::tag::{DataType, TagDef, ValueType};
use sinks::config::StoreConfig;
use sinks::OpenOptions;
use tempfile::TempDir;

/// Event time of the writes, epoch seconds; the store's clock is two seconds later.
const TS: i64 = 1_724_200_000;

fn def(code: &str, value_type: ValueType, status: TagStatus) -> TagDef {
    TagDef {
        tag_code: code.into(),
        name: code.into(),
        data_type: DataType::Int,
        value_type,
        status,
        ttl_secs: None,
        category: String::new(),
        owner: String::new(),
        update_frequency: String::new(),
    }
}

/// A store holding `users` users with `dim_a` and `beh_b` (two changes each), a registry
/// with both tags, `beh_b` offline.
fn setup(dir: &TempDir, users: usize) -> (Store, SqliteRegistry) {
    let cfg = StoreConfig {
        dir: dir.path().join("store"),
        ..StoreConfig::default()
    };
    let options = OpenOptions {
        clock: std::sync::Arc::new(|| (TS + 2) * 1000),
        ..OpenOptions::default()
    };
    let store = sinks::open(&cfg, &crate::tables::tables(), &options).unwrap();
    let mut registry = SqliteRegistry::open(&dir.path().join("tags.sqlite")).unwrap();
    let defs = [
        def("dim_a", ValueType::Dimension, TagStatus::Online),
        def("beh_b", ValueType::Statistic, TagStatus::Offline),
    ];
    for outcome in registry.upsert(&defs).unwrap() {
        outcome.unwrap();
    }
    let mut merge = UserMerge::new(MergeConfig::default());
    for u in 0..users {
        for (i, d) in defs.iter().enumerate() {
            for ts in [TS, TS + 1] {
                let value = CellValue::Int(i64::try_from(u + i).unwrap());
                merge.push(TagUpdate::new(d, &format!("u{u}"), ts, value));
            }
        }
    }
    let mut w = store.writer();
    w.write(merge.flush().mutations).unwrap();
    w.flush().unwrap();
    (store, registry)
}

fn codes_left(store: &Store) -> (Vec<String>, Vec<String>) {
    let reader = store.reader();
    let profile = reader.scan(PROFILE_TABLE, &ScanSpec::default()).unwrap();
    let columns = profile
        .iter()
        .flat_map(|r| &r.cells)
        .map(|c| String::from_utf8(c.qualifier.clone()).unwrap())
        .collect();
    let history = reader.scan(HISTORY_TABLE, &ScanSpec::default()).unwrap();
    let codes = history
        .iter()
        .map(|r| parse_history_row(&r.key).unwrap().1.to_string())
        .collect();
    (columns, codes)
}

#[test]
fn refuses_unknown_and_online_tags() {
    let dir = TempDir::new().unwrap();
    let (store, mut registry) = setup(&dir, 1);
    let checkpoint = dir.path().join("purge.json");
    let mut run = |code| {
        purge(
            &store,
            &mut registry,
            &PurgeOptions::new(code, &checkpoint),
            &mut |_| {},
        )
    };
    assert!(matches!(run("nope"), Err(Error::UnknownTag(_))));
    let refused = run("dim_a").unwrap_err().to_string();
    assert!(
        refused.contains("hourglass tags set-status dim_a offline"),
        "{refused}"
    );
    assert!(!checkpoint.exists(), "a refusal writes no checkpoint");
}

#[test]
fn a_stopped_purge_resumes_and_a_finished_one_is_not_run_again() {
    let dir = TempDir::new().unwrap();
    let (store, mut registry) = setup(&dir, 5);
    let checkpoint = dir.path().join("purge.json");
    let options = PurgeOptions {
        page_rows: 2,
        max_pages: Some(2),
        ..PurgeOptions::new("beh_b", &checkpoint)
    };
    let mut pages = 0;
    let outcome = purge(&store, &mut registry, &options, &mut |p| {
        pages += u32::from(matches!(p, Progress::Page { .. }));
    })
    .unwrap();
    assert!(
        matches!(outcome, Outcome::Stopped(c) if c.profile_rows == 4),
        "{outcome:?}"
    );
    assert_eq!(pages, 2);
    let saved = Checkpoint::load(&checkpoint).unwrap().unwrap();
    assert!(saved.profile.after.is_some() && !saved.profile.done);
    // The rest, two pages a run.
    let outcome = loop {
        match purge(&store, &mut registry, &options, &mut |_| {}).unwrap() {
            Outcome::Stopped(_) => continue,
            done => break done,
        }
    };
    let want = PurgeCounts {
        profile_rows: 5,
        columns_deleted: 5,
        history_rows: 20,
        history_deleted: 10,
        ..PurgeCounts::default()
    };
    assert_eq!(outcome, Outcome::Purged(want));
    let (columns, codes) = codes_left(&store);
    assert_eq!(columns, ["dim_a"; 5]);
    assert_eq!(codes, ["dim_a"; 10]);
    let again = purge(&store, &mut registry, &options, &mut |_| {}).unwrap();
    assert_eq!(again, Outcome::AlreadyPurged(want));
    // Another store: the checkpoint is not its purge's.
    let other_dir = TempDir::new().unwrap();
    let (other, _) = setup(&other_dir, 1);
    let refused = purge(&other, &mut registry, &options, &mut |_| {}).unwrap_err();
    assert!(refused.to_string().contains("not "), "{refused}");
    // Set online again: refused, saying it was purged.
    registry.set_status("beh_b", TagStatus::Online).unwrap();
    let refused = purge(&store, &mut registry, &options, &mut |_| {}).unwrap_err();
    assert!(refused.to_string().contains("it was purged"), "{refused}");
    // Another tag's purge refuses this one's checkpoint.
    registry.set_status("dim_a", TagStatus::Offline).unwrap();
    let other = PurgeOptions::new("dim_a", &checkpoint);
    let refused = purge(&store, &mut registry, &other, &mut |_| {}).unwrap_err();
    assert!(matches!(refused, Error::Invalid(_)), "{refused}");
}
