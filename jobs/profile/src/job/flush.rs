//! The merge operator: a worker's events buffered per user and flushed, each flush checking
//! the buffered tags against the registry as it is at that flush, into table puts, short-term
//! values and dead letters.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use operators::InOrder;
use pipeline::control::JobControl;
use pipeline::stats::add;
use sinks::table::Mutation;
use timely::container::CapacityContainerBuilder;
use timely::dataflow::channels::pact::Pipeline;
use timely::dataflow::operators::generic::Operator;
use timely::dataflow::operators::CapabilitySet;
use timely::dataflow::StreamVec;

use super::decoder::ProfileEvent;
use super::stats::ProfileStats;
use super::writers::DeadLetter;
use crate::event::{check_tag, EventLimits};
use crate::merge::{FastMap, FastSet};
use crate::merge::{Flushed, ShortTermValue, UserMerge};
use crate::registry::{read_if_changed, RegistryUrl, TagRegistry};
use crate::tables::PROFILE_TABLE;
use crate::tag::TagDef;

/// One worker's merge: the events since the last flush, and what a flush needs.
#[derive(Debug)]
pub(crate) struct UserBuffer {
    /// The merge of checked updates (its config says when the buffer is full).
    pub(crate) merge: UserMerge,
    /// Where the registry is, to open it again.
    pub(crate) url: RegistryUrl,
    /// The registry, checked for changes at each flush; `None` if it could not be opened (the
    /// job is failing, and its events are not written).
    pub(crate) registry: Option<Box<dyn TagRegistry>>,
    /// Users gray tags are written for.
    pub(crate) gray: Arc<HashSet<String>>,
    /// Limits of one event (the value size, here).
    pub(crate) limits: EventLimits,
    pub(crate) stats: Arc<ProfileStats>,
    pub(crate) control: Arc<JobControl>,
    /// The definitions as of the last flush, their codes' positions, and the registry's
    /// [`TagRegistry::version`] when they were read (`None`: read them at the next flush).
    defs: Vec<TagDef>,
    by_code: FastMap<String, usize>,
    defs_version: Option<u64>,
    /// Events since the last flush, in arrival order.
    pending: Vec<ProfileEvent>,
    /// Their distinct users.
    users: FastSet<String>,
    /// When the oldest pending event arrived.
    oldest: Option<Instant>,
    /// What the last flush wrote, drained: its vectors keep their capacity.
    flushed: Flushed,
}

/// What a flush emits, split after the operator.
#[derive(Debug)]
pub(crate) enum Out {
    Put(Mutation),
    Short(ShortTermValue),
    Dead(Box<DeadLetter>),
}

