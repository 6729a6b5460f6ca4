//! [`open`]: the one place that turns a [`StoreConfig`] into a backend, and what a job gets
//! from it (writers, a shareable reader, table admin), whichever backend it is.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{StoreConfig, StoreKind};
use crate::embedded::{EmbeddedStore, JournalDamage, OpenMode};
use crate::hbase::admin::{self, Created, TableDescription};
use crate::hbase::{HbaseConfig, HbaseStore, HbaseWriter, WriterStats};
use crate::schema::{self, TableSpec};
use crate::table::{Row, ScanSpec, TableReader, TableWriter, TimeRange};
use crate::{Error, Result};

/// The clock the embedded store measures TTLs against: milliseconds since the epoch.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// Makes one writer per call: one per timely worker.
pub type WriterFactory = Arc<dyn Fn() -> Box<dyn TableWriter> + Send + Sync>;

/// How [`open`] opens a store.
#[derive(Clone)]
pub struct OpenOptions {
    /// Whether the embedded store may be created or changed, and what happens to a damaged
    /// journal (default [`OpenMode::ReadWrite`]). HBase ignores it.
    pub mode: OpenMode,
    /// The tables (default: every hourglass table, [`schema::all_tables`]).
    pub tables: Vec<TableSpec>,
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
    /// Every hourglass table, opened as `mode` says, with the system clock.
    pub fn new(mode: OpenMode) -> Self {
        OpenOptions {
            mode,
            tables: schema::all_tables(),
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
            .field(
                "tables",
                &self.tables.iter().map(|t| t.name).collect::<Vec<_>>(),
            )
            .field("retry_limit", &self.retry_limit)
            .field("newest_timestamp_wins", &self.newest_timestamp_wins)
            .finish_non_exhaustive()
    }
}

/// Opens the backend `cfg` names.
///
/// The embedded store is opened once here (its directory is locked until every clone of the
/// [`Store`] is dropped); HBase is not contacted until the first call.
///
/// # Errors
/// [`Error::Config`] for an invalid `[store]` section; [`Error::NoEmbeddedStore`] when a
/// read-only open names a directory that does not exist; the embedded store's refusals (locked,
/// damaged journal, …).
pub fn open(cfg: &StoreConfig, options: &OpenOptions) -> Result<Store> {
    cfg.validate()?;
    let backend = match cfg.kind {
        StoreKind::Embedded => {
            let dir = &cfg.dir;
            if options.mode == OpenMode::ReadOnly && !dir.exists() {
                return Err(Error::NoEmbeddedStore { dir: dir.clone() });
            }
            let store = EmbeddedStore::open_with_options(
                dir,
                &options.tables,
                options.clock.clone(),
                options.mode,
            )?;
            store.set_generation_bytes(cfg.generation_mb.saturating_mul(1 << 20));
            Backend::Embedded {
                store,
                dir: dir.clone(),
            }
        }
        StoreKind::Hbase => {
            let mut hb = HbaseConfig::from_store(cfg)?;
            if let Some(limit) = options.retry_limit {
                hb.retry.max_elapsed = Some(hb.retry.max_elapsed.map_or(limit, |m| m.min(limit)));
            }
            Backend::Hbase {
                cfg: hb,
                stats: Arc::new(WriterStats::default()),
            }
        }
    };
    Ok(Store {
        backend,
        tables: options.tables.clone(),
        newest_timestamp_wins: options.newest_timestamp_wins,
    })
}

/// An open backend. Cloning is cheap and shares it.
#[derive(Debug, Clone)]
pub struct Store {
    backend: Backend,
    tables: Vec<TableSpec>,
    newest_timestamp_wins: bool,
}

#[derive(Debug, Clone)]
enum Backend {
    /// Opened once, shared by every writer and reader.
    Embedded { store: EmbeddedStore, dir: PathBuf },
    /// Each writer opens its own connection; `stats` adds up what they send.
    Hbase {
        cfg: HbaseConfig,
        stats: Arc<WriterStats>,
    },
}

impl Store {
    /// A writer for one worker.
    pub fn writer(&self) -> Box<dyn TableWriter> {
        match &self.backend {
            Backend::Embedded { store, .. } => Box::new(
                store
                    .writer()
                    .newest_timestamp_wins(self.newest_timestamp_wins),
            ),
            Backend::Hbase { cfg, stats } => {
                Box::new(HbaseWriter::with_stats(cfg, stats.clone()).for_tables(&self.tables))
            }
        }
    }

