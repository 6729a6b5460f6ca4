//! An event-time tumbling window with early firings, allowed lateness, a bound on the items it
//! holds and a side output for items beyond the lateness.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::Hash;
use std::time::{Duration, Instant};

use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::Operator;
use timely::dataflow::operators::CapabilitySet;
use timely::dataflow::StreamVec;
use timely::ExchangeData;

/// Window geometry and triggers. Times are event-time seconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowSpec {
    /// Window width (3600 for hourly windows). Windows start at multiples of it.
    pub width: u64,
    /// How long after a window's end (by watermark) late items are still accepted.
    pub allowed_lateness: u64,
    /// Processing-time period of early firings (`None`: fire only when the watermark passes).
    /// Only windows near the wall clock get them ([`WindowSpec::is_live`]): a replay racing
    /// through past windows emits each once, when the watermark passes it.
    pub early_fire: Option<Duration>,
    /// Most items a worker holds not yet fired, over all its windows (`None`: no bound). When
    /// an input batch takes it past this, every window not yet fired on time fires its held
    /// items at once ([`Firing::Early`]), so memory is bounded whatever the firing rule. Fired
    /// items wait in an emission queue that drains [`EMIT_FUEL`] an activation, at least as
    /// fast as items arrive, so a worker holds at most about twice this many.
    pub max_pending: Option<usize>,
}

impl WindowSpec {
    /// Start of the window holding event time `ts`.
    pub fn window_start(&self, ts: u64) -> u64 {
        ts - ts % self.width
    }

    /// The watermark from which the window starting at `start` is final: its end plus the
    /// allowed lateness. Items arriving then are dropped, and nothing changes the window again.
    pub fn closes_at(&self, start: u64) -> u64 {
        start
            .saturating_add(self.width)
            .saturating_add(self.allowed_lateness)
    }

    /// Whether the window starting at `start` is final at `watermark` (see
    /// [`WindowSpec::closes_at`]). Whoever must know which windows a run has closed (a restart
    /// resuming from a committed offset) asks this, so it cannot disagree with the operator.
    pub fn is_final(&self, start: u64, watermark: u64) -> bool {
        watermark >= self.closes_at(start)
    }

    /// Whether the window starting at `start` gets processing-time early firings when the wall
    /// clock reads `now` (epoch seconds, as event times): while `now` is before
    /// [`WindowSpec::closes_at`], i.e. while data arriving in real time could still change it,
    /// so a live dashboard may be watching it. Windows of a recording's past (a replay, or a
    /// consumer catching up) fail this and are written once, by the on-time firing.
    pub fn is_live(&self, start: u64, now: u64) -> bool {
        now < self.closes_at(start)
    }
}

/// Why a pane was emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Firing {
    /// A processing-time early firing of a window still open.
    Early,
    /// The watermark passed the window's end.
    OnTime,
    /// An item arrived after the on-time firing but within the allowed lateness.
    Late,
}

/// Per key and window state kept until the window is released: it decides which items are new
/// and summarises all of them, so summaries stay right under late data.
pub trait Accumulate<V>: Default + 'static {
    /// What a pane carries about its key's whole window so far.
    type Summary: Clone + 'static;

    /// Takes an item; `false` means it adds nothing to the window (a repeat of one already
    /// taken, by the accumulator's rule): the window emits it as [`WindowOutput::Repeated`],
    /// not in a pane.
    fn accept(&mut self, ts: u64, value: &V) -> bool;

    /// Whether an item that [`Accumulate::accept`] refused is, as far as the accumulator can
    /// tell, exactly an item it took (same time, same value): a repeat that changes nothing,
    /// emitted as [`WindowOutput::Repeated`] with `same` set. `false` (the default) when it
    /// cannot tell.
    fn knows(&self, _ts: u64, _value: &V) -> bool {
        false
    }

    /// The summary of every item accepted so far.
    fn summary(&self) -> Self::Summary;
}

/// Accepts everything and summarises nothing.
impl<V> Accumulate<V> for () {
    type Summary = ();
    fn accept(&mut self, _ts: u64, _value: &V) -> bool {
        true
    }
    fn summary(&self) {}
}

/// Items of one key and window emitted by one firing: only those not emitted before.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Pane<K, V, S = ()> {
    /// The key.
    pub key: K,
    /// Start of the window (event-time seconds, a multiple of the width).
    pub window_start: u64,
    /// Why this pane was emitted.
    pub firing: Firing,
    /// `(event time, value)` of each item new since the key's previous pane in this window.
    pub items: Vec<(u64, V)>,
    /// Summary of every item of the key's window so far, these included.
    pub summary: S,
}

