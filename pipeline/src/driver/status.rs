//! `hourglass run`'s status line, and the partition offsets behind it.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::source::kafka::{self, KafkaShared};
use crate::stats::Stats;
use rdkafka::consumer::BaseConsumer;

/// Refreshes the partitions' offsets every second (the feeds' idle test needs them) and prints
/// a status line every `every`, until dropped.
pub struct KafkaStatus {
    done: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for KafkaStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaStatus").finish_non_exhaustive()
    }
}

impl KafkaStatus {
    /// Starts the thread; `consumer` is its own (not a worker's). `process` names a cluster's
    /// process in each line (`[status process 1]`): each process prints its own workers'.
    pub fn start(
        process: Option<String>,
        every: Duration,
        consumer: BaseConsumer,
        topic: String,
        partitions: usize,
        shared: Arc<KafkaShared>,
        stats: Arc<Stats>,
    ) -> Self {
        let done = Arc::new((Mutex::new(false), Condvar::new()));
        let flag = done.clone();
        let tick = Duration::from_secs(1);
        let tag = process.map_or_else(|| "status".to_string(), |p| format!("status {p}"));
        let thread = std::thread::spawn(move || {
            let mut last_read = 0;
            let mut last_at = Instant::now();
            let mut refresh_failed = false;
            let mut new_partitions = NewPartitions::new(partitions);
            loop {
                new_partitions.check(&consumer, &topic);
                if let Err(e) = shared.refresh_offsets(&consumer, &topic, tick) {
                    if !refresh_failed {
                        tracing::warn!(error = %e, "cannot read partition offsets (retrying)");
                    }
                    refresh_failed = true;
                } else {
                    refresh_failed = false;
                }
                let (lock, cv) = &*flag;
                let Ok(guard) = lock.lock() else { return };
                let Ok((guard, _)) = cv.wait_timeout_while(guard, tick, |stop| !*stop) else {
                    return;
                };
                if *guard {
                    return;
                }
                drop(guard);
                if last_at.elapsed() < every {
                    continue;
                }
                let read = stats.read.load(Ordering::Relaxed);
                let per_s = (read - last_read) as f64 / last_at.elapsed().as_secs_f64();
                (last_read, last_at) = (read, Instant::now());
                let lag = shared.lag();
                let now = chrono::Utc::now().timestamp();
                let watermark = shared.watermark();
                let delay = watermark.map(|w| now - w as i64);
                let rejected = stats.rejected.load(Ordering::Relaxed);
                let late = stats.late_dropped.load(Ordering::Relaxed);
                let (_, q) = shared.delays.quantiles(&[0.5, 0.99]);
                tracing::info!(
                    records_per_s = per_s,
                    lag = ?lag,
                    watermark = ?watermark,
                    watermark_delay_s = ?delay,
                    rejected,
                    late,
                    delay_p50_ms = ?q[0],
                    delay_p99_ms = ?q[1],
                    "status"
                );
                eprintln!(
                    "[{tag}] {per_s:.0} records/s, lag {}, watermark {} ({} behind wall clock), \
                     {rejected} rejected, {late} late",
                    lag.map_or_else(|| "unknown".to_string(), |l| l.to_string()),
                    watermark
                        .map_or_else(|| "-".to_string(), |w| crate::time::format_time(w as i64)),
                    delay.map_or_else(|| "-".to_string(), format_secs),
                );
            }
        });
        KafkaStatus {
            done,
            thread: Some(thread),
        }
    }
}

/// How often the job looks for partitions added to its topic while it runs.
const PARTITION_CHECK_EVERY: Duration = Duration::from_secs(10);

/// Notices partitions added to the topic while the job runs. The workers read the partitions
/// the topic had at start, so the new ones wait in Kafka (from their first offset, nothing is
/// lost) until a restart: the job says so, once per new count.
struct NewPartitions {
    read: usize,
    reported: usize,
    last_check: Instant,
}

impl NewPartitions {
    fn new(read: usize) -> Self {
        NewPartitions {
            read,
            reported: read,
            last_check: Instant::now(),
        }
    }

    fn check(&mut self, consumer: &BaseConsumer, topic: &str) {
        if self.last_check.elapsed() < PARTITION_CHECK_EVERY {
            return;
        }
        self.last_check = Instant::now();
        let Ok(now) = kafka::partition_count(consumer, topic, Duration::from_secs(5)) else {
            return;
        };
        if now > self.reported {
            self.reported = now;
            tracing::warn!(
                topic,
                partitions = now,
                read = self.read,
                "partitions were added to the topic; restart the job to read them"
            );
            eprintln!(
                "warning: topic {topic} now has {now} partitions, this job reads the {} it had at \
                 start: restart it to read the others (their records wait in Kafka; nothing is \
                 lost)",
                self.read
            );
        }
    }
}

impl Drop for KafkaStatus {
    fn drop(&mut self) {
        let (lock, cv) = &*self.done;
        if let Ok(mut stop) = lock.lock() {
            *stop = true;
        }
        cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn format_secs(s: i64) -> String {
    let a = s.unsigned_abs();
    let sign = if s < 0 { "-" } else { "" };
    match a {
        0..=119 => format!("{sign}{a}s"),
        120..=7199 => format!("{sign}{}m{:02}s", a / 60, a % 60),
        _ => format!("{sign}{}h{:02}m", a / 3600, a % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_read_well() {
        assert_eq!(format_secs(42), "42s");
        assert_eq!(format_secs(600), "10m00s");
        assert_eq!(format_secs(90_000), "25h00m");
    }
}
