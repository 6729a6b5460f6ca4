//! Unit tests of the HBase backend that need no HBase: batching, retry classification, schema
//! comparison. The real path is tested against a live HBase in `tests/tests/hbase_*.rs`.

use std::time::Duration;

use crate::schema::{Bloom, Compression, DataBlockEncoding, FamilySpec, DEFAULT_BLOCK_SIZE};
use crate::table::Cell;
use crate::test_tables as schema;
use hbase_thrift::hbase::{IOError, IllegalArgument};

use super::admin::{alter_commands, schema_differences, storage_differences};
use super::client::classify;
use super::config::{default_thrift2, HbaseConfig, RetryPolicy};
use super::retry::retrying;
use super::sink::{Buffer, PlannedCall};
use super::thrift2::{TDelete, TDeleteType};
use super::{is_retriable, Error};
use crate::admin::FamilyDescription;

fn cell(qualifier: &str, ts_ms: i64, value: &str) -> Cell {
    Cell {
        family: "t".into(),
        qualifier: qualifier.as_bytes().to_vec(),
        ts_ms,
        value: value.as_bytes().to_vec(),
    }
}

/// A row as `(key, [(family:qualifier, timestamp, value)])`.
type Row = (String, Vec<(String, i64, String)>);

fn row(key: &str, cells: &[(&str, i64, &str)]) -> Row {
    (
        key.into(),
        cells
            .iter()
            .map(|(c, ts, v)| ((*c).into(), *ts, (*v).into()))
            .collect(),
    )
}

fn rows(call: &PlannedCall) -> Vec<Row> {
    let s = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    call.puts
        .iter()
        .map(|p| {
            let cells = p
                .column_values
                .iter()
                .map(|c| {
                    let column = format!("{}:{}", s(&c.family), s(&c.qualifier));
                    (
                        column,
                        c.timestamp.expect("every cell stamped"),
                        s(&c.value),
                    )
                })
                .collect();
            (s(&p.row), cells)
        })
        .collect()
}

fn summary(calls: &[PlannedCall]) -> Vec<(&'static str, Vec<Row>)> {
    calls.iter().map(|c| (c.table, rows(c))).collect()
}

fn buffer() -> Buffer {
    Buffer::new(1000, 1000, 1 << 20, 4 << 20)
}

#[test]
fn puts_of_many_timestamps_share_one_call_per_table() {
    let mut buf = buffer();
    // One wide row with cells at two timestamps stays one row.
    assert!(buf
        .push(
            "wide",
            b"d_0".to_vec(),
            vec![cell("1", 1000, "a"), cell("2", 2000, "b")]
        )
        .is_none());
    // Narrow rows of different event-time seconds go in one call.
    for (key, ts, v) in [("k1", 1000, "x"), ("k2", 2000, "y"), ("k3", 1000, "z")] {
        assert!(buf
            .push("narrow", key.as_bytes().to_vec(), vec![cell("v", ts, v)])
            .is_none());
    }
    let calls = buf.drain();
    assert!(buf.is_empty());
    assert_eq!(buf.total_bytes(), 0);
    assert_eq!(
        summary(&calls),
        vec![
            (
                "narrow",
                vec![
                    row("k1", &[("t:v", 1000, "x")]),
                    row("k2", &[("t:v", 2000, "y")]),
                    row("k3", &[("t:v", 1000, "z")]),
                ]
            ),
            (
                "wide",
                vec![row("d_0", &[("t:1", 1000, "a"), ("t:2", 2000, "b")])]
            ),
        ]
    );
    assert_eq!(calls.iter().map(|c| c.cells).collect::<Vec<_>>(), [3, 2]);
}

#[test]
fn puts_to_one_row_are_merged_never_dropped() {
    let mut buf = buffer();
    buf.push("wide", b"d_0".to_vec(), vec![cell("1", 1000, "a")]);
    buf.push("wide", b"d_0".to_vec(), vec![cell("2", 1000, "b")]);
    buf.push("wide", b"d_1".to_vec(), vec![cell("1", 1000, "c")]);
    // The same cell again at the same timestamp: the later value wins, as in HBase; at
    // another timestamp it is another cell.
    buf.push(
        "wide",
        b"d_0".to_vec(),
        vec![cell("1", 1000, "a2"), cell("1", 999, "old")],
    );
    let calls = buf.drain();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].cells, 4);
    assert_eq!(
        rows(&calls[0]),
        vec![
            row(
                "d_0",
                &[("t:1", 1000, "a2"), ("t:2", 1000, "b"), ("t:1", 999, "old")]
            ),
            row("d_1", &[("t:1", 1000, "c")])
        ]
    );
}

