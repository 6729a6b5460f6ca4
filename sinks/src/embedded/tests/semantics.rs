//! Reads and writes as HBase does them: row and cell order, scan limits, TTL, deletes and
//! cell timestamps.

use super::*;
use crate::embedded::EmbeddedWriter;

#[test]
fn rows_that_prefix_each_other_scan_in_hbase_order_and_get_apart() {
    let dir = TempDir::new().unwrap();
    let (store, _) = open(&dir);
    write(
        &store,
        vec![
            put_v(b"ab", b"3"),
            put_v(b"b", b"4"),
            put_v(b"a_b", b"2"),
            put_v(b"a", b"1"),
        ],
    );

    let all = store.dump(T).unwrap();
    assert_eq!(keys(&all), [&b"a"[..], b"a_b", b"ab", b"b"]);

    let a = store.get(T, b"a", None).unwrap().unwrap();
    assert_eq!(a.cells, vec![cell("t", b"v", NOW, b"1")]);
    assert_eq!(store.get(T, b"a_", None).unwrap(), None);
    assert_eq!(store.get(T, b"c", None).unwrap(), None);
    // A key holding the separator cannot exist, and must not match row `a`'s cells.
    assert_eq!(store.get(T, b"a\x00t", None).unwrap(), None);

    let prefixed = store.scan(T, &ScanSpec::prefix(b"a")).unwrap();
    assert_eq!(keys(&prefixed), [&b"a"[..], b"a_b", b"ab"]);
    let prefixed = store.scan(T, &ScanSpec::prefix(b"a_")).unwrap();
    assert_eq!(keys(&prefixed), [&b"a_b"[..]]);
}

#[test]
fn cells_sort_by_family_then_qualifier_bytes() {
    let dir = TempDir::new().unwrap();
    let (store, _) = open(&dir);
    let cells = vec![
        cell("tt", b"x", NOW, b"6"),
        cell("t", b"v2", NOW, b"5"),
        cell("t", b"v\x00", NOW, b"4"),
        cell("t", b"v", NOW, b"3"),
        cell("t", b"9", NOW, b"2"),
        cell("t", b"10", NOW, b"1"),
        cell("a", b"z", NOW, b"0"),
    ];
    write(&store, vec![put(b"r", cells.clone())]);

    let row = store.get(T, b"r", None).unwrap().unwrap();
    let mut expected = cells;
    expected.sort_by(|x, y| {
        (x.family.as_bytes(), &x.qualifier).cmp(&(y.family.as_bytes(), &y.qualifier))
    });
    assert_eq!(row.cells, expected);
    assert_eq!(row.cells[0].family, "a");
    assert_eq!(row.cells.last().unwrap().family, "tt");
    assert_eq!(
        row.cell("t", b"v\x00").map(|c| c.value.as_slice()),
        Some(&b"4"[..])
    );
}

#[test]
fn limit_counts_rows_and_stop_is_exclusive() {
    let dir = TempDir::new().unwrap();
    let (store, _) = open(&dir);
    let two_cells = |row: &[u8]| {
        put(
            row,
            vec![cell("t", b"v", NOW, b"1"), cell("t", b"x", NOW, b"2")],
        )
    };
    write(
        &store,
        vec![
            two_cells(b"a"),
            two_cells(b"b"),
            two_cells(b"c"),
            two_cells(b"d"),
        ],
    );

    let limited = scan(&store, b"", b"", Some(2));
    assert_eq!(keys(&limited), [&b"a"[..], b"b"]);
    assert!(limited.iter().all(|r| r.cells.len() == 2));
    assert!(scan(&store, b"", b"", Some(0)).is_empty());
    assert_eq!(scan(&store, b"", b"", Some(10)).len(), 4);

    assert_eq!(keys(&scan(&store, b"b", b"d", None)), [&b"b"[..], b"c"]);
    assert_eq!(
        keys(&scan(&store, b"b", b"", None)),
        [&b"b"[..], b"c", b"d"]
    );
    assert_eq!(keys(&scan(&store, b"bb", b"c", None)), Vec::<&[u8]>::new());
    assert_eq!(
        keys(&scan(&store, b"a\x00", b"c\x00", None)),
        [&b"b"[..], b"c"]
    );
}

