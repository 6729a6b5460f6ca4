//! Column deletes in each layout: single cells, packed puts (the column's cell rewritten out of
//! its key-values, the others' seqs still ordering them) and versions (every one removed).

use super::*;

fn delete_column(family: &str, qualifier: &[u8], ts_ms: i64) -> Mutation {
    Mutation::DeleteColumn {
        table: T,
        row: b"r".to_vec(),
        family: family.into(),
        qualifier: qualifier.to_vec(),
        ts_ms,
    }
}

/// `(family, qualifier, value)` of the visible cells of row `r`.
fn visible(store: &EmbeddedStore) -> Vec<(String, Vec<u8>, Vec<u8>)> {
    store
        .get(T, b"r", None)
        .unwrap()
        .map(|r| {
            r.cells
                .into_iter()
                .map(|c| (c.family, c.qualifier, c.value))
                .collect()
        })
        .unwrap_or_default()
}

fn c(family: &str, qualifier: &[u8], value: &[u8]) -> (String, Vec<u8>, Vec<u8>) {
    (family.to_string(), qualifier.to_vec(), value.to_vec())
}

fn open_packed(dir: &TempDir) -> EmbeddedStore {
    let (_, clock) = clock();
    EmbeddedStore::open_with_clock(dir.path(), &[table_with(true)], clock).unwrap()
}

#[test]
fn a_packed_column_goes_and_the_put_s_other_cells_stay_with_their_order() {
    for newest_wins in [false, true] {
        let dir = TempDir::new().unwrap();
        let store = open_packed(&dir);
        let mut w = store.writer().newest_timestamp_wins(newest_wins);
        // Two puts of `t`: the second hides the first's `a`; `b` only the first put holds.
        w.write(vec![put(
            b"r",
            vec![
                cell("t", b"a", NOW - 2, b"a1"),
                cell("t", b"b", NOW - 2, b"b1"),
                cell("t", b"c", NOW - 2, b"c1"),
                cell("tt", b"x", NOW, b"x"),
            ],
        )])
        .unwrap();
        w.flush().unwrap();
        w.write(vec![put(b"r", vec![cell("t", b"a", NOW - 1, b"a2")])])
            .unwrap();
        w.write(vec![delete_column("t", b"b", NOW)]).unwrap();
        w.flush().unwrap();
        assert_eq!(
            visible(&store),
            [
                c("t", b"a", b"a2"),
                c("t", b"c", b"c1"),
                c("tt", b"x", b"x")
            ],
            "newest_timestamp_wins {newest_wins}"
        );
        // The rewrite keeps `a`'s newest value: deleting `a` now leaves no older one showing.
        w.write(vec![delete_column("t", b"a", NOW)]).unwrap();
        w.flush().unwrap();
        assert_eq!(visible(&store), [c("t", b"c", b"c1"), c("tt", b"x", b"x")]);
        // A bound older than the cell deletes nothing; a missing column neither.
        w.write(vec![
            delete_column("t", b"c", NOW - 3),
            delete_column("t", b"zz", NOW),
        ])
        .unwrap();
        w.flush().unwrap();
        assert_eq!(visible(&store), [c("t", b"c", b"c1"), c("tt", b"x", b"x")]);
        // A later put of the column shows again, beside the others.
        w.write(vec![put(b"r", vec![cell("t", b"b", NOW, b"b2")])])
            .unwrap();
        w.flush().unwrap();
        assert_eq!(
            visible(&store),
            [
                c("t", b"b", b"b2"),
                c("t", b"c", b"c1"),
                c("tt", b"x", b"x")
            ]
        );
        // Every cell of the family gone: the row keeps its other family only.
        w.write(vec![
            delete_column("t", b"b", i64::MAX),
            delete_column("t", b"c", i64::MAX),
        ])
        .unwrap();
        w.flush().unwrap();
        assert_eq!(visible(&store), [c("tt", b"x", b"x")]);
        drop(w);
        store.major_compact(T).unwrap();
        assert_eq!(visible(&store), [c("tt", b"x", b"x")]);
    }
}

#[test]
fn a_single_cell_column_goes_from_every_generation() {
    let dir = TempDir::new().unwrap();
    let (store, _) = open(&dir);
    // Each write an ingested table, which closes its generation: the column is in two.
    store.set_generation_bytes(0);
    let ingested = |mutations| {
        let mut w = store.writer().ingest_thresholds(1, 1);
        w.write(mutations).unwrap();
        w.flush().unwrap();
    };
    ingested(vec![put(b"r", vec![cell("a", b"q", NOW - 5, b"old")])]);
    ingested(vec![put(
        b"r",
        vec![
            cell("a", b"q", NOW, b"new"),
            cell("a", b"q2", NOW, b"other"),
        ],
    )]);
    assert!(store.generation_count(T).unwrap() > 1);
    write(&store, vec![delete_column("a", b"q", NOW)]);
    assert_eq!(visible(&store), [c("a", b"q2", b"other")]);
    // A family the table lacks is refused, as HBase refuses it.
    let mut w = store.writer();
    assert!(matches!(
        w.write(vec![delete_column("nope", b"q", NOW)]),
        Err(crate::Error::Invalid(_))
    ));
}

#[test]
fn every_version_of_a_column_goes_and_the_next_put_is_the_only_one() {
    let dir = TempDir::new().unwrap();
    let mut spec = table();
    spec.families[2].max_versions = 3;
    let (_, clock) = clock();
    let store = EmbeddedStore::open_with_clock(dir.path(), &[spec], clock).unwrap();
    for i in 0..3 {
        let value = format!("v{i}");
        write(
            &store,
            vec![put(
                b"r",
                vec![
                    cell("a", b"q", NOW - 10 + i, value.as_bytes()),
                    // A longer qualifier whose version keys sort among `q`'s.
                    cell("a", b"q\x00", NOW - 10 + i, b"long"),
                ],
            )],
        );
    }
    let versions = |store: &EmbeddedStore| {
        let row = store.get_versions(T, b"r", None, 3).unwrap().unwrap();
        row.cells
            .iter()
            .map(|c| (c.qualifier.clone(), c.ts_ms))
            .collect::<Vec<_>>()
    };
    assert_eq!(versions(&store).len(), 6);
    // Only the versions stamped at most the bound go.
    write(&store, vec![delete_column("a", b"q", NOW - 9)]);
    assert_eq!(
        versions(&store)
            .iter()
            .filter(|(q, _)| q == b"q")
            .collect::<Vec<_>>(),
        [&(b"q".to_vec(), NOW - 8)]
    );
    write(&store, vec![delete_column("a", b"q", NOW)]);
    assert_eq!(
        versions(&store),
        [
            (b"q\x00".to_vec(), NOW - 8),
            (b"q\x00".to_vec(), NOW - 9),
            (b"q\x00".to_vec(), NOW - 10)
        ]
    );
    write(
        &store,
        vec![put(b"r", vec![cell("a", b"q", NOW, b"after")])],
    );
    assert_eq!(versions(&store)[0], (b"q".to_vec(), NOW));
    assert_eq!(versions(&store).len(), 4);
    store.major_compact(T).unwrap();
    assert_eq!(versions(&store).len(), 4);
}
