//! The room view: every device's latest reading under its room, maintained incrementally with
//! differential dataflow, and the dashboard queries that read it.
//!
//! Latest per device is an upsert arrangement (one entry per device; a reading replaces it only
//! if its event time is newer, so out-of-order input never moves it backwards). It is joined
//! with the device registry (device → room); devices without an entry use the `room` field of
//! their own reading. Every change of the joined collection becomes a put of `<room>_<device>`
//! in `ts_room_latest`, and a device that leaves a room has its row there deleted.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use differential_dataflow::operators::arrange::upsert::arrange_from_upsert;
use differential_dataflow::trace::implementations::{ValBuilder, ValSpine};
use differential_dataflow::AsCollection;
use serde::Serialize;
use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::operator::source;
use timely::dataflow::operators::generic::Operator;
use timely::dataflow::operators::{Capability, CapabilitySet, Concat, ToStream};
use timely::dataflow::{ProbeHandle, StreamVec};

use crate::control::JobControl;
use crate::graph::SideOutput;
use crate::reading::{format_value, Reading};
use crate::registry::{self, Registry, RegistrySource};
use crate::registry_topic::RegistryTopic;
use crate::rowkey::{self, KeyScheme};
use crate::schema::{FAMILY, ROOM_TABLE};
use crate::stats::{add, Stats};
use crate::table::{Cell, Mutation, ScanSpec, TableReader};
use crate::{query, Result};

/// A device's latest reading: event time, metric text, the reading's own `room` field.
type Latest = (i64, String, Option<String>);
/// A row of the view: room, device, event time, metric text, the reading's own `room` field.
type RoomRow = (String, String, i64, String, Option<String>);

/// A change of the view: row, timely time, +1 or -1.
type Update = (RoomRow, u64, isize);

/// A change of the registry: (device, room), +1 or -1.
type RegistryChange = ((String, String), isize);

/// What a batch does to one row: the newest inserted `(ts, value, own room)`, the newest
/// retracted ts.
type RowChange = (Option<(i64, String, Option<String>)>, Option<i64>);

/// The qualifier of the view's value cell.
const VALUE_QUALIFIER: &[u8] = b"v";
/// The qualifier of the cell that keeps the reading's own `room` field (empty: none), so that a
/// job continuing from the table knows where a device goes if it leaves the registry.
const OWN_ROOM_QUALIFIER: &[u8] = b"o";

/// How long the newest reading of a device may wait before it updates the view.
const COALESCE: Duration = Duration::from_millis(500);

/// How often the registry file or topic is checked for changes.
const REGISTRY_POLL: Duration = Duration::from_millis(250);
/// How often the registry topic is polled while it is being read at start.
const REGISTRY_CATCH_UP_POLL: Duration = Duration::from_millis(10);
/// Most registry topic records read in one activation.
const REGISTRY_BATCH: usize = 10_000;

fn hash_device(device: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    device.hash(&mut h);
    h.finish()
}

/// The row key of a device in the room view: `<room>_<device>`.
pub fn room_key(room: &str, device: &str) -> Vec<u8> {
    format!("{room}_{device}").into_bytes()
}

/// The room view a previous run left in `ts_room_latest`, read when a job starts.
///
/// The view's state (latest reading per device, the registry) lives in memory, so a new run
/// starts from the table: its rows are subtracted from the view's first output, and the valid
/// ones also seed the latest-per-device arrangement (with the reading's own room from `t:o`).
/// Rows the new run computes alike cancel out; a device the registry moved while no job ran has
/// its old row deleted, as if the move had happened while running, and one that left the
/// registry goes back to the room of its readings (the row's `t:o` cell); a row the view can
/// never produce (a room id with `_`, written before rooms were checked) is deleted.
#[derive(Debug, Clone, Default)]
pub struct PreviousView(Arc<Mutex<Vec<RoomRow>>>);

