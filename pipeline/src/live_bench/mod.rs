//! Measuring a live job from outside it, as `hourglass bench live` and `hourglass profile
//! bench-live` do: a paced Kafka producer, the job as a child process, polls of its HTTP API
//! until sampled records are visible, and the figures (delay percentiles, CPU, load).
//!
//! Every delay counts from the producer's `send` (the wall clock, [`wall_ms`]) to the first
//! answer that shows the record, so it holds the brokers, the job's consumption, its flushes
//! and the read path, as a client sees them.

mod child;
mod flags;
mod pace;
mod probe;
mod producer;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

pub use child::{finish_job, terminate, JobChild};
pub use flags::BenchFlags;
pub use pace::{publish_paced, Published, Schedule};
pub use probe::{get, get_json, poll_interval, poll_samples, Polled, Produced, GIVE_UP};
pub use producer::{create_topic, flush_all, send, Deliveries, Publisher};

/// Wall clock, epoch milliseconds: the Kafka record timestamp and the jobs' delay histograms
/// use the same (unlike [`crate::time::now_ms`], never shifted by `HOURGLASS_NOW`).
pub fn wall_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// CPU seconds (user + system) a live process has used, from `/proc/PID/stat` (Linux; clock
/// ticks taken as 100 per second, the kernel's `USER_HZ`); `None` once it has exited.
pub fn cpu_secs(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which may hold spaces, end with ')'.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i)?.parse::<f64>().ok();
    Some((ticks(11)? + ticks(12)?) / 100.0)
}

/// The 1-minute load average (`/proc/loadavg`; `None` where there is none).
pub fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// p50/p90/p99/max of delays in ms (nearest rank), and how many: `{"n", "p50_ms", "p90_ms",
/// "p99_ms", "max_ms"}`, the percentiles `null` when there is none.
pub fn distribution(mut ms: Vec<i64>) -> serde_json::Value {
    ms.sort_unstable();
    let at = |q: f64| {
        (!ms.is_empty()).then(|| ms[((ms.len() as f64 * q).ceil() as usize).clamp(1, ms.len()) - 1])
    };
    serde_json::json!({
        "n": ms.len(), "p50_ms": at(0.5), "p90_ms": at(0.9), "p99_ms": at(0.99), "max_ms": at(1.0),
    })
}

/// The load average read once a second on a thread of its own, from [`LoadSampler::start`]
/// to [`LoadSampler::finish`].
#[derive(Debug)]
pub struct LoadSampler {
    loads: Arc<Mutex<Vec<f64>>>,
    stop: Arc<AtomicBool>,
    thread: JoinHandle<()>,
}

impl LoadSampler {
    /// Starts sampling.
    pub fn start() -> Self {
        let loads = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (loads, stop) = (loads.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if let (Some(l), Ok(mut v)) = (load_average(), loads.lock()) {
                        v.push(l);
                    }
                    std::thread::sleep(Duration::from_secs(1));
                }
            })
        };
        LoadSampler {
            loads,
            stop,
            thread,
        }
    }

    /// Stops sampling: `{"min", "max", "mean"}` of what was read (`null`s if nothing was).
    pub fn finish(self) -> serde_json::Value {
        self.stop.store(true, Ordering::Relaxed);
        let _ = self.thread.join();
        let loads = self.loads.lock().map(|v| v.clone()).unwrap_or_default();
        serde_json::json!({
            "min": loads.iter().copied().reduce(f64::min),
            "max": loads.iter().copied().reduce(f64::max),
            "mean": (!loads.is_empty()).then(|| loads.iter().sum::<f64>() / loads.len() as f64),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distribution_takes_nearest_ranks() {
        let d = distribution((1..=100).rev().collect());
        assert_eq!(d["n"], 100);
        assert_eq!(d["p50_ms"], 50);
        assert_eq!(d["p90_ms"], 90);
        assert_eq!(d["p99_ms"], 99);
        assert_eq!(d["max_ms"], 100);
        assert_eq!(distribution(vec![])["p50_ms"], serde_json::Value::Null);
    }

    #[test]
    fn a_sample_is_polled_less_often_as_it_ages() {
        let every = Duration::from_millis(20);
        // Young samples at the base interval: the delays that meet the targets are exact to it.
        assert_eq!(poll_interval(every, 0), every);
        assert_eq!(poll_interval(every, 1_000), every);
        // Then at a fiftieth of the age: 2 % of the delay.
        assert_eq!(poll_interval(every, 15_000), Duration::from_millis(300));
        assert_eq!(
            poll_interval(Duration::from_millis(100), 11_000),
            Duration::from_millis(220)
        );
        // A clock step back never makes it poll faster than the base interval.
        assert_eq!(poll_interval(every, -5_000), every);
    }

    #[test]
    fn this_process_has_used_cpu() {
        assert!(cpu_secs(std::process::id()).is_some_and(|s| s >= 0.0));
    }
}
