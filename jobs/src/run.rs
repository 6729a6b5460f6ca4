//! `hourglass run`: the long-running job, Kafka → timely dataflow → tables.
//!
//! Each worker reads its partitions (`partition % workers == worker`), and commits offsets only
//! once the readings before them are durable in both tables (see `pipeline::source::kafka`). SIGINT or
//! SIGTERM stops reading; open windows then write what they hold, the writers flush, the offsets
//! are committed and the job exits 0. A second signal exits at once (130): nothing is committed
//! past what is stored, so a restart loses nothing. With `--metrics-listen` (or
//! `metrics_listen`), the job serves its own `/metrics` and `/healthz` (`crate::job_metrics`).

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use operators::{EventFeed, Poll};
use pipeline::config::{JobConfig, EXAMPLE};
use pipeline::control::JobControl;
use pipeline::graph::{self, GraphConfig, SideOutput};
use pipeline::schema::RETENTION_SECS;
use pipeline::source::kafka::{self, KafkaFeed, KafkaOptions, KafkaShared};
use pipeline::source::Decoded;
use pipeline::stats::{Stats, Summary};
use rdkafka::consumer::BaseConsumer;
use serde::Serialize;
use sinks::dead_letter::DeadLetters;
use timely::dataflow::ProbeHandle;

use crate::http_thread::HttpLimits;
use crate::job_metrics::{JobMetrics, MetricsServer};
use crate::serve::DashboardServer;
use crate::store::{self, BackendArgs};

/// How long written data may wait in a worker's writer buffer. Short, so that readings become
/// visible soon after they are produced.
const FLUSH_EVERY: Duration = Duration::from_millis(250);

/// Arguments of `hourglass run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// Job configuration (TOML): source, store, window, workers. See `--example-config`.
    #[arg(long, required_unless_present = "example_config")]
    pub config: Option<PathBuf>,
    /// Print the commented example configuration and exit.
    #[arg(long)]
    pub example_config: bool,
    /// Flush, commit and exit 0 once no record has arrived for this long (`500ms`, `5s`, `2m`):
    /// for catch-up runs and tests.
    #[arg(long, value_name = "DURATION")]
    pub exit_on_idle: Option<String>,
    /// Where rejected records go (JSON Lines; `line` is the record's offset in `partition`).
    #[arg(long, default_value = "hourglass-dead-letters.jsonl")]
    pub dead_letter: PathBuf,
    /// Where readings beyond the allowed lateness go (JSON Lines).
    #[arg(long, default_value = "hourglass-late.jsonl")]
    pub late_output: PathBuf,
    /// Write the end-of-run summary as JSON to this file.
    #[arg(long)]
    pub stats_json: Option<PathBuf>,
    /// Serve the job's own metrics (Prometheus text) at http://HOST:PORT/metrics, and
    /// /healthz; overrides `metrics_listen` in the config. Off unless set: one fixed default
    /// port would make a second job on the host fail. 127.0.0.1:9464 keeps it local; port 0
    /// picks a free port (printed on stderr).
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_listen: Option<String>,
    /// Serve dashboards from the job's own store while it runs, with the endpoints of
    /// `hourglass serve` (JSON API, Grafana's Prometheus API, the page at /), at
    /// http://HOST:PORT/. The way to watch a job writing the embedded store, which admits one
    /// process. Port 0 picks a free port (printed on stderr).
    #[arg(long, value_name = "HOST:PORT")]
    pub serve: Option<String>,
    /// With `--serve`: a file holding a bearer token that every endpoint but /healthz requires.
    #[arg(long, value_name = "FILE", requires = "serve")]
    pub token_file: Option<PathBuf>,
    /// Timeouts and connection limit of the `--serve` and `--metrics-listen` servers.
    #[command(flatten)]
    pub http: HttpLimits,
    /// Open an embedded store whose journal is damaged by keeping the writes before the damage
    /// and dropping the rest of that journal file (printed on stderr). Back the store up first.
    #[arg(long)]
    pub recover: bool,
}