#[test]
fn ttl_boundary_matches_hbase() {
    let dir = TempDir::new().unwrap();
    let (store, now) = open(&dir);
    let ttl_ms = (TTL_SECS * 1000) as i64;
    write(
        &store,
        vec![
            // Exactly TTL old: HBase still shows it (expired only when ts < now - ttl).
            put(b"edge", vec![cell("t", b"v", NOW - ttl_ms, b"edge")]),
            put(b"gone", vec![cell("t", b"v", NOW - ttl_ms - 1, b"gone")]),
            // No TTL on family `tt`: old cells stay.
            put(
                b"mixed",
                vec![cell("t", b"v", 0, b"old"), cell("tt", b"v", 0, b"kept")],
            ),
        ],
    );

    assert_eq!(keys(&store.dump(T).unwrap()), [&b"edge"[..], b"mixed"]);
    assert_eq!(store.get(T, b"gone", None).unwrap(), None);
    assert_eq!(
        store.get(T, b"mixed", None).unwrap().unwrap().cells,
        vec![cell("tt", b"v", 0, b"kept")]
    );
    // A row whose cells all expired does not count against the limit.
    assert_eq!(keys(&scan(&store, b"", b"", Some(1))), [&b"edge"[..]]);

    now.fetch_add(1, Ordering::SeqCst);
    assert_eq!(store.get(T, b"edge", None).unwrap(), None);
    assert_eq!(keys(&store.dump(T).unwrap()), [&b"mixed"[..]]);
}

#[test]
fn purge_expired_counts_cells_and_they_stay_gone_after_reopen() {
    let dir = TempDir::new().unwrap();
    {
        let (store, now) = open(&dir);
        write(
            &store,
            vec![
                put(
                    b"a",
                    vec![
                        cell("t", b"v", NOW - 20_000, b"1"),
                        cell("t", b"x", NOW - 20_000, b"2"),
                    ],
                ),
                put(
                    b"b",
                    vec![
                        cell("t", b"v", NOW - 5_000, b"3"),
                        cell("tt", b"v", 0, b"4"),
                    ],
                ),
            ],
        );
        assert_eq!(store.purge_expired().unwrap(), 2);
        assert_eq!(store.purge_expired().unwrap(), 0);
        now.fetch_add(6_000, Ordering::SeqCst);
        assert_eq!(store.purge_expired().unwrap(), 1);
        store.persist().unwrap();
    }
    // Turn the clock back: cells merely hidden by their TTL would show again, purged ones don't.
    let (store, now) = open(&dir);
    now.store(NOW - 30_000, Ordering::SeqCst);
    assert_eq!(
        store.dump(T).unwrap(),
        vec![Row {
            key: b"b".to_vec(),
            cells: vec![cell("tt", b"v", 0, b"4")]
        }]
    );
}

#[test]
fn compactions_drop_expired_cells() {
    let dir = TempDir::new().unwrap();
    let (store, _) = open(&dir);
    let mutations = (0..100u32)
        .map(|i| {
            let ts = if i % 2 == 0 { NOW - 60_000 } else { NOW };
            put(
                format!("r{i:03}").as_bytes(),
                vec![cell("t", b"v", ts, b"1")],
            )
        })
        .collect();
    write(&store, mutations);

    let keyspace = &store.inner.tables[0].generations().pop().unwrap();
    assert_eq!(keyspace.len().unwrap(), 100);
    // Flush the memtable to a table file and compact it (fjall test hooks, hidden from docs).
    keyspace.rotate_memtable_and_wait().unwrap();
    keyspace.major_compact().unwrap();
    assert_eq!(keyspace.len().unwrap(), 50);
    assert_eq!(store.dump(T).unwrap().len(), 50);
    // Nothing left for the explicit purge to do.
    assert_eq!(store.purge_expired().unwrap(), 0);
}