/// What the window operator emits.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub enum WindowOutput<K, V, S = ()> {
    /// New items of a window.
    Pane(Pane<K, V, S>),
    /// An item whose window had closed (watermark past its end plus the allowed lateness).
    Dropped {
        /// The key.
        key: K,
        /// The item's event time.
        ts: u64,
        /// The item.
        value: V,
        /// The watermark the item arrived at.
        watermark: u64,
    },
    /// An item its key's window did not take ([`Accumulate::accept`] said `false`: a repeat of
    /// an item it already has), emitted at once so that the caller can record it: a second
    /// reading of one second may be a device's correction of the first.
    Repeated {
        /// The key.
        key: K,
        /// The item's event time.
        ts: u64,
        /// The item.
        value: V,
        /// Whether it is exactly an item the window already took ([`Accumulate::knows`]), so
        /// it changes nothing; `false` when it may differ (a correction).
        same: bool,
    },
}

/// Groups `(key, event time, value)` items into tumbling event-time windows per key.
pub trait TumblingWindow<'scope, K, V> {
    /// Exchanges items by key and windows them, with `A` deciding which items are new and
    /// summarising each key's window (`()` accepts all and summarises nothing).
    ///
    /// `now` reads the wall clock (epoch seconds) for [`WindowSpec::is_live`]; it is called
    /// only when an early firing is due.
    ///
    /// An item arriving at watermark `w` (its timely time) for window `[s, s + width)`:
    /// - is held and emitted by the next early firing (every [`WindowSpec::early_fire`] while
    ///   the window [`WindowSpec::is_live`], and whenever the worker holds more than
    ///   [`WindowSpec::max_pending`] items), or by the on-time firing when the input frontier
    ///   passes `s + width`;
    /// - after the on-time firing, is emitted at once in a [`Firing::Late`] pane while
    ///   `w < s + width + allowed_lateness`;
    /// - is emitted as [`WindowOutput::Dropped`] when `w >= s + width + allowed_lateness`;
    /// - is emitted at once as [`WindowOutput::Repeated`] when the window is open but its
    ///   accumulator does not take it (`A::accept` is `false`).
    ///
    /// Window state is released once the frontier passes `s + width + allowed_lateness`. The
    /// output frontier is the input frontier, held back only to the arrival time of the oldest
    /// item not yet emitted: downstream of a sink, a probe passes `t` only when every item that
    /// arrived before `t` has been written (what a Kafka offset commit needs).
    ///
    /// # Examples
    /// ```
    /// use operators::{Firing, TumblingWindow, WindowOutput, WindowSpec};
    /// use timely::dataflow::operators::{Capture, ToStream};
    /// use timely::dataflow::operators::capture::Event;
    ///
    /// let spec = WindowSpec { width: 10, allowed_lateness: 10, early_fire: None, max_pending: None };
    /// let captured = timely::example(move |scope| {
    ///     // (key, event time, value): all at watermark 0, then the input ends.
    ///     vec![("a".to_string(), 3u64, 1.0f64), ("a".into(), 12, 2.0), ("a".into(), 5, 3.0)]
    ///         .to_stream(scope)
    ///         .tumbling_window::<()>(spec, || 0)
    ///         .capture()
    /// });
    /// let mut panes: Vec<_> = captured
    ///     .try_iter()
    ///     .flat_map(|e| match e { Event::Messages(_, d) => d, Event::Progress(_) => vec![] })
    ///     .collect();
    /// panes.sort_by_key(|o| match o { WindowOutput::Pane(p) => p.window_start, _ => u64::MAX });
    /// assert!(matches!(&panes[0], WindowOutput::Pane(p)
    ///     if p.window_start == 0 && p.firing == Firing::OnTime && p.items == vec![(3, 1.0), (5, 3.0)]));
    /// assert!(matches!(&panes[1], WindowOutput::Pane(p) if p.window_start == 10 && p.items == vec![(12, 2.0)]));
    /// ```
    ///
    /// # Panics
    /// If `spec.width` is 0 or above `u32::MAX` (offsets in a window are held as `u32`).
    fn tumbling_window<A: Accumulate<V>>(
        self,
        spec: WindowSpec,
        now: impl FnMut() -> u64 + 'static,
    ) -> StreamVec<'scope, u64, WindowOutput<K, V, A::Summary>>;
}

/// Groups a window's keys are split into for early firings (by key index): each group fires
/// once per [`WindowSpec::early_fire`] period, the groups a tenth of a period apart, so a worker
/// emits a tenth of its open hours' panes every second instead of all of them every ten
/// seconds. A firing of every key at once stalled the worker (and the narrow rows it reads and
/// writes meanwhile) for as long as it took to build and write 50,000 panes.
pub const EARLY_GROUPS: usize = 10;

