//! The series layout on the write and read paths: readings go to series runs and read back as
//! cells, other puts stay generic and merge by write order, the layout is recorded per table
//! and kept on reopen, and partitions go whole at the TTL.

use super::*;
use crate::embedded::prepare::OpenMode;
use crate::embedded::store::series::PARTITION_MS;
use crate::schema::{SeriesLayout, SeriesPoints};
use crate::table::TableReader;

/// Rows `<series>/<second:10>`; `v` a double as Rust prints it, `x` any text.
const LAYOUT: SeriesLayout = SeriesLayout {
    name: "test-v1",
    split: |row| {
        let text = std::str::from_utf8(row).ok()?;
        let (series, ts) = text.split_once('/')?;
        (!series.is_empty() && ts.len() == 10 && ts.bytes().all(|b| b.is_ascii_digit()))
            .then_some(())?;
        Some((series, ts.parse().ok()?))
    },
    join: |series, ts, out| out.extend_from_slice(format!("{series}/{ts:010}").as_bytes()),
    series_in: |_, _| None,
    stamp: |ts| ts.checked_mul(1000),
    family: "t",
    points: SeriesPoints::Row {
        value: b"v",
        extra: b"x",
    },
    parse: |b| std::str::from_utf8(b).ok()?.parse().ok(),
    render: |v, out| out.extend_from_slice(v.to_string().as_bytes()),
};

fn series_table() -> TableSpec {
    let mut spec = table_with(true);
    spec.key = spec.key.with_series(LAYOUT);
    spec
}

/// Runs (not markers) in the table's series keyspace.
pub(super) fn run_count(store: &EmbeddedStore) -> usize {
    let runs = store.inner.tables[0].series.as_ref().expect("series table");
    runs.keyspace
        .iter()
        .map(|item| item.key().expect("key"))
        .filter(|key| key.len() == 18)
        .count()
}

pub(super) fn open_series(dir: &TempDir, series_layout: bool) -> (EmbeddedStore, Arc<AtomicI64>) {
    let (now, clock) = clock();
    let store = EmbeddedStore::open_with_layouts(
        dir.path(),
        &[series_table()],
        clock,
        OpenMode::ReadWrite,
        series_layout,
    )
    .unwrap();
    (store, now)
}

/// Stamped `NOW` rounded down to the second, plus `secs`.
pub(super) fn second(secs: i64) -> i64 {
    NOW / 1000 + secs
}

pub(super) fn row(series: &str, ts: i64) -> Vec<u8> {
    format!("{series}/{ts:010}").into_bytes()
}

pub(super) fn reading(series: &str, ts: i64, value: &str) -> Mutation {
    put(
        &row(series, ts),
        vec![
            cell("t", b"v", ts * 1000, value.as_bytes()),
            cell("t", b"x", ts * 1000, b"{\"k\":1}"),
        ],
    )
}

/// Runs held in the table's series keyspace.
fn runs(store: &EmbeddedStore) -> usize {
    let t = &store.inner.tables[0];
    t.series.as_ref().map_or(0, |s| s.keyspace.iter().count())
}

pub(super) fn value_of(store: &EmbeddedStore, key: &[u8]) -> Option<Vec<u8>> {
    let row = store.get(T, key, None).unwrap()?;
    row.cell("t", b"v").map(|c| c.value.clone())
}

#[test]
fn readings_go_to_series_runs_and_read_back_as_cells() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open_series(&dir, true);
    let ts = second(0);
    write(
        &store,
        vec![reading("d1", ts, "1.5"), reading("d2", ts + 10, "2")],
    );
    assert!(runs(&store) >= 1, "the readings were sealed as a run");
    assert_eq!(store.inner.tables[0].generations()[0].iter().count(), 0);
    assert_eq!(value_of(&store, &row("d1", ts)), Some(b"1.5".to_vec()));
    let rows = scan(&store, b"", b"", None);
    assert_eq!(keys(&rows), [&row("d1", ts)[..], &row("d2", ts + 10)[..]]);
    assert_eq!(rows[0].cells.len(), 2);
}

#[test]
fn a_generic_put_after_a_buffered_reading_wins_and_one_before_loses() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open_series(&dir, true);
    let ts = second(0);
    let key = row("d1", ts);
    // Same stamp, another shape (no value cell of the layout's form): stored generic.
    let generic = |v: &[u8]| put(&key, vec![cell("t", b"v", ts * 1000, v)]);
    let mut w = store.writer();
    w.write(vec![reading("d1", ts, "1"), generic(b"not a number")])
        .unwrap();
    w.flush().unwrap();
    assert_eq!(value_of(&store, &key), Some(b"not a number".to_vec()));
    w.write(vec![generic(b"again"), reading("d1", ts, "2")])
        .unwrap();
    w.flush().unwrap();
    assert_eq!(value_of(&store, &key), Some(b"2".to_vec()));
}