impl UserBuffer {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        merge: UserMerge,
        url: RegistryUrl,
        registry: Option<Box<dyn TagRegistry>>,
        gray: Arc<HashSet<String>>,
        limits: EventLimits,
        stats: Arc<ProfileStats>,
        control: Arc<JobControl>,
    ) -> Self {
        UserBuffer {
            merge,
            url,
            registry,
            gray,
            limits,
            stats,
            control,
            defs: Vec::new(),
            by_code: FastMap::default(),
            defs_version: None,
            pending: Vec::new(),
            users: FastSet::default(),
            oldest: None,
            flushed: Flushed::default(),
        }
    }

    /// Buffers an event; returns whether the buffer holds `max_users` users.
    fn push(&mut self, event: ProfileEvent) -> bool {
        if !self.users.contains(&event.user_id) {
            self.users.insert(event.user_id.clone());
        }
        self.oldest.get_or_insert_with(Instant::now);
        self.pending.push(event);
        self.users.len() >= self.merge.config().max_users
    }

    /// Brings the held definitions up to date: asks the registry whether they changed since
    /// they were read ([`TagRegistry::version`]) and reads them again if so, or if it cannot
    /// tell. A flush thus checks against the registry as it is at the flush, as if it read
    /// every definition, at the cost of one query that returns a number. A connection the
    /// server has closed (MySQL drops idle ones after `wait_timeout`) is opened again once; a
    /// second failure fails the job, whose pending events are then not written (nor their
    /// offsets committed). Returns whether the definitions are current.
    fn refresh_registry(&mut self) -> bool {
        let Some(registry) = self.registry.as_mut() else {
            return false;
        };
        let first = match read_if_changed(registry.as_mut(), self.defs_version) {
            Ok(read) => {
                self.hold(read);
                return true;
            }
            Err(e) => e,
        };
        let location = registry.location();
        tracing::warn!(registry = %location, error = %first, "reading the tag registry failed; reconnecting");
        let again = self.url.open().and_then(|mut r| {
            let read = read_if_changed(r.as_mut(), None)?;
            Ok((r, read))
        });
        match again {
            Ok((registry, read)) => {
                self.registry = Some(registry);
                self.hold(read);
                true
            }
            Err(e) => {
                self.control
                    .fail(format!("reading the tag registry {location} failed: {e}"));
                self.registry = None;
                false
            }
        }
    }

    /// Holds definitions just read, if any, with their version.
    fn hold(&mut self, read: Option<(Vec<TagDef>, Option<u64>)>) {
        if let Some((defs, version)) = read {
            self.by_code.clear();
            self.by_code.extend(
                defs.iter()
                    .enumerate()
                    .map(|(i, d)| (d.tag_code.clone(), i)),
            );
            self.defs = defs;
            self.defs_version = version;
        }
    }

    /// Reads the registry once and turns the pending events into what to write: each tag
    /// checked ([`check_tag`]) against the definitions read now, so that a status change
    /// applies from the next flush on; a refused tag is a dead letter, the event's other tags
    /// are written.
    fn flush(&mut self, out: &mut impl FnMut(Out)) {
        self.users.clear();
        self.oldest = None;
        if self.pending.is_empty() {
            return;
        }
        if !self.refresh_registry() {
            self.pending.clear();
            return;
        }
        let (defs, by_code) = (&self.defs, &self.by_code);
        // Drained in place: `pending` keeps its capacity for the next flush.
        for event in self.pending.drain(..) {
            for (code, value) in &event.tags {
                let def = by_code.get(code.as_str()).map(|&i| &defs[i]);
                match check_tag(def, code, &event.user_id, value, &self.gray, &self.limits) {
                    Ok(cell) => {
                        if let Some(def) = def {
                            self.merge.push_tag(def, &event.user_id, event.ts, cell);
                        }
                    }
                    Err(reason) => out(Out::Dead(Box::new(DeadLetter {
                        line: event.line,
                        partition: event.partition,
                        reason,
                        raw: event.raw.clone(),
                        tag: Some((event.user_id.clone(), code.clone())),
                    }))),
                }
            }
        }
        let flushed = &mut self.flushed;
        self.merge.flush_into(flushed);
        let (mut users, mut cells, mut history) = (0, 0, 0);
        for m in &flushed.mutations {
            if let Mutation::Put {
                table, cells: c, ..
            } = m
            {
                if *table == PROFILE_TABLE {
                    users += 1;
                    cells += c.len() as u64;
                } else {
                    history += 1;
                }
            }
        }
        add(&self.stats.flushes, 1);
        add(&self.stats.users_flushed, users);
        add(&self.stats.tags_written, cells);
        add(&self.stats.history_rows, history);
        for m in flushed.mutations.drain(..) {
            out(Out::Put(m));
        }
        for v in flushed.short_term.drain(..) {
            out(Out::Short(v));
        }
    }
}

/// When a worker's merge flushes besides when it is full.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FlushTimes {
    /// The longest an event waits in the buffer ([`crate::MergeConfig::flush_interval_ms`]).
    pub(crate) interval: Duration,
    /// Shortest time between two flushes caused by the input frontier passing (the source's
    /// pace); the input's end always flushes.
    pub(crate) min_gap: Duration,
}

