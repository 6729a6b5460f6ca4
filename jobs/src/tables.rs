//! `hourglass tables`: the schema as HBase shell DDL, table creation, description and splits
//! in HBase, and dumps of stored tables, for the tables of both jobs: the sensor job's
//! (`ts_metric`, `ts_metric_hourly`, `ts_room_latest`) and the profile job's
//! (`user_profile_tag`, `user_tag_history`).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};
use sensor::config::JobConfig;
use sensor::tables;
use sinks::admin::Created;
use sinks::hbase::admin;
use sinks::hbase::{HbaseConfig, HbaseStorage};
use sinks::schema::TableSpec;

use pipeline::store::{Backend, BackendArgs};

use sensor::tables::IdSplits;
use sensor::tools::splits::{SplitArgs, Splits};

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
    /// Job configuration (TOML), for store.hbase (and `registry`, which the split follows
    /// unless --split-from is given).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Split points of ts_metric_hourly and ts_room_latest.
    #[command(flatten)]
    pub split: SplitArgs,
}

/// Every table of both jobs: the sensor job's with the split `ids` gives its id-keyed tables,
/// then the profile job's (split over their salt, whatever the flags).
fn every_table(ids: &IdSplits) -> Vec<TableSpec> {
    let mut specs = tables::all_tables_split(ids);
    specs.extend(profile::tables());
    specs
}

impl HbaseArgs {
    /// The tables with the split these flags ask for, and where it comes from.
    fn tables(&self) -> Result<(Vec<TableSpec>, Splits)> {
        let splits = self.split.resolve(&load_config(self.config.as_ref())?)?;
        Ok((every_table(&splits.ids), splits))
    }

    /// The HBase settings of [`HbaseArgs::open`]. `tables create` and `tables split` are
    /// HBase's own admin (region split keys the flags choose, regions to compare and recreate),
    /// so they ask for HBase by its type rather than through the generic [`sinks::Storage`].
    fn hbase(&self) -> Result<HbaseConfig> {
        let backend = self.open(&tables::all_tables())?;
        backend
            .downcast_ref::<HbaseStorage>()
            .map(|hbase| hbase.config().clone())
            .context("the table admin commands need HBase")
    }

