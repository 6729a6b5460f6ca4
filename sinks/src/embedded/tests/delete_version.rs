//! Version deletes: with every cell stored as a version, one key's removal queued in the
//! table's buffer, in order with its puts, through the memtable or ingested, and from every
//! generation whose span holds the stamp; in a family of single cells, a read.

use super::*;

fn delete_version(row: &[u8], ts_ms: i64) -> Mutation {
    Mutation::DeleteVersion {
        table: T,
        row: row.to_vec(),
        family: "a".into(),
        qualifier: b"q".to_vec(),
        ts_ms,
    }
}

fn put_q(row: &[u8], ts_ms: i64, value: &[u8]) -> Mutation {
    put(row, vec![cell("a", b"q", ts_ms, value)])
}

/// `(stamp, value)` of each version of `a:q` in `row`, newest first.
fn versions(store: &EmbeddedStore, row: &[u8]) -> Vec<(i64, Vec<u8>)> {
    store
        .get_versions(T, row, None, 3)
        .unwrap()
        .map(|r| r.cells.into_iter().map(|c| (c.ts_ms, c.value)).collect())
        .unwrap_or_default()
}

#[test]
fn a_version_goes_in_order_with_the_puts_through_the_memtable_or_ingested() {
    // Through the memtable (a flush's small buffers), and ingested as sorted tables.
    for (ingest, min_ingest) in [(1 << 20, 1 << 20), (1, 1)] {
        let dir = TempDir::new().unwrap();
        let (store, _) = open(&dir);
        let mut w = store
            .writer()
            .newest_timestamp_wins(true)
            .ingest_thresholds(ingest, min_ingest);
        w.write(vec![put_q(b"r1", NOW - 5, b"v1")]).unwrap();
        w.flush().unwrap();
        // The old version deleted, a newer one put: one version left.
        w.write(vec![
            delete_version(b"r1", NOW - 5),
            put_q(b"r1", NOW, b"v2"),
        ])
        .unwrap();
        // Put then deleted before any flush; deleted then put again.
        w.write(vec![
            put_q(b"r2", NOW, b"x"),
            delete_version(b"r2", NOW),
            put_q(b"r3", NOW, b"y"),
            delete_version(b"r3", NOW),
            put_q(b"r3", NOW, b"y2"),
        ])
        .unwrap();
        // A stamp no version has deletes nothing.
        w.write(vec![delete_version(b"r1", NOW - 100)]).unwrap();
        w.flush().unwrap();
        let at = format!("ingest thresholds {ingest}");
        assert_eq!(versions(&store, b"r1"), [(NOW, b"v2".to_vec())], "{at}");
        assert_eq!(versions(&store, b"r2"), [], "{at}");
        assert_eq!(versions(&store, b"r3"), [(NOW, b"y2".to_vec())], "{at}");
        drop(w);
        store.major_compact(T).unwrap();
        assert_eq!(versions(&store, b"r1"), [(NOW, b"v2".to_vec())], "{at}");
        assert_eq!(versions(&store, b"r2"), [], "{at}");
    }
}

#[test]
fn a_version_goes_from_an_older_generation() {
    let dir = TempDir::new().unwrap();
    let (store, _) = open(&dir);
    // Each write an ingested table, which closes its generation.
    store.set_generation_bytes(0);
    let ingested = |mutations| {
        let mut w = store
            .writer()
            .newest_timestamp_wins(true)
            .ingest_thresholds(1, 1);
        w.write(mutations).unwrap();
        w.flush().unwrap();
    };
    ingested(vec![put_q(b"r", NOW - 5, b"old")]);
    ingested(vec![put_q(b"s", NOW, b"other")]);
    assert!(store.generation_count(T).unwrap() > 1);
    ingested(vec![delete_version(b"r", NOW - 5)]);
    assert_eq!(versions(&store, b"r"), []);
    assert_eq!(versions(&store, b"s"), [(NOW, b"other".to_vec())]);
}

