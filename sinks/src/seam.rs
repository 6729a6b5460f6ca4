//! The storage seam: the traits every backend implements ([`Storage`], built by its
//! [`StorageConfig`]), and the [`Store`] handle that `sinks::open` returns.
//!
//! A backend lives in its own module (`embedded/storage.rs`, `hbase/storage.rs`) and is known
//! here only through these traits: nothing outside its module asks which one it is, except the
//! few genuinely HBase-only commands, through [`Store::downcast_ref`].

use std::any::Any;
use std::fmt;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use crate::admin::{Created, TableDescription};
use crate::embedded::OpenMode;
use crate::schema::TableSpec;
use crate::table::{Row, ScanSpec, TableReader, TableWriter, TimeRange};
use crate::{Error, Result};

/// The clock the embedded store measures TTLs against: milliseconds since the epoch.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// Makes one writer per call: one per timely worker.
pub type WriterFactory = Arc<dyn Fn() -> Box<dyn TableWriter> + Send + Sync>;

/// How `sinks::open` opens a store.
#[derive(Clone)]
pub struct OpenOptions {
    /// Whether the embedded store may be created or changed, and what happens to a damaged
    /// journal (default [`OpenMode::ReadWrite`]). HBase ignores it.
    pub mode: OpenMode,
    /// The clock of the embedded store's TTLs (default: the system clock). HBase uses its own.
    pub clock: Clock,
    /// Upper bound on how long HBase calls retry a retriable failure, on top of
    /// `store.hbase_client.retry_max_elapsed_secs` (default `None`: the configuration alone).
    /// Interactive commands set it, so that an unreachable HBase fails them in bounded time.
    pub retry_limit: Option<Duration>,
    /// Make the embedded writers ignore a put older than the cell's visible one, as HBase does
    /// with `VERSIONS => 1`, at the price of a read per cell (default `false`: hourglass's cell
    /// timestamps are functions of the cell, so the last put is also the newest; see
    /// [`crate::embedded::EmbeddedWriter::newest_timestamp_wins`]).
    pub newest_timestamp_wins: bool,
}

impl OpenOptions {
    /// Opened as `mode` says, with the system clock.
    pub fn new(mode: OpenMode) -> Self {
        OpenOptions {
            mode,
            clock: Arc::new(crate::embedded::system_now_ms),
            retry_limit: None,
            newest_timestamp_wins: false,
        }
    }
}

impl Default for OpenOptions {
    fn default() -> Self {
        OpenOptions::new(OpenMode::default())
    }
}

impl fmt::Debug for OpenOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenOptions")
            .field("mode", &self.mode)
            .field("retry_limit", &self.retry_limit)
            .field("newest_timestamp_wins", &self.newest_timestamp_wins)
            .finish_non_exhaustive()
    }
}

/// A backend's settings, which build the backend (as Vector's `SinkConfig::build` builds a
/// sink): the embedded store's [`crate::embedded::EmbeddedConfig`], HBase's
/// [`crate::hbase::HbaseConfig`]. `StoreConfig::backend` picks the one `store.kind` names.
pub trait StorageConfig: fmt::Debug {
    /// Opens the backend over `tables`.
    ///
    /// # Errors
    /// The backend's refusal to open (the embedded store: a missing directory for a read-only
    /// open, a lock held elsewhere, a damaged journal, …); HBase is not contacted here.
    fn build(&self, tables: &[TableSpec], options: &OpenOptions) -> Result<Box<dyn Storage>>;
}

/// One open backend: writers, readers and table administration over the tables it was built
/// with. Object-safe; shared by the workers and the HTTP threads behind a [`Store`].
pub trait Storage: fmt::Debug + Send + Sync {
    /// A writer for one worker.
    fn writer(&self) -> Box<dyn TableWriter>;

    /// A reader for queries, shareable across threads.
    fn reader(&self) -> Arc<dyn StorageReader>;

    /// Table administration.
    fn admin(&self) -> &dyn StorageAdmin;

    /// Where the tables are, for messages: a directory or `HBase at host:port`.
    fn location(&self) -> String;

    /// Makes written data survive a crash of the machine.
    ///
    /// # Errors
    /// The backend failed to sync; it then refuses further writes.
    fn persist(&self) -> Result<()>;

    /// Fails with the command to run if a table a job writes does not exist.
    ///
    /// # Errors
    /// A missing table, naming the command that creates it; the backend is unreachable.
    fn ensure_tables(&self) -> Result<()>;

    /// What opening the backend dropped or repaired, one sentence each, for the caller to
    /// print as warnings (default: nothing).
    fn open_warnings(&self) -> Vec<String> {
        Vec::new()
    }

    /// What the writers did, shared and read when asked: the `/metrics` endpoint and the
    /// benchmarks read it (default `None`: the backend counts nothing beyond the dataflow's
    /// own counters).
    fn metrics(&self) -> Option<Arc<dyn MetricsSource>> {
        None
    }

    /// The backend as [`Any`], for [`Store::downcast_ref`].
    fn as_any(&self) -> &dyn Any;
}

