//! One conformance suite, run against both backends through [`sinks::open`]: what the dataflow
//! and the queries rely on must hold for the embedded store and HBase alike. Gets, multi-gets
//! (order, missing rows), scan ranges (prefix, start/stop, open end, limit, time range), row,
//! column and version deletes, major compactions, TTLs and
//! cell timestamps (`VERSIONS => 1`: the newest timestamp wins), and cell versions
//! (`VERSIONS => 3`: reads ask for versions and get at most three, newest first). `ScanSpec`
//! has no reverse scan, so there is none to check.
//!
//! The HBase run needs the Thrift gateways on 127.0.0.1:9090/9091 (`scripts/services.sh up
//! hbase`); it fails when they are not reachable. Outside CI, `HOURGLASS_SKIP_HBASE=1` skips it.
//! It creates tables of its own, named after the process, and drops them when done.

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sinks::admin::Created;
use sinks::config::{StoreConfig, StoreKind};
use sinks::schema::{Bloom, Compression, DataBlockEncoding, FamilySpec, TableSpec};
use sinks::table::{Cell, Column, KeyBatch, Mutation, Row, ScanSpec, TableReader, TimeRange};
use sinks::{OpenOptions, Store};

const THRIFT1: &str = "127.0.0.1:9090";
const THRIFT2: &str = "127.0.0.1:9091";
const FAMILY: &str = "t";
/// TTL of the second table's family: long enough that a cell written a minute ago is visible
/// on both backends, short enough that one written two hours ago is gone.
const TTL_SECS: u64 = 3600;

/// The family of the `versions` table that keeps [`VERSIONS`] versions of a cell, for
/// [`TTL_SECS`]; its other family, [`FAMILY`], keeps one forever.
const VERSIONED: &str = "v";
/// Versions [`VERSIONED`] keeps.
const VERSIONS: u32 = 3;

/// The block size of the `ttl` table's family and of [`VERSIONED`] (HBase's default is 64 KiB).
const SMALL_BLOCK: u32 = 16 * 1024;

/// Rows per multi-get call of the `data` table: few, so that a multi-get of a few dozen rows
/// takes several calls.
const ROWS_PER_CALL: usize = 4;
/// Where the `data` table is split: the multi-get's `m/…` rows span its three regions.
const DATA_SPLITS: [&str; 2] = ["m/010", "m/020"];

/// The three tables of a run: `data` keeps cells forever, `ttl` for [`TTL_SECS`], `versions`
/// has a family of each kind ([`VERSIONED`]).
struct Tables {
    data: &'static str,
    ttl: &'static str,
    versions: &'static str,
    /// Whether the family's puts are stored packed (`FamilySpec::packed`, the embedded store's
    /// layout of the narrow table; HBase ignores it).
    packed: bool,
    /// Whether the `data` table maps rows `p/<series>/<second:10>` to series points
    /// ([`SERIES`]) and the `ttl` table rows `w/<series>/<hour start>` to one point per offset
    /// cell ([`WIDE`]): the embedded store keeps them in series runs when asked, HBase ignores
    /// it.
    series: bool,
}

/// The `data` table's rows as series points in the `series` run: `p/<series>/<second:10>`,
/// `v` the value as Rust prints a double, `x` the extra, stamped at the second.
const SERIES: sinks::schema::SeriesLayout = sinks::schema::SeriesLayout {
    name: "conformance-v1",
    split: series_split,
    join: series_join,
    series_in,
    stamp: |ts| ts.checked_mul(1000),
    family: FAMILY,
    points: sinks::schema::SeriesPoints::Row {
        value: b"v",
        extra: b"x",
    },
    parse: |b| std::str::from_utf8(b).ok()?.parse().ok(),
    render: |v, out| out.extend_from_slice(v.to_string().as_bytes()),
};

/// The `ttl` table's wide rows in the `series` run, as the sensors' hourly rows are: row
/// `w/<series>/<hour start, seconds>`, a point per cell `<offset>` (`0`..`3599`, plain
/// decimal) holding the value as Rust prints a double, every cell stamped with the hour's last
/// millisecond; other qualifiers (`n`, `sum`) are the row's generic cells.
const WIDE: sinks::schema::SeriesLayout = sinks::schema::SeriesLayout {
    name: "conformance-wide-v1",
    split: wide_split,
    join: |series, hour, out| out.extend_from_slice(format!("w/{series}/{hour}").as_bytes()),
    series_in: |_, _| None,
    stamp: |hour| hour.checked_add(3600)?.checked_mul(1000)?.checked_sub(1),
    family: FAMILY,
    points: sinks::schema::SeriesPoints::Cells {
        time: |hour, q| {
            let text = std::str::from_utf8(q).ok()?;
            let offset: i64 = text.parse().ok()?;
            let canonical = text.bytes().all(|b| b.is_ascii_digit()) && offset.to_string() == text;
            (canonical && offset < 3600).then(|| hour.checked_add(offset))?
        },
        row_time: |ts| ts - ts.rem_euclid(3600),
        qualifier: |hour, ts, out| out.extend_from_slice((ts - hour).to_string().as_bytes()),
    },
    parse: |b| std::str::from_utf8(b).ok()?.parse().ok(),
    render: |v, out| out.extend_from_slice(v.to_string().as_bytes()),
};

fn wide_split(row: &[u8]) -> Option<(&str, i64)> {
    let text = std::str::from_utf8(row).ok()?.strip_prefix("w/")?;
    let (series, hour) = text.split_once('/')?;
    let hour: i64 = hour.parse().ok()?;
    (!series.is_empty() && !series.contains('/') && hour >= 0 && hour % 3600 == 0)
        .then_some((series, hour))
}

fn series_split(row: &[u8]) -> Option<(&str, i64)> {
    let text = std::str::from_utf8(row).ok()?.strip_prefix("p/")?;
    let (series, ts) = text.split_once('/')?;
    if series.is_empty() || ts.len() != 10 || !ts.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((series, ts.parse().ok()?))
}

fn series_join(series: &str, ts: i64, out: &mut Vec<u8>) {
    out.extend_from_slice(format!("p/{series}/{ts:010}").as_bytes());
}

fn series_in(start: &[u8], stop: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(start).ok()?.strip_prefix("p/")?;
    let (series, _) = text.split_once('/')?;
    let prefix = format!("p/{series}/");
    let successor = format!("p/{series}0");
    (stop.starts_with(prefix.as_bytes()) || stop == successor.as_bytes())
        .then(|| series.to_string())
}

impl Tables {
    fn new(backend: &str) -> Self {
        let name = |what: &str| -> &'static str {
            Box::leak(format!("hg_conformance_{backend}_{what}_{}", std::process::id()).into())
        };
        Tables {
            data: name("data"),
            ttl: name("ttl"),
            versions: name("versions"),
            packed: false,
            series: false,
        }
    }

    fn specs(&self) -> Vec<TableSpec> {
        let family = |ttl_secs| FamilySpec {
            name: FAMILY,
            ttl_secs,
            compression: Compression::None,
            bloom: Bloom::Row,
            max_versions: 1,
            block_size: sinks::schema::DEFAULT_BLOCK_SIZE,
            data_block_encoding: sinks::schema::DataBlockEncoding::None,
            packed: self.packed,
            // Packed, one qualifier goes apart, as the hourly table's summary does.
            packed_apart: if self.packed { &["q2"] } else { &[] },
        };
        let spec = |name, families| TableSpec {
            key: if self.series && name == self.data {
                sinks::schema::KeyCodec::raw().with_series(SERIES)
            } else if self.series && name == self.ttl {
                sinks::schema::KeyCodec::raw().with_series(WIDE)
            } else {
                sinks::schema::KeyCodec::raw()
            },
            name,
            families,
            split_keys: Vec::new(),
            get_rows_per_call: sinks::schema::DEFAULT_GET_ROWS_PER_CALL,
        };
        let data = TableSpec {
            split_keys: DATA_SPLITS.iter().map(|k| k.as_bytes().to_vec()).collect(),
            get_rows_per_call: ROWS_PER_CALL,
            ..spec(self.data, vec![family(None)])
        };
        // A packed family keeps one version: only `FAMILY` follows `packed`. Its blocks are laid
        // out otherwise than HBase's defaults (the embedded store ignores both), as is the
        // `ttl` table's family: every read below runs on each encoding hourglass declares.
        let versioned = FamilySpec {
            name: VERSIONED,
            max_versions: VERSIONS,
            packed: false,
            packed_apart: &[],
            block_size: SMALL_BLOCK,
            data_block_encoding: DataBlockEncoding::RowIndexV1,
            ..family(Some(TTL_SECS))
        };
        let fast_diff = FamilySpec {
            block_size: SMALL_BLOCK,
            data_block_encoding: DataBlockEncoding::FastDiff,
            ..family(Some(TTL_SECS))
        };
        vec![
            data,
            spec(self.ttl, vec![fast_diff]),
            spec(self.versions, vec![family(None), versioned]),
        ]
    }

    fn names(&self) -> [&'static str; 3] {
        [self.data, self.ttl, self.versions]
    }
}

