//! Tests of the embedded store against HBase's semantics.

use super::{EmbeddedStore, EmbeddedWriter, OpenMode};
use crate::schema::{self, Bloom, Compression, FamilySpec, TableSpec};
use crate::table::{Cell, Mutation, Row, ScanSpec, TableReader, TableWriter};
use crate::Error;
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tempfile::TempDir;

const T: &str = "readings";
const TTL_SECS: u64 = 10;
const NOW: i64 = 1_700_000_000_000;

fn family(name: &'static str, ttl_secs: Option<u64>) -> FamilySpec {
    FamilySpec {
        name,
        ttl_secs,
        compression: Compression::None,
        bloom: Bloom::None,
        max_versions: 1,
    }
}

/// A table whose family `t` keeps cells for `TTL_SECS`, plus two families without TTL.
fn table() -> TableSpec {
    TableSpec {
        name: T,
        families: vec![
            family("t", Some(TTL_SECS)),
            family("tt", None),
            family("a", None),
        ],
        split_keys: Vec::new(),
    }
}

/// A clock stuck at `NOW` until the test moves it.
fn clock() -> (Arc<AtomicI64>, Arc<dyn Fn() -> i64 + Send + Sync>) {
    let now = Arc::new(AtomicI64::new(NOW));
    let read = now.clone();
    (now, Arc::new(move || read.load(Ordering::SeqCst)))
}

fn open(dir: &TempDir) -> (EmbeddedStore, Arc<AtomicI64>) {
    let (now, clock) = clock();
    let store = EmbeddedStore::open_with_clock(dir.path(), &[table()], clock).unwrap();
    (store, now)
}

fn cell(family: &str, qualifier: &[u8], ts_ms: i64, value: &[u8]) -> Cell {
    Cell {
        family: family.into(),
        qualifier: qualifier.to_vec(),
        ts_ms,
        value: value.to_vec(),
    }
}

fn put(row: &[u8], cells: Vec<Cell>) -> Mutation {
    Mutation::Put {
        table: T,
        row: row.to_vec(),
        cells,
    }
}

/// A put of one live `t:v` cell.
fn put_v(row: &[u8], value: &[u8]) -> Mutation {
    put(row, vec![cell("t", b"v", NOW, value)])
}

fn write(store: &EmbeddedStore, mutations: Vec<Mutation>) {
    let mut w = store.writer();
    w.write(mutations).unwrap();
    w.flush().unwrap();
}

fn keys(rows: &[Row]) -> Vec<&[u8]> {
    rows.iter().map(|r| r.key.as_slice()).collect()
}

fn scan(store: &EmbeddedStore, start: &[u8], stop: &[u8], limit: Option<usize>) -> Vec<Row> {
    let spec = ScanSpec {
        start: start.to_vec(),
        stop: stop.to_vec(),
        limit,
    };
    store.scan(T, &spec).unwrap()
}

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

    let a = store.get(T, b"a").unwrap().unwrap();
    assert_eq!(a.cells, vec![cell("t", b"v", NOW, b"1")]);
    assert_eq!(store.get(T, b"a_").unwrap(), None);
    assert_eq!(store.get(T, b"c").unwrap(), None);
    // A key holding the separator cannot exist, and must not match row `a`'s cells.
    assert_eq!(store.get(T, b"a\x00t").unwrap(), None);

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

    let row = store.get(T, b"r").unwrap().unwrap();
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
    assert_eq!(store.get(T, b"gone").unwrap(), None);
    assert_eq!(
        store.get(T, b"mixed").unwrap().unwrap().cells,
        vec![cell("tt", b"v", 0, b"kept")]
    );
    // A row whose cells all expired does not count against the limit.
    assert_eq!(keys(&scan(&store, b"", b"", Some(1))), [&b"edge"[..]]);

    now.fetch_add(1, Ordering::SeqCst);
    assert_eq!(store.get(T, b"edge").unwrap(), None);
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

    let keyspace = &store.inner.tables[0].keyspace;
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
        store.get(T, b"a").unwrap().unwrap().cells,
        vec![cell("tt", b"3", 300, b"c")]
    );
    assert_eq!(store.get(T, b"a_b").unwrap().unwrap().cells.len(), 3);
    assert_eq!(store.get(T, b"ab").unwrap().unwrap().cells.len(), 3);

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
        store.get(T, b"ab").unwrap().unwrap().cells,
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
    assert_eq!(store.get(T, b"a_b").unwrap(), None);
    assert_eq!(keys(&store.dump(T).unwrap()), [&b"a"[..], b"ab"]);
}

