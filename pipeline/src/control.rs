//! Stopping a running job: a fatal error anywhere, or a signal, stops every source.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

/// Shared by every worker: sources stop when `stopped()`; the first error is kept for the exit.
#[derive(Debug, Default)]
pub struct JobControl {
    stop: AtomicBool,
    error: Mutex<Option<String>>,
}

impl JobControl {
    /// Asks every source to stop (graceful: open windows still close and flush).
    pub fn request_stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// Records a fatal error (the first one wins) and stops the job.
    pub fn fail(&self, message: String) {
        if let Ok(mut slot) = self.error.lock() {
            slot.get_or_insert(message);
        }
        self.request_stop();
    }

    /// Whether sources should stop.
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// The fatal error, if any.
    pub fn error(&self) -> Option<String> {
        self.error.lock().ok().and_then(|e| e.clone())
    }
}
