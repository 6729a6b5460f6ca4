//! `hourglass tables landing-check`: how evenly a table's row keys spread over salt buckets or
//! regions, predicted from a recording before go-live or counted in a live HBase table.

mod live;
mod predict;
mod render;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::ExitCode;

use crate::codec::narrow::KeyScheme;
use crate::Result;
use pipeline::Context;
use serde::Serialize;

/// How many of the hottest device-id prefixes the check shows.
const HOTTEST: usize = 5;

/// Arguments of `hourglass tables landing-check`.
#[derive(Debug, Clone, clap::Args)]
pub struct LandingArgs {
    /// Recorded traffic (JSON Lines, `.gz`/`.zst` allowed) whose row keys to predict; omit with
    /// `--hbase`.
    #[arg(required_unless_present = "hbase", conflicts_with = "hbase")]
    pub file: Option<PathBuf>,
    /// Count the rows of the live table per region instead, through the HBase Thrift1
    /// gateway at HOST:PORT.
    #[arg(long, value_name = "HOST:PORT")]
    pub hbase: Option<String>,
    /// The table: `ts_metric` (narrow rows, over salt buckets), `ts_metric_hourly` (one row per
    /// device and hour) or `ts_room_latest` (one row per device, under its newest room).
    #[arg(long, value_enum, default_value = "ts_metric")]
    pub table: TableArg,
    /// Split points of ts_metric_hourly and ts_room_latest to predict over, for a file, as
    /// `tables create` would make them with the same flags.
    #[command(flatten)]
    pub split: crate::tools::splits::SplitArgs,
    /// Row-key scheme: `salted` (`<bucket>_<device>_<reversed ts>`) or `plain`
    /// (`<device>_<ts>`).
    #[arg(long, value_enum, default_value = "salted")]
    pub scheme: SchemeArg,
    /// Salt buckets (salted) or regions (plain) to predict over, for a file [default: 16, as
    /// `tables create` pre-splits].
    #[arg(long, default_value_t = crate::codec::key::SALT_BUCKETS)]
    pub buckets: u32,
    /// Largest acceptable max ÷ mean rows per bucket/region; above it the check fails (exit 1).
    #[arg(long, default_value_t = 1.5)]
    pub max_skew: f64,
    /// Output format.
    #[arg(long, value_enum, default_value = "table")]
    pub format: Format,
    /// Also draw the rows per bucket/region as an SVG bar chart into FILE.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Job configuration (TOML): the metric name for a file, `[store.hbase_client]` for HBase.
    #[arg(long)]
    pub config: Option<PathBuf>,
}

/// The table checked, as a flag value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TableArg {
    /// `ts_metric`: narrow rows.
    #[value(name = "ts_metric")]
    Narrow,
    /// `ts_metric_hourly`: wide rows, `<device>_<hour start>`.
    #[value(name = "ts_metric_hourly")]
    Hourly,
    /// `ts_room_latest`: the room view, `<room>_<device>`.
    #[value(name = "ts_room_latest")]
    Room,
}

impl TableArg {
    /// The table's name.
    pub fn name(self) -> &'static str {
        match self {
            TableArg::Narrow => crate::tables::NARROW_TABLE,
            TableArg::Hourly => crate::tables::HOURLY_TABLE,
            TableArg::Room => crate::tables::ROOM_TABLE,
        }
    }
}

/// The key scheme, as a flag value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum SchemeArg {
    /// `<bucket>_<device>_<Long.MAX − ts>`.
    Salted,
    /// `<device>_<ts>`.
    Plain,
}

impl From<SchemeArg> for KeyScheme {
    fn from(s: SchemeArg) -> Self {
        match s {
            SchemeArg::Salted => KeyScheme::Salted,
            SchemeArg::Plain => KeyScheme::Plain,
        }
    }
}

/// Output format of the check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A table for the terminal.
    Table,
    /// One JSON object, for scripts.
    Json,
}

/// Rows landing in one salt bucket or region.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bucket {
    /// `00`.. for a salt bucket, `r00`.. for a predicted plain region, the start key for a
    /// live region (`(start)` for the first).
    pub label: String,
    /// First row key of the bucket or region (empty: the table's start).
    pub start: String,
    /// First row key after it (empty: the table's end).
    pub end: String,
    /// Rows counted (live) or readings predicted (file).
    pub rows: u64,
}

/// A device-id prefix and the rows of its devices.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Prefix {
    /// The prefix (see [`device_prefix`]).
    pub prefix: String,
    /// Devices with this prefix.
    pub devices: u64,
    /// Their rows.
    pub rows: u64,
    /// Their share of all rows.
    pub share: f64,
    /// The bucket or region holding most of them, and its share of their rows.
    pub top_bucket: String,
    /// Share of the prefix's rows in `top_bucket`.
    pub top_bucket_share: f64,
}

