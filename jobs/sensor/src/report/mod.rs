//! `hourglass report`: a month of each device and room, computed by a bounded timely job from
//! the hourly wide rows alone (never the narrow table).

mod bench;
mod figures;
mod job;
mod read;
mod render;

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

use pipeline::Context;

use crate::config::JobConfig;
use crate::Result;
use chrono::{Datelike, NaiveDate};
use serde::Serialize;

pub use figures::MonthFigures;
use pipeline::store::BackendArgs;

/// Arguments of `hourglass report`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReportArgs {
    /// The month, `YYYY-MM` (UTC).
    #[arg(long)]
    pub month: String,
    /// Only the devices of this room.
    #[arg(long, conflicts_with = "device")]
    pub room: Option<String>,
    /// Only this device.
    #[arg(long)]
    pub device: Option<String>,
    /// Output format.
    #[arg(long, value_enum, default_value = "csv")]
    pub format: Format,
    /// Write the report to FILE instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Draw the per-day readings, min, mean and max of the `--device` or `--room` as SVG.
    #[arg(long, value_name = "FILE")]
    pub svg: Option<PathBuf>,
    /// Seconds between two readings of a device, for coverage [default: per device, the median
    /// over its hours of (last − first) ÷ (readings − 1)].
    #[arg(long, value_name = "SECS")]
    pub interval: Option<i64>,
    /// Device registry CSV (`device,room`) for the rooms [default: the config's registry, else
    /// the room view table].
    #[arg(long)]
    pub registry: Option<PathBuf>,
    /// Timely workers [default: the config's workers, else the number of cores].
    #[arg(long)]
    pub workers: Option<usize>,
    /// Benchmark: first write DEVICES devices × every hour of the month of hourly wide rows
    /// (summary cells and a point every `--interval` seconds, default 600) into the store,
    /// which must have no such rows yet.
    #[arg(long, value_name = "DEVICES")]
    pub bench_fill: Option<u32>,
    /// Where the tables are: `--store DIR` (default ./hourglass-data) or `--hbase HOST:PORT`.
    #[command(flatten)]
    pub backend: BackendArgs,
    /// Job configuration (TOML): store, workers, registry, allowed lateness.
    #[arg(long)]
    pub config: Option<PathBuf>,
}

/// Output format of the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// One line per device, then one per room, with a header.
    Csv,
    /// One JSON object.
    Json,
}

/// The report.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// `YYYY-MM`.
    pub month: String,
    /// First second of the month (UTC).
    pub from: i64,
    /// First second after it.
    pub to: i64,
    /// The report's now (`HOURGLASS_NOW` applies).
    pub now: i64,
    /// Whether some hour of the month is still open to late data.
    pub provisional: bool,
    /// Hourly wide rows read.
    pub rows_read: u64,
    /// Wide rows that are no hour the window wrote (no summary or point cells), by key.
    pub bad_rows: Vec<String>,
    /// Where rooms come from: `registry FILE`, `room view` or `none`.
    pub rooms_from: String,
    /// Per device, by id.
    pub devices: Vec<MonthFigures>,
    /// Per room, by id (devices without a room are in none).
    pub rooms: Vec<MonthFigures>,
    /// Devices asked for (`--device`, `--room`) without a row in the month.
    pub devices_without_data: Vec<String>,
}

/// `YYYY-MM` as `[first second, first second of the next month)`, UTC.
fn month_range(month: &str) -> Result<(i64, i64)> {
    let bad = || format!("--month {month:?}: give the month as YYYY-MM, e.g. 2026-11");
    let (y, m) = month.split_once('-').with_context(bad)?;
    let (y, m): (i32, u32) = (y.parse().with_context(bad)?, m.parse().with_context(bad)?);
    let start = NaiveDate::from_ymd_opt(y, m, 1).with_context(bad)?;
    let next = if m == 12 {
        NaiveDate::from_ymd_opt(y + 1, 1, 1)
    } else {
        NaiveDate::from_ymd_opt(y, m + 1, 1)
    }
    .with_context(bad)?;
    let secs = |d: NaiveDate| d.and_hms_opt(0, 0, 0).map(|t| t.and_utc().timestamp());
    let (from, to) = (
        secs(start).with_context(bad)?,
        secs(next).with_context(bad)?,
    );
    // Wide keys carry the hour as decimal text: ranges by key are ranges by time only while
    // every hour has 10 digits.
    ensure!(
        (1_000_000_000..9_999_999_999).contains(&from) && start.year() < 2286,
        "--month {month}: only months from 2001-09 to 2286-10 can be read (wide row keys hold the hour as 10 digits)"
    );
    Ok((from, to))
}

/// Device → room, from `--registry`, the config's registry, or the room view table.
fn rooms(
    args: &ReportArgs,
    cfg: &JobConfig,
    reader: &dyn sinks::table::TableReader,
) -> Result<(HashMap<String, String>, String)> {
    if let Some(path) = args.registry.as_ref().or(cfg.registry.as_ref()) {
        let reg = crate::registry::load(path)?;
        return Ok((
            reg.into_iter().collect(),
            format!("registry {}", path.display()),
        ));
    }
    let rows = reader
        .scan(crate::tables::ROOM_TABLE, &Default::default())
        .context("reading the room view for the devices' rooms")?;
    let mut map = HashMap::new();
    for row in rows {
        let key = String::from_utf8_lossy(&row.key);
        // Rows of another shape are not the view's (the view's own reader skips them too).
        if let Some((room, device)) = crate::codec::room::parse_room_key(&key) {
            map.insert(device.to_string(), room.to_string());
        }
    }
    let from = if map.is_empty() { "none" } else { "room view" };
    Ok((map, from.to_string()))
}

