//! Gets that several threads make at the same time, sent as one `getMultiple`.
//!
//! A Get through the gateway costs a gateway request and a region server request whatever its
//! size, and under many concurrent readers those requests, not the rows, are the work. So a Get
//! joins a queue: if fewer than [`MAX_CALLS`] calls of the queue are being made, its caller
//! takes the whole queue and makes it, one `get` for one row or one multi-get for more
//! ([`HbaseStore::get_rows`]); otherwise it waits, and the Gets that queued meanwhile go out
//! together once a call ends.
//! A lone Get is sent at once, as before, so a quiet reader waits for nothing. A failed call
//! leaves each of its callers to make its own Get, so errors and retries stay each caller's.

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
}

impl Waiter {
    fn answer(&self) -> Option<Option<Option<Row>>> {
        self.answer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    fn set(&self, answer: Option<Option<Row>>) {
        *self.answer.lock().unwrap_or_else(PoisonError::into_inner) = Some(answer);
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

impl Coalescer {
    /// The row `row` of `table` (one version, cells within `time`), read with the Gets other
    /// threads ask for meanwhile.
    ///
    /// # Errors
    /// As [`HbaseStore::get_row`].
    pub(crate) fn get(
        &self,
        store: &HbaseStore,
        table: &str,
        row: &[u8],
        time: Option<TimeRange>,
    ) -> Result<Option<Row>> {
        let me = Arc::new(Waiter {
            table: table.to_string(),
            row: row.to_vec(),
            time,
            answer: Mutex::new(None),
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
                    None => store.get_row_now(table, row, time, 1),
                };
            }
            // A caller whose Get another took waits for that call.
            let queued = state.queue.iter().any(|w| Arc::ptr_eq(w, &me));
            if queued && state.calling < MAX_CALLS {
                state.calling += 1;
                let taken = std::mem::take(&mut state.queue);
                drop(state);
                // Alone: the Get is made as it was asked, its error its own.
                let alone = (taken.len() == 1).then(|| store.get_row_now(table, row, time, 1));
                if alone.is_none() {
                    call(store, &taken);
                }
                state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
                state.calling -= 1;
                self.ended.notify_all();
                if let Some(result) = alone {
                    return result;
                }
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
fn call(store: &HbaseStore, taken: &[Arc<Waiter>]) {
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
            w.set(store.get_row_now(table, &w.row, time, 1).ok());
            continue;
        }
        let keys: Vec<Vec<u8>> = group.iter().map(|&i| taken[i].row.clone()).collect();
        match store.get_rows(table, &keys, time) {
            Ok(rows) => {
                for (&i, row) in group.iter().zip(rows) {
                    taken[i].set(Some(row));
                }
            }
            Err(_) => group.iter().for_each(|&i| taken[i].set(None)),
        }
    }
}