fn ts_of(store: &EmbeddedStore, row: &[u8]) -> (i64, Vec<u8>) {
    let c = store.get(T, row).unwrap().unwrap().cells.remove(0);
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
}

#[test]
fn writes_show_on_flush_and_survive_reopen_after_persist() {
    let dir = TempDir::new().unwrap();
    {
        let (store, _) = open(&dir);
        let mut w = store.writer();
        w.write(vec![put_v(b"a", b"1")]).unwrap();
        assert_eq!(store.get(T, b"a").unwrap(), None);
        w.flush().unwrap();
        assert!(store.get(T, b"a").unwrap().is_some());
        // Dropping a writer commits what it still holds.
        w.write(vec![put_v(b"b", b"2")]).unwrap();
        drop(w);
        store.persist().unwrap();
    }
    let (store, _) = open(&dir);
    assert_eq!(keys(&store.dump(T).unwrap()), [&b"a"[..], b"b"]);
    assert_eq!(
        store.get(T, b"b").unwrap().unwrap().cells,
        vec![cell("t", b"v", NOW, b"2")]
    );
}

#[test]
fn opens_hourglass_tables_and_refuses_a_second_open() {
    let dir = TempDir::new().unwrap();
    let store = EmbeddedStore::open(dir.path(), &schema::all_tables()).unwrap();
    let mut w = store.writer();
    let wide = Mutation::Put {
        table: schema::HOURLY_TABLE,
        row: b"dev1_2024010100".to_vec(),
        cells: vec![cell(schema::FAMILY, b"42", i64::MAX / 2, b"v")],
    };
    w.write(vec![wide]).unwrap();
    w.flush().unwrap();
    assert_eq!(store.dump(schema::HOURLY_TABLE).unwrap().len(), 1);
    assert!(store.dump(schema::NARROW_TABLE).unwrap().is_empty());

    let err = EmbeddedStore::open(dir.path(), &schema::all_tables()).unwrap_err();
    assert!(
        matches!(&err, Error::Embedded(_))
            && !err.is_retriable()
            && err.to_string().contains("is locked")
            && err.to_string().contains("--store"),
        "{err}"
    );
}

#[test]
fn invalid_mutations_are_refused_and_queue_nothing() {
    let dir = TempDir::new().unwrap();
    let (store, _) = open(&dir);
    let mut w = store.writer();
    let refused = [
        put_v(b"a\x00b", b"1"),
        put_v(b"", b"1"),
        put(b"r", vec![cell("nope", b"v", NOW, b"1")]),
        Mutation::Put {
            table: "nope",
            row: b"r".to_vec(),
            cells: vec![],
        },
        put(b"r", vec![cell("t", &vec![b'q'; 70_000], NOW, b"1")]),
    ];
    for bad in refused {
        let err = w.write(vec![put_v(b"ok", b"1"), bad]).unwrap_err();
        assert!(matches!(err, Error::Invalid(_)), "{err}");
    }
    w.flush().unwrap();
    assert!(store.dump(T).unwrap().is_empty());
    assert!(matches!(
        store.scan("nope", &ScanSpec::default()),
        Err(Error::Invalid(_))
    ));
}

#[test]
fn table_specs_the_store_cannot_honour_are_refused() {
    let dir = TempDir::new().unwrap();
    let mut versions = table();
    versions.families[0].max_versions = 3;
    let mut separator = table();
    separator.families[0].name = "t\x00";
    for spec in [versions, separator] {
        let err = EmbeddedStore::open(dir.path(), &[spec]).unwrap_err();
        assert!(matches!(err, Error::Invalid(_)), "{err}");
    }
    let err = EmbeddedStore::open(dir.path(), &[table(), table()]).unwrap_err();
    assert!(matches!(err, Error::Invalid(_)), "{err}");
}

