//! `hourglass tables`: the schema as HBase shell DDL, table creation and description in HBase,
//! and dumps of stored tables.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use pipeline::config::JobConfig;
use pipeline::schema;
use sinks::hbase::admin::Created;

use crate::store::{Backend, BackendArgs};

/// Where HBase is, for the admin commands.
#[derive(Debug, Clone, clap::Args)]
pub struct HbaseArgs {
    /// HBase Thrift1 gateway [default: the config's store.hbase].
    #[arg(long, value_name = "HOST:PORT")]
    pub hbase: Option<String>,
    /// HBase Thrift2 gateway, which creates pre-split tables [default: the --hbase host, port
    /// 9091].
    #[arg(long, value_name = "HOST:PORT")]
    pub thrift2: Option<String>,
    /// Job configuration (TOML), for store.hbase.
    #[arg(long)]
    pub config: Option<PathBuf>,
}

impl HbaseArgs {
    /// HBase as the flags and the config name it, whatever the config's `store.kind`.
    fn open(&self) -> Result<Backend> {
        let cfg = load_config(self.config.as_ref())?;
        let backend = BackendArgs {
            store: None,
            hbase: self.hbase.clone().or_else(|| cfg.store.hbase.clone()),
            thrift2: self.thrift2.clone(),
        };
        anyhow::ensure!(
            backend.hbase.is_some(),
            "store.kind = \"hbase\" needs an address: pass --hbase HOST:PORT or set store.hbase"
        );
        crate::store::open(&cfg, &backend, true, false)
    }
}

fn load_config(path: Option<&PathBuf>) -> Result<JobConfig> {
    Ok(match path {
        Some(path) => JobConfig::load(path)?,
        None => JobConfig::default(),
    })
}

/// Table commands.
#[derive(Debug, clap::Subcommand)]
pub enum TablesCommand {
    /// Print the HBase shell DDL that creates every hourglass table.
    Ddl,
    /// Create every hourglass table in HBase, pre-split (no-op for tables that exist with the
    /// same schema; an error naming the differences otherwise).
    Create(HbaseArgs),
    /// Show the hourglass tables in HBase: families, TTL, compression, bloom filter, versions
    /// and region boundaries.
    Describe(HbaseArgs),
    /// Print every visible cell of a table: `row<TAB>family:qualifier<TAB>ts_ms<TAB>value`.
    Dump {
        /// Table name (`ts_metric` or `ts_metric_hourly`).
        table: String,
        /// Where the table is: `--store DIR` (default ./hourglass-data) or `--hbase HOST:PORT`.
        #[command(flatten)]
        backend: BackendArgs,
        /// Job configuration (TOML), for the store location.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Check how evenly narrow row keys spread over salt buckets or regions, from a recording
    /// (before go-live) or a live HBase table; exit 1 when max ÷ mean exceeds `--max-skew`.
    LandingCheck(crate::landing::LandingArgs),
}

/// Runs a table command.
pub fn run(cmd: TablesCommand) -> Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    match cmd {
        TablesCommand::LandingCheck(args) => return crate::landing::run(&args),
        TablesCommand::Ddl => {
            for spec in schema::all_tables() {
                writeln!(out, "{}", spec.hbase_shell_ddl())?;
            }
        }
        TablesCommand::Create(args) => {
            for (table, created) in args.open()?.admin().create_tables()? {
                let what = match created {
                    Created::Created => "created",
                    Created::AlreadyExists => "exists with the same schema; left as is",
                };
                writeln!(out, "{table}: {what}")?;
            }
        }
        TablesCommand::Describe(args) => {
            for t in args.open()?.admin().describe_tables()? {
                writeln!(out, "table {}", t.name)?;
                for f in &t.families {
                    let ttl = f.ttl_secs.map_or("FOREVER".into(), |s| s.to_string());
                    writeln!(
                        out,
                        "  family {}: TTL {ttl}, COMPRESSION {}, BLOOMFILTER {}, VERSIONS {}",
                        f.name, f.compression, f.bloom, f.max_versions
                    )?;
                }
                writeln!(out, "  {} regions:", t.regions.len())?;
                for r in &t.regions {
                    writeln!(
                        out,
                        "    [{:?}, {:?})  {}",
                        String::from_utf8_lossy(&r.start),
                        String::from_utf8_lossy(&r.end),
                        r.server
                    )?;
                }
            }
        }
        TablesCommand::Dump {
            table,
            backend,
            config,
        } => {
            let spec = schema::all_tables()
                .into_iter()
                .find(|t| t.name == table)
                .with_context(|| {
                    format!(
                        "unknown table {table}: use {} or {}",
                        schema::NARROW_TABLE,
                        schema::HOURLY_TABLE
                    )
                })?;
            let cfg = load_config(config.as_ref())?;
            let db = crate::store::open(&cfg, &backend, true, false)?;
            db.admin().dump(spec.name, |row| -> Result<()> {
                for c in &row.cells {
                    writeln!(
                        out,
                        "{}\t{}:{}\t{}\t{}",
                        String::from_utf8_lossy(&row.key),
                        c.family,
                        String::from_utf8_lossy(&c.qualifier),
                        c.ts_ms,
                        String::from_utf8_lossy(&c.value)
                    )?;
                }
                Ok(())
            })?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