/// The end-of-run summary: the replay's counters plus what only a Kafka job measures.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    /// Counters shared with `hourglass replay`.
    #[serde(flatten)]
    pub counters: Summary,
    /// Seconds between the first and the last record read.
    pub input_span_s: f64,
    /// Records read per second over that span.
    pub consume_per_s: f64,
    /// Narrow rows whose produce → durable delay was measured.
    pub delay_samples: u64,
    /// Median delay from produce (record timestamp) to durable in the narrow table, ms.
    pub delay_p50_ms: Option<u64>,
    /// 99th percentile of that delay, ms.
    pub delay_p99_ms: Option<u64>,
    /// Largest measured delay, ms (capped at 10 min).
    pub delay_max_ms: Option<u64>,
    /// Registry topic records refused (bad key or value), in the dead-letter file.
    pub registry_rejected: u64,
    /// Records re-read after a restart and skipped: the previous run had stored them (its dead
    /// letters, and its readings of hours it had closed).
    pub resume_skipped: u64,
}

/// Parses `500ms`, `5s`, `2m`, `1h`.
fn parse_duration(text: &str) -> Result<Duration> {
    let usage = "use a number with a unit ms, s, m or h, such as 500ms, 5s, 2m";
    let text = text.trim();
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    ensure!(digits > 0, "duration {text:?}: {usage}");
    let n: u64 = text[..digits]
        .parse()
        .with_context(|| format!("duration {text:?} is too long"))?;
    let ms = match &text[digits..] {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => bail!("duration {text:?}: {usage}"),
    };
    let total = n
        .checked_mul(ms)
        .with_context(|| format!("duration {text:?} is too long"))?;
    ensure!(total > 0, "duration {text:?} is zero; {usage}");
    Ok(Duration::from_millis(total))
}

/// A feed with nothing in it, for a worker whose Kafka feed could not start (the job is failing,
/// but every worker must build the same dataflow).
struct NoInput;

impl EventFeed for NoInput {
    type Item = Decoded;
    fn poll(&mut self) -> Poll<Decoded> {
        Poll::Done
    }
    fn watermark(&self) -> u64 {
        0
    }
}

/// Runs `hourglass run`.
pub fn run(args: &RunArgs) -> Result<()> {
    if args.example_config {
        print!("{EXAMPLE}");
        return Ok(());
    }
    let path = args
        .config
        .as_deref()
        .context("--config FILE is required (see --example-config)")?;
    let mut cfg = JobConfig::load(path)?;
    if let Some(addr) = &args.metrics_listen {
        pipeline::config::check_listen_address("--metrics-listen", addr)?;
        cfg.metrics_listen = Some(addr.clone());
    }
    let exit_on_idle = args
        .exit_on_idle
        .as_deref()
        .map(parse_duration)
        .transpose()?;
    let summary = run_job(&cfg, args, exit_on_idle)?;
    print_summary(&summary, path);
    Ok(())
}

fn print_summary(s: &RunSummary, config: &Path) {
    let c = &s.counters;
    let delays = match (s.delay_p50_ms, s.delay_p99_ms) {
        (Some(p50), Some(p99)) => {
            format!("; produce → narrow table delay p50 {p50} ms, p99 {p99} ms")
        }
        _ => String::new(),
    };
    eprintln!(
        "run ({}) stopped after {:.1}s: read {} records ({:.0}/s while consuming): {} ok, {} rejected \
         ({} of them future), {} late beyond lateness; wrote {} narrow rows and {} wide cells{delays}",
        config.display(),
        c.elapsed_s,
        c.read,
        s.consume_per_s,
        c.ok,
        c.rejected,
        c.future,
        c.late_dropped,
        c.narrow_rows,
        c.wide_cells,
    );
}

/// Stops the job on the first SIGINT/SIGTERM; exits at once on the second.
fn handle_signals(control: Arc<JobControl>) -> Result<signal_hook::iterator::Handle> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals = signal_hook::iterator::Signals::new([SIGINT, SIGTERM])
        .context("installing the SIGINT/SIGTERM handlers")?;
    let handle = signals.handle();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut seen = 0;
            for signal in signals.forever() {
                seen += 1;
                let name = if signal == SIGINT { "SIGINT" } else { "SIGTERM" };
                if seen == 1 {
                    tracing::info!(signal = name, "stopping: flushing and committing");
                    eprintln!(
                        "{name}: stopping; flushing the tables and committing offsets (again to exit at once)"
                    );
                    control.request_stop();
                } else {
                    eprintln!("{name} again: exiting now; offsets stay at what is stored");
                    std::process::exit(130);
                }
            }
        })
        .context("starting the signal thread")?;
    Ok(handle)
}