#[test]
fn delete_row_removes_cells_up_to_its_timestamp() {
    let dir = TempDir::new().unwrap();
    let (store, _) = open(&dir);
    let row = |r: &[u8]| {
        put(
            r,
            vec![
                cell("tt", b"1", 100, b"a"),
                cell("tt", b"2", 200, b"b"),
                cell("tt", b"3", 300, b"c"),
            ],
        )
    };
    write(&store, vec![row(b"a"), row(b"a_b"), row(b"ab")]);

    write(
        &store,
        vec![Mutation::DeleteRow {
            table: T,
            row: b"a".to_vec(),
            ts_ms: 200,
        }],
    );
    assert_eq!(
        store.get(T, b"a", None).unwrap().unwrap().cells,
        vec![cell("tt", b"3", 300, b"c")]
    );
    assert_eq!(store.get(T, b"a_b", None).unwrap().unwrap().cells.len(), 3);
    assert_eq!(store.get(T, b"ab", None).unwrap().unwrap().cells.len(), 3);

    // A put queued before the delete in the same write is deleted; one queued after survives.
    write(
        &store,
        vec![
            put(b"ab", vec![cell("tt", b"4", 400, b"d")]),
            Mutation::DeleteRow {
                table: T,
                row: b"ab".to_vec(),
                ts_ms: 1_000,
            },
            put(b"ab", vec![cell("tt", b"5", 500, b"e")]),
        ],
    );
    assert_eq!(
        store.get(T, b"ab", None).unwrap().unwrap().cells,
        vec![cell("tt", b"5", 500, b"e")]
    );

    write(
        &store,
        vec![Mutation::DeleteRow {
            table: T,
            row: b"a_b".to_vec(),
            ts_ms: i64::MAX,
        }],
    );
    assert_eq!(store.get(T, b"a_b", None).unwrap(), None);
    assert_eq!(keys(&store.dump(T).unwrap()), [&b"a"[..], b"ab"]);
}

fn ts_of(store: &EmbeddedStore, row: &[u8]) -> (i64, Vec<u8>) {
    let c = store.get(T, row, None).unwrap().unwrap().cells.remove(0);
    (c.ts_ms, c.value)
}

#[test]
fn last_write_wins_by_default() {
    let dir = TempDir::new().unwrap();
    let (store, _) = open(&dir);
    let at = |ts, v: &[u8]| put(b"r", vec![cell("tt", b"v", ts, v)]);
    write(&store, vec![at(200, b"new")]);
    write(&store, vec![at(100, b"old")]);
    assert_eq!(ts_of(&store, b"r"), (100, b"old".to_vec()));
    // Within one batch too.
    write(&store, vec![at(300, b"x"), at(50, b"y")]);
    assert_eq!(ts_of(&store, b"r"), (50, b"y".to_vec()));
}