impl PreviousView {
    /// Reads every row of the room view in `store`. A row without `_` in its key or without a
    /// `t:v` cell is not one the view wrote: it is left alone, with a warning.
    ///
    /// # Errors
    /// A store error.
    pub fn read(store: &dyn TableReader) -> Result<Self> {
        let rows = store.scan(ROOM_TABLE, &ScanSpec::default())?;
        let mut view = Vec::with_capacity(rows.len());
        for row in rows {
            let key = String::from_utf8_lossy(&row.key);
            let parsed = key.rsplit_once('_').zip(row.cell(FAMILY, VALUE_QUALIFIER));
            let Some(((room, device), cell)) = parsed else {
                tracing::warn!(table = ROOM_TABLE, row = %key, "not a room-view row, left alone");
                continue;
            };
            // Rows written before the own room was kept: the row's room stands for it.
            let own = match row.cell(FAMILY, OWN_ROOM_QUALIFIER) {
                Some(c) if c.value.is_empty() => None,
                Some(c) => Some(String::from_utf8_lossy(&c.value).into_owned()),
                None => Some(room.to_string()),
            };
            view.push((
                room.to_string(),
                device.to_string(),
                cell.ts_ms.div_euclid(1000),
                String::from_utf8_lossy(&cell.value).into_owned(),
                own,
            ));
        }
        Ok(PreviousView(Arc::new(Mutex::new(view))))
    }

    /// Rows read.
    pub fn len(&self) -> usize {
        self.0.lock().map_or(0, |v| v.len())
    }

    /// Whether no row was read (or they were taken).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Takes the rows (once: the view is seeded by one worker).
    fn take(&self) -> Vec<RoomRow> {
        self.0
            .lock()
            .map(|mut v| std::mem::take(&mut *v))
            .unwrap_or_default()
    }
}

/// The reading a stored row of the view stands for, if the view could have written the row.
fn seed_reading((room, device, ts, value, own): &RoomRow) -> Option<Reading> {
    registry::validate_room(room).ok()?;
    rowkey::validate_device(device).ok()?;
    if let Some(own) = own {
        registry::validate_room(own).ok()?;
    }
    let value = value.parse::<f64>().ok().filter(|v| v.is_finite())?;
    Some(Reading {
        device: device.clone(),
        ts: *ts,
        value,
        extra: match own {
            Some(own) => serde_json::json!({ "room": own }).to_string(),
            None => "{}".to_string(),
        },
        room: own.clone(),
    })
}

