//! `hourglass run`: the long-running job, Kafka → timely dataflow → tables.
//!
//! Each worker reads its partitions (`partition % workers == worker`, over every worker of every
//! process in a cluster, see `driver::Cluster`), and commits offsets only
//! once the readings before them are durable in both tables (see `pipeline::source::kafka`). SIGINT or
//! SIGTERM stops reading; open windows then write what they hold, the writers flush, the offsets
//! are committed and the job exits 0. A second signal exits at once (130): nothing is committed
//! past what is stored, so a restart loses nothing. With `--metrics-listen` (or
//! `metrics_listen`), the job serves its own `/metrics` and `/healthz` (`pipeline::job_metrics`).

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::codec::hourly::hourly_window;
use crate::config::{JobConfig, EXAMPLE};
use crate::decode::SensorDecoder;
use crate::job::SensorJob;
use crate::stats::{ReplaySummary, RunSummary, SensorStats};
use crate::tables::{NARROW_TABLE, RETENTION_SECS};
use crate::Result;
use pipeline::driver::{Cluster, Job, JobArgs, JobOptions, Pace, TopicSource};
use pipeline::source::kafka::{KafkaOptions, KafkaShared};
use pipeline::stats::{Stats, Summary};
use pipeline::store::{self, BackendArgs};
use pipeline::Context;

use crate::serve::DashboardServer;

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
    /// Serve dashboards from the job's own store while it runs, with the endpoints of
    /// `hourglass serve` (JSON API, Grafana's Prometheus API, the page at /), at
    /// http://HOST:PORT/. The way to watch a job writing the embedded store, which admits one
    /// process. Port 0 picks a free port (printed on stderr).
    #[arg(long, value_name = "HOST:PORT")]
    pub serve: Option<String>,
    /// With `--serve`: a file holding a bearer token that every endpoint but /healthz requires.
    #[arg(long, value_name = "FILE", requires = "serve")]
    pub token_file: Option<PathBuf>,
    /// Output, metrics and store-recovery flags, as `hourglass replay`'s.
    #[command(flatten)]
    pub job: JobArgs,
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
    if let Some(registry) = &cfg.registry {
        // As replay: fail at start on a missing or malformed registry (later reload errors
        // only warn and keep the previous one, and at start there is none to keep).
        crate::registry::load(registry)
            .with_context(|| format!("registry = {:?} in {}", registry, path.display()))?;
    }
    if let Some(addr) = args.job.checked_metrics_listen()? {
        cfg.metrics_listen = Some(addr.to_string());
    }
    args.job.cluster.apply(&mut cfg.cluster);
    cfg.validate()?;
    let exit_on_idle = args
        .exit_on_idle
        .as_deref()
        .map(pipeline::time::parse_duration)
        .transpose()?;
    run_job(&cfg, args, path, exit_on_idle)?;
    Ok(())
}

fn run_job(
    cfg: &JobConfig,
    args: &RunArgs,
    config: &Path,
    exit_on_idle: Option<Duration>,
) -> Result<RunSummary> {
    // Before the store opens: a cluster refuses the embedded store.
    let cluster = Cluster::from_config(&cfg.cluster, &cfg.store)?;
    let job = Job::start(JobOptions::run(
        &args.job,
        cfg.metrics_listen.as_deref(),
        &cluster,
        &crate::decode::Reason::KINDS,
    ))?;
    let backend = store::open_for_writing(
        &cfg.store,
        &crate::tables::all_tables(),
        &BackendArgs::default(),
        args.job.recover,
    )?;
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
                &args.job.http,
            )
        })
        .transpose()?;
    if let Some(server) = &dashboards {
        // Tests and scripts read the address (port 0 picks one) from this line.
        eprintln!("dashboards: http://{}/", server.addr());
    }
    let source = &cfg.source;
    // `JobConfig::validate` has checked a configured count against `MAX_WORKERS`.
    let split = job.split_topic(source, &cluster, cfg.workers)?;
    let (partitions, workers, peers) = (split.partitions, split.workers, split.peers);
    if peers > partitions {
        eprintln!(
            "note: {peers} workers but topic {} has {partitions} partitions: {} workers stay idle",
            source.topic,
            peers - partitions
        );
    }
    tracing::info!(topic = %source.topic, partitions, workers, peers, process = cluster.process, group = %source.group_id, store = %backend.location(), "starting");
    eprintln!(
        "run: topic {} ({partitions} partitions) at {}, group {}, {workers} workers{} → {}",
        source.topic,
        source.brokers,
        source.group_id,
        cluster.label().map_or_else(String::new, |p| format!(
            " in {p} of {} ({peers} in all)",
            cluster.processes()
        )),
        backend.location()
    );

    let (shared, config) = (split.shared.clone(), config.to_path_buf());
    let decoder = SensorDecoder {
        metric: cfg.metric.clone(),
    };
    let base = topic_options(cfg, partitions, peers, exit_on_idle);
    let stats = Arc::new(SensorStats::default());
    let counted = stats.clone();
    let report = Box::new(move |counters, _: &Stats| {
        run_summary(&shared, counters, &counted, config.clone())
    });
    let topic = TopicSource {
        status_every: Duration::from_secs(cfg.status_interval_secs),
        early_fire_past_hours: true,
        timed_writes: true,
        stored: "readings",
        ..TopicSource::new(&job, &cluster, split, decoder, base, report)
    };
    job.metrics().attach_counters(stats.clone());
    let sensor = SensorJob::new(cfg, Pace::of(&topic), &backend, stats)?;
    let summary = job.run(topic, sensor, &cfg.window, &cfg.store, &backend)?;
    drop(dashboards);
    Ok(summary)
}

