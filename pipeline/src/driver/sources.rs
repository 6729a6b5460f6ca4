//! The driver's two [`Source`]s, for any job's decoder: a recording ([`RecordingSource`]) and a
//! Kafka topic ([`TopicSource`]); a job gives its options and how its report is made.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use timely::dataflow::ProbeHandle;

use super::{Cluster, Job, KafkaStatus, Progress, Report, Settings, Source, WorkerInput};
use crate::config::SourceConfig;
use crate::control::JobControl;
use crate::source::kafka::{self, KafkaFeed, KafkaOptions, KafkaShared};
use crate::source::replay::{ReplayFeed, ReplayOptions};
use crate::source::LineDecoder;
use crate::stats::{Stats, Summary};
use crate::store::Backend;
use crate::Result;

/// How a job makes its end-of-run report of the counters (its own counters beside).
pub type MakeReport<R> = Box<dyn Fn(Summary, &Stats) -> R + Send + Sync>;

/// A recording, read by every worker (each keeps its share of the lines).
pub struct RecordingSource<D, R> {
    /// The records' decoder.
    pub decoder: D,
    /// Worker 0's options; the others differ by `worker`. A `path` of `-` is stdin, which can
    /// be read once: worker 0 (of process 0 in a cluster) takes every line.
    pub base: ReplayOptions,
    /// Worker threads of this process.
    pub threads: usize,
    /// The engine's counters.
    pub stats: Arc<Stats>,
    /// The job's control.
    pub control: Arc<JobControl>,
    /// The end-of-run report.
    pub report: MakeReport<R>,
}

impl<D, R> std::fmt::Debug for RecordingSource<D, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordingSource")
            .field("path", &self.base.path)
            .field("threads", &self.threads)
            .finish_non_exhaustive()
    }
}

impl<D, R> RecordingSource<D, R> {
    fn stdin(&self) -> bool {
        self.base.path == Path::new("-")
    }
}

impl<D, R> Source for RecordingSource<D, R>
where
    D: LineDecoder + Clone + Sync,
    R: Report + 'static,
{
    type Feed = ReplayFeed<D>;
    type Watch = Progress;
    type Report = R;

    fn workers(&self) -> usize {
        self.threads
    }

    /// The input's path may differ between hosts; whether it is stdin may not, or lines
    /// would be read twice or not at all.
    fn settings(&self) -> Settings {
        vec![
            ("replay.stdin".into(), self.stdin().to_string()),
            ("replay.speed".into(), format!("{:?}", self.base.speed)),
            ("replay.shift".into(), self.base.shift.to_string()),
        ]
    }

    fn flush_every(&self) -> Duration {
        Duration::from_secs(1)
    }

    /// At full speed, event time passes many seconds per wall second: flushing on each would
    /// write small batches through the store's memtable instead of large sorted ones. Nobody
    /// waits on a replay's durability before its end, which always flushes.
    fn flush_min_gap(&self) -> Duration {
        if self.base.speed.is_none() {
            Duration::from_secs(1)
        } else {
            Duration::ZERO
        }
    }

    fn open(
        &self,
        worker: usize,
        _probe: &ProbeHandle<u64>,
        backend: &Backend,
    ) -> Result<WorkerInput<ReplayFeed<D>>, String> {
        let mut opts = self.base.clone();
        opts.worker = worker;
        if self.stdin() {
            opts.peers = 1;
        }
        let (stats, control) = (self.stats.clone(), self.control.clone());
        let decoder = self.decoder.clone();
        let feed = if self.stdin() && worker > 0 {
            Ok(ReplayFeed::empty(decoder, opts, stats, control))
        } else {
            ReplayFeed::open(decoder, opts, stats, control)
        };
        Ok(WorkerInput {
            feed: feed.map_err(|e| e.to_string())?,
            writer: backend.writer(),
            finish: None,
        })
    }

    /// A progress bar over the input's size (unknown for stdin and pipes).
    fn watch(&self) -> Result<Progress> {
        let total = std::fs::metadata(&self.base.path)
            .ok()
            .filter(|m| m.is_file())
            .map(|m| m.len());
        Ok(Progress::start(self.stats.clone(), total))
    }

    fn report(&self, counters: Summary, stats: &Stats) -> R {
        (self.report)(counters, stats)
    }
}

/// A topic's partitions spread over the workers of every process of a cluster.
#[derive(Debug)]
pub struct TopicSplit {
    /// The topic's partitions.
    pub partitions: usize,
    /// Worker threads of each process.
    pub workers: usize,
    /// Workers over every process, by timely's global index.
    pub peers: usize,
    /// State shared by this process's feeds, the status line and `/metrics`.
    pub shared: Arc<KafkaShared>,
}

impl Job {
    /// Waits for `source`'s topic (stoppable by a signal) and spreads its partitions over
    /// `workers` threads (by default one per core) in each process of `cluster`; `/metrics`
    /// reports their state.
    ///
    /// # Errors
    /// The topic's metadata cannot be read, or the job was stopped while waiting.
    pub fn split_topic(
        &self,
        source: &SourceConfig,
        cluster: &Cluster,
        workers: Option<usize>,
    ) -> Result<TopicSplit> {
        let partitions = kafka::wait_for_partitions(source, self.control())?;
        let workers = workers.unwrap_or_else(super::default_workers);
        let peers = cluster.peers(workers);
        let first = cluster.process * workers;
        let shared = Arc::new(KafkaShared::for_process(
            partitions,
            peers,
            first..first + workers,
        ));
        self.metrics().attach_kafka(shared.clone());
        Ok(TopicSplit {
            partitions,
            workers,
            peers,
            shared,
        })
    }
}