#[test]
fn deletes_travel_in_the_buffer_at_their_own_timestamp() {
    let mut buf = buffer();
    buf.push("room", b"a_d1".to_vec(), vec![cell("v", 5000, "1")]);
    assert!(buf
        .push_delete("room", b"a_d1".to_vec(), 2000, Some(&["t"]))
        .is_none());
    assert!(buf
        .push_delete("room", b"b_d1".to_vec(), 5000, Some(&["t"]))
        .is_none());
    let bytes = buf.total_bytes();
    // The same row again, earlier: the later delete already hides what it would.
    assert!(buf
        .push_delete("room", b"b_d1".to_vec(), 4000, Some(&["t"]))
        .is_none());
    assert_eq!(buf.total_bytes(), bytes, "one row, one delete");
    // A table whose families the writer was not told: the whole row, as `deleteAllRowTs`.
    assert!(buf
        .push_delete("other", b"r".to_vec(), 7000, None)
        .is_none());
    let calls = buf.drain();
    let family = |row: &str, ts: i64| {
        let column = super::thrift2::TColumn::new(b"t".to_vec(), None, ts);
        TDelete::new(
            row.as_bytes().to_vec(),
            vec![column],
            None,
            TDeleteType::DELETE_FAMILY,
        )
    };
    assert_eq!(calls[0].table, "other");
    assert_eq!(
        calls[0].deletes,
        [TDelete::new(b"r".to_vec(), None, 7000, None)]
    );
    assert_eq!(calls[1].table, "room");
    assert_eq!(rows(&calls[1]), [row("a_d1", &[("t:v", 5000, "1")])]);
    assert_eq!(
        calls[1].deletes,
        [family("a_d1", 2000), family("b_d1", 5000)]
    );
    // A delete counts as a row towards max_rows.
    let mut buf = Buffer::new(2, 1000, 1 << 20, 4 << 20);
    assert!(buf
        .push_delete("room", b"x".to_vec(), 1, Some(&["t"]))
        .is_none());
    let full = buf
        .push_delete("room", b"y".to_vec(), 1, Some(&["t"]))
        .expect("2 rows fill the call");
    assert_eq!(full.deletes.len(), 2);
}

#[test]
fn column_deletes_of_a_row_share_one_delete_columns_tdelete() {
    let mut buf = buffer();
    let mut delete_column = |row: &str, qualifier: &str, ts: i64| {
        let planned = buf.push_delete_column(
            "profile",
            row.as_bytes().to_vec(),
            "t".into(),
            qualifier.as_bytes().to_vec(),
            ts,
        );
        assert!(planned.is_none());
    };
    delete_column("r1", "a", i64::MAX);
    delete_column("r2", "a", 5000);
    delete_column("r1", "b", 7000);
    // A row delete of the same row stays a delete of its own: HBase applies both.
    assert!(buf
        .push_delete("profile", b"r1".to_vec(), 9000, Some(&["t"]))
        .is_none());
    let calls = buf.drain();
    let column =
        |q: &str, ts: i64| super::thrift2::TColumn::new(b"t".to_vec(), q.as_bytes().to_vec(), ts);
    let columns = |row: &str, columns| {
        TDelete::new(
            row.as_bytes().to_vec(),
            columns,
            None,
            TDeleteType::DELETE_COLUMNS,
        )
    };
    assert_eq!(
        calls[0].deletes,
        [
            columns("r1", vec![column("a", i64::MAX), column("b", 7000)]),
            columns("r2", vec![column("a", 5000)]),
            TDelete::new(
                b"r1".to_vec(),
                vec![super::thrift2::TColumn::new(b"t".to_vec(), None, 9000)],
                None,
                TDeleteType::DELETE_FAMILY,
            ),
        ]
    );
}