/// Worker 0's options of a topic of `partitions` read by `peers` workers, as `cfg` says.
fn topic_options(
    cfg: &JobConfig,
    partitions: usize,
    peers: usize,
    exit_on_idle: Option<Duration>,
) -> KafkaOptions {
    KafkaOptions {
        window: Some(hourly_window(cfg.window.allowed_lateness_secs, None)),
        record_table: NARROW_TABLE,
        exit_on_idle,
        ttl_secs: RETENTION_SECS,
        // The room view holds a reading back for up to its write interval.
        stop_drain: Duration::from_secs(10 + cfg.room_write_interval_secs),
        ..KafkaOptions::new(&cfg.source, &cfg.window, partitions, peers)
    }
}

/// The report of a run of `config` stopped after reading `counters`, with the delays from
/// produce to durable in `shared`; prints the store's share of the delay.
fn run_summary(
    shared: &KafkaShared,
    counters: Summary,
    stats: &SensorStats,
    config: PathBuf,
) -> RunSummary {
    let span = shared.input_span().map_or(0.0, |d| d.as_secs_f64());
    let (samples, q) = shared.delays.quantiles(&[0.5, 0.99, 1.0]);
    let summary = RunSummary {
        consume_per_s: if span > 0.0 {
            counters.read as f64 / span
        } else {
            0.0
        },
        counters: ReplaySummary::new(&counters, stats),
        input_span_s: span,
        delay_samples: samples,
        delay_p50_ms: q[0],
        delay_p99_ms: q[1],
        delay_max_ms: q[2],
        registry_rejected: stats.registry_rejected.load(Ordering::Relaxed),
        resume_skipped: shared.resume_skipped(),
        config,
    };
    let ms = |q: Option<u64>| q.map_or("-".to_string(), |v| format!("{v} ms"));
    // `bench live` reads these lines from the job's stderr: the store's share of the delay.
    for (what, h) in [("flushes", &shared.flushes), ("writes", &shared.writes)] {
        let (n, q) = h.quantiles(&[0.5, 0.99, 1.0]);
        eprintln!(
            "store {what}: {n}, p50 {}, p99 {}, max {}, {:.1} s in all",
            ms(q[0]),
            ms(q[1]),
            ms(q[2]),
            h.snapshot(&[]).sum_secs
        );
    }
    tracing::info!(summary = ?summary, committed = ?shared.committed(), "stopped");
    summary
}

#[cfg(test)]
mod tests {
    use super::*;
    use pipeline::driver::Source;

    #[test]
    fn flushes_are_paced_by_the_flush_interval_live_and_catching_up() {
        let mut cfg = JobConfig::default();
        cfg.source.flush_interval_ms = 40;
        let topic = TopicSource {
            decoder: SensorDecoder {
                metric: "temp".into(),
            },
            base: topic_options(&cfg, 1, 1, None),
            shared: Arc::new(KafkaShared::new(1, 1)),
            threads: 1,
            process: None,
            status_every: Duration::from_secs(10),
            stats: Arc::default(),
            control: Arc::default(),
            early_fire_past_hours: true,
            timed_writes: true,
            stored: "readings",
            report: Box::new(|counters, _| {
                run_summary(
                    &KafkaShared::new(1, 1),
                    counters,
                    &SensorStats::default(),
                    "job.toml".into(),
                )
            }),
        };
        assert_eq!(topic.flush_every(), Duration::from_millis(40));
        assert_eq!(topic.flush_min_gap(), Duration::from_millis(40));
        assert!(topic.early_fire_past_hours());
    }
}
