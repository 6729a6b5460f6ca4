//! The flags that choose the store, and the one call that opens it through [`sinks::open`]
//! with a job's tables.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use sinks::embedded::OpenMode;
use sinks::schema::TableSpec;
use sinks::OpenOptions;

use crate::config::{StoreConfig, StoreKind};
use crate::{Error, Result};

/// An open store: the embedded one or HBase, behind [`sinks::Store`].
pub type Backend = sinks::Store;

/// How long interactive commands (queries, table admin) retry an unreachable HBase before
/// giving up; the replay retries forever instead, blocking its workers.
const INTERACTIVE_RETRY: Duration = Duration::from_secs(60);

/// Flags that choose the backend, shared by every subcommand that reads or writes tables.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct BackendArgs {
    /// Directory of the embedded store [default: ./hourglass-data, or the config's store.dir].
    #[arg(long, global = true, conflicts_with = "hbase")]
    pub store: Option<PathBuf>,
    /// Use HBase instead of the embedded store, its Thrift1 gateway (table names and regions)
    /// at HOST:PORT [default: the config's store.hbase when store.kind = "hbase"].
    #[arg(long, global = true, value_name = "HOST:PORT")]
    pub hbase: Option<String>,
    /// HBase Thrift2 gateway, for reads, writes and table admin [default: the config's
    /// store.hbase_client.thrift2, or the --hbase host, port 9091].
    #[arg(long, global = true, value_name = "HOST:PORT")]
    pub thrift2: Option<String>,
}

impl BackendArgs {
    /// Applies the flags to a config's `[store]`: `--store` selects the embedded store,
    /// `--hbase` HBase, `--thrift2` the HBase gateway for reads, writes and admin.
    pub fn apply(&self, store: &mut StoreConfig) {
        if let Some(dir) = &self.store {
            store.kind = StoreKind::Embedded;
            store.dir = dir.clone();
        }
        if let Some(addr) = &self.hbase {
            store.kind = StoreKind::Hbase;
            store.hbase = Some(addr.clone());
        }
        if let Some(addr) = &self.thrift2 {
            store.hbase_client.thrift2 = Some(addr.clone());
        }
    }
}

/// Opens the store `cfg` names, with `tables`, after applying `args`. `interactive` bounds HBase
/// retries to a minute (queries, admin); otherwise they go on as `[store.hbase_client]` says
/// (by default forever: a streaming job waits for HBase to come back, blocking its workers).
/// Without `create` (read-only commands) the embedded store must exist and is never changed
/// (see [`OpenMode::ReadOnly`]); with it, it is opened for writing and a damaged journal is
/// refused.
pub fn open(
    cfg: &StoreConfig,
    tables: &[TableSpec],
    args: &BackendArgs,
    interactive: bool,
    create: bool,
) -> Result<Backend> {
    let mode = if create {
        OpenMode::ReadWrite
    } else {
        OpenMode::ReadOnly
    };
    open_with(
        cfg,
        tables,
        args,
        mode,
        interactive.then_some(INTERACTIVE_RETRY),
    )
}

/// [`open`] for a writing job: `recover` (its `--recover` flag) keeps the writes before damage
/// in an embedded store's journal and drops the rest, saying what it drops.
pub fn open_for_writing(
    cfg: &StoreConfig,
    tables: &[TableSpec],
    args: &BackendArgs,
    recover: bool,
) -> Result<Backend> {
    open_with(cfg, tables, args, writing_mode(recover), None)
}

/// [`open_for_writing`] for a job whose events may arrive out of event-time order across
/// flushes (the profile job's late tag events): in the embedded store as in HBase, a put older
/// than a cell's visible one does not hide it: each put is a version keyed by its stamp, written
/// without a read, and reads show the newest ([`OpenOptions::newest_timestamp_wins`]). The
/// sensor job needs none of it: its cell timestamps are functions of the cell.
pub fn open_for_merging(
    cfg: &StoreConfig,
    tables: &[TableSpec],
    args: &BackendArgs,
    recover: bool,
) -> Result<Backend> {
    let options = OpenOptions {
        newest_timestamp_wins: true,
        ..job_options(writing_mode(recover), None)
    };
    open_as(cfg, tables, args, &options)
}

/// A writing job's open mode: `recover` keeps what a damaged journal holds before the damage.
fn writing_mode(recover: bool) -> OpenMode {
    if recover {
        OpenMode::Recover
    } else {
        OpenMode::ReadWrite
    }
}

/// How every open here opens: as `mode` says, HBase retries bounded by `retry_limit`, the
/// embedded store's TTLs measured against [`crate::time::now_ms`] (so `HOURGLASS_NOW` applies).
fn job_options(mode: OpenMode, retry_limit: Option<Duration>) -> OpenOptions {
    OpenOptions {
        clock: Arc::new(crate::time::now_ms),
        retry_limit,
        ..OpenOptions::new(mode)
    }
}

/// Opens the store as `mode` says, HBase retries bounded by `retry_limit`, measuring the
/// embedded store's TTLs against [`crate::time::now_ms`] (so `HOURGLASS_NOW` applies).
pub fn open_with(
    cfg: &StoreConfig,
    tables: &[TableSpec],
    args: &BackendArgs,
    mode: OpenMode,
    retry_limit: Option<Duration>,
) -> Result<Backend> {
    open_as(cfg, tables, args, &job_options(mode, retry_limit))
}

/// Opens the store `cfg` and the flags name with `options`, printing its open warnings.
fn open_as(
    cfg: &StoreConfig,
    tables: &[TableSpec],
    args: &BackendArgs,
    options: &OpenOptions,
) -> Result<Backend> {
    let mut cfg = cfg.clone();
    args.apply(&mut cfg);
    let store = sinks::open(&cfg, tables, options).map_err(Error::Storage)?;
    for warning in store.open_warnings() {
        eprintln!("warning: {warning}");
    }
    Ok(store)
}
