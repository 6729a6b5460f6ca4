//! `hourglass tables landing-check` for the sensor tables: how evenly a table's row keys spread
//! over salt buckets or regions, predicted from a recording before go-live or counted in a live
//! HBase table. The report, its statistics and renderings are `sinks::landing`'s.

mod live;
mod predict;

use std::path::PathBuf;

use crate::codec::narrow::KeyScheme;
use crate::Result;
use sinks::landing::{LandingReport, Layout};

/// What to check, as `hourglass tables landing-check` parses it for a sensor table.
#[derive(Debug, Clone)]
pub struct LandingArgs {
    /// Recorded traffic (JSON Lines, `.gz`/`.zst` allowed) whose row keys to predict; `None`
    /// with `hbase`.
    pub file: Option<PathBuf>,
    /// Count the rows of the live table per region instead, through the HBase Thrift1 gateway
    /// at this `HOST:PORT`.
    pub hbase: Option<String>,
    /// The table.
    pub table: TableArg,
    /// Split points of ts_metric_hourly and ts_room_latest to predict over, for a file, as
    /// `tables create` would make them with the same flags.
    pub split: crate::tools::splits::SplitArgs,
    /// Row-key scheme of `ts_metric`: `<bucket>_<device>_<reversed ts>` or `<device>_<ts>`.
    pub scheme: KeyScheme,
    /// Salt buckets (salted) or regions (plain) of `ts_metric` to predict over, for a file.
    pub buckets: u32,
    /// Largest acceptable max ÷ mean rows per bucket or region.
    pub max_skew: f64,
    /// Job configuration (TOML): the metric name for a file, `[store.hbase_client]` for HBase.
    pub config: Option<PathBuf>,
}

/// The sensor table checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableArg {
    /// `ts_metric`: narrow rows.
    Narrow,
    /// `ts_metric_hourly`: wide rows, `<device>_<hour start>`.
    Hourly,
    /// `ts_room_latest`: the room view, `<room>_<device>`.
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

/// The layout of a table's keys, for the report.
fn layout(table: TableArg, scheme: KeyScheme) -> Layout {
    Layout {
        table: table.name(),
        scheme: match (table, scheme) {
            (TableArg::Narrow, KeyScheme::Salted) => "salted",
            (TableArg::Narrow, KeyScheme::Plain) => "plain",
            (TableArg::Hourly, _) => "wide",
            (TableArg::Room, _) => "room",
        },
        entity: "device",
        prefix_of: device_prefix,
    }
}

/// Runs the check: the spread of a recording's predicted rows, or of the live table's.
///
/// # Errors
/// An unreadable file or unreachable HBase, bad flags, or nothing to check.
pub fn check(args: &LandingArgs) -> Result<LandingReport> {
    let cfg = match &args.config {
        Some(path) => crate::config::JobConfig::load(path)?,
        None => crate::config::JobConfig::default(),
    };
    let scheme = args.scheme;
    match (&args.file, &args.hbase, args.table) {
        (Some(file), _, TableArg::Narrow) => {
            ensure!(
                (1..=1000).contains(&args.buckets),
                "--buckets must be 1..=1000, got {}",
                args.buckets
            );
            predict::from_file(file, &cfg.metric, scheme, args.buckets, args.max_skew)
        }
        (Some(file), _, table) => {
            let splits = args.split.resolve(&cfg)?;
            predict::id_table_from_file(file, &cfg.metric, table, &splits, args.max_skew)
        }
        (None, Some(addr), table) => live::from_hbase(&cfg, addr, table, scheme, args.max_skew),
        (None, None, _) => bail!("give a recording FILE or --hbase HOST:PORT"),
    }
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
}