/// Builds the room view from `readings` and the registry of `registry` (a file reloaded when it
/// changes, or a topic followed; no source: rooms come from the readings only).
/// `readings_probe` must observe the `readings` stream: the registry follows its frontier and
/// closes with it.
/// `previous` is the view a previous run left in the table (see [`PreviousView`]).
pub fn room_view<'scope>(
    readings: StreamVec<'scope, u64, Reading>,
    registry: RegistryInput,
    readings_probe: ProbeHandle<u64>,
    previous: &PreviousView,
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

    // Only readings newer than the device's newest so far become upserts, and only the newest
    // per device within each coalescing period: a replay at full speed sends many readings of a
    // device per second, and the arrangement needs only the last.
    let upserts = readings.unary_frontier(
        Exchange::new(|r: &Reading| hash_device(&r.device)),
        "NewestPerDevice",
        move |_cap, info| {
            let activator = scope.activator_for(info.address);
            // Per device: newest event time passed on, and the timely time of that upsert.
            let mut newest: HashMap<String, (i64, u64)> = HashMap::new();
            let mut pending: HashMap<String, (Latest, u64)> = HashMap::new();
            let mut held = CapabilitySet::new();
            let mut last_emit = Instant::now();
            move |(input, frontier), output| {
                input.for_each(|cap, data| {
                    let Some(&arrived) = cap.least() else { return };
                    for r in data.drain(..) {
                        let previous = newest.get(&r.device).copied();
                        if previous.is_some_and(|(ts, _)| ts >= r.ts) {
                            continue;
                        }
                        // Upserts apply in timely-time order, and readings from different
                        // workers arrive with unrelated watermarks: never stamp a newer reading
                        // before the device's previous upsert.
                        let time = previous.map_or(arrived, |(_, t)| t.max(arrived));
                        newest.insert(r.device.clone(), (r.ts, time));
                        let room = r.room();
                        pending.insert(r.device, ((r.ts, format_value(r.value), room), time));
                    }
                    if let Some(c) = cap.retain_least(0) {
                        held.insert(c);
                    }
                });
                let frontier = frontier.frontier();
                if !pending.is_empty() && (frontier.is_empty() || last_emit.elapsed() >= COALESCE) {
                    if let Some(cap) = held.iter().min_by_key(|c| *c.time()) {
                        let mut session = output.session(cap);
                        for (device, (latest, time)) in pending.drain() {
                            session.give((device, Some(latest), time));
                        }
                    }
                    last_emit = Instant::now();
                }
                if pending.is_empty() {
                    // Never below what is held: data from a worker that is ahead arrives at
                    // times beyond the frontier.
                    let least = held.iter().map(|c| *c.time()).min();
                    match (frontier.first(), least) {
                        (None, _) => held.downgrade(&[] as &[u64]),
                        (Some(&f), Some(l)) if f > l => held.downgrade([f]),
                        _ => {}
                    }
                } else {
                    activator.activate_after(COALESCE);
                }
            }
        },
    );
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
    let by_row = Exchange::new(|((room, device, ..), _, _): &(RoomRow, u64, isize)| {
        hash_device(room) ^ hash_device(device).rotate_left(1)
    });
    registered
        .concat(unregistered)
        .concat(stored)
        .consolidate()
        .inner
        .unary_frontier(by_row, "RoomRows", |_cap, _info| {
            // A time's changes can come in several containers: convert a time only once the
            // frontier has passed it, so its retraction and insertion of a row meet.
            let mut stash: BTreeMap<u64, (Capability<u64>, Vec<Update>)> = BTreeMap::new();
            move |(input, frontier), output| {
                input.for_each(|cap, data| {
                    let Some(least) = cap.retain_least(0) else {
                        return;
                    };
                    for update in data.drain(..) {
                        stash
                            .entry(update.1)
                            .or_insert_with(|| (least.delayed(&update.1), Vec::new()))
                            .1
                            .push(update);
                    }
                });
                let frontier = frontier.frontier();
                while let Some(entry) = stash.first_entry() {
                    if frontier.less_equal(entry.key()) {
                        break;
                    }
                    let (cap, updates) = entry.remove();
                    output
                        .session(&cap)
                        .give_iterator(to_mutations(updates).into_iter());
                }
            }
        })
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
        .map(|((room, device), change)| {
            let row = room_key(&room, &device);
            match change {
                (Some((ts, value, own)), _) => {
                    let cell = |qualifier: &[u8], value: Vec<u8>| Cell {
                        family: FAMILY.into(),
                        qualifier: qualifier.to_vec(),
                        ts_ms: ts * 1000,
                        value,
                    };
                    Mutation::Put {
                        table: ROOM_TABLE,
                        row,
                        cells: vec![
                            cell(VALUE_QUALIFIER, value.into_bytes()),
                            cell(OWN_ROOM_QUALIFIER, own.unwrap_or_default().into_bytes()),
                        ],
                    }
                }
                (None, deleted) => Mutation::DeleteRow {
                    table: ROOM_TABLE,
                    row,
                    ts_ms: deleted.unwrap_or(0) * 1000,
                },
            }
        })
        .collect();
    out.sort_by(|a, b| a.row().cmp(b.row()));
    out
}

/// The registry of the room view, and where its refused records go.
pub struct RegistryInput {
    /// Where the registry comes from (`None`: rooms come from the readings only).
    pub source: Option<RegistrySource>,
    /// The job's dead-letter output, for refused registry topic records.
    pub side: Arc<dyn SideOutput>,
    /// Counts refused registry topic records.
    pub stats: Arc<Stats>,
    /// Fails the job when the registry topic cannot be opened.
    pub control: Arc<JobControl>,
}

impl std::fmt::Debug for RegistryInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryInput")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// Where worker 0 reads the registry from, and how far it is.
enum Loader {
    File {
        path: PathBuf,
        seen_mtime: Option<SystemTime>,
    },
    Topic {
        reader: RegistryTopic,
        opened: Instant,
        next_note: Duration,
        announced: bool,
    },
}

impl Loader {
    /// Opens the source; a registry topic that cannot be read fails the job.
    fn open(source: RegistrySource, control: &JobControl) -> Option<Self> {
        match source {
            RegistrySource::File(path) => Some(Loader::File {
                path,
                seen_mtime: None,
            }),
            RegistrySource::Topic { source, topic } => match RegistryTopic::open(&source, &topic) {
                Ok(reader) => Some(Loader::Topic {
                    reader,
                    opened: Instant::now(),
                    next_note: Duration::from_secs(10),
                    announced: false,
                }),
                Err(e) => {
                    control.fail(format!("device registry: {e}"));
                    None
                }
            },
        }
    }