/// The check's answer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LandingReport {
    /// `file PATH` or `hbase HOST:PORT table ts_metric`.
    pub source: String,
    /// The table checked.
    pub table: &'static str,
    /// `salted` or `plain` (narrow rows), `wide` (`ts_metric_hourly`), `room`
    /// (`ts_room_latest`).
    pub scheme: &'static str,
    /// Rows per bucket or region, in key order.
    pub buckets: Vec<Bucket>,
    /// All rows.
    pub rows: u64,
    /// Rows of the fullest bucket ÷ the mean over all buckets (empty ones included).
    pub max_over_mean: f64,
    /// Standard deviation ÷ mean of the rows per bucket.
    pub cv: f64,
    /// The device-id prefixes with the most rows, most first.
    pub hottest_prefixes: Vec<Prefix>,
    /// The threshold of the verdict.
    pub max_skew: f64,
    /// Whether `max_over_mean <= max_skew`.
    pub pass: bool,
    /// Input lines that are no reading (file), by reason kind; rows whose key does not have the
    /// scheme's shape (live) under `key`. Counted, never part of the spread.
    pub rejected: BTreeMap<String, u64>,
    /// How a row's bucket or region was found.
    pub note: String,
}

/// The prefix a device id shares with its gateway or batch: up to and including its last `-`,
/// `:` or `.`, or without those, the id without its trailing digits (`dev00786` → `dev`).
pub fn device_prefix(device: &str) -> &str {
    if let Some(i) = device.rfind(['-', ':', '.']) {
        return &device[..=i];
    }
    let trimmed = device.trim_end_matches(|c: char| c.is_ascii_digit());
    if trimmed.is_empty() {
        device
    } else {
        trimmed
    }
}

/// Rows per device and the bucket each device's rows land in, as both sources gather them.
#[derive(Debug, Default)]
struct Tally {
    /// Per device: (rows, in each bucket index).
    devices: HashMap<String, BTreeMap<usize, u64>>,
    rejected: BTreeMap<String, u64>,
}

impl Tally {
    fn add(&mut self, device: &str, bucket: usize, rows: u64) {
        let per = match self.devices.get_mut(device) {
            Some(per) => per,
            None => self.devices.entry(device.to_string()).or_default(),
        };
        *per.entry(bucket).or_default() += rows;
    }

    fn reject(&mut self, kind: &str) {
        *self.rejected.entry(kind.to_string()).or_default() += 1;
    }
}

/// The layout of a table's keys, for [`LandingReport::scheme`].
fn layout(table: TableArg, scheme: KeyScheme) -> &'static str {
    match (table, scheme) {
        (TableArg::Narrow, KeyScheme::Salted) => "salted",
        (TableArg::Narrow, KeyScheme::Plain) => "plain",
        (TableArg::Hourly, _) => "wide",
        (TableArg::Room, _) => "room",
    }
}

/// Buckets for the regions that `splits` cut a table into, labelled by their start keys.
fn region_buckets(splits: &[Vec<u8>]) -> Vec<Bucket> {
    let text = |k: &[u8]| k.escape_ascii().to_string();
    (0..=splits.len())
        .map(|r| {
            let start = r.checked_sub(1).map_or(String::new(), |p| text(&splits[p]));
            Bucket {
                label: if start.is_empty() {
                    "(start)".into()
                } else {
                    start.clone()
                },
                start,
                end: splits.get(r).map_or(String::new(), |s| text(s)),
                rows: 0,
            }
        })
        .collect()
}