/// The merge operator on `events` (exchanged by user): buffers them in `buffer` and flushes
/// when it holds `max_users` users, when its oldest event has waited `times.interval`, when the
/// input frontier passes the buffered times (at most once per `times.min_gap`) and when the
/// input ends. What a flush emits is at the least time buffered, so the frontier after the
/// operator passes a time only once the events before it are flushed. Returns the puts, the
/// short-term values and the dead letters, each in the order flushes made them.
#[allow(clippy::type_complexity)]
pub(crate) fn merge_users<'scope>(
    events: StreamVec<'scope, u64, ProfileEvent>,
    mut buffer: UserBuffer,
    times: FlushTimes,
) -> (
    StreamVec<'scope, u64, Mutation>,
    StreamVec<'scope, u64, ShortTermValue>,
    StreamVec<'scope, u64, Box<DeadLetter>>,
) {
    let scope = events.scope();
    let out = events.unary_frontier::<CapacityContainerBuilder<Vec<Out>>, _, _, _>(
        Pipeline,
        "MergeUsers",
        move |_cap, info| {
            let activator = scope.activator_for(info.address);
            let mut held = CapabilitySet::new();
            let mut last_flush = Instant::now();
            move |(input, frontier), output| {
                input.for_each(|cap, data| {
                    let Some(c) = cap.retain_least(0) else {
                        return;
                    };
                    let time = *c.time();
                    held.insert(c);
                    for event in data.drain(..) {
                        if buffer.push(event) {
                            if let Some(at) = least(&held) {
                                let mut session = output.session(&at);
                                buffer.flush(&mut |f| session.give(f));
                            }
                            last_flush = Instant::now();
                            // Only this batch's later events stay buffered: hold its time
                            // alone, or a stream that fills the buffer before it is due would
                            // hold the first time for good, and no offset would be committed.
                            held.downgrade([time]);
                        }
                    }
                });
                let frontier = frontier.frontier();
                let passed = held.iter().any(|c| !frontier.less_equal(c.time()));
                let waited = buffer.oldest.map_or(Duration::ZERO, |t| t.elapsed());
                let since = last_flush.elapsed();
                let due = buffer.oldest.is_some()
                    && (waited >= times.interval
                        || frontier.is_empty()
                        || (passed && since >= times.min_gap));
                if due {
                    if let Some(at) = least(&held) {
                        let mut session = output.session(&at);
                        buffer.flush(&mut |f| session.give(f));
                    }
                    last_flush = Instant::now();
                }
                if buffer.oldest.is_some() {
                    let mut wait = times.interval.saturating_sub(waited);
                    if passed {
                        wait = wait.min(times.min_gap.saturating_sub(since));
                    }
                    activator.activate_after(wait);
                } else {
                    downgrade_to_frontier(&mut held, frontier.first().copied());
                }
            }
        },
    );
    let (puts, rest) = out.ok_err_in_order(|f| match f {
        Out::Put(m) => Ok(m),
        Out::Short(v) => Err(Ok(v)),
        Out::Dead(d) => Err(Err(d)),
    });
    let (short, dead) = rest.ok_err_in_order(|r| r);
    (puts, short, dead)
}

/// A copy of the held capability with the least time.
fn least(held: &CapabilitySet<u64>) -> Option<timely::dataflow::operators::Capability<u64>> {
    held.iter().min_by_key(|c| *c.time()).cloned()
}

