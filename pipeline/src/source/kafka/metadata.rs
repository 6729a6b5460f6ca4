//! What the brokers say about a topic (its partitions, each partition's oldest and next
//! offset) and the state a running Kafka job's workers share ([`KafkaShared`]).

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

use super::client::{consumer, kafka_error};
use super::histogram::DelayHistogram;
use crate::config::SourceConfig;
use crate::control::JobControl;
use crate::{Error, Result};

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

/// State of a running Kafka job shared by its workers, for the watermark, exit-on-idle and the
/// status line.
#[derive(Debug)]
pub struct KafkaShared {
    pub(super) started: Instant,
    /// Milliseconds after `started` of the latest record any worker read.
    pub(super) last_input_ms: AtomicU64,
    /// Milliseconds after `started` of the first record any worker read (`u64::MAX`: none yet).
    pub(super) first_input_ms: AtomicU64,
    /// The most advanced watermark of a worker with an active partition.
    pub(super) fleet_watermark: AtomicU64,
    /// Each worker's watermark; `u64::MAX` once it stopped reading.
    pub(super) worker_watermarks: Vec<AtomicU64>,
    /// Per partition, the next offset to read (`-1`: unknown).
    pub(super) positions: Vec<AtomicI64>,
    /// Per partition, the committed offset (`-1`: none).
    pub(super) committed: Vec<AtomicI64>,
    /// Per partition, the oldest and the next offset on the brokers (`-1`: unknown), as of the
    /// last [`KafkaShared::refresh_offsets`].
    low: Vec<AtomicI64>,
    pub(super) high: Vec<AtomicI64>,
    /// Offset commits that succeeded (each covers one or more partitions of one worker).
    pub(super) commits: AtomicU64,
    /// Records skipped on resume: re-read, and stored by the previous run (its dead letters,
    /// and its readings of hours it had closed).
    pub(super) resume_skipped: AtomicU64,
    /// Delays from produce (the record's timestamp) to durable in the narrow table.
    pub delays: DelayHistogram,
    /// How long each flush of a worker's table writer took (the store's call time), ms.
    pub flushes: DelayHistogram,
    /// How long each write to a worker's table writer took, ms: the calls it sends before a
    /// flush, when a table's batch fills up (a worker reads nothing meanwhile).
    pub writes: DelayHistogram,
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
            flushes: DelayHistogram::default(),
            writes: DelayHistogram::default(),
        }
    }

    pub(super) fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// State for one process of a timely cluster, whose workers are `local` among `peers`: the
    /// other processes' workers count as not reading here, so that this process's watermark and
    /// stop drain wait only for its own (timely's progress tracking spans the processes).
    pub fn for_process(partitions: usize, peers: usize, local: std::ops::Range<usize>) -> Self {
        let shared = Self::new(partitions, peers);
        for (i, w) in shared.worker_watermarks.iter().enumerate() {
            if !local.contains(&i) {
                w.store(u64::MAX, Ordering::Relaxed);
            }
        }
        shared
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
    pub(super) fn caught_up(&self, p: usize) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_process_waits_only_for_its_own_workers() {
        let set = |shared: &KafkaShared| {
            shared.worker_watermarks[2].store(100, Ordering::Relaxed);
            shared.worker_watermarks[3].store(50, Ordering::Relaxed);
        };
        // Workers 2 and 3 of 4 are this process's; 0 and 1 read in the other process.
        let process = KafkaShared::for_process(4, 4, 2..4);
        set(&process);
        assert_eq!(process.watermark(), Some(50));
        let alone = KafkaShared::new(4, 4);
        set(&alone);
        assert_eq!(alone.watermark(), Some(0));
    }
}