fn options() -> OpenOptions {
    OpenOptions {
        // HBase's rule, which the embedded store applies only when asked (see OpenOptions).
        newest_timestamp_wins: true,
        ..OpenOptions::default()
    }
}

/// The real time in milliseconds: HBase measures TTLs against it, and so does the embedded
/// store with its default clock.
fn now_ms() -> i64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
    i64::try_from(since.as_millis()).unwrap()
}

fn cell(qualifier: &str, ts_ms: i64, value: &str) -> Cell {
    Cell {
        family: FAMILY.into(),
        qualifier: qualifier.as_bytes().to_vec(),
        ts_ms,
        value: value.as_bytes().to_vec(),
    }
}

fn put(table: &'static str, row: &str, cells: Vec<Cell>) -> Mutation {
    Mutation::Put {
        table,
        row: row.as_bytes().to_vec(),
        cells,
    }
}

fn write(store: &Store, mutations: Vec<Mutation>) {
    let mut w = store.writer();
    w.write(mutations).expect("write");
    w.flush().expect("flush");
}

fn keys(rows: &[Row]) -> Vec<String> {
    rows.iter()
        .map(|r| String::from_utf8_lossy(&r.key).into_owned())
        .collect()
}

fn values(row: Option<&Row>) -> Vec<(String, i64, String)> {
    row.map(|r| {
        r.cells
            .iter()
            .map(|c| {
                (
                    String::from_utf8_lossy(&c.qualifier).into_owned(),
                    c.ts_ms,
                    String::from_utf8_lossy(&c.value).into_owned(),
                )
            })
            .collect()
    })
    .unwrap_or_default()
}

fn get(store: &Store, table: &str, row: &str) -> Option<Row> {
    store
        .reader()
        .get(table, row.as_bytes(), None)
        .expect("get")
}

/// The keys of a scan's rows; a keys-only scan of the same spec must pass on the same keys.
fn scan(store: &Store, table: &str, spec: ScanSpec) -> Vec<String> {
    let rows = store.reader().scan(table, &spec).expect("scan");
    same_keys_only(&store.reader(), table, &spec, &rows);
    keys(&rows)
}

fn same_keys_only(reader: &sinks::Reader, table: &str, spec: &ScanSpec, rows: &[Row]) {
    let mut seen = Vec::new();
    let n = reader
        .scan_keys(table, spec, &mut |key| {
            seen.push(String::from_utf8_lossy(key).into_owned());
        })
        .expect("keys-only scan");
    assert_eq!(seen, keys(rows), "scan_keys of {spec:?}");
    assert_eq!(n, rows.len(), "scan_keys' count of {spec:?}");
}

/// Every check, in turn; row prefixes keep them apart, and the scan rows sort last.
fn conforms(store: &Store, t: &Tables) {
    let now = now_ms();
    put_and_get(store, t, now);
    get_many(store, t, now);
    concurrent_gets(store, t, now);
    deletes(store, t, now);
    column_deletes(store, t, now);
    version_deletes(store, t, now);
    key_batches(store, t, now);
    timestamps(store, t, now);
    ttl(store, t, now);
    time_ranges(store, t, now);
    scans(store, t, now);
    versions(store, t, now);
    series_points(store, t);
    let wide = wide_rows(store, t, now);
    for table in t.names() {
        store
            .admin()
            .major_compact(table)
            .expect("a major compaction is accepted");
    }
    assert_eq!(
        values(get(store, t.data, "a/row").as_ref()).len(),
        2,
        "a major compaction changes no read"
    );
    assert_eq!(
        values(get(store, t.ttl, &wide).as_ref()),
        wide_row_after(now),
        "a major compaction changes no read of a wide row"
    );
}

fn put_and_get(store: &Store, t: &Tables, now: i64) {
    write(
        store,
        vec![put(
            t.data,
            "a/row",
            vec![cell("q2", now, "two"), cell("q1", now - 5, "one")],
        )],
    );
    let row = get(store, t.data, "a/row").expect("the row just written");
    assert_eq!(row.key, b"a/row");
    assert_eq!(
        values(Some(&row)),
        [
            ("q1".into(), now - 5, "one".into()),
            ("q2".into(), now, "two".into())
        ],
        "cells ordered by qualifier, each with its own timestamp"
    );
    assert_eq!(get(store, t.data, "a/missing"), None);
    assert_eq!(
        get(store, t.data, "a/ro"),
        None,
        "a prefix of a row is not the row"
    );
}

/// `(start key, rows read)` of each region of the `data` table the reader counted.
fn data_reads(reader: &sinks::Reader, t: &Tables) -> Vec<(String, u64)> {
    reader
        .region_reads()
        .into_iter()
        .filter(|r| r.table == t.data)
        .map(|r| (r.start, r.rows))
        .collect()
}

fn get_many(store: &Store, t: &Tables, now: i64) {
    write(
        store,
        vec![
            put(t.data, "b/1", vec![cell("v", now, "1")]),
            put(t.data, "b/3", vec![cell("v", now, "3")]),
        ],
    );
    let asked: Vec<Vec<u8>> = ["b/3", "b/2", "b/1", "b/4"]
        .iter()
        .map(|k| k.as_bytes().to_vec())
        .collect();
    let reader = store.reader();
    let calls = |reader: &sinks::Reader| {
        Some((
            reader.stat("get_row_calls")?,
            reader.stat("get_rows_calls")?,
        ))
    };
    let before = calls(&reader);
    let got = reader.get_many(t.data, &asked, None).expect("get_many");
    // HBase answers a multi-get with one `getRows`; a reader that falls back to the trait's
    // default would make one `getRow` per key (the embedded store has no calls to count).
    if let (Some((gets, multi_gets)), Some(before)) = (calls(&reader), before) {
        assert_eq!(
            (gets - before.0, multi_gets - before.1),
            (0, 1),
            "get_many of {} rows must be one multi-get call, not one get per row",
            asked.len()
        );
    }
    let got: Vec<Option<String>> = got
        .iter()
        .map(|r| {
            r.as_ref()
                .map(|r| String::from_utf8_lossy(&r.key).into_owned())
        })
        .collect();
    assert_eq!(
        got,
        [Some("b/3".to_string()), None, Some("b/1".to_string()), None],
        "rows in the order asked, None where missing"
    );
    assert!(store
        .reader()
        .get_many(t.data, &[], None)
        .unwrap()
        .is_empty());

    // More keys than one HBase call takes, over three regions: the answers of its calls (made
    // in parallel) come back in the order asked.
    let many: Vec<String> = (0..29).map(|i| format!("m/{i:03}")).collect();
    write(
        store,
        many.iter()
            .step_by(3)
            .map(|k| put(t.data, k, vec![cell("v", now, k)]))
            .collect(),
    );
    let asked: Vec<Vec<u8>> = many.iter().rev().map(|k| k.as_bytes().to_vec()).collect();
    let before = calls(&reader);
    let reads_before = data_reads(&reader, t);
    let got = reader.get_many(t.data, &asked, None).expect("get_many");
    if let (Some((gets, multi_gets)), Some(before)) = (calls(&reader), before) {
        // 29 rows at most 4 a call: 8 calls, runs of keys cut evenly whatever the regions
        // (the gateway sends each call's gets to their region servers).
        assert_eq!(
            (gets - before.0, multi_gets - before.1),
            (0, 29u64.div_ceil(ROWS_PER_CALL as u64)),
            "as few multi-get calls as {ROWS_PER_CALL} rows a call allow"
        );
        let reads: Vec<(String, u64)> = data_reads(&reader, t)
            .into_iter()
            .map(|(start, n)| {
                let was = reads_before
                    .iter()
                    .find(|(s, _)| *s == start)
                    .map_or(0, |r| r.1);
                (start, n - was)
            })
            .collect();
        assert_eq!(
            reads,
            [
                ("".to_string(), 10),
                ("m/010".into(), 10),
                ("m/020".into(), 9)
            ],
            "rows read per region, by start key"
        );
    } else {
        assert!(
            reader.region_reads().is_empty(),
            "a store without regions counts none"
        );
    }
    let want: Vec<Option<String>> = many
        .iter()
        .enumerate()
        .rev()
        .map(|(i, k)| (i % 3 == 0).then(|| k.clone()))
        .collect();
    let got: Vec<Option<String>> = got
        .iter()
        .map(|r| {
            r.as_ref().map(|r| {
                assert_eq!(values(Some(r))[0].2, String::from_utf8_lossy(&r.key));
                String::from_utf8_lossy(&r.key).into_owned()
            })
        })
        .collect();
    assert_eq!(got, want, "rows in the order asked, None where missing");
}

