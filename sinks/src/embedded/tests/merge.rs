//! Merges of series runs: many commits end in few runs that answer as the runs did; the newest
//! put of a reading wins across merges; a generic put or a delete keeps its partition unmerged;
//! deletes and other writers racing merges change no answer; a reopened store reads merged runs.

use super::series::{open_series, reading, row, run_count, second, value_of};
use super::*;
use crate::embedded::store::series::{partition_of, MERGE_FANIN};
use std::collections::BTreeMap;
use std::sync::Barrier;
use std::thread;

/// Whether the partition of `second`'s stamp is marked never to be merged.
fn marked(store: &EmbeddedStore, second: i64) -> bool {
    let runs = store.inner.tables[0].series.as_ref().expect("series table");
    runs.is_marked(partition_of(second * 1000))
}

/// Every row's `t:v`, by row, from one scan of the whole table.
fn values(store: &EmbeddedStore) -> BTreeMap<Vec<u8>, Vec<u8>> {
    scan(store, b"", b"", None)
        .into_iter()
        .map(|r| {
            let v = r.cell("t", b"v").expect("t:v").value.clone();
            (r.key, v)
        })
        .collect()
}

/// `(series, second) → value` as the store's rows and `t:v`.
fn expected(model: &BTreeMap<(String, i64), String>) -> BTreeMap<Vec<u8>, Vec<u8>> {
    model
        .iter()
        .map(|((s, ts), v)| (row(s, *ts), v.clone().into_bytes()))
        .collect()
}

/// The runs left after `n` commits into one (partition, bucket) by one writer: one per digit
/// of `n` in base [`MERGE_FANIN`], each worth that digit's runs.
fn tiered_runs(mut n: usize) -> usize {
    let mut runs = 0;
    while n > 0 {
        runs += n % MERGE_FANIN;
        n /= MERGE_FANIN;
    }
    runs
}

#[test]
fn many_commits_of_one_device_end_in_few_runs_and_read_back_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open_series(&dir, true);
    let t0 = second(0);
    let mut model = BTreeMap::new();
    let commits = 200;
    let mut w = store.writer();
    for i in 0..commits {
        // As the layout renders it (`1.0` would not be a point: it renders `1`).
        let value = format!("{}.{}", i, 1 + i % 7);
        w.write(vec![reading("d1", t0 + i, &value)]).unwrap();
        w.flush().unwrap();
        model.insert(("d1".to_string(), t0 + i), value);
    }
    drop(w);
    assert!(!marked(&store, t0));
    assert_eq!(run_count(&store), tiered_runs(commits as usize));
    assert!(
        run_count(&store) < 8,
        "200 commits, {} runs",
        run_count(&store)
    );
    assert_eq!(values(&store), expected(&model));
    assert_eq!(
        value_of(&store, &row("d1", t0 + 5)),
        Some(b"5.6".to_vec()),
        "a Get of one row"
    );
    drop(store);
    // Merged runs were committed like any write: a reopened store reads them.
    let (store, _) = open_series(&dir, true);
    assert_eq!(values(&store), expected(&model));
    // And merges the runs it finds with the new ones.
    let mut w = store.writer();
    for i in 0..MERGE_FANIN as i64 {
        w.write(vec![reading("d1", t0 + 300 + i, "9")]).unwrap();
        w.flush().unwrap();
        model.insert(("d1".to_string(), t0 + 300 + i), "9".to_string());
    }
    drop(w);
    // The runs found count as sealed ones (level 0), so they merge with the first new ones.
    assert!(run_count(&store) < tiered_runs(commits as usize) + MERGE_FANIN);
    assert_eq!(values(&store), expected(&model));
}

