//! Wide rows in the series layout (`SeriesPoints::Cells`): a row per series and hour whose
//! offset cells are points and whose other cells stay generic. Puts split between both, reads
//! answer as a generic store of the same writes does, runs merge under pane puts, and a table
//! created generic stays generic.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::series::run_count;
use super::*;
use crate::embedded::prepare::OpenMode;
use crate::embedded::store::series::bucket_of;
use crate::schema::{SeriesLayout, SeriesPoints};
use crate::table::{Column, TableReader, TableWriter, TimeRange};

/// Seconds of an hour, a wide row's span.
const HOUR: i64 = 3600;

/// Rows `<series>/<hour start>`, a point per cell `<offset>` (`0`..`3599`, plain decimal) whose
/// value is a double as Rust prints it, every cell stamped with the hour's last millisecond.
const WIDE: SeriesLayout = SeriesLayout {
    name: "test-wide-v1",
    split: |row| {
        let text = std::str::from_utf8(row).ok()?;
        let (series, hour) = text.split_once('/')?;
        let hour: i64 = hour.parse().ok()?;
        (!series.is_empty() && hour.rem_euclid(HOUR) == 0).then_some((series, hour))
    },
    join: |series, hour, out| out.extend_from_slice(format!("{series}/{hour}").as_bytes()),
    series_in: |_, _| None,
    stamp: |hour| hour.checked_add(HOUR)?.checked_mul(1000)?.checked_sub(1),
    family: "t",
    points: SeriesPoints::Cells {
        time: |hour, q| {
            let text = std::str::from_utf8(q).ok()?;
            let offset: i64 = text.parse().ok()?;
            let canonical = offset.to_string() == text;
            (canonical && (0..HOUR).contains(&offset)).then(|| hour.checked_add(offset))?
        },
        row_time: |ts| ts - ts.rem_euclid(HOUR),
        qualifier: |hour, ts, out| out.extend_from_slice((ts - hour).to_string().as_bytes()),
    },
    parse: |b| std::str::from_utf8(b).ok()?.parse().ok(),
    render: |v, out| out.extend_from_slice(v.to_string().as_bytes()),
};

/// The test table, family `t` packed with `n` apart (a wide row's summary), and with the wide
/// layout if `wide`.
fn wide_table(wide: bool) -> TableSpec {
    let mut spec = table_with(true);
    spec.families[0].packed_apart = &["n", "sum"];
    if wide {
        spec.key = spec.key.with_series(WIDE);
    }
    spec
}

fn open_wide(dir: &TempDir, spec: TableSpec, series_layout: bool) -> EmbeddedStore {
    let (_, clock) = clock();
    EmbeddedStore::open_with_layouts(
        dir.path(),
        &[spec],
        clock,
        OpenMode::ReadWrite,
        series_layout,
    )
    .unwrap()
}

/// The start of the hour holding `NOW`, plus `hours`.
fn hour(hours: i64) -> i64 {
    let now = NOW / 1000;
    now - now.rem_euclid(HOUR) + hours * HOUR
}

/// The stamp of every cell of the row of hour start `h`.
fn stamp(h: i64) -> i64 {
    (h + HOUR) * 1000 - 1
}

fn wide_row(series: &str, h: i64) -> Vec<u8> {
    format!("{series}/{h}").into_bytes()
}

/// A put of a wide row's `(qualifier, value)` cells, stamped as the layout stamps them.
fn wide_put(series: &str, h: i64, cells: &[(&str, &str)]) -> Mutation {
    put(
        &wide_row(series, h),
        cells
            .iter()
            .map(|(q, v)| cell("t", q.as_bytes(), stamp(h), v.as_bytes()))
            .collect(),
    )
}

/// The `(qualifier, value)` cells of a row read back.
fn cells_of(row: Option<Row>) -> Vec<(String, String)> {
    row.map_or_else(Vec::new, |r| {
        r.cells
            .into_iter()
            .map(|c| {
                (
                    String::from_utf8_lossy(&c.qualifier).into_owned(),
                    String::from_utf8_lossy(&c.value).into_owned(),
                )
            })
            .collect()
    })
}

fn pairs(cells: &[(&str, &str)]) -> Vec<(String, String)> {
    cells
        .iter()
        .map(|(q, v)| (q.to_string(), v.to_string()))
        .collect()
}

/// Key-values in the table's generations (the generic layout).
fn generic_count(store: &EmbeddedStore) -> usize {
    store.inner.tables[0]
        .generations()
        .iter()
        .map(|g| g.iter().count())
        .sum()
}

