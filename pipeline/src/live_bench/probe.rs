//! Asking a child job's HTTP API whether sampled records are visible yet.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::wall_ms;
use crate::{Context, Error, Result};

/// A sample not visible after this long is counted as missing.
pub const GIVE_UP: Duration = Duration::from_secs(60);

/// One GET of `path` on `addr` (a connection of its own): the status code and the body.
///
/// # Errors
/// The connection or the read fails, or the answer is not HTTP.
pub fn get(addr: &str, path: &str) -> Result<(u16, String)> {
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
    let status = head
        .strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
        .with_context(|| format!("GET {path}: no status in {head:?}"))?;
    Ok((status, body.to_string()))
}

/// One GET of `path` on `addr`; the body of a 200 parsed as JSON.
///
/// # Errors
/// As [`get`], and any other status than 200, and a body that is not JSON.
pub fn get_json(addr: &str, path: &str) -> Result<serde_json::Value> {
    let (status, body) = get(addr, path)?;
    if status != 200 {
        return Err(Error::Failed(format!("GET {path}: {status} {body}")));
    }
    serde_json::from_str(&body).with_context(|| format!("GET {path}: the body is not JSON"))
}

/// A record whose visibility is polled: when it was sent.
pub trait Produced {
    /// The producer's `send`, epoch ms ([`wall_ms`]).
    fn produced_ms(&self) -> i64;
}

/// How long a sample waits before its next poll: `every`, or a fiftieth of its age once that is
/// longer. A delay is then measured to within `every` or 2 %, and a job that falls behind is not
/// buried under more polls: at a fixed interval, 4 samples a second of readings 15 s late make
/// 750 requests a second, each a read of the store, which push the job further behind.
pub fn poll_interval(every: Duration, age_ms: i64) -> Duration {
    every.max(Duration::from_millis(
        u64::try_from(age_ms / 50).unwrap_or(0),
    ))
}

/// What [`poll_samples`] saw.
#[derive(Debug, Default)]
pub struct Polled {
    /// Each visible sample's delay from its send, ms.
    pub delays_ms: Vec<i64>,
    /// Samples given up on after [`GIVE_UP`].
    pub missing: u64,
    /// Polls that failed (the first one's error is printed on stderr).
    pub errors: u64,
}

/// Polls `check` for each sample from `rx` (every `every`, then less often as it ages: see
/// [`poll_interval`]) until it says visible, or the sample is [`GIVE_UP`] old; returns once
/// `rx` is closed and every sample is settled.
pub fn poll_samples<S: Produced, E: std::error::Error>(
    addr: &str,
    rx: mpsc::Receiver<S>,
    every: Duration,
    check: impl Fn(&str, &S) -> Result<bool, E>,
) -> Polled {
    // Each sample with the time of its next poll.
    let mut pending: VecDeque<(S, Instant)> = VecDeque::new();
    let mut polled = Polled::default();
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
            return polled;
        }
        let round = Instant::now();
        pending.retain_mut(|(s, due)| {
            if *due > round {
                return true;
            }
            let visible = check(addr, s);
            let age = wall_ms() - s.produced_ms();
            let given_up = age > GIVE_UP.as_millis() as i64;
            match visible {
                Ok(true) => {
                    polled.delays_ms.push(age);
                    return false;
                }
                Ok(false) => {}
                Err(e) => {
                    polled.errors += 1;
                    if polled.errors == 1 {
                        eprintln!("bench: polling the job: {}", chain(&e));
                    }
                }
            }
            // A job that stopped answering must not keep the bench polling forever.
            if given_up {
                polled.missing += 1;
                return false;
            }
            *due = Instant::now() + poll_interval(every, age);
            true
        });
        std::thread::sleep(every.saturating_sub(round.elapsed()));
    }
}

/// `e` and its sources, `: `-separated.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text += &format!(": {s}");
        source = s.source();
    }
    text
}