/// Spread statistics of `buckets` and the hottest prefixes of `tally`.
fn report(
    source: String,
    (table, scheme): (TableArg, KeyScheme),
    buckets: Vec<Bucket>,
    tally: Tally,
    max_skew: f64,
    note: String,
) -> Result<LandingReport> {
    let rows: u64 = buckets.iter().map(|b| b.rows).sum();
    ensure!(
        rows > 0,
        "{source}: no rows to check; give a recording with readings, or replay one into the table first"
    );
    let n = buckets.len() as f64;
    let mean = rows as f64 / n;
    let max = buckets.iter().map(|b| b.rows).max().unwrap_or(0) as f64;
    let var = buckets
        .iter()
        .map(|b| (b.rows as f64 - mean).powi(2))
        .sum::<f64>()
        / n;
    let max_over_mean = max / mean;
    let mut prefixes: HashMap<&str, (u64, u64, BTreeMap<usize, u64>)> = HashMap::new();
    for (device, per) in &tally.devices {
        let p = prefixes.entry(device_prefix(device)).or_default();
        p.0 += 1;
        for (&b, &r) in per {
            p.1 += r;
            *p.2.entry(b).or_default() += r;
        }
    }
    let mut hottest: Vec<Prefix> = prefixes
        .into_iter()
        .map(|(prefix, (devices, prefix_rows, per))| {
            let (top, top_rows) = per
                .iter()
                .max_by_key(|(&b, &r)| (r, std::cmp::Reverse(b)))
                .map_or((0, 0), |(&b, &r)| (b, r));
            Prefix {
                prefix: prefix.to_string(),
                devices,
                rows: prefix_rows,
                share: prefix_rows as f64 / rows as f64,
                top_bucket: buckets.get(top).map_or(String::new(), |b| b.label.clone()),
                top_bucket_share: top_rows as f64 / prefix_rows.max(1) as f64,
            }
        })
        .collect();
    hottest.sort_by(|a, b| b.rows.cmp(&a.rows).then_with(|| a.prefix.cmp(&b.prefix)));
    hottest.truncate(HOTTEST);
    Ok(LandingReport {
        source,
        table: table.name(),
        scheme: layout(table, scheme),
        buckets,
        rows,
        max_over_mean,
        cv: var.sqrt() / mean,
        hottest_prefixes: hottest,
        max_skew,
        pass: max_over_mean <= max_skew,
        rejected: tally.rejected,
        note,
    })
}

/// Runs the check; exit 1 when the spread fails `--max-skew`.
///
/// # Errors
/// An unreadable file or unreachable HBase, bad flags, or nothing to check.
pub fn run(args: &LandingArgs) -> Result<ExitCode> {
    ensure!(
        args.max_skew.is_finite() && args.max_skew >= 1.0,
        "--max-skew must be a number >= 1 (max ÷ mean is never below 1), got {}",
        args.max_skew
    );
    let cfg = match &args.config {
        Some(path) => crate::config::JobConfig::load(path)?,
        None => crate::config::JobConfig::default(),
    };
    let scheme = KeyScheme::from(args.scheme);
    let report = match (&args.file, &args.hbase, args.table) {
        (Some(file), _, TableArg::Narrow) => {
            ensure!(
                (1..=1000).contains(&args.buckets),
                "--buckets must be 1..=1000, got {}",
                args.buckets
            );
            predict::from_file(file, &cfg.metric, scheme, args.buckets, args.max_skew)?
        }
        (Some(file), _, table) => {
            let splits = args.split.resolve(&cfg)?;
            predict::id_table_from_file(file, &cfg.metric, table, &splits, args.max_skew)?
        }
        (None, Some(addr), table) => live::from_hbase(&cfg, addr, table, scheme, args.max_skew)?,
        (None, None, _) => bail!("give a recording FILE or --hbase HOST:PORT"),
    };
    if let Some(path) = &args.svg {
        std::fs::write(path, render::svg(&report))
            .with_context(|| format!("writing the chart to {}", path.display()))?;
    }
    let mut out = std::io::stdout().lock();
    match args.format {
        Format::Table => render::table(&mut out, &report)?,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_end_at_the_last_separator_or_before_trailing_digits() {
        assert_eq!(device_prefix("gw03-0012"), "gw03-");
        assert_eq!(
            device_prefix("gateway-7:temp.sensor-000123"),
            "gateway-7:temp.sensor-"
        );
        assert_eq!(device_prefix("dev00786"), "dev");
        assert_eq!(device_prefix("12345"), "12345");
    }

    fn bucket(rows: u64) -> Bucket {
        Bucket {
            label: String::new(),
            start: String::new(),
            end: String::new(),
            rows,
        }
    }

    #[test]
    fn skew_counts_empty_buckets_in_the_mean() {
        let buckets = vec![bucket(30), bucket(10), bucket(0), bucket(0)];
        let mut tally = Tally::default();
        tally.add("a-1", 0, 30);
        tally.add("b-1", 1, 10);
        let r = report(
            "t".into(),
            (TableArg::Narrow, KeyScheme::Salted),
            buckets,
            tally,
            1.5,
            String::new(),
        )
        .unwrap();
        assert_eq!(r.rows, 40);
        assert!((r.max_over_mean - 3.0).abs() < 1e-12, "{}", r.max_over_mean);
        // mean 10, deviations 20, 0, -10, -10: variance 150.
        assert!((r.cv - 150f64.sqrt() / 10.0).abs() < 1e-12, "{}", r.cv);
        assert!(!r.pass);
        assert_eq!(r.hottest_prefixes[0].prefix, "a-");
        assert_eq!(r.hottest_prefixes[0].share, 0.75);
    }
}
