//! Passes on, per key, only items newer by event time than the key's newest so far.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::Hash;
use std::time::{Duration, Instant};

use timely::dataflow::channels::pact::Exchange;
use timely::dataflow::operators::generic::Operator;
use timely::dataflow::operators::CapabilitySet;
use timely::dataflow::StreamVec;
use timely::ExchangeData;

/// Keeps each key's newest item by event time, as upserts.
pub trait NewestPerKey<'scope, K, E, V> {
    /// Exchanges `(key, event time, value)` items by key and passes on an item only if its event
    /// time is after that of every item of its key passed on before: an older item or one with
    /// the same event time cannot change the key's newest, so it goes no further (out-of-order
    /// input never moves a key backwards).
    ///
    /// Each key is emitted at most once per `interval` (processing time): an item of a key not
    /// emitted within the last `interval` goes out at once; one arriving sooner waits until the
    /// key's interval since its last emission ends, replaced by any newer item meanwhile;
    /// whatever waits is emitted when the input ends. `Duration::ZERO` emits at every
    /// activation. A fast replay sends many items of a key per second, and an upsert needs only
    /// the last; a key seen once in a while is still passed on without delay.
    ///
    /// Each output is `(key, event time, value, time)`, `time` being the timely time at which the
    /// item replaces the key's previous one: the item's arrival time, but never before that of
    /// the key's previous output, since items from different workers arrive with unrelated
    /// watermarks. Applied in `time` order, the outputs keep each key's newest item, which is what
    /// differential's `arrange_from_upsert` needs. The output frontier is held at the arrival
    /// time of the oldest waiting item, so nothing downstream (a durable probe) passes an item
    /// before it is emitted: at most `interval` later.
    ///
    /// # Examples
    /// ```
    /// use std::time::Duration;
    /// use operators::NewestPerKey;
    /// use timely::dataflow::operators::capture::Extract;
    /// use timely::dataflow::operators::{Capture, ToStream};
    ///
    /// let captured = timely::example(|scope| {
    ///     // (key, event time, value), all at time 0: "a" goes 5, 3 (older), 9; "b" goes 4, 4.
    ///     vec![("a", 5i64, 'x'), ("a", 3, 'y'), ("b", 4, 'z'), ("a", 9, 'w'), ("b", 4, 'v')]
    ///         .into_iter()
    ///         .map(|(k, ts, v)| (k.to_string(), ts, v))
    ///         .to_stream(scope)
    ///         .newest_per_key(Duration::from_secs(60))
    ///         .capture()
    /// });
    /// // All arrive before the first activation: the first of each key goes out at once, and
    /// // "a"'s newest, which came within its interval, when the input ends.
    /// let mut out: Vec<_> = captured.extract().into_iter().flat_map(|(_, b)| b).collect();
    /// out.sort();
    /// assert_eq!(
    ///     out,
    ///     vec![("a".to_string(), 9, 'w', 0), ("b".to_string(), 4, 'z', 0)]
    /// );
    /// ```
    fn newest_per_key(self, interval: Duration) -> StreamVec<'scope, u64, (K, E, V, u64)>;

    /// [`NewestPerKey::newest_per_key`], except that an item for which `hold` says true waits
    /// until the input ends (or until a newer item of its key that `hold` lets go replaces it),
    /// whatever the interval. A replay of past traffic holds the readings of hours the wall
    /// clock has left, so a device's row is written once, with its newest reading, instead of
    /// once per interval of a replay that races through them; readings near the wall clock still
    /// go out within the interval.
    fn newest_per_key_holding<H>(
        self,
        interval: Duration,
        hold: H,
    ) -> StreamVec<'scope, u64, (K, E, V, u64)>
    where
        H: Fn(&E) -> bool + 'static;
}

