//! Where the profile job's events come from: a recording (`hourglass profile replay`) or a
//! Kafka topic (`hourglass profile run`), as the engine's [`Source`]s.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use pipeline::control::JobControl;
use pipeline::driver::{KafkaStatus, Progress, Settings, Source, WorkerInput};
use pipeline::source::kafka::{self, KafkaFeed, KafkaOptions, KafkaShared};
use pipeline::source::replay::{ReplayFeed, ReplayOptions};
use pipeline::stats::{Stats, Summary};
use pipeline::store::Backend;
use timely::dataflow::ProbeHandle;

use super::decoder::ProfileDecoder;
use super::stats::{ProfileReport, ProfileStats};
use crate::config::ProfileConfig;
use crate::tables::PROFILE_TABLE;

/// Stored profile cells never expire by TTL: no event counts as expired when read.
const NO_TTL: u64 = u64::MAX;

/// The event-time "window" a Kafka feed commits offsets past: one second wide, closing as soon
/// as the watermark passes it. The profile job keeps no window; what bounds its commits is the
/// durable probe alone.
pub fn commit_window() -> operators::WindowSpec {
    operators::WindowSpec {
        width: 1,
        allowed_lateness: 0,
        early_fire: None,
        max_pending: None,
    }
}

/// A recording of tag events, read by every worker, each taking the lines of its users.
#[derive(Debug)]
pub struct RecordingSource {
    /// The events' decoder.
    pub decoder: ProfileDecoder,
    /// The input, `-` for stdin.
    pub path: PathBuf,
    /// Watermark bound and allowed skew ahead, seconds.
    pub watermark_bound: u64,
    /// See [`pipeline::config::WindowConfig::future_skew_secs`].
    pub max_future_skew: u64,
    /// Worker threads of this process.
    pub threads: usize,
    /// Workers over every process.
    pub peers: usize,
    /// The engine's counters and control.
    pub stats: Arc<Stats>,
    /// The job's control.
    pub control: Arc<JobControl>,
    /// The profile job's counters.
    pub profile: Arc<ProfileStats>,
}

impl RecordingSource {
    fn stdin(&self) -> bool {
        self.path == std::path::Path::new("-")
    }
}

impl Source for RecordingSource {
    type Feed = ReplayFeed<ProfileDecoder>;
    type Watch = Progress;
    type Report = ProfileReport;

    fn workers(&self) -> usize {
        self.threads
    }

    fn settings(&self) -> Settings {
        vec![("replay.stdin".into(), self.stdin().to_string())]
    }

    fn flush_every(&self) -> Duration {
        Duration::from_secs(1)
    }

    /// Event time races through a replay: flushes caused by its progress come at most once a
    /// second, so that each writes a large batch.
    fn flush_min_gap(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn open(
        &self,
        worker: usize,
        _probe: &ProbeHandle<u64>,
        backend: &Backend,
    ) -> Result<WorkerInput<Self::Feed>, String> {
        let opts = ReplayOptions {
            path: self.path.clone(),
            watermark_bound: self.watermark_bound,
            speed: None,
            shift: 0,
            ttl_secs: NO_TTL,
            worker,
            // stdin can be read once: worker 0 takes every line.
            peers: if self.stdin() { 1 } else { self.peers },
            max_future_skew: self.max_future_skew,
        };
        let (stats, control) = (self.stats.clone(), self.control.clone());
        let feed = if self.stdin() && worker > 0 {
            Ok(ReplayFeed::empty(self.decoder, opts, stats, control))
        } else {
            ReplayFeed::open(self.decoder, opts, stats, control)
        };
        Ok(WorkerInput {
            feed: feed.map_err(|e| e.to_string())?,
            writer: backend.writer(),
            finish: None,
        })
    }

    fn watch(&self) -> pipeline::Result<Progress> {
        let total = std::fs::metadata(&self.path)
            .ok()
            .filter(|m| m.is_file())
            .map(|m| m.len());
        Ok(Progress::start(self.stats.clone(), total))
    }

    fn report(&self, counters: Summary, stats: &Stats) -> ProfileReport {
        ProfileReport {
            verb: "replayed".into(),
            counters,
            profile: self.profile.snapshot(stats),
            resume_skipped: None,
        }
    }
}

/// A Kafka topic of tag events: worker `i` reads the partitions `p % peers == i` and commits
/// their offsets once what every worker read before them is durable (tables, short-term
/// store, dead letters).
#[derive(Debug)]
pub struct TopicSource {
    /// The events' decoder.
    pub decoder: ProfileDecoder,
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
    /// The configuration file, which the headline names.
    pub config: PathBuf,
    /// The engine's counters.
    pub stats: Arc<Stats>,
    /// The job's control.
    pub control: Arc<JobControl>,
    /// The profile job's counters.
    pub profile: Arc<ProfileStats>,
}

impl TopicSource {
    /// Worker 0's options of a topic of `partitions` read by `peers` workers, as `cfg` says;
    /// `exit_on_idle` stops the job once nothing arrived for that long.
    pub fn options(
        cfg: &ProfileConfig,
        partitions: usize,
        peers: usize,
        exit_on_idle: Option<Duration>,
    ) -> KafkaOptions {
        KafkaOptions {
            source: cfg.source.clone(),
            watermark_bound: cfg.window.watermark_bound_secs,
            window: commit_window(),
            record_table: PROFILE_TABLE,
            exit_on_idle,
            ttl_secs: NO_TTL,
            partitions,
            worker: 0,
            peers,
            max_future_skew: cfg.window.future_skew_secs(),
            // A flush holds events back for up to the merge's interval.
            stop_drain: Duration::from_secs(10)
                + Duration::from_millis(cfg.merge.flush_interval_ms),
        }
    }
}

impl Source for TopicSource {
    type Feed = KafkaFeed<ProfileDecoder>;
    type Watch = KafkaStatus;
    type Report = ProfileReport;

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

    fn flush_every(&self) -> Duration {
        Duration::from_millis(self.base.source.flush_interval_ms)
    }

    fn flush_min_gap(&self) -> Duration {
        self.flush_every()
    }

    fn open(
        &self,
        worker: usize,
        probe: &ProbeHandle<u64>,
        backend: &Backend,
    ) -> Result<WorkerInput<Self::Feed>, String> {
        let opts = KafkaOptions {
            worker,
            ..self.base.clone()
        };
        let feed = KafkaFeed::open(
            self.decoder,
            opts,
            self.shared.clone(),
            self.stats.clone(),
            self.control.clone(),
            probe.clone(),
        )
        .map_err(|e| format!("worker {worker}: {e}"))?;
        let committer = feed.committer();
        Ok(WorkerInput {
            feed,
            writer: backend.writer(),
            finish: Some(Box::new(move || {
                committer.finish().map_err(|e| {
                    format!(
                        "final offset commit failed: {e}; the stored tags are safe and will be \
                         re-read (idempotently) on restart"
                    )
                })
            })),
        })
    }

    fn watch(&self) -> pipeline::Result<KafkaStatus> {
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

    fn report(&self, counters: Summary, stats: &Stats) -> ProfileReport {
        ProfileReport {
            verb: format!("run ({}) stopped after reading", self.config.display()),
            counters,
            profile: self.profile.snapshot(stats),
            resume_skipped: Some(self.shared.resume_skipped()),
        }
    }
}