/// When each early-firing group is next due: group `g` first fires `(g + 1) / EARLY_GROUPS` of a
/// period after the operator starts, then once a period.
#[derive(Debug)]
struct EarlyClock {
    period: Duration,
    next: [Instant; EARLY_GROUPS],
}

impl EarlyClock {
    fn new(period: Duration, now: Instant) -> Self {
        EarlyClock {
            period,
            next: std::array::from_fn(|g| now + period * (g as u32 + 1) / EARLY_GROUPS as u32),
        }
    }

    /// Which groups are due at `now` (each then due again a period later; one that fell a
    /// period or more behind, a period from now).
    fn due(&mut self, now: Instant) -> [bool; EARLY_GROUPS] {
        let period = self.period;
        std::array::from_fn(|g| {
            let next = &mut self.next[g];
            if *next > now {
                return false;
            }
            *next += period;
            if *next <= now {
                *next = now + period;
            }
            true
        })
    }

    /// How long until the next group is due.
    fn until_next(&self, now: Instant) -> Duration {
        self.next
            .iter()
            .min()
            .map_or(self.period, |next| next.saturating_duration_since(now))
    }
}

/// Items of one early-firing group of a window not yet emitted.
struct Held<V> {
    /// In arrival order: (key index, offset from the window start, value).
    items: Vec<(u32, u32, V)>,
    /// Least timely time (watermark at arrival) of the items.
    since: Option<u64>,
}

impl<V> Default for Held<V> {
    fn default() -> Self {
        Held {
            items: Vec::new(),
            since: None,
        }
    }
}

/// Items of one firing sorted by key and offset, emitted a bounded number per activation
/// ([`EMIT_FUEL`]).
struct Emission<V> {
    firing: Firing,
    /// Least timely time (watermark at arrival) of the items.
    since: u64,
    items: std::iter::Peekable<std::vec::IntoIter<(u32, u32, V)>>,
}

/// Items a worker emits per activation, at least (more when more arrived in it), before it
/// yields to the operators downstream and comes back for the rest.
///
/// A firing hands its items to an emission queue; the panes are built from it as they go out.
/// Emitting a whole firing at once built every pane, and every mutation made of them
/// downstream, before the writer took the first: the on-time firing of 100,000 devices' hour
/// held about 240 MB of mutations in a replay's peak (heaptrack), most of its RSS.
pub const EMIT_FUEL: usize = 1 << 16;

/// One window's state on one worker, flat: a held item is its key's index, its offset in the
/// window and its value (16 bytes for an `f64`), and a key costs two copies of itself (map and
/// index) and one accumulator per window however many items it has.
struct WindowSlot<K, V, A> {
    /// Each key's index into `accs` and `keys`.
    index: HashMap<K, u32>,
    /// Keys by index.
    keys: Vec<K>,
    /// Accumulators by key index, kept until the window is released.
    accs: Vec<A>,
    /// Items not yet emitted, by early-firing group (key index modulo [`EARLY_GROUPS`]).
    pending: [Held<V>; EARLY_GROUPS],
    /// Firings whose panes are not all emitted yet, oldest first.
    emitting: VecDeque<Emission<V>>,
    /// Whether the on-time firing happened.
    fired: bool,
}

impl<K: Clone + Hash + Eq, V, A: Accumulate<V>> WindowSlot<K, V, A> {
    fn new() -> Self {
        WindowSlot {
            index: HashMap::new(),
            keys: Vec::new(),
            accs: Vec::new(),
            pending: std::array::from_fn(|_| Held::default()),
            emitting: VecDeque::new(),
            fired: false,
        }
    }

    /// The index of `key`, added with a new accumulator if the window has not seen it.
    fn key_index(&mut self, key: &K) -> u32 {
        if let Some(&k) = self.index.get(key) {
            return k;
        }
        // More than u32::MAX keys in one window on one worker would need hundreds of GB of
        // accumulators first.
        let k = self.accs.len() as u32;
        self.index.insert(key.clone(), k);
        self.keys.push(key.clone());
        // A quarter more, not double: accumulators are much of the window's memory (the hourly
        // one: 128 bytes here, ~270 more in its own allocations).
        if self.accs.len() == self.accs.capacity() {
            let more = (self.accs.capacity() / 4).max(64);
            self.accs.reserve_exact(more);
        }
        self.accs.push(A::default());
        k
    }

    /// Least timely time (watermark at arrival) of the items not yet emitted.
    fn pending_since(&self) -> Option<u64> {
        let held = self.pending.iter().filter_map(|held| held.since);
        held.chain(self.emitting.iter().map(|e| e.since)).min()
    }

