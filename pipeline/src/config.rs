//! Engine configuration (TOML sections shared by every job): the timely cluster, the event-time window, the Kafka source, worker counts and listen addresses.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

pub use sinks::config::{StoreConfig, StoreKind};

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
fn default_brokers() -> String {
    "127.0.0.1:9092".to_string()
}
fn default_topic() -> String {
    "sensor-readings".to_string()
}
fn default_group_id() -> String {
    "hourglass".to_string()
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

    /// Checks values that parse but make no sense.
    ///
    /// # Errors
    /// [`Error::Config`] naming the key.
    pub fn validate(&self) -> Result<()> {
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
    /// Checks values that parse but make no sense.
    ///
    /// # Errors
    /// [`Error::Config`] naming the key.
    pub fn validate(&self) -> Result<()> {
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
    fn a_hosts_file_lists_one_address_a_line() {
        assert_eq!(
            parse_hosts("# the cluster\n\na:1 # first\n  b:2\n"),
            ["a:1", "b:2"]
        );
    }
}