/// Runs the report.
///
/// # Errors
/// Bad flags, an unreadable store, or a failed write.
pub fn run(args: &ReportArgs) -> Result<std::process::ExitCode> {
    let (from, to) = month_range(&args.month)?;
    if let Some(i) = args.interval {
        ensure!(
            (1..=86_400).contains(&i),
            "--interval must be 1..=86400 seconds, got {i}"
        );
    }
    ensure!(
        args.svg.is_none() || args.room.is_some() || args.device.is_some(),
        "--svg draws one device or room: add --device D or --room R"
    );
    if let Some(d) = &args.device {
        crate::codec::key::validate_device(d)?;
    }
    if let Some(r) = &args.room {
        crate::registry::validate_room(r)?;
    }
    let cfg = match &args.config {
        Some(path) => JobConfig::load(path)?,
        None => JobConfig::default(),
    };
    let workers = args
        .workers
        .or(cfg.workers)
        .unwrap_or_else(pipeline::driver::default_workers);
    pipeline::config::check_workers("--workers", workers)?;
    if let Some(devices) = args.bench_fill {
        let db = pipeline::store::open(
            &cfg.store,
            &crate::tables::all_tables(),
            &args.backend,
            true,
            true,
        )?;
        bench::fill(&db, devices, from, to, args.interval.unwrap_or(600))?;
    }
    let db = pipeline::store::open(
        &cfg.store,
        &crate::tables::all_tables(),
        &args.backend,
        true,
        false,
    )?;
    let reader = db.reader();
    let (room_of, rooms_from) = rooms(args, &cfg, &reader)?;
    let scope = match (&args.device, &args.room) {
        (Some(d), _) => job::Scope::Devices(vec![d.clone()]),
        (None, Some(r)) => {
            let mut devices: Vec<String> = room_of
                .iter()
                .filter(|(_, room)| *room == r)
                .map(|(d, _)| d.clone())
                .collect();
            devices.sort();
            ensure!(
                !devices.is_empty(),
                "room {r} has no device in the {rooms_from}: check the room id, or pass --registry FILE"
            );
            job::Scope::Devices(devices)
        }
        (None, None) => job::Scope::All,
    };
    let window = figures::Window {
        month_start: from,
        month_end: to,
        now: pipeline::time::now_ms().div_euclid(1000),
        lateness: cfg.window.allowed_lateness_secs,
        interval: args.interval,
    };
    let began = Instant::now();
    let asked: Vec<String> = match &scope {
        job::Scope::Devices(d) => d.clone(),
        job::Scope::All => Vec::new(),
    };
    let out = job::run(
        reader,
        scope,
        window,
        room_of.clone(),
        workers,
        cfg.key_scheme,
    )?;
    let elapsed = began.elapsed().as_secs_f64();
    eprintln!(
        "report {}: {} hourly rows of {} devices in {:.2} s ({:.0} rows/s, {workers} workers)",
        args.month,
        out.rows,
        out.devices.len(),
        elapsed,
        out.rows as f64 / elapsed.max(1e-9)
    );
    let mut devices = out.devices;
    devices.sort_by(|a, b| a.name.cmp(&b.name));
    let mut by_room: BTreeMap<&str, Vec<&MonthFigures>> = BTreeMap::new();
    if args.device.is_none() {
        for d in &devices {
            if !d.room.is_empty() {
                by_room.entry(d.room.as_str()).or_default().push(d);
            }
        }
    }
    let rooms: Vec<MonthFigures> = by_room
        .into_iter()
        .filter_map(|(room, ds)| figures::room_month(room, &ds))
        .collect();
    let with_data: std::collections::HashSet<&str> =
        devices.iter().map(|d| d.name.as_str()).collect();
    let devices_without_data = asked
        .into_iter()
        .filter(|d| !with_data.contains(d.as_str()))
        .collect();
    let report = Report {
        month: args.month.clone(),
        from,
        to,
        now: window.now,
        provisional: window.provisional(to - pipeline::time::HOUR_SECS),
        rows_read: out.rows,
        bad_rows: out.bad,
        rooms_from,
        devices,
        rooms,
        devices_without_data,
    };
    if let Some(path) = &args.svg {
        let target = match (&args.device, &args.room) {
            (Some(_), _) => report.devices.first(),
            _ => report.rooms.first(),
        };
        let svg = render::svg(&report, target);
        std::fs::write(path, svg).with_context(|| format!("writing {}", path.display()))?;
    }
    let text = match args.format {
        Format::Csv => render::csv(&report),
        Format::Json => serde_json::to_string_pretty(&report)? + "\n",
    };
    match &args.out {
        Some(path) => {
            std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?
        }
        None => std::io::stdout().lock().write_all(text.as_bytes())?,
    }
    Ok(std::process::ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn months_are_utc_calendar_months() {
        assert_eq!(
            month_range("2026-11").unwrap(),
            (1_793_491_200, 1_796_083_200)
        );
        assert_eq!(month_range("2026-12").unwrap().1, 1_798_761_600);
        for bad in ["2026-13", "2026", "11-2026", "1990-01", "x-y"] {
            assert!(month_range(bad).is_err(), "{bad}");
        }
    }
}