    /// Queues the items held in the groups `groups` selects for emission ([`WindowSlot::emit`])
    /// and returns how many there are. The held buffers are freed, not kept for reuse: memory
    /// follows what is held now, not the largest burst so far.
    ///
    /// Each group is sorted in place and queued on its own: the groups hold disjoint keys, so
    /// their panes need no common order. Gathering a firing's groups into one buffer first took
    /// up to twice the held items' memory while it grew, and its sort half as much again (a
    /// pressure firing holds `max_pending` items, 16 MB at the default).
    fn fire(&mut self, firing: Firing, groups: &[bool; EARLY_GROUPS]) -> usize {
        let mut queued = 0;
        for (held, _) in self.pending.iter_mut().zip(groups).filter(|(_, &on)| on) {
            // A group holds items exactly when it has a `since`.
            let Some(since) = held.since.take() else {
                continue;
            };
            let mut items = std::mem::take(&mut held.items);
            queued += items.len();
            // Stable: items of a key at one time go out in arrival order. Its buffer is half of
            // one group's items.
            items.sort_by_key(|&(k, offset, _)| (k, offset));
            self.emitting.push_back(Emission {
                firing,
                since,
                items: items.into_iter().peekable(),
            });
        }
        queued
    }

    /// Emits queued items, one pane per key of a firing with its items ascending by time
    /// (arrival order among equal times), until their count reaches `fuel` or none is left;
    /// returns how many it emitted, which is more than `fuel` when the last pane crossed it.
    /// A pane's summary is its key's when it goes out, so it covers every item accepted by
    /// then: a late item's pane, emitted at once, may go out before its key's on-time pane, and
    /// the later write must not undo it.
    fn emit(
        &mut self,
        start: u64,
        fuel: usize,
        mut give: impl FnMut(Pane<K, V, A::Summary>),
    ) -> usize {
        let mut emitted = 0;
        while emitted < fuel {
            let Some(emission) = self.emitting.front_mut() else {
                break;
            };
            let Some((k, offset, value)) = emission.items.next() else {
                self.emitting.pop_front();
                continue;
            };
            let mut run = vec![(start + u64::from(offset), value)];
            while let Some((_, offset, value)) = emission.items.next_if(|next| next.0 == k) {
                run.push((start + u64::from(offset), value));
            }
            emitted += run.len();
            // Every index in an emission was handed out by `key_index`, so both exist.
            if let (Some(key), Some(acc)) = (self.keys.get(k as usize), self.accs.get(k as usize)) {
                give(Pane {
                    key: key.clone(),
                    window_start: start,
                    firing: emission.firing,
                    items: run,
                    summary: acc.summary(),
                });
            }
        }
        if self
            .emitting
            .front_mut()
            .is_some_and(|e| e.items.peek().is_none())
        {
            self.emitting.pop_front();
        }
        emitted
    }
}

