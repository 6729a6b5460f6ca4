//! Unit tests of the HBase backend that need no HBase: batching, retry classification, schema
//! comparison. The real path is tested against a live HBase in `tests/tests/hbase_*.rs`.

use std::time::Duration;

use crate::schema::{self, Bloom, Compression, FamilySpec};
use crate::table::Cell;
use hbase_thrift::hbase::{IOError, IllegalArgument};

use super::admin::{schema_differences, FamilyDescription};
use super::client::classify;
use super::config::{default_thrift2, HbaseConfig, RetryPolicy};
use super::retry::retrying;
use super::sink::{Buffer, PlannedCall, RowPut};
use super::{is_retriable, Error};

fn cell(qualifier: &str, ts_ms: i64, value: &str) -> Cell {
    Cell {
        family: "t".into(),
        qualifier: qualifier.as_bytes().to_vec(),
        ts_ms,
        value: value.as_bytes().to_vec(),
    }
}

fn row(key: &str, columns: &[(&str, &str)]) -> RowPut {
    RowPut {
        row: key.as_bytes().to_vec(),
        delete_families: Vec::new(),
        columns: columns
            .iter()
            .map(|(c, v)| (c.as_bytes().to_vec(), v.as_bytes().to_vec()))
            .collect(),
    }
}

fn summary(calls: &[PlannedCall]) -> Vec<(&'static str, i64, Vec<RowPut>)> {
    calls
        .iter()
        .map(|c| (c.table, c.ts_ms, c.batches.clone()))
        .collect()
}

#[test]
fn puts_are_grouped_by_table_and_timestamp() {
    let mut buf = Buffer::new(1000, 1 << 20, 4 << 20);
    // One wide row with cells at two timestamps goes to two calls.
    assert!(buf
        .push(
            "wide",
            b"d_0",
            vec![cell("1", 1000, "a"), cell("2", 2000, "b")]
        )
        .is_empty());
    assert!(buf
        .push("narrow", b"k1", vec![cell("v", 1000, "x")])
        .is_empty());
    assert!(buf
        .push("narrow", b"k2", vec![cell("v", 2000, "y")])
        .is_empty());
    assert!(buf
        .push("narrow", b"k3", vec![cell("v", 1000, "z")])
        .is_empty());
    let calls = buf.drain();
    assert!(buf.is_empty());
    assert_eq!(buf.total_bytes(), 0);
    assert_eq!(
        summary(&calls),
        vec![
            (
                "narrow",
                1000,
                vec![row("k1", &[("t:v", "x")]), row("k3", &[("t:v", "z")])]
            ),
            ("narrow", 2000, vec![row("k2", &[("t:v", "y")])]),
            ("wide", 1000, vec![row("d_0", &[("t:1", "a")])]),
            ("wide", 2000, vec![row("d_0", &[("t:2", "b")])]),
        ]
    );
}

#[test]
fn puts_to_one_row_are_merged_never_dropped() {
    let mut buf = Buffer::new(1000, 1 << 20, 4 << 20);
    buf.push("wide", b"d_0", vec![cell("1", 1000, "a")]);
    buf.push("wide", b"d_0", vec![cell("2", 1000, "b")]);
    buf.push("wide", b"d_1", vec![cell("1", 1000, "c")]);
    // The same cell again at the same timestamp: the later value wins, as in HBase.
    buf.push("wide", b"d_0", vec![cell("1", 1000, "a2")]);
    let calls = buf.drain();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].cells, 3);
    assert_eq!(
        calls[0].batches,
        vec![
            row("d_0", &[("t:1", "a2"), ("t:2", "b")]),
            row("d_1", &[("t:1", "c")])
        ]
    );
}

#[test]
fn deletes_travel_with_the_puts_of_their_timestamp() {
    let mut buf = Buffer::new(1000, 1 << 20, 4 << 20);
    buf.push("room", b"a_d1", vec![cell("v", 5000, "1")]);
    assert!(buf.push_delete("room", b"a_d1", 2000, &["t"]).is_none());
    assert!(buf.push_delete("room", b"b_d1", 5000, &["t"]).is_none());
    let bytes = buf.total_bytes();
    assert!(buf.push_delete("room", b"b_d1", 5000, &["t"]).is_none());
    assert_eq!(
        buf.total_bytes(),
        bytes,
        "the same delete twice is one delete"
    );
    let mut deleted = row("a_d1", &[]);
    deleted.delete_families = vec![b"t".to_vec()];
    let mut moved = row("b_d1", &[]);
    moved.delete_families = vec![b"t".to_vec()];
    assert_eq!(
        summary(&buf.drain()),
        vec![
            ("room", 2000, vec![deleted]),
            ("room", 5000, vec![row("a_d1", &[("t:v", "1")]), moved]),
        ]
    );
    // A delete counts as a row towards max_rows.
    let mut buf = Buffer::new(2, 1 << 20, 4 << 20);
    assert!(buf.push_delete("room", b"x", 1, &["t"]).is_none());
    let full = buf
        .push_delete("room", b"y", 1, &["t"])
        .expect("2 rows fill the call");
    assert_eq!(full.batches.len(), 2);
}

