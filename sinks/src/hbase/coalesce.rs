//! Gets that several threads make at the same time, sent as one `getMultiple`.
//!
//! A Get through the gateway costs a gateway request and a region server request whatever its
//! size, and under many concurrent readers those requests, not the rows, are the work. So a Get
//! joins a queue: if fewer than [`MAX_CALLS`] calls of the queue are being made, its caller
//! takes the whole queue and makes it, one `get` for one row or one multi-get for more
//! ([`HbaseStore::get_rows`]); otherwise it waits, and the Gets that queued meanwhile go out
//! together once a call ends.
//! A lone Get is sent at once, as before, so a quiet reader waits for nothing. A failed call
//! leaves each of its callers to make its own Get, so errors and retries stay each caller's; so
//! does a call that panics (its caller's thread unwinds, the others go on).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};

use super::store::HbaseStore;
use super::Result;
use crate::table::{Row, TimeRange};

/// One queued Get and, once the call that took it ended, its answer.
struct Waiter {
    table: String,
    row: Vec<u8>,
    time: Option<TimeRange>,
    /// `None` while waiting; `Some(None)` when the call failed (the caller Gets it itself).
    answer: Mutex<Option<Option<Option<Row>>>>,
    /// Answered (and perhaps already taken by its caller), or made alone by its own caller.
    done: AtomicBool,
}

impl Waiter {
    fn answer(&self) -> Option<Option<Option<Row>>> {
        self.answer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    fn set(&self, answer: Option<Option<Row>>) {
        let mut slot = self.answer.lock().unwrap_or_else(PoisonError::into_inner);
        *slot = Some(answer);
        self.done.store(true, Ordering::Relaxed);
    }
}

/// Calls of the queue made at once: more readers than this share calls.
pub(crate) const MAX_CALLS: usize = 4;

#[derive(Default)]
struct State {
    /// Callers making the calls of a queue they took.
    calling: usize,
    queue: Vec<Arc<Waiter>>,
}

/// The queue of a reader's one-version Gets.
#[derive(Default)]
pub(crate) struct Coalescer {
    state: Mutex<State>,
    ended: Condvar,
}

impl std::fmt::Debug for Coalescer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coalescer").finish_non_exhaustive()
    }
}

/// The two calls a queue is made of: one row's Get, and a multi-get of rows of one table and
/// time range (answers in the order of the keys).
pub(crate) trait Calls {
    fn one(&self, table: &str, row: &[u8], time: Option<TimeRange>) -> Result<Option<Row>>;
    fn many(
        &self,
        table: &str,
        rows: &[Vec<u8>],
        time: Option<TimeRange>,
    ) -> Result<Vec<Option<Row>>>;
}

impl Calls for HbaseStore {
    fn one(&self, table: &str, row: &[u8], time: Option<TimeRange>) -> Result<Option<Row>> {
        self.get_row_now(table, row, time, 1)
    }

    fn many(
        &self,
        table: &str,
        rows: &[Vec<u8>],
        time: Option<TimeRange>,
    ) -> Result<Vec<Option<Row>>> {
        self.get_rows(table, rows, time)
    }
}

/// A caller's turn at making a queue's calls. Dropped, even by a panic in a call, it gives the
/// turn back and wakes the waiters, and leaves every Get of the queue still unanswered to its
/// own caller, so that no waiter waits for a call that will not end.
struct Turn<'a> {
    coalescer: &'a Coalescer,
    taken: Vec<Arc<Waiter>>,
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        for w in &self.taken {
            let mut answer = w.answer.lock().unwrap_or_else(PoisonError::into_inner);
            if answer.is_none() && !w.done.load(Ordering::Relaxed) {
                *answer = Some(None);
            }
        }
        let mut state = self
            .coalescer
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        state.calling -= 1;
        self.coalescer.ended.notify_all();
    }
}

