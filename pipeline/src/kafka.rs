//! The Kafka feed: records of a topic → decoded readings, with a per-partition watermark and
//! offsets committed only once the tables hold what they cover.
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
//! every later reading of the partition late.
//!
//! # Commits
//! Each reading is emitted at timely time = the watermark before it arrived. The feed records,
//! per emission time, the next offset of each partition; the graph's probe passes `t` only once
//! every reading emitted before `t` is durable in both tables (narrow row and wide cell). A
//! partition is committed up to what is durable, but never past the first reading of an hour
//! that is not final yet (the probe has not passed its end plus the allowed lateness): the
//! window computes each hour's summary cells from the whole hour, so a restarted job must re-read
//! every reading of the hours it may still change. Offsets thus trail the stream by up to one
//! hour plus the allowed lateness of event time; re-reading is harmless (idempotent puts),
//! except for hours the previous run had already closed: the commit's metadata also holds the
//! durable frontier and offset, so that a restart keeps those hours closed (see `CommitMeta`).
//! Commits are synchronous, every `commit_interval_ms`; after the dataflow has drained,
//! [`OffsetCommitter::finish`] commits the rest. A feed that is told to stop (SIGTERM, idle)
//! first holds its watermark until the durable frontier reaches it, so that final commit also
//! passes the hours the watermark made final. Nothing is committed once the job has failed.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use operators::{EventFeed, Poll};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};
use timely::dataflow::ProbeHandle;

use crate::config::SourceConfig;
use crate::control::JobControl;
use crate::decode::{decode_line, Reason, Rejected};
use crate::feed::{Clock, Decoded};
use crate::schema::NARROW_TABLE;
use crate::stats::{add, Stats};
use crate::table::{Mutation, TableWriter};
use crate::{Error, Result};

/// How long start-up calls to the brokers (metadata, committed offsets) may take.
const BROKER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the source sleeps when Kafka has nothing for it.
const EMPTY_POLL_WAIT: Duration = Duration::from_millis(5);
/// Consumer errors that cannot heal by waiting: the job stops.
const FATAL_CODES: &[RDKafkaErrorCode] = &[
    RDKafkaErrorCode::Fatal,
    RDKafkaErrorCode::TopicAuthorizationFailed,
    RDKafkaErrorCode::GroupAuthorizationFailed,
    RDKafkaErrorCode::SaslAuthenticationFailed,
    RDKafkaErrorCode::Authentication,
];

fn kafka_error(source: &SourceConfig, message: String) -> Error {
    Error::Io {
        path: format!("kafka topic {} at {}", source.topic, source.brokers),
        source: std::io::Error::other(message),
    }
}

/// The librdkafka settings of every hourglass client of `source`: the passthrough table, then
/// what hourglass owns (brokers, group, manual offsets). Unknown settings fail when a client is
/// created.
pub fn client_config(source: &SourceConfig) -> ClientConfig {
    let mut cfg = ClientConfig::new();
    cfg.set("auto.offset.reset", "earliest");
    for (key, value) in &source.rdkafka {
        cfg.set(key, value);
    }
    cfg.set("bootstrap.servers", &source.brokers)
        .set("group.id", &source.group_id)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false");
    cfg
}

/// Creates a consumer of `source` (no partition assigned).
///
/// # Errors
/// [`Error::Config`] naming the librdkafka setting it rejects.
pub fn consumer(source: &SourceConfig, client_id: &str) -> Result<BaseConsumer> {
    client_config(source)
        .set("client.id", client_id)
        .create()
        .map_err(|e| Error::Config(format!("source.rdkafka: {e}")))
}

/// The number of partitions of the topic, waiting (and saying so every 10 s) until it exists or
/// `control` stops the job.
///
/// # Errors
/// An invalid client setting, or the job stopped before the topic appeared.
pub fn wait_for_partitions(source: &SourceConfig, control: &JobControl) -> Result<usize> {
    let consumer = consumer(source, "hourglass-metadata")?;
    let started = Instant::now();
    let mut next_note = Duration::from_secs(10);
    loop {
        let problem = match partition_count(&consumer, &source.topic, Duration::from_secs(5)) {
            Ok(partitions) => return Ok(partitions),
            Err(problem) => problem.to_string(),
        };
        if control.stopped() {
            return Err(kafka_error(
                source,
                format!("stopped while waiting for the topic ({problem})"),
            ));
        }
        if started.elapsed() >= next_note {
            tracing::warn!(topic = %source.topic, brokers = %source.brokers, %problem, "waiting for the topic");
            eprintln!(
                "waiting for topic {} at {} ({problem}); create it or check source.brokers",
                source.topic, source.brokers
            );
            next_note += Duration::from_secs(10);
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Why a topic's partitions could not be counted.
#[derive(Debug)]
pub enum TopicProblem {
    /// The brokers did not answer the metadata request.
    Metadata(KafkaError),
    /// The brokers do not know the topic.
    NotFound,
    /// The brokers report an error for the topic.
    Unavailable(RDKafkaErrorCode),
    /// The topic exists without partitions (being created).
    NoPartitions,
}

impl std::fmt::Display for TopicProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TopicProblem::Metadata(e) => write!(f, "metadata request failed: {e}"),
            TopicProblem::NotFound => f.write_str("topic not found"),
            TopicProblem::Unavailable(code) => write!(f, "topic not available: {code:?}"),
            TopicProblem::NoPartitions => f.write_str("topic has no partitions yet"),
        }
    }
}

