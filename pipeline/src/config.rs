//! Job configuration (TOML), with defaults for everything.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::codec::narrow::KeyScheme;
use crate::registry::RegistrySource;
use crate::{Error, Result};

pub use sinks::config::{StoreConfig, StoreKind};

/// The example configuration shipped in `config/hourglass.example.toml`.
pub const EXAMPLE: &str = include_str!("../../config/hourglass.example.toml");

const fn default_bound() -> u64 {
    30
}
const fn default_lateness() -> u64 {
    3600
}
const fn default_early_fire() -> u64 {
    10
}
/// [`WindowConfig::max_pending_items`]'s default: 1 M items, 16 MB per worker (20 MB with the
/// buffer's growth), within the 256 MB target at 100k devices.
pub const DEFAULT_MAX_PENDING_ITEMS: u64 = 1_000_000;
const fn default_max_pending() -> u64 {
    DEFAULT_MAX_PENDING_ITEMS
}
/// [`WindowConfig::max_future_skew_secs`]'s default, also used for 0.
pub const DEFAULT_MAX_FUTURE_SKEW_SECS: u64 = 3600;
const fn default_future_skew() -> u64 {
    DEFAULT_MAX_FUTURE_SKEW_SECS
}
fn default_metric() -> String {
    "temp".to_string()
}
const fn default_status_interval() -> u64 {
    10
}
const fn default_idle_partition_timeout() -> u64 {
    60
}
const fn default_commit_interval() -> u64 {
    1000
}
const fn default_flush_interval() -> u64 {
    100
}
const fn default_fetch_wait_max() -> u64 {
    100
}
const fn default_prefetch_max_messages() -> u64 {
    30_000
}
const fn default_prefetch_max_kbytes() -> u64 {
    8_192
}
const fn default_room_write_interval() -> u64 {
    10
}
fn default_brokers() -> String {
    "127.0.0.1:9092".to_string()
}
fn default_topic() -> String {
    "sensor-readings".to_string()
}
fn default_group_id() -> String {
    "hourglass".to_string()
}

/// A job's configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobConfig {
    /// Name of the primary metric field (default `temp`).
    #[serde(default = "default_metric")]
    pub metric: String,
    /// Narrow row-key scheme (default `salted`).
    #[serde(default)]
    pub key_scheme: KeyScheme,
    /// Event-time settings.
    #[serde(default)]
    pub window: WindowConfig,
    /// Where the tables live.
    #[serde(default)]
    pub store: StoreConfig,
    /// Where `hourglass run` reads readings from.
    #[serde(default)]
    pub source: SourceConfig,
    /// Timely worker threads of `hourglass run`, 1 to [`MAX_WORKERS`] (default: the number of
    /// cores, at most that).
    #[serde(default)]
    pub workers: Option<usize>,
    /// Seconds between two status lines of `hourglass run` (default 10).
    #[serde(default = "default_status_interval")]
    pub status_interval_secs: u64,
    /// Device registry CSV (`device,room[,…]`) for the room view, reloaded when it changes
    /// (default: none; rooms come from the readings' own `room` field).
    #[serde(default)]
    pub registry: Option<PathBuf>,
    /// Device registry as a compacted Kafka topic on `source.brokers` (key = device id, value =
    /// `room[,gateway,…]`, null value = the device leaves), read whole then followed (default:
    /// none). Exclusive with `registry`.
    #[serde(default)]
    pub registry_topic: Option<String>,
    /// A device's row in the room view is written at most once per this many seconds of
    /// processing time: a reading after a quiet interval at once, the newest of a burst when
    /// the device's interval ends or the input ends; 0 writes every change (default 10). A
    /// replay holds the readings of hours the wall clock has left until it ends, so it writes
    /// each device's row once.
    #[serde(default = "default_room_write_interval")]
    pub room_write_interval_secs: u64,
    /// `host:port` where `hourglass run` serves its own `/metrics` (Prometheus text) and
    /// `/healthz`, e.g. `127.0.0.1:9464`; `--metrics-listen` overrides it (default: none, no
    /// server).
    #[serde(default)]
    pub metrics_listen: Option<String>,
    /// The timely cluster this process belongs to (default: none, one process).
    #[serde(default)]
    pub cluster: ClusterConfig,
}

const fn default_processes() -> usize {
    1
}

const fn default_connect_timeout() -> u64 {
    60
}

