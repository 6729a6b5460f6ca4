//! Asking the child job's dashboard API whether sampled readings are visible yet.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::Result;
use pipeline::Context;

/// A sample not visible after this long is counted as missing.
pub(super) const GIVE_UP: Duration = Duration::from_secs(60);

/// Wall clock, epoch milliseconds: the Kafka record timestamp and the job's delay histogram
/// use the same.
pub(super) fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

/// One GET of `path` on `addr`; the body parsed as JSON.
pub(super) fn get_json(addr: &str, path: &str) -> Result<serde_json::Value> {
    let mut s = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )?;
    let mut text = Vec::new();
    s.read_to_end(&mut text)?;
    let text = String::from_utf8_lossy(&text);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .context("malformed HTTP answer")?;
    if !head.starts_with("HTTP/1.1 200") {
        bail!("GET {path}: {head}");
    }
    Ok(serde_json::from_str(body)?)
}

/// A reading whose visibility is polled.
#[derive(Debug, Clone)]
pub(super) struct Sample {
    pub(super) device: String,
    pub(super) ts: i64,
    pub(super) produced_ms: i64,
}

/// How long a sample waits before its next poll: `every`, or a fiftieth of its age once that is
/// longer. A delay is then measured to within `every` or 2 %, and a job that falls behind is not
/// buried under more polls: at a fixed interval, 4 samples a second of readings 15 s late make
/// 750 narrow requests a second, each a read of the store, which push the job further behind.
pub(super) fn poll_interval(every: Duration, age_ms: i64) -> Duration {
    every.max(Duration::from_millis(
        u64::try_from(age_ms / 50).unwrap_or(0),
    ))
}

/// Polls `check` for each sample from `rx` (every `every`, then less often as it ages: see
/// [`poll_interval`]) until it says visible; returns the delays (ms), the samples given up on
/// and the polls that failed.
pub(super) fn poll_samples(
    addr: &str,
    rx: mpsc::Receiver<Sample>,
    every: Duration,
    check: impl Fn(&str, &Sample) -> Result<bool>,
) -> (Vec<i64>, u64, u64) {
    // Each sample with the time of its next poll.
    let mut pending: VecDeque<(Sample, Instant)> = VecDeque::new();
    let (mut delays, mut missing, mut errors) = (Vec::new(), 0u64, 0u64);
    let mut closed = false;
    loop {
        loop {
            match rx.try_recv() {
                Ok(s) => pending.push_back((s, Instant::now())),
                Err(mpsc::TryRecvError::Empty) => break,
                Err(mpsc::TryRecvError::Disconnected) => {
                    closed = true;
                    break;
                }
            }
        }
        if closed && pending.is_empty() {
            return (delays, missing, errors);
        }
        let round = Instant::now();
        pending.retain_mut(|(s, due)| {
            if *due > round {
                return true;
            }
            let visible = check(addr, s);
            let age = now_ms() - s.produced_ms;
            let given_up = age > GIVE_UP.as_millis() as i64;
            match visible {
                Ok(true) => {
                    delays.push(age);
                    return false;
                }
                Ok(false) => {}
                Err(e) => {
                    errors += 1;
                    if errors == 1 {
                        eprintln!("bench live: polling the job: {e:#}");
                    }
                }
            }
            // A job that stopped answering must not keep the bench polling forever.
            if given_up {
                missing += 1;
                return false;
            }
            *due = Instant::now() + poll_interval(every, age);
            true
        });
        std::thread::sleep(every.saturating_sub(round.elapsed()));
    }
}

pub(super) fn narrow_visible(addr: &str, s: &Sample) -> Result<bool> {
    let v = get_json(addr, &format!("/api/v1/latest?device={}", s.device))?;
    Ok(v["ts"].as_i64().is_some_and(|ts| ts >= s.ts))
}

pub(super) fn wide_visible(addr: &str, s: &Sample) -> Result<bool> {
    let v = get_json(
        addr,
        &format!("/api/v1/hour?device={}&hour={}", s.device, s.ts),
    )?;
    Ok(v["points"]
        .as_array()
        .is_some_and(|p| p.iter().any(|p| p[0].as_i64() == Some(s.ts))))
}
