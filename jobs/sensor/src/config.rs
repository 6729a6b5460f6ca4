//! The sensor job's configuration (TOML), with defaults for everything.

use std::path::{Path, PathBuf};

use pipeline::config::{
    check_listen_address, check_workers, ClusterConfig, SourceConfig, StoreConfig, WindowConfig,
};
use serde::{Deserialize, Serialize};

use crate::codec::narrow::KeyScheme;
use crate::registry::RegistrySource;
use crate::{Error, Result};

/// The example configuration shipped in `config/hourglass.example.toml`.
pub const EXAMPLE: &str = include_str!("../../../config/hourglass.example.toml");

fn default_metric() -> String {
    "temp".to_string()
}
const fn default_status_interval() -> u64 {
    10
}
const fn default_room_write_interval() -> u64 {
    10
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

impl JobConfig {
    /// Parses a TOML configuration.
    ///
    /// # Errors
    /// [`pipeline::Error::Config`] naming the offending key.
    pub fn parse(text: &str) -> Result<Self> {
        let cfg: JobConfig = toml::from_str(text).map_err(|e| Error::config(e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Reads and parses a TOML configuration file.
    ///
    /// # Errors
    /// [`pipeline::Error::Io`] if it cannot be read, [`pipeline::Error::Config`] if it is invalid.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| pipeline::Error::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text).map_err(|e| Error::config(format!("{}: {e}", path.display())))
    }

    /// Checks values that parse but make no sense.
    ///
    /// # Errors
    /// [`pipeline::Error::Config`] naming the key.
    pub fn validate(&self) -> Result<()> {
        if self.metric.is_empty() || matches!(self.metric.as_str(), "device" | "ts") {
            return Err(Error::config(format!(
                "metric = {:?}: name a numeric field other than device and ts",
                self.metric
            )));
        }
        self.store.validate()?;
        if let Some(workers) = self.workers {
            check_workers("workers", workers)?;
        }
        if self.status_interval_secs == 0 {
            return Err(Error::config("status_interval_secs must be at least 1"));
        }
        self.validate_registry()?;
        self.cluster.validate()?;
        if let Some(addr) = &self.metrics_listen {
            check_listen_address("metrics_listen", addr)?;
        }
        Ok(self.source.validate()?)
    }

    fn validate_registry(&self) -> Result<()> {
        let Some(topic) = &self.registry_topic else {
            return Ok(());
        };
        if let Some(path) = &self.registry {
            return Err(Error::config(format!(
                "registry = {:?} and registry_topic = {topic:?}: the room view reads one \
                 registry; keep one of them",
                path.display().to_string()
            )));
        }
        if topic.trim().is_empty() {
            return Err(Error::config("registry_topic must not be empty"));
        }
        if *topic == self.source.topic {
            return Err(Error::config(format!(
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