/// Gets from many threads at once (HBase sends those that meet as one multi-get): each answer
/// is the row asked for, within the time range asked, `None` where there is none.
fn concurrent_gets(store: &Store, t: &Tables, now: i64) {
    let rows: Vec<String> = (0..48).map(|i| format!("g/{i:03}")).collect();
    write(
        store,
        rows.iter()
            .step_by(2)
            .map(|k| put(t.data, k, vec![cell("v", now, k)]))
            .collect(),
    );
    let reader = store.reader();
    let ranges = [
        None,
        Some(TimeRange::new(now, now + 1)),
        Some(TimeRange::new(now + 1, now + 2)),
    ];
    std::thread::scope(|s| {
        for thread in 0..12usize {
            let (reader, rows, ranges) = (&reader, &rows, &ranges);
            s.spawn(move || {
                for n in 0..40usize {
                    let i = (thread * 7 + n * 5) % rows.len();
                    let time = ranges[(thread + n) % ranges.len()];
                    let got = reader.get(t.data, rows[i].as_bytes(), time).expect("get");
                    let visible = i % 2 == 0 && time.is_none_or(|r| r.min_ms <= now);
                    let want = visible.then(|| (rows[i].clone(), rows[i].clone()));
                    let got = got.map(|r| {
                        (
                            String::from_utf8_lossy(&r.key).into_owned(),
                            values(Some(&r))[0].2.clone(),
                        )
                    });
                    assert_eq!(got, want, "row {} within {time:?}", rows[i]);
                }
            });
        }
    });
}

fn deletes(store: &Store, t: &Tables, now: i64) {
    write(
        store,
        vec![put(
            t.data,
            "c/row",
            vec![cell("old", now - 10_000, "o"), cell("new", now, "n")],
        )],
    );
    write(
        store,
        vec![Mutation::DeleteRow {
            table: t.data,
            row: b"c/row".to_vec(),
            ts_ms: now - 5_000,
        }],
    );
    assert_eq!(
        values(get(store, t.data, "c/row").as_ref()),
        [("new".into(), now, "n".into())],
        "a delete hides the cells stamped at most its timestamp, and only those"
    );
    write(
        store,
        vec![Mutation::DeleteRow {
            table: t.data,
            row: b"c/row".to_vec(),
            ts_ms: now,
        }],
    );
    assert_eq!(get(store, t.data, "c/row"), None);
    assert!(scan(store, t.data, ScanSpec::prefix(b"c/")).is_empty());
    write(
        store,
        vec![put(t.data, "c/row", vec![cell("v", now + 1, "back")])],
    );
    assert_eq!(
        values(get(store, t.data, "c/row").as_ref()),
        [("v".into(), now + 1, "back".into())],
        "a put newer than the delete is visible"
    );
}

fn delete_column(
    table: &'static str,
    row: &str,
    family: &str,
    qualifier: &str,
    ts: i64,
) -> Mutation {
    Mutation::DeleteColumn {
        table,
        row: row.as_bytes().to_vec(),
        family: family.into(),
        qualifier: qualifier.as_bytes().to_vec(),
        ts_ms: ts,
    }
}

fn delete_version(table: &'static str, row: &str, qualifier: &str, ts: i64) -> Mutation {
    Mutation::DeleteVersion {
        table,
        row: row.as_bytes().to_vec(),
        family: FAMILY.into(),
        qualifier: qualifier.as_bytes().to_vec(),
        ts_ms: ts,
    }
}

/// Version deletes (HBase's `Delete.addColumn`): the version stamped exactly so goes, another
/// stamp deletes nothing, a put and a delete of one version in one write leave nothing (in
/// HBase whatever their order, in the embedded store in this order), and a newer put of the
/// column shows.
fn version_deletes(store: &Store, t: &Tables, now: i64) {
    let row = "l/row";
    write(
        store,
        vec![put(
            t.data,
            row,
            vec![cell("q1", now - 10, "one"), cell("q2", now - 10, "two")],
        )],
    );
    write(store, vec![delete_version(t.data, row, "q1", now - 10)]);
    write(store, vec![delete_version(t.data, row, "q2", now - 11)]);
    assert_eq!(
        values(get(store, t.data, row).as_ref()),
        [("q2".into(), now - 10, "two".into())],
        "only the version stamped as the delete goes"
    );
    write(
        store,
        vec![
            put(t.data, row, vec![cell("q3", now - 5, "three")]),
            delete_version(t.data, row, "q3", now - 5),
            delete_version(t.data, "l/missing", "q1", now),
        ],
    );
    assert_eq!(
        values(get(store, t.data, row).as_ref()),
        [("q2".into(), now - 10, "two".into())],
        "a version put and deleted in one write is gone"
    );
    write(
        store,
        vec![put(t.data, row, vec![cell("q1", now - 1, "again")])],
    );
    assert_eq!(
        values(get(store, t.data, row).as_ref()),
        [
            ("q1".into(), now - 1, "again".into()),
            ("q2".into(), now - 10, "two".into())
        ],
        "a newer put of a deleted column shows"
    );
}

/// Key batches (`TableWriter::write_keys`, an inverted index's entries): each entry a put of
/// the batch's value or a version delete, as the same mutations would be; an entry put and
/// deleted in one batch is gone, one deleted and then put again is not (netted first, as the
/// index's upkeep does: HBase hides a put of a version deleted in the same batch).
fn key_batches(store: &Store, t: &Tables, now: i64) {
    let mut first = KeyBatch::new(t.data, FAMILY, b"u", b"1");
    for row in ["n/a", "n/b", "n/c"] {
        first.put(row.as_bytes(), now - 10);
    }
    let mut w = store.writer();
    w.write_keys(&first).expect("write_keys");
    w.flush().expect("flush");
    let mut second = KeyBatch::new(t.data, FAMILY, b"u", b"1");
    second.delete(b"n/a", now - 10);
    second.delete(b"n/b", now - 11);
    second.delete(b"n/c", now - 10);
    second.put(b"n/c", now - 5);
    second.put(b"n/d", now - 5);
    second.delete(b"n/missing", now);
    w.write_keys(&second).expect("write_keys");
    w.write_keys(&KeyBatch::new(t.data, FAMILY, b"u", b"1"))
        .expect("an empty batch writes nothing");
    w.flush().expect("flush");
    let spec = ScanSpec::prefix(b"n/");
    assert_eq!(
        scan(store, t.data, spec),
        ["n/b", "n/c", "n/d"],
        "the deleted version's row goes, another stamp deletes nothing"
    );
    for (row, ts) in [("n/b", now - 10), ("n/c", now - 5), ("n/d", now - 5)] {
        assert_eq!(
            values(get(store, t.data, row).as_ref()),
            [("u".into(), ts, "1".into())],
            "{row}"
        );
    }
    // Refused as it is queued (the embedded store) or as it is sent (HBase).
    let mut bad = KeyBatch::new(t.data, "nope", b"u", b"1");
    bad.put(b"n/e", now);
    let mut w = store.writer();
    assert!(
        w.write_keys(&bad).and_then(|()| w.flush()).is_err(),
        "a family the table lacks is refused"
    );
}

