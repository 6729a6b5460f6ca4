//! Where the tables live: the `[store]` section of the job configuration.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::embedded::EmbeddedConfig;
use crate::hbase::HbaseConfig;
use crate::schema::TableSpec;
use crate::seam::{OpenOptions, StorageConfig, Store};
use crate::{Error, Result};

fn default_dir() -> PathBuf {
    PathBuf::from("./hourglass-data")
}
const fn default_generation_mb() -> u64 {
    crate::embedded::GENERATION_BYTES >> 20
}
const fn default_batch_rows() -> usize {
    10_000
}
const fn default_batch_cells() -> usize {
    10_000
}
const fn default_batch_bytes() -> usize {
    4 << 20
}
const fn default_scan_caching() -> usize {
    1000
}
const fn default_read_connections() -> usize {
    16
}
const fn default_connect_timeout_secs() -> u64 {
    5
}
const fn default_rpc_timeout_secs() -> u64 {
    60
}
const fn default_idle_reconnect_secs() -> u64 {
    45
}
const fn default_retry_initial_backoff_ms() -> u64 {
    100
}
const fn default_retry_max_backoff_ms() -> u64 {
    10_000
}

/// Which backend holds the tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreKind {
    /// The embedded LSM store in `dir` (default).
    #[default]
    Embedded,
    /// HBase through its Thrift gateway at `hbase`.
    Hbase,
}

/// Where the tables live.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// Backend (default `embedded`).
    #[serde(default)]
    pub kind: StoreKind,
    /// Directory of the embedded store (default `./hourglass-data`).
    #[serde(default = "default_dir")]
    pub dir: PathBuf,
    /// Disk size in MiB at which the embedded store starts a new generation of a table (default
    /// 64; see `sinks/src/embedded/generations.rs`), or a quarter of it once 24 tables were
    /// ingested into the generation. Larger: fewer generations for reads without a time range to
    /// merge, dearer compactions.
    #[serde(default = "default_generation_mb")]
    pub generation_mb: u64,
    /// Experimental (issue 38; default false): a table the embedded store creates whose spec
    /// maps its rows to series points (the sensors' `ts_metric`) keeps them in series chunks,
    /// partitioned by hour, instead of one key-value per reading. A store keeps the layout it
    /// was created with whatever this says (docs/ARCHITECTURE.md §7b, docs/RELIABILITY.md).
    #[serde(default)]
    pub series_layout: bool,
    /// HBase Thrift1 gateway `host:port` (table names and regions), for `kind = "hbase"`.
    #[serde(default)]
    pub hbase: Option<String>,
    /// How hourglass talks to HBase: gateways, batches, connections, timeouts, retries.
    #[serde(default)]
    pub hbase_client: HbaseClientConfig,
}

/// How hourglass talks to HBase (`[store.hbase_client]`); every value has a default.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HbaseClientConfig {
    /// Thrift2 gateway `host:port`, which takes the reads and writes, creates pre-split
    /// tables and describes them (default: the `store.hbase` host, port 9091).
    #[serde(default)]
    pub thrift2: Option<String>,
    /// A write call (`putMultiple`) is sent once it holds this many rows (default 10000) …
    #[serde(default = "default_batch_rows")]
    pub batch_rows: usize,
    /// … or this many cells, of any timestamps (default 10000) …
    #[serde(default = "default_batch_cells")]
    pub batch_cells: usize,
    /// … or this many bytes of row keys, columns and values (default 4 MiB, well under the
    /// gateway's Thrift message limit). A writer buffers at most four times this.
    #[serde(default = "default_batch_bytes")]
    pub batch_bytes: usize,
    /// Rows fetched per scan call (default 1000): a scan of up to this many rows is one call.
    #[serde(default = "default_scan_caching")]
    pub scan_caching: usize,
    /// Gateway connections a reader opens at most, one per concurrent call (default 16).
    #[serde(default = "default_read_connections")]
    pub read_connections: usize,
    /// TCP connect timeout, seconds (default 5).
    #[serde(default = "default_connect_timeout_secs")]
    pub connect_timeout_secs: u64,
    /// Socket read/write timeout of one call, seconds (default 60); a call that times out is
    /// retried on a new connection.
    #[serde(default = "default_rpc_timeout_secs")]
    pub rpc_timeout_secs: u64,
    /// A connection idle this long is replaced before its next call, seconds (default 45;
    /// the gateways drop connections idle for 60 s, so keep it below that).
    #[serde(default = "default_idle_reconnect_secs")]
    pub idle_reconnect_secs: u64,
    /// Delay before the first retry of a retriable failure, milliseconds (default 100); it
    /// doubles on each retry.
    #[serde(default = "default_retry_initial_backoff_ms")]
    pub retry_initial_backoff_ms: u64,
    /// Longest delay between two attempts, milliseconds (default 10000).
    #[serde(default = "default_retry_max_backoff_ms")]
    pub retry_max_backoff_ms: u64,
    /// Give up retrying after this many seconds (default: never; a job then waits for HBase
    /// to come back, blocking its workers). Interactive commands give up after at most 60 s.
    #[serde(default)]
    pub retry_max_elapsed_secs: Option<u64>,
}

