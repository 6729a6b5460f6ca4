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
    // No window: each offset is committed once the puts of the records before it are durable
    // in the tables and the short-term store (the probe passed them), not when event time
    // has moved past them.
    KafkaOptions {
        record_table: PROFILE_TABLE,
        exit_on_idle,
        ttl_secs: NO_TTL,
        // A flush holds events back for up to the merge's interval.
        stop_drain: Duration::from_secs(10) + Duration::from_millis(cfg.merge.flush_interval_ms),
        ..KafkaOptions::new(&cfg.source, &cfg.window, partitions, peers)
    }
}