/// A Kafka topic: worker `i` (over every process of a cluster) reads the partitions
/// `p % peers == i` and commits their offsets once what every worker read before them is
/// durable.
pub struct TopicSource<D, R> {
    /// The records' decoder.
    pub decoder: D,
    /// Worker 0's options; the others differ by `worker`.
    pub base: KafkaOptions,
    /// State shared by the workers' feeds, the status line and `/metrics`.
    pub shared: Arc<KafkaShared>,
    /// Worker threads of this process.
    pub threads: usize,
    /// `process I` in a cluster, for the status line.
    pub process: Option<String>,
    /// How often the status line is printed.
    pub status_every: Duration,
    /// The engine's counters.
    pub stats: Arc<Stats>,
    /// The job's control.
    pub control: Arc<JobControl>,
    /// See [`Source::early_fire_past_hours`]: a job with hourly windows needs it, as early
    /// firings are what let committed offsets pass an open hour's records.
    pub early_fire_past_hours: bool,
    /// Whether each worker's writer records the delay from produce to durable
    /// ([`KafkaFeed::timed_writer`]).
    pub timed_writes: bool,
    /// What the job stores (`readings`, `tags`), for the message of a failed final commit.
    pub stored: &'static str,
    /// The end-of-run report.
    pub report: MakeReport<R>,
}

impl<D, R> TopicSource<D, R> {
    /// `job`'s source of the topic that `split` spreads over `cluster`, read with `decoder`
    /// from worker 0's options `base`, reported by `report`: a status line every 10 s, no
    /// early firings, no timed writes.
    pub fn new(
        job: &Job,
        cluster: &Cluster,
        split: TopicSplit,
        decoder: D,
        base: KafkaOptions,
        report: MakeReport<R>,
    ) -> Self {
        TopicSource {
            decoder,
            base,
            shared: split.shared,
            threads: split.workers,
            process: cluster.label(),
            status_every: Duration::from_secs(10),
            stats: job.stats().clone(),
            control: job.control().clone(),
            early_fire_past_hours: false,
            timed_writes: false,
            stored: "records",
            report,
        }
    }
}

impl<D, R> std::fmt::Debug for TopicSource<D, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopicSource")
            .field("topic", &self.base.source.topic)
            .field("threads", &self.threads)
            .finish_non_exhaustive()
    }
}

impl<D, R> Source for TopicSource<D, R>
where
    D: LineDecoder + Clone + Sync,
    R: Report + 'static,
{
    type Feed = KafkaFeed<D>;
    type Watch = KafkaStatus;
    type Report = R;

    fn workers(&self) -> usize {
        self.threads
    }

    fn settings(&self) -> Settings {
        let s = &self.base.source;
        vec![
            ("source.topic".into(), s.topic.clone()),
            ("source.brokers".into(), s.brokers.clone()),
            ("source.group_id".into(), s.group_id.clone()),
            ("partitions".into(), self.base.partitions.to_string()),
        ]
    }

    /// `source.flush_interval_ms`: short, so that records become visible soon after they are
    /// produced.
    fn flush_every(&self) -> Duration {
        Duration::from_millis(self.base.source.flush_interval_ms)
    }

    /// A catch-up races through event time, and a flush each time the frontier passes wrote a
    /// batch per input batch through the embedded store's memtable (`perf` of a 100k-device
    /// catch-up: skiplist `memcmp`, filters of tiny tables): at most one such flush per
    /// `flush_interval_ms`, which a live record may wait anyway.
    fn flush_min_gap(&self) -> Duration {
        self.flush_every()
    }

    fn early_fire_past_hours(&self) -> bool {
        self.early_fire_past_hours
    }

    fn open(
        &self,
        worker: usize,
        probe: &ProbeHandle<u64>,
        backend: &Backend,
    ) -> Result<WorkerInput<KafkaFeed<D>>, String> {
        let opts = KafkaOptions {
            worker,
            ..self.base.clone()
        };
        let feed = KafkaFeed::open(
            self.decoder.clone(),
            opts,
            self.shared.clone(),
            self.stats.clone(),
            self.control.clone(),
            probe.clone(),
        )
        .map_err(|e| format!("worker {worker}: {e}"))?;
        let committer = feed.committer();
        let writer = if self.timed_writes {
            Box::new(feed.timed_writer(backend.writer()))
        } else {
            backend.writer()
        };
        let stored = self.stored;
        Ok(WorkerInput {
            feed,
            writer,
            finish: Some(Box::new(move || {
                committer.finish().map_err(|e| {
                    format!(
                        "final offset commit failed: {e}; the stored {stored} are safe and will \
                         be re-read (idempotently) on restart"
                    )
                })
            })),
        })
    }

    fn watch(&self) -> Result<KafkaStatus> {
        let source = &self.base.source;
        Ok(KafkaStatus::start(
            self.process.clone(),
            self.status_every,
            kafka::consumer(source, "hourglass-status")?,
            source.topic.clone(),
            self.base.partitions,
            self.shared.clone(),
            self.stats.clone(),
        ))
    }

    fn report(&self, counters: Summary, stats: &Stats) -> R {
        (self.report)(counters, stats)
    }
}