    /// [`Store::writer`] as a factory the workers share.
    pub fn writers(&self) -> WriterFactory {
        let store = self.clone();
        Arc::new(move || store.writer())
    }

    /// What the HBase writers sent and retried, added up (`None` for the embedded store, whose
    /// writes are counted by the dataflow alone).
    pub fn writer_stats(&self) -> Option<Arc<WriterStats>> {
        match &self.backend {
            Backend::Embedded { .. } => None,
            Backend::Hbase { stats, .. } => Some(stats.clone()),
        }
    }

    /// A reader for queries; clones share the embedded store or the HBase connection pool.
    pub fn reader(&self) -> Reader {
        Reader(match &self.backend {
            Backend::Embedded { store, .. } => ReaderKind::Embedded(store.clone()),
            Backend::Hbase { cfg, .. } => ReaderKind::Hbase(Arc::new(HbaseStore::new(cfg))),
        })
    }

    /// Table administration.
    pub fn admin(&self) -> Admin<'_> {
        Admin { store: self }
    }

    /// Where the tables are, for messages: a directory or `HBase at host:port`.
    pub fn location(&self) -> String {
        match &self.backend {
            Backend::Embedded { dir, .. } => dir.display().to_string(),
            Backend::Hbase { cfg, .. } => format!("HBase at {}", cfg.thrift1),
        }
    }

    /// The HBase settings in use (`None` for the embedded store).
    pub fn hbase_config(&self) -> Option<&HbaseConfig> {
        match &self.backend {
            Backend::Embedded { .. } => None,
            Backend::Hbase { cfg, .. } => Some(cfg),
        }
    }

    /// What opening the embedded store dropped from its journals (see
    /// [`EmbeddedStore::dropped_on_open`]); empty for HBase.
    pub fn dropped_on_open(&self) -> &[JournalDamage] {
        match &self.backend {
            Backend::Embedded { store, .. } => store.dropped_on_open(),
            Backend::Hbase { .. } => &[],
        }
    }

    /// Fails with the command to run if a table a job writes does not exist.
    ///
    /// # Errors
    /// [`crate::hbase::Error::TablesMissing`]; HBase is unreachable.
    pub fn ensure_tables(&self) -> Result<()> {
        let missing = self.admin().missing_tables()?;
        match &self.backend {
            Backend::Hbase { cfg, .. } if !missing.is_empty() => {
                Err(crate::hbase::Error::TablesMissing {
                    tables: missing.join(", "),
                    addr: cfg.thrift1.clone(),
                }
                .into())
            }
            _ => Ok(()),
        }
    }

    /// Makes written data survive a crash of the machine: the embedded store syncs its
    /// journal; HBase writes are durable once flushed.
    ///
    /// # Errors
    /// The embedded store's sync failed; it then refuses further writes.
    pub fn persist(&self) -> Result<()> {
        match &self.backend {
            Backend::Embedded { store, .. } => store.persist(),
            Backend::Hbase { .. } => Ok(()),
        }
    }
}

/// The read side of a [`Store`]: shareable across threads, cheap to clone.
#[derive(Debug, Clone)]
pub struct Reader(ReaderKind);

#[derive(Debug, Clone)]
enum ReaderKind {
    Embedded(EmbeddedStore),
    Hbase(Arc<HbaseStore>),
}

impl Reader {
    /// The gateway calls an HBase reader made (`None` for the embedded store, which has no
    /// calls to count): how tests see that a multi-get was one `getMultiple` call per
    /// [`GET_ROWS_CHUNK`](crate::hbase::GET_ROWS_CHUNK) rows, not one get a row.
    pub fn hbase_stats(&self) -> Option<&crate::hbase::ReaderStats> {
        match &self.0 {
            ReaderKind::Embedded(_) => None,
            ReaderKind::Hbase(store) => Some(store.stats()),
        }
    }
}

