//! "Now" for the sources' checks against the wall clock.

use std::time::Instant;

/// "Now" for the checks against the wall clock: [`crate::time::now_ms`] (so `HOURGLASS_NOW`
/// applies) read once, then advanced by a monotonic clock, so a reading costs no environment
/// lookup.
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    base_ms: i64,
    start: Instant,
}

impl Clock {
    /// Starts from [`crate::time::now_ms`].
    pub fn start() -> Self {
        Clock {
            base_ms: crate::time::now_ms(),
            start: Instant::now(),
        }
    }

    /// Starts from `secs` (epoch seconds) whatever the real time: the clock of tests that run a
    /// job in-process on recorded hours.
    pub fn at(secs: i64) -> Self {
        Clock {
            base_ms: secs.saturating_mul(1000),
            start: Instant::now(),
        }
    }

    /// Now, epoch seconds.
    pub fn now_secs(&self) -> i64 {
        let elapsed = i64::try_from(self.start.elapsed().as_millis()).unwrap_or(i64::MAX);
        self.base_ms.saturating_add(elapsed) / 1000
    }
}