#[test]
fn a_single_cell_goes_only_at_its_exact_stamp() {
    let dir = TempDir::new().unwrap();
    let (store, _) = open(&dir);
    write(&store, vec![put_q(b"r", NOW - 5, b"v")]);
    write(&store, vec![delete_version(b"r", NOW)]);
    assert_eq!(versions(&store, b"r"), [(NOW - 5, b"v".to_vec())]);
    write(&store, vec![delete_version(b"r", NOW - 5)]);
    assert_eq!(versions(&store, b"r"), []);
    // A family the table lacks is refused, as HBase refuses it.
    let mut w = store.writer();
    let mut bad = delete_version(b"r", NOW);
    if let Mutation::DeleteVersion { family, .. } = &mut bad {
        *family = "nope".into();
    }
    assert!(matches!(w.write(vec![bad]), Err(crate::Error::Invalid(_))));
}

/// A key batch (`TableWriter::write_keys`) leaves what its mutations leave, whether its entries
/// go into the buffer directly (every cell a version) or as mutations (a family of single
/// cells), through the memtable or ingested; an invalid row refuses the whole batch.
#[test]
fn a_key_batch_writes_what_its_mutations_write() {
    use crate::table::KeyBatch;
    let mut keys = KeyBatch::new(T, "a", b"q", b"1");
    keys.put(b"r1", NOW - 5);
    keys.put(b"r2", NOW);
    keys.delete(b"r2", NOW);
    keys.delete(b"r3", NOW - 5);
    keys.put(b"r3", NOW);
    keys.delete(b"r4", NOW - 1);
    for newest in [true, false] {
        for (ingest, min_ingest) in [(1 << 20, 1 << 20), (1, 1)] {
            let at = format!("newest_timestamp_wins {newest}, ingest thresholds {ingest}");
            let stores: Vec<(TempDir, EmbeddedStore)> = (0..2)
                .map(|_| {
                    let dir = TempDir::new().unwrap();
                    let (store, _) = open(&dir);
                    (dir, store)
                })
                .collect();
            for (i, (_, store)) in stores.iter().enumerate() {
                let mut w = store
                    .writer()
                    .newest_timestamp_wins(newest)
                    .ingest_thresholds(ingest, min_ingest);
                // An older version of r3 and r4's only one, stored before the batch.
                w.write(vec![
                    put_q(b"r3", NOW - 5, b"1"),
                    put_q(b"r4", NOW - 1, b"1"),
                ])
                .unwrap();
                w.flush().unwrap();
                if i == 0 {
                    w.write_keys(&keys).unwrap();
                } else {
                    w.write(keys.to_mutations()).unwrap();
                }
                w.flush().unwrap();
            }
            let rows = |store: &EmbeddedStore| {
                [b"r1", b"r2", b"r3", b"r4"].map(|row| versions(store, row))
            };
            assert_eq!(rows(&stores[0].1), rows(&stores[1].1), "{at}");
            assert_eq!(
                rows(&stores[0].1),
                [
                    vec![(NOW - 5, b"1".to_vec())],
                    vec![],
                    vec![(NOW, b"1".to_vec())],
                    vec![]
                ],
                "{at}"
            );
        }
    }
    let dir = TempDir::new().unwrap();
    let (store, _) = open(&dir);
    let mut w = store.writer().newest_timestamp_wins(true);
    let mut bad = KeyBatch::new(T, "a", b"q", b"1");
    bad.put(b"ok", NOW);
    bad.put(b"zero\0byte", NOW);
    assert!(matches!(w.write_keys(&bad), Err(crate::Error::Invalid(_))));
    let mut unknown = KeyBatch::new(T, "nope", b"q", b"1");
    unknown.put(b"ok", NOW);
    assert!(matches!(
        w.write_keys(&unknown),
        Err(crate::Error::Invalid(_))
    ));
    w.flush().unwrap();
    assert_eq!(
        versions(&store, b"ok"),
        [],
        "nothing of a refused batch is written"
    );
}