/// One step of the model test.
#[derive(Debug, Clone)]
enum Op {
    Put {
        row: Vec<u8>,
        qualifier: Vec<u8>,
        ts: i64,
        value: u8,
    },
    Delete {
        row: Vec<u8>,
        ts: i64,
    },
    Flush,
}

fn row_key() -> impl Strategy<Value = Vec<u8>> {
    // Few distinct bytes, so rows often prefix one another.
    proptest::collection::vec(prop::sample::select(vec![b'a', b'b', b'_']), 1..4)
}

fn op() -> impl Strategy<Value = Op> {
    // Timestamps straddle the TTL boundary of family `t` (NOW - 10 s).
    let ts = (0i64..=20).prop_map(|s| NOW - s * 1000);
    prop_oneof![
        6 => (row_key(), prop::sample::select(vec![&b"v"[..], b"x", b"10"]), ts.clone(), any::<u8>())
            .prop_map(|(row, q, ts, value)| Op::Put { row, qualifier: q.to_vec(), ts, value }),
        1 => (row_key(), ts).prop_map(|(row, ts)| Op::Delete { row, ts }),
        1 => Just(Op::Flush),
    ]
}

/// Rows → qualifier → (timestamp, value), with last-write-wins puts.
type Model = BTreeMap<Vec<u8>, BTreeMap<Vec<u8>, (i64, u8)>>;

fn model_scan(model: &Model, start: &[u8], stop: &[u8], limit: Option<usize>) -> Vec<Row> {
    let ttl_ms = (TTL_SECS * 1000) as i64;
    model
        .iter()
        .filter(|(row, _)| row.as_slice() >= start && (stop.is_empty() || row.as_slice() < stop))
        .map(|(row, cells)| Row {
            key: row.clone(),
            cells: cells
                .iter()
                .filter(|(_, (ts, _))| *ts >= NOW - ttl_ms)
                .map(|(q, (ts, v))| cell("t", q, *ts, &[*v]))
                .collect(),
        })
        .filter(|row| !row.cells.is_empty())
        .take(limit.unwrap_or(usize::MAX))
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn scans_return_exactly_the_model_s_rows(
        ops in proptest::collection::vec(op(), 1..60),
        start in proptest::collection::vec(prop::sample::select(vec![b'a', b'b', b'_', 0u8]), 0..4),
        stop in proptest::collection::vec(prop::sample::select(vec![b'a', b'b', b'_', 0u8]), 0..4),
        limit in proptest::option::of(0usize..6),
    ) {
        let dir = TempDir::new().unwrap();
        let (store, _) = open(&dir);
        let mut model = Model::new();
        let mut w = store.writer();
        for op in ops {
            match op {
                Op::Put { row, qualifier, ts, value } => {
                    w.write(vec![put(&row, vec![cell("t", &qualifier, ts, &[value])])]).unwrap();
                    model.entry(row).or_default().insert(qualifier, (ts, value));
                }
                Op::Delete { row, ts } => {
                    w.write(vec![Mutation::DeleteRow { table: T, row: row.clone(), ts_ms: ts }]).unwrap();
                    if let Some(cells) = model.get_mut(&row) {
                        cells.retain(|_, (cell_ts, _)| *cell_ts > ts);
                    }
                }
                Op::Flush => w.flush().unwrap(),
            }
        }
        w.flush().unwrap();

        let got = scan(&store, &start, &stop, limit);
        prop_assert_eq!(got, model_scan(&model, &start, &stop, limit));
        for row in model.keys() {
            let expected = model_scan(&model, row, &[], Some(1)).into_iter().find(|r| &r.key == row);
            prop_assert_eq!(store.get(T, row).unwrap(), expected);
        }
    }
}