    /// The changes since the last call, whether the registry is complete (a topic read up to
    /// where it ended at start), and when to look again.
    fn poll(
        &mut self,
        current: &mut Registry,
        input: &RegistryInput,
    ) -> (Vec<RegistryChange>, bool, Duration) {
        match self {
            Loader::File { path, seen_mtime } => {
                let mtime = std::fs::metadata(&*path).and_then(|m| m.modified()).ok();
                let mut changes = Vec::new();
                if mtime.is_some() && mtime != *seen_mtime {
                    *seen_mtime = mtime;
                    match registry::load(path) {
                        Ok(new) => {
                            changes = registry::diff(current, &new);
                            tracing::info!(
                                changes = changes.len(),
                                devices = new.len(),
                                "device registry loaded"
                            );
                            *current = new;
                        }
                        Err(e) => tracing::warn!(
                            "device registry not reloaded, keeping the previous one: {e}"
                        ),
                    }
                }
                (changes, true, REGISTRY_POLL)
            }
            Loader::Topic {
                reader,
                opened,
                next_note,
                announced,
            } => {
                let polled = reader.poll(REGISTRY_BATCH);
                if !polled.rejected.is_empty() {
                    for r in &polled.rejected {
                        tracing::warn!(
                            topic = %r.topic,
                            partition = r.partition,
                            offset = r.offset,
                            kind = r.error.kind(),
                            "device registry record refused (dead-lettered, changes nothing): {}",
                            r.error
                        );
                        add(&input.stats.registry_rejected, 1);
                        if let Err(e) = input.side.registry_rejected(r) {
                            input.control.fail(format!("dead-letter output: {e}"));
                        }
                    }
                    // Rare, and worth seeing while the job runs.
                    if let Err(e) = input.side.flush() {
                        input.control.fail(format!("dead-letter output: {e}"));
                    }
                }
                let changes = registry::apply(current, polled.updates);
                let ready = reader.caught_up();
                if ready && !*announced {
                    *announced = true;
                    tracing::info!(
                        topic = reader.topic(),
                        devices = current.len(),
                        "device registry topic read"
                    );
                    eprintln!(
                        "device registry: read topic {} ({} devices), following it",
                        reader.topic(),
                        current.len()
                    );
                } else if !ready && opened.elapsed() >= *next_note {
                    *next_note += Duration::from_secs(10);
                    tracing::warn!(
                        topic = reader.topic(),
                        partitions_behind = reader.partitions_behind(),
                        "still reading the device registry topic; the room view waits for it"
                    );
                }
                let again = match (polled.more, ready) {
                    (true, _) => Duration::ZERO,
                    (false, false) => REGISTRY_CATCH_UP_POLL,
                    (false, true) => REGISTRY_POLL,
                };
                (changes, ready, again)
            }
        }
    }
}

/// Emits the registry's changes on worker 0 at the readings' frontier, and closes when the
/// readings close. A file is polled for changes; a topic is read without blocking at every
/// activation. Until the registry is complete (a file: at once; a topic: read up to where it
/// ended at start) the source holds its first time, so no row of the view is written before the
/// registry is known (and the durable probe, hence Kafka commits, waits too).
fn registry_source<'scope>(
    scope: timely::dataflow::Scope<'scope, u64>,
    input: RegistryInput,
    readings_probe: ProbeHandle<u64>,
) -> StreamVec<'scope, u64, ((String, String), u64, isize)> {
    source::<_, timely::container::CapacityContainerBuilder<Vec<_>>, _, _>(
        scope,
        "DeviceRegistry",
        move |cap, info| {
            let activator = scope.activator_for(info.address);
            let mut loader = match (scope.index(), input.source.clone()) {
                (0, Some(source)) => Loader::open(source, &input.control),
                _ => None,
            };
            let mut cap = loader.is_some().then_some(cap);
            let mut current = Registry::new();
            move |output| {
                let (Some(c), Some(loader)) = (cap.as_mut(), loader.as_mut()) else {
                    return;
                };
                let (changes, complete, again) = loader.poll(&mut current, &input);
                if !changes.is_empty() {
                    let time = *c.time();
                    output
                        .session(c)
                        .give_iterator(changes.into_iter().map(|(d, r)| (d, time, r)));
                }
                let frontier = readings_probe.with_frontier(|f| f.first().copied());
                match frontier {
                    // An incomplete registry is still read to its end after the readings close
                    // (a short replay), unless the job is stopping.
                    None if complete || input.control.stopped() => {
                        cap = None;
                        return;
                    }
                    Some(f) if complete && f > *c.time() => c.downgrade(&f),
                    _ => {}
                }
                if again.is_zero() {
                    activator.activate();
                } else {
                    activator.activate_after(again);
                }
            }
        },
    )
}