/// How many partitions `topic` has, as the brokers report it within `timeout`.
///
/// # Errors
/// The [`TopicProblem`] that keeps them from being counted.
pub fn partition_count<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    timeout: Duration,
) -> std::result::Result<usize, TopicProblem> {
    let md = consumer
        .fetch_metadata(Some(topic), timeout)
        .map_err(TopicProblem::Metadata)?;
    match md.topics().iter().find(|t| t.name() == topic) {
        None => Err(TopicProblem::NotFound),
        Some(t) => match t.error() {
            Some(e) => Err(TopicProblem::Unavailable(RDKafkaErrorCode::from(e))),
            None if t.partitions().is_empty() => Err(TopicProblem::NoPartitions),
            None => Ok(t.partitions().len()),
        },
    }
}

/// Produce-to-durable delays, in milliseconds, with 1 ms buckets up to 10 minutes.
#[derive(Debug)]
pub struct DelayHistogram {
    buckets: Mutex<Vec<u64>>,
}

const DELAY_BUCKETS: usize = 600_000;

impl Default for DelayHistogram {
    fn default() -> Self {
        DelayHistogram {
            buckets: Mutex::new(vec![0; DELAY_BUCKETS + 1]),
        }
    }
}

impl DelayHistogram {
    /// Records delays (negative ones, from clock skew, count as 0; longer than 10 min as 10 min).
    pub fn record(&self, delays_ms: impl IntoIterator<Item = i64>) {
        if let Ok(mut b) = self.buckets.lock() {
            for d in delays_ms {
                b[(d.max(0) as usize).min(DELAY_BUCKETS)] += 1;
            }
        }
    }

    /// Number of recorded delays and the `q` quantiles (`0.0..=1.0`) in milliseconds, `None`
    /// when nothing was recorded.
    pub fn quantiles(&self, qs: &[f64]) -> (u64, Vec<Option<u64>>) {
        let Ok(b) = self.buckets.lock() else {
            return (0, vec![None; qs.len()]);
        };
        let total: u64 = b.iter().sum();
        let out = qs
            .iter()
            .map(|q| {
                if total == 0 {
                    return None;
                }
                let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
                let mut seen = 0;
                b.iter()
                    .position(|&n| {
                        seen += n;
                        seen >= rank
                    })
                    .map(|i| i as u64)
            })
            .collect();
        (total, out)
    }
}

/// State of a running Kafka job shared by its workers, for the watermark, exit-on-idle and the
/// status line.
#[derive(Debug)]
pub struct KafkaShared {
    started: Instant,
    /// Milliseconds after `started` of the latest record any worker read.
    last_input_ms: AtomicU64,
    /// Milliseconds after `started` of the first record any worker read (`u64::MAX`: none yet).
    first_input_ms: AtomicU64,
    /// The most advanced watermark of a worker with an active partition.
    fleet_watermark: AtomicU64,
    /// Each worker's watermark; `u64::MAX` once it stopped reading.
    worker_watermarks: Vec<AtomicU64>,
    /// Per partition, the next offset to read (`-1`: unknown).
    positions: Vec<AtomicI64>,
    /// Per partition, the committed offset (`-1`: none).
    committed: Vec<AtomicI64>,
    /// Per partition, the oldest and the next offset on the brokers (`-1`: unknown), as of the
    /// last [`KafkaShared::refresh_offsets`].
    low: Vec<AtomicI64>,
    high: Vec<AtomicI64>,
    /// Offset commits that succeeded (each covers one or more partitions of one worker).
    commits: AtomicU64,
    /// Records skipped on resume: re-read, and stored by the previous run (its dead letters,
    /// and its readings of hours it had closed).
    resume_skipped: AtomicU64,
    /// Delays from produce (the record's timestamp) to durable in the narrow table.
    pub delays: DelayHistogram,
}

