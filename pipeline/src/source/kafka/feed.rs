//! The Kafka feed: one worker's partitions of the readings' topic → decoded readings, with a
//! per-partition watermark; offsets are committed by its [`OffsetCommitter`] (see
//! `committer.rs` for when).
//!
//! # Assignment
//! Partitions are assigned statically: worker `i` of `n` reads the partitions `p` with
//! `p % n == i`, through `assign` (no group membership, no rebalancing). Offsets live in the
//! consumer group `source.group_id`, committed by hourglass alone (auto-commit and the automatic
//! offset store are off). The partition count is read once at start; a job restart picks up new
//! partitions. Run one job per group: two jobs on one group would both read every partition
//! (harmless, puts are idempotent, but wasted work).
//!
//! # Watermark
//! Per partition: the newest event time read − `watermark_bound_secs`. Per worker: the minimum
//! over its partitions that had a record within `idle_partition_timeout_secs` (a partition that
//! has had no record yet holds the watermark until it turns idle). Over the job: the minimum over
//! workers, which timely computes. A partition counts as idle only if it also has nothing left to
//! read (its position has reached the high watermark last read from the brokers, see
//! [`KafkaShared::refresh_offsets`]): a partition that is only behind, while the consumer
//! delivers others during a catch-up, keeps holding the watermark, so catching up does not make
//! its records late. (On a topic written with transactions, the trailing commit marker keeps a
//! partition from ever counting as caught up.) A worker whose partitions are all idle follows the most
//! advanced worker, so it holds nobody back. Each commit stores its partition's newest event
//! time in the offset's metadata, so a restarted job resumes with the same per-partition
//! watermarks and classifies late readings as an uninterrupted run would. A reading more than
//! `max_future_skew_secs` ahead of the wall clock is rejected (kind `future`) before it can move
//! its partition's newest event time: one device with a clock in the future would otherwise make
//! every later reading of the partition late. A job without a window (the profile job), which
//! no record can be late for, moves its watermark past every record emitted whenever it has
//! nothing to read, so that the offsets of a burst's last records are committed as soon as they
//! are durable (see `KafkaFeed::pass_what_was_read`).

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use operators::{EventFeed, Poll};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use timely::dataflow::ProbeHandle;

use super::client::consumer;
use super::committer::OffsetCommitter;
use super::delay::TimedWriter;
use super::metadata::KafkaShared;
use super::retry::{is_fatal, ErrorNote};
use crate::config::SourceConfig;
use crate::control::JobControl;
use crate::source::counts::Counts;
use crate::source::{rejected, Ahead, Clock, Decoded, LineDecoder};
use crate::stats::Stats;
use crate::Result;
use sinks::table::TableWriter;

/// How long the source sleeps when Kafka has nothing for it.
const EMPTY_POLL_WAIT: Duration = Duration::from_millis(5);

/// How one worker reads the topic.
#[derive(Debug, Clone)]
pub struct KafkaOptions {
    /// The `[source]` section.
    pub source: SourceConfig,
    /// Watermark bound, seconds.
    pub watermark_bound: u64,
    /// The job's event-time window, if it keeps one: offsets are then committed only past
    /// windows that are final (see [`OffsetCommitter::commit_durable`]); without one, up to
    /// what is durable.
    pub window: Option<operators::WindowSpec>,
    /// The table with one row per record read, whose writes [`KafkaFeed::timed_writer`] times.
    pub record_table: &'static str,
    /// Stop reading once no worker has read a record for this long.
    pub exit_on_idle: Option<Duration>,
    /// Readings whose cells would already be expired by this TTL (seconds) are counted.
    pub ttl_secs: u64,
    /// Number of partitions of the topic (see [`super::wait_for_partitions`]).
    pub partitions: usize,
    /// This worker's index.
    pub worker: usize,
    /// Number of workers.
    pub peers: usize,
    /// A reading more than this many seconds ahead of the wall clock is rejected (kind
    /// `future`) and does not move its partition's watermark.
    pub max_future_skew: u64,
    /// How long a stopping feed keeps its watermark for the durable frontier to reach it (see
    /// [`KafkaFeed::ready_to_stop`]): longer than any operator holds a reading back (the room
    /// view, up to its write interval) plus a flush.
    pub stop_drain: Duration,
}

