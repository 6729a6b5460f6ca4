//! A spawned `hourglass` job: its exit, its signals, the addresses it announces, and random
//! points to kill it at.

use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::services::BROKER;

/// `produce FILE --brokers BROKER --topic TOPIC --partitions PARTITIONS PACE…`: the arguments
/// that publish `file` to a new topic of [`BROKER`].
///
/// # Panics
/// When `file` is not UTF-8.
pub fn produce_args<'a>(
    file: &'a Path,
    topic: &'a str,
    partitions: &'a str,
    pace: &[&'a str],
) -> Vec<&'a str> {
    let mut args = vec![
        "produce",
        file.to_str().expect("utf-8 path"),
        "--brokers",
        BROKER,
        "--topic",
        topic,
        "--partitions",
        partitions,
    ];
    args.extend_from_slice(pace);
    args
}

/// Waits for `child` and returns its stderr.
///
/// # Panics
/// When it fails, with `what` and its stderr.
pub fn wait_ok(child: Child, what: &str) -> String {
    let out = child.wait_with_output().expect("waiting for hourglass");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{stderr}",
        out.status
    );
    stderr
}

/// Sends SIGTERM to `child`.
///
/// # Panics
/// When `kill -TERM` fails.
pub fn sigterm(child: &Child) {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("running kill");
    assert!(status.success(), "kill -TERM failed");
}

/// Waits for the job's `metrics: http://ADDR/metrics` line on stderr and returns ADDR; keeps
/// draining its stderr into the returned log (for failure messages) in the background.
///
/// # Panics
/// As [`announced_address`].
pub fn metrics_address(job: &mut Child) -> (String, Arc<Mutex<String>>) {
    announced_address(job, "metrics: http://", "/metrics")
}

/// Waits for the job's `{prefix}ADDR{suffix}` line on stderr and returns ADDR; keeps draining
/// its stderr into the returned log (for failure messages) in the background.
///
/// # Panics
/// When `job`'s stderr is not piped, or no such line comes within 3 minutes (a liveness bound
/// for a hung job, not a speed claim).
pub fn announced_address(
    job: &mut Child,
    prefix: &'static str,
    suffix: &'static str,
) -> (String, Arc<Mutex<String>>) {
    let stderr = job.stderr.take().expect("piped stderr");
    let log = Arc::new(Mutex::new(String::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    let sink = log.clone();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if let Some(addr) = line
                .strip_prefix(prefix)
                .and_then(|rest| rest.strip_suffix(suffix))
            {
                let _ = tx.send(addr.to_string());
            }
            let mut log = sink.lock().expect("log lock");
            log.push_str(&line);
            log.push('\n');
        }
    });
    let addr = rx
        .recv_timeout(Duration::from_secs(180))
        .unwrap_or_else(|_| {
            panic!(
                "no {prefix}… line within 3 minutes:\n{}",
                log.lock().expect("log lock")
            )
        });
    (addr, log)
}

/// A small xorshift generator: random kill points, reproducible from the printed seed.
#[derive(Debug)]
pub struct Rng(u64);

impl Rng {
    /// Seeded by the clock, the seed printed on stderr.
    pub fn from_clock() -> Self {
        let seed = clock_seed();
        eprintln!("kill points seed: {seed}");
        Rng(seed)
    }

    /// Seeded by `seed` (a clock seed printed by an earlier run, to repeat its points).
    pub fn from_seed(seed: u64) -> Self {
        Rng(seed)
    }

    /// A duration from `from` to `to` (excluded) milliseconds.
    pub fn millis(&mut self, from: u64, to: u64) -> Duration {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        Duration::from_millis(from + self.0 % (to - from))
    }
}

/// A seed from the clock: odd, so never the generator's fixed point 0.
pub fn clock_seed() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos() as u64
        | 1
}