impl KafkaShared {
    /// State for a topic of `partitions` partitions read by `workers` workers.
    pub fn new(partitions: usize, workers: usize) -> Self {
        KafkaShared {
            started: Instant::now(),
            last_input_ms: AtomicU64::new(0),
            first_input_ms: AtomicU64::new(u64::MAX),
            fleet_watermark: AtomicU64::new(0),
            worker_watermarks: (0..workers).map(|_| AtomicU64::new(0)).collect(),
            positions: (0..partitions).map(|_| AtomicI64::new(-1)).collect(),
            committed: (0..partitions).map(|_| AtomicI64::new(-1)).collect(),
            low: (0..partitions).map(|_| AtomicI64::new(-1)).collect(),
            high: (0..partitions).map(|_| AtomicI64::new(-1)).collect(),
            commits: AtomicU64::new(0),
            resume_skipped: AtomicU64::new(0),
            delays: DelayHistogram::default(),
        }
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// The job's watermark (minimum over workers still reading), `None` once all stopped.
    pub fn watermark(&self) -> Option<u64> {
        self.worker_watermarks
            .iter()
            .map(|w| w.load(Ordering::Relaxed))
            .min()
            .filter(|&w| w != u64::MAX)
    }

    /// Per partition, the next offset to read, if a worker has read or resumed it.
    pub fn positions(&self) -> Vec<Option<i64>> {
        load_offsets(&self.positions)
    }

    /// Per partition, the offset committed by this job, if any.
    pub fn committed(&self) -> Vec<Option<i64>> {
        load_offsets(&self.committed)
    }

    /// Asks the brokers for each partition's oldest and next offset. Call it every second or
    /// so from a thread of its own: a partition is idle (see the module docs) only when it has
    /// nothing left to read as of the last refresh.
    ///
    /// # Errors
    /// A broker did not answer within `timeout` (the previous values stay).
    pub fn refresh_offsets(
        &self,
        consumer: &BaseConsumer,
        topic: &str,
        timeout: Duration,
    ) -> Result<()> {
        for p in 0..self.high.len() {
            let (low, high) = consumer
                .fetch_watermarks(topic, p as i32, timeout)
                .map_err(|e| Error::Io {
                    path: format!("kafka topic {topic}"),
                    source: std::io::Error::other(format!(
                        "reading the offsets of partition {p}: {e}"
                    )),
                })?;
            self.low[p].store(low, Ordering::Relaxed);
            self.high[p].store(high, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Where partition `p` will be read next: its position, else its committed offset, else
    /// (`auto.offset.reset` = earliest) its oldest offset.
    fn position(&self, p: usize) -> Option<i64> {
        Some(self.positions[p].load(Ordering::Relaxed))
            .filter(|&o| o >= 0)
            .or_else(|| Some(self.low[p].load(Ordering::Relaxed)).filter(|&o| o >= 0))
    }

    /// Whether partition `p` has nothing left to read as far as the last refresh knows (`true`
    /// when nothing is known).
    fn caught_up(&self, p: usize) -> bool {
        let high = self.high[p].load(Ordering::Relaxed);
        high < 0 || self.position(p).is_none_or(|pos| pos >= high)
    }

    /// Records not read yet, summed over partitions (high watermark − position), as of the last
    /// refresh; `None` before the first.
    pub fn lag(&self) -> Option<i64> {
        self.partition_lags().into_iter().sum()
    }

    /// Per partition, records not read yet (high watermark − position, at least 0) as of the
    /// last [`KafkaShared::refresh_offsets`]; `None` for a partition whose high watermark is
    /// not known yet.
    pub fn partition_lags(&self) -> Vec<Option<i64>> {
        (0..self.high.len())
            .map(|p| {
                let high = self.high[p].load(Ordering::Relaxed);
                (high >= 0).then(|| (high - self.position(p).unwrap_or(high)).max(0))
            })
            .collect()
    }

    /// Offset commits that succeeded so far, over all workers.
    pub fn commits(&self) -> u64 {
        self.commits.load(Ordering::Relaxed)
    }

    /// Records skipped after a restart because the previous run had already stored them: its
    /// dead letters, and its readings of hours it had closed (see `CommitMeta`).
    pub fn resume_skipped(&self) -> u64 {
        self.resume_skipped.load(Ordering::Relaxed)
    }

    /// Time between the first and the latest record read, `None` before the first.
    pub fn input_span(&self) -> Option<Duration> {
        let first = self.first_input_ms.load(Ordering::Relaxed);
        let last = self.last_input_ms.load(Ordering::Relaxed);
        (first != u64::MAX).then(|| Duration::from_millis(last.saturating_sub(first)))
    }
}

fn load_offsets(v: &[AtomicI64]) -> Vec<Option<i64>> {
    v.iter()
        .map(|o| Some(o.load(Ordering::Relaxed)).filter(|&o| o >= 0))
        .collect()
}

/// How one worker reads the topic.
#[derive(Debug, Clone)]
pub struct KafkaOptions {
    /// The `[source]` section.
    pub source: SourceConfig,
    /// Primary metric field.
    pub metric: String,
    /// Watermark bound, seconds.
    pub watermark_bound: u64,
    /// The window's allowed lateness, seconds: offsets are committed only past hours that are
    /// final (see [`OffsetCommitter::commit_durable`]).
    pub allowed_lateness: u64,
    /// Stop reading once no worker has read a record for this long.
    pub exit_on_idle: Option<Duration>,
    /// Readings whose cells would already be expired by this TTL (seconds) are counted.
    pub ttl_secs: u64,
    /// Number of partitions of the topic (see [`wait_for_partitions`]).
    pub partitions: usize,
    /// This worker's index.
    pub worker: usize,
    /// Number of workers.
    pub peers: usize,
    /// A reading more than this many seconds ahead of the wall clock is rejected (kind
    /// `future`) and does not move its partition's watermark.
    pub max_future_skew: u64,
}

/// Where a partition could be committed: the next offset, and the newest event time of the
/// readings before it (stored with the commit, restored on restart).
type Position = (i64, Option<i64>);

/// Per worker: which offsets are durable and which readings' hours are still open.
///
/// A partition is committed up to the lower of (a) the next offset after everything durable and
/// (b) the first offset of a reading whose hour is not final yet (the frontier has not passed
/// its end plus the allowed lateness). (b) makes restarts exact for the wide rows' hour
/// summaries, which the window computes from the whole hour: a restarted job re-reads every
/// reading of each hour it may still change, so it rebuilds that hour's window completely.
#[derive(Debug)]
struct OffsetLedger {
    /// Emission time → per local partition, the position after the readings emitted then.
    pending: BTreeMap<u64, Vec<Option<Position>>>,
    /// Per local partition, the position after everything durable.
    durable: Vec<Option<Position>>,
    /// Per local partition: start of each hour not final yet → the position of its first reading.
    open: Vec<BTreeMap<i64, Position>>,
    /// Per local partition, the committed next offset.
    committed: Vec<Option<i64>>,
    /// The hourly window's spec, which says when an hour is final.
    window: operators::WindowSpec,
    /// The newest durable frontier taken in: hours final before it stay final after a restart.
    frontier: u64,
}

fn merge(slot: &mut Option<Position>, next: Position) {
    *slot = Some(match *slot {
        Some((o, ts)) => (o.max(next.0), ts.max(next.1)),
        None => next,
    });
}

impl OffsetLedger {
    fn new(partitions: usize, allowed_lateness: u64) -> Self {
        OffsetLedger {
            pending: BTreeMap::new(),
            durable: vec![None; partitions],
            open: vec![BTreeMap::new(); partitions],
            committed: vec![None; partitions],
            window: crate::codec::hourly::hourly_window(allowed_lateness, None),
            frontier: 0,
        }
    }

    /// Records the record at `offset` of local partition `local`, emitted at `time`; `hour` is
    /// the start of its reading's hour (`None` for a rejected record); `before` and `after` are
    /// the partition's newest event time before and after it.
    fn record(
        &mut self,
        time: u64,
        local: usize,
        offset: i64,
        hour: Option<i64>,
        before: Option<i64>,
        after: Option<i64>,
    ) {
        if let Some(h) = hour {
            self.open[local].entry(h).or_insert((offset, before));
        }
        let n = self.durable.len();
        let slots = match self.pending.last_entry() {
            Some(e) if *e.key() == time => e.into_mut(),
            _ => self.pending.entry(time).or_insert_with(|| vec![None; n]),
        };
        merge(&mut slots[local], (offset + 1, after));
    }

    /// Takes in the probe's frontier: what was emitted before it is durable, and hours that
    /// end (plus lateness) before it are final. `None` (the dataflow drained) makes everything
    /// durable but no hour final: the watermark did not get there.
    fn advance(&mut self, frontier: Option<u64>) {
        while let Some(entry) = self.pending.first_entry() {
            if frontier.is_some_and(|f| *entry.key() >= f) {
                break;
            }
            for (local, slot) in entry.remove().into_iter().enumerate() {
                if let Some(next) = slot {
                    merge(&mut self.durable[local], next);
                }
            }
        }
        if let Some(f) = frontier {
            self.frontier = self.frontier.max(f);
            let window = self.window;
            for open in &mut self.open {
                open.retain(|&h, _| !window.is_final(h.max(0) as u64, f));
            }
        }
    }

    /// `(local partition, position, durable next offset)` to commit: see the type's docs.
    fn to_commit(&self) -> Vec<(usize, Position, i64)> {
        (0..self.durable.len())
            .filter_map(|local| {
                let durable = self.durable[local]?;
                let first_open = self.open[local].values().min_by_key(|p| p.0).copied();
                let pos = match first_open {
                    Some(open) if open.0 < durable.0 => open,
                    _ => durable,
                };
                self.committed[local]
                    .is_none_or(|c| pos.0 > c)
                    .then_some((local, pos, durable.0))
            })
            .collect()
    }
}

/// Commits a worker's durable offsets. Shared by its feed (periodic commits) and the worker
/// (the final commit once the dataflow drained).
#[derive(Clone)]
pub struct OffsetCommitter {
    inner: Rc<CommitterInner>,
}

struct CommitterInner {
    consumer: BaseConsumer,
    source: SourceConfig,
    /// Global partition number of each local partition.
    partitions: Vec<i32>,
    ledger: RefCell<OffsetLedger>,
    probe: ProbeHandle<u64>,
    control: Arc<JobControl>,
    shared: Arc<KafkaShared>,
}

impl std::fmt::Debug for OffsetCommitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OffsetCommitter")
            .field("partitions", &self.inner.partitions)
            .finish_non_exhaustive()
    }
}

impl OffsetCommitter {
    /// Commits, synchronously, every partition up to its durable readings but not past the
    /// first reading of an hour that is not final (see the module docs). Returns how many
    /// partitions were committed. Commits nothing once the job has failed.
    ///
    /// # Errors
    /// The commit request failed (the offsets stay pending and are retried next time).
    pub fn commit_durable(&self) -> Result<usize> {
        let inner = &self.inner;
        // Read the probe before the error flag: a failed sink records its error before it
        // lets its frontier advance.
        let frontier = inner.probe.with_frontier(|f| f.first().copied());
        inner.ledger.borrow_mut().advance(frontier);
        tracing::trace!(?frontier, "durable frontier");
        if inner.control.error().is_some() {
            return Ok(0);
        }
        let ready = inner.ledger.borrow().to_commit();
        if ready.is_empty() {
            return Ok(0);
        }
        let final_frontier = inner.ledger.borrow().frontier;
        let mut tpl = TopicPartitionList::with_capacity(ready.len());
        for &(local, (next, newest), durable) in &ready {
            let mut elem = tpl.add_partition(&inner.source.topic, inner.partitions[local]);
            elem.set_offset(Offset::Offset(next))
                .map_err(|e| kafka_error(&inner.source, e.to_string()))?;
            let meta = CommitMeta {
                newest,
                frontier: Some(final_frontier),
                durable: Some(durable),
            };
            elem.set_metadata(meta.to_string());
        }
        inner
            .consumer
            .commit(&tpl, CommitMode::Sync)
            .map_err(|e| kafka_error(&inner.source, format!("offset commit failed: {e}")))?;
        let mut ledger = inner.ledger.borrow_mut();
        for &(local, (next, _), _) in &ready {
            ledger.committed[local] = Some(next);
            inner.shared.committed[inner.partitions[local] as usize].store(next, Ordering::Relaxed);
        }
        inner.shared.commits.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            partitions = ready.len(),
            "committed offsets of durable readings"
        );
        Ok(ready.len())
    }

    /// The final commit, once the worker's dataflow has drained (its probe is empty).
    ///
    /// # Errors
    /// As [`OffsetCommitter::commit_durable`].
    /// A failed commit is tried again for up to [`FINAL_COMMIT_RETRY_FOR`] (a group coordinator
    /// that is moving answers `NotCoordinator` for a while).
    pub fn finish(&self) -> Result<()> {
        retrying(
            "the final offset commit",
            FINAL_COMMIT_RETRY_FOR,
            || false,
            || self.commit_durable(),
        )
        .map(|_| ())
    }
}

/// Reading position and event time of one assigned partition.
#[derive(Debug)]
struct PartState {
    partition: i32,
    newest: Option<i64>,
    last_seen: Instant,
    /// After a restart, until the partition passes the previous run's durable offset: that
    /// offset and the previous run's frontier (see [`CommitMeta`]).
    resume: Option<(i64, u64)>,
    /// Readings skipped on resume because their hour was already final and durable.
    skipped: u64,
}

/// An [`EventFeed`] over one worker's partitions of a Kafka topic.
pub struct KafkaFeed {
    opts: KafkaOptions,
    committer: OffsetCommitter,
    shared: Arc<KafkaShared>,
    stats: Arc<Stats>,
    control: Arc<JobControl>,
    parts: Vec<PartState>,
    arrivals: Arc<Mutex<VecDeque<i64>>>,
    watermark: u64,
    idle_timeout: Duration,
    commit_every: Duration,
    next_commit: Instant,
    expired_before: i64,
    clock: Clock,
    local: [u64; 4],
    errors: u64,
    last_error_note: Option<Instant>,
    /// When the feed was asked to stop (SIGTERM, idle), if it was.
    stopping_since: Option<Instant>,
    done: bool,
}

impl std::fmt::Debug for KafkaFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaFeed")
            .field("opts", &self.opts)
            .field("parts", &self.parts)
            .field("watermark", &self.watermark)
            .finish_non_exhaustive()
    }
}

