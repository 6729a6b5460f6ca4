//! `hourglass replay`: a recorded traffic file → timely dataflow → tables.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use pipeline::config::{JobConfig, WindowConfig};
use pipeline::control::JobControl;
use pipeline::graph::{self, GraphConfig, SideOutput};
use pipeline::rowkey::hour_start;
use pipeline::schema::RETENTION_SECS;
use pipeline::source::replay::input::{self, LineReader};
use pipeline::source::replay::{FutureGuard, ReplayFeed, ReplayOptions};
use pipeline::stats::{Stats, Summary};
use sinks::dead_letter::DeadLetters;

use crate::http_thread::HttpLimits;
use crate::job_metrics::{JobMetrics, MetricsServer};
use crate::progress::Progress;
use crate::store::{Backend, BackendArgs};

/// Arguments of `hourglass replay`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReplayArgs {
    /// Recorded traffic: JSON Lines, optionally `.gz` or `.zst`; `-` reads stdin.
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
    /// Where rejected lines go (JSON Lines, appended to; created only if a line is rejected).
    #[arg(long, default_value = "hourglass-dead-letters.jsonl")]
    pub dead_letter: PathBuf,
    /// Where readings beyond the allowed lateness go (JSON Lines, created only if needed).
    #[arg(long, default_value = "hourglass-late.jsonl")]
    pub late_output: PathBuf,
    /// Write the end-of-run summary as JSON to this file.
    #[arg(long)]
    pub stats_json: Option<PathBuf>,
    /// Device registry CSV (`device,room[,…]`) for the room view, reloaded when it changes
    /// [default: the config's `registry`, else rooms come from the readings].
    #[arg(long)]
    pub registry: Option<PathBuf>,
    /// Do not print the summary on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// Serve the replay's metrics (Prometheus text, as `hourglass run --metrics-listen`
    /// without the Kafka ones) at http://HOST:PORT/metrics while it runs. Off unless set;
    /// port 0 picks a free port (printed on stderr).
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_listen: Option<String>,
    /// Open an embedded store whose journal is damaged by keeping the writes before the damage
    /// and dropping the rest of that journal file (printed on stderr). Back the store up first.
    #[arg(long)]
    pub recover: bool,
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
        if let Ok(r) = pipeline::decode::decode_line(line.number, &line.bytes, metric) {
            guard.check(&r.device, r.ts, now);
        }
        buf = line.bytes;
    }
    Ok(guard
        .newest()
        .map_or(0, |n| hour_start(now) - hour_start(n)))
}

/// One worker per core, within the range a job may start.
pub fn default_workers() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(pipeline::config::MAX_WORKERS)
}

/// Loads the configuration and applies the flags, checking them (`--workers` among them).
pub fn job_config(args: &ReplayArgs) -> Result<JobConfig> {
    let mut cfg = match &args.config {
        Some(path) => JobConfig::load(path)?,
        None => JobConfig::default(),
    };
    args.backend.apply(&mut cfg);
    if let Some(workers) = args.workers {
        pipeline::config::check_workers("--workers", workers)?;
    }
    if let Some(registry) = &args.registry {
        cfg.registry = Some(registry.clone());
    }
    if let Some(path) = &cfg.registry {
        // Fail at start on a missing or malformed registry; later reload errors only warn.
        pipeline::registry::load(path)?;
    }
    cfg.validate()?;
    Ok(cfg)
}

/// Runs `hourglass replay`.
pub fn run(args: &ReplayArgs) -> Result<Summary> {
    let cfg = job_config(args)?;
    let backend = crate::store::open_for_writing(&cfg, &args.backend, args.recover)?;
    backend.ensure_tables()?;
    let summary = replay_into(args, &cfg, &backend)?;
    if !args.quiet {
        print_summary(&summary, &backend.location());
    }
    Ok(summary)
}

fn print_summary(s: &Summary, location: &str) {
    eprintln!(
        "replayed {} lines in {:.1}s ({:.0} readings/s): {} ok, {} rejected ({} of them future), \
         {} late beyond lateness; wrote {} narrow rows and {} wide cells to {}",
        s.read,
        s.elapsed_s,
        s.readings_per_s,
        s.ok,
        s.rejected,
        s.future,
        s.late_dropped,
        s.narrow_rows,
        s.wide_cells,
        location
    );
}