impl KafkaOptions {
    /// Worker 0's options of `source`'s topic of `partitions` read by `peers` workers, with
    /// `window`'s watermark bound and future skew. The rest is a job's to set: by default no
    /// window (offsets pass what the durable probe passed), no record table, no idle exit, no
    /// TTL and a 10 s stop drain.
    pub fn new(
        source: &SourceConfig,
        window: &crate::config::WindowConfig,
        partitions: usize,
        peers: usize,
    ) -> Self {
        KafkaOptions {
            source: source.clone(),
            watermark_bound: window.watermark_bound_secs,
            window: None,
            record_table: "",
            exit_on_idle: None,
            ttl_secs: u64::MAX,
            partitions,
            worker: 0,
            peers,
            max_future_skew: window.future_skew_secs(),
            stop_drain: Duration::from_secs(10),
        }
    }
}

/// Reading position and event time of one assigned partition.
#[derive(Debug)]
struct PartState {
    partition: i32,
    newest: Option<i64>,
    last_seen: Instant,
    /// After a restart, until the partition passes the previous run's durable offset: that
    /// offset and the previous run's frontier (see `CommitMeta` in `committer.rs`).
    resume: Option<(i64, u64)>,
    /// Readings skipped on resume because their hour was already final and durable.
    skipped: u64,
}

/// An [`EventFeed`] over one worker's partitions of a Kafka topic, decoded by `D`.
pub struct KafkaFeed<D: LineDecoder> {
    decoder: D,
    opts: KafkaOptions,
    committer: OffsetCommitter,
    shared: Arc<KafkaShared>,
    stats: Arc<Stats>,
    control: Arc<JobControl>,
    parts: Vec<PartState>,
    arrivals: Arc<Mutex<VecDeque<i64>>>,
    watermark: u64,
    /// The timely time the last record was emitted at (the watermark then), if any.
    last_emitted: Option<u64>,
    idle_timeout: Duration,
    commit_every: Duration,
    next_commit: Instant,
    clock: Clock,
    counts: Counts,
    errors: u64,
    error_note: ErrorNote,
    /// When the feed was asked to stop (SIGTERM, idle), if it was.
    stopping_since: Option<Instant>,
    /// [`KafkaShared::now_ms`] when the feed started: idleness counts from here at the
    /// earliest, not from the process's start, which in a cluster precedes the wait for the
    /// other processes.
    reading_since_ms: u64,
    /// Debug builds only: panic after this many records (`HOURGLASS_DEBUG_PANIC_AFTER`), so
    /// tests can show that a panic in the dataflow stops the job without a commit past it.
    #[cfg(debug_assertions)]
    panic_after: Option<u64>,
    #[cfg(debug_assertions)]
    records: u64,
    done: bool,
}

impl<D: LineDecoder> std::fmt::Debug for KafkaFeed<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaFeed")
            .field("opts", &self.opts)
            .field("parts", &self.parts)
            .field("watermark", &self.watermark)
            .finish_non_exhaustive()
    }
}

impl<D: LineDecoder> KafkaFeed<D> {
    /// Connects worker `opts.worker`, assigns its partitions and positions each at its committed
    /// offset (or `auto.offset.reset`, default earliest, when it has none), restoring the
    /// partition's newest event time from the commit's metadata. `probe` is the probe the graph
    /// reports durability to.
    ///
    /// # Errors
    /// An invalid client setting, or the brokers did not answer for committed offsets.
    pub fn open(
        decoder: D,
        opts: KafkaOptions,
        shared: Arc<KafkaShared>,
        stats: Arc<Stats>,
        control: Arc<JobControl>,
        probe: ProbeHandle<u64>,
    ) -> Result<Self> {
        let source = &opts.source;
        let consumer = consumer(source, &format!("hourglass-worker-{}", opts.worker))?;
        let partitions: Vec<i32> = (0..opts.partitions)
            .filter(|p| p % opts.peers.max(1) == opts.worker)
            .map(|p| p as i32)
            .collect();
        let now = Instant::now();
        let mut parts: Vec<PartState> = partitions
            .iter()
            .map(|&partition| PartState {
                partition,
                newest: None,
                last_seen: now,
                resume: None,
                skipped: 0,
            })
            .collect();
        let (committer, committed) = OffsetCommitter::assign(
            consumer,
            source,
            partitions,
            opts.window,
            probe,
            control.clone(),
            shared.clone(),
        )?;
        // The previous run's frontier, if every partition of this worker has one.
        let mut resume_frontier: Option<u64> = (!parts.is_empty()).then_some(u64::MAX);
        for (part, committed) in parts.iter_mut().zip(committed) {
            match committed {
                Some((offset, meta)) => {
                    part.newest = meta.newest;
                    if let (Some(durable), Some(frontier)) = (meta.durable, meta.frontier) {
                        part.resume = (durable > offset).then_some((durable, frontier));
                    }
                    resume_frontier = resume_frontier.zip(meta.frontier).map(|(a, b)| a.min(b));
                }
                None => resume_frontier = None,
            }
            tracing::info!(
                worker = opts.worker,
                partition = part.partition,
                committed = ?committed.map(|c| c.0),
                newest = ?part.newest,
                resume = ?part.resume,
                "assigned"
            );
        }
        // Hours the previous run had closed stay closed (see `CommitMeta`).
        let watermark = resume_frontier.unwrap_or(0);
        let mut feed = KafkaFeed::new(
            decoder, opts, parts, watermark, committer, shared, stats, control,
        );
        feed.update_watermark(now);
        Ok(feed)
    }