#[test]
fn a_wide_put_splits_its_points_into_runs_and_keeps_its_summary_generic() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_wide(&dir, wide_table(true), true);
    let h = hour(0);
    write(
        &store,
        vec![
            wide_put(
                "d1",
                h,
                &[("0", "1.5"), ("10", "2"), ("n", "2"), ("sum", "3.5")],
            ),
            wide_put("d2", h, &[("3599", "-1")]),
        ],
    );
    let buckets = [bucket_of("d1"), bucket_of("d2")];
    assert_eq!(
        run_count(&store),
        if buckets[0] == buckets[1] { 1 } else { 2 },
        "one run: a chunk a bucket"
    );
    assert_eq!(generic_count(&store), 1, "only d1's summary is generic");
    let row = store.get(T, &wide_row("d1", h), None).unwrap().unwrap();
    assert!(row.cells.iter().all(|c| c.ts_ms == stamp(h)), "{row:?}");
    assert_eq!(
        cells_of(Some(row)),
        pairs(&[("0", "1.5"), ("10", "2"), ("n", "2"), ("sum", "3.5")])
    );
    assert_eq!(
        cells_of(store.get(T, &wide_row("d2", h), None).unwrap()),
        pairs(&[("3599", "-1")])
    );
    // A point cell that is not one (`1.50` renders `1.5`): the whole put is generic, and the
    // partition is marked never to be merged.
    write(
        &store,
        vec![wide_put("d1", h, &[("20", "1.50"), ("30", "4")])],
    );
    let runs = store.inner.tables[0].series.as_ref().unwrap();
    assert!(runs.is_marked(crate::embedded::store::series::partition_of(stamp(h))));
    assert_eq!(
        cells_of(store.get(T, &wide_row("d1", h), None).unwrap()),
        pairs(&[
            ("0", "1.5"),
            ("10", "2"),
            ("20", "1.50"),
            ("30", "4"),
            ("n", "2"),
            ("sum", "3.5")
        ])
    );
}

#[test]
fn pane_puts_with_their_summary_leave_the_partition_mergeable() {
    let dir = tempfile::tempdir().unwrap();
    let store = open_wide(&dir, wide_table(true), true);
    let h = hour(0);
    let mut w = store.writer();
    let mut expected = BTreeMap::new();
    let commits = 100;
    for i in 0..commits {
        // A live hour's panes: a new point and the rewritten summary, one commit each.
        let n = (i + 1).to_string();
        let value = format!("{i}.5");
        let offset = (i * 10).to_string();
        w.write(vec![wide_put(
            "d1",
            h,
            &[(offset.as_str(), value.as_str()), ("n", n.as_str())],
        )])
        .unwrap();
        w.flush().unwrap();
        expected.insert(offset, value);
        expected.insert("n".to_string(), n);
    }
    drop(w);
    let runs = store.inner.tables[0].series.as_ref().unwrap();
    assert!(!runs.is_marked(crate::embedded::store::series::partition_of(stamp(h))));
    assert!(
        run_count(&store) < 10,
        "{commits} commits, {} runs",
        run_count(&store)
    );
    let got: BTreeMap<String, String> = cells_of(store.get(T, &wide_row("d1", h), None).unwrap())
        .into_iter()
        .collect();
    assert_eq!(got, expected);
    drop(store);
    let store = open_wide(&dir, wide_table(true), true);
    let got: BTreeMap<String, String> = cells_of(store.get(T, &wide_row("d1", h), None).unwrap())
        .into_iter()
        .collect();
    assert_eq!(got, expected, "after a reopen");
}

#[test]
fn a_wide_table_created_generic_stays_generic() {
    let dir = tempfile::tempdir().unwrap();
    let h = hour(0);
    {
        // A store made with the series layout before the table declared its wide points.
        let store = open_wide(&dir, wide_table(false), true);
        assert!(store.inner.tables[0].series.is_none());
        write(&store, vec![wide_put("d1", h, &[("0", "1"), ("n", "1")])]);
    }
    let store = open_wide(&dir, wide_table(true), true);
    assert!(store.inner.tables[0].series.is_none(), "kept generic");
    write(&store, vec![wide_put("d1", h, &[("10", "2"), ("n", "2")])]);
    assert_eq!(
        cells_of(store.get(T, &wide_row("d1", h), None).unwrap()),
        pairs(&[("0", "1"), ("10", "2"), ("n", "2")])
    );
}

/// One step of the comparison of a series store with a generic one.
#[derive(Debug, Clone)]
enum Op {
    /// A put of a row's cells `(qualifier, stamp's distance from the layout's, value)`.
    Put {
        row: usize,
        cells: Vec<(&'static str, i64, &'static str)>,
    },
    DeleteRow {
        row: usize,
        /// Up to the stamp (the whole row) or before it (none of its points).
        all: bool,
    },
    DeleteColumn {
        row: usize,
        qualifier: &'static str,
    },
    Flush,
    Reopen,
}

/// The rows of the comparison: `(series, hours from NOW's)`; `-1` is past the TTL, and the
/// last is not on the hour (never a series row).
const ROWS: [(&str, i64); 5] = [("a", 0), ("a", 1), ("b", 0), ("ab", 0), ("a", -1)];

fn row_of(index: usize) -> (Vec<u8>, i64) {
    let (series, hours) = ROWS[index];
    let h = hour(hours);
    (wide_row(series, h), stamp(h))
}

