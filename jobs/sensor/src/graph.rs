//! The hourglass dataflow: readings → narrow rows, and → hourly windows → wide rows.
//!
//! ```text
//! feed ─ event_source ─ ok_err ─┬─ readings ─┬─ narrow_put ───────────────────────────────┐
//!                               │            └─ exchange ─┬─ tumbling_window ─┬─ wide_put ─┼─ write_batches ─ probe
//!                               │                         │                   └─ dropped ─ late output
//!                               │                         └─ room view ───────────────────┘
//!                               └─ rejected ─ dead-letter output
//! ```
//!
//! Narrow rows are written where their readings were read. The readings are exchanged once, by
//! device, to the worker that windows the device and keeps its room row (both operators
//! exchange by the same hash, so their own exchange stays on the worker). The source stops
//! reading while more than [`MAX_IN_FLIGHT`] of its readings wait in that exchange: timely's
//! channels are unbounded, and a worker stalled by its store would otherwise let the others
//! pile readings up for it.
//!
//! Every operator from the source to the writer passes records on in the order they arrive
//! ([`operators::InOrder`]; `concat`, `probe_with` and the writer do too). Writes depend on it:
//! a window's panes of a key carry its summary so far and the later put wins, and of a second
//! sent twice the narrow table keeps the later. Timely's own `map`, `flat_map`, `ok_err` and
//! `exchange` sort an activation's containers by time, unstably, and reordered them.

use std::sync::Arc;
use std::time::Duration;

use operators::{
    bounded_event_source, BatchWriter, EventFeed, FlushPace, InFlight, InOrder, TumblingWindow,
    WindowOutput, WindowSpec, WriteBatches,
};
use timely::dataflow::operators::{Concat, Probe};
use timely::dataflow::{ProbeHandle, Scope};

use crate::codec::narrow::KeyScheme;
use crate::codec::{hourly, narrow};
use crate::decode::Rejected;
use crate::registry::RegistrySource;
use crate::room;
use crate::tables::{NARROW_TABLE, ROOM_TABLE};
use pipeline::config::WindowConfig;
use pipeline::control::JobControl;
use pipeline::driver::CountingWriter;
use pipeline::source::Clock;

use crate::decode::Decoded;
use crate::summary::HourAccumulator;
use pipeline::stats::{add, Stats};

use crate::stats::SensorStats;
use sinks::table::{Mutation, TableWriter};

/// Where rejected lines and readings beyond the allowed lateness go.
pub trait SideOutput: Send + Sync + 'static {
    /// Records a rejected input line.
    ///
    /// # Errors
    /// The output cannot be written (the job stops: nothing may be dropped silently).
    fn rejected(&self, rejected: &Rejected) -> crate::Result<()>;

    /// Records a reading that arrived after its hour closed for good (it is in the narrow table
    /// but not in its wide row).
    ///
    /// # Errors
    /// As [`SideOutput::rejected`].
    fn late(&self, device: &str, ts: i64, value: f64, watermark: u64) -> crate::Result<()>;

    /// Records a registry topic record that was refused (it changed nothing).
    ///
    /// # Errors
    /// As [`SideOutput::rejected`].
    fn registry_rejected(&self, rejected: &crate::registry::RejectedRecord) -> crate::Result<()>;

    /// Flushes buffered records.
    ///
    /// # Errors
    /// As [`SideOutput::rejected`].
    fn flush(&self) -> crate::Result<()>;
}

/// Settings of the dataflow.
#[derive(Debug, Clone)]
pub struct GraphConfig {
    /// Narrow row-key scheme.
    pub scheme: KeyScheme,
    /// Event-time settings.
    pub window: WindowConfig,
    /// Longest time written data may wait in a writer's buffer.
    pub flush_every: Duration,
    /// Shortest time between two flushes caused by event-time progress (see
    /// [`operators::FlushPace`]): zero for a live job, a second for a replay at full speed.
    pub flush_min_gap: Duration,
    /// Device registry of the room view: a CSV file (reloaded when it changes) or a compacted
    /// Kafka topic (followed).
    pub registry: Option<RegistrySource>,
    /// The room view a previous run left in the table, which this run continues from.
    pub previous_view: room::PreviousView,
    /// The wall clock that decides which hours get early firings (`Clock::start()`, so
    /// `HOURGLASS_NOW` applies; tests fix it with `Clock::at`).
    pub clock: Clock,
    /// Whether hours the wall clock has left fire early too. A Kafka job needs it: an early
    /// firing writes what an open hour holds, which is what lets the durable frontier, and so
    /// the committed offsets, pass those readings; without it a catching-up job could commit
    /// nothing past an hour's first reading until the hour closes, and a restart would re-read
    /// up to two hours. A replay commits no offsets, so it fires early only for live hours.
    pub early_fire_past_hours: bool,
    /// A device's row in the room view is written at most once per this interval (see
    /// [`room::room_view`]).
    pub room_write_interval: Duration,
}