    /// A feed of `parts`, starting at `watermark`.
    #[allow(clippy::too_many_arguments)]
    fn new(
        decoder: D,
        opts: KafkaOptions,
        parts: Vec<PartState>,
        watermark: u64,
        committer: OffsetCommitter,
        shared: Arc<KafkaShared>,
        stats: Arc<Stats>,
        control: Arc<JobControl>,
    ) -> Self {
        let reading_since_ms = shared.now_ms();
        KafkaFeed {
            decoder,
            idle_timeout: Duration::from_secs(opts.source.idle_partition_timeout_secs),
            commit_every: Duration::from_millis(opts.source.commit_interval_ms),
            next_commit: Instant::now(),
            counts: Counts::new(opts.ttl_secs),
            opts,
            committer,
            shared,
            stats,
            control,
            parts,
            arrivals: Arc::new(Mutex::new(VecDeque::new())),
            watermark,
            last_emitted: None,
            clock: Clock::start(),
            errors: 0,
            error_note: ErrorNote::default(),
            stopping_since: None,
            reading_since_ms,
            #[cfg(debug_assertions)]
            panic_after: std::env::var("HOURGLASS_DEBUG_PANIC_AFTER")
                .ok()
                .and_then(|n| n.parse().ok()),
            #[cfg(debug_assertions)]
            records: 0,
            done: false,
        }
    }

    /// The handle that commits this feed's durable offsets.
    pub fn committer(&self) -> OffsetCommitter {
        self.committer.clone()
    }

    /// Wraps the worker's table writer so that it records, for each narrow row it makes durable,
    /// the delay since the record was produced (into [`KafkaShared::delays`]).
    pub fn timed_writer(&self, writer: Box<dyn TableWriter>) -> TimedWriter {
        TimedWriter::new(
            writer,
            self.opts.record_table,
            self.arrivals.clone(),
            self.shared.clone(),
        )
    }

    fn publish(&mut self) {
        self.counts.publish(&self.stats);
    }

    /// Recomputes the watermark: see the module docs.
    fn update_watermark(&mut self, now: Instant) {
        let bound = self.opts.watermark_bound;
        let mut active = false;
        let mut blocked = false;
        let mut least: Option<u64> = None;
        for p in &self.parts {
            // Idle: no record for the timeout and nothing left on the brokers. A partition
            // that is merely behind (its records wait in the consumer's queue while others are
            // delivered) keeps holding the watermark, or catching up would make its records late.
            if now.duration_since(p.last_seen) >= self.idle_timeout
                && self.shared.caught_up(p.partition as usize)
            {
                continue;
            }
            active = true;
            match p.newest {
                Some(ts) => {
                    let w = (ts.max(0) as u64).saturating_sub(bound);
                    least = Some(least.map_or(w, |l| l.min(w)));
                }
                None => blocked = true,
            }
        }
        let candidate = if !active {
            Some(self.shared.fleet_watermark.load(Ordering::Relaxed))
        } else if blocked {
            None
        } else {
            if let Some(w) = least {
                self.shared.fleet_watermark.fetch_max(w, Ordering::Relaxed);
            }
            least
        };
        if let Some(c) = candidate {
            self.watermark = self.watermark.max(c);
        }
        self.shared.worker_watermarks[self.opts.worker].store(self.watermark, Ordering::Relaxed);
    }