#[test]
fn a_store_keeps_the_layout_it_was_created_with() {
    let dir = tempfile::tempdir().unwrap();
    let ts = second(0);
    {
        let (store, _) = open_series(&dir, false);
        write(&store, vec![reading("d1", ts, "1")]);
        assert!(store.inner.tables[0].series.is_none());
    }
    // Asked for series runs, an existing generic table stays generic and reads as before.
    let (store, _) = open_series(&dir, true);
    assert!(store.inner.tables[0].series.is_none());
    assert_eq!(value_of(&store, &row("d1", ts)), Some(b"1".to_vec()));
    drop(store);

    let dir = tempfile::tempdir().unwrap();
    {
        let (store, _) = open_series(&dir, true);
        write(&store, vec![reading("d1", ts, "1")]);
    }
    // Reopened without the flag, a series table stays one and its readings are there.
    let (store, _) = open_series(&dir, false);
    assert!(store.inner.tables[0].series.is_some());
    assert_eq!(value_of(&store, &row("d1", ts)), Some(b"1".to_vec()));
    drop(store);
    // A spec without the layout cannot read it: refused, saying what to do.
    let (_, clock) = clock();
    let err = EmbeddedStore::open_with_clock(dir.path(), &[table_with(true)], clock).unwrap_err();
    assert!(err.to_string().contains("new --store"), "{err}");
}

#[test]
fn partitions_past_the_ttl_are_dropped_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (store, now) = open_series(&dir, true);
    let ts = second(0);
    write(&store, vec![reading("d1", ts, "1")]);
    assert_eq!(runs(&store), 1);
    // Past the TTL of the partition's last stamp: the next seal drops it.
    now.store(
        NOW + PARTITION_MS + TTL_SECS as i64 * 1000,
        Ordering::SeqCst,
    );
    assert_eq!(value_of(&store, &row("d1", ts)), None, "expired");
    write(
        &store,
        vec![reading("d2", second(PARTITION_MS / 1000 * 2), "2")],
    );
    assert_eq!(
        runs(&store),
        1,
        "the old partition went, the new one holds a run"
    );
}

#[test]
fn a_row_delete_removes_the_point_from_its_run() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open_series(&dir, true);
    let ts = second(0);
    write(
        &store,
        vec![reading("d1", ts, "1"), reading("d1", ts + 1, "2")],
    );
    write(
        &store,
        vec![Mutation::DeleteRow {
            table: T,
            row: row("d1", ts),
            ts_ms: i64::MAX,
        }],
    );
    assert_eq!(value_of(&store, &row("d1", ts)), None);
    assert_eq!(value_of(&store, &row("d1", ts + 1)), Some(b"2".to_vec()));
    drop(store);
    let (store, _) = open_series(&dir, true);
    assert_eq!(
        value_of(&store, &row("d1", ts)),
        None,
        "the removal was committed"
    );
}

#[test]
fn a_scan_whose_stop_holds_0x00_keeps_its_stop_for_the_points() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open_series(&dir, true);
    let ts = second(0);
    write(&store, (0..4).map(|i| reading("d1", ts + i, "1")).collect());
    let mut stop = row("d1", ts + 1);
    stop.push(0);
    let rows = scan(&store, &row("d1", ts), &stop, None);
    assert_eq!(keys(&rows), [&row("d1", ts)[..], &row("d1", ts + 1)[..]]);
}

#[test]
fn purge_expired_drops_expired_partitions_and_keeps_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let (store, now) = open_series(&dir, true);
    let old = second(0);
    let new = old + 2 * PARTITION_MS / 1000;
    write(
        &store,
        vec![reading("d1", old, "1"), reading("d1", new, "2")],
    );
    now.store(
        NOW + PARTITION_MS + TTL_SECS as i64 * 1000,
        Ordering::SeqCst,
    );
    store.purge_expired().unwrap();
    assert_eq!(
        store.inner.tables[0]
            .series
            .as_ref()
            .unwrap()
            .partitions()
            .len(),
        1
    );
    assert_eq!(value_of(&store, &row("d1", new)), Some(b"2".to_vec()));
}