/// Counts the narrow rows, wide cells and room rows the table writer writes, and forwards
/// them (the engine's [`CountingWriter`] counting each flush's batch).
struct RowCounter(CountingWriter, Arc<SensorStats>);

impl BatchWriter<Mutation> for RowCounter {
    type Error = sinks::Error;

    fn write(&mut self, batch: Vec<Mutation>) -> sinks::Result<()> {
        let (mut narrow, mut wide, mut room) = (0, 0, 0);
        for m in &batch {
            if m.table() == ROOM_TABLE {
                room += 1;
            } else if let Mutation::Put { table, cells, .. } = m {
                if *table == NARROW_TABLE {
                    narrow += 1;
                } else {
                    wide += cells
                        .iter()
                        .filter(|c| hourly::point_offset(&c.qualifier).is_some())
                        .count() as u64;
                }
            }
        }
        self.0.write(batch)?;
        let stats = &self.1;
        add(&stats.narrow_rows, narrow);
        add(&stats.wide_cells, wide);
        add(&stats.room_rows, room);
        Ok(())
    }

    fn flush(&mut self) -> sinks::Result<()> {
        self.0.flush()
    }
}

/// Writes rejected lines or late readings to the side outputs, counting them.
struct SideWriter {
    side: Arc<dyn SideOutput>,
    stats: Arc<Stats>,
}

impl BatchWriter<Box<Rejected>> for SideWriter {
    type Error = crate::Error;

    fn write(&mut self, batch: Vec<Box<Rejected>>) -> crate::Result<()> {
        for r in batch {
            self.stats.count_rejected(
                r.reason.kind_index(),
                matches!(r.reason, crate::decode::Reason::Future { .. }),
            );
            self.side.rejected(&r)?;
        }
        Ok(())
    }

    fn flush(&mut self) -> crate::Result<()> {
        self.side.flush()
    }
}

/// A reading beyond the allowed lateness: device, ts, value, the watermark it met.
type LateReading = (String, u64, f64, u64);

impl BatchWriter<LateReading> for SideWriter {
    type Error = crate::Error;

    fn write(&mut self, batch: Vec<LateReading>) -> crate::Result<()> {
        add(&self.stats.late_dropped, batch.len() as u64);
        for (device, ts, value, watermark) in batch {
            self.side.late(&device, ts as i64, value, watermark)?;
        }
        Ok(())
    }

    fn flush(&mut self) -> crate::Result<()> {
        self.side.flush()
    }
}

/// Readings a worker's source may have read and not yet delivered through the exchange by
/// device, at times before its current one (see [`operators::bounded_event_source`]): about
/// 120 MB per reading worker (a reading without `extra` is ~120 bytes with its strings), and
/// five seconds of a replay of 100,000 devices at 200,000 readings/s.
///
/// The bound only stops a worker from piling up readings for another that its store halted
/// (fjall holds a keyspace's write batches while 30 tables wait in its L0). In a replay of
/// 100,000 devices × 1 h, 65,536 also kept the peak RSS near 540 MB but made the replay about a
/// fifth slower (190–196 k readings/s in four runs): the reading worker then stopped for every
/// halt, and its narrow-row ingestions with it.
pub const MAX_IN_FLIGHT: usize = 1 << 20;

