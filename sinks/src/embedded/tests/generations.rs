//! A table split over generations reads as one table.

use super::*;
use crate::table::{TableReader, TimeRange};

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
    let row = store.get(T, row, None).unwrap()?;
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

const HOUR_MS: i64 = 3_600_000;
/// An hour's start, a few hours before `NOW`: spans round out to 10 minutes, so each hour's
/// cells, a millisecond into the hour, leave the other hours' spans apart.
const H0: i64 = NOW - NOW % HOUR_MS - 10 * HOUR_MS;

/// How many of the table's generations a scan with `range` reads.
fn generations_read(store: &EmbeddedStore, range: Option<&TimeRange>) -> usize {
    store.inner.tables[0].generations_within(range).len()
}

fn scan_within(store: &EmbeddedStore, range: TimeRange) -> Vec<Row> {
    let spec = ScanSpec {
        time_range: Some(range),
        ..ScanSpec::default()
    };
    store.scan(T, &spec).unwrap()
}

/// What a scan with `range` must answer: the whole table's rows with only the cells stamped
/// within it, and no row left without a cell.
fn filtered(store: &EmbeddedStore, range: TimeRange) -> Vec<Row> {
    let mut rows = scan(store, b"", b"", None);
    for row in &mut rows {
        row.cells.retain(|c| range.contains(c.ts_ms));
    }
    rows.retain(|r| !r.cells.is_empty());
    rows
}

/// Generation `h` (0..4) holds hour `h`'s cells: row `d<h>` and the cell `a:q<h>` of row
/// `all`, ingested as one table. Generation 4, started by the last write, holds none.
fn write_hours(store: &EmbeddedStore) {
    for h in 0..4 {
        let ts = H0 + h * HOUR_MS + 1;
        let q = format!("q{h}");
        let mut w = store.writer().ingest_thresholds(1 << 20, 1);
        w.write(vec![
            put(format!("d{h}").as_bytes(), vec![cell("a", b"v", ts, b"x")]),
            put(b"all", vec![cell("a", q.as_bytes(), ts, b"y")]),
        ])
        .unwrap();
        w.flush().unwrap();
    }
    assert_eq!(store.generation_count(T).unwrap(), 5);
}

#[test]
fn a_scan_with_a_time_range_reads_only_the_generations_whose_span_meets_it() {
    let dir = TempDir::new().unwrap();
    let check = |store: &EmbeddedStore| {
        let hour2 = TimeRange::new(H0 + 2 * HOUR_MS, H0 + 3 * HOUR_MS);
        assert_eq!(generations_read(store, Some(&hour2)), 1);
        let rows = scan_within(store, hour2);
        assert_eq!(keys(&rows), vec![&b"all"[..], b"d2"]);
        assert_eq!(rows[0].cells.len(), 1, "only the cell of hour 2: {rows:?}");
        assert_eq!(rows[0].cells[0].qualifier, b"q2");
        assert_eq!(generations_read(store, None), 5);
        for range in [
            hour2,
            TimeRange::new(H0 + HOUR_MS, H0 + 2 * HOUR_MS + 2),
            TimeRange::new(H0, H0 + 1),
            TimeRange::new(H0 + 1, H0 + 2),
            TimeRange::new(H0 + 2, H0 + HOUR_MS),
            TimeRange::new(H0 + 9 * HOUR_MS, i64::MAX),
            TimeRange::new(i64::MIN, i64::MAX),
            TimeRange::new(H0 + HOUR_MS, H0),
        ] {
            let expected = filtered(store, range);
            assert_eq!(scan_within(store, range), expected, "{range:?}");
            // A Get with the range answers as the scan does for its row.
            for row in [&b"all"[..], b"d2", b"d0"] {
                let want = expected.iter().find(|r| r.key == row).cloned();
                assert_eq!(store.get(T, row, Some(range)).unwrap(), want, "{range:?}");
            }
        }
        assert!(scan_within(store, TimeRange::new(H0 + 9 * HOUR_MS, i64::MAX)).is_empty());
        assert_eq!(
            keys(&scan_within(store, TimeRange::new(H0 + 1, H0 + 2))),
            vec![&b"all"[..], b"d0"]
        );
    };
    {
        let (store, _) = open_split(&dir);
        write_hours(&store);
        check(&store);
    }
    // The spans are on disk: a reopened store skips the same generations.
    let (store, _) = open(&dir);
    check(&store);
}

