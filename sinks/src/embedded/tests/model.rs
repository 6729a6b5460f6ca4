//! Scans and gets agree with a model of HBase's semantics over random operations.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

/// One step of the model test.
#[derive(Debug, Clone)]
enum Op {
    /// A put of cells `(qualifier, ts, value)`, in order.
    Put {
        row: Vec<u8>,
        cells: Vec<(Vec<u8>, i64, u8)>,
    },
    Delete {
        row: Vec<u8>,
        ts: i64,
    },
    Flush,
    /// The writer's flush, then a major compaction of every generation, which expires cells.
    Compact,
}

fn row_key() -> impl Strategy<Value = Vec<u8>> {
    // Few distinct bytes, so rows often prefix one another.
    proptest::collection::vec(prop::sample::select(vec![b'a', b'b', b'_']), 1..4)
}

fn op() -> impl Strategy<Value = Op> {
    // Timestamps straddle the TTL boundary of family `t` (NOW - 10 s).
    let ts = (0i64..=20).prop_map(|s| NOW - s * 1000);
    // Two long qualifiers do not fit one packed key (`codec::PACKED_QUALIFIER_BYTES`).
    let cell = (
        prop::sample::select(vec![&b"v"[..], b"x", b"10", &LONG[..200], &LONG[..120]]),
        ts.clone(),
        any::<u8>(),
    )
        .prop_map(|(q, ts, value)| (q.to_vec(), ts, value));
    prop_oneof![
        6 => (row_key(), proptest::collection::vec(cell, 1..5))
            .prop_map(|(row, cells)| Op::Put { row, cells }),
        1 => (row_key(), ts).prop_map(|(row, ts)| Op::Delete { row, ts }),
        1 => Just(Op::Flush),
        1 => Just(Op::Compact),
    ]
}

/// Bytes of the long qualifiers.
const LONG: [u8; 200] = [b'q'; 200];

/// The store's layout of family `t` in a model test.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    Cells,
    Packed,
    /// Packed, `t:x` stored apart (`FamilySpec::packed_apart`).
    PackedApart,
    /// Cells, then packed from a reopen halfway on, as for a store written before `t` was
    /// packed.
    CellsThenPacked,
}

/// Rows → qualifier → (timestamp, value), with last-write-wins puts (or, with
/// `newest_timestamp_wins`, newest-timestamp-wins ones).
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
        // The writer's own buffer sizes, or a few cells' worth, so that both of its paths
        // (write batches and ingested tables) and their mixes are checked.
        ingest in prop_oneof![Just(None), (1usize..400).prop_map(Some)],
        // The default generation size, or one that closes a generation after every table the
        // writer ingests, so that reads merge several.
        split in any::<bool>(),
        layout in prop_oneof![
            Just(Layout::Cells),
            Just(Layout::Packed),
            Just(Layout::PackedApart),
            Just(Layout::CellsThenPacked),
        ],
        newest_wins in any::<bool>(),
    ) {
        let dir = TempDir::new().unwrap();
        let open_with = |packed: bool| {
            let (_, clock) = clock();
            let mut spec = table_with(packed);
            if layout == Layout::PackedApart {
                spec.families[0].packed_apart = &["x"];
            }
            let store = EmbeddedStore::open_with_clock(dir.path(), &[spec], clock).unwrap();
            if split {
                store.set_generation_bytes(0);
            }
            let mut w = store.writer().newest_timestamp_wins(newest_wins);
            if let Some(bytes) = ingest {
                w = w.ingest_thresholds(bytes, bytes / 2);
            }
            (store, w)
        };
        let mut model = Model::new();
        let (mut store, mut w) = open_with(layout != Layout::Cells && layout != Layout::CellsThenPacked);
        let reopen_at = ops.len() / 2;
        for (i, op) in ops.into_iter().enumerate() {
            if i == reopen_at {
                // Reopened, as a job that stops and starts again: the seqs of packed puts go on
                // from where they were.
                w.flush().unwrap();
                drop(w);
                drop(store);
                (store, w) = open_with(layout != Layout::Cells);
            }
            match op {
                Op::Put { row, cells } => {
                    let put_cells = cells.iter().map(|(q, ts, v)| cell("t", q, *ts, &[*v])).collect();
                    w.write(vec![put(&row, put_cells)]).unwrap();
                    let model_row = model.entry(row).or_default();
                    for (q, ts, v) in cells {
                        let loses = newest_wins && model_row.get(&q).is_some_and(|(seen, _)| ts < *seen);
                        if !loses {
                            model_row.insert(q, (ts, v));
                        }
                    }
                }
                Op::Delete { row, ts } => {
                    w.write(vec![Mutation::DeleteRow { table: T, row: row.clone(), ts_ms: ts }]).unwrap();
                    if let Some(cells) = model.get_mut(&row) {
                        cells.retain(|_, (cell_ts, _)| *cell_ts > ts);
                    }
                }
                Op::Flush => w.flush().unwrap(),
                Op::Compact => {
                    w.flush().unwrap();
                    for keyspace in store.inner.tables[0].generations() {
                        keyspace.rotate_memtable_and_wait().unwrap();
                        keyspace.major_compact().unwrap();
                    }
                }
            }
        }
        w.flush().unwrap();

        let got = scan(&store, &start, &stop, limit);
        prop_assert_eq!(got, model_scan(&model, &start, &stop, limit));
        for row in model.keys() {
            let expected = model_scan(&model, row, &[], Some(1)).into_iter().find(|r| &r.key == row);
            prop_assert_eq!(store.get(T, row, None).unwrap(), expected);
        }
    }
}
