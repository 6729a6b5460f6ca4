//! A progress bar on stderr for long runs (hidden when stderr is not a terminal).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::stats::Stats;
use indicatif::{ProgressBar, ProgressStyle};

/// Draws the bar from the job's counters until dropped.
pub struct Progress {
    done: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Progress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Progress").finish_non_exhaustive()
    }
}

impl Progress {
    /// Starts drawing; `total_bytes` is the input size when known.
    pub fn start(stats: Arc<Stats>, total_bytes: Option<u64>) -> Self {
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        let thread = std::thread::spawn(move || {
            let bar = match total_bytes {
                Some(total) => ProgressBar::new(total).with_style(
                    ProgressStyle::with_template(
                        "{spinner} [{elapsed_precise}] {wide_bar} {bytes}/{total_bytes} eta {eta} {msg}",
                    )
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
                ),
                None => ProgressBar::new_spinner(),
            };
            let mut last = 0u64;
            while !flag.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(200));
                let read = stats.read.load(Ordering::Relaxed);
                bar.set_position(stats.bytes.load(Ordering::Relaxed));
                let late = stats.late_dropped.load(Ordering::Relaxed);
                bar.set_message(format!(
                    "{read} records, {} rejected, {}{}/s",
                    stats.rejected.load(Ordering::Relaxed),
                    if late > 0 {
                        format!("{late} late, ")
                    } else {
                        String::new()
                    },
                    (read - last) * 5
                ));
                last = read;
            }
            bar.finish_and_clear();
        });
        Progress {
            done,
            thread: Some(thread),
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