#[test]
fn generations_without_a_recorded_span_are_read_by_every_scan() {
    let dir = TempDir::new().unwrap();
    {
        let (store, _) = open_split(&dir);
        write_hours(&store);
        // As a store written before spans were recorded has none.
        for keyspace in store.inner.tables[0].generations() {
            store.inner.spans.remove(keyspace.name().as_ref()).unwrap();
        }
        store.persist().unwrap();
    }
    let (store, _) = open(&dir);
    let hour2 = TimeRange::new(H0 + 2 * HOUR_MS, H0 + 3 * HOUR_MS);
    assert_eq!(generations_read(&store, Some(&hour2)), 5);
    assert_eq!(keys(&scan_within(&store, hour2)), vec![&b"all"[..], b"d2"]);
    // A generation started from now on records its span.
    store.set_generation_bytes(0);
    let at = |h: i64| vec![cell("a", b"v", H0 + h * HOUR_MS + 1, b"z")];
    write_generation(&store, vec![put(b"d9", at(9))]);
    write_generation(&store, vec![put(b"d8", at(8))]);
    assert_eq!(store.generation_count(T).unwrap(), 7);
    let hour8 = TimeRange::new(H0 + 8 * HOUR_MS, H0 + 9 * HOUR_MS);
    assert_eq!(keys(&scan_within(&store, hour8)), vec![&b"d8"[..]]);
    assert_eq!(generations_read(&store, Some(&hour8)), 6);
    assert_eq!(generations_read(&store, Some(&hour2)), 5);
}

#[test]
fn every_cell_of_a_generation_is_within_its_recorded_span() {
    let dir = TempDir::new().unwrap();
    let check = |store: &EmbeddedStore| {
        let mut cells = 0;
        for (keyspace, span) in store.inner.tables[0].generation_spans() {
            for item in keyspace.iter() {
                let (_, stored) = item.into_inner().unwrap();
                let (ts, _) = super::super::codec::decode_value(&stored).unwrap();
                assert!(span.covers(ts, ts), "{ts} outside {span:?}");
                cells += 1;
            }
        }
        cells
    };
    {
        let (store, _) = open_split(&dir);
        // Ingested, through a write batch (the memtable: the generation it starts stays open,
        // and the second write of `b` replaces the first), and read before write; out of order
        // in time.
        write_generation(
            &store,
            vec![put(b"i", vec![cell("a", b"v", NOW + 5 * HOUR_MS, b"")])],
        );
        write(
            &store,
            vec![put(b"b", vec![cell("a", b"v", NOW - 3 * HOUR_MS, b"")])],
        );
        let mut w = store.writer().newest_timestamp_wins(true);
        w.write(vec![
            put(
                b"n",
                vec![
                    cell("a", b"v", NOW + HOUR_MS, b""),
                    cell("a", b"w", NOW, b""),
                ],
            ),
            put(b"m", vec![cell("a", b"v", -7, b"")]),
        ])
        .unwrap();
        w.flush().unwrap();
        drop(w);
        write(
            &store,
            vec![put(b"b", vec![cell("a", b"v", NOW + 99 * HOUR_MS, b"")])],
        );
        assert_eq!(check(&store), 5);
    }
    let (store, _) = open(&dir);
    assert_eq!(check(&store), 5);
}