const READ: usize = 0;
const OK: usize = 1;
const REJECTED: usize = 2;
const EXPIRED: usize = 3;

/// What hourglass stores with a committed offset, as `max_ts=<s>;frontier=<s>;durable=<offset>`
/// (older commits hold only `max_ts`).
///
/// The committed offset trails what is durable: it stops at the first reading of an hour that
/// is not final yet, so a restart rebuilds that hour's window whole. Records between it and
/// `durable` were read and stored by the previous run, and among them may be readings of hours
/// that the previous run had already closed (the frontier passed their end plus the allowed
/// lateness). A restarted run must not open those hours again, or it would rewrite their summary
/// cells from the few readings it re-reads. So it starts its watermark at `frontier` (hours
/// final then stay final) and skips the re-read readings of final hours before `durable`
/// (their narrow rows and wide cells are durable already); readings after `durable` of a final
/// hour are late, as they were for the previous run. Rejected records before `durable` are
/// skipped too: their dead letters are flushed (the side outputs report to the durable probe),
/// so a restart does not write them again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct CommitMeta {
    /// The partition's newest event time before the committed offset.
    newest: Option<i64>,
    /// The durable frontier (watermark, seconds) when committing.
    frontier: Option<u64>,
    /// The next offset after everything durable in the partition.
    durable: Option<i64>,
}