/// Column deletes (HBase's `Delete.addColumns`): every version of the column stamped at most
/// the bound goes, the row's other columns stay (packed ones too: `q2` is stored apart from
/// `q1` and `q3` then), and a newer put of the column shows again.
fn column_deletes(store: &Store, t: &Tables, now: i64) {
    let row = "k/row";
    write(
        store,
        vec![put(
            t.data,
            row,
            vec![
                cell("q1", now - 10, "one"),
                cell("q2", now - 10, "two"),
                cell("q3", now - 10, "three"),
            ],
        )],
    );
    // A second put of `q1` only: its newer value hides the first put's.
    write(
        store,
        vec![put(t.data, row, vec![cell("q1", now - 5, "uno")])],
    );
    write(store, vec![delete_column(t.data, row, FAMILY, "q3", now)]);
    assert_eq!(
        values(get(store, t.data, row).as_ref()),
        [
            ("q1".into(), now - 5, "uno".into()),
            ("q2".into(), now - 10, "two".into())
        ],
        "a column delete leaves the row's other columns"
    );
    write(
        store,
        vec![delete_column(t.data, row, FAMILY, "q2", now - 11)],
    );
    assert_eq!(
        values(get(store, t.data, row).as_ref()).len(),
        2,
        "a cell stamped after the bound stays"
    );
    write(
        store,
        vec![
            delete_column(t.data, row, FAMILY, "missing", now),
            delete_column(t.data, "k/no-such-row", FAMILY, "q1", now),
        ],
    );
    assert_eq!(values(get(store, t.data, row).as_ref()).len(), 2);
    assert_eq!(get(store, t.data, "k/no-such-row"), None);
    write(store, vec![delete_column(t.data, row, FAMILY, "q1", now)]);
    assert_eq!(
        values(get(store, t.data, row).as_ref()),
        [("q2".into(), now - 10, "two".into())],
        "no older value of the column shows once it is deleted"
    );
    write(
        store,
        vec![put(t.data, row, vec![cell("q3", now + 1, "back")])],
    );
    assert_eq!(
        values(get(store, t.data, row).as_ref()),
        [
            ("q2".into(), now - 10, "two".into()),
            ("q3".into(), now + 1, "back".into())
        ],
        "a put newer than the delete is visible"
    );
    write(
        store,
        vec![
            delete_column(t.data, row, FAMILY, "q2", i64::MAX),
            delete_column(t.data, row, FAMILY, "q3", i64::MAX),
        ],
    );
    assert_eq!(get(store, t.data, row), None, "every column deleted");

    // Versions: the column's every version goes, the other family's cell and the other
    // column of the family stay.
    let tv = t.versions;
    let v = |qualifier: &str, ts_ms, value: &str| Cell {
        family: VERSIONED.into(),
        ..cell(qualifier, ts_ms, value)
    };
    for i in 0..3 {
        write(
            store,
            vec![put(
                tv,
                row,
                vec![
                    v("q", now - 30 + i, &format!("v{i}")),
                    v("p", now - 30 + i, "p"),
                ],
            )],
        );
    }
    write(store, vec![put(tv, row, vec![cell("q", now, "single")])]);
    write(store, vec![delete_column(tv, row, VERSIONED, "q", now)]);
    let got = store
        .reader()
        .get_versions(tv, row.as_bytes(), None, 10)
        .expect("get with versions")
        .expect("the row keeps cells");
    let columns: Vec<(String, String, i64)> = got
        .cells
        .iter()
        .map(|c| {
            let q = String::from_utf8_lossy(&c.qualifier).into_owned();
            (c.family.clone(), q, c.ts_ms)
        })
        .collect();
    assert_eq!(
        columns,
        [
            (FAMILY.into(), "q".into(), now),
            (VERSIONED.into(), "p".into(), now - 28),
            (VERSIONED.into(), "p".into(), now - 29),
            (VERSIONED.into(), "p".into(), now - 30),
        ],
        "every version of the deleted column is gone, and only those"
    );
    write(store, vec![put(tv, row, vec![v("q", now + 1, "after")])]);
    let got = store
        .reader()
        .get_versions(tv, row.as_bytes(), None, 10)
        .expect("get with versions")
        .expect("the row");
    assert_eq!(
        got.versions(VERSIONED, b"q")
            .map(|c| c.ts_ms)
            .collect::<Vec<_>>(),
        [now + 1],
        "a newer put is the column's only version"
    );
}

fn timestamps(store: &Store, t: &Tables, now: i64) {
    let row = "d/row";
    write(store, vec![put(t.data, row, vec![cell("v", now - 2, "a")])]);
    write(store, vec![put(t.data, row, vec![cell("v", now, "b")])]);
    assert_eq!(
        values(get(store, t.data, row).as_ref()),
        [("v".into(), now, "b".into())],
        "a newer put replaces the cell"
    );
    write(store, vec![put(t.data, row, vec![cell("v", now - 1, "c")])]);
    assert_eq!(
        values(get(store, t.data, row).as_ref()),
        [("v".into(), now, "b".into())],
        "an older put does not show through a newer cell"
    );
    write(store, vec![put(t.data, row, vec![cell("v", now, "d")])]);
    assert_eq!(
        values(get(store, t.data, row).as_ref()),
        [("v".into(), now, "d".into())],
        "at the same timestamp the later put wins"
    );
}

fn ttl(store: &Store, t: &Tables, now: i64) {
    let hour = 3_600_000;
    write(
        store,
        vec![
            put(t.ttl, "e/old", vec![cell("v", now - 2 * hour, "old")]),
            put(t.ttl, "e/new", vec![cell("v", now - 60_000, "new")]),
            put(
                t.ttl,
                "e/mixed",
                vec![cell("a", now - 2 * hour, "x"), cell("b", now, "y")],
            ),
        ],
    );
    assert_eq!(
        get(store, t.ttl, "e/old"),
        None,
        "an expired cell is never returned"
    );
    assert!(get(store, t.ttl, "e/new").is_some());
    assert_eq!(
        values(get(store, t.ttl, "e/mixed").as_ref()),
        [("b".into(), now, "y".into())]
    );
    assert_eq!(
        scan(store, t.ttl, ScanSpec::prefix(b"e/")),
        ["e/mixed", "e/new"]
    );
    let asked = vec![b"e/old".to_vec(), b"e/new".to_vec()];
    let got = store.reader().get_many(t.ttl, &asked, None).unwrap();
    assert!(got[0].is_none() && got[1].is_some(), "{got:?}");
}

