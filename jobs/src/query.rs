//! `hourglass query`: dashboard queries against the tables.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use pipeline::time::{format_time, parse_time};
use sensor::config::JobConfig;
use sensor::query;
use sensor::reading::{format_value, Reading};
use sensor::tables;
use sinks::table::TableReader;

use sinks::Reader;

use pipeline::store::BackendArgs;

/// Output format of query answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Aligned columns for people.
    Table,
    /// `ts,value` header, then one row per reading (ts in epoch seconds).
    Csv,
    /// One JSON document.
    Json,
}

/// Where `query curve` reads from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Source {
    /// Whole hours from wide rows (a dirty hour's from the narrow table), the hour `--to` falls
    /// in from the narrow table.
    Auto,
    /// The narrow table only (every field of each reading).
    Narrow,
    /// Every hour from its wide row (a dirty hour's from the narrow table).
    Wide,
}

impl From<Source> for query::CurveSource {
    fn from(s: Source) -> Self {
        match s {
            Source::Auto => query::CurveSource::Auto,
            Source::Narrow => query::CurveSource::Narrow,
            Source::Wide => query::CurveSource::Wide,
        }
    }
}

/// How `query room` answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Strategy {
    /// One prefix scan of the room view.
    View,
    /// Parallel salted scans of the narrow table over the registry's devices.
    Fanout,
}

/// Where to read from.
#[derive(Debug, Clone, clap::Args)]
pub struct StoreArgs {
    /// Where the tables are: `--store DIR` (embedded) or `--hbase HOST:PORT`.
    #[command(flatten)]
    pub backend: BackendArgs,
    /// Job configuration (TOML), for the key scheme and store location.
    #[arg(long, global = true)]
    pub config: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value = "table", global = true)]
    pub format: Format,
}

