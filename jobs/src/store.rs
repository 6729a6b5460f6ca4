//! The one place that turns configuration and flags into a storage backend.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use pipeline::config::{JobConfig, StoreKind};
use pipeline::room::PreviousView;
use pipeline::schema;
use pipeline::table::{Row, ScanSpec, TableReader, TableWriter};
use sinks::embedded::{EmbeddedStore, OpenMode};
use sinks::hbase::{HbaseConfig, HbaseStore, HbaseWriter, WriterStats};

/// How long interactive commands (queries, table admin) retry an unreachable HBase before
/// giving up; the replay retries forever instead, blocking its workers.
const INTERACTIVE_RETRY: Duration = Duration::from_secs(60);

/// Flags that choose the backend, shared by every subcommand that reads or writes tables.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct BackendArgs {
    /// Directory of the embedded store [default: ./hourglass-data, or the config's store.dir].
    #[arg(long, global = true, conflicts_with = "hbase")]
    pub store: Option<PathBuf>,
    /// Use HBase through its Thrift1 gateway at HOST:PORT instead of the embedded store
    /// [default: the config's store.hbase when store.kind = "hbase"].
    #[arg(long, global = true, value_name = "HOST:PORT")]
    pub hbase: Option<String>,
    /// HBase Thrift2 gateway, for table admin [default: the --hbase host, port 9091].
    #[arg(long, global = true, value_name = "HOST:PORT")]
    pub thrift2: Option<String>,
}

impl BackendArgs {
    /// Applies the flags to `cfg.store`: `--store` selects the embedded store, `--hbase` HBase.
    pub fn apply(&self, cfg: &mut JobConfig) {
        if let Some(dir) = &self.store {
            cfg.store.kind = StoreKind::Embedded;
            cfg.store.dir = dir.clone();
        }
        if let Some(addr) = &self.hbase {
            cfg.store.kind = StoreKind::Hbase;
            cfg.store.hbase = Some(addr.clone());
        }
    }
}

/// Where the tables live, ready to hand out writers and readers.
#[derive(Debug, Clone)]
pub enum Backend {
    /// The embedded store, opened once and shared by every worker.
    Embedded {
        /// The open store.
        store: EmbeddedStore,
        /// Its directory.
        dir: PathBuf,
    },
    /// HBase; each writer opens its own connection, and `stats` adds up what they send.
    Hbase {
        /// Gateways and batching.
        cfg: HbaseConfig,
        /// Counters shared by the writers.
        stats: Arc<WriterStats>,
    },
}

impl Backend {
    /// A writer for one worker.
    pub fn writer(&self) -> Box<dyn TableWriter> {
        match self {
            Backend::Embedded { store, .. } => Box::new(store.writer()),
            Backend::Hbase { cfg, stats } => Box::new(
                HbaseWriter::with_stats(cfg, stats.clone()).for_tables(&schema::all_tables()),
            ),
        }
    }

    /// The counters the HBase writers share (`None` for the embedded store).
    pub fn writer_stats(&self) -> Option<Arc<WriterStats>> {
        match self {
            Backend::Embedded { .. } => None,
            Backend::Hbase { stats, .. } => Some(stats.clone()),
        }
    }

    /// A reader for dashboard queries.
    pub fn reader(&self) -> Reader {
        match self {
            Backend::Embedded { store, .. } => Reader::Embedded(store.clone()),
            Backend::Hbase { cfg, .. } => Reader::Hbase(Box::new(HbaseStore::new(cfg))),
        }
    }

    /// Where the tables are, for messages: a directory or `HBase at host:port`.
    pub fn location(&self) -> String {
        match self {
            Backend::Embedded { dir, .. } => dir.display().to_string(),
            Backend::Hbase { cfg, .. } => format!("HBase at {}", cfg.thrift1),
        }
    }

    /// Makes written data survive a crash of the machine (the embedded store syncs its journal;
    /// HBase writes are durable once flushed).
    pub fn persist(&self) -> Result<()> {
        match self {
            Backend::Embedded { store, .. } => Ok(store.persist()?),
            Backend::Hbase { .. } => Ok(()),
        }
    }