fn op() -> impl Strategy<Value = Op> {
    let qualifier = prop::sample::select(vec!["0", "5", "10", "3599", "05", "n", "sum", "x"]);
    let value = prop::sample::select(vec!["1", "1.5", "-2", "1.50", "nan?", "0"]);
    let cell = (
        qualifier.clone(),
        prop_oneof![8 => Just(0i64), 1 => Just(-1), 1 => Just(1)],
        value,
    );
    let row = 0..ROWS.len() + 1;
    prop_oneof![
        8 => (row.clone(), proptest::collection::vec(cell, 1..6))
            .prop_map(|(row, cells)| Op::Put { row, cells }),
        1 => (row.clone(), any::<bool>()).prop_map(|(row, all)| Op::DeleteRow { row, all }),
        1 => (row, qualifier).prop_map(|(row, qualifier)| Op::DeleteColumn { row, qualifier }),
        3 => Just(Op::Flush),
        1 => Just(Op::Reopen),
    ]
}

/// Row `index` of [`ROWS`], or the row off the hour.
fn key_and_stamp(index: usize) -> (Vec<u8>, i64) {
    if index < ROWS.len() {
        row_of(index)
    } else {
        let h = hour(0) + 5;
        (wide_row("a", h), stamp(hour(0)))
    }
}

/// Applies `op` to `store`'s writer.
fn apply(w: &mut crate::embedded::EmbeddedWriter, op: &Op) {
    match op {
        Op::Put { row, cells } => {
            let (key, at) = key_and_stamp(*row);
            let cells = cells
                .iter()
                .map(|(q, off, v)| cell("t", q.as_bytes(), at + off, v.as_bytes()))
                .collect();
            w.write(vec![put(&key, cells)]).unwrap();
        }
        Op::DeleteRow { row, all } => {
            let (key, at) = key_and_stamp(*row);
            let ts_ms = if *all { at } else { at - 1 };
            w.write(vec![Mutation::DeleteRow {
                table: T,
                row: key,
                ts_ms,
            }])
            .unwrap();
        }
        Op::DeleteColumn { row, qualifier } => {
            let (key, _) = key_and_stamp(*row);
            w.write(vec![Mutation::DeleteColumn {
                table: T,
                row: key,
                family: "t".into(),
                qualifier: qualifier.as_bytes().to_vec(),
                ts_ms: i64::MAX,
            }])
            .unwrap();
        }
        Op::Flush | Op::Reopen => w.flush().unwrap(),
    }
}

/// What a store answers: a scan of everything, of series `a`'s rows, of the hour of NOW's
/// stamps, of column `t:10`; a Get of each row and of its three versions.
fn answers(store: &EmbeddedStore) -> Vec<Vec<Row>> {
    let spec = |start: &[u8], stop: &[u8]| ScanSpec {
        start: start.to_vec(),
        stop: stop.to_vec(),
        ..ScanSpec::default()
    };
    let now_hour = stamp(hour(0));
    let mut out = vec![
        store.scan(T, &spec(b"", b"")).unwrap(),
        store.scan(T, &spec(b"a/", b"a0")).unwrap(),
        store
            .scan(
                T,
                &ScanSpec {
                    time_range: Some(TimeRange::new(now_hour, now_hour + 1)),
                    ..spec(b"", b"")
                },
            )
            .unwrap(),
        store
            .scan(
                T,
                &ScanSpec {
                    columns: vec![Column::new("t", b"10")],
                    ..spec(b"", b"")
                },
            )
            .unwrap(),
    ];
    for index in 0..=ROWS.len() {
        let (key, _) = key_and_stamp(index);
        out.push(store.get(T, &key, None).unwrap().into_iter().collect());
        out.push(
            store
                .get_versions(T, &key, None, 3)
                .unwrap()
                .into_iter()
                .collect(),
        );
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// The same writes to a store keeping wide points in series runs and to a generic one
    /// give the same answers, cell for cell: stamps, values' bytes, order.
    #[test]
    fn a_series_store_answers_as_a_generic_one(
        ops in proptest::collection::vec(op(), 1..70),
        newest_wins in any::<bool>(),
    ) {
        let dirs = [TempDir::new().unwrap(), TempDir::new().unwrap()];
        // The generic store, then the series one.
        let open = || -> Vec<EmbeddedStore> {
            (0..2).map(|i| open_wide(&dirs[i], wide_table(true), i == 1)).collect()
        };
        let mut stores = open();
        prop_assert!(stores[0].inner.tables[0].series.is_none());
        prop_assert!(stores[1].inner.tables[0].series.is_some());
        let writers = |stores: &[EmbeddedStore]| -> Vec<crate::embedded::EmbeddedWriter> {
            stores
                .iter()
                .map(|s| s.writer().newest_timestamp_wins(newest_wins))
                .collect()
        };
        let mut w = writers(&stores);
        for op in &ops {
            for w in &mut w {
                apply(w, op);
            }
            if matches!(op, Op::Reopen) {
                w.clear();
                stores.clear();
                stores = open();
                w = writers(&stores);
            }
        }
        for w in &mut w {
            w.flush().unwrap();
        }
        prop_assert_eq!(answers(&stores[1]), answers(&stores[0]));
    }
}