impl CommitMeta {
    fn parse(metadata: &str) -> Self {
        let mut meta = CommitMeta::default();
        for field in metadata.split(';') {
            match field.split_once('=') {
                Some(("max_ts", v)) => meta.newest = v.parse().ok(),
                Some(("frontier", v)) => meta.frontier = v.parse().ok(),
                Some(("durable", v)) => meta.durable = v.parse().ok(),
                _ => {}
            }
        }
        meta
    }
}

impl std::fmt::Display for CommitMeta {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut sep = "";
        for (name, value) in [
            ("max_ts", self.newest.map(|v| v.to_string())),
            ("frontier", self.frontier.map(|v| v.to_string())),
            ("durable", self.durable.map(|v| v.to_string())),
        ] {
            if let Some(v) = value {
                write!(f, "{sep}{name}={v}")?;
                sep = ";";
            }
        }
        Ok(())
    }
}

/// How long the final offset commit is tried again after errors.
const FINAL_COMMIT_RETRY_FOR: Duration = Duration::from_secs(30);

/// How long a stopping feed keeps its watermark for the durable frontier to reach it (see
/// [`KafkaFeed::ready_to_stop`]).
const STOP_DRAIN_FOR: Duration = Duration::from_secs(10);

/// How long a worker keeps asking for its group's committed offsets while the brokers answer
/// with errors (a group coordinator that is moving or still loading answers `NotCoordinator`
/// or `CoordinatorLoadInProgress` for a while).
const COMMITTED_RETRY_FOR: Duration = Duration::from_secs(120);