/// One reading as the replay job writes it: a narrow row with `t:v` and `t:x`, and one cell of
/// the device's hourly wide row.
fn reading(device: u32, ts_ms: i64) -> [Mutation; 2] {
    let salt = device % schema::SALT_BUCKETS;
    let narrow_row = format!("{salt:02}_dev{device:06}_{:019}", i64::MAX - ts_ms).into_bytes();
    let hour = ts_ms - ts_ms.rem_euclid(3_600_000);
    let wide_row = format!("dev{device:06}_{hour:013}").into_bytes();
    let offset = (ts_ms - hour) / 1000;
    let value = (f64::from(device) + 0.5).to_be_bytes().to_vec();
    [
        Mutation::Put {
            table: schema::NARROW_TABLE,
            row: narrow_row,
            cells: vec![
                Cell {
                    family: schema::FAMILY.into(),
                    qualifier: b"v".to_vec(),
                    ts_ms,
                    value: value.clone(),
                },
                Cell {
                    family: schema::FAMILY.into(),
                    qualifier: b"x".to_vec(),
                    ts_ms,
                    value: vec![1],
                },
            ],
        },
        Mutation::Put {
            table: schema::HOURLY_TABLE,
            row: wide_row,
            cells: vec![Cell {
                family: schema::FAMILY.into(),
                qualifier: offset.to_string().into_bytes(),
                ts_ms,
                value,
            }],
        },
    ]
}

/// CPU time this thread has run, from Linux's scheduler statistics; zero elsewhere.
fn thread_cpu() -> Duration {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .map_or(Duration::ZERO, Duration::from_nanos)
}

/// CPU time of the whole process (writers, fjall's flush and compaction threads), in ticks.
fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are the 12th and 13th.
    let fields: Vec<u64> = stat
        .rsplit(')')
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|f| f.parse().ok())
        .collect();
    Duration::from_millis(fields.iter().sum::<u64>() * 10)
}

/// Time spent inside one writer, on the wall clock and on the CPU, and CPU spent building the
/// mutations it was given.
#[derive(Default)]
struct WriterTime {
    wall: Duration,
    cpu: Duration,
    building_cpu: Duration,
}

/// Feeds `readings` readings through one writer, timing the writer alone.
fn feed(store: &EmbeddedStore, worker: u32, readings: u32) -> WriterTime {
    const DEVICES: u32 = 10_000;
    const CHUNK: u32 = 2048;
    let mut writer = store.writer();
    let mut time = WriterTime::default();
    // Recent readings, so the 90-day TTL of hourglass's tables keeps them visible.
    let start_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
        - 24 * 3_600_000;
    let mut timed = |f: &mut dyn FnMut()| {
        let (wall, cpu) = (Instant::now(), thread_cpu());
        f();
        time.wall += wall.elapsed();
        time.cpu += thread_cpu() - cpu;
    };
    for first in (0..readings).step_by(CHUNK as usize) {
        let building = thread_cpu();
        let chunk: Vec<Mutation> = (first..(first + CHUNK).min(readings))
            .flat_map(|n| {
                let device = worker * DEVICES + n % DEVICES;
                reading(device, start_ms + i64::from(n / DEVICES) * 1000)
            })
            .collect();
        time.building_cpu += thread_cpu() - building;
        let mut chunk = Some(chunk);
        timed(&mut || writer.write(chunk.take().unwrap()).unwrap());
    }
    timed(&mut || writer.flush().unwrap());
    time
}