/// Refreshes the partitions' offsets every second (the feeds' idle test needs them) and prints
/// a status line every `every`, until dropped.
struct Status {
    done: Arc<(Mutex<bool>, Condvar)>,
    thread: Option<JoinHandle<()>>,
}

impl Status {
    fn start(
        every: Duration,
        consumer: BaseConsumer,
        topic: String,
        partitions: usize,
        shared: Arc<KafkaShared>,
        stats: Arc<Stats>,
    ) -> Self {
        let done = Arc::new((Mutex::new(false), Condvar::new()));
        let flag = done.clone();
        let tick = Duration::from_secs(1);
        let thread = std::thread::spawn(move || {
            let mut last_read = 0;
            let mut last_at = Instant::now();
            let mut refresh_failed = false;
            let mut new_partitions = NewPartitions::new(partitions);
            loop {
                new_partitions.check(&consumer, &topic);
                if let Err(e) = shared.refresh_offsets(&consumer, &topic, tick) {
                    if !refresh_failed {
                        tracing::warn!(error = %e, "cannot read partition offsets (retrying)");
                    }
                    refresh_failed = true;
                } else {
                    refresh_failed = false;
                }
                let (lock, cv) = &*flag;
                let Ok(guard) = lock.lock() else { return };
                let Ok((guard, _)) = cv.wait_timeout_while(guard, tick, |stop| !*stop) else {
                    return;
                };
                if *guard {
                    return;
                }
                drop(guard);
                if last_at.elapsed() < every {
                    continue;
                }
                let read = stats.read.load(Ordering::Relaxed);
                let per_s = (read - last_read) as f64 / last_at.elapsed().as_secs_f64();
                (last_read, last_at) = (read, Instant::now());
                let lag = shared.lag();
                let now = chrono::Utc::now().timestamp();
                let watermark = shared.watermark();
                let delay = watermark.map(|w| now - w as i64);
                let rejected = stats.rejected.load(Ordering::Relaxed);
                let late = stats.late_dropped.load(Ordering::Relaxed);
                let (_, q) = shared.delays.quantiles(&[0.5, 0.99]);
                tracing::info!(
                    records_per_s = per_s,
                    lag = ?lag,
                    watermark = ?watermark,
                    watermark_delay_s = ?delay,
                    rejected,
                    late,
                    delay_p50_ms = ?q[0],
                    delay_p99_ms = ?q[1],
                    "status"
                );
                eprintln!(
                    "[status] {per_s:.0} records/s, lag {}, watermark {} ({} behind wall clock), \
                     {rejected} rejected, {late} late",
                    lag.map_or_else(|| "unknown".to_string(), |l| l.to_string()),
                    watermark.map_or_else(
                        || "-".to_string(),
                        |w| pipeline::time::format_time(w as i64)
                    ),
                    delay.map_or_else(|| "-".to_string(), format_secs),
                );
            }
        });
        Status {
            done,
            thread: Some(thread),
        }
    }
}

/// How often the job looks for partitions added to its topic while it runs.
const PARTITION_CHECK_EVERY: Duration = Duration::from_secs(10);

/// Notices partitions added to the topic while the job runs. The workers read the partitions
/// the topic had at start, so the new ones wait in Kafka (from their first offset, nothing is
/// lost) until a restart: the job says so, once per new count.
struct NewPartitions {
    read: usize,
    reported: usize,
    last_check: Instant,
}

impl NewPartitions {
    fn new(read: usize) -> Self {
        NewPartitions {
            read,
            reported: read,
            last_check: Instant::now(),
        }
    }