    /// For a job without a window, which no record can be late for: with nothing to read now,
    /// moves the watermark past the newest event time read and past the time the last record
    /// was emitted at (a record older than the newest is emitted at the watermark), so that the
    /// durable frontier can pass every record emitted so far and their offsets are committed at
    /// once, not when later records move event time on. A job with a window keeps the bound.
    fn pass_what_was_read(&mut self) {
        if self.opts.window.is_some() {
            return;
        }
        // A worker that has read nothing follows the others, as an idle one does.
        let read = self.parts.iter().filter_map(|p| p.newest).max();
        let read = read.map(|newest| (newest.max(0) as u64).saturating_add(1));
        if let Some(past) = read.max(self.last_emitted.map(|at| at.saturating_add(1))) {
            let fleet = &self.shared.fleet_watermark;
            fleet.fetch_max(past, Ordering::Relaxed);
        }
        let fleet = self.shared.fleet_watermark.load(Ordering::Relaxed);
        self.watermark = self.watermark.max(fleet);
        self.shared.worker_watermarks[self.opts.worker].store(self.watermark, Ordering::Relaxed);
    }

    /// A stopping feed reads nothing more but holds its watermark until the durable frontier
    /// has reached the lowest watermark among this process's running workers, for at most
    /// [`KafkaOptions::stop_drain`]: the ledger then sees every hour that watermark made final, so the
    /// final commit passes their readings. Dropping the watermark at once would drain the
    /// dataflow without the ledger ever seeing a frontier newer than its last periodic commit,
    /// and a restart would re-read up to `commit_interval_ms` of stream more than needed.
    fn ready_to_stop(&mut self, now: Instant) -> bool {
        if self.control.error().is_some() {
            return true;
        }
        let since = *self.stopping_since.get_or_insert(now);
        let target = self
            .shared
            .worker_watermarks
            .iter()
            .map(|w| w.load(Ordering::Relaxed))
            .min()
            .unwrap_or(u64::MAX)
            .min(self.watermark);
        let frontier = self.committer.durable_frontier();
        if frontier.is_none_or(|f| f >= target) {
            self.committer.ledger().advance(frontier);
            return true;
        }
        if now.duration_since(since) >= self.opts.stop_drain {
            tracing::warn!(
                worker = self.opts.worker,
                ?frontier,
                watermark = target,
                "stopping before the durable frontier reached the watermark; a restart re-reads \
                 more of the stream"
            );
            return true;
        }
        false
    }

    fn finish(&mut self) -> Poll<Decoded<D::Record, D::Reason>> {
        self.publish();
        if !self.done {
            self.done = true;
            self.shared.worker_watermarks[self.opts.worker].store(u64::MAX, Ordering::Relaxed);
        }
        Poll::Done
    }

    fn on_error(&mut self, e: &KafkaError) {
        if is_fatal(e) {
            self.control.fail(format!(
                "reading kafka topic {}: {e}; check the topic, the credentials in \
                 [source.rdkafka] and the brokers",
                self.opts.source.topic
            ));
            return;
        }
        self.errors += 1;
        if self.error_note.due() {
            tracing::warn!(worker = self.opts.worker, errors = self.errors, error = %e, "kafka consumer error (retrying)");
        }
    }

    fn maybe_commit(&mut self, now: Instant) {
        if now < self.next_commit {
            return;
        }
        self.next_commit = now + self.commit_every;
        if let Err(e) = self.committer.commit_durable() {
            tracing::warn!(worker = self.opts.worker, error = %e, "offset commit failed; retrying");
        }
    }
}

impl<D: LineDecoder> EventFeed for KafkaFeed<D> {
    type Item = Decoded<D::Record, D::Reason>;