#[test]
fn a_group_is_sent_when_it_reaches_max_rows() {
    let mut buf = Buffer::new(3, 1 << 20, 4 << 20);
    let mut sent = Vec::new();
    for i in 0..7 {
        sent.extend(buf.push(
            "narrow",
            format!("k{i}").as_bytes(),
            vec![cell("v", 5, "x")],
        ));
    }
    // Merging into an existing row does not add a row.
    sent.extend(buf.push("narrow", b"k6", vec![cell("w", 5, "y")]));
    assert_eq!(
        sent.iter().map(|c| c.batches.len()).collect::<Vec<_>>(),
        [3, 3]
    );
    let rest = buf.drain();
    assert_eq!(rest.len(), 1);
    assert_eq!(
        rest[0].batches,
        vec![row("k6", &[("t:v", "x"), ("t:w", "y")])]
    );
}

#[test]
fn a_put_that_fills_its_group_is_sent_whole() {
    // The second row reaches max_rows with its first cell and max_bytes with its second: the
    // call still carries all three of its cells, or HBase would apply the row in two steps.
    let mut buf = Buffer::new(2, 60, 4 << 20);
    assert!(buf.push("wide", b"a", vec![cell("1", 7, "x")]).is_empty());
    let sent = buf.push(
        "wide",
        b"b",
        vec![
            cell("1", 7, "x"),
            cell("2", 7, &"y".repeat(80)),
            cell("n", 7, "2"),
        ],
    );
    assert_eq!(sent.len(), 1);
    assert_eq!(
        sent[0].batches,
        vec![
            row("a", &[("t:1", "x")]),
            row("b", &[("t:1", "x"), ("t:2", &"y".repeat(80)), ("t:n", "2")]),
        ]
    );
    assert!(buf.is_empty());
}

#[test]
fn a_window_pane_is_one_row_mutation_with_its_summary() {
    // The shape `pipeline::rows::wide_put` gives a pane: points and summary cells all stamped
    // with the hour's last millisecond (pipeline's codec tests check that they share it).
    let qualifiers = ["1", "5", "3599", "n", "min", "max", "sum", "first", "last"];
    let cells: Vec<Cell> = qualifiers.iter().map(|q| cell(q, 7_199_999, "1")).collect();
    let (table, row) = ("ts_metric_hourly", b"d_3600".to_vec());
    let mut buf = Buffer::new(1000, 1 << 20, 4 << 20);
    assert!(buf.push(table, &row, cells).is_empty());
    let calls = buf.drain();
    assert_eq!(calls.len(), 1, "one timestamp, one call: {calls:?}");
    assert_eq!(calls[0].ts_ms, 7_199_999);
    assert_eq!(calls[0].batches.len(), 1);
    let columns: Vec<&[u8]> = calls[0].batches[0]
        .columns
        .iter()
        .map(|(c, _)| c.as_slice())
        .collect();
    assert_eq!(
        columns,
        [
            &b"t:1"[..],
            b"t:5",
            b"t:3599",
            b"t:n",
            b"t:min",
            b"t:max",
            b"t:sum",
            b"t:first",
            b"t:last"
        ]
    );
}

#[test]
fn a_group_is_sent_when_it_reaches_max_bytes_and_all_when_over_budget() {
    let value = "x".repeat(1000);
    let mut buf = Buffer::new(1000, 4000, 10_000);
    let mut sent = Vec::new();
    for i in 0..3 {
        sent.extend(buf.push(
            "narrow",
            format!("k{i}").as_bytes(),
            vec![cell("v", 1, &value)],
        ));
    }
    assert!(sent.is_empty());
    sent.extend(buf.push("narrow", b"k3", vec![cell("v", 1, &value)]));
    assert_eq!(sent.len(), 1, "the 4th 1 kB row crosses 4000 bytes");
    assert_eq!(sent[0].batches.len(), 4);
    assert!(
        sent[0].bytes >= 4000 && sent[0].bytes < 4400,
        "{}",
        sent[0].bytes
    );
    assert_eq!(buf.total_bytes(), 0);

    // Many timestamps, none full: the buffer as a whole asks to be drained.
    for ts in 0..9 {
        buf.push("narrow", b"k", vec![cell("v", ts, &value)]);
        assert!(!buf.over_budget(), "at ts {ts}");
    }
    buf.push("narrow", b"k", vec![cell("v", 9, &value)]);
    assert!(buf.over_budget());
    assert_eq!(buf.drain().len(), 10);
    assert!(!buf.over_budget());
}

#[test]
fn byte_accounting_follows_replaced_values() {
    let mut buf = Buffer::new(1000, 1 << 20, 4 << 20);
    buf.push("narrow", b"k", vec![cell("v", 1, &"x".repeat(100))]);
    let big = buf.total_bytes();
    buf.push("narrow", b"k", vec![cell("v", 1, "y")]);
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
    assert_eq!((cfg.batch_rows, cfg.batch_bytes), (1000, 4 << 20));
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
    }];
    assert_eq!(
        schema_differences(&want, &[extra]),
        ["family t is missing", "unexpected family x"]
    );
}
