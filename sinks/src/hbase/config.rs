//! Settings of the HBase backend: gateway addresses, batch limits, timeouts and retries.

use std::time::Duration;

use crate::config::{HbaseClientConfig, StoreConfig};

/// Default port of the Thrift2 gateway, used when only the Thrift1 address is given.
pub const DEFAULT_THRIFT2_PORT: u16 = 9091;

/// How retriable failures are retried: capped exponential backoff.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Delay before the first retry (default 100 ms); it doubles on each retry.
    pub initial_backoff: Duration,
    /// Longest delay between two attempts (default 10 s).
    pub max_backoff: Duration,
    /// Give up once this much time has passed since the first attempt (default `None`: retry
    /// forever, blocking the caller, which back-pressures the pipeline).
    pub max_elapsed: Option<Duration>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy::from_client(&HbaseClientConfig::default())
    }
}

impl RetryPolicy {
    /// The policy `[store.hbase_client]` sets.
    pub fn from_client(c: &HbaseClientConfig) -> Self {
        RetryPolicy {
            initial_backoff: Duration::from_millis(c.retry_initial_backoff_ms),
            max_backoff: Duration::from_millis(c.retry_max_backoff_ms),
            max_elapsed: c.retry_max_elapsed_secs.map(Duration::from_secs),
        }
    }

    /// The delay before retry number `retry` (1 for the first retry).
    pub fn backoff(&self, retry: u32) -> Duration {
        let factor = 1u32
            .checked_shl(retry.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.initial_backoff
            .checked_mul(factor)
            .map_or(self.max_backoff, |d| d.min(self.max_backoff))
    }
}

/// Where HBase is and how to talk to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HbaseConfig {
    /// Thrift1 gateway `host:port` (table names, regions).
    pub thrift1: String,
    /// Thrift2 gateway `host:port` (reads, writes, table creation with split keys,
    /// descriptors).
    pub thrift2: String,
    /// A write call (`putMultiple`) is sent once it holds this many rows (default 10,000) …
    pub batch_rows: usize,
    /// … or this many cells, of any timestamps (default 10,000) …
    pub batch_cells: usize,
    /// … or this many bytes of row keys, columns and values (default 4 MiB, well under the
    /// Thrift message limits of the gateway). A writer buffers at most four times this across
    /// all its calls before sending everything.
    pub batch_bytes: usize,
    /// Rows fetched per scanner call (default 1000).
    pub scan_caching: usize,
    /// Gateway connections a reader opens at most, one per concurrent call (default 16);
    /// callers beyond that wait for a free one.
    pub read_connections: usize,
    /// TCP connect timeout (default 5 s).
    pub connect_timeout: Duration,
    /// Socket read/write timeout of one call (default 60 s); a call that times out is retried
    /// on a new connection.
    pub rpc_timeout: Duration,
    /// A connection idle this long is replaced before its next call (default 45 s), because the
    /// gateways drop connections idle for 60 s.
    pub idle_reconnect: Duration,
    /// Retries of retriable failures.
    pub retry: RetryPolicy,
}

impl HbaseConfig {
    /// Settings for the Thrift1 gateway at `thrift1` (`host:port`), with the Thrift2 gateway on
    /// the same host at port 9091 and every other setting at its default.
    pub fn new(thrift1: impl Into<String>) -> Self {
        Self::with_client(thrift1, &HbaseClientConfig::default())
    }

    /// Settings for the Thrift1 gateway at `thrift1` (`host:port`) as `client` sets them.
    pub fn with_client(thrift1: impl Into<String>, client: &HbaseClientConfig) -> Self {
        let thrift1 = thrift1.into();
        let thrift2 = client
            .thrift2
            .clone()
            .unwrap_or_else(|| default_thrift2(&thrift1));
        HbaseConfig {
            thrift1,
            thrift2,
            batch_rows: client.batch_rows,
            batch_cells: client.batch_cells,
            batch_bytes: client.batch_bytes,
            scan_caching: client.scan_caching,
            read_connections: client.read_connections,
            connect_timeout: Duration::from_secs(client.connect_timeout_secs),
            rpc_timeout: Duration::from_secs(client.rpc_timeout_secs),
            idle_reconnect: Duration::from_secs(client.idle_reconnect_secs),
            retry: RetryPolicy::from_client(client),
        }
    }

    /// The settings of the `[store]` section: `store.hbase` and `[store.hbase_client]`.
    ///
    /// # Errors
    /// [`crate::Error::Config`] if `store.hbase` is not set or a client setting is invalid.
    pub fn from_store(store: &StoreConfig) -> crate::Result<Self> {
        let addr = store.hbase.as_deref().ok_or_else(|| {
            crate::Error::Config(
                "store.kind = \"hbase\" needs an address: pass --hbase HOST:PORT or set \
                 store.hbase"
                    .into(),
            )
        })?;
        store.hbase_client.validate()?;
        Ok(Self::with_client(addr, &store.hbase_client))
    }

    /// Uses the Thrift2 gateway at `thrift2` (`host:port`).
    #[must_use]
    pub fn with_thrift2(mut self, thrift2: impl Into<String>) -> Self {
        self.thrift2 = thrift2.into();
        self
    }
}

/// The Thrift2 address on the host of `thrift1`: `host:9091`.
pub fn default_thrift2(thrift1: &str) -> String {
    let host = match thrift1.rsplit_once(':') {
        Some((host, _port)) => host,
        None => thrift1,
    };
    format!("{host}:{DEFAULT_THRIFT2_PORT}")
}