/// `[cluster]`: the job as a timely cluster of several processes, each with `workers` threads.
/// `--processes`, `--process` and `--hosts` override it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// Number of processes (default 1: no cluster).
    #[serde(default = "default_processes")]
    pub processes: usize,
    /// This process's index, `0..processes`; usually given by `--process` since it differs per
    /// host (default: none, required in a cluster).
    #[serde(default)]
    pub process: Option<usize>,
    /// A file listing every process's `host:port`, one a line in index order (`#` comments
    /// and blank lines skipped). Exclusive with `addresses`.
    #[serde(default)]
    pub hosts: Option<PathBuf>,
    /// Every process's `host:port`, in index order. Exclusive with `hosts`.
    #[serde(default)]
    pub addresses: Vec<String>,
    /// Seconds the processes may take to connect to each other at start; past them, every
    /// process still waiting stops with an error naming the processes it misses (default 60;
    /// `--connect-timeout` overrides it).
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout_secs: u64,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            processes: default_processes(),
            process: None,
            hosts: None,
            addresses: Vec::new(),
            connect_timeout_secs: default_connect_timeout(),
        }
    }
}

impl ClusterConfig {
    /// Most processes a cluster may have: every worker of every process connects to every
    /// other, as [`MAX_WORKERS`] says.
    pub const MAX_PROCESSES: usize = MAX_WORKERS;

    fn validate(&self) -> Result<()> {
        if !(1..=Self::MAX_PROCESSES).contains(&self.processes) {
            return Err(Error::Config(format!(
                "cluster.processes = {}: use 1..={}",
                self.processes,
                Self::MAX_PROCESSES
            )));
        }
        if let Some(process) = self.process {
            if process >= self.processes {
                return Err(Error::Config(format!(
                    "cluster.process = {process}: process indices run from 0 to                      cluster.processes - 1 = {}",
                    self.processes - 1
                )));
            }
        }
        if self.connect_timeout_secs == 0 {
            return Err(Error::Config(
                "cluster.connect_timeout_secs = 0: give the processes at least a second to connect"
                    .into(),
            ));
        }
        if self.hosts.is_some() && !self.addresses.is_empty() {
            return Err(Error::Config(
                "cluster.hosts and cluster.addresses: list the processes once; keep one of them"
                    .into(),
            ));
        }
        for addr in &self.addresses {
            check_listen_address("cluster.addresses", addr)?;
        }
        Ok(())
    }

    /// Every process's address, in index order: `addresses`, or the lines of `hosts`; checked
    /// against `processes`.
    ///
    /// # Errors
    /// [`Error::Io`] if the hosts file cannot be read, [`Error::Config`] if an address is not
    /// `host:port`, none is given, or their number is not `processes`.
    pub fn resolve_addresses(&self) -> Result<Vec<String>> {
        let (addresses, origin) = match &self.hosts {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
                    path: path.display().to_string(),
                    source,
                })?;
                (parse_hosts(&text), path.display().to_string())
            }
            None => (self.addresses.clone(), "cluster.addresses".to_string()),
        };
        if addresses.is_empty() {
            return Err(Error::Config(format!(
                "a cluster of {} processes needs their addresses: --hosts FILE (one host:port a                  line) or cluster.hosts / cluster.addresses",
                self.processes
            )));
        }
        for addr in &addresses {
            check_listen_address(&origin, addr)?;
        }
        if addresses.len() != self.processes {
            return Err(Error::Config(format!(
                "{origin} lists {} addresses for {} processes: list one host:port per process,                  in index order",
                addresses.len(),
                self.processes
            )));
        }
        Ok(addresses)
    }
}

/// The addresses of a hosts file: one `host:port` a line; `#` starts a comment.
fn parse_hosts(text: &str) -> Vec<String> {
    text.lines()
        .map(|line| line.split('#').next().unwrap_or_default().trim())
        .filter(|line| !line.is_empty())
        .map(str::to_string)
        .collect()
}

impl Default for JobConfig {
    fn default() -> Self {
        JobConfig {
            metric: default_metric(),
            key_scheme: KeyScheme::default(),
            window: WindowConfig::default(),
            store: StoreConfig::default(),
            source: SourceConfig::default(),
            workers: None,
            status_interval_secs: default_status_interval(),
            registry: None,
            registry_topic: None,
            room_write_interval_secs: default_room_write_interval(),
            metrics_listen: None,
            cluster: ClusterConfig::default(),
        }
    }
}