    fn poll(&mut self) -> Poll<Self::Item> {
        if self.done || self.parts.is_empty() {
            return self.finish();
        }
        if self.control.stopped() || self.stopping_since.is_some() {
            self.publish();
            return if self.ready_to_stop(Instant::now()) {
                self.finish()
            } else {
                Poll::Pending(EMPTY_POLL_WAIT)
            };
        }
        if self.counts.read >= 4096 {
            self.publish();
        }
        let now = Instant::now();
        self.maybe_commit(now);
        let msg = match self.committer.consumer().poll(Duration::ZERO) {
            None => {
                self.update_watermark(now);
                self.pass_what_was_read();
                self.publish();
                if let Some(idle) = self.opts.exit_on_idle {
                    let last = self.shared.last_input_ms.load(Ordering::Relaxed);
                    let since = last.max(self.reading_since_ms);
                    if self.shared.now_ms().saturating_sub(since) >= idle.as_millis() as u64 {
                        tracing::info!(
                            worker = self.opts.worker,
                            "no input for the idle time; stopping"
                        );
                        self.stopping_since = Some(now);
                        return Poll::Pending(Duration::ZERO);
                    }
                }
                return Poll::Pending(EMPTY_POLL_WAIT);
            }
            Some(Err(e)) => {
                self.on_error(&e);
                return Poll::Pending(EMPTY_POLL_WAIT);
            }
            Some(Ok(msg)) => msg,
        };
        let t = self.shared.now_ms();
        self.shared.last_input_ms.fetch_max(t, Ordering::Relaxed);
        self.shared.first_input_ms.fetch_min(t, Ordering::Relaxed);

        let partition = msg.partition();
        let offset = msg.offset();
        let Some(local) = self.parts.iter().position(|p| p.partition == partition) else {
            // Only assigned partitions are fetched; anything else is librdkafka's business.
            return Poll::Pending(Duration::ZERO);
        };
        let mut raw = msg.payload().unwrap_or_default();
        while let [rest @ .., b'\n' | b'\r'] = raw {
            raw = rest;
        }
        self.counts.read += 1;
        #[cfg(debug_assertions)]
        {
            self.records += 1;
            if self.panic_after.is_some_and(|n| self.records > n) {
                panic!(
                    "HOURGLASS_DEBUG_PANIC_AFTER: a worker's record {}",
                    self.records
                );
            }
        }
        let mut decoded = self.decoder.decode(offset.max(0) as u64, raw);
        // A device clock running ahead must not move the partition's watermark: every other
        // device's readings would become late.
        if let Ok(r) = &decoded {
            let now = self.clock.now_secs();
            let skew = self.opts.max_future_skew;
            let ts = D::event_time(r);
            if ts > now.saturating_add(i64::try_from(skew).unwrap_or(i64::MAX)) {
                let reason = D::Reason::from(Ahead {
                    ts,
                    reference: "the wall clock".into(),
                    reference_ts: now,
                    limit_secs: skew,
                });
                decoded = Err(rejected(offset.max(0) as u64, raw, reason));
            }
        }
        match &mut decoded {
            Ok(record) => D::set_partition(record, partition),
            Err(rejected) => rejected.partition = Some(partition),
        }
        let emitted_at = self.watermark;
        self.last_emitted = Some(emitted_at);
        let part = &mut self.parts[local];
        part.last_seen = now;
        let before = part.newest;
        // The start of the reading's window (`None`: a rejected record, or a job without one).
        let window = self.opts.window;
        let start = window.zip(decoded.as_ref().ok()).map(|(w, r)| {
            let width = i64::try_from(w.width).unwrap_or(i64::MAX);
            let ts = D::event_time(r);
            ts - ts.rem_euclid(width)
        });
        let mut skip = false;
        if let Some((durable, frontier)) = part.resume {
            if offset >= durable {
                part.resume = None;
                if part.skipped > 0 {
                    tracing::info!(
                        worker = self.opts.worker,
                        partition,
                        skipped = part.skipped,
                        "resumed: skipped re-read records the previous run had stored (dead letters, readings of hours it had closed)"
                    );
                }
            } else {
                // Before `durable`, the previous run's dead letters are flushed: skip rejected
                // records, readings of the hours it had closed, and any record of a job
                // without a window (all durable).
                skip = start
                    .is_none_or(|s| window.is_some_and(|w| w.is_final(s.max(0) as u64, frontier)));
            }
        }
        if let Ok(r) = &decoded {
            let ts = D::event_time(r);
            part.newest = Some(part.newest.map_or(ts, |n| n.max(ts)));
        }
        if skip {
            part.skipped += 1;
            self.shared.resume_skipped.fetch_add(1, Ordering::Relaxed);
        } else {
            match &decoded {
                Ok(r) => {
                    self.counts.accepted(D::event_time(r));
                    let produced = msg.timestamp().to_millis().unwrap_or(0);
                    if let Ok(mut q) = self.arrivals.lock() {
                        q.push_back(produced);
                    }
                }
                Err(_) => self.counts.rejected(),
            }
        }
        let hour = start.filter(|_| !skip);
        let after = part.newest;
        self.shared.positions[partition as usize].store(offset + 1, Ordering::Relaxed);
        self.committer
            .ledger()
            .record(emitted_at, local, offset, hour, before, after);
        drop(msg);
        self.update_watermark(now);
        if skip {
            return Poll::Pending(Duration::ZERO);
        }
        Poll::Ready(decoded)
    }