#[test]
fn newest_timestamp_wins_when_asked() {
    let dir = TempDir::new().unwrap();
    let (store, _) = open(&dir);
    let at = |ts, v: &[u8]| put(b"r", vec![cell("tt", b"v", ts, v)]);
    let mut w: EmbeddedWriter = store.writer().newest_timestamp_wins(true);

    w.write(vec![at(200, b"new")]).unwrap();
    w.flush().unwrap();
    w.write(vec![at(100, b"old")]).unwrap();
    w.flush().unwrap();
    assert_eq!(ts_of(&store, b"r"), (200, b"new".to_vec()));

    // Against a cell queued in the same batch, not yet visible in the store.
    w.write(vec![at(300, b"x"), at(250, b"y")]).unwrap();
    w.flush().unwrap();
    assert_eq!(ts_of(&store, b"r"), (300, b"x".to_vec()));

    // Equal timestamps: the later put wins, as in HBase.
    w.write(vec![at(300, b"z")]).unwrap();
    w.flush().unwrap();
    assert_eq!(ts_of(&store, b"r"), (300, b"z".to_vec()));

    // After a delete queued in the same batch, an older put shows again.
    w.write(vec![
        Mutation::DeleteRow {
            table: T,
            row: b"r".to_vec(),
            ts_ms: 300,
        },
        at(10, b"again"),
    ])
    .unwrap();
    w.flush().unwrap();
    assert_eq!(ts_of(&store, b"r"), (10, b"again".to_vec()));

    // No read before a put: each is a version of its own, stamp in the key, and the newest
    // shows; a compaction keeps only it on disk, as `VERSIONS => 1` asks.
    let stored = |store: &EmbeddedStore| {
        let (_, table) = store.inner.table(T).unwrap();
        let mut prefix = Vec::new();
        crate::embedded::codec::encode_row_prefix(&mut prefix, b"r");
        table.prefix(&prefix, None).count()
    };
    w.write(vec![at(20, b"later"), at(5, b"late")]).unwrap();
    w.flush().unwrap();
    assert_eq!(ts_of(&store, b"r"), (20, b"later".to_vec()));
    assert_eq!(stored(&store), 3);
    store.major_compact(T).unwrap();
    assert_eq!(stored(&store), 1);
    assert_eq!(ts_of(&store, b"r"), (20, b"later".to_vec()));
}

#[test]
fn a_flush_ingests_the_remainder_of_a_bulk_write_and_sends_a_trickle_through_the_memtable() {
    let dir = TempDir::new().unwrap();
    let (store, _) = open(&dir);
    let keyspace = store.inner.tables[0].generations().pop().unwrap();
    // Buffers of 580 bytes (12 cells of 17 bytes and their 32-byte slots) are ingested; a flush
    // ingests 290 bytes (6 cells) or more, unless bulk.
    let mut w = store.writer().ingest_thresholds(580, 290);
    let cells = |from: u32, to: u32| -> Vec<Mutation> {
        (from..to)
            .map(|i| put_v(format!("r{i:03}").as_bytes(), b"v"))
            .collect()
    };
    // A trickle: a few cells per flush go through the journal and memtable.
    w.write(cells(0, 2)).unwrap();
    w.flush().unwrap();
    assert_eq!(keyspace.table_count(), 0);
    // A bulk write: one full buffer ingested, then the flush ingests the small rest too, which
    // would otherwise go to the memtable that the next ingestion must first flush.
    w.write(cells(2, 16)).unwrap();
    assert_eq!(
        keyspace.table_count(),
        2,
        "the memtable, flushed, and a full buffer"
    );
    w.flush().unwrap();
    assert_eq!(keyspace.table_count(), 3);
    // The flag lasts one flush: a trickle after it goes through the memtable again.
    w.write(cells(16, 17)).unwrap();
    w.flush().unwrap();
    assert_eq!(keyspace.table_count(), 3);
    assert_eq!(store.dump(T).unwrap().len(), 17);
}

fn open_packed(dir: &TempDir) -> EmbeddedStore {
    let (_, clock) = clock();
    EmbeddedStore::open_with_clock(dir.path(), &[table_with(true)], clock).unwrap()
}