/// Event-time settings of the hourly window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowConfig {
    /// Watermark = max event time seen − this bound (default 30 s).
    #[serde(default = "default_bound")]
    pub watermark_bound_secs: u64,
    /// Readings this late (past their hour's end, by watermark) still land in the wide row
    /// (default 3600 s).
    #[serde(default = "default_lateness")]
    pub allowed_lateness_secs: u64,
    /// Processing-time period of early firings of open hours; 0 disables (default 10 s). In a
    /// replay only hours that the wall clock has not passed by more than the allowed lateness
    /// fire early (`operators::WindowSpec::is_live`), so a replay of past hours writes each hour
    /// once; `run` fires every open hour (`GraphConfig::early_fire_past_hours`).
    #[serde(default = "default_early_fire")]
    pub early_fire_secs: u64,
    /// Readings a window worker holds not yet fired, over all its open hours, before it fires
    /// them at once as an early firing; 0: no bound (default [`DEFAULT_MAX_PENDING_ITEMS`]). A
    /// held reading takes 16 bytes; fired ones wait, as many again at most, until the window has
    /// emitted them ([`operators::tumbling_window::EMIT_FUEL`] an activation).
    #[serde(default = "default_max_pending")]
    pub max_pending_items: u64,
    /// A reading more than this far ahead of the wall clock (`run`; in `replay`, of the
    /// recording's time: its watermark, and the wall clock) goes to the dead-letter output
    /// (kind `future`) instead of moving event time; 0 means the default (3600 s). See
    /// [`WindowConfig::future_skew_secs`].
    #[serde(default = "default_future_skew")]
    pub max_future_skew_secs: u64,
}

impl WindowConfig {
    /// The window's budget of held readings per worker: `None` (no bound) for 0.
    pub fn max_pending(&self) -> Option<usize> {
        (self.max_pending_items > 0)
            .then(|| usize::try_from(self.max_pending_items).unwrap_or(usize::MAX))
    }

    /// The allowed skew ahead in effect: [`WindowConfig::max_future_skew_secs`], or 3600 s
    /// when it is 0.
    pub const fn future_skew_secs(&self) -> u64 {
        if self.max_future_skew_secs == 0 {
            DEFAULT_MAX_FUTURE_SKEW_SECS
        } else {
            self.max_future_skew_secs
        }
    }
}

impl Default for WindowConfig {
    fn default() -> Self {
        WindowConfig {
            watermark_bound_secs: default_bound(),
            allowed_lateness_secs: default_lateness(),
            early_fire_secs: default_early_fire(),
            max_pending_items: default_max_pending(),
            max_future_skew_secs: default_future_skew(),
        }
    }
}

/// Which kind of source feeds `hourglass run`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SourceKind {
    /// An Apache Kafka topic (default).
    #[default]
    Kafka,
}

