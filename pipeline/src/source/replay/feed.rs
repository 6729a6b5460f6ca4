//! The replay feed: recorded lines → decoded readings with an event-time watermark.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use operators::{EventFeed, Poll};

use super::guard::{FutureGuard, Verdict};
use super::input::{self, LineReader};
use crate::control::JobControl;
use crate::source::counts::Counts;
use crate::source::{rejected, Clock, Decoded, LineDecoder, LineFault, Rejected};
use crate::stats::Stats;

/// How a worker replays its share of a recording.
#[derive(Debug, Clone)]
pub struct ReplayOptions {
    /// Input file, `-` for stdin.
    pub path: PathBuf,
    /// Watermark bound, seconds.
    pub watermark_bound: u64,
    /// Replay speed: `None` as fast as possible, `Some(f)` at `f` times recorded time.
    pub speed: Option<f64>,
    /// Seconds added to every timestamp (`--rebase-time`), a multiple of 3600.
    pub shift: i64,
    /// Readings whose cells would already be expired by this TTL (seconds) are counted.
    pub ttl_secs: u64,
    /// This worker's index and the number of workers: worker `i` takes the lines of the devices
    /// routed to it (see `ReplayFeed::takes`).
    pub worker: usize,
    /// Number of workers reading the input.
    pub peers: usize,
    /// Allowed skew ahead, seconds ([`crate::config::WindowConfig::future_skew_secs`]): see
    /// [`FutureGuard`].
    pub max_future_skew: u64,
}

/// A reading held by the guard, with the rejection it becomes unless the next confirms it.
type Held<D> = (
    Box<Rejected<<D as LineDecoder>::Reason>>,
    <D as LineDecoder>::Record,
);

/// An [`EventFeed`] over one worker's share of a recording, decoded by `D`.
pub struct ReplayFeed<D: LineDecoder> {
    decoder: D,
    lines: Option<LineReader<Box<dyn std::io::BufRead + Send>>>,
    opts: ReplayOptions,
    stats: Arc<Stats>,
    control: Arc<JobControl>,
    buf: Vec<u8>,
    max_ts: Option<i64>,
    pace: Option<(Instant, i64)>,
    held: Option<Decoded<D::Record, D::Reason>>,
    counts: Counts,
    guard: FutureGuard,
    clock: Clock,
    /// A reading held by the guard, with the rejection it becomes unless the next confirms it.
    ahead: Option<Held<D>>,
    /// The second reading of a confirmed pair, emitted after the first.
    ready: Option<Decoded<D::Record, D::Reason>>,
}

impl<D: LineDecoder> std::fmt::Debug for ReplayFeed<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayFeed")
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}

impl<D: LineDecoder> ReplayFeed<D> {
    /// Opens the input for worker `opts.worker`. Only worker 0 counts bytes for progress.
    ///
    /// # Errors
    /// The input cannot be opened.
    pub fn open(
        decoder: D,
        opts: ReplayOptions,
        stats: Arc<Stats>,
        control: Arc<JobControl>,
    ) -> crate::Result<Self> {
        let counting = (opts.worker == 0).then(|| stats.clone());
        let reader = input::open(&opts.path, counting)?;
        Ok(ReplayFeed {
            lines: Some(LineReader::new(reader)),
            buf: Vec::with_capacity(512),
            ..ReplayFeed::empty(decoder, opts, stats, control)
        })
    }

    /// A feed with no input (a worker that gets no share, e.g. for stdin on workers > 0).
    pub fn empty(
        decoder: D,
        opts: ReplayOptions,
        stats: Arc<Stats>,
        control: Arc<JobControl>,
    ) -> Self {
        ReplayFeed {
            decoder,
            lines: None,
            stats,
            control,
            buf: Vec::new(),
            max_ts: None,
            pace: None,
            held: None,
            counts: Counts::new(opts.ttl_secs),
            guard: FutureGuard::new(opts.max_future_skew, opts.watermark_bound),
            clock: Clock::start(),
            ahead: None,
            ready: None,
            opts,
        }
    }

    fn publish(&mut self) {
        self.counts.publish(&self.stats);
    }

    fn accept(&mut self, mut r: D::Record) -> Decoded<D::Record, D::Reason> {
        let ts = (D::event_time(&r) + self.opts.shift).max(0);
        D::set_event_time(&mut r, ts);
        self.counts.accepted(ts);
        Ok(r)
    }

    fn refuse(&mut self, rejected: Box<Rejected<D::Reason>>) -> Decoded<D::Record, D::Reason> {
        self.counts.rejected();
        Err(rejected)
    }

    /// The held reading, refused: nothing came to confirm it.
    fn refuse_ahead(&mut self) -> Option<Decoded<D::Record, D::Reason>> {
        let (rejected, _) = self.ahead.take()?;
        Some(self.refuse(rejected))
    }