#[test]
fn a_packed_put_is_one_key_value_and_a_later_put_of_other_cells_keeps_the_rest() {
    let dir = TempDir::new().unwrap();
    let store = open_packed(&dir);
    write(
        &store,
        vec![put(
            b"r",
            vec![
                cell("t", b"x", NOW, b"x1"),
                cell("t", b"v", NOW, b"v1"),
                cell("tt", b"v", NOW, b"other family"),
            ],
        )],
    );
    let keyspace = store.inner.tables[0].generations().pop().unwrap();
    // `t`'s two cells in one key-value, `tt`'s (not packed) in its own.
    assert_eq!(keyspace.len().unwrap(), 2);
    write(&store, vec![put(b"r", vec![cell("t", b"v", NOW, b"v2")])]);
    assert_eq!(keyspace.len().unwrap(), 3);
    assert_eq!(
        store.get(T, b"r", None).unwrap().unwrap().cells,
        vec![
            cell("t", b"v", NOW, b"v2"),
            cell("t", b"x", NOW, b"x1"),
            cell("tt", b"v", NOW, b"other family"),
        ]
    );
    // The same qualifiers again replace the key-value.
    write(&store, vec![put(b"r", vec![cell("t", b"v", NOW, b"v3")])]);
    assert_eq!(keyspace.len().unwrap(), 3);
    assert_eq!(ts_of(&store, b"r"), (NOW, b"v3".to_vec()));
}

#[test]
fn a_wide_put_is_a_few_key_values_and_each_firing_s_summary_replaces_the_last() {
    let dir = TempDir::new().unwrap();
    let (_, clock) = clock();
    let mut spec = table_with(true);
    spec.families[0].packed_apart = &["n", "sum"];
    let store = EmbeddedStore::open_with_clock(dir.path(), &[spec], clock).unwrap();
    let points = |range: std::ops::Range<u32>| -> Vec<Cell> {
        range
            .map(|s| cell("t", s.to_string().as_bytes(), NOW, b"1.5"))
            .collect()
    };
    let summary = |n: &[u8]| vec![cell("t", b"n", NOW, n), cell("t", b"sum", NOW, n)];
    // An hour's 360 points of 4 digits and its summary: 42 points to a key-value
    // (`codec::PACKED_QUALIFIER_BYTES`), so 9 key-values of points, and 1 of the summary.
    let mut cells = points(1000..1360);
    cells.extend(summary(b"360"));
    write(&store, vec![put(b"r", cells)]);
    let keyspace = store.inner.tables[0].generations().pop().unwrap();
    assert_eq!(keyspace.len().unwrap(), 10);
    // A later firing: one new point, the summary again. The summary's key-value is replaced.
    let mut cells = points(2000..2001);
    cells.extend(summary(b"361"));
    write(&store, vec![put(b"r", cells)]);
    assert_eq!(keyspace.len().unwrap(), 11);
    let row = store.get(T, b"r", None).unwrap().unwrap();
    let mut expected = points(1000..1360);
    expected.extend(points(2000..2001));
    expected.extend(summary(b"361"));
    expected.sort_by(|a, b| a.qualifier.cmp(&b.qualifier));
    assert_eq!(row.cells, expected);
}

#[test]
fn an_expired_packed_put_still_hides_the_cells_of_earlier_puts_after_a_compaction() {
    let dir = TempDir::new().unwrap();
    let store = open_packed(&dir);
    // The later put carries an older, expired, timestamp: by default the last write wins, so
    // the row shows nothing, as when each cell is stored on its own.
    write(&store, vec![put(b"r", vec![cell("t", b"v", NOW, b"live")])]);
    write(
        &store,
        vec![put(
            b"r",
            vec![
                cell("t", b"v", NOW - 60_000, b"old"),
                cell("t", b"x", NOW - 60_000, b"old"),
            ],
        )],
    );
    assert_eq!(store.get(T, b"r", None).unwrap(), None);
    let keyspace = store.inner.tables[0].generations().pop().unwrap();
    keyspace.rotate_memtable_and_wait().unwrap();
    keyspace.major_compact().unwrap();
    // The expired put is kept as its key and seq.
    assert_eq!(keyspace.len().unwrap(), 2);
    assert_eq!(store.get(T, b"r", None).unwrap(), None);
    assert_eq!(store.dump(T).unwrap(), vec![]);
}