/// The Kafka topic `hourglass run` consumes: one JSON reading per record, keyed by device.
///
/// Partitions are assigned statically, `partition % workers == worker index`, and offsets are
/// committed to `group_id` by hourglass itself, only once what they cover is in both tables.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// Source kind (default `kafka`).
    #[serde(default)]
    pub kind: SourceKind,
    /// Bootstrap brokers, `host:port[,host:port…]` (default `127.0.0.1:9092`).
    #[serde(default = "default_brokers")]
    pub brokers: String,
    /// Topic (default `sensor-readings`).
    #[serde(default = "default_topic")]
    pub topic: String,
    /// Consumer group whose committed offsets a restart resumes from (default `hourglass`).
    #[serde(default = "default_group_id")]
    pub group_id: String,
    /// A partition without records for this long stops holding the watermark back
    /// (default 60 s).
    #[serde(default = "default_idle_partition_timeout")]
    pub idle_partition_timeout_secs: u64,
    /// How often durable offsets are committed, milliseconds (default 1000).
    #[serde(default = "default_commit_interval")]
    pub commit_interval_ms: u64,
    /// Longest time a reading written to a worker's table writer may wait before the writer is
    /// flushed (made durable and visible), milliseconds (default 100). Shorter: fresher
    /// dashboards, more and smaller writes while live; a catch-up flushes in large batches
    /// whatever this is, since each flush takes what arrived meanwhile.
    #[serde(default = "default_flush_interval")]
    pub flush_interval_ms: u64,
    /// librdkafka's `fetch.wait.max.ms`: how long a broker may hold a fetch while it has less
    /// than `fetch.min.bytes` (default 100, librdkafka's own default being 500). It bounds the
    /// wait for the first record after a quiet spell; a `source.rdkafka` entry overrides it.
    #[serde(default = "default_fetch_wait_max")]
    pub fetch_wait_max_ms: u64,
    /// librdkafka's `queued.min.messages`: each worker's consumer stops fetching once this many
    /// records wait in its queue (default 30,000; librdkafka's own default is 100,000). With
    /// [`SourceConfig::prefetch_max_kbytes`] it bounds what a job holds that it has not read:
    /// while HBase is away the workers block in their writers and read nothing, and without
    /// the bound the consumer went on fetching for them (0.5–1 KiB of memory per record; see
    /// docs/RELIABILITY.md). Lower costs catch-up speed: at 10,000 an embedded catch-up
    /// consumed about a third as fast. A `source.rdkafka` entry overrides it.
    #[serde(default = "default_prefetch_max_messages")]
    pub prefetch_max_messages: u64,
    /// librdkafka's `queued.max.messages.kbytes`: the same bound in KiB of record payload
    /// (default 8,192, librdkafka's own default being 65,536), for records larger than the
    /// readings' ~100 bytes. A `source.rdkafka` entry overrides it.
    #[serde(default = "default_prefetch_max_kbytes")]
    pub prefetch_max_kbytes: u64,
    /// librdkafka settings passed through as they are (security, fetch sizes, …), e.g.
    /// `"security.protocol" = "SASL_SSL"`. Values are strings. Settings hourglass owns
    /// (brokers, group, offset commits) are refused.
    #[serde(default)]
    pub rdkafka: BTreeMap<String, String>,
}

impl Default for SourceConfig {
    fn default() -> Self {
        SourceConfig {
            kind: SourceKind::default(),
            brokers: default_brokers(),
            topic: default_topic(),
            group_id: default_group_id(),
            idle_partition_timeout_secs: default_idle_partition_timeout(),
            commit_interval_ms: default_commit_interval(),
            flush_interval_ms: default_flush_interval(),
            fetch_wait_max_ms: default_fetch_wait_max(),
            prefetch_max_messages: default_prefetch_max_messages(),
            prefetch_max_kbytes: default_prefetch_max_kbytes(),
            rdkafka: BTreeMap::new(),
        }
    }
}

/// librdkafka settings that hourglass sets itself, and what to use instead.
const OWNED_RDKAFKA_KEYS: &[(&str, &str)] = &[
    ("bootstrap.servers", "set source.brokers"),
    ("metadata.broker.list", "set source.brokers"),
    ("group.id", "set source.group_id"),
    (
        "enable.auto.commit",
        "hourglass commits offsets itself, only once they are stored in both tables",
    ),
    (
        "enable.auto.offset.store",
        "hourglass commits offsets itself, only once they are stored in both tables",
    ),
    ("enable.partition.eof", "hourglass needs it off"),
];

impl SourceConfig {
    fn validate(&self) -> Result<()> {
        for (key, value) in [
            ("brokers", &self.brokers),
            ("topic", &self.topic),
            ("group_id", &self.group_id),
        ] {
            if value.trim().is_empty() {
                return Err(Error::Config(format!("source.{key} must not be empty")));
            }
        }
        if self.idle_partition_timeout_secs == 0 {
            return Err(Error::Config(
                "source.idle_partition_timeout_secs must be at least 1".into(),
            ));
        }
        if self.commit_interval_ms == 0 {
            return Err(Error::Config(
                "source.commit_interval_ms must be at least 1".into(),
            ));
        }
        if self.flush_interval_ms == 0 {
            return Err(Error::Config(
                "source.flush_interval_ms must be at least 1".into(),
            ));
        }
        // librdkafka's own ranges, named here so that the message points at `[source]`.
        for (key, value, max) in [
            (
                "prefetch_max_messages",
                self.prefetch_max_messages,
                10_000_000,
            ),
            ("prefetch_max_kbytes", self.prefetch_max_kbytes, 2_097_151),
        ] {
            if !(1..=max).contains(&value) {
                return Err(Error::Config(format!(
                    "source.{key} must be between 1 and {max}, not {value}"
                )));
            }
        }
        for key in self.rdkafka.keys() {
            if let Some((_, instead)) = OWNED_RDKAFKA_KEYS.iter().find(|(k, _)| k == key) {
                return Err(Error::Config(format!(
                    "source.rdkafka.\"{key}\" cannot be set here: {instead}"
                )));
            }
        }
        Ok(())
    }
}