/// Calls `attempt` until it succeeds, again after each error (with a warning naming `what`;
/// pauses from 200 ms doubling up to 5 s) for up to `limit` or until `stopped()`. Returns the
/// last error after that.
fn retrying<T, E: std::fmt::Display>(
    what: &str,
    limit: Duration,
    stopped: impl Fn() -> bool,
    mut attempt: impl FnMut() -> std::result::Result<T, E>,
) -> std::result::Result<T, E> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(200);
    loop {
        match attempt() {
            Ok(v) => return Ok(v),
            Err(e) if started.elapsed() < limit && !stopped() => {
                tracing::warn!(error = %e, "{what} failed (retrying)");
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_secs(5));
            }
            Err(e) => return Err(e),
        }
    }
}

/// The committed offsets of `wanted` in the job's group, asked again (with a warning) while the
/// brokers answer with errors, for up to [`COMMITTED_RETRY_FOR`] or until the job stops.
fn committed_offsets(
    consumer: &BaseConsumer,
    wanted: &TopicPartitionList,
    source: &SourceConfig,
    control: &JobControl,
) -> Result<TopicPartitionList> {
    let what = format!("reading the committed offsets of group {}", source.group_id);
    let started = Instant::now();
    retrying(
        &what,
        COMMITTED_RETRY_FOR,
        || control.stopped(),
        || consumer.committed_offsets(wanted.clone(), BROKER_TIMEOUT),
    )
    .map_err(|e| {
        kafka_error(
            source,
            format!("{what} (for {}s): {e}", started.elapsed().as_secs()),
        )
    })
}

impl KafkaFeed {
    /// Connects worker `opts.worker`, assigns its partitions and positions each at its committed
    /// offset (or `auto.offset.reset`, default earliest, when it has none), restoring the
    /// partition's newest event time from the commit's metadata. `probe` is the probe the graph
    /// reports durability to.
    ///
    /// # Errors
    /// An invalid client setting, or the brokers did not answer for committed offsets.
    pub fn open(
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
        // The previous run's frontier, if every partition of this worker has one.
        let mut resume_frontier: Option<u64> = (!parts.is_empty()).then_some(u64::MAX);
        let mut ledger = OffsetLedger::new(partitions.len(), opts.allowed_lateness);
        if !partitions.is_empty() {
            let mut wanted = TopicPartitionList::new();
            for &p in &partitions {
                wanted.add_partition(&source.topic, p);
            }
            let committed = committed_offsets(&consumer, &wanted, source, &control)?;
            let mut assign = TopicPartitionList::new();
            for (local, part) in parts.iter_mut().enumerate() {
                let elem = committed.find_partition(&source.topic, part.partition);
                let start = match elem.as_ref().map(|e| e.offset()) {
                    Some(Offset::Offset(o)) if o >= 0 => {
                        ledger.committed[local] = Some(o);
                        shared.committed[part.partition as usize].store(o, Ordering::Relaxed);
                        shared.positions[part.partition as usize].store(o, Ordering::Relaxed);
                        let meta = elem
                            .as_ref()
                            .map(|e| CommitMeta::parse(e.metadata()))
                            .unwrap_or_default();
                        part.newest = meta.newest;
                        if let (Some(durable), Some(frontier)) = (meta.durable, meta.frontier) {
                            part.resume = (durable > o).then_some((durable, frontier));
                        }
                        resume_frontier = resume_frontier.zip(meta.frontier).map(|(a, b)| a.min(b));
                        Offset::Offset(o)
                    }
                    _ => {
                        resume_frontier = None;
                        Offset::Stored
                    }
                };
                tracing::info!(
                    worker = opts.worker,
                    partition = part.partition,
                    start = ?start,
                    newest = ?part.newest,
                    resume = ?part.resume,
                    "assigned"
                );
                assign
                    .add_partition_offset(&source.topic, part.partition, start)
                    .map_err(|e| kafka_error(source, e.to_string()))?;
            }
            consumer
                .assign(&assign)
                .map_err(|e| kafka_error(source, format!("assigning partitions: {e}")))?;
        }
        let committer = OffsetCommitter {
            inner: Rc::new(CommitterInner {
                consumer,
                source: source.clone(),
                partitions,
                ledger: RefCell::new(ledger),
                probe,
                control: control.clone(),
                shared: shared.clone(),
            }),
        };
        let expired_before = (crate::time::now_ms() / 1000).saturating_sub(opts.ttl_secs as i64);
        let mut feed = KafkaFeed {
            idle_timeout: Duration::from_secs(source.idle_partition_timeout_secs),
            commit_every: Duration::from_millis(source.commit_interval_ms),
            next_commit: now,
            opts,
            committer,
            shared,
            stats,
            control,
            parts,
            arrivals: Arc::new(Mutex::new(VecDeque::new())),
            // Hours the previous run had closed stay closed (see `CommitMeta`).
            watermark: resume_frontier.unwrap_or(0),
            expired_before,
            clock: Clock::start(),
            local: [0; 4],
            errors: 0,
            last_error_note: None,
            stopping_since: None,
            done: false,
        };
        feed.update_watermark(now);
        Ok(feed)
    }

    /// The handle that commits this feed's durable offsets.
    pub fn committer(&self) -> OffsetCommitter {
        self.committer.clone()
    }

    /// Wraps the worker's table writer so that it records, for each narrow row it makes durable,
    /// the delay since the record was produced (into [`KafkaShared::delays`]).
    pub fn timed_writer(&self, writer: Box<dyn TableWriter>) -> TimedWriter {
        TimedWriter {
            inner: writer,
            arrivals: self.arrivals.clone(),
            shared: self.shared.clone(),
            unflushed: 0,
        }
    }