/// Builds the dataflow on one worker. `probe`'s frontier passes watermark `t` once every
/// reading the feed emitted before `t` is durably written (table rows, dead letters, late
/// readings). The caller creates the probe, so that the feed can hold a clone of it (a Kafka
/// feed commits the offsets of what the probe has passed); a caller that does not watch
/// durability passes a fresh one and drops it.
#[allow(clippy::too_many_arguments)]
pub fn build<'scope, F>(
    scope: Scope<'scope, u64>,
    feed: F,
    cfg: &GraphConfig,
    writer: Box<dyn TableWriter>,
    side: Arc<dyn SideOutput>,
    stats: Arc<Stats>,
    sensor: Arc<SensorStats>,
    control: Arc<JobControl>,
    probe: &ProbeHandle<u64>,
) where
    F: EventFeed<Item = Decoded>,
{
    let scheme = cfg.scheme;
    let pace = FlushPace {
        every: cfg.flush_every,
        min_gap: cfg.flush_min_gap,
    };
    let spec = WindowSpec {
        max_pending: cfg.window.max_pending(),
        ..hourly::hourly_window(
            cfg.window.allowed_lateness_secs,
            (cfg.window.early_fire_secs > 0)
                .then(|| Duration::from_secs(cfg.window.early_fire_secs)),
        )
    };
    let clock = cfg.clock;
    let early_fire_past_hours = cfg.early_fire_past_hours;

    let exchanged = ProbeHandle::new();
    let in_flight = InFlight {
        probe: exchanged.clone(),
        max_items: MAX_IN_FLIGHT,
    };
    let decoded = bounded_event_source(scope, "ReadLines", feed, 1024, Some(in_flight));
    let (readings, rejected) = decoded.ok_err_in_order(|item: Decoded| item);
    // Narrow rows are written by the worker that read the reading: a Kafka feed pairs its
    // readings' produce times with its own writer's flushes (`TimedWriter`). The window and the
    // room view do not read `extra`, the largest part of a reading: it does not cross to the
    // other worker, nor get cloned there for the second of them. One pass makes both, so that a
    // reading is not cloned for the narrow row either.
    let (narrow, readings) = readings
        .flat_map_in_order(move |r: crate::reading::Reading| {
            let put = narrow::narrow_put(scheme, &r);
            let slim = crate::reading::Reading {
                extra: String::new(),
                ..r
            };
            [Ok(put), Err(slim)]
        })
        .ok_err_in_order(|item| item);
    let readings = readings
        .exchange_in_order(|r: &crate::reading::Reading| operators::key_hash(&r.device))
        .probe_with(&exchanged);

    // The side outputs report to the durable probe like the tables do: a Kafka offset is
    // committed only once the dead letters and late readings before it are flushed too, so a
    // crash loses none of them.
    let dead_control = control.clone();
    rejected
        .write_batches(
            "DeadLetters",
            SideWriter {
                side: side.clone(),
                stats: stats.clone(),
            },
            pace,
            move |e| dead_control.fail(format!("dead-letter output: {e}")),
        )
        .probe_with(probe);

    let readings_probe = ProbeHandle::new();
    let readings = readings.probe_with(&readings_probe);
    let rooms = room::room_view(
        readings.clone(),
        room::RegistryInput {
            source: cfg.registry.clone(),
            side: side.clone(),
            stats: sensor.clone(),
            control: control.clone(),
        },
        readings_probe,
        &cfg.previous_view,
        cfg.room_write_interval,
        {
            // A replay holds a device's readings of hours the wall clock has left until it ends,
            // as the window holds their early firings, so a device's row is written about once;
            // a Kafka job passes readings on within the interval: its offsets wait for them.
            // An hour the clock has left stays left, and so does every hour before it: the
            // latest such hour seen is kept, so a replay of the past reads the clock about once
            // an hour of its recording.
            let left = std::cell::Cell::new(i64::MIN);
            move |ts: i64| {
                let hour = hourly::hour_start(ts);
                if early_fire_past_hours {
                    return false;
                }
                // (A negative hour is live for `is_live`: its `as u64` is far ahead.)
                if (0..=left.get()).contains(&hour) {
                    return true;
                }
                let now = u64::try_from(clock.now_secs()).unwrap_or(0);
                let held = !spec.is_live(hour as u64, now);
                if held {
                    left.set(hour);
                }
                held
            }
        },
    );
    let repeated_stats = sensor.clone();
    let (wide, dropped) = readings
        // Keyed by the device id inline: a lookup among 100,000 devices' state compares the
        // key where the map holds it, where a `String` key's bytes were one more cache miss.
        .map_in_order(|r| {
            (
                compact_str::CompactString::new(&r.device),
                r.ts as u64,
                r.value,
            )
        })
        .tumbling_window::<HourAccumulator>(spec, move || {
            // A clock at the epoch's start makes every open hour live (`WindowSpec::is_live`).
            if early_fire_past_hours {
                0
            } else {
                u64::try_from(clock.now_secs()).unwrap_or(0)
            }
        })
        .ok_err_in_order(move |out| match out {
            WindowOutput::Pane(p) => {
                let items: Vec<(i64, f64)> = p.items.iter().map(|&(t, v)| (t as i64, v)).collect();
                Ok(Some(hourly::pane_put(
                    &p.key,
                    p.window_start as i64,
                    &items,
                    &p.summary,
                )))
            }
            // A second the hour already had: the narrow table keeps the last write, so the
            // hour's reads go to it (one truth, docs/ARCHITECTURE.md §6).
            WindowOutput::Repeated { key, ts, same, .. } => {
                add(&repeated_stats.repeated, 1);
                // A resend of the very reading changes neither table.
                Ok((!same).then(|| hourly::dirty_put(&key, hourly::hour_start(ts as i64))))
            }
            WindowOutput::Dropped {
                key,
                ts,
                value,
                watermark,
            } => Err((key.into_string(), ts, value, watermark)),
        });
    // A reading past the allowed lateness is in the narrow table only: its hour's row is marked
    // dirty, so that reads of the hour take the narrow table. Late readings are few, so the
    // stream is shared with the late-data output rather than split from it.
    let wide = wide
        .flat_map_in_order(|put| put)
        .concat(dropped.clone().map_in_order(|(device, ts, _, _)| {
            hourly::dirty_put(&device, hourly::hour_start(ts as i64))
        }));

    let late_control = control.clone();
    dropped
        .write_batches(
            "LateReadings",
            SideWriter {
                side,
                stats: stats.clone(),
            },
            pace,
            move |e| late_control.fail(format!("late-data output: {e}")),
        )
        .probe_with(probe);

    let sink_control = control;
    narrow
        .concat(wide)
        .concat(rooms)
        .write_batches(
            "WriteTables",
            RowCounter(CountingWriter::new(writer, stats), sensor),
            pace,
            move |e| sink_control.fail(format!("writing tables failed: {e}")),
        )
        .probe_with(probe);
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;

    use super::*;
    use sinks::table::{Cell, Row};

    struct NoWriter;

    impl TableWriter for NoWriter {
        fn write(&mut self, _: Vec<Mutation>) -> sinks::Result<()> {
            Ok(())
        }
        fn flush(&mut self) -> sinks::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn counted_wide_cells_are_the_points_a_query_reads() {
        let summary = crate::summary::HourSummary::of_points(&[(3601, 1.5)]);
        let Mutation::Put {
            table,
            row,
            mut cells,
        } = hourly::wide_put("d", 3600, &[(3601, 1.5), (7199, 2.0)], summary.as_ref())
        else {
            panic!("wide_put makes a put")
        };
        // Cells of a row that hourglass does not write: neither points nor summary cells.
        for q in ["3600", "9x", "05"] {
            cells.push(Cell {
                family: crate::tables::FAMILY.into(),
                qualifier: q.into(),
                ts_ms: 0,
                value: b"1".to_vec(),
            });
        }
        let read = hourly::points_from_wide(
            3600,
            &Row {
                key: row.clone(),
                cells: cells.clone(),
            },
        )
        .unwrap()
        .len();
        let stats = Arc::new(SensorStats::default());
        let mut counting = RowCounter(
            CountingWriter::new(Box::new(NoWriter), Arc::default()),
            stats.clone(),
        );
        counting
            .write(vec![Mutation::Put { table, row, cells }])
            .unwrap();
        assert_eq!(read, 2);
        assert_eq!(stats.wide_cells.load(Ordering::Relaxed), read as u64);
    }
}