impl JobConfig {
    /// Parses a TOML configuration.
    ///
    /// # Errors
    /// [`Error::Config`] naming the offending key.
    pub fn parse(text: &str) -> Result<Self> {
        let cfg: JobConfig = toml::from_str(text).map_err(|e| Error::Config(e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Reads and parses a TOML configuration file.
    ///
    /// # Errors
    /// [`Error::Io`] if it cannot be read, [`Error::Config`] if it is invalid.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text).map_err(|e| Error::Config(format!("{}: {e}", path.display())))
    }

    /// Checks values that parse but make no sense.
    ///
    /// # Errors
    /// [`Error::Config`] naming the key.
    pub fn validate(&self) -> Result<()> {
        if self.metric.is_empty() || matches!(self.metric.as_str(), "device" | "ts") {
            return Err(Error::Config(format!(
                "metric = {:?}: name a numeric field other than device and ts",
                self.metric
            )));
        }
        self.store.validate()?;
        if let Some(workers) = self.workers {
            check_workers("workers", workers)?;
        }
        if self.status_interval_secs == 0 {
            return Err(Error::Config(
                "status_interval_secs must be at least 1".into(),
            ));
        }
        self.validate_registry()?;
        self.cluster.validate()?;
        if let Some(addr) = &self.metrics_listen {
            check_listen_address("metrics_listen", addr)?;
        }
        self.source.validate()
    }

    fn validate_registry(&self) -> Result<()> {
        let Some(topic) = &self.registry_topic else {
            return Ok(());
        };
        if let Some(path) = &self.registry {
            return Err(Error::Config(format!(
                "registry = {:?} and registry_topic = {topic:?}: the room view reads one \
                 registry; keep one of them",
                path.display().to_string()
            )));
        }
        if topic.trim().is_empty() {
            return Err(Error::Config("registry_topic must not be empty".into()));
        }
        if *topic == self.source.topic {
            return Err(Error::Config(format!(
                "registry_topic = {topic:?} is the readings' topic (source.topic): use a \
                 compacted topic of its own"
            )));
        }
        Ok(())
    }

    /// Where the room view's registry comes from: the `registry` file, the `registry_topic`
    /// (on the brokers of `source`), or none.
    pub fn registry_source(&self) -> Option<RegistrySource> {
        match (&self.registry, &self.registry_topic) {
            (Some(path), _) => Some(RegistrySource::File(path.clone())),
            (None, Some(topic)) => Some(RegistrySource::Topic {
                source: self.source.clone(),
                topic: topic.clone(),
            }),
            (None, None) => None,
        }
    }
}

/// Most timely worker threads a job may start. Timely connects every worker with every other
/// (channels and wake-ups allocated per pair), so memory grows with the square of the count:
/// 256 workers take about 1.5 GB before the first record, 1,000 over 7 GB and minutes, and
/// 100,000 abort on allocation.
pub const MAX_WORKERS: usize = 256;

/// Checks a worker count given as `what`: a config key (`workers`) or a flag (`--workers`).
///
/// # Errors
/// [`Error::Config`] naming `what` and the range `1..=MAX_WORKERS`.
pub fn check_workers(what: &str, workers: usize) -> Result<()> {
    if (1..=MAX_WORKERS).contains(&workers) {
        return Ok(());
    }
    let sep = if what.starts_with("--") { " " } else { " = " };
    Err(Error::Config(format!(
        "{what}{sep}{workers}: use 1..={MAX_WORKERS} worker threads (timely connects every pair \
         of workers), or leave it out for one per core"
    )))
}

/// Checks that `addr` has the form `host:port` (the host may be a name or a bracketed IPv6
/// address; port 0 picks a free port).
///
/// # Errors
/// [`Error::Config`] naming `key` and the expected form.
pub fn check_listen_address(key: &str, addr: &str) -> Result<()> {
    let ok = addr
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    if ok {
        Ok(())
    } else {
        Err(Error::Config(format!(
            "{key} = {addr:?}: use host:port, such as 127.0.0.1:9464 (port 0 picks a free one)"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_config_parses_to_the_defaults() {
        let cfg = JobConfig::parse(EXAMPLE).unwrap();
        assert_eq!(cfg, JobConfig::default());
    }

    #[test]
    fn a_prefetch_bound_outside_librdkafka_s_range_is_refused() {
        let err = JobConfig::parse("[source]\nprefetch_max_messages = 0\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("source.prefetch_max_messages"), "{err}");
        let err = JobConfig::parse("[source]\nprefetch_max_kbytes = 3000000\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("source.prefetch_max_kbytes"), "{err}");
        let cfg = JobConfig::parse("[source]\nprefetch_max_messages = 500\n").unwrap();
        assert_eq!(cfg.source.prefetch_max_messages, 500);
    }

    #[test]
    fn future_skew_of_zero_is_the_default() {
        let cfg = JobConfig::parse("[window]\nmax_future_skew_secs = 0\n").unwrap();
        assert_eq!(cfg.window.future_skew_secs(), 3600);
        let cfg = JobConfig::parse("[window]\nmax_future_skew_secs = 120\n").unwrap();
        assert_eq!(cfg.window.future_skew_secs(), 120);
        assert_eq!(JobConfig::default().window.future_skew_secs(), 3600);
    }

    #[test]
    fn unknown_keys_are_named() {
        let err = JobConfig::parse("[window]\nlateness = 5\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("lateness"), "{err}");
        let err = JobConfig::parse("metric = \"ts\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("metric"), "{err}");
        let err = JobConfig::parse("[store]\nkind = \"hbase\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("store.hbase"), "{err}");
    }

    #[test]
    fn a_generation_of_zero_mib_is_refused() {
        let cfg = JobConfig::parse("[store]\ngeneration_mb = 64\n").unwrap();
        assert_eq!(cfg.store.generation_mb, 64);
        let err = JobConfig::parse("[store]\ngeneration_mb = 0\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("store.generation_mb"), "{err}");
    }

    #[test]
    fn hbase_client_settings_reach_the_hbase_client() {
        use sinks::hbase::HbaseConfig;
        use std::time::Duration;

        let cfg = JobConfig::parse(
            "[store]\nkind = \"hbase\"\nhbase = \"h:9090\"\n[store.hbase_client]\n\
             thrift2 = \"g:9\"\nbatch_rows = 10\nbatch_bytes = 2048\nscan_caching = 7\n\
             read_connections = 3\nconnect_timeout_secs = 2\nrpc_timeout_secs = 9\n\
             idle_reconnect_secs = 30\nretry_initial_backoff_ms = 50\n\
             retry_max_backoff_ms = 400\nretry_max_elapsed_secs = 20\n",
        )
        .unwrap();
        let hb = HbaseConfig::from_store(&cfg.store).unwrap();
        assert_eq!(
            (hb.thrift1.as_str(), hb.thrift2.as_str()),
            ("h:9090", "g:9")
        );
        assert_eq!((hb.batch_rows, hb.batch_bytes), (10, 2048));
        assert_eq!((hb.scan_caching, hb.read_connections), (7, 3));
        assert_eq!(hb.connect_timeout, Duration::from_secs(2));
        assert_eq!(hb.rpc_timeout, Duration::from_secs(9));
        assert_eq!(hb.idle_reconnect, Duration::from_secs(30));
        assert_eq!(hb.retry.initial_backoff, Duration::from_millis(50));
        assert_eq!(hb.retry.max_backoff, Duration::from_millis(400));
        assert_eq!(hb.retry.max_elapsed, Some(Duration::from_secs(20)));

        // Left out, every setting is what the HBase client used before it could be set.
        let cfg = JobConfig::parse("[store]\nkind = \"hbase\"\nhbase = \"h:9090\"\n").unwrap();
        assert_eq!(
            HbaseConfig::from_store(&cfg.store).unwrap(),
            HbaseConfig::new("h:9090")
        );

        for (text, key) in [
            ("batch_rows = 0", "store.hbase_client.batch_rows = 0"),
            ("batch_bytes = 0", "store.hbase_client.batch_bytes"),
            ("batch_bytes = 100000000", "at most 67108864"),
            (
                "read_connections = 0",
                "store.hbase_client.read_connections",
            ),
            (
                "rpc_timeout_secs = 0",
                "store.hbase_client.rpc_timeout_secs",
            ),
            ("retry_max_elapsed_secs = 0", "retry_max_elapsed_secs"),
            (
                "retry_initial_backoff_ms = 500\nretry_max_backoff_ms = 100",
                "cannot be shorter",
            ),
            ("thrift2 = \"9091\"", "store.hbase_client.thrift2"),
            ("batch_row = 5", "batch_row"),
            ("batch_rows = -1", "batch_rows"),
        ] {
            let text = format!("[store.hbase_client]\n{text}\n");
            let err = JobConfig::parse(&text).unwrap_err().to_string();
            assert!(err.contains(key), "{text:?}: {err}");
        }
    }

    #[test]
    fn cluster_addresses_come_from_the_table_or_a_hosts_file() {
        let cfg =
            JobConfig::parse("[cluster]\nprocesses = 2\naddresses = [\"a:2101\", \"b:2101\"]\n")
                .unwrap();
        assert_eq!(
            cfg.cluster.resolve_addresses().unwrap(),
            ["a:2101", "b:2101"]
        );
        assert_eq!(
            parse_hosts("# the cluster\n\na:1 # first\n  b:2\n"),
            ["a:1", "b:2"]
        );
        let cfg = JobConfig::parse("[cluster]\nprocesses = 3\naddresses = [\"a:1\"]\n").unwrap();
        let err = cfg.cluster.resolve_addresses().unwrap_err().to_string();
        assert!(err.contains("1 addresses for 3 processes"), "{err}");
        let cfg = JobConfig::parse("[cluster]\nprocesses = 2\n").unwrap();
        let err = cfg.cluster.resolve_addresses().unwrap_err().to_string();
        assert!(err.contains("--hosts"), "{err}");
    }

    #[test]
    fn source_settings_are_checked() {
        let cfg = JobConfig::parse(
            "[source]\ntopic = \"t\"\n[source.rdkafka]\n\"security.protocol\" = \"SASL_SSL\"\n",
        )
        .unwrap();
        assert_eq!(cfg.source.topic, "t");
        assert_eq!(cfg.source.rdkafka["security.protocol"], "SASL_SSL");
        assert_eq!(cfg.registry_source(), None);
        let cfg = JobConfig::parse("registry_topic = \"devices\"\n").unwrap();
        assert!(matches!(
            cfg.registry_source(),
            Some(RegistrySource::Topic { topic, source }) if topic == "devices" && source.brokers == "127.0.0.1:9092"
        ));
        let cfg = JobConfig::parse("metrics_listen = \"[::1]:9464\"\n").unwrap();
        assert_eq!(cfg.metrics_listen.as_deref(), Some("[::1]:9464"));
        for (text, key) in [
            ("[source]\nbrokers = \"\"\n", "source.brokers"),
            (
                "[source]\nidle_partition_timeout_secs = 0\n",
                "source.idle_partition_timeout_secs",
            ),
            ("[source]\nkind = \"pulsar\"\n", "pulsar"),
            ("[source]\npartitions = 4\n", "partitions"),
            (
                "[source.rdkafka]\n\"enable.auto.commit\" = \"true\"\n",
                "enable.auto.commit",
            ),
            (
                "[source.rdkafka]\n\"group.id\" = \"g\"\n",
                "source.group_id",
            ),
            (
                "[source.rdkafka]\n\"fetch.min.bytes\" = 1\n",
                "expected a string",
            ),
            ("workers = 0\n", "workers"),
            ("workers = 100000\n", "1..=256"),
            (
                "registry = \"d.csv\"\nregistry_topic = \"devices\"\n",
                "keep one of them",
            ),
            ("registry_topic = \" \"\n", "registry_topic"),
            ("registry_topic = \"sensor-readings\"\n", "readings' topic"),
            ("metrics_listen = \"9464\"\n", "metrics_listen"),
            ("metrics_listen = \":9464\"\n", "metrics_listen"),
            ("metrics_listen = \"localhost:http\"\n", "metrics_listen"),
            ("[cluster]\nprocesses = 0\n", "cluster.processes"),
            (
                "[cluster]\nconnect_timeout_secs = 0\n",
                "cluster.connect_timeout_secs",
            ),
            (
                "[cluster]\nprocesses = 2\nprocess = 2\n",
                "cluster.process = 2",
            ),
            (
                "[cluster]\nhosts = \"h\"\naddresses = [\"a:1\"]\n",
                "keep one of them",
            ),
            ("[cluster]\naddresses = [\"a\"]\n", "cluster.addresses"),
            ("[cluster]\nthreads = 2\n", "threads"),
        ] {
            let err = JobConfig::parse(text).unwrap_err().to_string();
            assert!(err.contains(key), "{text:?}: {err}");
        }
    }
}