    fn check(&mut self, consumer: &BaseConsumer, topic: &str) {
        if self.last_check.elapsed() < PARTITION_CHECK_EVERY {
            return;
        }
        self.last_check = Instant::now();
        let Ok(now) = kafka::partition_count(consumer, topic, Duration::from_secs(5)) else {
            return;
        };
        if now > self.reported {
            self.reported = now;
            tracing::warn!(
                topic,
                partitions = now,
                read = self.read,
                "partitions were added to the topic; restart the job to read them"
            );
            eprintln!(
                "warning: topic {topic} now has {now} partitions, this job reads the {} it had at \
                 start: restart it to read the others (their records wait in Kafka; nothing is \
                 lost)",
                self.read
            );
        }
    }
}

impl Drop for Status {
    fn drop(&mut self) {
        let (lock, cv) = &*self.done;
        if let Ok(mut stop) = lock.lock() {
            *stop = true;
        }
        cv.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn format_secs(s: i64) -> String {
    let a = s.unsigned_abs();
    let sign = if s < 0 { "-" } else { "" };
    match a {
        0..=119 => format!("{sign}{a}s"),
        120..=7199 => format!("{sign}{}m{:02}s", a / 60, a % 60),
        _ => format!("{sign}{}h{:02}m", a / 3600, a % 3600 / 60),
    }
}

fn run_job(cfg: &JobConfig, args: &RunArgs, exit_on_idle: Option<Duration>) -> Result<RunSummary> {
    let control = Arc::new(JobControl::default());
    let stats = Arc::new(Stats::default());
    let metrics = Arc::new(JobMetrics::new(stats.clone(), control.clone()));
    let metrics_server = cfg
        .metrics_listen
        .as_deref()
        .map(|addr| MetricsServer::start(addr, metrics.clone(), &args.http))
        .transpose()?;
    if let Some(server) = &metrics_server {
        // Tests and scripts read the address (port 0 picks one) from this line.
        eprintln!("metrics: http://{}/metrics", server.addr());
    }
    let signals = handle_signals(control.clone())?;
    let backend = store::open_for_writing(cfg, &BackendArgs::default(), args.recover)?;
    if let Some(writers) = backend.writer_stats() {
        metrics.attach_writers(writers);
    }
    backend.ensure_tables()?;
    let dashboards = args
        .serve
        .as_deref()
        .map(|listen| {
            DashboardServer::start(
                listen,
                &backend,
                cfg,
                args.token_file.as_deref(),
                &args.http,
            )
        })
        .transpose()?;
    if let Some(server) = &dashboards {
        // Tests and scripts read the address (port 0 picks one) from this line.
        eprintln!("dashboards: http://{}/", server.addr());
    }
    let source = &cfg.source;
    let partitions = kafka::wait_for_partitions(source, &control)?;
    // `JobConfig::validate` has checked a configured count against `MAX_WORKERS`.
    let workers = cfg.workers.unwrap_or_else(crate::replay::default_workers);
    if workers > partitions {
        eprintln!(
            "note: {workers} workers but topic {} has {partitions} partitions: {} workers stay idle",
            source.topic,
            workers - partitions
        );
    }
    tracing::info!(topic = %source.topic, partitions, workers, group = %source.group_id, store = %backend.location(), "starting");
    eprintln!(
        "run: topic {} ({partitions} partitions) at {}, group {}, {workers} workers → {}",
        source.topic,
        source.brokers,
        source.group_id,
        backend.location()
    );

    let shared = Arc::new(KafkaShared::new(partitions, workers));
    metrics.attach_kafka(shared.clone());
    let side = Arc::new(DeadLetters::new(
        args.dead_letter.clone(),
        args.late_output.clone(),
    ));
    let graph_cfg = GraphConfig {
        scheme: cfg.key_scheme,
        window: cfg.window,
        flush_every: FLUSH_EVERY,
        registry: cfg.registry_source(),
        previous_view: crate::store::previous_view(&backend)?,
    };
    let base = KafkaOptions {
        source: source.clone(),
        metric: cfg.metric.clone(),
        watermark_bound: cfg.window.watermark_bound_secs,
        allowed_lateness: cfg.window.allowed_lateness_secs,
        exit_on_idle,
        ttl_secs: RETENTION_SECS,
        partitions,
        worker: 0,
        peers: workers,
        max_future_skew: cfg.window.future_skew_secs(),
    };
    let status = Status::start(
        Duration::from_secs(cfg.status_interval_secs),
        kafka::consumer(source, "hourglass-status")?,
        source.topic.clone(),
        partitions,
        shared.clone(),
        stats.clone(),
    );
    let started = Instant::now();

    let (w_stats, w_control, w_side, w_backend, w_shared) = (
        stats.clone(),
        control.clone(),
        side.clone(),
        backend.clone(),
        shared.clone(),
    );
    let guards = timely::execute(timely::Config::process(workers), move |worker| {
        let opts = KafkaOptions {
            worker: worker.index(),
            ..base.clone()
        };
        let side: Arc<dyn SideOutput> = w_side.clone();
        let probe = ProbeHandle::new();
        let feed = KafkaFeed::open(
            opts,
            w_shared.clone(),
            w_stats.clone(),
            w_control.clone(),
            probe.clone(),
        );
        let feed = match feed {
            Ok(feed) => feed,
            Err(e) => {
                w_control.fail(format!("worker {}: {e}", worker.index()));
                worker.dataflow::<u64, _, _>(|scope| {
                    graph::build_with_probe(
                        scope,
                        NoInput,
                        &graph_cfg,
                        w_backend.writer(),
                        side,
                        w_stats.clone(),
                        w_control.clone(),
                        &probe,
                    );
                });
                return;
            }
        };
        let committer = feed.committer();
        let writer = Box::new(feed.timed_writer(w_backend.writer()));
        worker.dataflow::<u64, _, _>(|scope| {
            graph::build_with_probe(
                scope,
                feed,
                &graph_cfg,
                writer,
                side,
                w_stats.clone(),
                w_control.clone(),
                &probe,
            );
        });
        while worker.step_or_park(None) {}
        if let Err(e) = committer.finish() {
            w_control.fail(format!(
                "final offset commit failed: {e}; the stored readings are safe and will be \
                 re-read (idempotently) on restart"
            ));
        }
    })
    .map_err(|e| anyhow::anyhow!("starting timely workers failed: {e}"))?;
    for result in guards.join() {
        result.map_err(|e| anyhow::anyhow!("a worker failed: {e}"))?;
    }
    let elapsed = started.elapsed().as_secs_f64();
    drop(status);
    drop(metrics_server);
    signals.close();
    side.flush()?;
    backend.persist()?;
    if let Some(e) = control.error() {
        bail!("{e}");
    }

    let counters = stats.summary(elapsed);
    let span = shared.input_span().map_or(0.0, |d| d.as_secs_f64());
    let (samples, q) = shared.delays.quantiles(&[0.5, 0.99, 1.0]);
    let summary = RunSummary {
        consume_per_s: if span > 0.0 {
            counters.read as f64 / span
        } else {
            0.0
        },
        counters,
        input_span_s: span,
        delay_samples: samples,
        delay_p50_ms: q[0],
        delay_p99_ms: q[1],
        delay_max_ms: q[2],
        registry_rejected: stats.registry_rejected.load(Ordering::Relaxed),
        resume_skipped: shared.resume_skipped(),
    };
    tracing::info!(summary = ?summary, committed = ?shared.committed(), "stopped");
    let expired = stats.expired.load(Ordering::Relaxed);
    if expired > 0 {
        eprintln!(
            "warning: {expired} readings are older than the tables' 90-day TTL and are invisible \
             to queries"
        );
    }
    if let Some(path) = side.rejected_path() {
        eprintln!(
            "{} rejected records and {} refused registry records written to {}",
            summary.counters.rejected,
            summary.registry_rejected,
            path.display()
        );
    }
    if let Some(path) = side.late_path() {
        eprintln!(
            "{} readings beyond the allowed lateness written to {}",
            summary.counters.late_dropped,
            path.display()
        );
    }
    if let Some(path) = &args.stats_json {
        std::fs::write(path, serde_json::to_vec_pretty(&summary)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("5s").unwrap(), Duration::from_secs(5));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("5")
            .unwrap_err()
            .to_string()
            .contains("unit"));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("s").is_err());
    }

    #[test]
    fn seconds_read_well() {
        assert_eq!(format_secs(42), "42s");
        assert_eq!(format_secs(600), "10m00s");
        assert_eq!(format_secs(90_000), "25h00m");
    }
}