impl Coalescer {
    /// The row `row` of `table` (one version, cells within `time`), read with the Gets other
    /// threads ask for meanwhile.
    ///
    /// # Errors
    /// As [`HbaseStore::get_row`].
    pub(crate) fn get(
        &self,
        calls: &impl Calls,
        table: &str,
        row: &[u8],
        time: Option<TimeRange>,
    ) -> Result<Option<Row>> {
        let me = Arc::new(Waiter {
            table: table.to_string(),
            row: row.to_vec(),
            time,
            answer: Mutex::new(None),
            done: AtomicBool::new(false),
        });
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.queue.push(Arc::clone(&me));
        loop {
            // Answers are set before the caller that made the call takes the lock to say it
            // ended, so a waiter that checks under the lock misses no wake-up.
            if let Some(answer) = me.answer() {
                drop(state);
                return match answer {
                    Some(row) => Ok(row),
                    None => calls.one(table, row, time),
                };
            }
            // A caller whose Get another took waits for that call.
            let queued = state.queue.iter().any(|w| Arc::ptr_eq(w, &me));
            if queued && state.calling < MAX_CALLS {
                state.calling += 1;
                let turn = Turn {
                    coalescer: self,
                    taken: std::mem::take(&mut state.queue),
                };
                drop(state);
                if turn.taken.len() == 1 {
                    // Alone: the Get is made as it was asked, its error its own.
                    me.done.store(true, Ordering::Relaxed);
                    let result = calls.one(table, row, time);
                    drop(turn);
                    return result;
                }
                call(calls, &turn.taken);
                drop(turn);
                state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            state = self
                .ended
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }
}

/// Makes the calls of `taken`: per table and time range, one `get` for one row, one multi-get
/// for more; answers each waiter.
fn call(calls: &impl Calls, taken: &[Arc<Waiter>]) {
    let mut done = vec![false; taken.len()];
    for first in 0..taken.len() {
        if done[first] {
            continue;
        }
        let (table, time) = (&taken[first].table, taken[first].time);
        let group: Vec<usize> = (first..taken.len())
            .filter(|&i| !done[i] && taken[i].table == *table && taken[i].time == time)
            .collect();
        for &i in &group {
            done[i] = true;
        }
        if let [one] = group[..] {
            let w = &taken[one];
            w.set(calls.one(table, &w.row, time).ok());
            continue;
        }
        let keys: Vec<Vec<u8>> = group.iter().map(|&i| taken[i].row.clone()).collect();
        match calls.many(table, &keys, time) {
            Ok(rows) => {
                for (&i, row) in group.iter().zip(rows) {
                    taken[i].set(Some(row));
                }
            }
            Err(_) => group.iter().for_each(|&i| taken[i].set(None)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;
    use std::sync::mpsc;
    use std::thread;

    use super::*;
    use crate::table::Cell;

    /// Calls whose single Gets of rows named `hold…` wait to be let go, and whose multi-gets
    /// panic (or answer, once `panics` is spent).
    struct Scripted {
        holding: AtomicUsize,
        release: Mutex<mpsc::Receiver<()>>,
        panics: AtomicUsize,
        many_calls: AtomicUsize,
    }

    fn row(key: &[u8]) -> Row {
        Row {
            key: key.to_vec(),
            cells: vec![Cell {
                family: "f".into(),
                qualifier: b"q".to_vec(),
                ts_ms: 1,
                value: key.to_vec(),
            }],
        }
    }

    impl Calls for Scripted {
        fn one(&self, _: &str, key: &[u8], _: Option<TimeRange>) -> Result<Option<Row>> {
            if key.starts_with(b"hold") {
                self.holding.fetch_add(1, Ordering::SeqCst);
                let release = self.release.lock().unwrap();
                release.recv().unwrap();
            }
            Ok(Some(row(key)))
        }

        fn many(
            &self,
            _: &str,
            keys: &[Vec<u8>],
            _: Option<TimeRange>,
        ) -> Result<Vec<Option<Row>>> {
            self.many_calls.fetch_add(1, Ordering::SeqCst);
            if self
                .panics
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
            {
                panic!("a multi-get that panics");
            }
            Ok(keys.iter().map(|k| Some(row(k))).collect())
        }
    }

    fn wait_for(what: impl Fn() -> bool) {
        while !what() {
            thread::yield_now();
        }
    }

    /// Fills every turn with a held single Get, queues `waiting` Gets behind them, then lets the
    /// held Gets go one by one; returns each queued Get's outcome (`None`: its thread panicked).
    fn queued_behind_full_turns(panics: usize, waiting: usize) -> (Vec<Option<Row>>, usize) {
        let (tx, rx) = mpsc::channel();
        let calls = Arc::new(Scripted {
            holding: AtomicUsize::new(0),
            release: Mutex::new(rx),
            panics: AtomicUsize::new(panics),
            many_calls: AtomicUsize::new(0),
        });
        let co = Arc::new(Coalescer::default());
        let get = |key: Vec<u8>| {
            let (co, calls) = (Arc::clone(&co), Arc::clone(&calls));
            thread::spawn(move || co.get(&*calls, "t", &key, None).unwrap())
        };
        let mut held = Vec::new();
        for i in 0..MAX_CALLS {
            held.push(get(format!("hold{i}").into_bytes()));
            // One at a time, so each is alone in the queue it takes.
            wait_for(|| calls.holding.load(Ordering::SeqCst) == i + 1);
        }
        let queued: Vec<_> = (0..waiting)
            .map(|i| get(format!("row{i}").into_bytes()))
            .collect();
        wait_for(|| co.state.lock().unwrap().queue.len() == waiting);
        for _ in 0..MAX_CALLS {
            tx.send(()).unwrap();
        }
        for h in held {
            assert!(h.join().unwrap().is_some());
        }
        let answers = queued
            .into_iter()
            .map(|h| h.join().ok().flatten())
            .collect();
        (answers, calls.many_calls.load(Ordering::SeqCst))
    }

    #[test]
    fn gets_queued_behind_busy_turns_go_out_as_one_multi_get() {
        let (answers, many) = queued_behind_full_turns(0, 3);
        assert_eq!(many, 1, "the three queued Gets are one multi-get");
        for (i, a) in answers.iter().enumerate() {
            assert_eq!(a.as_ref().unwrap().key, format!("row{i}").into_bytes());
        }
    }

    #[test]
    fn a_call_that_panics_leaves_the_other_waiters_to_get_their_rows_themselves() {
        let (answers, many) = queued_behind_full_turns(1, 3);
        assert_eq!(many, 1);
        // The thread that made the multi-get unwound; the other two got their rows.
        assert_eq!(answers.iter().filter(|a| a.is_none()).count(), 1);
        for (i, a) in answers.iter().enumerate() {
            if let Some(r) = a {
                assert_eq!(r.key, format!("row{i}").into_bytes());
            }
        }
    }
}