/// A version delete is a `DELETE_COLUMN` `TDelete` of its own, beside a row's column deletes.
#[test]
fn a_version_delete_is_a_delete_column_tdelete_of_its_own() {
    let mut buf = buffer();
    assert!(buf
        .push_delete_column("profile", b"r1".to_vec(), "t".into(), b"a".to_vec(), 7000)
        .is_none());
    assert!(buf
        .push_delete_version("profile", b"r1".to_vec(), "t".into(), b"b".to_vec(), 5000)
        .is_none());
    let calls = buf.drain();
    let column =
        |q: &str, ts: i64| super::thrift2::TColumn::new(b"t".to_vec(), q.as_bytes().to_vec(), ts);
    assert_eq!(
        calls[0].deletes,
        [
            TDelete::new(
                b"r1".to_vec(),
                vec![column("a", 7000)],
                None,
                TDeleteType::DELETE_COLUMNS
            ),
            TDelete::new(
                b"r1".to_vec(),
                vec![column("b", 5000)],
                None,
                TDeleteType::DELETE_COLUMN
            ),
        ]
    );
}

#[test]
fn a_call_is_sent_when_it_reaches_max_rows_or_max_cells() {
    let mut buf = Buffer::new(3, 1000, 1 << 20, 4 << 20);
    let mut sent = Vec::new();
    for i in 0..7 {
        sent.extend(buf.push(
            "narrow",
            format!("k{i}").into_bytes(),
            vec![cell("v", i, "x")],
        ));
    }
    // Merging into an existing row does not add a row.
    sent.extend(buf.push("narrow", b"k6".to_vec(), vec![cell("w", 6, "y")]));
    assert_eq!(
        sent.iter().map(|c| c.puts.len()).collect::<Vec<_>>(),
        [3, 3]
    );
    let rest = buf.drain();
    assert_eq!(rest.len(), 1);
    assert_eq!(
        rows(&rest[0]),
        vec![row("k6", &[("t:v", 6, "x"), ("t:w", 6, "y")])]
    );

    let mut buf = Buffer::new(1000, 5, 1 << 20, 4 << 20);
    let two = |ts| vec![cell("a", ts, "x"), cell("b", ts, "y")];
    assert!(buf.push("wide", b"r1".to_vec(), two(1)).is_none());
    assert!(buf.push("wide", b"r2".to_vec(), two(2)).is_none());
    let full = buf
        .push("wide", b"r3".to_vec(), two(3))
        .expect("6 cells fill the call");
    assert_eq!((full.puts.len(), full.cells), (3, 6));
}

#[test]
fn a_put_that_fills_its_call_is_sent_whole() {
    // The second row reaches max_rows with its first cell and max_bytes with its second: the
    // call still carries all three of its cells, or HBase would apply the row in two steps.
    let mut buf = Buffer::new(2, 1000, 60, 4 << 20);
    assert!(buf
        .push("wide", b"a".to_vec(), vec![cell("1", 7, "x")])
        .is_none());
    let sent = buf
        .push(
            "wide",
            b"b".to_vec(),
            vec![
                cell("1", 7, "x"),
                cell("2", 8, &"y".repeat(80)),
                cell("n", 9, "2"),
            ],
        )
        .expect("full");
    assert_eq!(
        rows(&sent),
        vec![
            row("a", &[("t:1", 7, "x")]),
            row(
                "b",
                &[
                    ("t:1", 7, "x"),
                    ("t:2", 8, &"y".repeat(80)),
                    ("t:n", 9, "2")
                ]
            ),
        ]
    );
    assert!(buf.is_empty());
}