impl<'scope, K, E, V> NewestPerKey<'scope, K, E, V> for StreamVec<'scope, u64, (K, E, V)>
where
    K: ExchangeData + Clone + Hash + Eq,
    E: ExchangeData + Clone + Ord,
    V: ExchangeData,
{
    fn newest_per_key(self, interval: Duration) -> StreamVec<'scope, u64, (K, E, V, u64)> {
        self.newest_per_key_holding(interval, |_| false)
    }

    fn newest_per_key_holding<H>(
        self,
        interval: Duration,
        hold: H,
    ) -> StreamVec<'scope, u64, (K, E, V, u64)>
    where
        H: Fn(&E) -> bool + 'static,
    {
        let scope = self.scope();
        let pact = Exchange::new(|item: &(K, E, V)| crate::key_hash(&item.0));
        self.unary_frontier(pact, "NewestPerKey", move |_cap, info| {
            let activator = scope.activator_for(info.address);
            // Every key seen: its newest item passed on, its waiting item, its interval.
            let mut keys: HashMap<K, KeyState<E, V>> = HashMap::new();
            // The arrival times of the waiting items, counted: the least is the time held.
            let mut waiting: BTreeMap<u64, usize> = BTreeMap::new();
            // Keys emitted within the last interval, with the instant their interval ends, in
            // order (one interval for all, so ends come in emission order); a key's
            // `cooling` says whether the entry is still its current one.
            let mut periods: VecDeque<(Instant, K)> = VecDeque::new();
            // Keys whose waiting item may be emitted now.
            let mut ready: Vec<K> = Vec::new();
            // Once the input has ended: the keys still to emit, a chunk an activation.
            let mut last: Option<Vec<K>> = None;
            let mut held = CapabilitySet::new();
            move |(input, frontier), output| {
                input.for_each(|cap, data| {
                    let Some(&arrived) = cap.least() else { return };
                    for (key, ts, value) in data.drain(..) {
                        // One lookup per item: the key's state is updated in place.
                        let Some(state) = keys.get_mut(&key) else {
                            *waiting.entry(arrived).or_default() += 1;
                            let free = !hold(&ts);
                            keys.insert(
                                key.clone(),
                                KeyState {
                                    ts,
                                    time: arrived,
                                    waiting: Some((value, arrived)),
                                    cooling: None,
                                },
                            );
                            if free {
                                ready.push(key);
                            }
                            continue;
                        };
                        if state.ts >= ts {
                            continue;
                        }
                        // A held item is in neither `ready` nor a cooling period.
                        let was_held = state.waiting.is_some() && hold(&state.ts);
                        let replaced = state.waiting.replace((value, arrived)).map(|(_, a)| a);
                        state.time = state.time.max(arrived);
                        state.ts = ts;
                        if replaced != Some(arrived) {
                            *waiting.entry(arrived).or_default() += 1;
                            if let Some(replaced) = replaced {
                                release(&mut waiting, replaced);
                            }
                        }
                        let free = !hold(&state.ts) && state.cooling.is_none();
                        if free && (replaced.is_none() || was_held) {
                            ready.push(key);
                        }
                    }
                    if let Some(c) = cap.retain_least(0) {
                        held.insert(c);
                    }
                });
                let now = Instant::now();
                while let Some((end, _)) = periods.front() {
                    if *end > now {
                        break;
                    }
                    let Some((end, key)) = periods.pop_front() else {
                        break;
                    };
                    let Some(state) = keys.get_mut(&key) else {
                        continue;
                    };
                    if state.cooling == Some(end) {
                        state.cooling = None;
                        if state.waiting.is_some() && !hold(&state.ts) {
                            ready.push(key);
                        }
                    }
                }
                let frontier = frontier.frontier();
                // The time below which the output frontier may pass, if not the oldest waiting
                // item's arrival: after a chunk of the last items, the next chunk's time.
                let mut next_chunk = None;
                if frontier.is_empty() {
                    let last = last.get_or_insert_with(|| {
                        keys.iter()
                            .filter(|(_, state)| state.waiting.is_some())
                            .map(|(key, _)| key.clone())
                            .collect()
                    });
                    ready.clear();
                    let chunk = last.len().saturating_sub(LAST_CHUNK);
                    ready.extend(last.drain(chunk..));
                    if !last.is_empty() {
                        next_chunk = crate::least(&held).map(|cap| cap.time() + 1);
                        activator.activate();
                    }
                }
                if !ready.is_empty() {
                    if let Some(cap) = crate::least(&held) {
                        let at = *cap.time();
                        let mut session = output.session(cap);
                        for key in ready.drain(..) {
                            let Some(state) = keys.get_mut(&key) else {
                                continue;
                            };
                            let Some((value, arrived)) = state.waiting.take() else {
                                continue;
                            };
                            release(&mut waiting, arrived);
                            if !interval.is_zero() {
                                let end = now + interval;
                                state.cooling = Some(end);
                                periods.push_back((end, key.clone()));
                            }
                            // A chunk of the last items goes out after the one before.
                            state.time = state.time.max(at);
                            session.give((key, state.ts.clone(), value, state.time));
                        }
                    }
                }
                match waiting.keys().next() {
                    None => crate::downgrade_to_frontier(&mut held, &frontier),
                    Some(&oldest) => {
                        // Held at the oldest waiting arrival, never below what is held.
                        let to = next_chunk.map_or(oldest, |next: u64| next.max(oldest));
                        crate::downgrade_to_frontier(&mut held, &[to]);
                        if let Some((end, _)) = periods.front() {
                            activator.activate_after(end.saturating_duration_since(now));
                        }
                    }
                }
            }
        })
    }
}

