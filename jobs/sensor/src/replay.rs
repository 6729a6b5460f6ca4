//! `hourglass replay`: a recorded traffic file → timely dataflow → tables.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::codec::hourly::hour_start;
use crate::config::JobConfig;
use crate::decode::SensorDecoder;
use crate::job::SensorJob;
use crate::stats::{ReplaySummary, SensorStats};
use crate::tables::RETENTION_SECS;
use crate::Result;
use pipeline::config::WindowConfig;
use pipeline::driver::{self, Cluster, Job, JobArgs, JobOptions, Pace, RecordingSource};
use pipeline::source::replay::input::{self, LineReader};
use pipeline::source::replay::{FutureGuard, ReplayOptions};
use pipeline::stats::{Stats, Summary};
use pipeline::store::{Backend, BackendArgs};
use pipeline::time::HOUR_SECS;

/// Arguments of `hourglass replay`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReplayArgs {
    /// Recorded traffic: JSON Lines, optionally `.gz` or `.zst`; `-` reads stdin. In a cluster,
    /// every process needs the file (each reads its workers' lines), or every process passes
    /// `-` and process 0 alone reads its stdin.
    pub file: PathBuf,
    /// Job configuration (TOML); flags below override it. See `config/hourglass.example.toml`.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Where the tables are: `--store DIR` (embedded) or `--hbase HOST:PORT`.
    #[command(flatten)]
    pub backend: BackendArgs,
    /// Timely worker threads, 1 to 256 [default: number of cores, at most 256].
    #[arg(long)]
    pub workers: Option<usize>,
    /// `max` (as fast as possible) or a factor of recorded time: `1` real time, `10` ten times
    /// faster.
    #[arg(long, default_value = "max")]
    pub speed: String,
    /// Shift all timestamps by whole hours so the newest reading falls in the current hour.
    #[arg(long)]
    pub rebase_time: bool,
    /// Device registry CSV (`device,room[,…]`) for the room view, reloaded when it changes
    /// [default: the config's `registry`, else rooms come from the readings].
    #[arg(long)]
    pub registry: Option<PathBuf>,
    /// Do not print the summary on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// Output, metrics and store-recovery flags, as `hourglass run`'s.
    #[command(flatten)]
    pub job: JobArgs,
}

fn parse_speed(s: &str) -> Result<Option<f64>> {
    if s == "max" {
        return Ok(None);
    }
    match s.parse::<f64>() {
        Ok(f) if f.is_finite() && f > 0.0 => Ok(Some(f)),
        _ => bail!("--speed {s:?}: use `max` or a positive factor such as 1 or 10"),
    }
}

/// Hours to add so that the newest reading of `path` falls in the current hour. Readings the
/// replay refuses as `future` (see `FutureGuard`) do not count: one reading in 2286 would
/// otherwise shift the whole recording centuries back, past the TTL.
fn rebase_shift(path: &Path, metric: &str, window: &WindowConfig) -> Result<i64> {
    if path == Path::new("-") {
        bail!(
            "--rebase-time reads the input twice and cannot be used with stdin; save it to a file"
        );
    }
    let mut lines = LineReader::new(input::open(path, None)?);
    let mut buf = Vec::new();
    let now = pipeline::time::now_ms() / 1000;
    let mut guard = FutureGuard::new(window.future_skew_secs(), window.watermark_bound_secs);
    while let Some(line) = lines.next_line(&mut buf)? {
        if let Ok(r) = crate::decode::decode_line(line.number, &line.bytes, metric) {
            guard.check(&r.device, r.ts, || now);
        }
        buf = line.bytes;
    }
    Ok(guard
        .newest()
        .map_or(0, |n| hour_start(now) - hour_start(n)))
}

/// Loads the configuration and applies the flags, checking them (`--workers` among them).
pub fn job_config(args: &ReplayArgs) -> Result<JobConfig> {
    let mut cfg = match &args.config {
        Some(path) => JobConfig::load(path)?,
        None => JobConfig::default(),
    };
    args.backend.apply(&mut cfg.store);
    args.job.cluster.apply(&mut cfg.cluster);
    if let Some(workers) = args.workers {
        pipeline::config::check_workers("--workers", workers)?;
    }
    if let Some(registry) = &args.registry {
        cfg.registry = Some(registry.clone());
    }
    if let Some(path) = &cfg.registry {
        // Fail at start on a missing or malformed registry; later reload errors only warn.
        crate::registry::load(path)?;
    }
    cfg.validate()?;
    Ok(cfg)
}

/// Runs `hourglass replay`.
pub fn run(args: &ReplayArgs) -> Result<ReplaySummary> {
    let cfg = job_config(args)?;
    // Before the store opens: a cluster refuses the embedded store.
    Cluster::from_config(&cfg.cluster, &cfg.store)?;
    let backend = pipeline::store::open_for_writing(
        &cfg.store,
        &crate::tables::all_tables(),
        &args.backend,
        args.job.recover,
    )?;
    backend.ensure_tables()?;
    replay_into(args, &cfg, &backend)
}

/// Replays `args.file` into `backend`, one writer per worker, and reports.
pub fn replay_into(args: &ReplayArgs, cfg: &JobConfig, backend: &Backend) -> Result<ReplaySummary> {
    let speed = parse_speed(&args.speed)?;
    let cluster = Cluster::from_config(&cfg.cluster, &cfg.store)?;
    let workers = args.workers.unwrap_or_else(driver::default_workers);
    let shift = if args.rebase_time {
        rebase_shift(&args.file, &cfg.metric, &cfg.window)?
    } else {
        0
    };
    if shift != 0 {
        eprintln!(
            "--rebase-time: shifting timestamps by {} h",
            shift / HOUR_SECS
        );
    }
    // Fail before starting workers if the input is missing.
    drop(input::open(&args.file, None)?);

    let job = Job::start(JobOptions::replay(
        &args.job,
        args.quiet,
        &cluster,
        &crate::decode::Reason::KINDS,
    )?)?;
    let stats = Arc::new(SensorStats::default());
    let counted = stats.clone();
    let source = RecordingSource {
        decoder: SensorDecoder {
            metric: cfg.metric.clone(),
        },
        base: ReplayOptions {
            path: args.file.clone(),
            watermark_bound: cfg.window.watermark_bound_secs,
            speed,
            shift,
            ttl_secs: RETENTION_SECS,
            worker: 0,
            // Lines are spread over every worker of every process, by timely's global index.
            peers: cluster.peers(workers),
            max_future_skew: cfg.window.future_skew_secs(),
        },
        threads: workers,
        stats: job.stats().clone(),
        control: job.control().clone(),
        report: Box::new(move |counters: Summary, _: &Stats| {
            ReplaySummary::new(&counters, &counted)
        }),
    };
    job.metrics().attach_counters(stats.clone());
    let sensor = SensorJob::new(cfg, Pace::of(&source), backend, stats)?;
    Ok(job.run(source, sensor, &cfg.window, &cfg.store, backend)?)
}