impl<'scope, K, V> TumblingWindow<'scope, K, V> for StreamVec<'scope, u64, (K, u64, V)>
where
    K: ExchangeData + Clone + Hash + Eq,
    V: ExchangeData,
{
    fn tumbling_window<A: Accumulate<V>>(
        self,
        spec: WindowSpec,
        mut now: impl FnMut() -> u64 + 'static,
    ) -> StreamVec<'scope, u64, WindowOutput<K, V, A::Summary>> {
        assert!(
            spec.width > 0 && spec.width <= u64::from(u32::MAX),
            "window width must be in 1..=u32::MAX seconds"
        );
        let scope = self.scope();
        let pact = Exchange::new(|item: &(K, u64, V)| crate::key_hash(&item.0));
        self.unary_frontier(pact, "TumblingWindow", move |_cap, info| {
            let activator = scope.activator_for(info.address);
            let mut slots: BTreeMap<u64, WindowSlot<K, V, A>> = BTreeMap::new();
            let mut caps = CapabilitySet::new();
            let mut early = spec
                .early_fire
                .map(|period| EarlyClock::new(period, Instant::now()));
            // Items held over all slots, against `spec.max_pending`.
            let mut held = 0usize;
            move |(input, frontier), output| {
                let mut arrived = 0;
                input.for_each(|cap, data| {
                    arrived += data.len();
                    // A totally ordered time: the stamp's least element is the watermark.
                    let Some(&watermark) = cap.least() else {
                        return;
                    };
                    let mut late = Vec::new();
                    let mut dropped = Vec::new();
                    for (key, ts, value) in data.drain(..) {
                        let start = spec.window_start(ts);
                        if spec.is_final(start, watermark) {
                            dropped.push(WindowOutput::Dropped {
                                key,
                                ts,
                                value,
                                watermark,
                            });
                            continue;
                        }
                        let slot = slots.entry(start).or_insert_with(WindowSlot::new);
                        let k = slot.key_index(&key);
                        let acc = &mut slot.accs[k as usize];
                        if !acc.accept(ts, &value) {
                            let same = acc.knows(ts, &value);
                            late.push(WindowOutput::Repeated {
                                key,
                                ts,
                                value,
                                same,
                            });
                            continue;
                        }
                        if slot.fired {
                            late.push(WindowOutput::Pane(Pane {
                                key,
                                window_start: start,
                                firing: Firing::Late,
                                items: vec![(ts, value)],
                                summary: acc.summary(),
                            }));
                        } else {
                            let group = &mut slot.pending[k as usize % EARLY_GROUPS];
                            // Grow by a quarter, not double: the budget counts items, and a
                            // doubled buffer would hold up to twice the memory it allows.
                            if group.items.len() == group.items.capacity() {
                                let more = (group.items.capacity() / 4).max(128);
                                group.items.reserve_exact(more);
                            }
                            // `ts - start < width <= u32::MAX`.
                            group.items.push((k, (ts - start) as u32, value));
                            held += 1;
                            group.since = Some(group.since.map_or(watermark, |t| t.min(watermark)));
                        }
                    }
                    if !late.is_empty() || !dropped.is_empty() {
                        let mut session = output.session(&cap);
                        session.give_iterator(late.into_iter());
                        session.give_iterator(dropped.into_iter());
                    }
                    if let Some(c) = cap.retain_least(0) {
                        caps.insert(c);
                    }
                });

                let frontier = frontier.frontier();
                let passed = |t: u64| !frontier.less_equal(&t);
                let due = early
                    .as_mut()
                    .map_or([false; EARLY_GROUPS], |clock| clock.due(Instant::now()));
                // Read only when due: the wall clock decides which windows a dashboard watches.
                let wall = due.contains(&true).then(&mut now);
                let over_budget = spec.max_pending.is_some_and(|max| held > max);
                let all = [true; EARLY_GROUPS];
                for (&start, slot) in slots.iter_mut() {
                    let end = start.saturating_add(spec.width);
                    let (firing, groups) = if slot.fired {
                        continue;
                    } else if passed(end) {
                        slot.fired = true;
                        (Firing::OnTime, &all)
                    } else if over_budget {
                        (Firing::Early, &all)
                    } else if wall.is_some_and(|n| spec.is_live(start, n)) {
                        (Firing::Early, &due)
                    } else {
                        continue;
                    };
                    held -= slot.fire(firing, groups);
                }
                // Emit at least as many items as arrived in this activation, so the queues
                // drain however fast the input comes.
                let mut fuel = EMIT_FUEL.max(arrived);
                if let Some(cap) = crate::least(&caps) {
                    // Panes go out at the least time held, which is at most the arrival of any
                    // item not emitted yet, so releasing the hold afterwards never passes an
                    // item unwritten.
                    let mut session = output.session(cap);
                    for (&start, slot) in slots.iter_mut() {
                        if fuel == 0 {
                            break;
                        }
                        // A key's pane goes out whole, so a slot may emit past the fuel.
                        let emitted =
                            slot.emit(start, fuel, |p| session.give(WindowOutput::Pane(p)));
                        fuel = fuel.saturating_sub(emitted);
                    }
                }
                let emitting = slots.values().any(|slot| !slot.emitting.is_empty());
                // A window final by the frontier stays until its queued panes are out.
                slots.retain(|&start, slot| {
                    !passed(spec.closes_at(start)) || !slot.emitting.is_empty()
                });
                if slots.is_empty() {
                    caps.downgrade(&[] as &[u64]);
                } else {
                    // Hold the output back at the oldest item not yet emitted, so a probe
                    // downstream of the sink only passes times whose wide cells are written.
                    let oldest = slots.values().filter_map(WindowSlot::pending_since).min();
                    let target: Vec<u64> = match (frontier.first(), oldest) {
                        (Some(&f), Some(o)) => vec![f.min(o)],
                        (Some(&f), None) => vec![f],
                        (None, Some(o)) => vec![o],
                        (None, None) => Vec::new(),
                    };
                    crate::downgrade_to_frontier(&mut caps, &target);
                    if emitting {
                        activator.activate();
                    } else if let Some(clock) = &early {
                        activator.activate_after(clock.until_next(Instant::now()));
                    }
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use timely::dataflow::operators::capture::Event;
    use timely::dataflow::operators::{Capture, Input};
    use timely::dataflow::InputHandle;

    const HOUR: u64 = 3600;

    type Out = WindowOutput<String, f64>;

    /// Feeds rounds of `(key, event time, value)` items, each at its watermark, stepping the
    /// worker after each round so that a due firing happens between rounds; the wall clock reads
    /// `now`. Returns every pane emitted.
    fn run(spec: WindowSpec, now: u64, rounds: Vec<(u64, Vec<(&'static str, u64)>)>) -> Vec<Out> {
        timely::execute_directly(move |worker| {
            let mut input = InputHandle::new();
            let captured = worker.dataflow(|scope| {
                scope
                    .input_from(&mut input)
                    .tumbling_window::<()>(spec, move || now)
                    .capture()
            });
            for (watermark, items) in rounds {
                input.advance_to(watermark);
                for (key, ts) in items {
                    input.send((key.to_string(), ts, ts as f64));
                }
                input.flush();
                // Single-threaded, a fixed number of steps surely delivers the round.
                for _ in 0..10 {
                    worker.step();
                }
            }
            input.close();
            while worker.step() {}
            messages(&captured)
        })
    }

    /// Every message captured so far, in order.
    fn messages<T>(captured: &std::sync::mpsc::Receiver<Event<u64, Vec<T>>>) -> Vec<T> {
        captured
            .try_iter()
            .flat_map(|event| match event {
                Event::Messages(_, batch) => batch,
                Event::Progress(_) => Vec::new(),
            })
            .collect()
    }

    fn panes(out: &[Out]) -> Vec<&Pane<String, f64>> {
        out.iter()
            .filter_map(|o| match o {
                WindowOutput::Pane(p) => Some(p),
                WindowOutput::Dropped { .. } | WindowOutput::Repeated { .. } => None,
            })
            .collect()
    }

    /// Three rounds of items for keys `a` and `b` in the hours starting at 0 and `HOUR`.
    fn two_hours_in_three_rounds() -> Vec<(u64, Vec<(&'static str, u64)>)> {
        (0..3)
            .map(|round| {
                let items = ["a", "b"]
                    .into_iter()
                    .flat_map(|k| [(k, 10 + round), (k, HOUR + 10 + round)])
                    .collect();
                (round, items)
            })
            .collect()
    }

    fn spec(early_fire: Option<Duration>, max_pending: Option<usize>) -> WindowSpec {
        WindowSpec {
            width: HOUR,
            allowed_lateness: HOUR,
            early_fire,
            max_pending,
        }
    }

    #[test]
    fn a_replay_of_old_hours_emits_one_pane_per_key_and_window() {
        // Early firings due at every activation, but the wall clock is a day past both hours.
        let out = run(
            spec(Some(Duration::ZERO), None),
            24 * HOUR,
            two_hours_in_three_rounds(),
        );
        let panes = panes(&out);
        let mut seen: Vec<(&str, u64)> = panes
            .iter()
            .map(|p| (p.key.as_str(), p.window_start))
            .collect();
        seen.sort();
        assert_eq!(seen, vec![("a", 0), ("a", HOUR), ("b", 0), ("b", HOUR)]);
        assert!(
            panes
                .iter()
                .all(|p| p.firing == Firing::OnTime && p.items.len() == 3),
            "{panes:?}"
        );
    }

    #[test]
    fn the_window_at_the_wall_clock_still_fires_early() {
        // Now is 100 s into the hour after the first: the first hour closed by the clock (its
        // end plus the lateness), the second is live.
        let now = 2 * HOUR + 100;
        let out = run(
            spec(Some(Duration::ZERO), None),
            now,
            two_hours_in_three_rounds(),
        );
        let panes = panes(&out);
        for key in ["a", "b"] {
            let of = |start: u64| -> Vec<(Firing, usize)> {
                panes
                    .iter()
                    .filter(|p| p.key == key && p.window_start == start)
                    .map(|p| (p.firing, p.items.len()))
                    .collect()
            };
            assert_eq!(of(0), vec![(Firing::OnTime, 3)], "{key}: {panes:?}");
            // One early pane per round, then nothing left for the on-time firing.
            assert_eq!(of(HOUR), vec![(Firing::Early, 1); 3], "{key}: {panes:?}");
        }
        assert!(spec(None, None).is_live(HOUR, now) && !spec(None, None).is_live(0, now));
    }

    #[test]
    fn early_groups_fire_once_a_period_a_tenth_of_a_period_apart() {
        let period = Duration::from_secs(10);
        let t0 = Instant::now();
        let mut clock = EarlyClock::new(period, t0);
        let tick = period / EARLY_GROUPS as u32;
        assert_eq!(clock.until_next(t0), tick);
        let mut fired = [0u32; EARLY_GROUPS];
        // Three periods in tenths: one group a tick, each group once a period.
        for i in 1..=3 * EARLY_GROUPS as u32 {
            let due = clock.due(t0 + tick * i);
            assert_eq!(due.iter().filter(|&&d| d).count(), 1, "tick {i}: {due:?}");
            assert!(due[(i as usize - 1) % EARLY_GROUPS], "tick {i}: {due:?}");
            for (n, d) in fired.iter_mut().zip(due) {
                *n += u32::from(d);
            }
        }
        assert_eq!(fired, [3; EARLY_GROUPS]);
        // Nothing in between ticks; a stalled worker fires every overdue group once, then each
        // a period later.
        assert_eq!(clock.due(t0 + tick * 30 + tick / 2), [false; EARLY_GROUPS]);
        let late = t0 + period * 10;
        assert_eq!(clock.due(late), [true; EARLY_GROUPS]);
        assert_eq!(clock.until_next(late), period);
        // A zero period fires every group at every activation.
        let mut every = EarlyClock::new(Duration::ZERO, t0);
        assert_eq!(every.due(t0), [true; EARLY_GROUPS]);
        assert_eq!(every.due(t0), [true; EARLY_GROUPS]);
    }

    #[test]
    fn the_pending_budget_fires_when_exceeded_and_emits_each_item_once() {
        let rounds: Vec<(u64, Vec<(&'static str, u64)>)> = (0..6)
            .map(|round| {
                (
                    round,
                    vec![("a", 3 * round), ("b", 3 * round + 1), ("a", 3 * round + 2)],
                )
            })
            .collect();
        let mut sent: Vec<(String, u64)> = rounds
            .iter()
            .flat_map(|(_, items)| items.iter().map(|&(k, ts)| (k.to_string(), ts)))
            .collect();
        let out = run(spec(None, Some(4)), 0, rounds);
        let panes = panes(&out);
        // Held: 3 after the first round, 6 > 4 after the second (fire), 3, 6 (fire), 3, 6 (fire).
        let early: Vec<usize> = panes
            .iter()
            .filter(|p| p.firing == Firing::Early)
            .map(|p| p.items.len())
            .collect();
        assert_eq!(early.iter().sum::<usize>(), 18, "{panes:?}");
        assert!(panes.iter().all(|p| p.firing != Firing::Late), "{panes:?}");
        let mut emitted: Vec<(String, u64)> = panes
            .iter()
            .flat_map(|p| p.items.iter().map(|&(ts, _)| (p.key.clone(), ts)))
            .collect();
        emitted.sort();
        sent.sort();
        assert_eq!(emitted, sent);
    }

    /// Counts the items of its key's window.
    #[derive(Default)]
    struct Count(u64);

    impl Accumulate<f64> for Count {
        type Summary = u64;
        fn accept(&mut self, _ts: u64, _value: &f64) -> bool {
            self.0 += 1;
            true
        }
        fn summary(&self) -> u64 {
            self.0
        }
    }

    #[test]
    fn a_large_firing_goes_out_over_activations_and_summaries_count_late_items() {
        // Keys `k…` with three items each, so that panes cross the fuel (65,536 is no multiple
        // of 3), and then `z` with one; all in the first hour. A firing queues its early-firing
        // groups (key index modulo `EARLY_GROUPS`) in order, so `z`, the last index of the last
        // group, has the last pane.
        let keys = (2 * EMIT_FUEL / 3) / EARLY_GROUPS * EARLY_GROUPS + EARLY_GROUPS - 1;
        let (per_step, panes) = timely::execute_directly(move |worker| {
            let mut input = InputHandle::new();
            let captured = worker.dataflow(|scope| {
                scope
                    .input_from(&mut input)
                    .tumbling_window::<Count>(spec(None, None), || 0)
                    .capture()
            });
            // Takes what was emitted into `panes`; returns how many items it had.
            let drain = |panes: &mut Vec<Pane<String, f64, u64>>| {
                let before = panes.len();
                for event in captured.try_iter() {
                    if let Event::Messages(_, batch) = event {
                        panes.extend(batch.into_iter().filter_map(|o| match o {
                            WindowOutput::Pane(p) => Some(p),
                            WindowOutput::Dropped { .. } | WindowOutput::Repeated { .. } => None,
                        }));
                    }
                }
                panes[before..].iter().map(|p| p.items.len()).sum::<usize>()
            };
            let mut panes = Vec::new();
            for ts in [10, 11, 12] {
                for i in 0..keys {
                    input.send((format!("k{i:06}"), ts, 1.0));
                }
            }
            input.send(("z".to_string(), 10, 1.0));
            input.flush();
            for _ in 0..10 {
                worker.step();
            }
            assert_eq!(drain(&mut panes), 0, "nothing fires before the hour ends");
            // The watermark passes the hour's end: the on-time firing of every key.
            input.advance_to(HOUR + 1);
            input.flush();
            let mut per_step = Vec::new();
            while panes.is_empty() {
                worker.step();
                per_step.push(drain(&mut panes));
            }
            // A late item of `z`, whose on-time pane is still queued.
            input.send(("z".to_string(), 20, 2.0));
            input.close();
            while worker.step() {
                per_step.push(drain(&mut panes));
            }
            per_step.push(drain(&mut panes));
            (per_step, panes)
        });
        // An activation stops at the first pane that reaches the fuel (2 items past it at most),
        // besides the late item it emits at once.
        assert!(per_step.iter().all(|&n| n <= EMIT_FUEL + 3), "{per_step:?}");
        assert!(
            per_step.iter().filter(|&&n| n > 0).count() >= 3,
            "{per_step:?}"
        );
        assert_eq!(panes.len(), keys + 2);
        let z: Vec<_> = panes.iter().filter(|p| p.key == "z").collect();
        assert_eq!(z.len(), 2, "{z:?}");
        // The late pane went out first; the on-time pane after it counts the late item too,
        // so the summary written last is the whole hour's.
        assert_eq!(
            (z[0].firing, z[0].items.clone(), z[0].summary),
            (Firing::Late, vec![(20, 2.0)], 2)
        );
        assert_eq!(
            (z[1].firing, z[1].items.clone(), z[1].summary),
            (Firing::OnTime, vec![(10, 1.0)], 2)
        );
        assert!(panes
            .iter()
            .filter(|p| p.key != "z")
            .all(|p| p.summary == 3 && p.items == vec![(10, 1.0), (11, 1.0), (12, 1.0)]));
    }

    /// Takes each event time once.
    #[derive(Default)]
    struct Distinct(std::collections::BTreeSet<u64>);

    impl Accumulate<f64> for Distinct {
        type Summary = usize;
        fn accept(&mut self, ts: u64, _value: &f64) -> bool {
            self.0.insert(ts)
        }
        fn knows(&self, _ts: u64, value: &f64) -> bool {
            *value == 4.0
        }
        fn summary(&self) -> usize {
            self.0.len()
        }
    }

    #[test]
    fn an_item_the_accumulator_refuses_is_emitted_as_repeated_never_dropped_silently() {
        let out = timely::execute_directly(move |worker| {
            let mut input = InputHandle::new();
            let captured = worker.dataflow(|scope| {
                scope
                    .input_from(&mut input)
                    .tumbling_window::<Distinct>(spec(None, None), || 0)
                    .capture()
            });
            // A repeat before the on-time firing, and one after it (within the lateness).
            for (key, ts, v) in [("a", 10, 1.0), ("a", 10, 2.0), ("b", 10, 3.0)] {
                input.send((key.to_string(), ts, v));
            }
            input.advance_to(HOUR + 1);
            input.send(("a".to_string(), 10, 4.0));
            input.close();
            while worker.step() {}
            messages(&captured)
        });
        let mut repeated: Vec<(String, u64, f64, bool)> = out
            .iter()
            .filter_map(|o| match o {
                WindowOutput::Repeated {
                    key,
                    ts,
                    value,
                    same,
                } => Some((key.clone(), *ts, *value, *same)),
                _ => None,
            })
            .collect();
        repeated.sort_by(|a, b| a.2.total_cmp(&b.2));
        assert_eq!(
            repeated,
            vec![
                ("a".to_string(), 10, 2.0, false),
                ("a".to_string(), 10, 4.0, true)
            ]
        );
        let panes: Vec<Pane<String, f64, usize>> = out
            .into_iter()
            .filter_map(|o| match o {
                WindowOutput::Pane(p) => Some(p),
                _ => None,
            })
            .collect();
        let items = |key: &str| -> Vec<(Vec<(u64, f64)>, usize)> {
            panes
                .iter()
                .filter(|p| p.key == key)
                .map(|p| (p.items.clone(), p.summary))
                .collect()
        };
        assert_eq!(items("a"), vec![(vec![(10, 1.0)], 1)], "{panes:?}");
        assert_eq!(items("b"), vec![(vec![(10, 3.0)], 1)], "{panes:?}");
        assert_eq!(panes.len(), 2, "{panes:?}");
    }
}