    /// Stops the job on a read error at the recording's own line number `line`: every worker
    /// passes over every line.
    fn read_failed(&self, line: u64, e: &std::io::Error) {
        self.control.fail(format!(
            "reading {} failed at line {line}: {e}",
            self.opts.path.display(),
        ));
    }

    /// Whether this worker replays `line`: worker `i` of `n` takes the lines whose device id
    /// hashes to `i` as the window's exchange routes it ([`LineDecoder::route_hint`],
    /// [`operators::key_hash`]), and a line without one by its number, `number % n == i`. So one
    /// worker reads each device's lines, in the recording's order: of a second sent twice the
    /// narrow table keeps the later line, the window meets a device's readings in order (a
    /// resend is known as one, not marked dirty), and the readings stay on their worker through
    /// the exchange.
    fn takes(&self, line: &super::input::Line) -> bool {
        let peers = self.opts.peers as u64;
        if peers <= 1 {
            return true;
        }
        let route = D::route_hint(&line.bytes).map_or(line.number, operators::key_hash);
        (route % peers) as usize == self.opts.worker
    }

    fn next_decoded(&mut self) -> Option<Decoded<D::Record, D::Reason>> {
        if let Some(item) = self.ready.take() {
            return Some(item);
        }
        loop {
            let Some(lines) = self.lines.as_mut() else {
                return self.refuse_ahead();
            };
            let next = lines.lines_read() + 1;
            let line = match lines.next_line(&mut self.buf) {
                Ok(Some(line)) => line,
                Ok(None) => return self.refuse_ahead(),
                Err(e) => {
                    self.read_failed(next, &e);
                    return self.refuse_ahead();
                }
            };
            if !self.takes(&line) {
                self.buf = line.bytes;
                continue;
            }
            self.counts.read += 1;
            if line.len > line.bytes.len() {
                let reason = D::Reason::from(LineFault::TooLong(line.len));
                return Some(self.refuse(rejected(line.number, line.bytes, reason)));
            }
            let reading = match self.decoder.decode(line.number, &line.bytes) {
                Ok(r) => r,
                Err(rejected) => {
                    self.buf = line.bytes;
                    return Some(self.refuse(rejected));
                }
            };
            let verdict = self
                .guard
                .check(D::key(&reading), D::event_time(&reading), || {
                    self.clock.now_secs()
                });
            let earlier = match verdict {
                Verdict::Confirm => None,
                _ => self.refuse_ahead(),
            };
            let item = match verdict {
                Verdict::Accept => {
                    self.buf = line.bytes;
                    Some(self.accept(reading))
                }
                Verdict::Refuse(reason) => {
                    Some(self.refuse(rejected(line.number, line.bytes, reason.into())))
                }
                Verdict::Hold(reason) => {
                    let refusal = reason.into();
                    self.ahead = Some((rejected(line.number, line.bytes, refusal), reading));
                    None
                }
                Verdict::Confirm => {
                    self.buf = line.bytes;
                    let second = self.accept(reading);
                    match self.ahead.take() {
                        Some((_, first)) => {
                            self.ready = Some(second);
                            Some(self.accept(first))
                        }
                        None => Some(second),
                    }
                }
            };
            match (earlier, item) {
                (Some(earlier), item) => {
                    self.ready = item;
                    return Some(earlier);
                }
                (None, Some(item)) => return Some(item),
                (None, None) => continue,
            }
        }
    }

    /// How long to wait before releasing a reading at `ts` under `--speed`.
    fn wait_for(&mut self, ts: i64) -> Option<Duration> {
        let speed = self.opts.speed?;
        let (start, first) = *self.pace.get_or_insert((Instant::now(), ts));
        let ahead = (ts - first).max(0) as f64 / speed;
        let due = start + Duration::from_secs_f64(ahead);
        let now = Instant::now();
        (due > now).then(|| (due - now).min(Duration::from_millis(100)))
    }
}

impl<D: LineDecoder> EventFeed for ReplayFeed<D> {
    type Item = Decoded<D::Record, D::Reason>;

    fn poll(&mut self) -> Poll<Self::Item> {
        if self.counts.read >= 4096 {
            self.publish();
        }
        if self.control.stopped() {
            self.publish();
            return Poll::Done;
        }
        let item = match self.held.take().or_else(|| self.next_decoded()) {
            Some(item) => item,
            None => {
                self.publish();
                return Poll::Done;
            }
        };
        if let Ok(r) = &item {
            let ts = D::event_time(r);
            let newest = self.max_ts.map_or(ts, |m| m.max(ts));
            if let Some(wait) = self.wait_for(newest) {
                self.held = Some(item);
                return Poll::Pending(wait);
            }
            self.max_ts = Some(newest);
        }
        Poll::Ready(item)
    }

    fn watermark(&self) -> u64 {
        self.max_ts.map_or(0, |m| {
            (m.max(0) as u64).saturating_sub(self.opts.watermark_bound)
        })
    }
}
