//! Publishing at a steady rate on the wall clock, the first part unsampled.

use std::time::{Duration, Instant};

use super::{JobChild, Publisher};
use crate::Result;

/// How fast and how long a bench publishes.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    /// Records per second.
    pub rate: f64,
    /// Published before sampling starts (the job connects, its caches warm).
    pub warmup: Duration,
    /// Published, and sampled, after the warm-up.
    pub duration: Duration,
}

/// What [`publish_paced`] published.
#[derive(Debug, Clone, Copy)]
pub struct Published {
    /// Records sent.
    pub sent: u64,
    /// Seconds from the first send to the last.
    pub publish_s: f64,
    /// Records sent after the warm-up.
    pub in_window: u64,
    /// Sends more than 100 ms behind their due time (the bench's own machine was short of CPU).
    pub late_sends: u64,
}

/// Calls `one(publisher, n, at_ms, sampled)` for the `n`-th record when it falls due at
/// `schedule.rate`, `at_ms` its wall clock ([`super::wall_ms`]), `sampled` once the warm-up is
/// over; `one` publishes it. Checks now and then that `job` still runs. Returns once
/// `warmup + duration` have passed (the records are not flushed yet).
///
/// # Errors
/// What `one` returns, and the job exiting.
pub fn publish_paced<E: From<crate::Error>>(
    publisher: &mut Publisher,
    schedule: Schedule,
    job: &mut JobChild,
    mut one: impl FnMut(&mut Publisher, u64, i64, bool) -> Result<(), E>,
) -> Result<Published, E> {
    let start = Instant::now();
    let sampled_from = start + schedule.warmup;
    let end = sampled_from + schedule.duration;
    let (mut n, mut in_window, mut late_sends) = (0u64, 0u64, 0u64);
    while Instant::now() < end {
        let due = start + Duration::from_secs_f64(n as f64 / schedule.rate);
        let now = Instant::now();
        if due > now {
            // A sleep, not `producer.poll(due - now)`: the producer's poll spins through the
            // last part of a millisecond, and the records are due every 100 µs, so the loop
            // took a core (70 CPU s in a 100 s run) that the job and the store needed. Records
            // falling due during the millisecond go out together.
            publisher.poll();
            std::thread::sleep((due - now).max(Duration::from_millis(1)));
            continue;
        }
        if now - due > Duration::from_millis(100) {
            late_sends += 1;
        }
        let sampled = now >= sampled_from;
        one(publisher, n, super::wall_ms(), sampled)?;
        in_window += u64::from(sampled);
        n += 1;
        if n.is_multiple_of(8192) {
            job.check_running()?;
        }
    }
    Ok(Published {
        sent: n,
        publish_s: start.elapsed().as_secs_f64(),
        in_window,
        late_sends,
    })
}