    fn publish(&mut self) {
        let s = &self.stats;
        for (i, counter) in [&s.read, &s.ok, &s.rejected, &s.expired]
            .into_iter()
            .enumerate()
        {
            add(counter, std::mem::take(&mut self.local[i]));
        }
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

    /// A stopping feed reads nothing more but holds its watermark until the durable frontier
    /// has reached the lowest watermark among this process's running workers, for at most
    /// [`STOP_DRAIN_FOR`]: the ledger then sees every hour that watermark made final, so the
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
        let inner = &self.committer.inner;
        let frontier = inner.probe.with_frontier(|f| f.first().copied());
        if frontier.is_none_or(|f| f >= target) {
            inner.ledger.borrow_mut().advance(frontier);
            return true;
        }
        if now.duration_since(since) >= STOP_DRAIN_FOR {
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

    fn finish(&mut self) -> Poll<Decoded> {
        self.publish();
        if !self.done {
            self.done = true;
            self.shared.worker_watermarks[self.opts.worker].store(u64::MAX, Ordering::Relaxed);
        }
        Poll::Done
    }

    fn on_error(&mut self, e: &KafkaError) {
        let code = e.rdkafka_error_code();
        if matches!(e, KafkaError::MessageConsumptionFatal(_))
            || code.is_some_and(|c| FATAL_CODES.contains(&c))
        {
            self.control.fail(format!(
                "reading kafka topic {}: {e}; check the topic, the credentials in \
                 [source.rdkafka] and the brokers",
                self.opts.source.topic
            ));
            return;
        }
        self.errors += 1;
        if self
            .last_error_note
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(10))
        {
            self.last_error_note = Some(Instant::now());
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

impl EventFeed for KafkaFeed {
    type Item = Decoded;

    fn poll(&mut self) -> Poll<Decoded> {
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
        if self.local[READ] >= 4096 {
            self.publish();
        }
        let now = Instant::now();
        self.maybe_commit(now);
        let msg = match self.committer.inner.consumer.poll(Duration::ZERO) {
            None => {
                self.update_watermark(now);
                self.publish();
                if let Some(idle) = self.opts.exit_on_idle {
                    let last = self.shared.last_input_ms.load(Ordering::Relaxed);
                    if self.shared.now_ms().saturating_sub(last) >= idle.as_millis() as u64 {
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
        self.local[READ] += 1;
        let mut decoded = decode_line(offset.max(0) as u64, raw, &self.opts.metric);
        // A device clock running ahead must not move the partition's watermark: every other
        // device's readings would become late.
        if let Ok(r) = &decoded {
            let now = self.clock.now_secs();
            let skew = self.opts.max_future_skew;
            if r.ts > now.saturating_add(i64::try_from(skew).unwrap_or(i64::MAX)) {
                decoded = Err(Box::new(Rejected {
                    line: offset.max(0) as u64,
                    partition: None,
                    reason: Reason::Future {
                        ts: r.ts,
                        reference: "the wall clock".to_string(),
                        reference_ts: now,
                        limit_secs: skew,
                    },
                    raw: raw.to_vec(),
                }));
            }
        }
        if let Err(rejected) = &mut decoded {
            rejected.partition = Some(partition);
        }
        let emitted_at = self.watermark;
        let part = &mut self.parts[local];
        part.last_seen = now;
        let before = part.newest;
        // The start of the reading's hour (`None`: a rejected record).
        let start = decoded
            .as_ref()
            .ok()
            .map(|r| crate::codec::hourly::hour_start(r.ts));
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
                // records, and readings of the hours it had closed.
                let window = crate::codec::hourly::hourly_window(self.opts.allowed_lateness, None);
                skip = start.is_none_or(|s| window.is_final(s.max(0) as u64, frontier));
            }
        }
        if let Ok(r) = &decoded {
            part.newest = Some(part.newest.map_or(r.ts, |n| n.max(r.ts)));
        }
        if skip {
            part.skipped += 1;
            self.shared.resume_skipped.fetch_add(1, Ordering::Relaxed);
        } else {
            match &decoded {
                Ok(r) => {
                    self.local[OK] += 1;
                    if r.ts < self.expired_before {
                        self.local[EXPIRED] += 1;
                    }
                    let produced = msg.timestamp().to_millis().unwrap_or(0);
                    if let Ok(mut q) = self.arrivals.lock() {
                        q.push_back(produced);
                    }
                }
                Err(_) => self.local[REJECTED] += 1,
            }
        }
        let hour = start.filter(|_| !skip);
        let after = part.newest;
        self.shared.positions[partition as usize].store(offset + 1, Ordering::Relaxed);
        self.committer
            .inner
            .ledger
            .borrow_mut()
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

/// A [`TableWriter`] that measures produce → durable delays of narrow rows (see
/// [`KafkaFeed::timed_writer`]). Narrow rows reach a worker's writer in the order its feed
/// read them, so the n-th narrow row flushed belongs to the n-th reading read.
pub struct TimedWriter {
    inner: Box<dyn TableWriter>,
    arrivals: Arc<Mutex<VecDeque<i64>>>,
    shared: Arc<KafkaShared>,
    unflushed: usize,
}

impl std::fmt::Debug for TimedWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TimedWriter")
            .field("unflushed", &self.unflushed)
            .finish_non_exhaustive()
    }
}

impl TableWriter for TimedWriter {
    fn write(&mut self, mutations: Vec<Mutation>) -> sinks::Result<()> {
        self.unflushed += mutations
            .iter()
            .filter(|m| matches!(m, Mutation::Put { table, .. } if *table == NARROW_TABLE))
            .count();
        self.inner.write(mutations)
    }

    fn flush(&mut self) -> sinks::Result<()> {
        self.inner.flush()?;
        let now = chrono::Utc::now().timestamp_millis();
        let produced: Vec<i64> = match self.arrivals.lock() {
            Ok(mut q) => {
                let n = self.unflushed.min(q.len());
                q.drain(..n).collect()
            }
            Err(_) => Vec::new(),
        };
        self.unflushed = 0;
        self.shared
            .delays
            .record(produced.into_iter().map(|p| now - p));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const H: i64 = 1724101200;

    #[test]
    fn ledger_commits_only_what_the_probe_passed() {
        let mut l = OffsetLedger::new(2, 0);
        l.record(0, 0, 4, Some(H), None, Some(H + 10));
        l.record(0, 1, 2, None, None, None);
        l.record(70, 0, 8, Some(H + 3600), Some(H + 10), Some(H + 3601));
        l.record(100, 1, 3, Some(H + 3600), None, Some(H + 3700));
        assert!(l.to_commit().is_empty());
        // Frontier at 70: time 0 is durable, 70 is not; hour H is not final before H + 3600.
        l.advance(Some(70));
        assert_eq!(l.to_commit(), vec![(0, (4, None), 5), (1, (3, None), 3)]);
        // Everything durable; hour H is final, hour H + 3600 is not: up to its first reading.
        l.advance(Some(H as u64 + 3600));
        assert_eq!(
            l.to_commit(),
            vec![(0, (8, Some(H + 10)), 9), (1, (3, None), 4)]
        );
        assert_eq!(l.frontier, H as u64 + 3600);
        l.committed = vec![Some(8), Some(3)];
        assert!(l.to_commit().is_empty());
        // Drained: no hour becomes final by that alone.
        l.advance(None);
        assert!(l.to_commit().is_empty());
        l.advance(Some(H as u64 + 7200));
        assert_eq!(
            l.to_commit(),
            vec![(0, (9, Some(H + 3601)), 9), (1, (4, Some(H + 3700)), 4)]
        );
        assert!(l.pending.is_empty());
        assert_eq!(l.frontier, H as u64 + 7200);
    }

    #[test]
    fn metadata_round_trips() {
        let meta = CommitMeta {
            newest: Some(1724101200),
            frontier: Some(1724101170),
            durable: Some(42),
        };
        assert_eq!(
            meta.to_string(),
            "max_ts=1724101200;frontier=1724101170;durable=42"
        );
        assert_eq!(CommitMeta::parse(&meta.to_string()), meta);
        // What earlier versions committed, and what others may have.
        let old = CommitMeta::parse("max_ts=1724101200");
        assert_eq!(
            (old.newest, old.frontier, old.durable),
            (Some(1724101200), None, None)
        );
        assert_eq!(CommitMeta::parse(""), CommitMeta::default());
        assert_eq!(CommitMeta::parse("something else"), CommitMeta::default());
        let partial = CommitMeta {
            frontier: Some(7),
            ..CommitMeta::default()
        };
        assert_eq!(partial.to_string(), "frontier=7");
    }

    #[test]
    fn delay_quantiles() {
        let h = DelayHistogram::default();
        assert_eq!(h.quantiles(&[0.5]), (0, vec![None]));
        h.record((1..=100).chain([-5, 10_000_000]));
        let (n, q) = h.quantiles(&[0.0, 0.5, 0.99, 1.0]);
        assert_eq!(n, 102);
        assert_eq!(q, vec![Some(0), Some(50), Some(100), Some(600_000)]);
    }

    fn feed_with(parts: &[(i32, Option<i64>, u64)], shared: Arc<KafkaShared>) -> KafkaFeed {
        // A feed without a broker: the consumer is created but never connects.
        let source = SourceConfig {
            brokers: "127.0.0.1:1".into(),
            ..SourceConfig::default()
        };
        let now = Instant::now();
        let opts = KafkaOptions {
            source: source.clone(),
            metric: "temp".into(),
            watermark_bound: 30,
            allowed_lateness: 3600,
            exit_on_idle: None,
            ttl_secs: u64::MAX / 4,
            partitions: parts.len(),
            worker: 0,
            peers: 1,
            max_future_skew: 3600,
        };
        let committer = OffsetCommitter {
            inner: Rc::new(CommitterInner {
                consumer: consumer(&source, "test").unwrap(),
                source,
                partitions: parts.iter().map(|p| p.0).collect(),
                ledger: RefCell::new(OffsetLedger::new(parts.len(), 3600)),
                probe: ProbeHandle::new(),
                control: Arc::default(),
                shared: shared.clone(),
            }),
        };
        KafkaFeed {
            opts,
            committer,
            shared,
            stats: Arc::default(),
            control: Arc::default(),
            parts: parts
                .iter()
                .map(|&(partition, newest, idle_for)| PartState {
                    partition,
                    newest,
                    last_seen: now - Duration::from_secs(idle_for),
                    resume: None,
                    skipped: 0,
                })
                .collect(),
            arrivals: Arc::default(),
            watermark: 0,
            idle_timeout: Duration::from_secs(60),
            commit_every: Duration::from_secs(1),
            next_commit: now,
            expired_before: 0,
            clock: Clock::start(),
            local: [0; 4],
            errors: 0,
            last_error_note: None,
            stopping_since: None,
            done: false,
        }
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