#[test]
fn a_generation_whose_cells_have_all_expired_is_dropped_when_no_writer_holds_it() {
    const FIFO: &str = "fifo";
    let fifo = TableSpec {
        key: crate::schema::KeyCodec::raw(),
        name: FIFO,
        families: vec![family("t", Some(TTL_SECS))],
        split_keys: Vec::new(),
        get_rows_per_call: crate::schema::DEFAULT_GET_ROWS_PER_CALL,
    };
    let dir = TempDir::new().unwrap();
    let (now, clock) = clock();
    let names = |store: &EmbeddedStore| -> Vec<String> {
        let mut names: Vec<String> = store
            .inner
            .db
            .list_keyspace_names()
            .iter()
            .map(|n| n.to_string())
            .filter(|n| n.starts_with(FIFO))
            .collect();
        names.sort();
        names
    };
    // Each write is ingested and starts a generation (generation size 0).
    let write_both = |store: &EmbeddedStore, row: &str, ts: i64| {
        let cells = vec![cell("t", b"v", ts, row.as_bytes())];
        let mut w = store.writer().ingest_thresholds(1, 1);
        w.write(vec![
            Mutation::Put {
                table: FIFO,
                row: row.as_bytes().to_vec(),
                cells: cells.clone(),
            },
            put(row.as_bytes(), cells),
        ])
        .unwrap();
        w.flush().unwrap();
    };
    let visible = |store: &EmbeddedStore, table: &str| -> Vec<Vec<u8>> {
        let rows = store.scan(table, &ScanSpec::default()).unwrap();
        rows.into_iter().map(|r| r.key).collect()
    };
    let minute = 60_000;
    {
        let store =
            EmbeddedStore::open_with_clock(dir.path(), &[fifo.clone(), table()], clock.clone())
                .unwrap();
        store.set_generation_bytes(0);
        write_both(&store, "a", NOW);
        write_both(&store, "b", NOW + 30 * minute);
        assert_eq!(names(&store), ["fifo", "fifo#1", "fifo#2"]);

        // Generation 0's span ends before NOW + 10 min: 11 min later all of it has expired.
        now.store(NOW + 11 * minute, Ordering::SeqCst);
        let before = visible(&store, FIFO);
        assert_eq!(before, [b"b".to_vec()]);
        write_both(&store, "c", NOW + 11 * minute);
        assert_eq!(names(&store), ["fifo#1", "fifo#2", "fifo#3"]);
        assert_eq!(visible(&store, FIFO), [b"b".to_vec(), b"c".to_vec()]);
        assert!(store.inner.spans.get("fifo").unwrap().is_none());
        // A table with a family that keeps cells forever keeps every generation.
        assert_eq!(store.generation_count(T).unwrap(), 4);

        // A generation leased to a writer stays until the lease is given back.
        now.store(NOW + 45 * minute, Ordering::SeqCst);
        let leases = store.inner.tables[0].leases();
        write_both(&store, "d", NOW + 45 * minute);
        assert_eq!(names(&store), ["fifo#1", "fifo#2", "fifo#3", "fifo#4"]);
        drop(leases);
        // Generations 1 (`b`) and 2 (`c`) have expired by now; 3 holds `d`.
        write_both(&store, "e", NOW + 45 * minute);
        assert_eq!(names(&store), ["fifo#3", "fifo#4", "fifo#5"]);
        assert_eq!(visible(&store, FIFO), [b"d".to_vec(), b"e".to_vec()]);
    }
    // Reopened (with an empty generation 0 again, twice, so that the second open finds the
    // first one's), the table reads the same, the empty generation 0 goes as the others did,
    // and a new generation takes a number not in use.
    let reopen =
        || EmbeddedStore::open_with_clock(dir.path(), &[fifo.clone(), table()], clock.clone());
    drop(reopen().unwrap());
    let store = reopen().unwrap();
    assert_eq!(names(&store), ["fifo", "fifo#3", "fifo#4", "fifo#5"]);
    assert_eq!(visible(&store, FIFO), [b"d".to_vec(), b"e".to_vec()]);
    store.set_generation_bytes(0);
    write_both(&store, "f", NOW + 45 * minute);
    assert_eq!(
        visible(&store, FIFO),
        [b"d".to_vec(), b"e".to_vec(), b"f".to_vec()]
    );
    assert_eq!(names(&store), ["fifo#3", "fifo#4", "fifo#5", "fifo#6"]);
}

/// A generation closes once as many tables were ingested into it as start its first
/// compaction, if they hold a quarter of the generation size, so that no compaction merges its
/// tables a second time; fewer tables, or tables too small, keep it open.
#[test]
fn a_generation_closes_when_its_ingested_tables_would_start_a_compaction() {
    let trigger = usize::from(super::super::generations::L0_COMPACTION_TRIGGER);
    // Tables of 64 KiB that lz4 cannot shrink: `trigger` of them take 1.5 MiB.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut table_value = move || {
        (0..64 * 1024)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect::<Vec<u8>>()
    };
    let mut ingest = |store: &EmbeddedStore, tables: usize| {
        let mut w = store.writer().ingest_thresholds(1, 1);
        for i in 0..tables {
            let row = format!("r{i:03}");
            w.write(vec![put(
                row.as_bytes(),
                vec![cell("t", b"v", NOW, &table_value())],
            )])
            .unwrap();
        }
        w.flush().unwrap();
    };
    let disk = |store: &EmbeddedStore| {
        store.inner.tables[0]
            .generations()
            .iter()
            .map(|g| g.disk_space())
            .sum::<u64>()
    };

    // 4 MiB generations: a quarter is 1 MiB, less than `trigger` tables, more than 15.
    let dir = TempDir::new().unwrap();
    let (store, _) = open(&dir);
    store.set_generation_bytes(4 << 20);
    ingest(&store, trigger - 1);
    assert_eq!(
        store.generation_count(T).unwrap(),
        1,
        "{} bytes",
        disk(&store)
    );
    ingest(&store, 1);
    assert_eq!(
        store.generation_count(T).unwrap(),
        2,
        "{} bytes",
        disk(&store)
    );
    // The count starts again in the new generation.
    ingest(&store, trigger - 1);
    assert_eq!(store.generation_count(T).unwrap(), 2);
    assert!(disk(&store) < 4 << 20, "{} bytes", disk(&store));

    // 16 MiB generations: a quarter is 4 MiB, more than `trigger + 8` tables hold.
    let dir = TempDir::new().unwrap();
    let (store, _) = open(&dir);
    store.set_generation_bytes(16 << 20);
    ingest(&store, trigger + 8);
    assert_eq!(
        store.generation_count(T).unwrap(),
        1,
        "{} bytes",
        disk(&store)
    );
}
