//! Families that keep several versions of a cell: the layout of their versions, how
//! compactions and purges drop the versions past the family's count, and that one-version
//! families keep theirs.

use super::*;
use crate::embedded::codec::{self, Column};

/// A table whose family `t` keeps `TTL_SECS` and three versions; `tt` keeps one, forever.
fn versioned_table() -> TableSpec {
    let mut spec = table();
    spec.families[0].max_versions = 3;
    spec
}

fn open_versioned(dir: &TempDir) -> (EmbeddedStore, Arc<AtomicI64>) {
    let (now, clock) = clock();
    let store = EmbeddedStore::open_with_clock(dir.path(), &[versioned_table()], clock).unwrap();
    (store, now)
}

/// `(qualifier, timestamp)` of every version of family `t` stored in `row`, in key order,
/// visible or not.
fn stored_versions(store: &EmbeddedStore, row: &[u8]) -> Vec<(Vec<u8>, i64)> {
    let (_, table) = store.inner.table(T).unwrap();
    let mut prefix = Vec::new();
    codec::encode_row_prefix(&mut prefix, row);
    table
        .prefix(&prefix, None)
        .filter_map(|item| {
            let (key, _) = item.unwrap();
            match codec::decode_key(&key).unwrap() {
                (_, b"t", Column::Version(q, ts)) => Some((q.to_vec(), ts)),
                _ => None,
            }
        })
        .collect()
}

fn read(store: &EmbeddedStore, row: &[u8], versions: u32) -> Vec<(Vec<u8>, i64, Vec<u8>)> {
    let row = store.get_versions(T, row, None, versions).unwrap();
    row.map(|r| {
        r.cells
            .into_iter()
            .map(|c| (c.qualifier, c.ts_ms, c.value))
            .collect()
    })
    .unwrap_or_default()
}

#[test]
fn versions_are_kept_newest_first_capped_by_reads_and_dropped_by_compactions() {
    let dir = TempDir::new().unwrap();
    let (store, _) = open_versioned(&dir);
    // Five versions in one flush, with a longer qualifier whose keys sort among `q`'s.
    let mut cells: Vec<Cell> = (0..5)
        .map(|i| cell("t", b"q", NOW - 5 + i, format!("v{i}").as_bytes()))
        .collect();
    cells.push(cell("t", b"q\x00\x00", NOW, b"long"));
    write(&store, vec![put(b"r", cells)]);
    // A put reads nothing before it writes: all five are on disk until a compaction.
    assert_eq!(stored_versions(&store, b"r").len(), 6);
    let q = |ts: i64, v: &str| (b"q".to_vec(), ts, v.as_bytes().to_vec());
    let long = (b"q\x00\x00".to_vec(), NOW, b"long".to_vec());
    assert_eq!(
        read(&store, b"r", 10),
        [
            q(NOW - 1, "v4"),
            q(NOW - 2, "v3"),
            q(NOW - 3, "v2"),
            long.clone()
        ]
    );
    assert_eq!(read(&store, b"r", 1), [q(NOW - 1, "v4"), long.clone()]);

    // An older put than the three newest is stored, past the count: never read.
    write(
        &store,
        vec![put(b"r", vec![cell("t", b"q", NOW - 10, b"old")])],
    );
    assert_eq!(
        read(&store, b"r", 10),
        [
            q(NOW - 1, "v4"),
            q(NOW - 2, "v3"),
            q(NOW - 3, "v2"),
            long.clone()
        ]
    );
    // A newer one pushes the oldest out of reads.
    write(
        &store,
        vec![put(b"r", vec![cell("t", b"q", NOW + 1, b"new")])],
    );
    let newest = [
        q(NOW + 1, "new"),
        q(NOW - 1, "v4"),
        q(NOW - 2, "v3"),
        long.clone(),
    ];
    assert_eq!(read(&store, b"r", 10), newest);
    assert_eq!(stored_versions(&store, b"r").len(), 8);
    // A compaction drops the versions past the count, as HBase's do; reads are unchanged.
    store.major_compact(T).unwrap();
    let on_disk: Vec<i64> = stored_versions(&store, b"r")
        .into_iter()
        .filter(|(q, _)| q == b"q")
        .map(|(_, ts)| ts)
        .collect();
    assert_eq!(on_disk, [NOW + 1, NOW - 1, NOW - 2]);
    assert_eq!(stored_versions(&store, b"r").len(), 4);
    assert_eq!(read(&store, b"r", 10), newest);
}