/// Scans with a time range (HBase's `Scan.setTimeRange`): only the cells stamped in
/// `[min, max)`, and no row left without one.
fn time_ranges(store: &Store, t: &Tables, now: i64) {
    write(
        store,
        vec![
            put(
                t.data,
                "y/a",
                vec![cell("v", now - 3000, "a"), cell("x", now - 1000, "ax")],
            ),
            put(t.data, "y/b", vec![cell("v", now - 2000, "b")]),
            put(t.data, "y/c", vec![cell("v", now, "c")]),
        ],
    );
    let reader = store.reader();
    let within = |min, max, columns: Vec<Column>| {
        let mut spec = ScanSpec::prefix(b"y/");
        spec.time_range = Some(TimeRange::new(min, max));
        spec.columns = columns;
        let rows = reader.scan(t.data, &spec).expect("scan with a time range");
        same_keys_only(&reader, t.data, &spec, &rows);
        rows
    };
    let rows = within(now - 2000, now, Vec::new());
    assert_eq!(keys(&rows), ["y/a", "y/b"], "max excluded");
    assert_eq!(
        values(rows.first()),
        [("x".into(), now - 1000, "ax".into())]
    );
    assert_eq!(keys(&within(now - 3000, now - 2999, Vec::new())), ["y/a"]);
    assert!(within(now + 1, now + 10, Vec::new()).is_empty());
    assert!(within(now, now, Vec::new()).is_empty(), "an empty range");
    let only_v = within(now - 3000, now - 1000, vec![Column::new(FAMILY, b"v")]);
    assert_eq!(keys(&only_v), ["y/a", "y/b"]);
    assert_eq!(
        values(only_v.first()),
        [("v".into(), now - 3000, "a".into())]
    );
    // HBase refuses a negative stamp in a range; no cell is stamped before 0 anyway.
    assert_eq!(keys(&within(-5, now - 2500, Vec::new())), ["y/a"]);
    assert!(within(-5, 0, Vec::new()).is_empty());
    assert_eq!(
        keys(&within(i64::MIN, i64::MAX, Vec::new())),
        ["y/a", "y/b", "y/c"]
    );

    // Gets and multi-gets with a range (HBase's `Get.setTimeRange`): only the cells within it,
    // `None` for a row with none.
    let get = |row: &str, min, max| {
        let got = reader.get(t.data, row.as_bytes(), Some(TimeRange::new(min, max)));
        got.expect("get with a time range")
    };
    assert_eq!(
        values(get("y/a", now - 2000, now).as_ref()),
        [("x".into(), now - 1000, "ax".into())],
        "a Get's range, max excluded"
    );
    assert_eq!(
        values(get("y/a", now - 3000, now).as_ref()),
        [
            ("v".into(), now - 3000, "a".into()),
            ("x".into(), now - 1000, "ax".into())
        ]
    );
    assert_eq!(
        get("y/b", now - 1999, now + 10),
        None,
        "a row with no cell within"
    );
    assert_eq!(get("y/c", now, now), None, "an empty range");
    assert_eq!(get("y/a", -5, 0), None, "a range ending at 0");
    assert_eq!(keys(get("y/c", -5, i64::MAX).as_slice()), ["y/c"]);
    let asked: Vec<Vec<u8>> = ["y/a", "y/b", "y/c", "y/none"]
        .iter()
        .map(|k| k.as_bytes().to_vec())
        .collect();
    let many = |min, max| {
        let got = reader.get_many(t.data, &asked, Some(TimeRange::new(min, max)));
        let got = got.expect("get_many with a time range");
        got.iter()
            .map(|row| {
                row.as_ref()
                    .map(|r| String::from_utf8_lossy(&r.key).into_owned())
            })
            .collect::<Vec<_>>()
    };
    let some = |k: &str| Some(k.to_string());
    assert_eq!(
        many(now - 2000, now),
        [some("y/a"), some("y/b"), None, None]
    );
    assert_eq!(many(now, now + 1), [None, None, some("y/c"), None]);
    assert_eq!(many(-5, 0), [None, None, None, None]);
}

fn scans(store: &Store, t: &Tables, now: i64) {
    let rows = ["z1/a", "z1/b", "z1/b0", "z1/c", "z1\u{7f}", "z2/x"];
    write(
        store,
        rows.iter()
            .map(|k| put(t.data, k, vec![cell("v", now, k)]))
            .collect(),
    );
    assert_eq!(
        scan(store, t.data, ScanSpec::prefix(b"z1/")),
        ["z1/a", "z1/b", "z1/b0", "z1/c"],
        "a prefix scan, in byte order of keys"
    );
    let range = |start: &str, stop: &str, limit| ScanSpec {
        start: start.as_bytes().to_vec(),
        stop: stop.as_bytes().to_vec(),
        limit,
        columns: Vec::new(),
        time_range: None,
        ..ScanSpec::default()
    };
    assert_eq!(
        scan(store, t.data, range("z1/b", "z1/c", None)),
        ["z1/b", "z1/b0"],
        "start included, stop excluded"
    );
    assert_eq!(
        scan(store, t.data, range("z1/bb", "z1/c", None)),
        Vec::<String>::new(),
        "a start between rows"
    );
    assert_eq!(
        scan(store, t.data, range("z1\u{7f}", "", None)),
        ["z1\u{7f}", "z2/x"],
        "an empty stop scans to the end of the table"
    );
    assert_eq!(
        scan(store, t.data, range("z1/", "z2/", Some(2))),
        ["z1/a", "z1/b"],
        "a limit stops after that many rows"
    );
    let rows = store
        .reader()
        .scan(t.data, &ScanSpec::prefix(b"z2/"))
        .unwrap();
    assert_eq!(values(rows.first()), [("v".into(), now, "z2/x".into())]);

    // HBase, at 2 rows a call in this run: a scan its first call answers in full is one call;
    // a longer one goes on until a short answer (the embedded store has no calls to count).
    let reader = store.reader();
    let scan_calls = || reader.stat("scan_calls");
    for (spec, rows, calls) in [
        (range("z1/bb", "z1/c", None), 0, 1),
        (ScanSpec::prefix(b"z2/"), 1, 1),
        (ScanSpec::prefix(b"z1/"), 4, 3),
    ] {
        let before = scan_calls();
        assert_eq!(reader.scan(t.data, &spec).unwrap().len(), rows);
        if let (Some(after), Some(before)) = (scan_calls(), before) {
            assert_eq!(after - before, calls, "calls for a scan of {rows} rows");
        }
    }

    // Columns: only the cells asked for, and no row that has none of them.
    write(
        store,
        vec![
            put(
                t.data,
                "z0/both",
                vec![cell("v", now, "1"), cell("x", now, "extra")],
            ),
            put(t.data, "z0/x-only", vec![cell("x", now, "extra")]),
            put(t.data, "z0/v-only", vec![cell("v", now, "2")]),
        ],
    );
    let mut only_v = ScanSpec::prefix(b"z0/");
    only_v.columns = vec![Column::new(FAMILY, b"v")];
    let rows = reader.scan(t.data, &only_v).unwrap();
    assert_eq!(
        keys(&rows),
        ["z0/both", "z0/v-only"],
        "rows with a `v` cell"
    );
    assert_eq!(values(rows.first()), [("v".into(), now, "1".into())]);
    assert_eq!(values(rows.get(1)), [("v".into(), now, "2".into())]);
    only_v.columns.push(Column::new(FAMILY, b"x"));
    let rows = reader.scan(t.data, &only_v).unwrap();
    assert_eq!(keys(&rows), ["z0/both", "z0/v-only", "z0/x-only"]);
    assert_eq!(rows[0].cells.len(), 2, "both columns asked: {rows:?}");
}

fn vcell(family: &str, ts_ms: i64, value: &str) -> Cell {
    Cell {
        family: family.into(),
        ..cell("q", ts_ms, value)
    }
}

/// `(family, timestamp, value)` of each cell of `row`, in the order read.
fn versions_of(row: Option<&Row>) -> Vec<(String, i64, String)> {
    row.map(|r| {
        r.cells
            .iter()
            .map(|c| {
                assert_eq!(c.qualifier, b"q", "{r:?}");
                let value = String::from_utf8_lossy(&c.value).into_owned();
                (c.family.clone(), c.ts_ms, value)
            })
            .collect()
    })
    .unwrap_or_default()
}