impl TableReader for Reader {
    fn get(&self, table: &str, row: &[u8], time: Option<TimeRange>) -> Result<Option<Row>> {
        match &self.0 {
            ReaderKind::Embedded(store) => store.get(table, row, time),
            ReaderKind::Hbase(store) => store.get(table, row, time),
        }
    }

    fn get_versions(
        &self,
        table: &str,
        row: &[u8],
        time: Option<TimeRange>,
        max_versions: u32,
    ) -> Result<Option<Row>> {
        match &self.0 {
            ReaderKind::Embedded(store) => store.get_versions(table, row, time, max_versions),
            ReaderKind::Hbase(store) => store.get_versions(table, row, time, max_versions),
        }
    }

    // Forwarded, not left to the trait's default: HBase answers a multi-get with `getMultiple`
    // calls of many rows, where the default would make one Get per row.
    fn get_many(
        &self,
        table: &str,
        rows: &[Vec<u8>],
        time: Option<TimeRange>,
    ) -> Result<Vec<Option<Row>>> {
        match &self.0 {
            ReaderKind::Embedded(store) => store.get_many(table, rows, time),
            ReaderKind::Hbase(store) => store.get_many(table, rows, time),
        }
    }

    fn scan(&self, table: &str, spec: &ScanSpec) -> Result<Vec<Row>> {
        match &self.0 {
            ReaderKind::Embedded(store) => store.scan(table, spec),
            ReaderKind::Hbase(store) => store.scan(table, spec),
        }
    }
}

/// Table administration of a [`Store`], over the tables it was opened with.
#[derive(Debug, Clone, Copy)]
pub struct Admin<'a> {
    store: &'a Store,
}

impl Admin<'_> {
    /// Creates every table that does not exist (HBase: pre-split, through the Thrift2 gateway);
    /// the embedded store created its tables when it was opened.
    ///
    /// # Errors
    /// A table exists in HBase with another schema (naming the differences); HBase is
    /// unreachable or refuses.
    pub fn create_tables(&self) -> Result<Vec<(String, Created)>> {
        match &self.store.backend {
            Backend::Embedded { .. } => Ok(self
                .store
                .tables
                .iter()
                .map(|t| (t.name.to_string(), Created::AlreadyExists))
                .collect()),
            Backend::Hbase { cfg, .. } => Ok(admin::create_tables(cfg, &self.store.tables)?),
        }
    }

    /// The tables that do not exist (always none for the embedded store, which creates them
    /// when it opens).
    ///
    /// # Errors
    /// HBase is unreachable.
    pub fn missing_tables(&self) -> Result<Vec<String>> {
        match &self.store.backend {
            Backend::Embedded { .. } => Ok(Vec::new()),
            Backend::Hbase { cfg, .. } => Ok(admin::missing_tables(cfg, &self.store.tables)?),
        }
    }

    /// The tables as HBase has them: families and regions.
    ///
    /// # Errors
    /// [`Error::Invalid`] for the embedded store, which has no regions to show; a missing
    /// table; HBase is unreachable.
    pub fn describe_tables(&self) -> Result<Vec<TableDescription>> {
        match &self.store.backend {
            Backend::Embedded { dir, .. } => Err(Error::Invalid(format!(
                "describing tables shows HBase's regions; the embedded store at {} has none: \
                 pass --hbase HOST:PORT",
                dir.display()
            ))),
            Backend::Hbase { cfg, .. } => Ok(admin::describe_tables(cfg, &self.store.tables)?),
        }
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
        match &self.store.backend {
            Backend::Embedded { store, .. } => {
                for row in store.dump(table)? {
                    each(row)?;
                }
            }
            Backend::Hbase { cfg, .. } => {
                let mut failed = None;
                HbaseStore::new(cfg)
                    .scan_each(table, &ScanSpec::default(), |row| {
                        if failed.is_none() {
                            failed = each(row).err();
                        }
                    })
                    .map_err(Error::from)?;
                if let Some(e) = failed {
                    return Err(e);
                }
            }
        }
        Ok(())
    }
}
