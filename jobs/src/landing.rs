//! `hourglass tables landing-check`: the flags, the domain that checks the table (the sensor
//! job's three, the profile job's `user_profile_tag`), and the report's output and exit code
//! (`sinks::landing`).

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{ensure, Context, Result};
use sensor::codec::narrow::KeyScheme;
use sensor::tools::landing::TableArg;
use sinks::landing::LandingReport;

/// Arguments of `hourglass tables landing-check`.
#[derive(Debug, Clone, clap::Args)]
pub struct LandingArgs {
    /// A recording whose row keys to predict (JSON Lines, `.gz`/`.zst` allowed): readings for
    /// the sensor tables, tag events for user_profile_tag; omit with `--hbase`.
    #[arg(required_unless_present = "hbase", conflicts_with = "hbase")]
    pub file: Option<PathBuf>,
    /// Count the rows of the live table per region instead, through the HBase Thrift1
    /// gateway at HOST:PORT.
    #[arg(long, value_name = "HOST:PORT")]
    pub hbase: Option<String>,
    /// The table: `ts_metric` (narrow rows, over salt buckets), `ts_metric_hourly` (one row per
    /// device and hour), `ts_room_latest` (one row per device, under its newest room) or
    /// `user_profile_tag` (one row per user).
    #[arg(long, value_enum, default_value = "ts_metric")]
    pub table: Table,
    /// Split points of ts_metric_hourly and ts_room_latest to predict over, for a file, as
    /// `tables create` would make them with the same flags.
    #[command(flatten)]
    pub split: sensor::tools::splits::SplitArgs,
    /// Row-key scheme of ts_metric and user_profile_tag: `salted` (`<bucket>_<device>_<reversed
    /// ts>`; `<md5 hex:4><user>`) or `plain` (`<device>_<ts>`; `<user>`).
    #[arg(long, value_enum, default_value = "salted")]
    pub scheme: SchemeArg,
    /// Salt buckets (salted ts_metric) or regions (plain keys) to predict over, for a file
    /// [default: 16, as `tables create` pre-splits]. Salted user_profile_tag keys always take
    /// the table's own split.
    #[arg(long)]
    pub buckets: Option<u32>,
    /// Largest acceptable max ÷ mean rows per bucket/region; above it the check fails (exit 1).
    #[arg(long, default_value_t = 1.5)]
    pub max_skew: f64,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
    /// Also draw the rows per bucket/region as an SVG bar chart into FILE.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Job configuration (TOML) of the table's job: the metric name (sensor) or the event
    /// limits (profile) for a file, `[store.hbase_client]` for HBase.
    #[arg(long)]
    pub config: Option<PathBuf>,
}

/// The table checked, as a flag value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Table {
    /// `ts_metric`: narrow rows.
    #[value(name = "ts_metric")]
    Narrow,
    /// `ts_metric_hourly`: wide rows, `<device>_<hour start>`.
    #[value(name = "ts_metric_hourly")]
    Hourly,
    /// `ts_room_latest`: the room view, `<room>_<device>`.
    #[value(name = "ts_room_latest")]
    Room,
    /// `user_profile_tag`: one row per user, `<md5 hex:4><user>`.
    #[value(name = "user_profile_tag")]
    Profile,
}

/// The key scheme, as a flag value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SchemeArg {
    /// Salted keys, as the jobs write them.
    Salted,
    /// The id first, unsalted.
    Plain,
}

/// Output format of the check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A table for the terminal.
    Table,
    /// One JSON object, for scripts.
    Json,
}

/// Runs the check; exit 1 when the spread fails `--max-skew`.
pub fn run(args: LandingArgs) -> Result<ExitCode> {
    ensure!(
        args.max_skew.is_finite() && args.max_skew >= 1.0,
        "--max-skew must be a number >= 1 (max ÷ mean is never below 1), got {}",
        args.max_skew
    );
    let report = check(&args)?;
    if let Some(path) = &args.svg {
        std::fs::write(path, sinks::landing::svg(&report))
            .with_context(|| format!("writing the chart to {}", path.display()))?;
    }
    let mut out = std::io::stdout().lock();
    match args.format {
        Format::Table => sinks::landing::table(&mut out, &report)?,
        Format::Json => {
            serde_json::to_writer_pretty(&mut out, &report)?;
            std::io::Write::write_all(&mut out, b"\n")?;
        }
    }
    Ok(if report.pass {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The report of the domain whose table the flags name.
fn check(args: &LandingArgs) -> Result<LandingReport> {
    let sensor_table = match args.table {
        Table::Narrow => TableArg::Narrow,
        Table::Hourly => TableArg::Hourly,
        Table::Room => TableArg::Room,
        Table::Profile => {
            let keys = match args.scheme {
                SchemeArg::Salted => profile::landing::Keys::Salted,
                SchemeArg::Plain => profile::landing::Keys::Plain,
            };
            return Ok(profile::landing::check(&profile::landing::LandingArgs {
                file: args.file.clone(),
                hbase: args.hbase.clone(),
                keys,
                regions: args.buckets,
                max_skew: args.max_skew,
                config: args.config.clone(),
            })?);
        }
    };
    Ok(sensor::tools::landing::check(
        &sensor::tools::landing::LandingArgs {
            file: args.file.clone(),
            hbase: args.hbase.clone(),
            table: sensor_table,
            split: args.split.clone(),
            scheme: match args.scheme {
                SchemeArg::Salted => KeyScheme::Salted,
                SchemeArg::Plain => KeyScheme::Plain,
            },
            buckets: args.buckets.unwrap_or(sensor::codec::key::SALT_BUCKETS),
            max_skew: args.max_skew,
            config: args.config.clone(),
        },
    )?)
}