/// One device's current value in a room.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RoomEntry {
    /// Device id.
    pub device: String,
    /// Event time of its latest reading, epoch seconds.
    pub ts: i64,
    /// Its latest value.
    pub value: f64,
}

/// Every device's current value in `room`, from one prefix scan of the room view.
///
/// # Errors
/// A store error or a malformed row.
pub fn room(store: &dyn TableReader, room: &str) -> Result<Vec<RoomEntry>> {
    registry::validate_room(room)?;
    let prefix = format!("{room}_");
    let rows = store.scan(ROOM_TABLE, &ScanSpec::prefix(prefix.as_bytes()))?;
    rows.iter()
        .filter_map(|row| {
            let device = std::str::from_utf8(&row.key)
                .ok()?
                .strip_prefix(&prefix)?
                .to_string();
            let cell = row.cell(FAMILY, b"v")?;
            let value = std::str::from_utf8(&cell.value).ok()?.parse().ok()?;
            Some(Ok(RoomEntry {
                device,
                ts: cell.ts_ms.div_euclid(1000),
                value,
            }))
        })
        .collect()
}

/// The same answer the seed's way: the latest narrow row of each of the room's devices (from
/// the registry), with one thread per salt bucket scanning its devices' prefixes in parallel.
///
/// # Errors
/// A store error or a malformed row.
pub fn room_fanout(
    store: &(dyn TableReader + Sync),
    scheme: KeyScheme,
    devices: &[String],
) -> Result<Vec<RoomEntry>> {
    let mut buckets: Vec<Vec<&String>> = vec![Vec::new(); 16];
    for d in devices {
        buckets[rowkey::salt_bucket(d) as usize].push(d);
    }
    let results: Vec<Result<Vec<RoomEntry>>> = std::thread::scope(|s| {
        let handles: Vec<_> = buckets
            .iter()
            .filter(|b| !b.is_empty())
            .map(|bucket| {
                s.spawn(move || {
                    let mut out = Vec::new();
                    for device in bucket {
                        if let Some(r) = query::latest(store, scheme, device)? {
                            out.push(RoomEntry {
                                device: r.device,
                                ts: r.ts,
                                value: r.value,
                            });
                        }
                    }
                    Ok(out)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(crate::Error::Invalid("fan-out scan panicked".into())))
            })
            .collect()
    });
    let mut all = Vec::new();
    for r in results {
        all.extend(r?);
    }
    all.sort_by(|a, b| a.device.cmp(&b.device));
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(room: &str, dev: &str, ts: i64, v: &str) -> RoomRow {
        (room.into(), dev.into(), ts, v.into(), Some(room.into()))
    }

    #[test]
    fn only_rows_the_view_could_write_seed_it() {
        let seed = seed_reading(&row("lab1", "dev1", 10, "2.5")).expect("a view row");
        assert_eq!(
            (seed.device.as_str(), seed.ts, seed.value),
            ("dev1", 10, 2.5)
        );
        assert_eq!(seed.room().as_deref(), Some("lab1"));
        // A registry room: the seed carries the reading's own room, or none.
        let mut registered = row("lab1", "dev1", 10, "2.5");
        registered.4 = Some("own7".into());
        assert_eq!(
            seed_reading(&registered).unwrap().room().as_deref(),
            Some("own7")
        );
        registered.4 = None;
        assert_eq!(seed_reading(&registered).unwrap().room(), None);
        registered.4 = Some("a_b".into());
        assert!(seed_reading(&registered).is_none());
        // `a_b_dev1` read back as room `a_b`: written before rooms were checked.
        assert!(seed_reading(&row("a_b", "dev1", 10, "2.5")).is_none());
        assert!(seed_reading(&row("lab1", "dev1", 10, "warm")).is_none());
        assert!(seed_reading(&row("lab1", "dev1", 10, "NaN")).is_none());
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