    fn watermark(&self) -> u64 {
        self.watermark
    }
}

#[cfg(test)]
mod tests {
    use super::super::ledger::OffsetLedger;
    use super::*;
    use crate::source::{LineFault, Refusal};

    const WINDOW: operators::WindowSpec = operators::WindowSpec {
        width: 3600,
        allowed_lateness: 3600,
        early_fire: None,
        max_pending: None,
    };

    /// A decoder of lines `ts` (a number) for the tests.
    #[derive(Debug)]
    struct Ts;

    #[derive(Debug)]
    struct Bad;

    impl std::fmt::Display for Bad {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("bad")
        }
    }

    impl From<LineFault> for Bad {
        fn from(_: LineFault) -> Self {
            Bad
        }
    }

    impl From<Ahead> for Bad {
        fn from(_: Ahead) -> Self {
            Bad
        }
    }

    impl Refusal for Bad {
        const KINDS: &'static [&'static str] = &["bad"];
        fn kind_index(&self) -> usize {
            0
        }
    }

    impl LineDecoder for Ts {
        type Record = i64;
        type Reason = Bad;
        fn decode(&self, line: u64, raw: &[u8]) -> Decoded<i64, Bad> {
            std::str::from_utf8(raw)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| rejected(line, raw, Bad))
        }
        fn event_time(r: &i64) -> i64 {
            *r
        }
        fn set_event_time(r: &mut i64, ts: i64) {
            *r = ts;
        }
        fn key(_: &i64) -> &str {
            ""
        }
        fn route_hint(_: &[u8]) -> Option<&str> {
            None
        }
    }

    fn feed_with(parts: &[(i32, Option<i64>, u64)], shared: Arc<KafkaShared>) -> KafkaFeed<Ts> {
        // A feed without a broker: the consumer is created but never connects.
        let source = SourceConfig {
            brokers: "127.0.0.1:1".into(),
            ..SourceConfig::default()
        };
        let now = Instant::now();
        let opts = KafkaOptions {
            source: source.clone(),
            watermark_bound: 30,
            window: Some(WINDOW),
            record_table: "t",
            exit_on_idle: None,
            ttl_secs: u64::MAX / 4,
            partitions: parts.len(),
            worker: 0,
            peers: 1,
            max_future_skew: 3600,
            stop_drain: Duration::from_secs(10),
        };
        let committer = OffsetCommitter::new(
            consumer(&source, "test").unwrap(),
            source,
            parts.iter().map(|p| p.0).collect(),
            OffsetLedger::new(parts.len(), Some(WINDOW)),
            ProbeHandle::new(),
            Arc::default(),
            shared.clone(),
        );
        let parts = parts
            .iter()
            .map(|&(partition, newest, idle_for)| PartState {
                partition,
                newest,
                last_seen: now - Duration::from_secs(idle_for),
                resume: None,
                skipped: 0,
            })
            .collect();
        KafkaFeed::new(
            Ts,
            opts,
            parts,
            0,
            committer,
            shared,
            Arc::default(),
            Arc::default(),
        )
    }

    /// In a cluster, the shared clock starts before the wait for the other processes, which
    /// can take longer than the idle time on a loaded machine: a feed that has just started
    /// must not take that wait for idleness and stop before reading its partitions.
    #[test]
    fn exit_on_idle_counts_from_the_feed_s_start_not_the_process_s() {
        let mut shared = KafkaShared::new(1, 1);
        shared.started = Instant::now() - Duration::from_secs(10);
        let mut f = feed_with(&[(0, None, 0)], Arc::new(shared));
        f.opts.exit_on_idle = Some(Duration::from_secs(5));
        // The consumer has no broker: every poll finds nothing.
        assert!(matches!(f.poll(), Poll::Pending(_)));
        assert!(f.stopping_since.is_none(), "stopped at its first poll");
        // Five seconds after the feed's start without a record, it stops. A poll may also
        // return the consumer's transport error (no broker), which is not idleness's turn to
        // check; the errors come one per reconnect, so an empty poll follows within a few.
        f.reading_since_ms -= 5_000;
        for _ in 0..100 {
            assert!(matches!(f.poll(), Poll::Pending(_)));
            if f.stopping_since.is_some() {
                break;
            }
        }
        assert!(f.stopping_since.is_some());
    }

    /// A job without a window moves its watermark, when nothing is to be read, past every
    /// record emitted: past the newest event time read, and past the time a record older than
    /// it was emitted at (the watermark then), so the durable frontier passes that record and
    /// its offset is committed without waiting for a newer one. And no further: it does not
    /// creep while nothing comes.
    #[test]
    fn a_job_without_a_window_passes_every_record_emitted_when_idle() {
        let shared = Arc::new(KafkaShared::new(1, 1));
        let mut f = feed_with(&[(0, Some(1000), 0)], shared);
        f.opts.window = None;
        f.pass_what_was_read();
        assert_eq!(f.watermark(), 1001);
        // A record of event time 900 arrives: emitted at the watermark, 1001.
        f.last_emitted = Some(f.watermark());
        f.pass_what_was_read();
        assert_eq!(f.watermark(), 1002, "past the late record's time");
        f.pass_what_was_read();
        assert_eq!(f.watermark(), 1002, "no creep");
        // With a window, the bound holds: nothing is passed.
        let mut w = feed_with(&[(0, Some(1000), 0)], Arc::new(KafkaShared::new(1, 1)));
        w.last_emitted = Some(5000);
        w.pass_what_was_read();
        assert_eq!(w.watermark(), 0);
    }

    #[test]
    fn watermark_is_the_least_active_partition_minus_the_bound() {
        let shared = Arc::new(KafkaShared::new(3, 1));
        let mut f = feed_with(
            &[(0, Some(1000), 0), (1, Some(700), 0), (2, None, 0)],
            shared,
        );
        // Partition 2 has had no record and is not idle: it holds the watermark.
        f.update_watermark(Instant::now());
        assert_eq!(f.watermark(), 0);
        // Once idle it no longer holds it back.
        f.parts[2].last_seen = Instant::now() - Duration::from_secs(61);
        f.update_watermark(Instant::now());
        assert_eq!(f.watermark(), 670);
        // Partition 1 idle too: partition 0 alone decides.
        f.parts[1].last_seen = Instant::now() - Duration::from_secs(61);
        f.update_watermark(Instant::now());
        assert_eq!(f.watermark(), 970);
        // Never backwards, even when an idle partition comes back with older data.
        f.parts[1].last_seen = Instant::now();
        f.update_watermark(Instant::now());
        assert_eq!(f.watermark(), 970);
    }

    #[test]
    fn a_partition_that_is_only_behind_is_not_idle() {
        let shared = Arc::new(KafkaShared::new(2, 1));
        let mut f = feed_with(&[(0, Some(1000), 0), (1, Some(700), 61)], shared.clone());
        // Partition 1 has had no record for a while, but 500 records wait on the brokers.
        shared.positions[1].store(100, Ordering::Relaxed);
        shared.high[1].store(600, Ordering::Relaxed);
        f.update_watermark(Instant::now());
        assert_eq!(f.watermark(), 670);
        assert_eq!(shared.lag(), None, "partition 0's offsets are unknown");
        shared.high[0].store(0, Ordering::Relaxed);
        assert_eq!(shared.lag(), Some(500));
        assert_eq!(shared.partition_lags(), vec![Some(0), Some(500)]);
        // Caught up: now it is idle.
        shared.positions[1].store(600, Ordering::Relaxed);
        f.update_watermark(Instant::now());
        assert_eq!(f.watermark(), 970);
    }

    #[test]
    fn a_worker_with_only_idle_partitions_follows_the_fleet() {
        let shared = Arc::new(KafkaShared::new(1, 1));
        shared.fleet_watermark.store(5000, Ordering::Relaxed);
        let mut f = feed_with(&[(0, Some(1000), 61)], shared);
        f.update_watermark(Instant::now());
        assert_eq!(f.watermark(), 5000);
    }
}