    /// HBase as the flags and the config name it, whatever the config's `store.kind`, opened
    /// with `specs`.
    fn open(&self, specs: &[TableSpec]) -> Result<Backend> {
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
        Ok(pipeline::store::open(
            &cfg.store, specs, &backend, true, false,
        )?)
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
    /// Print the HBase shell DDL that creates every hourglass table (both jobs'), pre-split.
    Ddl {
        /// Split points of ts_metric_hourly and ts_room_latest.
        #[command(flatten)]
        split: SplitArgs,
        /// Job configuration (TOML), for `registry` and `metric`.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Create every hourglass table in HBase, both jobs', pre-split (no-op for tables that exist with the
    /// same schema, saying so when one lacks split points; an error naming the differences
    /// when the schema differs).
    Create(HbaseArgs),
    /// Show the hourglass tables in HBase: families, TTL, compression, bloom filter, versions,
    /// region boundaries and the split points the flags ask for that are missing; the tables
    /// not created yet are named as such.
    Describe(HbaseArgs),
    /// Give an existing table the split points the flags ask for: recreate it pre-split if it
    /// is empty and --recreate-if-empty is given, else print the HBase shell commands that
    /// split it (HBase's Thrift gateways have no split call).
    Split {
        /// The table: ts_metric, ts_metric_hourly, ts_room_latest, user_profile_tag or
        /// user_tag_history.
        #[arg(long)]
        table: String,
        /// If the table holds no row, drop it and create it again pre-split (stop the jobs
        /// that write it first).
        #[arg(long)]
        recreate_if_empty: bool,
        /// HBase and the split points.
        #[command(flatten)]
        hbase: HbaseArgs,
    },
    /// Print every visible cell of a table: `row<TAB>family:qualifier<TAB>ts_ms<TAB>value`.
    Dump {
        /// Table name (`ts_metric`, `ts_metric_hourly`, `ts_room_latest`, `user_profile_tag` or
        /// `user_tag_history`).
        table: String,
        /// Where the table is: `--store DIR` (default ./hourglass-data) or `--hbase HOST:PORT`.
        #[command(flatten)]
        backend: BackendArgs,
        /// Job configuration (TOML), for the store location.
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Check how evenly a table's row keys spread over salt buckets or regions (ts_metric,
    /// ts_metric_hourly, ts_room_latest, user_profile_tag), from a recording (before go-live) or
    /// a live HBase table; exit 1 when max ÷ mean exceeds `--max-skew`.
    LandingCheck(crate::landing::LandingArgs),
}

/// Runs a table command.
pub fn run(cmd: TablesCommand) -> Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    match cmd {
        TablesCommand::LandingCheck(args) => return crate::landing::run(args),
        TablesCommand::Ddl { split, config } => {
            let splits = split.resolve(&load_config(config.as_ref())?)?;
            // The shell reads `#` as a comment: the output stays a script it runs.
            writeln!(out, "# split points: {}", splits.origin)?;
            for spec in every_table(&splits.ids) {
                writeln!(out, "# {} row key: {}", spec.name, spec.key.layout)?;
                writeln!(out, "{}", spec.hbase_shell_ddl())?;
            }
        }
        TablesCommand::Create(args) => {
            let (specs, splits) = args.tables()?;
            writeln!(out, "split points: {}", splits.origin)?;
            for (table, created) in admin::create_tables(&args.hbase()?, &specs)? {
                match created {
                    Created::Created => writeln!(out, "{table}: created")?,
                    Created::AlreadyExists => {
                        writeln!(out, "{table}: exists with the same schema; left as is")?;
                    }
                    Created::ExistsWithOtherSplits { regions, missing } => {
                        let text = other_splits_text(&table, &specs, regions, &missing);
                        writeln!(out, "{text}")?;
                        eprintln!("warning: {text}");
                    }
                    Created::ExistsWithOtherStorage {
                        differences,
                        alter,
                        regions,
                        missing,
                    } => {
                        let text = format!(
                            "{table}: exists with the same schema but another block layout ({}); \
                             used as it is (it stores and answers the same; only its files' size \
                             and read cost differ). The HBase shell commands `{}` give it the \
                             spec's",
                            differences.join("; "),
                            alter.join("; ")
                        );
                        writeln!(out, "{text}")?;
                        eprintln!("warning: {text}");
                        if !missing.is_empty() {
                            let text = other_splits_text(&table, &specs, regions, &missing);
                            writeln!(out, "{text}")?;
                            eprintln!("warning: {text}");
                        }
                    }
                }
            }
        }
        TablesCommand::Split {
            table,
            recreate_if_empty,
            hbase,
        } => return split(&mut out, &table, recreate_if_empty, &hbase),
        TablesCommand::Describe(args) => {
            let (specs, splits) = args.tables()?;
            writeln!(out, "split points asked for: {}", splits.origin)?;
            let missing = admin::missing_tables(&args.hbase()?, &specs)?;
            for name in &missing {
                writeln!(
                    out,
                    "table {name}: not in HBase; `hourglass tables create` creates it"
                )?;
            }
            let present: Vec<TableSpec> = specs
                .iter()
                .filter(|s| !missing.iter().any(|m| m == s.name))
                .cloned()
                .collect();
            for t in args.open(&present)?.admin().describe_tables()? {
                writeln!(out, "table {}", t.name)?;
                for f in &t.families {
                    let ttl = f.ttl_secs.map_or("FOREVER".into(), |s| s.to_string());
                    writeln!(
                        out,
                        "  family {}: TTL {ttl}, COMPRESSION {}, BLOOMFILTER {}, VERSIONS {}, \
                         BLOCKSIZE {}, DATA_BLOCK_ENCODING {}",
                        f.name,
                        f.compression,
                        f.bloom,
                        f.max_versions,
                        f.block_size,
                        f.data_block_encoding
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
                let wanted = specs
                    .iter()
                    .find(|s| s.name == t.name)
                    .map_or(&[][..], |s| &s.split_keys[..]);
                let missing = admin::missing_split_keys(wanted, &t.regions);
                if missing.is_empty() {
                    writeln!(
                        out,
                        "  split points: all {} present as region boundaries",
                        wanted.len()
                    )?;
                } else {
                    writeln!(
                        out,
                        "  split points: {} of {} missing ({}): `hourglass tables split --table {}`",
                        missing.len(),
                        wanted.len(),
                        preview(&missing),
                        t.name
                    )?;
                }
            }
        }
        TablesCommand::Dump {
            table,
            backend,
            config,
        } => {
            let spec = every_table(&IdSplits::default())
                .into_iter()
                .find(|t| t.name == table)
                .with_context(|| unknown_table(&table))?;
            let cfg = load_config(config.as_ref())?;
            let db = pipeline::store::open(
                &cfg.store,
                std::slice::from_ref(&spec),
                &backend,
                true,
                false,
            )?;
            if db.admin().missing_tables()?.iter().any(|t| t == spec.name) {
                bail!("{}", absent_table(spec.name, &db.location()));
            }
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

/// What to say of a table `location` does not hold: which command creates it.
fn absent_table(table: &str, location: &str) -> String {
    let replay = if profile::tables().iter().any(|t| t.name == table) {
        "hourglass profile replay FILE"
    } else {
        "hourglass replay FILE"
    };
    format!(
        "table {table} does not exist in {location}: nothing was written to it yet. A job creates \
         its tables when it first writes (`{replay} --store DIR`); in HBase `hourglass tables \
         create --hbase HOST:PORT` creates every table"
    )
}

fn unknown_table(table: &str) -> String {
    format!(
        "unknown table {table}: use {}, {}, {}, {}, {} or {}",
        tables::NARROW_TABLE,
        tables::HOURLY_TABLE,
        tables::ROOM_TABLE,
        profile::PROFILE_TABLE,
        profile::HISTORY_TABLE,
        profile::audience::INDEX_TABLE
    )
}

/// The first few of `keys`, for a message.
/// The warning for a table that exists without some of the split points its spec asks for.
fn other_splits_text(
    table: &str,
    specs: &[TableSpec],
    regions: usize,
    missing: &[Vec<u8>],
) -> String {
    format!(
        "{table}: exists with the same schema, but in {regions} region{} without {} of the {} \
         split points asked for ({}){}; left as is. `hourglass tables split --table {table}` \
         (with the same split flags) splits it or prints the HBase shell commands that do",
        if regions == 1 { "" } else { "s" },
        missing.len(),
        specs
            .iter()
            .find(|s| s.name == table)
            .map_or(0, |s| s.split_keys.len()),
        preview(missing),
        if regions == 1 {
            ": every read and write of it goes to one region server"
        } else {
            ""
        },
    )
}

fn preview(keys: &[Vec<u8>]) -> String {
    const SHOWN: usize = 4;
    let mut text: Vec<String> = keys
        .iter()
        .take(SHOWN)
        .map(|k| k.escape_ascii().to_string())
        .collect();
    if keys.len() > SHOWN {
        text.push(format!("… {} more", keys.len() - SHOWN));
    }
    text.join(", ")
}

/// `tables split`: nothing to do, a recreation of an empty table, or the HBase shell commands.
fn split(
    out: &mut impl Write,
    table: &str,
    recreate_if_empty: bool,
    args: &HbaseArgs,
) -> Result<ExitCode> {
    let (specs, splits) = args.tables()?;
    let spec = specs
        .into_iter()
        .find(|t| t.name == table)
        .with_context(|| unknown_table(table))?;
    let cfg = args.hbase()?;
    let (regions, missing) = admin::split_state(&cfg, &spec)?;
    if missing.is_empty() {
        writeln!(
            out,
            "{table}: already split at all {} split points asked for ({} regions); nothing to do",
            spec.split_keys.len(),
            regions.len()
        )?;
        return Ok(ExitCode::SUCCESS);
    }
    if recreate_if_empty {
        if admin::recreate_if_empty(&cfg, &spec)? {
            writeln!(
                out,
                "{table}: was empty; created again with {} regions ({})",
                spec.split_keys.len() + 1,
                splits.origin
            )?;
            return Ok(ExitCode::SUCCESS);
        }
        eprintln!("{table} holds rows, so it is not recreated: split it in the HBase shell");
    }
    // Neither Thrift gateway of HBase 2 can split a region: the shell (or any Java client's
    // `Admin.split`) has to.
    writeln!(
        out,
        "# {table}: {} region{} and {} of the {} split points asked for missing ({}).",
        regions.len(),
        if regions.len() == 1 { "" } else { "s" },
        missing.len(),
        spec.split_keys.len(),
        splits.origin
    )?;
    writeln!(
        out,
        "# HBase's Thrift gateways have no split call: run these in the HBase shell, e.g.\n\
         #   hourglass tables split --table {table} [same flags] > split.rb && hbase shell -n split.rb\n\
         # A region just split cannot be split again while it references its parent's files\n\
         # (a table holding data): when a split fails, run major_compact '{table}', wait for it,\n\
         # and run `hourglass tables split` again; it prints only the split points still missing."
    )?;
    for command in admin::split_commands(table, &missing) {
        writeln!(out, "{command}")?;
    }
    eprintln!(
        "{table} is not split yet: run the {} printed commands in the HBase shell",
        missing.len()
    );
    Ok(ExitCode::SUCCESS)
}