    /// Calls `each` on every visible row of `table`, in key order.
    pub fn for_each_row(&self, table: &str, mut each: impl FnMut(Row) -> Result<()>) -> Result<()> {
        match self {
            Backend::Embedded { store, .. } => {
                for row in store.dump(table)? {
                    each(row)?;
                }
            }
            Backend::Hbase { cfg, .. } => {
                let mut failed = None;
                HbaseStore::new(cfg).scan_each(table, &ScanSpec::default(), |row| {
                    if failed.is_none() {
                        failed = each(row).err();
                    }
                })?;
                if let Some(e) = failed {
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Fails with the command to run if a table hourglass writes does not exist.
    pub fn ensure_tables(&self) -> Result<()> {
        if let Backend::Hbase { cfg, .. } = self {
            let missing = sinks::hbase::admin::missing_tables(cfg, &schema::all_tables())?;
            anyhow::ensure!(
                missing.is_empty(),
                "table(s) {} not found in HBase at {}: run `hourglass tables create --hbase {}`",
                missing.join(", "),
                cfg.thrift1,
                cfg.thrift1
            );
        }
        Ok(())
    }
}

/// The read side of a [`Backend`].
#[derive(Debug)]
pub enum Reader {
    /// The embedded store.
    Embedded(EmbeddedStore),
    /// HBase.
    Hbase(Box<HbaseStore>),
}

impl TableReader for Reader {
    fn get(&self, table: &str, row: &[u8]) -> sinks::Result<Option<Row>> {
        match self {
            Reader::Embedded(store) => store.get(table, row),
            Reader::Hbase(store) => store.get(table, row),
        }
    }

    // Forwarded, not left to the trait's default: HBase answers a multi-get with one `getRows`
    // call, where the default would make one Get per row.
    fn get_many(&self, table: &str, rows: &[Vec<u8>]) -> sinks::Result<Vec<Option<Row>>> {
        match self {
            Reader::Embedded(store) => store.get_many(table, rows),
            Reader::Hbase(store) => store.get_many(table, rows),
        }
    }

    fn scan(&self, table: &str, spec: &ScanSpec) -> sinks::Result<Vec<Row>> {
        match self {
            Reader::Embedded(store) => store.scan(table, spec),
            Reader::Hbase(store) => store.scan(table, spec),
        }
    }
}

/// The room view a previous run left in `backend` (see [`PreviousView`]), which a job continues
/// from; says so when there is one.
pub fn previous_view(backend: &Backend) -> Result<PreviousView> {
    let view = PreviousView::read(&backend.reader()).with_context(|| {
        format!(
            "reading the room view a previous run left in {} ({})",
            schema::ROOM_TABLE,
            backend.location()
        )
    })?;
    if !view.is_empty() {
        tracing::info!(
            rows = view.len(),
            "room view: continuing from the stored rows"
        );
    }
    Ok(view)
}

/// The HBase settings for `cfg.store` and the `--thrift2` flag. `interactive` bounds retries to
/// a minute (queries, admin); otherwise they go on forever (a streaming job waits for HBase to
/// come back, blocking its workers).
pub fn hbase_config(
    cfg: &JobConfig,
    thrift2: Option<&str>,
    interactive: bool,
) -> Result<HbaseConfig> {
    let addr = cfg.store.hbase.as_deref().context(
        "store.kind = \"hbase\" needs an address: pass --hbase HOST:PORT or set store.hbase",
    )?;
    let mut hb = HbaseConfig::new(addr);
    if let Some(t2) = thrift2 {
        hb = hb.with_thrift2(t2);
    }
    if interactive {
        hb.retry.max_elapsed = Some(INTERACTIVE_RETRY);
    }
    Ok(hb)
}

/// Opens the backend `cfg.store` names, with HBase retries as [`hbase_config`] says. Without
/// `create` (read-only commands) the embedded store must exist and is never changed (see
/// [`OpenMode::ReadOnly`]); with it, it is opened for writing and a damaged journal is refused.
pub fn open(
    cfg: &JobConfig,
    args: &BackendArgs,
    interactive: bool,
    create: bool,
) -> Result<Backend> {
    let mode = if create {
        OpenMode::ReadWrite
    } else {
        OpenMode::ReadOnly
    };
    open_as(cfg, args, interactive, mode)
}

/// [`open`] for a writing job: `recover` (its `--recover` flag) keeps the writes before damage
/// in an embedded store's journal and drops the rest, saying what it drops.
pub fn open_for_writing(cfg: &JobConfig, args: &BackendArgs, recover: bool) -> Result<Backend> {
    let mode = if recover {
        OpenMode::Recover
    } else {
        OpenMode::ReadWrite
    };
    open_as(cfg, args, false, mode)
}

fn open_as(
    cfg: &JobConfig,
    args: &BackendArgs,
    interactive: bool,
    mode: OpenMode,
) -> Result<Backend> {
    match cfg.store.kind {
        StoreKind::Embedded => {
            let dir = &cfg.store.dir;
            anyhow::ensure!(
                mode != OpenMode::ReadOnly || dir.exists(),
                "no embedded store at {}: run `hourglass replay FILE` first, or pass --store DIR \
                 (or --hbase HOST:PORT)",
                dir.display()
            );
            let store = open_embedded_as(dir, mode)?;
            for dropped in store.dropped_on_open() {
                eprintln!(
                    "warning: embedded store at {}: {dropped}; dropped",
                    dir.display()
                );
            }
            Ok(Backend::Embedded {
                store,
                dir: dir.clone(),
            })
        }
        StoreKind::Hbase => Ok(Backend::Hbase {
            cfg: hbase_config(cfg, args.thrift2.as_deref(), interactive)?,
            stats: Arc::new(WriterStats::default()),
        }),
    }
}

/// Opens the embedded store in `dir` with every hourglass table as `mode` says, measuring TTLs
/// against [`pipeline::time::now_ms`] (so `HOURGLASS_NOW` applies).
fn open_embedded_as(dir: &Path, mode: OpenMode) -> Result<EmbeddedStore> {
    let clock = Arc::new(pipeline::time::now_ms);
    EmbeddedStore::open_with_options(dir, &schema::all_tables(), clock, mode)
        .with_context(|| format!("opening the embedded store at {}", dir.display()))
}