/// Writer throughput, one and two writers: run
/// `cargo test --release -p hourglass-sinks -- --ignored bench --nocapture`.
/// Readings per writer: `HOURGLASS_BENCH_READINGS` (default 1,000,000).
///
/// Prints cells per second of time spent inside `write`/`flush`, on the wall clock and per
/// CPU-second of the writer thread (the figure that does not depend on what else the machine
/// runs), and the CPU the whole process spent (fjall flushes and compacts in the background).
#[test]
#[ignore = "benchmark; run in release with --ignored bench --nocapture"]
fn bench_writer_throughput() {
    let readings: u32 = std::env::var("HOURGLASS_BENCH_READINGS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    for writers in [1u32, 2] {
        let dir = TempDir::new().unwrap();
        let store = EmbeddedStore::open(dir.path(), &schema::all_tables()).unwrap();
        let (wall, cpu) = (Instant::now(), process_cpu());
        let times: Vec<WriterTime> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..writers)
                .map(|w| {
                    let store = store.clone();
                    s.spawn(move || feed(&store, w, readings))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let (wall, cpu) = (wall.elapsed(), process_cpu() - cpu);
        let persist = Instant::now();
        store.persist().unwrap();
        let persist = persist.elapsed();

        let cells = f64::from(readings) * 3.0;
        let total_cells = cells * f64::from(writers);
        let in_wall: f64 = times.iter().map(|t| cells / t.wall.as_secs_f64()).sum();
        let in_cpu: f64 = times
            .iter()
            .map(|t| cells / t.cpu.as_secs_f64())
            .sum::<f64>()
            / f64::from(writers);
        let building: Duration = times.iter().map(|t| t.building_cpu).sum();
        let store_us = cpu.saturating_sub(building).as_secs_f64() * 1e6 / total_cells;
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        println!(
            "writers={writers}, {total_cells} cells ({} readings):\n  \
             inside write/flush: {in_wall:.0} cells/s wall (all writers), {in_cpu:.0} cells per \
             CPU-second of a writer thread\n  \
             store CPU (process minus building mutations, so writers + fjall flushes and \
             compactions): {store_us:.2} µs/cell, at most {:.0} cells/s on {cores} cores\n  \
             whole run: {:.0} cells/s wall; persist {persist:?}",
            readings * writers,
            cores as f64 * 1e6 / store_us,
            total_cells / wall.as_secs_f64(),
        );
        let rows = store.dump(schema::NARROW_TABLE).unwrap().len();
        assert_eq!(rows, (readings * writers) as usize);
    }
}

/// A store in `dir` with ten write batches in its journal, closed; returns the journal's path.
fn store_with_ten_batches(dir: &TempDir) -> std::path::PathBuf {
    let (store, _) = open(dir);
    for batch in 0..10u8 {
        write(&store, vec![put_v(&[b'a' + batch], b"v")]);
    }
    drop(store);
    dir.path().join("0.jnl")
}

fn open_as(dir: &TempDir, mode: OpenMode) -> crate::Result<EmbeddedStore> {
    let (_, clock) = clock();
    EmbeddedStore::open_with_options(dir.path(), &[table()], clock, mode)
}

#[test]
fn a_damaged_journal_is_refused_unchanged_unless_recovering() {
    let dir = TempDir::new().unwrap();
    let journal = store_with_ten_batches(&dir);
    let mut bytes = std::fs::read(&journal).unwrap();
    let written = bytes.iter().rposition(|&b| b != 0).unwrap();
    bytes[written / 2] ^= 0x01;
    std::fs::write(&journal, &bytes).unwrap();

    for mode in [OpenMode::ReadOnly, OpenMode::ReadWrite] {
        let err = open_as(&dir, mode).unwrap_err();
        assert!(
            matches!(&err, Error::Embedded(e) if e.to_string().contains("damaged journal") && e.to_string().contains("--recover")),
            "{mode:?}: {err}"
        );
        assert_eq!(std::fs::read(&journal).unwrap(), bytes, "{mode:?}");
    }

    let store = open_as(&dir, OpenMode::Recover).unwrap();
    let dropped = store.dropped_on_open();
    assert_eq!(dropped.len(), 1);
    assert!(dropped[0].lost_batches > 0 && dropped[0].lost_cells > 0);
    let kept = store.dump(T).unwrap().len();
    assert!(kept < 10, "{kept} rows kept");
}

#[test]
fn read_only_opens_change_nothing_and_never_create_a_store() {
    let dir = TempDir::new().unwrap();
    let journal = store_with_ten_batches(&dir);
    let before = std::fs::read(&journal).unwrap();
    let store = open_as(&dir, OpenMode::ReadOnly).unwrap();
    assert_eq!(store.dump(T).unwrap().len(), 10);
    drop(store);
    assert_eq!(std::fs::read(&journal).unwrap(), before);

    let empty = TempDir::new().unwrap();
    std::fs::write(empty.path().join("notes"), "x").unwrap();
    let err = open_as(&empty, OpenMode::ReadOnly).unwrap_err();
    assert!(
        matches!(&err, Error::Embedded(e) if e.to_string().contains("no embedded store")),
        "{err}"
    );
    let left: Vec<_> = std::fs::read_dir(empty.path()).unwrap().collect();
    assert_eq!(left.len(), 1);
}