/// Cell versions: a family with `VERSIONS => 3` keeps the three newest versions of a cell and
/// returns as many as a read asks for, newest first; a family with `VERSIONS => 1` keeps one.
fn versions(store: &Store, t: &Tables, now: i64) {
    let reader = store.reader();
    let tv = t.versions;
    let read = |row: &str, versions| {
        let got = reader.get_versions(tv, row.as_bytes(), None, versions);
        versions_of(got.expect("get with versions").as_ref())
    };
    let v = |ts: i64, value: &str| (VERSIONED.to_string(), ts, value.to_string());
    let one = |ts: i64, value: &str| (FAMILY.to_string(), ts, value.to_string());
    // Five versions, one put each, oldest first; then two of the one-version family.
    let row = "v/row";
    for i in 0..5 {
        let cell = vcell(VERSIONED, now - 5000 + i * 1000, &format!("v{i}"));
        write(store, vec![put(tv, row, vec![cell])]);
    }
    write(store, vec![put(tv, row, vec![vcell(FAMILY, now - 2, "a")])]);
    write(store, vec![put(tv, row, vec![vcell(FAMILY, now - 1, "b")])]);

    let newest = [one(now - 1, "b"), v(now - 1000, "v4")];
    assert_eq!(read(row, 1), newest, "one version: the newest of each cell");
    assert_eq!(versions_of(get(store, tv, row).as_ref()), newest);
    assert_eq!(read(row, 0), newest, "0 versions is read as 1");
    let three = [
        one(now - 1, "b"),
        v(now - 1000, "v4"),
        v(now - 2000, "v3"),
        v(now - 3000, "v2"),
    ];
    assert_eq!(read(row, 3), three, "three versions, newest first");
    assert_eq!(read(row, 10), three, "never more than the family keeps");
    let two = [one(now - 1, "b"), v(now - 1000, "v4"), v(now - 2000, "v3")];
    assert_eq!(read(row, 2), two);

    // Scans ask for versions the same way.
    let scan_versions = |versions, time_range| {
        let spec = ScanSpec {
            max_versions: versions,
            time_range,
            ..ScanSpec::prefix(b"v/")
        };
        let rows = reader.scan(tv, &spec).expect("scan with versions");
        assert_eq!(keys(&rows), [row], "{rows:?}");
        versions_of(rows.first())
    };
    assert_eq!(scan_versions(1, None), newest);
    assert_eq!(scan_versions(10, None), three);
    assert_eq!(
        scan_versions(10, Some(TimeRange::new(now - 2500, now))),
        [one(now - 1, "b"), v(now - 1000, "v4"), v(now - 2000, "v3")],
        "a time range holding the newest versions"
    );
    let only_v = ScanSpec {
        max_versions: 2,
        columns: vec![Column::new(VERSIONED, b"q")],
        ..ScanSpec::prefix(b"v/")
    };
    let rows = reader.scan(tv, &only_v).unwrap();
    assert_eq!(
        versions_of(rows.first()),
        [v(now - 1000, "v4"), v(now - 2000, "v3")]
    );

    // A put at a version's timestamp replaces that version, and only it.
    write(
        store,
        vec![put(tv, row, vec![vcell(VERSIONED, now - 2000, "v3b")])],
    );
    assert_eq!(
        read(row, 10),
        [
            one(now - 1, "b"),
            v(now - 1000, "v4"),
            v(now - 2000, "v3b"),
            v(now - 3000, "v2")
        ]
    );

    // A row delete removes every version; a later put is the only one.
    write(
        store,
        vec![Mutation::DeleteRow {
            table: tv,
            row: row.as_bytes().to_vec(),
            ts_ms: now,
        }],
    );
    assert_eq!(read(row, 10), []);
    assert!(reader
        .scan(tv, &ScanSpec::prefix(b"v/"))
        .unwrap()
        .is_empty());
    write(
        store,
        vec![put(tv, row, vec![vcell(VERSIONED, now + 1, "after")])],
    );
    assert_eq!(read(row, 10), [v(now + 1, "after")]);

    // TTL counts per version: the expired ones are gone and take no place of the three.
    let hour = 3_600_000;
    let row = "v/ttl";
    let stamps = [
        now - 3 * hour,
        now - 2 * hour,
        now - 3000,
        now - 2000,
        now - 1000,
    ];
    for (i, ts) in stamps.into_iter().enumerate() {
        write(
            store,
            vec![put(tv, row, vec![vcell(VERSIONED, ts, &format!("t{i}"))])],
        );
    }
    assert_eq!(
        read(row, 10),
        [
            v(now - 1000, "t4"),
            v(now - 2000, "t3"),
            v(now - 3000, "t2")
        ]
    );
    let row = "v/old";
    write(
        store,
        vec![put(
            tv,
            row,
            vec![
                vcell(VERSIONED, now - 3 * hour, "x"),
                vcell(VERSIONED, now - 60_000, "live"),
            ],
        )],
    );
    assert_eq!(read(row, 3), [v(now - 60_000, "live")], "one live version");
    write(
        store,
        vec![put(
            tv,
            "v/expired",
            vec![vcell(VERSIONED, now - 2 * hour, "x")],
        )],
    );
    assert_eq!(
        read("v/expired", 3),
        [],
        "a row of expired versions is none"
    );
}

