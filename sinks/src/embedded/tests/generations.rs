//! A table split over generations reads as one table.

use super::*;
use crate::table::TableReader;

/// Writes `mutations` as ingested tables, each of which closes a generation (the store's
/// generation size is 0 in these tests, so any table on disk fills one).
fn write_generation(store: &EmbeddedStore, mutations: Vec<Mutation>) {
    let mut w = store.writer().ingest_thresholds(1, 1);
    w.write(mutations).unwrap();
    w.flush().unwrap();
}

fn open_split(dir: &TempDir) -> (EmbeddedStore, Arc<AtomicI64>) {
    let (store, now) = open(dir);
    store.set_generation_bytes(0);
    (store, now)
}

fn value_of(store: &EmbeddedStore, row: &[u8]) -> Option<Vec<u8>> {
    let row = store.get(T, row).unwrap()?;
    Some(row.cell("t", b"v")?.value.clone())
}

#[test]
fn the_last_write_of_a_cell_wins_across_generations_and_a_delete_reaches_all_of_them() {
    let dir = TempDir::new().unwrap();
    let (store, _) = open_split(&dir);
    write_generation(&store, vec![put(b"r1", vec![cell("t", b"v", NOW, b"a")])]);
    assert_eq!(store.generation_count(T).unwrap(), 2);
    // A later write with an older timestamp: the default writer's last write wins.
    write_generation(
        &store,
        vec![
            put(b"r1", vec![cell("t", b"v", NOW - 1000, b"b")]),
            put_v(b"r2", b"c"),
        ],
    );
    assert!(store.generation_count(T).unwrap() >= 3);

    assert_eq!(value_of(&store, b"r1"), Some(b"b".to_vec()));
    let rows = scan(&store, b"", b"", None);
    assert_eq!(keys(&rows), vec![&b"r1"[..], b"r2"]);
    assert_eq!(rows[0].cells.len(), 1, "one version per cell: {rows:?}");

    // The visible cell is stamped NOW - 1000, so it goes, and the older write stamped NOW must
    // not show in its place.
    write(
        &store,
        vec![Mutation::DeleteRow {
            table: T,
            row: b"r1".to_vec(),
            ts_ms: NOW - 1000,
        }],
    );
    assert_eq!(value_of(&store, b"r1"), None);
    assert_eq!(keys(&scan(&store, b"", b"", None)), vec![&b"r2"[..]]);
}

#[test]
fn a_reopened_store_finds_its_generations_in_order() {
    let dir = TempDir::new().unwrap();
    let count;
    {
        let (store, _) = open_split(&dir);
        for value in [&b"1"[..], b"2", b"3"] {
            write_generation(&store, vec![put_v(b"r", value), put_v(value, value)]);
        }
        count = store.generation_count(T).unwrap();
    }
    assert!(count >= 4, "{count} generations");
    let (store, _) = open(&dir);
    assert_eq!(store.generation_count(T).unwrap(), count);
    assert_eq!(value_of(&store, b"r"), Some(b"3".to_vec()));
    let rows = scan(&store, b"", b"", None);
    assert_eq!(keys(&rows), vec![&b"1"[..], b"2", b"3", b"r"]);
    // A limited scan and a scan from the middle merge the generations too.
    assert_eq!(
        keys(&scan(&store, b"2", b"", Some(2))),
        vec![&b"2"[..], b"3"]
    );
}

#[test]
fn a_compacted_expired_cell_still_hides_an_older_write_until_a_purge_removes_both() {
    let dir = TempDir::new().unwrap();
    let (store, _) = open_split(&dir);
    // Generation 0: a live cell. Generation 1: a later write of it stamped past the TTL.
    write_generation(&store, vec![put_v(b"r", b"old")]);
    write_generation(
        &store,
        vec![put(b"r", vec![cell("t", b"v", NOW - 60_000, b"new")])],
    );
    assert_eq!(value_of(&store, b"r"), None);

    // Compacting generation 1 drops the expired value but keeps its key.
    let generations = store.inner.tables[0].generations();
    let newer = &generations[1];
    newer.major_compact().unwrap();
    assert_eq!(newer.len().unwrap(), 1);
    let stored = newer.get(b"r\0t\0v").unwrap().unwrap();
    assert_eq!(
        super::super::codec::decode_value(&stored),
        Some((i64::MIN, &b""[..]))
    );
    assert_eq!(value_of(&store, b"r"), None);
    assert!(scan(&store, b"", b"", None).is_empty());

    // The purge counts the visible cell once and removes its key from every generation.
    assert_eq!(store.purge_expired().unwrap(), 1);
    assert!(generations
        .iter()
        .all(|g| g.get(b"r\0t\0v").unwrap().is_none()));
    assert_eq!(value_of(&store, b"r"), None);
}

#[test]
fn newest_timestamp_wins_reads_the_cell_from_an_older_generation() {
    let dir = TempDir::new().unwrap();
    let (store, _) = open_split(&dir);
    write_generation(&store, vec![put_v(b"r", b"kept")]);
    assert_eq!(store.generation_count(T).unwrap(), 2);
    let mut w = store.writer().newest_timestamp_wins(true);
    w.write(vec![put(b"r", vec![cell("t", b"v", NOW - 1, b"older")])])
        .unwrap();
    w.flush().unwrap();
    assert_eq!(value_of(&store, b"r"), Some(b"kept".to_vec()));
    w.write(vec![put(b"r", vec![cell("t", b"v", NOW + 1, b"newer")])])
        .unwrap();
    w.flush().unwrap();
    assert_eq!(value_of(&store, b"r"), Some(b"newer".to_vec()));
}

#[test]
fn table_names_that_would_collide_with_generations_are_refused() {
    let dir = TempDir::new().unwrap();
    let mut spec = table();
    spec.name = "readings#1";
    let err = EmbeddedStore::open(dir.path(), &[spec]).unwrap_err();
    assert!(err.to_string().contains("generations"), "{err}");
}