/// Replays `args.file` into `backend`, one writer per worker.
pub fn replay_into(args: &ReplayArgs, cfg: &JobConfig, backend: &Backend) -> Result<Summary> {
    let speed = parse_speed(&args.speed)?;
    let workers = args.workers.unwrap_or_else(default_workers);
    let shift = if args.rebase_time {
        rebase_shift(&args.file, &cfg.metric, &cfg.window)?
    } else {
        0
    };
    if shift != 0 {
        eprintln!("--rebase-time: shifting timestamps by {} h", shift / 3600);
    }
    // Fail before starting workers if the input is missing.
    drop(input::open(&args.file, None)?);

    let stats = Arc::new(Stats::default());
    let control = Arc::new(JobControl::default());
    let metrics_server = match &args.metrics_listen {
        Some(addr) => {
            pipeline::config::check_listen_address("--metrics-listen", addr)?;
            let metrics = Arc::new(JobMetrics::new(stats.clone(), control.clone()));
            if let Some(writers) = backend.writer_stats() {
                metrics.attach_writers(writers);
            }
            let server = MetricsServer::start(addr, metrics, &HttpLimits::default())?;
            eprintln!("metrics: http://{}/metrics", server.addr());
            Some(server)
        }
        None => None,
    };
    let side = Arc::new(DeadLetters::new(
        args.dead_letter.clone(),
        args.late_output.clone(),
    ));
    let graph_cfg = GraphConfig {
        scheme: cfg.key_scheme,
        window: cfg.window,
        flush_every: Duration::from_secs(1),
        registry: cfg.registry_source(),
        previous_view: crate::store::previous_view(backend)?,
    };
    let base = ReplayOptions {
        path: args.file.clone(),
        metric: cfg.metric.clone(),
        watermark_bound: cfg.window.watermark_bound_secs,
        speed,
        shift,
        ttl_secs: RETENTION_SECS,
        worker: 0,
        peers: workers,
        max_future_skew: cfg.window.future_skew_secs(),
    };
    let stdin = args.file == Path::new("-");
    let total = std::fs::metadata(&args.file)
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.len());
    let progress = Progress::start(stats.clone(), total);
    let started = Instant::now();

    let (w_stats, w_control, w_side, w_backend) = (
        stats.clone(),
        control.clone(),
        side.clone(),
        backend.clone(),
    );
    let guards = timely::execute(timely::Config::process(workers), move |worker| {
        let index = worker.index();
        let mut opts = base.clone();
        opts.worker = index;
        let feed = if stdin {
            // stdin can be read once: worker 0 takes every line.
            opts.peers = 1;
            if index == 0 {
                ReplayFeed::open(opts.clone(), w_stats.clone(), w_control.clone())
            } else {
                Ok(ReplayFeed::empty(
                    opts.clone(),
                    w_stats.clone(),
                    w_control.clone(),
                ))
            }
        } else {
            ReplayFeed::open(opts.clone(), w_stats.clone(), w_control.clone())
        };
        let feed = match feed {
            Ok(feed) => feed,
            Err(e) => {
                w_control.fail(e.to_string());
                ReplayFeed::empty(opts, w_stats.clone(), w_control.clone())
            }
        };
        let side: Arc<dyn SideOutput> = w_side.clone();
        worker.dataflow::<u64, _, _>(|scope| {
            graph::build(
                scope,
                feed,
                &graph_cfg,
                w_backend.writer(),
                side,
                w_stats.clone(),
                w_control.clone(),
            );
        });
    })
    .map_err(|e| anyhow::anyhow!("starting timely workers failed: {e}"))?;
    for result in guards.join() {
        result.map_err(|e| anyhow::anyhow!("a worker failed: {e}"))?;
    }
    drop(progress);
    drop(metrics_server);
    let elapsed = started.elapsed().as_secs_f64();
    side.flush()?;
    backend.persist()?;
    if let Some(e) = control.error() {
        bail!("{e}");
    }

    let summary = stats.summary(elapsed);
    let expired = stats.expired.load(std::sync::atomic::Ordering::Relaxed);
    if expired > 0 {
        eprintln!(
            "warning: {expired} readings are older than the tables' 90-day TTL and are invisible \
             to queries; replay with --rebase-time to move the recording to the current hour"
        );
    }
    if let Some(path) = side.rejected_path() {
        eprintln!(
            "{} rejected lines written to {}",
            summary.rejected,
            path.display()
        );
    }
    let registry_rejected = stats
        .registry_rejected
        .load(std::sync::atomic::Ordering::Relaxed);
    if registry_rejected > 0 {
        eprintln!("{registry_rejected} refused registry topic records in the dead-letter file");
    }
    if let Some(path) = side.late_path() {
        eprintln!(
            "{} readings beyond the allowed lateness written to {}",
            summary.late_dropped,
            path.display()
        );
    }
    if let Some(path) = &args.stats_json {
        std::fs::write(path, serde_json::to_vec_pretty(&summary)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(summary)
}
