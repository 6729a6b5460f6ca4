//! The room view's dataflow: newest reading per device, joined with the registry, written as
//! puts and deletes of `ts_room_latest`.

use std::collections::HashMap;
use std::time::Duration;

use compact_str::CompactString;
use differential_dataflow::operators::arrange::upsert::arrange_from_upsert;
use differential_dataflow::trace::implementations::{ValBuilder, ValSpine};
use differential_dataflow::AsCollection;
use operators::{key_hash, NewestPerKey, StashUntilFrontier};
use timely::dataflow::operators::vec::Map;
use timely::dataflow::operators::{Concat, ToStream};
use timely::dataflow::{ProbeHandle, StreamVec};

use super::previous::{seed_reading, PreviousView};
use super::registry_source::{registry_source, RegistryInput};
use super::RoomRow;
use crate::codec::room::{room_delete, room_put};
use crate::reading::{format_value, Reading};
use sinks::table::Mutation;

/// A device's latest reading: event time, metric text, the reading's own `room` field.
type Latest = (i64, String, Option<String>);

/// What a batch does to one row: the newest inserted `(ts, value, own room)`, the newest
/// retracted ts.
type RowChange = (Option<(i64, String, Option<String>)>, Option<i64>);

/// Builds the room view from `readings` and the registry of `registry` (a file reloaded when it
/// changes, or a topic followed; no source: rooms come from the readings only).
/// `readings_probe` must observe the `readings` stream: the registry follows its frontier and
/// closes with it.
/// `previous` is the view a previous run left in the table (see [`PreviousView`]).
///
/// A device's readings update the view at most once per `write_interval` (processing time):
/// the first reading after a quiet interval at once, later ones when the interval since the
/// device's last update ends, the newest of them only; whatever waits is written when the input
/// ends. The output frontier waits for it, so a durable probe never passes a reading that has
/// not reached the table. A reading whose event time (epoch seconds) `hold` says true waits
/// until the input ends unless a newer one of its device replaces it: a replay holds the
/// readings of hours the wall clock has left, so it writes each device's row about once.
pub fn room_view<'scope>(
    readings: StreamVec<'scope, u64, Reading>,
    registry: RegistryInput,
    readings_probe: ProbeHandle<u64>,
    previous: &PreviousView,
    write_interval: Duration,
    hold: impl Fn(i64) -> bool + 'static,
) -> StreamVec<'scope, u64, Mutation> {
    let scope = readings.scope();

    // The previous run's rows, on worker 0 at the first time: as readings of their devices
    // (with the room those readings reported, `t:o`), and, subtracted, as the view's starting
    // point.
    let stored = if scope.index() == 0 {
        previous.take()
    } else {
        Vec::new()
    };
    let seeds: Vec<Reading> = stored.iter().filter_map(seed_reading).collect();
    let readings = readings.concat(seeds.to_stream(scope));
    let stored = stored
        .into_iter()
        .map(|row| (row, 0u64, -1isize))
        .to_stream(scope)
        .as_collection();

    // Only the newest reading per device within each write interval becomes an upsert: a
    // replay at full speed sends many readings of a device per second, and a row written once
    // per reading costs the table a put per reading (about 1.2 M puts for 100k devices x 2 min
    // of replay, where 100k suffice).
    let upserts = readings
        // Keyed by the device id inline, as the window is (`graph::build`).
        .map(|r| (CompactString::new(&r.device), r.ts, (r.value, r.room)))
        .newest_per_key_holding(write_interval, move |ts: &i64| hold(*ts))
        // Formatted once it is an upsert: most readings of a replay are replaced before.
        .map(|(device, ts, (value, room), time)| {
            (
                device.into_string(),
                Some((ts, format_value(value), room)),
                time,
            )
        });
    let latest = arrange_from_upsert::<
        ValBuilder<String, Latest, u64, isize>,
        ValSpine<String, Latest, u64, isize>,
        String,
        Latest,
    >(upserts, "LatestPerDevice")
    .as_collection(|device: &String, latest: &Latest| (device.clone(), latest.clone()));

    let registry = registry_source(scope, registry, readings_probe).as_collection();
    let registered = latest
        .clone()
        .join_map(registry.clone(), |device, (ts, value, own), room| {
            (
                room.clone(),
                device.clone(),
                *ts,
                value.clone(),
                own.clone(),
            )
        });
    let unregistered = latest
        .antijoin(registry.map(|(device, _room)| device))
        .flat_map(|(device, (ts, value, own))| {
            own.map(|room| (room.clone(), device, ts, value, Some(room)))
        });

    // Consolidated, so the antijoin's retraction of a registered device nets out instead of
    // reaching the table as a delete; then routed by row, so a row's put and delete are written
    // by one worker in order (the embedded store's row delete is not a timestamped tombstone).
    // A time's retraction and insertion of a row meet only once the frontier has passed it.
    registered
        .concat(unregistered)
        .concat(stored)
        .consolidate()
        .inner
        .stash_until_frontier(
            |(room, device, ..): &RoomRow| key_hash(room) ^ key_hash(device).rotate_left(1),
            to_mutations,
        )
}

