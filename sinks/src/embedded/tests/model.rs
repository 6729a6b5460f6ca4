//! Scans and gets agree with a model of HBase's semantics over random operations.

use std::collections::BTreeMap;

use proptest::prelude::*;

use super::*;

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
        // The writer's own buffer sizes, or a few cells' worth, so that both of its paths
        // (write batches and ingested tables) and their mixes are checked.
        ingest in prop_oneof![Just(None), (1usize..400).prop_map(Some)],
        // The default generation size, or one that closes a generation after every table the
        // writer ingests, so that reads merge several.
        split in any::<bool>(),
    ) {
        let dir = TempDir::new().unwrap();
        let (store, _) = open(&dir);
        if split {
            store.set_generation_bytes(0);
        }
        let mut model = Model::new();
        let mut w = store.writer();
        if let Some(bytes) = ingest {
            w = w.ingest_thresholds(bytes, bytes / 2);
        }
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
            prop_assert_eq!(store.get(T, row, None).unwrap(), expected);
        }
    }
}