/// Table administration of a backend, over the tables it was built with. Object-safe; callers
/// use it through [`Admin`].
pub trait StorageAdmin {
    /// Creates every table that does not exist.
    ///
    /// # Errors
    /// A table exists with another schema (naming the differences); the backend is
    /// unreachable or refuses.
    fn create_tables(&self) -> Result<Vec<(String, Created)>>;

    /// The tables that do not exist.
    ///
    /// # Errors
    /// The backend is unreachable.
    fn missing_tables(&self) -> Result<Vec<String>>;

    /// The tables as the backend has them: families and regions.
    ///
    /// # Errors
    /// [`Error::Invalid`] for a backend without regions; a missing table; the backend is
    /// unreachable.
    fn describe_tables(&self) -> Result<Vec<TableDescription>>;

    /// Calls `each` on every visible row of `table`, in key order, until it breaks.
    ///
    /// # Errors
    /// The backend's failure to read.
    fn dump_rows(&self, table: &str, each: &mut dyn FnMut(Row) -> ControlFlow<()>) -> Result<()>;

    /// Asks the backend to rewrite `table`'s files without the cells deleted or expired, as
    /// HBase's `major_compact`: HBase starts it and returns (it runs on the region servers);
    /// the embedded store compacts before returning.
    ///
    /// # Errors
    /// An unknown table; the backend is unreachable or fails.
    fn major_compact(&self, table: &str) -> Result<()>;
}

/// One statistic a backend keeps, read when asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatValue {
    /// A count that only grows (calls made, rows sent, retries).
    Counter(u64),
    /// A value that may change either way, or the largest seen so far.
    Gauge(u64),
    /// A setting the backend runs with (a batch limit), for reports.
    Setting(u64),
}

impl StatValue {
    /// The number, whatever its kind.
    pub fn value(self) -> u64 {
        match self {
            StatValue::Counter(v) | StatValue::Gauge(v) | StatValue::Setting(v) => v,
        }
    }
}

/// A source of backend statistics, each under a stable snake_case name (the HBase writers'
/// `retries` feeds `hourglass_job_sink_retries_total`).
pub trait MetricsSource: fmt::Debug + Send + Sync {
    /// Every statistic, as of now.
    fn stats(&self) -> Vec<(String, StatValue)>;

    /// The value of the statistic `name`, if this source keeps it.
    fn stat(&self, name: &str) -> Option<u64> {
        self.stats()
            .into_iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.value())
    }

    /// Rows a reader asked for by key (gets and multi-gets, not scans), by table and region, as
    /// the reader counted them from the region boundaries it knows (default none: a backend
    /// without regions, as the embedded store).
    fn region_reads(&self) -> Vec<RegionReads> {
        Vec::new()
    }
}

/// Rows read from one region of a table since the reader was made ([`MetricsSource::region_reads`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionReads {
    /// The table.
    pub table: String,
    /// The region's encoded name (the hash HBase names it by in its own metrics and UI);
    /// `other` for the reads of regions past the first
    /// [`MAX_COUNTED_REGIONS`](crate::hbase::MAX_COUNTED_REGIONS) of a table, `unknown` while
    /// the boundaries could not be read.
    pub region: String,
    /// The region's start key as text, bytes outside printable ASCII as `\xNN`; empty for the
    /// first region, `other` and `unknown`.
    pub start: String,
    /// Rows asked for.
    pub rows: u64,
}

/// What a backend's reader is: a [`TableReader`] that may count its calls (HBase counts its
/// gateway calls, so tests see that a multi-get was as few calls as
/// [`TableSpec::get_rows_per_call`] rows) and its reads per region.
pub trait StorageReader: TableReader + MetricsSource {}

impl<T: TableReader + MetricsSource> StorageReader for T {}

/// An open backend. Cloning is cheap and shares it.
#[derive(Debug, Clone)]
pub struct Store(Arc<dyn Storage>);

impl Store {
    /// The handle of a backend built by hand (tests, a backend of one's own).
    pub fn new(storage: Box<dyn Storage>) -> Self {
        Store(Arc::from(storage))
    }

    /// A writer for one worker.
    pub fn writer(&self) -> Box<dyn TableWriter> {
        self.0.writer()
    }

    /// [`Store::writer`] as a factory the workers share.
    pub fn writers(&self) -> WriterFactory {
        let store = self.clone();
        Arc::new(move || store.writer())
    }

    /// A reader for queries; clones share the embedded store or the HBase connection pool.
    pub fn reader(&self) -> Reader {
        Reader(self.0.reader())
    }