impl Default for HbaseClientConfig {
    fn default() -> Self {
        HbaseClientConfig {
            thrift2: None,
            batch_rows: default_batch_rows(),
            batch_cells: default_batch_cells(),
            batch_bytes: default_batch_bytes(),
            scan_caching: default_scan_caching(),
            read_connections: default_read_connections(),
            connect_timeout_secs: default_connect_timeout_secs(),
            rpc_timeout_secs: default_rpc_timeout_secs(),
            idle_reconnect_secs: default_idle_reconnect_secs(),
            retry_initial_backoff_ms: default_retry_initial_backoff_ms(),
            retry_max_backoff_ms: default_retry_max_backoff_ms(),
            retry_max_elapsed_secs: None,
        }
    }
}

impl HbaseClientConfig {
    /// Checks values that parse but make no sense.
    ///
    /// # Errors
    /// [`Error::Config`] naming the key and the values it takes.
    pub fn validate(&self) -> Result<()> {
        let key = |name: &str| format!("store.hbase_client.{name}");
        if let Some(addr) = &self.thrift2 {
            if !is_host_port(addr) {
                return Err(Error::Config(format!(
                    "{} = {addr:?}: use host:port, such as 127.0.0.1:9091",
                    key("thrift2")
                )));
            }
        }
        for (name, value) in [
            ("batch_rows", self.batch_rows as u64),
            ("batch_cells", self.batch_cells as u64),
            ("batch_bytes", self.batch_bytes as u64),
            ("scan_caching", self.scan_caching as u64),
            ("read_connections", self.read_connections as u64),
            ("connect_timeout_secs", self.connect_timeout_secs),
            ("rpc_timeout_secs", self.rpc_timeout_secs),
            ("idle_reconnect_secs", self.idle_reconnect_secs),
            ("retry_initial_backoff_ms", self.retry_initial_backoff_ms),
            ("retry_max_backoff_ms", self.retry_max_backoff_ms),
            (
                "retry_max_elapsed_secs",
                self.retry_max_elapsed_secs.unwrap_or(1),
            ),
        ] {
            if value == 0 {
                return Err(Error::Config(format!(
                    "{} = 0: use at least 1 (leave it out for the default)",
                    key(name)
                )));
            }
        }
        // Thrift's default message limit is 100 MB; a batch near it would be refused whole.
        if self.batch_bytes > MAX_BATCH_BYTES {
            return Err(Error::Config(format!(
                "{} = {}: use at most {MAX_BATCH_BYTES} (64 MiB), under the gateway's Thrift \
                 message limit",
                key("batch_bytes"),
                self.batch_bytes
            )));
        }
        if self.retry_max_backoff_ms < self.retry_initial_backoff_ms {
            return Err(Error::Config(format!(
                "{} = {} is below {} = {}: the longest delay cannot be shorter than the first",
                key("retry_max_backoff_ms"),
                self.retry_max_backoff_ms,
                key("retry_initial_backoff_ms"),
                self.retry_initial_backoff_ms
            )));
        }
        Ok(())
    }
}

/// Largest `store.hbase_client.batch_bytes` accepted.
pub const MAX_BATCH_BYTES: usize = 64 << 20;

fn is_host_port(addr: &str) -> bool {
    addr.rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok())
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            kind: StoreKind::default(),
            dir: default_dir(),
            generation_mb: default_generation_mb(),
            series_layout: false,
            hbase: None,
            hbase_client: HbaseClientConfig::default(),
        }
    }
}

impl StoreConfig {
    /// Checks values that parse but make no sense.
    ///
    /// # Errors
    /// [`Error::Config`] naming the key.
    pub fn validate(&self) -> Result<()> {
        if self.generation_mb == 0 {
            return Err(Error::Config(
                "store.generation_mb must be at least 1 (MiB of a table's generation on disk)"
                    .into(),
            ));
        }
        if self.kind == StoreKind::Hbase && self.hbase.is_none() {
            return Err(Error::Config(
                "store.kind = \"hbase\" needs store.hbase = \"host:port\" (the Thrift1 gateway)"
                    .into(),
            ));
        }
        self.hbase_client.validate()
    }
    /// The settings of the backend `kind` names, which build it ([`StorageConfig::build`]):
    /// the one place that tells the backends apart.
    ///
    /// # Errors
    /// [`Error::Config`] naming an invalid key ([`StoreConfig::validate`]).
    pub fn backend(&self) -> Result<Box<dyn StorageConfig>> {
        self.validate()?;
        Ok(match self.kind {
            StoreKind::Embedded => Box::new(EmbeddedConfig::from_store(self)),
            StoreKind::Hbase => Box::new(HbaseConfig::from_store(self)?),
        })
    }
}

/// Opens the backend `cfg` names over `tables`, which the domain declares (the sensors':
/// `sensor::tables::all_tables`): storage knows no table of its own.
///
/// The embedded store is opened once here (its directory is locked until every clone of the
/// [`Store`] is dropped); HBase is not contacted until the first call.
///
/// # Errors
/// [`Error::Config`] for an invalid `[store]` section; [`Error::NoEmbeddedStore`] when a
/// read-only open names a directory that does not exist; the embedded store's refusals (locked,
/// damaged journal, …).
pub fn open(cfg: &StoreConfig, tables: &[TableSpec], options: &OpenOptions) -> Result<Store> {
    let storage = cfg.backend()?.build(tables, options)?;
    Ok(Store::new(storage))
}