#[test]
fn a_later_put_of_a_reading_wins_after_merges() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open_series(&dir, true);
    let t0 = second(0);
    let mut model = BTreeMap::new();
    let mut w = store.writer();
    // Each commit puts 10 readings of two devices, half of them seen before with another
    // value: which run holds a reading's newest value moves through every level of merges.
    for i in 0..150i64 {
        let mut batch = Vec::new();
        for device in ["d1", "d2"] {
            for j in 0..10 {
                let ts = t0 + (i * 7 + j * 13) % 200;
                let value = format!("{i}.{}", j % 9 + 1);
                batch.push(reading(device, ts, &value));
                model.insert((device.to_string(), ts), value);
            }
        }
        w.write(batch).unwrap();
        w.flush().unwrap();
        if i % 37 == 0 {
            assert_eq!(values(&store), expected(&model), "after commit {i}");
        }
    }
    drop(w);
    assert!(run_count(&store) < 2 * 150 / MERGE_FANIN);
    assert_eq!(values(&store), expected(&model));
}

#[test]
fn a_generic_put_between_runs_keeps_its_order_and_its_partition_unmerged() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open_series(&dir, true);
    let t0 = second(0);
    let key = row("d1", t0);
    write(&store, vec![reading("d1", t0, "1")]);
    // `1.50` is not how the layout renders 1.5: stored generic, under a seq after the run's.
    write(
        &store,
        vec![put(&key, vec![cell("t", b"v", t0 * 1000, b"1.50")])],
    );
    assert!(marked(&store, t0), "the generic put marked its partition");
    let commits = 3 * MERGE_FANIN;
    for i in 1..=commits as i64 {
        // Newer runs of the same bucket, without the row: a merge of them with the first run
        // would give its point their seq, above the generic put's.
        write(&store, vec![reading("d1", t0 + i, "2")]);
    }
    assert_eq!(value_of(&store, &key), Some(b"1.50".to_vec()));
    assert_eq!(
        run_count(&store),
        1 + commits,
        "a marked partition is not merged"
    );
    drop(store);
    let (store, _) = open_series(&dir, true);
    assert!(marked(&store, t0), "the mark is kept on disk");
    write(&store, vec![reading("d1", t0 + 100, "3")]);
    assert_eq!(run_count(&store), 2 + commits);
    assert_eq!(value_of(&store, &key), Some(b"1.50".to_vec()));
}

#[test]
fn partitions_without_generic_puts_are_merged_beside_a_marked_one() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open_series(&dir, true);
    let t0 = second(0);
    let other = t0 + PARTITION_S;
    write(
        &store,
        vec![put(
            &row("d1", t0),
            vec![cell("t", b"v", t0 * 1000, b"1.50")],
        )],
    );
    for i in 0..MERGE_FANIN as i64 {
        write(
            &store,
            vec![
                reading("d1", t0 + 1 + i, "1"),
                reading("d1", other + i, "1"),
            ],
        );
    }
    assert!(marked(&store, t0) && !marked(&store, other));
    assert_eq!(run_count(&store), MERGE_FANIN + 1);
}

/// Seconds of a partition.
const PARTITION_S: i64 = crate::embedded::store::series::PARTITION_MS / 1000;

#[test]
fn a_run_a_writer_has_not_committed_holds_back_merges_past_its_seq() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open_series(&dir, true);
    let t0 = second(0);
    // Another writer's run, sealed but not committed: its seq is below every run below.
    let held = store.inner.next_series_seq().unwrap();
    for i in 0..MERGE_FANIN as i64 {
        write(&store, vec![reading("d1", t0 + i, "1")]);
    }
    assert_eq!(
        run_count(&store),
        MERGE_FANIN,
        "no run is above the watermark"
    );
    store.inner.settle_series_seqs(&[held]);
    write(&store, vec![reading("d1", t0 + 100, "1")]);
    assert_eq!(
        run_count(&store),
        2,
        "eight merged, the ninth waits for seven more"
    );
}