#[test]
fn purge_drops_versions_past_the_count_and_expired_ones() {
    let dir = TempDir::new().unwrap();
    let (store, now) = open_versioned(&dir);
    let cells: Vec<Cell> = (0..5).map(|i| cell("t", b"q", NOW - 5 + i, b"v")).collect();
    write(&store, vec![put(b"r", cells)]);
    assert_eq!(store.purge_expired().unwrap(), 2);
    assert_eq!(stored_versions(&store, b"r").len(), 3);
    assert_eq!(store.purge_expired().unwrap(), 0);
    // TTL per version: the oldest two expired, the newest still visible (its last moment).
    now.store(NOW - 1 + (TTL_SECS as i64) * 1000, Ordering::SeqCst);
    assert_eq!(
        read(&store, b"r", 3),
        [(b"q".to_vec(), NOW - 1, b"v".to_vec())]
    );
    assert_eq!(store.purge_expired().unwrap(), 2);
    assert_eq!(stored_versions(&store, b"r"), [(b"q".to_vec(), NOW - 1)]);
}

#[test]
fn versions_span_generations_and_a_delete_removes_them_all() {
    let dir = TempDir::new().unwrap();
    let (store, _) = open_versioned(&dir);
    // Every write starts a generation.
    store.set_generation_bytes(1);
    for i in 0..4 {
        let mut w = store.writer().ingest_thresholds(1, 1);
        w.write(vec![put(
            b"r",
            vec![cell("t", b"q", NOW - 4 + i, &[b'0' + i as u8])],
        )])
        .unwrap();
        w.flush().unwrap();
    }
    assert!(store.generation_count(T).unwrap() > 1);
    let got: Vec<i64> = read(&store, b"r", 5).into_iter().map(|c| c.1).collect();
    assert_eq!(got, [NOW - 1, NOW - 2, NOW - 3]);
    // Same stamp, new value: replaces that version, in whichever generation it was.
    write(
        &store,
        vec![put(b"r", vec![cell("t", b"q", NOW - 3, b"x")])],
    );
    assert_eq!(
        read(&store, b"r", 5)[2],
        (b"q".to_vec(), NOW - 3, b"x".to_vec())
    );
    write(
        &store,
        vec![Mutation::DeleteRow {
            table: T,
            row: b"r".to_vec(),
            ts_ms: NOW,
        }],
    );
    assert_eq!(store.get_versions(T, b"r", None, 5).unwrap(), None);
    assert!(stored_versions(&store, b"r").is_empty());
}

#[test]
fn one_version_families_keep_their_layout() {
    let dir = TempDir::new().unwrap();
    let (store, _) = open_versioned(&dir);
    write(
        &store,
        vec![put(
            b"r",
            vec![cell("tt", b"v", NOW, b"1"), cell("t", b"q", NOW, b"2")],
        )],
    );
    let (_, table) = store.inner.table(T).unwrap();
    let keys: Vec<Vec<u8>> = table
        .range(&[], &[], None, &[])
        .map(|item| item.unwrap().0.to_vec())
        .collect();
    let mut version = Vec::new();
    codec::encode_version_key(&mut version, b"r", "t", b"q", NOW);
    // `t` versioned, `tt` as every family was stored: `row 0x00 family 0x00 qualifier`.
    assert_eq!(keys, [version, b"r\x00tt\x00v".to_vec()]);
}

#[test]
fn versions_a_store_cannot_keep_are_refused() {
    let dir = TempDir::new().unwrap();
    let mut none = table();
    none.families[0].max_versions = 0;
    let mut packed = versioned_table();
    packed.families[0].packed = true;
    let mut marker = table();
    marker.families[0].name = "t\x02";
    for spec in [none, packed, marker] {
        let err = EmbeddedStore::open(dir.path(), &[spec]).unwrap_err();
        assert!(matches!(err, crate::Error::Invalid(_)), "{err}");
    }
}