/// Rows of readings, `p/<series>/<second>`, each put as a reading of the narrow table is (the
/// value, the extra, stamped at the second): the embedded store's series run keeps them as
/// series points, and must answer for them as HBase does for cells; then puts of other shapes
/// (another stamp, another qualifier) and deletes of such rows. Sorted last but for `z/`.
fn series_points(store: &Store, t: &Tables) {
    let row = |s: &str, ts: i64| format!("p/{s}/{ts:010}");
    let reading = |s: &str, ts: i64, v: &str, x: Option<&str>| {
        let mut cells = vec![cell("v", ts * 1000, v)];
        cells.extend(x.map(|x| cell("x", ts * 1000, x)));
        put(t.data, &row(s, ts), cells)
    };
    write(
        store,
        vec![
            reading("a", 100, "1.5", Some(r#"{"room":"r1"}"#)),
            reading("a", 110, "-0.25", None),
            reading("a", 3700, "7", Some(r#"{"seq":3}"#)),
            reading("b", 100, "2", Some("{}")),
            // A repeated reading: the later put wins.
            reading("b", 100, "3", Some("{}")),
            reading("bb", 105, "4", Some(r#"{"n":1}"#)),
        ],
    );
    let one = |r: &str| values(get(store, t.data, r).as_ref());
    assert_eq!(
        one(&row("a", 100)),
        [
            ("v".into(), 100_000, "1.5".into()),
            ("x".into(), 100_000, r#"{"room":"r1"}"#.into())
        ]
    );
    assert_eq!(one(&row("a", 110)), [("v".into(), 110_000, "-0.25".into())]);
    assert_eq!(
        one(&row("b", 100)),
        [
            ("v".into(), 100_000, "3".into()),
            ("x".into(), 100_000, "{}".into())
        ]
    );
    assert!(one(&row("a", 101)).is_empty());
    let hour = TimeRange::of_secs(3600, 7200);
    let reader = store.reader();
    assert_eq!(
        reader
            .get(t.data, row("a", 3700).as_bytes(), Some(hour))
            .unwrap()
            .map(|r| r.cells.len()),
        Some(2)
    );
    assert_eq!(
        reader
            .get(t.data, row("a", 100).as_bytes(), Some(hour))
            .unwrap(),
        None
    );
    let rows = reader
        .get_many(
            t.data,
            &[
                row("bb", 105).into_bytes(),
                row("a", 5).into_bytes(),
                row("a", 110).into_bytes(),
            ],
            None,
        )
        .expect("get_many");
    assert_eq!(
        rows.iter()
            .map(|r| r.as_ref().map(|r| r.cells.len()))
            .collect::<Vec<_>>(),
        [Some(2), None, Some(1)]
    );
    // Scans: one series' rows, several series, open end, limit, time range, columns.
    let a = ScanSpec::prefix(b"p/a/");
    assert_eq!(
        scan(store, t.data, a.clone()),
        [row("a", 100), row("a", 110), row("a", 3700)]
    );
    assert_eq!(
        scan(store, t.data, ScanSpec::prefix(b"p/b")),
        [row("b", 100), row("bb", 105)]
    );
    let within = ScanSpec {
        start: row("a", 101).into_bytes(),
        stop: row("a", 3700).into_bytes(),
        ..ScanSpec::default()
    };
    assert_eq!(scan(store, t.data, within), [row("a", 110)]);
    let all = ScanSpec {
        start: b"p/".to_vec(),
        stop: b"p0".to_vec(),
        ..ScanSpec::default()
    };
    assert_eq!(scan(store, t.data, all.clone()).len(), 5);
    let limited = ScanSpec {
        limit: Some(2),
        ..all.clone()
    };
    assert_eq!(scan(store, t.data, limited), [row("a", 100), row("a", 110)]);
    let timed = ScanSpec {
        time_range: Some(TimeRange::of_secs(100, 106)),
        ..all.clone()
    };
    assert_eq!(
        scan(store, t.data, timed),
        [row("a", 100), row("b", 100), row("bb", 105)]
    );
    let x_only = ScanSpec {
        columns: vec![Column::new(FAMILY, b"x")],
        ..a.clone()
    };
    let rows = reader.scan(t.data, &x_only).unwrap();
    assert_eq!(keys(&rows), [row("a", 100), row("a", 3700)]);
    // Another shape of put to a reading's row: a newer stamp wins, another qualifier adds.
    write(
        store,
        vec![
            put(t.data, &row("a", 100), vec![cell("v", 100_001, "late")]),
            put(t.data, &row("a", 110), vec![cell("y", 110_000, "more")]),
        ],
    );
    assert_eq!(
        one(&row("a", 100)),
        [
            ("v".into(), 100_001, "late".into()),
            ("x".into(), 100_000, r#"{"room":"r1"}"#.into())
        ]
    );
    assert_eq!(
        one(&row("a", 110)),
        [
            ("v".into(), 110_000, "-0.25".into()),
            ("y".into(), 110_000, "more".into())
        ]
    );
    // Deletes: a row, a column of another.
    write(
        store,
        vec![
            Mutation::DeleteRow {
                table: t.data,
                row: row("b", 100).into_bytes(),
                ts_ms: i64::MAX,
            },
            Mutation::DeleteColumn {
                table: t.data,
                row: row("a", 3700).into_bytes(),
                family: FAMILY.into(),
                qualifier: b"x".to_vec(),
                ts_ms: i64::MAX,
            },
        ],
    );
    assert!(one(&row("b", 100)).is_empty());
    assert_eq!(one(&row("a", 3700)), [("v".into(), 3_700_000, "7".into())]);
    assert_eq!(
        scan(store, t.data, ScanSpec::prefix(b"p/b")),
        [row("bb", 105)]
    );
}

/// The start (seconds) and the cells' stamp (the hour's last millisecond) of the hour of
/// `now_ms`, the hour [`wide_rows`] writes.
fn wide_hour(now_ms: i64) -> (i64, i64) {
    let secs = now_ms / 1000;
    let hour = secs - secs % 3600;
    (hour, (hour + 3600) * 1000 - 1)
}

/// A wide row's put: `(offset or qualifier, value)` cells, all stamped `stamp`.
fn wide_put(table: &'static str, row: &str, stamp: i64, cells: &[(&str, &str)]) -> Mutation {
    put(
        table,
        row,
        cells.iter().map(|(q, v)| cell(q, stamp, v)).collect(),
    )
}

/// The cells [`wide_rows`] leaves in the row it returns.
fn wide_row_after(now_ms: i64) -> Vec<(String, i64, String)> {
    let (_, stamp) = wide_hour(now_ms);
    [
        ("10", "3"),
        ("20", "-0.25"),
        ("30", "8"),
        ("n", "4"),
        ("sum", "3.25"),
    ]
    .iter()
    .map(|(q, v)| (q.to_string(), stamp, v.to_string()))
    .collect()
}

/// Wide rows, `w/<series>/<hour start>`, put as the sensors' hourly rows are (a cell per
/// second offset and summary cells, all stamped with the hour's last millisecond): the
/// embedded store's series run keeps the offset cells as points ([`WIDE`]) and the summary
/// generic, and must answer as HBase does: Gets, multi-gets, scans (one series, several, limit,
/// time range, columns), versions, re-puts of a cell (same stamp, older, newer), a value that
/// is not as the layout renders it, a row past the TTL, column and row deletes, and puts after
/// them. Returns the row left for a read after the major compaction.
fn wide_rows(store: &Store, t: &Tables, now: i64) -> String {
    let (hour, stamp) = wide_hour(now);
    let row = |s: &str, h: i64| format!("w/{s}/{h}");
    let (a, b, aa) = (row("a", hour), row("b", hour), row("aa", hour));
    // Past the TTL (its cells are stamped two hours ago and more), and a row off the hour.
    let (old, odd) = (row("a", hour - 3 * 3600), row("a", hour + 5));
    let old_stamp = (hour - 2 * 3600) * 1000 - 1;
    write(
        store,
        vec![
            wide_put(
                t.ttl,
                &a,
                stamp,
                &[
                    ("0", "1.5"),
                    ("10", "2"),
                    ("20", "-0.25"),
                    ("n", "3"),
                    ("sum", "3.25"),
                ],
            ),
            wide_put(t.ttl, &b, stamp, &[("5", "7"), ("n", "1")]),
            wide_put(t.ttl, &aa, stamp, &[("7", "4")]),
            wide_put(t.ttl, &old, old_stamp, &[("0", "9"), ("n", "1")]),
            wide_put(t.ttl, &odd, stamp, &[("0", "5")]),
        ],
    );
    let one = |r: &str| values(get(store, t.ttl, r).as_ref());
    let cells = |cells: &[(&str, i64, &str)]| -> Vec<(String, i64, String)> {
        cells
            .iter()
            .map(|(q, ts, v)| (q.to_string(), *ts, v.to_string()))
            .collect()
    };
    assert_eq!(
        one(&a),
        cells(&[
            ("0", stamp, "1.5"),
            ("10", stamp, "2"),
            ("20", stamp, "-0.25"),
            ("n", stamp, "3"),
            ("sum", stamp, "3.25")
        ])
    );
    assert_eq!(one(&b), cells(&[("5", stamp, "7"), ("n", stamp, "1")]));
    assert_eq!(one(&odd), cells(&[("0", stamp, "5")]));
    assert!(one(&old).is_empty(), "past the TTL");
    let reader = store.reader();
    let rows = reader
        .get_many(
            t.ttl,
            &[
                aa.clone().into_bytes(),
                old.clone().into_bytes(),
                b.clone().into_bytes(),
            ],
            None,
        )
        .expect("get_many");
    assert_eq!(
        rows.iter()
            .map(|r| r.as_ref().map(|r| r.cells.len()))
            .collect::<Vec<_>>(),
        [Some(1), None, Some(2)]
    );
    // Scans: one series' rows, several, limit, time range, columns.
    assert_eq!(
        scan(store, t.ttl, ScanSpec::prefix(b"w/a/")),
        [a.clone(), odd.clone()]
    );
    let all = ScanSpec::prefix(b"w/");
    let every = [a.clone(), odd.clone(), aa.clone(), b.clone()];
    assert_eq!(scan(store, t.ttl, all.clone()), every);
    let limited = ScanSpec {
        limit: Some(2),
        ..all.clone()
    };
    assert_eq!(scan(store, t.ttl, limited), [a.clone(), odd.clone()]);
    let timed = |from, to| ScanSpec {
        time_range: Some(TimeRange::new(from, to)),
        ..all.clone()
    };
    assert_eq!(scan(store, t.ttl, timed(stamp, stamp + 1)), every);
    assert!(scan(store, t.ttl, timed(hour * 1000, stamp)).is_empty());
    let ten = ScanSpec {
        columns: vec![Column::new(FAMILY, b"10")],
        ..ScanSpec::prefix(b"w/a")
    };
    let rows = reader.scan(t.ttl, &ten).unwrap();
    assert_eq!(keys(&rows), std::slice::from_ref(&a));
    assert_eq!(values(rows.first()), cells(&[("10", stamp, "2")]));
    // Re-puts: the same stamp (the later put wins), a value the layout would write otherwise
    // (`1.50`), an older stamp (loses), a newer one (wins).
    write(
        store,
        vec![
            wide_put(t.ttl, &a, stamp, &[("10", "3"), ("n", "4")]),
            wide_put(t.ttl, &b, stamp, &[("6", "1.50")]),
            wide_put(t.ttl, &aa, stamp - 1, &[("7", "5")]),
            wide_put(t.ttl, &aa, stamp + 1, &[("8", "6")]),
        ],
    );
    assert_eq!(
        one(&a),
        cells(&[
            ("0", stamp, "1.5"),
            ("10", stamp, "3"),
            ("20", stamp, "-0.25"),
            ("n", stamp, "4"),
            ("sum", stamp, "3.25")
        ])
    );
    assert_eq!(
        one(&b),
        cells(&[("5", stamp, "7"), ("6", stamp, "1.50"), ("n", stamp, "1")])
    );
    assert_eq!(one(&aa), cells(&[("7", stamp, "4"), ("8", stamp + 1, "6")]));
    let versions = reader
        .get_versions(t.ttl, a.as_bytes(), None, 3)
        .expect("get_versions")
        .expect("the row");
    assert_eq!(versions.cells.len(), 5, "one version a cell: {versions:?}");
    // Deletes: a column, a row; then a put into the same hour. Up to the cells' stamp: HBase
    // takes `i64::MAX` for "now", which the hour's last millisecond may be after.
    write(
        store,
        vec![
            Mutation::DeleteColumn {
                table: t.ttl,
                row: a.clone().into_bytes(),
                family: FAMILY.into(),
                qualifier: b"0".to_vec(),
                ts_ms: stamp,
            },
            Mutation::DeleteRow {
                table: t.ttl,
                row: b.clone().into_bytes(),
                ts_ms: stamp,
            },
        ],
    );
    assert!(one(&b).is_empty());
    assert_eq!(scan(store, t.ttl, all), [a.clone(), odd, aa]);
    write(store, vec![wide_put(t.ttl, &a, stamp, &[("30", "8")])]);
    assert_eq!(one(&a), wide_row_after(now));
    a
}

/// Runs the suite on a new embedded store with `tables`.
fn embedded_conforms(tables: &Tables) {
    let dir = tempfile::tempdir().unwrap();
    let cfg = StoreConfig {
        dir: dir.path().join("store"),
        series_layout: tables.series,
        ..StoreConfig::default()
    };
    let store = sinks::open(&cfg, &tables.specs(), &options()).expect("opening the embedded store");
    store.ensure_tables().expect("every table exists");
    conforms(&store, tables);
}

#[test]
fn the_embedded_store_conforms() {
    embedded_conforms(&Tables::new("embedded"));
}

/// The same suite with the family's puts stored packed, as the narrow and hourly tables' are,
/// `q2` apart: it answers as HBase does (`hbase_conforms`) all the same.
#[test]
fn the_embedded_store_conforms_with_packed_puts() {
    embedded_conforms(&Tables {
        packed: true,
        ..Tables::new("embedded_packed")
    });
}

/// The same suite with the `data` table's readings kept as series points (`[store]
/// series_layout`, issue 38): its other rows, and puts of other shapes, stay generic, and reads
/// merge both.
#[test]
fn the_embedded_store_conforms_with_series_points() {
    embedded_conforms(&Tables {
        packed: true,
        series: true,
        ..Tables::new("embedded_series")
    });
}

/// Whether the HBase run goes ahead: it fails, with what to do, when the gateways are not
/// reachable, unless skipped outside CI.
fn hbase_reachable() -> bool {
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    if !ci && std::env::var("HOURGLASS_SKIP_HBASE").is_ok_and(|v| v == "1") {
        eprintln!("HOURGLASS_SKIP_HBASE=1: skipping the conformance run against HBase");
        return false;
    }
    for addr in [THRIFT1, THRIFT2] {
        let sock: SocketAddr = addr.parse().unwrap();
        if let Err(e) = TcpStream::connect_timeout(&sock, Duration::from_secs(5)) {
            panic!(
                "the HBase Thrift gateway is not reachable on {addr} ({e}): start it with \
                 `scripts/services.sh up hbase`{}",
                if ci {
                    ""
                } else {
                    ", or set HOURGLASS_SKIP_HBASE=1 to skip the HBase tests"
                }
            );
        }
    }
    true
}

/// Drops the run's HBase tables when the test ends, passed or not.
struct DropTables<'a> {
    store: &'a Store,
    tables: &'a Tables,
}

impl Drop for DropTables<'_> {
    fn drop(&mut self) {
        // Dropping tables is HBase's admin alone: the embedded store's go with its directory.
        if let Some(hbase) = self.store.downcast_ref::<sinks::hbase::HbaseStorage>() {
            if let Err(e) = sinks::hbase::admin::drop_tables(hbase.config(), &self.tables.names()) {
                eprintln!("dropping the conformance tables: {e}");
            }
        }
    }
}

#[test]
fn hbase_conforms() {
    if !hbase_reachable() {
        return;
    }
    let tables = Tables::new("hbase");
    let mut cfg = StoreConfig {
        kind: StoreKind::Hbase,
        hbase: Some(THRIFT1.into()),
        ..StoreConfig::default()
    };
    cfg.hbase_client.thrift2 = Some(THRIFT2.into());
    cfg.hbase_client.retry_max_elapsed_secs = Some(120);
    // Two rows per scan call, so the scans below take every path of the reader: one call that
    // is the whole answer, a first call then a scanner, a limit reached on a full answer.
    cfg.hbase_client.scan_caching = 2;
    let store = sinks::open(&cfg, &tables.specs(), &options()).expect("opening HBase");
    let _drop = DropTables {
        store: &store,
        tables: &tables,
    };
    let missing = store.admin().missing_tables().unwrap();
    assert_eq!(missing.len(), 3, "{missing:?}");
    assert!(
        store.ensure_tables().is_err(),
        "missing tables are reported"
    );
    store.admin().create_tables().expect("creating the tables");
    store.ensure_tables().expect("every table exists");
    block_layouts_are_the_specs(&store, &tables);
    assert!(
        store.reader().stat("get_row_calls").is_some(),
        "an HBase reader counts its calls"
    );
    conforms(&store, &tables);
}

/// The tables HBase created have their specs' block sizes and encodings, and a spec that
/// differs from an existing table in those alone keeps the table and says how to alter it.
fn block_layouts_are_the_specs(store: &Store, tables: &Tables) {
    let described = store
        .admin()
        .describe_tables()
        .expect("describing the tables");
    let family = |table: &str, family: &str| {
        described
            .iter()
            .find(|t| t.name == table)
            .and_then(|t| t.families.iter().find(|f| f.name == family))
            .unwrap_or_else(|| panic!("{table} has no family {family}: {described:?}"))
            .clone()
    };
    let ttl = family(tables.ttl, FAMILY);
    assert_eq!(
        (ttl.block_size, ttl.data_block_encoding.as_str()),
        (SMALL_BLOCK, "FAST_DIFF")
    );
    let versioned = family(tables.versions, VERSIONED);
    assert_eq!(
        (versioned.block_size, versioned.data_block_encoding.as_str()),
        (SMALL_BLOCK, "ROW_INDEX_V1")
    );
    let plain = family(tables.versions, FAMILY);
    assert_eq!(
        (plain.block_size, plain.data_block_encoding.as_str()),
        (64 * 1024, "NONE")
    );

    let Some(hbase) = store.downcast_ref::<sinks::hbase::HbaseStorage>() else {
        panic!("the HBase run opened another backend");
    };
    let mut specs = tables.specs();
    let ttl_spec = specs
        .iter_mut()
        .find(|t| t.name == tables.ttl)
        .expect("the ttl table's spec");
    ttl_spec.families[0].data_block_encoding = DataBlockEncoding::None;
    ttl_spec.families[0].block_size = 64 * 1024;
    let again = sinks::hbase::admin::create_tables(hbase.config(), std::slice::from_ref(ttl_spec))
        .expect("a spec that differs in block layout alone is accepted");
    let [(
        name,
        Created::ExistsWithOtherStorage {
            differences,
            alter,
            missing,
            ..
        },
    )] = again.as_slice()
    else {
        panic!("{again:?}");
    };
    assert_eq!(name, tables.ttl);
    assert_eq!(
        differences,
        &[
            format!("family {FAMILY}: BLOCKSIZE is 16384, want 65536"),
            format!("family {FAMILY}: DATA_BLOCK_ENCODING is FAST_DIFF, want NONE"),
        ]
    );
    assert_eq!(
        alter,
        &[
            format!(
                "alter '{}', {{NAME => '{FAMILY}', BLOCKSIZE => 65536, DATA_BLOCK_ENCODING => 'NONE'}}",
                tables.ttl
            ),
            format!("major_compact '{}'", tables.ttl),
        ]
    );
    assert!(missing.is_empty(), "{missing:?}");
}