/// Items emitted an activation once the input has ended, each chunk at a later time than the
/// one before.
///
/// A replay holds most devices' rows until its end (`newest_per_key_holding`): emitted at one
/// time, 100,000 of them went through the room view's arrangement, join and consolidation at
/// once, and made the peak of a replay's memory. In chunks, each is sealed and passed on, as the
/// frontier passes its time, before the next is built.
pub const LAST_CHUNK: usize = 8192;

/// What [`NewestPerKey`] keeps of a key.
struct KeyState<E, V> {
    /// The newest event time passed on (or waiting), and the timely time it was given.
    ts: E,
    time: u64,
    /// The waiting item's value and its arrival time; its event time and timely time are the
    /// two above, since a newer item replaces it.
    waiting: Option<(V, u64)>,
    /// The end of the key's interval, if it was emitted within the last one.
    cooling: Option<Instant>,
}

/// Forgets one waiting item that arrived at `arrived`.
fn release(waiting: &mut BTreeMap<u64, usize>, arrived: u64) {
    if let Some(n) = waiting.get_mut(&arrived) {
        *n -= 1;
        if *n == 0 {
            waiting.remove(&arrived);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use timely::dataflow::operators::capture::Extract;
    use timely::dataflow::operators::{Capture, Input, Probe};
    use timely::dataflow::InputHandle;

    type Out = (String, i64, u32, u64);

    /// Feeds `(time, key, event time, value)` in order and returns what was emitted, sorted.
    fn run(coalesce: Duration, items: Vec<(u64, &'static str, i64, u32)>) -> Vec<(u64, Vec<Out>)> {
        run_holding(coalesce, i64::MIN, items)
    }

    /// What [`run`] emitted, in order of time.
    fn emitted(coalesce: Duration, items: Vec<(u64, &'static str, i64, u32)>) -> Vec<Out> {
        let out = run(coalesce, items);
        out.into_iter().flat_map(|(_, batch)| batch).collect()
    }

    /// [`run`], holding the items whose event time is below `hold_below`.
    fn run_holding(
        coalesce: Duration,
        hold_below: i64,
        items: Vec<(u64, &'static str, i64, u32)>,
    ) -> Vec<(u64, Vec<Out>)> {
        timely::execute_directly(move |worker| {
            let mut input = InputHandle::new();
            let captured = worker.dataflow(|scope| {
                scope
                    .input_from(&mut input)
                    .newest_per_key_holding(coalesce, move |ts: &i64| *ts < hold_below)
                    .capture()
            });
            for (time, key, ts, value) in items {
                if *input.time() < time {
                    input.advance_to(time);
                    // The output frontier waits for a coalescing period, so step a fixed
                    // number of times: single-threaded, that surely delivers what was sent.
                    for _ in 0..10 {
                        worker.step();
                    }
                }
                input.send((key.to_string(), ts, value));
            }
            input.close();
            while worker.step() {}
            let mut out = captured.extract();
            for (_, batch) in out.iter_mut() {
                batch.sort();
            }
            out
        })
    }

    #[test]
    fn held_items_wait_for_the_end_unless_a_newer_free_one_replaces_them() {
        // Event times below 100 are held. "a" sends only held items: its newest goes out once,
        // when the input ends. "b" is free: out at once. "c" is held, then replaced by a free
        // item, which goes out at once although the interval never ends within the run.
        let out = run_holding(
            Duration::ZERO,
            100,
            vec![
                (0, "a", 5, 1),
                (0, "b", 200, 2),
                (0, "c", 6, 3),
                (1, "a", 9, 4),
                (2, "c", 150, 5),
                (3, "a", 10, 6),
            ],
        );
        let emitted: Vec<(u64, Vec<Out>)> = out
            .into_iter()
            .filter(|(_, batch)| !batch.is_empty())
            .collect();
        let mut all: Vec<Out> = emitted.iter().flat_map(|(_, b)| b.clone()).collect();
        all.sort();
        assert_eq!(
            all,
            vec![
                ("a".to_string(), 10, 6, 3),
                ("b".to_string(), 200, 2, 0),
                ("c".to_string(), 150, 5, 2),
            ]
        );
        // "a" went out last, alone: it waited for the end.
        assert!(emitted
            .last()
            .is_some_and(|(_, b)| b.len() == 1 && b[0].0 == "a"));
    }

    #[test]
    fn the_items_left_at_the_end_go_out_in_chunks_at_successive_times() {
        // Every item is held; each key sends two, the second newer.
        let keys = 2 * LAST_CHUNK + 5;
        let out = timely::execute_directly(move |worker| {
            let mut input = InputHandle::new();
            let captured = worker.dataflow(|scope| {
                scope
                    .input_from(&mut input)
                    .newest_per_key_holding(Duration::ZERO, |_: &i64| true)
                    .capture()
            });
            for round in 0..2u64 {
                input.advance_to(3 + round);
                for k in 0..keys {
                    input.send((format!("k{k}"), round as i64, k as u32));
                }
                worker.step();
            }
            input.close();
            while worker.step() {}
            captured.extract()
        });
        let batches: Vec<(u64, Vec<Out>)> =
            out.into_iter().filter(|(_, b)| !b.is_empty()).collect();
        // Three chunks, at the held time and one tick after another.
        let sizes: Vec<(u64, usize)> = batches.iter().map(|(t, b)| (*t, b.len())).collect();
        assert_eq!(sizes, vec![(4, LAST_CHUNK), (5, LAST_CHUNK), (6, 5)]);
        // Each key once, with its newest item, stamped no earlier than its chunk's time.
        let mut seen = HashMap::new();
        for (time, batch) in &batches {
            for (key, ts, value, stamp) in batch {
                assert_eq!(*ts, 1, "{key}");
                assert!(stamp >= time, "{key} stamped {stamp} in a chunk at {time}");
                assert!(seen.insert(key.clone(), *value).is_none(), "{key} twice");
            }
        }
        assert_eq!(seen.len(), keys);
        assert!(seen.iter().all(|(key, value)| *key == format!("k{value}")));
    }

    #[test]
    fn an_older_or_equal_item_never_replaces_the_newest() {
        let out = emitted(
            Duration::ZERO,
            vec![
                (0, "a", 10, 1),
                (1, "a", 5, 2),
                (2, "a", 10, 3),
                (3, "a", 11, 4),
            ],
        );
        assert_eq!(
            out,
            vec![("a".to_string(), 10, 1, 0), ("a".to_string(), 11, 4, 3)]
        );
    }

    #[test]
    fn a_newer_item_is_never_stamped_before_the_one_it_replaces() {
        // Two inputs stand for two workers with unrelated watermarks: "a" at event time 20
        // arrives at time 5, then "a" at event time 30 arrives at time 2.
        let out = timely::execute_directly(|worker| {
            use timely::dataflow::operators::Concat;
            let (mut ahead, mut behind) = (InputHandle::new(), InputHandle::new());
            let (probe, captured) = worker.dataflow(|scope| {
                let out = scope
                    .input_from(&mut ahead)
                    .concat(scope.input_from(&mut behind))
                    .newest_per_key(Duration::ZERO);
                let (probe, out) = out.probe();
                (probe, out.capture())
            });
            ahead.advance_to(5);
            ahead.send(("a".to_string(), 20i64, 1u32));
            ahead.flush();
            behind.advance_to(2);
            worker.step_while(|| probe.less_than(&2));
            // Single-threaded, so a few steps surely deliver the first item before the second.
            for _ in 0..10 {
                worker.step();
            }
            behind.send(("a".to_string(), 30, 2));
            drop((ahead, behind));
            while worker.step() {}
            captured.extract()
        });
        let mut emitted: Vec<_> = out.into_iter().flat_map(|(_, batch)| batch).collect();
        emitted.sort();
        assert_eq!(
            emitted,
            vec![("a".to_string(), 20, 1, 5), ("a".to_string(), 30, 2, 5)]
        );
    }

    #[test]
    fn each_key_keeps_its_own_newest() {
        let out = run(
            Duration::ZERO,
            vec![
                (0, "a", 10, 1),
                (0, "b", 3, 2),
                (1, "b", 2, 3),
                (1, "a", 12, 4),
            ],
        );
        assert_eq!(
            out,
            vec![
                (0, vec![("a".into(), 10, 1, 0), ("b".into(), 3, 2, 0)]),
                (1, vec![("a".into(), 12, 4, 1)]),
            ]
        );
    }

    #[test]
    fn within_an_interval_only_the_newest_item_is_emitted_when_the_input_ends() {
        let out = emitted(
            Duration::from_secs(3600),
            vec![
                (0, "a", 10, 1),
                (1, "a", 12, 2),
                (2, "a", 11, 3),
                (3, "a", 13, 4),
            ],
        );
        // The first at once, then one more for the rest of the interval: the newest, stamped
        // with its own arrival.
        assert_eq!(
            out,
            vec![("a".to_string(), 10, 1, 0), ("a".to_string(), 13, 4, 3)]
        );
    }

    #[test]
    fn a_waiting_item_holds_the_frontier_until_its_keys_interval_ends() {
        let interval = Duration::from_millis(300);
        let (first, while_waiting, after) = timely::execute_directly(move |worker| {
            let mut input = InputHandle::new();
            let (probe, captured) = worker.dataflow(|scope| {
                let (probe, out) = scope
                    .input_from(&mut input)
                    .newest_per_key(interval)
                    .probe();
                (probe, out.capture())
            });
            let emitted = |captured: &std::sync::mpsc::Receiver<_>| {
                let mut items = Vec::new();
                while let Ok(timely::dataflow::operators::capture::Event::Messages(_, batch)) =
                    captured.try_recv()
                {
                    items.extend::<Vec<Out>>(batch);
                }
                items
            };
            input.send(("a".to_string(), 10i64, 1u32));
            input.advance_to(1);
            worker.step_while(|| probe.less_than(&1));
            let first = emitted(&captured);
            input.send(("a".to_string(), 11, 2));
            input.advance_to(5);
            // Single-threaded, so a few steps surely deliver the item; it waits for "a"'s
            // interval and holds the output at its arrival time.
            for _ in 0..10 {
                worker.step();
            }
            let while_waiting = (emitted(&captured), probe.less_than(&2));
            // The interval ends while the input is still open.
            worker.step_while(|| probe.less_than(&5));
            let after = emitted(&captured);
            (first, while_waiting, after)
        });
        assert_eq!(
            first,
            vec![("a".to_string(), 10, 1, 0)],
            "the first at once"
        );
        assert_eq!(while_waiting, (vec![], true));
        assert_eq!(after, vec![("a".to_string(), 11, 2, 1)]);
    }
}