/// Moves the held capabilities up to the input frontier `first` (its least time; `None`: the
/// input has ended, and everything is released), never below what they hold.
fn downgrade_to_frontier(held: &mut CapabilitySet<u64>, first: Option<u64>) {
    let least = held.iter().map(|c| *c.time()).min();
    match (first, least) {
        (None, _) => held.downgrade(&[] as &[u64]),
        (Some(f), Some(l)) if f > l => held.downgrade([f]),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use serde_json::json;
    use timely::dataflow::operators::{Input, Inspect, Probe};
    use timely::dataflow::ProbeHandle;

    use super::*;
    use crate::merge::MergeConfig;
    use crate::registry::SqliteRegistry;
    use crate::tag::{DataType, TagStatus, ValueType};

    fn def(code: &str) -> TagDef {
        TagDef {
            tag_code: code.into(),
            name: code.into(),
            data_type: DataType::Int,
            value_type: ValueType::Statistic,
            status: TagStatus::Online,
            ttl_secs: None,
            category: String::new(),
            owner: String::new(),
            update_frequency: String::new(),
        }
    }

    fn event(user: &str, ts: i64, tags: &[(&str, i64)]) -> ProfileEvent {
        ProfileEvent {
            user_id: user.into(),
            ts,
            tags: tags
                .iter()
                .map(|(c, v)| (c.to_string(), json!(v)))
                .collect(),
            line: ts as u64,
            partition: None,
            raw: Vec::new(),
        }
    }

    /// What came out of the merge: (user row's cells as (code, value, ts_ms)), dead kinds.
    #[derive(Debug, Default)]
    struct Seen {
        puts: Vec<Vec<(String, String, i64)>>,
        dead: Vec<&'static str>,
    }

    /// A registry at `dir/tags.sqlite` holding `defs`.
    fn registry_of(dir: &std::path::Path, defs: &[TagDef]) -> std::path::PathBuf {
        let path = dir.join("tags.sqlite");
        SqliteRegistry::open(&path).unwrap().upsert(defs).unwrap();
        path
    }

    /// Flushes that are never due by time: only a full buffer or the input's end flush.
    const NEVER_DUE: FlushTimes = FlushTimes {
        interval: Duration::from_secs(3600),
        min_gap: Duration::from_secs(3600),
    };

    /// A worker's buffer over the registry at `path`, full at two users.
    fn two_user_buffer(
        path: &std::path::Path,
        stats: Arc<ProfileStats>,
        control: Arc<JobControl>,
    ) -> UserBuffer {
        UserBuffer::new(
            UserMerge::new(MergeConfig {
                max_users: 2,
                flush_interval_ms: 3_600_000,
            }),
            RegistryUrl::Sqlite(path.to_path_buf()),
            Some(Box::new(SqliteRegistry::open(path).unwrap())),
            Arc::new(HashSet::new()),
            EventLimits::default(),
            stats,
            control,
        )
    }

    /// Input that keeps the buffer from ever being empty at the end of an activation (each
    /// batch fills it, and leaves one event behind) must not hold the first time for good: the
    /// frontier after the merge follows what is still buffered, so offsets get committed while
    /// records keep coming.
    #[test]
    fn a_buffer_that_never_empties_does_not_hold_the_first_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = registry_of(dir.path(), &[def("beh_a")]);
        timely::execute_directly(move |worker| {
            let buffer = two_user_buffer(&path, Arc::default(), Arc::default());
            let probe = ProbeHandle::new();
            let mut input = worker.dataflow::<u64, _, _>(|scope| {
                let (input, events) = scope.new_input::<Vec<ProfileEvent>>();
                let (puts, short, dead) = merge_users(events, buffer, NEVER_DUE);
                puts.probe_with(&probe);
                short.probe_with(&probe);
                dead.probe_with(&probe);
                input
            });
            let mut user = 0;
            for t in 0..6u64 {
                // Three users at time 0, then two a time: a full buffer flushes, one stays.
                for _ in 0..if t == 0 { 3 } else { 2 } {
                    user += 1;
                    input.send(event(&format!("u{user}"), t as i64, &[("beh_a", 1)]));
                }
                input.advance_to(t + 1);
                for _ in 0..20 {
                    worker.step();
                }
            }
            // What is buffered is of time 5 alone: the frontier is there, not at 0.
            assert!(
                !probe.less_than(&5),
                "{:?}",
                probe.with_frontier(|f| f.to_vec())
            );
            assert!(probe.less_than(&6));
        });
    }

    #[test]
    fn flushes_when_full_and_at_the_end_reading_the_registry_each_time() {
        let dir = tempfile::tempdir().unwrap();
        let path = registry_of(dir.path(), &[def("beh_a"), def("beh_b")]);
        let control = Arc::new(JobControl::default());
        let stats = Arc::new(ProfileStats::default());
        let times = NEVER_DUE;
        let (w_control, w_stats) = (control.clone(), stats.clone());
        timely::execute_directly(move |worker| {
            let mut registry = SqliteRegistry::open(&path).unwrap();
            let seen = Rc::new(RefCell::new(Seen::default()));
            let (puts_seen, dead_seen) = (seen.clone(), seen.clone());
            let buffer = two_user_buffer(&path, w_stats.clone(), w_control.clone());
            let probe = ProbeHandle::new();
            let mut input = worker.dataflow::<u64, _, _>(|scope| {
                let (input, events) = scope.new_input::<Vec<ProfileEvent>>();
                let (puts, short, dead) = merge_users(events, buffer, times);
                puts.inspect(move |m| {
                    if let Mutation::Put { table, cells, .. } = m {
                        if *table == PROFILE_TABLE {
                            puts_seen.borrow_mut().puts.push(
                                cells
                                    .iter()
                                    .map(|c| {
                                        (
                                            String::from_utf8_lossy(&c.qualifier).into_owned(),
                                            String::from_utf8_lossy(&c.value).into_owned(),
                                            c.ts_ms,
                                        )
                                    })
                                    .collect(),
                            );
                        }
                    }
                })
                .probe_with(&probe);
                short.probe_with(&probe);
                dead.inspect(move |d| dead_seen.borrow_mut().dead.push(d.reason.kind()))
                    .probe_with(&probe);
                input
            });
            // One user, twice: the newer event time wins, not the later arrival.
            input.send(event("u1", 20, &[("beh_a", 2)]));
            input.send(event("u1", 10, &[("beh_a", 1), ("beh_x", 5)]));
            input.advance_to(1);
            for _ in 0..20 {
                worker.step();
            }
            // Not full, and the interval and min_gap are long: nothing is flushed, and the
            // probe does not pass the buffered time.
            assert!(seen.borrow().puts.is_empty());
            assert!(probe.less_than(&1));
            // A second user fills the buffer: flushed at once, without the input moving on.
            input.send(event("u2", 30, &[("beh_b", 3)]));
            input.flush();
            for _ in 0..20 {
                worker.step();
            }
            assert_eq!(seen.borrow().puts.len(), 2, "{:?}", seen.borrow());
            assert!(seen.borrow().puts[0]
                .iter()
                .chain(&seen.borrow().puts[1])
                .any(|c| *c == ("beh_a".into(), "2".into(), 20_000)));
            assert_eq!(seen.borrow().dead, ["unknown_tag"]);
            // Set offline between two flushes: the next flush refuses it.
            registry.set_status("beh_b", TagStatus::Offline).unwrap();
            input.send(event("u3", 40, &[("beh_b", 4), ("beh_a", 4)]));
            input.advance_to(2);
            drop(input);
            while worker.step() {}
            assert_eq!(seen.borrow().dead, ["unknown_tag", "offline_tag"]);
            assert_eq!(seen.borrow().puts.len(), 3);
            assert_eq!(
                seen.borrow().puts[2],
                [("beh_a".into(), "4".into(), 40_000)]
            );
        });
        assert_eq!(control.error(), None);
        let get = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
        assert_eq!((get(&stats.flushes), get(&stats.users_flushed)), (2, 3));
    }
}
