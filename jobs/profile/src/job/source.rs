//! Where the profile job's events come from: the options of the engine's sources, a recording
//! (`hourglass profile replay`, `pipeline::driver::RecordingSource`) or a Kafka topic
//! (`hourglass profile run`, `pipeline::driver::TopicSource`).

use std::path::PathBuf;
use std::time::Duration;

use pipeline::source::kafka::KafkaOptions;
use pipeline::source::replay::ReplayOptions;

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

/// Worker 0's options of a replay of `path` read by `peers` workers, as `cfg` says: at full
/// speed, no shift.
pub fn replay_options(cfg: &ProfileConfig, path: PathBuf, peers: usize) -> ReplayOptions {
    ReplayOptions {
        path,
        watermark_bound: cfg.window.watermark_bound_secs,
        speed: None,
        shift: 0,
        ttl_secs: NO_TTL,
        worker: 0,
        peers,
        max_future_skew: cfg.window.future_skew_secs(),
    }
}

/// Worker 0's options of a topic of `partitions` read by `peers` workers, as `cfg` says;
/// `exit_on_idle` stops the job once nothing arrived for that long.
pub fn topic_options(
    cfg: &ProfileConfig,
    partitions: usize,
    peers: usize,
    exit_on_idle: Option<Duration>,
) -> KafkaOptions {
    KafkaOptions {
        window: commit_window(),
        record_table: PROFILE_TABLE,
        exit_on_idle,
        ttl_secs: NO_TTL,
        // A flush holds events back for up to the merge's interval.
        stop_drain: Duration::from_secs(10) + Duration::from_millis(cfg.merge.flush_interval_ms),
        ..KafkaOptions::new(&cfg.source, &cfg.window, partitions, peers)
    }
}