    /// Table administration.
    pub fn admin(&self) -> Admin<'_> {
        Admin(self.0.admin())
    }

    /// Where the tables are, for messages: a directory or `HBase at host:port`.
    pub fn location(&self) -> String {
        self.0.location()
    }

    /// What opening the store dropped or repaired (see [`Storage::open_warnings`]).
    pub fn open_warnings(&self) -> Vec<String> {
        self.0.open_warnings()
    }

    /// What the writers did (see [`Storage::metrics`]).
    pub fn metrics(&self) -> Option<Arc<dyn MetricsSource>> {
        self.0.metrics()
    }

    /// Fails with the command to run if a table a job writes does not exist.
    ///
    /// # Errors
    /// [`crate::hbase::Error::TablesMissing`]; HBase is unreachable.
    pub fn ensure_tables(&self) -> Result<()> {
        self.0.ensure_tables()
    }

    /// Makes written data survive a crash of the machine: the embedded store syncs its
    /// journal; HBase writes are durable once flushed.
    ///
    /// # Errors
    /// The embedded store's sync failed; it then refuses further writes.
    pub fn persist(&self) -> Result<()> {
        self.0.persist()
    }

    /// The backend as its own type, for the few commands that exist for one backend only
    /// (HBase's region splits and the settings its benchmark reports); `None` for another.
    pub fn downcast_ref<T: Storage + 'static>(&self) -> Option<&T> {
        self.0.as_any().downcast_ref()
    }
}

/// The read side of a [`Store`]: shareable across threads, cheap to clone.
#[derive(Debug, Clone)]
pub struct Reader(Arc<dyn StorageReader>);

impl Reader {
    /// The calls this reader made so far, by name (none for the embedded store, which has no
    /// calls to count; see [`crate::hbase::ReaderStats`] for HBase's).
    pub fn stats(&self) -> Vec<(String, StatValue)> {
        self.0.stats()
    }

    /// One of [`Reader::stats`], if this reader counts it.
    pub fn stat(&self, name: &str) -> Option<u64> {
        self.0.stat(name)
    }

    /// Rows read per table and region (see [`MetricsSource::region_reads`]; none for the
    /// embedded store).
    pub fn region_reads(&self) -> Vec<RegionReads> {
        self.0.region_reads()
    }
}

impl TableReader for Reader {
    fn get(&self, table: &str, row: &[u8], time: Option<TimeRange>) -> Result<Option<Row>> {
        self.0.get(table, row, time)
    }

    fn get_versions(
        &self,
        table: &str,
        row: &[u8],
        time: Option<TimeRange>,
        max_versions: u32,
    ) -> Result<Option<Row>> {
        self.0.get_versions(table, row, time, max_versions)
    }

    // Forwarded, not left to the trait's default: HBase answers a multi-get with `getMultiple`
    // calls of many rows, where the default would make one Get per row.
    fn get_many(
        &self,
        table: &str,
        rows: &[Vec<u8>],
        time: Option<TimeRange>,
    ) -> Result<Vec<Option<Row>>> {
        self.0.get_many(table, rows, time)
    }

    fn scan(&self, table: &str, spec: &ScanSpec) -> Result<Vec<Row>> {
        self.0.scan(table, spec)
    }

    fn scan_keys(
        &self,
        table: &str,
        spec: &ScanSpec,
        visit: &mut dyn FnMut(&[u8]),
    ) -> Result<usize> {
        self.0.scan_keys(table, spec, visit)
    }
}

/// Table administration of a [`Store`], over the tables it was opened with.
#[derive(Clone, Copy)]
pub struct Admin<'a>(&'a dyn StorageAdmin);

impl fmt::Debug for Admin<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Admin").finish_non_exhaustive()
    }
}

impl Admin<'_> {
    /// Creates every table that does not exist (HBase: pre-split, through the Thrift2 gateway);
    /// the embedded store created its tables when it was opened.
    ///
    /// # Errors
    /// A table exists in HBase with another schema (naming the differences); HBase is
    /// unreachable or refuses.
    pub fn create_tables(&self) -> Result<Vec<(String, Created)>> {
        self.0.create_tables()
    }

    /// The tables that do not exist (for the embedded store, none unless it was opened
    /// read-only: an open to write creates them).
    ///
    /// # Errors
    /// HBase is unreachable.
    pub fn missing_tables(&self) -> Result<Vec<String>> {
        self.0.missing_tables()
    }

    /// The tables as HBase has them: families and regions.
    ///
    /// # Errors
    /// [`Error::Invalid`] for the embedded store, which has no regions to show; a missing
    /// table; HBase is unreachable.
    pub fn describe_tables(&self) -> Result<Vec<TableDescription>> {
        self.0.describe_tables()
    }

    /// Asks the backend to rewrite `table`'s files without its deleted and expired cells, to
    /// reclaim their space: HBase's Thrift1 `majorCompact`, which returns once the region
    /// servers have queued it; the embedded store's compaction of every generation, done when
    /// this returns.
    ///
    /// # Errors
    /// An unknown table; HBase is unreachable or refuses; the embedded store fails to write.
    pub fn major_compact(&self, table: &str) -> Result<()> {
        self.0.major_compact(table)
    }

    /// Calls `each` on every visible row of `table`, in key order, and stops at its first
    /// error.
    ///
    /// # Errors
    /// The first error of `each`; the backend's failure to read.
    pub fn dump<E: From<Error>>(
        &self,
        table: &str,
        mut each: impl FnMut(Row) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut failed = None;
        self.0.dump_rows(table, &mut |row| match each(row) {
            Ok(()) => ControlFlow::Continue(()),
            Err(e) => {
                failed = Some(e);
                ControlFlow::Break(())
            }
        })?;
        match failed {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}