/// The dashboard queries.
#[derive(Debug, clap::Subcommand)]
pub enum QueryCommand {
    /// A device's readings with `from <= ts < to`, oldest first.
    Curve {
        /// Device id.
        #[arg(long)]
        device: String,
        /// Start (inclusive): epoch seconds or RFC 3339.
        #[arg(long)]
        from: String,
        /// End (exclusive): epoch seconds or RFC 3339.
        #[arg(long)]
        to: String,
        /// `auto`: whole hours from wide rows (one Get each), partial hours from the narrow
        /// table; `narrow`: one scan of the narrow table (JSON then includes every field);
        /// `wide`: wide rows only.
        #[arg(long, value_enum, default_value = "auto")]
        source: Source,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// The hour of a device containing a time, from one Get of its wide row.
    Hour {
        /// Device id.
        #[arg(long)]
        device: String,
        /// Any time in the hour: epoch seconds or RFC 3339.
        #[arg(long)]
        hour: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// A device's newest reading.
    Latest {
        /// Device id.
        #[arg(long)]
        device: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Every device's current value in a room.
    Room {
        /// Room id.
        #[arg(long)]
        room: String,
        /// `view`: one prefix scan of the room view `ts_room_latest`; `fanout`: the seed's way,
        /// the newest narrow row of each of the room's devices (from the registry), 16 salt
        /// buckets scanned in parallel.
        #[arg(long, value_enum, default_value = "view")]
        strategy: Strategy,
        /// Device registry CSV, for `--strategy fanout` [default: the config's `registry`].
        #[arg(long)]
        registry: Option<PathBuf>,
        #[command(flatten)]
        store: StoreArgs,
    },
}

fn open(args: &StoreArgs) -> Result<(JobConfig, Reader)> {
    let mut cfg = match &args.config {
        Some(path) => JobConfig::load(path)?,
        None => JobConfig::default(),
    };
    args.backend.apply(&mut cfg.store);
    let backend = pipeline::store::open(
        &cfg.store,
        &sensor::tables::all_tables(),
        &args.backend,
        true,
        false,
    )?;
    Ok((cfg, backend.reader()))
}

/// Runs a query and prints its answer.
pub fn run(cmd: QueryCommand) -> Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    match cmd {
        QueryCommand::Curve {
            device,
            from,
            to,
            source,
            store,
        } => {
            let (from, to) = (parse_time(&from)?, parse_time(&to)?);
            anyhow::ensure!(
                from < to,
                "--from must be before --to (the range is [from, to))"
            );
            let (cfg, db) = open(&store)?;
            if source != Source::Narrow {
                let points =
                    query::curve_points(&db, cfg.key_scheme, &device, from, to, source.into())?;
                if points.is_empty() {
                    ensure_known(&db, &cfg, &device)?;
                    eprintln!(
                        "no readings of {device} in [{}, {})",
                        format_time(from),
                        format_time(to)
                    );
                }
                match store.format {
                    Format::Json => writeln!(
                        out,
                        "{}",
                        serde_json::json!({ "device": device, "from": from, "to": to, "points": points })
                    )?,
                    f => write_points(&mut out, f, &points)?,
                }
                return Ok(ExitCode::SUCCESS);
            }
            let readings = query::curve(&db, cfg.key_scheme, &device, from, to)?;
            if readings.is_empty() {
                ensure_known(&db, &cfg, &device)?;
                eprintln!(
                    "no readings of {device} in [{}, {})",
                    format_time(from),
                    format_time(to)
                );
            }
            let points: Vec<(i64, f64)> = readings.iter().map(|r| (r.ts, r.value)).collect();
            match store.format {
                Format::Json => {
                    let rows: Vec<serde_json::Value> = readings.iter().map(reading_json).collect();
                    writeln!(
                        out,
                        "{}",
                        serde_json::json!({ "device": device, "from": from, "to": to, "readings": rows })
                    )?;
                }
                f => write_points(&mut out, f, &points)?,
            }
        }
        QueryCommand::Hour {
            device,
            hour,
            store,
        } => {
            let at = parse_time(&hour)?;
            let (cfg, db) = open(&store)?;
            let answer = query::hour(&db, cfg.key_scheme, &device, at)?;
            if answer.points.is_empty() {
                ensure_known(&db, &cfg, &device)?;
                eprintln!(
                    "no readings of {device} in the hour starting {}",
                    format_time(answer.hour_start)
                );
            }
            match store.format {
                Format::Json => writeln!(out, "{}", serde_json::to_string(&answer)?)?,
                f => {
                    write_points(&mut out, f, &answer.points)?;
                    if let (Format::Table, Some(s)) = (f, &answer.summary) {
                        writeln!(
                            out,
                            "summary: n={} min={} max={} mean={} first={} last={}",
                            s.n,
                            format_value(s.min),
                            format_value(s.max),
                            format_value(s.sum / f64::from(s.n.max(1))),
                            format_value(s.first),
                            format_value(s.last)
                        )?;
                    }
                }
            }
        }
        QueryCommand::Latest { device, store } => {
            let (cfg, db) = open(&store)?;
            let Some(r) = query::latest(&db, cfg.key_scheme, &device)? else {
                anyhow::bail!(
                    "device {device} has no readings in table {}",
                    tables::NARROW_TABLE
                );
            };
            match store.format {
                Format::Json => writeln!(out, "{}", reading_json(&r))?,
                f => write_points(&mut out, f, &[(r.ts, r.value)])?,
            }
        }
        QueryCommand::Room {
            room,
            strategy,
            registry,
            store,
        } => {
            let (cfg, db) = open(&store)?;
            let entries = match strategy {
                Strategy::View => sensor::room::room(&db, &room)?,
                Strategy::Fanout => {
                    let path = registry.or(cfg.registry.clone()).ok_or_else(|| {
                        anyhow::anyhow!(
                            "--strategy fanout needs the device list: pass --registry FILE"
                        )
                    })?;
                    let devices: Vec<String> = sensor::registry::load(&path)?
                        .into_iter()
                        .filter(|(_, r)| *r == room)
                        .map(|(d, _)| d)
                        .collect();
                    sensor::room::room_fanout(&db, cfg.key_scheme, &devices)?
                }
            };
            if entries.is_empty() {
                eprintln!("no devices in room {room}");
            }
            match store.format {
                Format::Json => writeln!(
                    out,
                    "{}",
                    serde_json::json!({ "room": room, "devices": entries })
                )?,
                Format::Csv => {
                    writeln!(out, "device,ts,value")?;
                    for e in &entries {
                        writeln!(out, "{},{},{}", e.device, e.ts, format_value(e.value))?;
                    }
                }
                Format::Table => {
                    writeln!(out, "{:<30} {:<20} {:>12}", "device", "time (UTC)", "value")?;
                    for e in &entries {
                        writeln!(
                            out,
                            "{:<30} {:<20} {:>12}",
                            e.device,
                            format_time(e.ts),
                            format_value(e.value)
                        )?;
                    }
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Fails with a clear message when `device` has no reading at all.
fn ensure_known(db: &dyn TableReader, cfg: &JobConfig, device: &str) -> Result<()> {
    if query::latest(db, cfg.key_scheme, device)?.is_none() {
        anyhow::bail!(
            "unknown device {device}: it has no readings in table {} (check the id, or replay its data first)",
            tables::NARROW_TABLE
        );
    }
    Ok(())
}

fn reading_json(r: &Reading) -> serde_json::Value {
    let fields: serde_json::Value = serde_json::from_str(&r.extra).unwrap_or_default();
    serde_json::json!({ "device": r.device, "ts": r.ts, "value": r.value, "fields": fields })
}

fn write_points(out: &mut impl Write, format: Format, points: &[(i64, f64)]) -> Result<()> {
    match format {
        Format::Csv => {
            writeln!(out, "ts,value")?;
            for (ts, v) in points {
                writeln!(out, "{ts},{}", format_value(*v))?;
            }
        }
        Format::Table => {
            writeln!(out, "{:<12} {:<20} {:>12}", "ts", "time (UTC)", "value")?;
            for (ts, v) in points {
                writeln!(
                    out,
                    "{ts:<12} {:<20} {:>12}",
                    format_time(*ts),
                    format_value(*v)
                )?;
            }
        }
        Format::Json => unreachable!("JSON is written by the caller"),
    }
    Ok(())
}