/// Turns one batch of changes of the view into puts and deletes.
fn to_mutations(mut updates: Vec<(RoomRow, u64, isize)>) -> Vec<Mutation> {
    // Consolidate identical rows; what nets to zero did not change.
    updates.sort_by(|a, b| (&a.0, a.1).cmp(&(&b.0, b.1)));
    let mut net: Vec<(RoomRow, isize)> = Vec::with_capacity(updates.len());
    for (row, _time, diff) in updates {
        match net.last_mut() {
            Some((last, d)) if *last == row => *d += diff,
            _ => net.push((row, diff)),
        }
    }
    net.retain(|(_, d)| *d != 0);
    // Per (room, device): an insertion is a put; only a retraction is a delete. A delete is
    // bounded by the retracted reading's time, so it can never remove a newer put.
    let mut by_row: HashMap<(String, String), RowChange> = HashMap::new();
    for ((room, device, ts, value, own), diff) in net {
        let entry = by_row.entry((room, device)).or_default();
        if diff > 0 {
            if entry.0.as_ref().is_none_or(|(t, ..)| ts > *t) {
                entry.0 = Some((ts, value, own));
            }
        } else {
            entry.1 = Some(entry.1.map_or(ts, |t| t.max(ts)));
        }
    }
    let mut out: Vec<Mutation> = by_row
        .into_iter()
        .map(|((room, device), change)| match change {
            (Some((ts, value, own)), _) => room_put(&room, &device, ts, value, own),
            (None, deleted) => room_delete(&room, &device, deleted.unwrap_or(0)),
        })
        .collect();
    out.sort_by(|a, b| a.row().cmp(b.row()));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::room::tests::row;
    use std::sync::Arc;
    use timely::dataflow::operators::capture::Event;
    use timely::dataflow::operators::{Capture, Input, Probe};
    use timely::dataflow::InputHandle;

    fn reading(device: &str, ts: i64, value: f64, room: &str) -> Reading {
        Reading {
            device: device.into(),
            ts,
            value,
            extra: format!(r#"{{"room":"{room}"}}"#),
            room: Some(room.into()),
        }
    }

    /// The view's mutations, in order, for `batches` of readings each sent at its own time and
    /// followed by `pause` of processing time.
    fn view(interval: Duration, pause: Duration, batches: Vec<Vec<Reading>>) -> Vec<Mutation> {
        let scratch = tempfile::tempdir().expect("tempdir");
        let side = Arc::new(sinks::dead_letter::DeadLetters::new(
            scratch.path().join("dead.jsonl"),
            scratch.path().join("late.jsonl"),
        ));
        let out = timely::execute_directly(move |worker| {
            let mut input = InputHandle::new();
            let (probe, captured) = worker.dataflow(|scope| {
                let readings = scope.input_from(&mut input);
                let readings_probe = ProbeHandle::new();
                let readings = readings.probe_with(&readings_probe);
                let registry = RegistryInput {
                    source: None,
                    side,
                    stats: Arc::default(),
                    control: Arc::default(),
                };
                let (probe, out) = room_view(
                    readings,
                    registry,
                    readings_probe,
                    &PreviousView::default(),
                    interval,
                    |_| false,
                )
                .probe();
                (probe, out.capture())
            });
            for (time, batch) in batches.into_iter().enumerate() {
                for r in batch {
                    input.send(r);
                }
                input.advance_to(time as u64 + 1);
                let started = std::time::Instant::now();
                while started.elapsed() < pause {
                    worker.step();
                }
            }
            drop(input);
            while worker.step() {}
            assert!(probe.done());
            // In the order written (`extract` would sort).
            captured
                .try_iter()
                .flat_map(|event| match event {
                    Event::Messages(_, batch) => batch,
                    Event::Progress(_) => Vec::new(),
                })
                .collect::<Vec<_>>()
        });
        out
    }

    fn puts(muts: &[Mutation]) -> Vec<(String, String)> {
        muts.iter()
            .filter_map(|m| match m {
                Mutation::Put { row, cells, .. } => Some((
                    String::from_utf8_lossy(row).into_owned(),
                    String::from_utf8_lossy(&cells[0].value).into_owned(),
                )),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn many_readings_of_a_device_within_an_interval_give_one_put_and_the_last_lands() {
        // Three bursts of readings, each longer apart than a short coalescing period would be,
        // all within one write interval: the newest of the first batch at once, then the newest of
        // the rest at the end.
        let bursts = (0..3)
            .map(|b| {
                (0..5)
                    .map(|i| reading("d1", b * 50 + i * 10, (b * 5 + i) as f64, "r"))
                    .collect()
            })
            .collect();
        let muts = view(
            Duration::from_secs(3600),
            Duration::from_millis(700),
            bursts,
        );
        assert_eq!(
            puts(&muts),
            vec![
                ("r_d1".to_string(), "4".to_string()),
                ("r_d1".into(), "14".into())
            ]
        );
    }

    #[test]
    fn the_newest_reading_lands_when_the_interval_ends_before_the_input_ends() {
        let muts = view(
            Duration::from_millis(200),
            Duration::from_millis(500),
            vec![
                vec![reading("d1", 10, 1.0, "r")],
                vec![reading("d1", 20, 2.0, "r"), reading("d1", 30, 3.0, "r")],
                vec![],
            ],
        );
        assert_eq!(
            puts(&muts),
            vec![
                ("r_d1".to_string(), "1".to_string()),
                ("r_d1".into(), "3".into())
            ]
        );
    }

    #[test]
    fn a_changed_room_still_moves_the_row() {
        let muts = view(
            Duration::from_secs(3600),
            Duration::from_millis(200),
            vec![
                vec![reading("d1", 10, 1.0, "a")],
                vec![reading("d1", 20, 2.0, "a"), reading("d1", 30, 3.0, "b")],
            ],
        );
        let rows: Vec<(String, bool)> = muts
            .iter()
            .map(|m| {
                let put = matches!(m, Mutation::Put { .. });
                (String::from_utf8_lossy(m.row()).into_owned(), put)
            })
            .collect();
        let deleted_a = rows.iter().position(|r| *r == ("a_d1".to_string(), false));
        assert!(deleted_a.is_some(), "{rows:?}");
        assert_eq!(rows.first(), Some(&("a_d1".to_string(), true)), "{rows:?}");
        assert_eq!(rows.last(), Some(&("b_d1".to_string(), true)), "{rows:?}");
        assert_eq!(puts(&muts).last().map(|p| p.1.as_str()), Some("3"));
    }

    #[test]
    fn a_move_deletes_the_old_row_and_an_update_only_puts() {
        let muts = to_mutations(vec![
            (row("a", "d1", 10, "1"), 5, -1),
            (row("b", "d1", 10, "1"), 5, 1),
            (row("a", "d2", 10, "1"), 5, -1),
            (row("a", "d2", 20, "2"), 5, 1),
            (row("a", "d3", 7, "3"), 5, 1),
            (row("a", "d3", 7, "3"), 5, -1),
        ]);
        assert_eq!(muts.len(), 3);
        assert!(
            matches!(&muts[0], Mutation::DeleteRow { row, ts_ms: 10_000, .. } if row == b"a_d1")
        );
        assert!(
            matches!(&muts[1], Mutation::Put { row, cells, .. } if row == b"a_d2" && cells[0].ts_ms == 20_000)
        );
        assert!(matches!(&muts[2], Mutation::Put { row, .. } if row == b"b_d1"));
    }
}