#[test]
fn a_window_pane_is_one_row_mutation_with_its_summary() {
    // The shape `sensor::codec::hourly::wide_put` gives a pane: points and summary cells all stamped
    // with the hour's last millisecond (pipeline's codec tests check that they share it).
    let qualifiers = ["1", "5", "3599", "n", "min", "max", "sum", "first", "last"];
    let cells: Vec<Cell> = qualifiers.iter().map(|q| cell(q, 7_199_999, "1")).collect();
    let (table, key) = ("ts_metric_hourly", b"d_3600".to_vec());
    let mut buf = buffer();
    assert!(buf.push(table, key, cells).is_none());
    let calls = buf.drain();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert_eq!(calls[0].puts.len(), 1, "one TPut: one atomic Put");
    let got = rows(&calls[0]).remove(0).1;
    let want: Vec<(String, i64, String)> = qualifiers
        .iter()
        .map(|q| (format!("t:{q}"), 7_199_999, "1".into()))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn a_call_is_sent_when_it_reaches_max_bytes_and_all_when_over_budget() {
    let value = "x".repeat(1000);
    let mut buf = Buffer::new(1000, 1000, 4000, 10_000);
    let mut sent = Vec::new();
    for i in 0..3 {
        sent.extend(buf.push(
            "narrow",
            format!("k{i}").into_bytes(),
            vec![cell("v", 1, &value)],
        ));
    }
    assert!(sent.is_empty());
    sent.extend(buf.push("narrow", b"k3".to_vec(), vec![cell("v", 1, &value)]));
    assert_eq!(sent.len(), 1, "the 4th 1 kB row crosses 4000 bytes");
    assert_eq!(sent[0].puts.len(), 4);
    assert!(
        sent[0].bytes >= 4000 && sent[0].bytes < 4400,
        "{}",
        sent[0].bytes
    );
    assert_eq!(buf.total_bytes(), 0);

    // Many tables, none full: the buffer as a whole asks to be drained.
    let tables = ["t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8", "t9"];
    for table in &tables[..9] {
        buf.push(table, b"k".to_vec(), vec![cell("v", 1, &value)]);
        assert!(!buf.over_budget(), "at {table}");
    }
    buf.push(tables[9], b"k".to_vec(), vec![cell("v", 1, &value)]);
    assert!(buf.over_budget());
    assert_eq!(buf.drain().len(), 10);
    assert!(!buf.over_budget());
}

#[test]
fn byte_accounting_follows_replaced_values() {
    let mut buf = buffer();
    buf.push(
        "narrow",
        b"k".to_vec(),
        vec![cell("v", 1, &"x".repeat(100))],
    );
    let big = buf.total_bytes();
    buf.push("narrow", b"k".to_vec(), vec![cell("v", 1, "y")]);
    assert_eq!(buf.total_bytes(), big - 99);
    let calls = buf.drain();
    assert_eq!(calls[0].bytes, big - 99);
    assert_eq!(calls[0].cells, 1);
}

fn server(message: &str, can_retry: Option<bool>) -> Error {
    Error::Server {
        call: "mutateRowsTs",
        table: "ts_metric".into(),
        message: message.into(),
        can_retry,
    }
}

#[test]
fn transient_hbase_conditions_are_retriable() {
    for message in [
        "org.apache.hadoop.hbase.NotServingRegionException: ts_metric,05,1 is not online on x",
        "Failed 12 actions: org.apache.hadoop.hbase.RegionTooBusyException: Over memstore limit",
        "org.apache.hadoop.hbase.CallQueueTooBigException: Call queue is full",
        "org.apache.hadoop.hbase.ipc.ServerNotRunningYetException: Server is not running yet",
        "org.apache.hadoop.hbase.PleaseHoldException: Master is initializing",
        "org.apache.hadoop.hbase.exceptions.RegionMovedException: Region moved to: host",
        "java.net.ConnectException: Connection refused",
        "org.apache.hadoop.hbase.client.RetriesExhaustedException: Failed after attempts=16",
        "java.net.SocketTimeoutException: callTimeout=60000",
    ] {
        // HBase's own flag does not matter for known transient conditions.
        assert!(is_retriable(&server(message, None)), "{message}");
        assert!(is_retriable(&server(message, Some(false))), "{message}");
    }
}

#[test]
fn permanent_failures_are_not_retriable() {
    for message in [
        "org.apache.hadoop.hbase.TableNotFoundException: ts_metric",
        "Failed 1 action: org.apache.hadoop.hbase.regionserver.NoSuchColumnFamilyException: \
         Column family x does not exist: 1 time, servers with issues: RetriesExhaustedException",
        "org.apache.hadoop.hbase.DoNotRetryIOException: Cell with size 20971520 exceeds limit",
        "org.apache.hadoop.hbase.TableNotEnabledException: ts_metric is disabled",
    ] {
        assert!(!is_retriable(&server(message, Some(true))), "{message}");
    }
    // Unknown messages follow HBase's flag, and are not retried without one.
    assert!(is_retriable(&server(
        "java.io.IOException: something",
        Some(true)
    )));
    assert!(!is_retriable(&server(
        "java.io.IOException: something",
        Some(false)
    )));
    assert!(!is_retriable(&server(
        "java.io.IOException: something",
        None
    )));

    let transport = Error::Transport {
        addr: "127.0.0.1:9090".into(),
        call: "getRow",
        message: "Connection reset by peer (os error 104)".into(),
    };
    assert!(is_retriable(&transport));
    assert!(!is_retriable(&Error::Protocol {
        addr: "a".into(),
        call: "getRow",
        message: "bad sequence number".into(),
    }));
    assert!(!is_retriable(&Error::GaveUp {
        attempts: 3,
        elapsed_s: 1.0,
        last: Box::new(transport),
    }));
}

#[test]
fn thrift_errors_are_classified() {
    let addr = "127.0.0.1:9090";
    let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
    let e = classify(thrift::Error::from(io), addr, "getRow", "ts_metric");
    assert!(matches!(e, Error::Transport { .. }), "{e:?}");
    assert!(is_retriable(&e));
    let wouldblock = std::io::Error::new(std::io::ErrorKind::WouldBlock, "read timed out");
    let e = classify(thrift::Error::from(wouldblock), addr, "getRow", "ts_metric");
    assert!(is_retriable(&e), "a socket read timeout is retried: {e:?}");

    let not_found = IOError::new(
        "org.apache.hadoop.hbase.TableNotFoundException: ts_metric".to_string(),
        false,
    );
    let e = classify(not_found.into(), addr, "mutateRowsTs", "ts_metric");
    assert!(matches!(e, Error::TableNotFound { .. }), "{e:?}");
    let message = crate::Error::from(e).to_string();
    assert!(
        message.contains("run `hourglass tables create --hbase 127.0.0.1:9090`"),
        "{message}"
    );

    let bad = IllegalArgument::new("Row length is 0".to_string());
    let e = classify(bad.into(), addr, "mutateRowsTs", "ts_metric");
    assert!(matches!(e, Error::IllegalArgument { .. }), "{e:?}");
    assert!(!crate::Error::from(e).is_retriable());

    let busy = IOError::new("RegionTooBusyException: busy".to_string(), true);
    let e = classify(busy.into(), addr, "mutateRowsTs", "ts_metric");
    assert!(crate::Error::from(e).is_retriable());
}

#[test]
fn backoff_doubles_up_to_the_cap() {
    let policy = RetryPolicy::default();
    let delays: Vec<u64> = (1..=10)
        .map(|n| policy.backoff(n).as_millis() as u64)
        .collect();
    assert_eq!(
        delays,
        [100, 200, 400, 800, 1600, 3200, 6400, 10_000, 10_000, 10_000]
    );
    assert_eq!(policy.backoff(200), Duration::from_secs(10));
    assert_eq!(policy.max_elapsed, None, "retries go on forever by default");
}

#[test]
fn retrying_stops_on_success_on_fatal_errors_and_after_max_elapsed() {
    let policy = RetryPolicy {
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(4),
        max_elapsed: Some(Duration::from_millis(50)),
    };
    let refused = || Error::Transport {
        addr: "a".into(),
        call: "getRow",
        message: "refused".into(),
    };
    let mut n = 0;
    let ok = retrying(&policy, "test", || {
        n += 1;
        if n < 4 {
            Err(refused())
        } else {
            Ok(n)
        }
    });
    assert_eq!(ok.unwrap(), 4);

    let mut n = 0;
    let fatal = retrying(&policy, "test", || -> Result<(), Error> {
        n += 1;
        Err(server("TableNotFoundException: t", None))
    });
    assert_eq!(n, 1);
    assert!(matches!(fatal, Err(Error::Server { .. })));

    let gave_up = retrying(&policy, "test", || -> Result<(), Error> { Err(refused()) });
    assert!(
        matches!(gave_up, Err(Error::GaveUp { attempts, .. }) if attempts > 3),
        "{gave_up:?}"
    );
}

#[test]
fn thrift2_defaults_to_the_thrift1_host() {
    assert_eq!(default_thrift2("127.0.0.1:9090"), "127.0.0.1:9091");
    assert_eq!(default_thrift2("hbase.example:19090"), "hbase.example:9091");
    let cfg = HbaseConfig::new("h:1").with_thrift2("g:2");
    assert_eq!((cfg.thrift1.as_str(), cfg.thrift2.as_str()), ("h:1", "g:2"));
    assert_eq!(
        (cfg.batch_rows, cfg.batch_cells, cfg.batch_bytes),
        (10_000, 10_000, 4 << 20)
    );
    // The defaults the client had before `[store.hbase_client]` could change them.
    assert_eq!((cfg.scan_caching, cfg.read_connections), (1000, 16));
    assert_eq!(
        (cfg.connect_timeout, cfg.rpc_timeout, cfg.idle_reconnect),
        (
            Duration::from_secs(5),
            Duration::from_secs(60),
            Duration::from_secs(45)
        )
    );
    assert_eq!(
        cfg.retry,
        RetryPolicy {
            initial_backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(10),
            max_elapsed: None,
        }
    );
}

fn described(ttl: Option<u64>, compression: &str, bloom: &str, versions: u32) -> FamilyDescription {
    FamilyDescription {
        name: "t".into(),
        ttl_secs: ttl,
        compression: compression.into(),
        bloom: bloom.into(),
        max_versions: versions,
        block_size: DEFAULT_BLOCK_SIZE,
        data_block_encoding: "NONE".into(),
    }
}

#[test]
fn schema_differences_name_each_attribute() {
    let want = schema::narrow_table().families;
    let same = described(Some(schema::RETENTION_SECS), "SNAPPY", "ROW", 1);
    assert!(schema_differences(&want, &[same]).is_empty());

    let other = described(None, "NONE", "ROWCOL", 3);
    let diffs = schema_differences(&want, &[other]);
    assert_eq!(
        diffs,
        [
            "family t: TTL is FOREVER, want 7776000",
            "family t: COMPRESSION is NONE, want SNAPPY",
            "family t: BLOOMFILTER is ROWCOL, want ROW",
            "family t: VERSIONS is 3, want 1",
        ]
    );

    let mut extra = described(Some(schema::RETENTION_SECS), "SNAPPY", "ROW", 1);
    extra.name = "x".into();
    let want = vec![FamilySpec {
        name: "t",
        ttl_secs: None,
        compression: Compression::None,
        bloom: Bloom::None,
        max_versions: 1,
        block_size: DEFAULT_BLOCK_SIZE,
        data_block_encoding: DataBlockEncoding::None,
        packed: false,
        packed_apart: &[],
    }];
    assert_eq!(
        schema_differences(&want, &[extra]),
        ["family t is missing", "unexpected family x"]
    );
}

#[test]
fn block_layout_differences_are_apart_from_the_schema_and_say_how_to_alter() {
    let mut want = schema::narrow_table().families;
    want[0].block_size = 16 * 1024;
    want[0].data_block_encoding = DataBlockEncoding::FastDiff;
    let have = described(Some(schema::RETENTION_SECS), "SNAPPY", "ROW", 1);
    assert!(schema_differences(&want, std::slice::from_ref(&have)).is_empty());
    assert_eq!(
        storage_differences(&want, std::slice::from_ref(&have)),
        [
            "family t: BLOCKSIZE is 65536, want 16384",
            "family t: DATA_BLOCK_ENCODING is NONE, want FAST_DIFF",
        ]
    );
    assert_eq!(
        alter_commands("ts_metric", &want, std::slice::from_ref(&have)),
        [
            "alter 'ts_metric', {NAME => 't', BLOCKSIZE => 16384, DATA_BLOCK_ENCODING => 'FAST_DIFF'}",
            "major_compact 'ts_metric'",
        ]
    );
    let same = FamilyDescription {
        block_size: 16 * 1024,
        data_block_encoding: "FAST_DIFF".into(),
        ..have
    };
    assert!(storage_differences(&want, std::slice::from_ref(&same)).is_empty());
    assert!(alter_commands("ts_metric", &want, &[same]).is_empty());
}

/// The descriptor's fields hourglass sets, block size and data block encoding included, read
/// back as written through Thrift's binary protocol, with HBase's field ids.
#[test]
fn a_family_descriptor_round_trips_through_the_binary_protocol() {
    use super::thrift2::{
        TBloomFilterType, TColumnFamilyDescriptor, TCompressionAlgorithm, TDataBlockEncoding,
    };
    use thrift::protocol::{
        TBinaryInputProtocol, TBinaryOutputProtocol, TFieldIdentifier, TOutputProtocol,
        TSerializable, TStructIdentifier, TType,
    };

    for encoding in [
        TDataBlockEncoding::NONE,
        TDataBlockEncoding::FAST_DIFF,
        TDataBlockEncoding::ROW_INDEX_V1,
    ] {
        let desc = TColumnFamilyDescriptor::new(
            b"t".to_vec(),
            16_384,
            TBloomFilterType::ROW,
            TCompressionAlgorithm::SNAPPY,
            encoding,
            1,
            7_776_000,
        );
        let mut bytes = Vec::new();
        desc.write_to_out_protocol(&mut TBinaryOutputProtocol::new(&mut bytes, true))
            .unwrap();
        // Field 4 (i32 16384) and field 8 (the enum as an i32), as HBase's IDL numbers them.
        let field = |id: u8, value: i32| {
            let mut f = vec![8, 0, id];
            f.extend_from_slice(&value.to_be_bytes());
            f
        };
        for f in [field(4, 16_384), field(8, encoding.0)] {
            assert!(bytes.windows(f.len()).any(|w| w == f), "{f:?} in {bytes:?}");
        }
        let back = TColumnFamilyDescriptor::read_from_in_protocol(&mut TBinaryInputProtocol::new(
            &bytes[..],
            true,
        ))
        .unwrap();
        assert_eq!(back, desc);
    }

    // A descriptor as HBase sends it, with fields hourglass does not declare (7: i16
    // dfsReplication, 14: bool blockCacheEnabled): they are skipped, the rest read.
    let mut bytes = Vec::new();
    {
        let mut o = TBinaryOutputProtocol::new(&mut bytes, true);
        o.write_struct_begin(&TStructIdentifier::new("TColumnFamilyDescriptor"))
            .unwrap();
        o.write_field_begin(&TFieldIdentifier::new("name", TType::String, 1))
            .unwrap();
        o.write_bytes(b"d").unwrap();
        o.write_field_end().unwrap();
        o.write_field_begin(&TFieldIdentifier::new("blockSize", TType::I32, 4))
            .unwrap();
        o.write_i32(65_536).unwrap();
        o.write_field_end().unwrap();
        o.write_field_begin(&TFieldIdentifier::new("dfsReplication", TType::I16, 7))
            .unwrap();
        o.write_i16(3).unwrap();
        o.write_field_end().unwrap();
        o.write_field_begin(&TFieldIdentifier::new("dataBlockEncoding", TType::I32, 8))
            .unwrap();
        o.write_i32(7).unwrap();
        o.write_field_end().unwrap();
        o.write_field_begin(&TFieldIdentifier::new("blockCacheEnabled", TType::Bool, 14))
            .unwrap();
        o.write_bool(true).unwrap();
        o.write_field_end().unwrap();
        o.write_field_stop().unwrap();
        o.write_struct_end().unwrap();
    }
    let read = TColumnFamilyDescriptor::read_from_in_protocol(&mut TBinaryInputProtocol::new(
        &bytes[..],
        true,
    ))
    .unwrap();
    assert_eq!(read.name, b"d");
    assert_eq!(read.block_size, Some(65_536));
    assert_eq!(
        read.data_block_encoding,
        Some(TDataBlockEncoding::ROW_INDEX_V1)
    );
    assert_eq!(read.compression_type, None);
}