#[test]
fn row_deletes_racing_merges_never_bring_a_point_back() {
    for round in 0..3 {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = open_series(&dir, true);
        // The next hour: stamps in the future, never expired.
        let t0 = second(0) - second(0) % PARTITION_S + PARTITION_S;
        let partitions = 6i64;
        // A reading to delete in each partition, then the partitions' first runs.
        let doomed = |p: i64| row("d1", t0 + p * PARTITION_S + 3);
        let mut w = store.writer();
        for i in 0..MERGE_FANIN as i64 - 1 {
            let batch = (0..partitions)
                .map(|p| reading("d1", t0 + p * PARTITION_S + 3 + i, "1"))
                .collect();
            w.write(batch).unwrap();
            w.flush().unwrap();
        }
        drop(w);
        let start = Barrier::new(2);
        thread::scope(|s| {
            s.spawn(|| {
                // Commits into every partition, each making a bucket's runs mergeable.
                let mut w = store.writer();
                start.wait();
                for i in 0..4 * MERGE_FANIN as i64 {
                    let batch = (0..partitions)
                        .map(|p| reading("d1", t0 + p * PARTITION_S + 100 + i, "2"))
                        .collect();
                    w.write(batch).unwrap();
                    w.flush().unwrap();
                }
            });
            s.spawn(|| {
                let mut w = store.writer();
                start.wait();
                for p in 0..partitions {
                    w.write(vec![Mutation::DeleteRow {
                        table: T,
                        row: doomed(p),
                        ts_ms: i64::MAX,
                    }])
                    .unwrap();
                    w.flush().unwrap();
                    assert_eq!(value_of(&store, &doomed(p)), None, "round {round}");
                }
            });
        });
        for p in 0..partitions {
            assert_eq!(value_of(&store, &doomed(p)), None, "round {round}");
            assert!(marked(&store, t0 + p * PARTITION_S));
            assert_eq!(
                value_of(&store, &row("d1", t0 + p * PARTITION_S + 4)),
                Some(b"1".to_vec())
            );
            assert_eq!(
                value_of(&store, &row("d1", t0 + p * PARTITION_S + 100)),
                Some(b"2".to_vec())
            );
        }
    }
}

#[test]
fn two_writers_sealing_runs_while_merging_answer_as_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open_series(&dir, true);
    let t0 = second(0);
    let start = Barrier::new(2);
    // Each writer its own devices (a reading's winner between two writers depends on which
    // sealed last), in the same buckets and partitions, each re-putting its own readings.
    let models: Vec<BTreeMap<(String, i64), String>> = thread::scope(|s| {
        let writers: Vec<_> = (0..2)
            .map(|who| {
                let (store, start) = (&store, &start);
                s.spawn(move || {
                    let mut model = BTreeMap::new();
                    let mut w = store.writer();
                    start.wait();
                    for i in 0..120i64 {
                        let mut batch = Vec::new();
                        for d in 0..4 {
                            let device = format!("w{who}d{d}");
                            for j in 0..5 {
                                let ts = t0 + (i * 11 + j * 17 + d) % 150;
                                let value = format!("{}.{}", who * 1000 + i, j + 1);
                                batch.push(reading(&device, ts, &value));
                                model.insert((device.clone(), ts), value);
                            }
                        }
                        w.write(batch).unwrap();
                        w.flush().unwrap();
                    }
                    model
                })
            })
            .collect();
        writers.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut model = BTreeMap::new();
    for m in models {
        model.extend(m);
    }
    assert_eq!(values(&store), expected(&model));
    for ((series, ts), value) in model.iter().step_by(37) {
        assert_eq!(
            value_of(&store, &row(series, *ts)),
            Some(value.clone().into_bytes())
        );
    }
    assert!(
        run_count(&store) < 2 * 120 * 8 / MERGE_FANIN,
        "{} runs",
        run_count(&store)
    );
    drop(store);
    let (store, _) = open_series(&dir, true);
    assert_eq!(values(&store), expected(&model));
}

#[test]
fn a_partition_two_hours_behind_the_newest_run_is_merged_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = open_series(&dir, true);
    let t0 = second(0);
    let mut model = BTreeMap::new();
    for i in 0..(MERGE_FANIN as i64 - 1) {
        write(&store, vec![reading("d1", t0 + i, "1")]);
        model.insert(("d1".to_string(), t0 + i), "1".to_string());
    }
    assert_eq!(run_count(&store), MERGE_FANIN - 1);
    let later = t0 + 2 * PARTITION_S;
    write(&store, vec![reading("d1", later, "2")]);
    model.insert(("d1".to_string(), later), "2".to_string());
    assert_eq!(
        run_count(&store),
        2,
        "the closed partition's runs became one"
    );
    assert_eq!(values(&store), expected(&model));
}
