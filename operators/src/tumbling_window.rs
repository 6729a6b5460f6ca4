//! An event-time tumbling window with early firings, allowed lateness and a side output for
//! items beyond it.

use std::collections::{BTreeMap, HashMap};
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
    pub early_fire: Option<Duration>,
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

    /// Takes an item; `false` means it adds nothing (a duplicate) and is not emitted.
    fn accept(&mut self, ts: u64, value: &V) -> bool;

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
}

/// Groups `(key, event time, value)` items into tumbling event-time windows per key.
pub trait TumblingWindow<'scope, K, V> {
    /// Exchanges items by key and windows them, with `A` deciding which items are new and
    /// summarising each key's window (`()` accepts all and summarises nothing).
    ///
    /// An item arriving at watermark `w` (its timely time) for window `[s, s + width)`:
    /// - is held and emitted by the next early firing, or by the on-time firing when the input
    ///   frontier passes `s + width`;
    /// - after the on-time firing, is emitted at once in a [`Firing::Late`] pane while
    ///   `w < s + width + allowed_lateness`;
    /// - is emitted as [`WindowOutput::Dropped`] when `w >= s + width + allowed_lateness`.
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
    /// let spec = WindowSpec { width: 10, allowed_lateness: 10, early_fire: None };
    /// let captured = timely::example(move |scope| {
    ///     // (key, event time, value): all at watermark 0, then the input ends.
    ///     vec![("a".to_string(), 3u64, 1.0f64), ("a".into(), 12, 2.0), ("a".into(), 5, 3.0)]
    ///         .to_stream(scope)
    ///         .tumbling_window::<()>(spec)
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
    fn tumbling_window<A: Accumulate<V>>(
        self,
        spec: WindowSpec,
    ) -> StreamVec<'scope, u64, WindowOutput<K, V, A::Summary>>;
}

struct WindowSlot<K, V, A> {
    /// Items per key not yet emitted.
    pending: HashMap<K, Vec<(u64, V)>>,
    /// Accumulators per key, kept until the window is released.
    accs: HashMap<K, A>,
    /// Least timely time (watermark at arrival) of the pending items.
    pending_since: Option<u64>,
    /// Whether the on-time firing happened.
    fired: bool,
}

impl<'scope, K, V> TumblingWindow<'scope, K, V> for StreamVec<'scope, u64, (K, u64, V)>
where
    K: ExchangeData + Clone + Hash + Eq,
    V: ExchangeData,
{
    fn tumbling_window<A: Accumulate<V>>(
        self,
        spec: WindowSpec,
    ) -> StreamVec<'scope, u64, WindowOutput<K, V, A::Summary>> {
        assert!(spec.width > 0, "window width must be positive");
        let scope = self.scope();
        let pact = Exchange::new(|item: &(K, u64, V)| crate::key_hash(&item.0));
        self.unary_frontier(pact, "TumblingWindow", move |_cap, info| {
            let activator = scope.activator_for(info.address);
            let mut slots: BTreeMap<u64, WindowSlot<K, V, A>> = BTreeMap::new();
            let mut caps = CapabilitySet::new();
            let mut last_early = Instant::now();
            move |(input, frontier), output| {
                input.for_each(|cap, data| {
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
                        let slot = slots.entry(start).or_insert_with(|| WindowSlot {
                            pending: HashMap::new(),
                            accs: HashMap::new(),
                            pending_since: None,
                            fired: false,
                        });
                        let acc = match slot.accs.get_mut(&key) {
                            Some(acc) => acc,
                            None => slot.accs.entry(key.clone()).or_default(),
                        };
                        if !acc.accept(ts, &value) {
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
                            slot.pending.entry(key).or_default().push((ts, value));
                            slot.pending_since =
                                Some(slot.pending_since.map_or(watermark, |t| t.min(watermark)));
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
                let early_due = spec
                    .early_fire
                    .is_some_and(|period| last_early.elapsed() >= period);
                if let Some(cap) = crate::least(&caps) {
                    let mut session = output.session(cap);
                    for (&start, slot) in slots.iter_mut() {
                        let end = start.saturating_add(spec.width);
                        let firing = if !slot.fired && passed(end) {
                            slot.fired = true;
                            Firing::OnTime
                        } else if early_due && !slot.fired {
                            Firing::Early
                        } else {
                            continue;
                        };
                        slot.pending_since = None;
                        for (key, mut items) in slot.pending.drain() {
                            items.sort_by_key(|(ts, _)| *ts);
                            let summary = slot
                                .accs
                                .get(&key)
                                .map_or_else(|| A::default().summary(), A::summary);
                            session.give(WindowOutput::Pane(Pane {
                                key,
                                window_start: start,
                                firing,
                                items,
                                summary,
                            }));
                        }
                    }
                }
                if early_due {
                    last_early = Instant::now();
                }
                slots.retain(|&start, _| !passed(spec.closes_at(start)));
                if slots.is_empty() {
                    caps.downgrade(&[] as &[u64]);
                } else {
                    // Hold the output back at the oldest item not yet emitted, so a probe
                    // downstream of the sink only passes times whose wide cells are written.
                    let oldest = slots.values().filter_map(|s| s.pending_since).min();
                    let target: Vec<u64> = match (frontier.first(), oldest) {
                        (Some(&f), Some(o)) => vec![f.min(o)],
                        (Some(&f), None) => vec![f],
                        (None, _) => Vec::new(),
                    };
                    crate::downgrade_to_frontier(&mut caps, &target);
                    if let Some(period) = spec.early_fire {
                        activator.activate_after(period);
                    }
                }
            }
        })
    }
}
