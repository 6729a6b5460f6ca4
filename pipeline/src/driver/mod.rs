//! The job driver of `hourglass replay` and `hourglass run`: one source in, a job's dataflow,
//! the tables out.
//!
//! The source (a recording, a Kafka topic) and the job ([`Dataflow`]) are the parameters: the
//! source says how many workers read, opens each worker's feed and turns the counters into its
//! end-of-run report; the job builds each worker's dataflow. The driver owns the rest, the same
//! for every job: the counters, job control (a failure anywhere, and for `run` SIGINT/SIGTERM),
//! the dead-letter and late outputs, `/metrics`, the timely workers, the status or progress
//! line, and the end-of-run report with `--stats-json`.

mod cluster;
mod progress;
mod report;
mod sources;
mod status;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use operators::{BatchWriter, EventFeed, Poll};
use sinks::dead_letter::DeadLetters;
use sinks::table::{Mutation, TableWriter};
use timely::dataflow::{ProbeHandle, Scope};

use crate::config::{StoreConfig, WindowConfig};
use crate::control::JobControl;
use crate::http_thread::HttpLimits;
use crate::job_metrics::{JobMetrics, MetricsServer};
use crate::stats::{Stats, Summary};
use crate::store::Backend;
use crate::{Context, Error, Result};

pub use cluster::{job_settings, lost_peer_message, Cluster, ClusterArgs, Settings};
pub use progress::Progress;
pub use report::Report;
pub use sources::{MakeReport, RecordingSource, TopicSource, TopicSplit};
pub use status::KafkaStatus;

/// Flags of the job driver, shared by `hourglass replay` and `hourglass run`.
#[derive(Debug, Clone, clap::Args)]
pub struct JobArgs {
    /// Where rejected input goes (JSON Lines, appended to; created only if something is
    /// rejected). For a Kafka record, `line` is its offset in `partition`.
    #[arg(long, default_value = "hourglass-dead-letters.jsonl")]
    pub dead_letter: PathBuf,
    /// Where readings beyond the allowed lateness go (JSON Lines, created only if needed).
    #[arg(long, default_value = "hourglass-late.jsonl")]
    pub late_output: PathBuf,
    /// Write the end-of-run summary as JSON to this file.
    #[arg(long)]
    pub stats_json: Option<PathBuf>,
    /// Serve the job's own metrics (Prometheus text) at http://HOST:PORT/metrics, and
    /// /healthz, while it runs (a replay has no Kafka metrics); for `run`, overrides
    /// `metrics_listen` in the config. Off unless set: one fixed default port would make a
    /// second job on the host fail. 127.0.0.1:9464 keeps it local; port 0 picks a free port
    /// (printed on stderr).
    #[arg(long, value_name = "HOST:PORT")]
    pub metrics_listen: Option<String>,
    /// Timeouts and connection limit of the `--metrics-listen` server (and of `run --serve`).
    #[command(flatten)]
    pub http: HttpLimits,
    /// Open an embedded store whose journal is damaged by keeping the writes before the damage
    /// and dropping the rest of that journal file (printed on stderr). Back the store up first.
    #[arg(long)]
    pub recover: bool,
    /// The job as one process of a timely cluster.
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("cluster", &self.cluster)
            .finish_non_exhaustive()
    }
}

impl JobArgs {
    /// `--metrics-listen`, checked.
    ///
    /// # Errors
    /// The address is not `HOST:PORT`.
    pub fn checked_metrics_listen(&self) -> Result<Option<&str>> {
        if let Some(addr) = &self.metrics_listen {
            crate::config::check_listen_address("--metrics-listen", addr)?;
        }
        Ok(self.metrics_listen.as_deref())
    }
}

/// One worker per core, within the range a job may start.
pub fn default_workers() -> usize {
    std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(crate::config::MAX_WORKERS)
}

/// What one worker reads, and how it writes.
pub struct WorkerInput<F> {
    /// The worker's share of the input.
    pub feed: F,
    /// The worker's table writer (the backend's, or one wrapping it).
    pub writer: Box<dyn TableWriter>,
    /// Run on the worker once its dataflow has drained (a Kafka worker's final commit); an
    /// error fails the job.
    pub finish: Option<Box<dyn FnOnce() -> Result<(), String>>>,
}

impl<F> std::fmt::Debug for WorkerInput<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerInput").finish_non_exhaustive()
    }
}

/// A job the driver runs: the dataflow each worker builds over its feed, and the job's settings
/// every process of a cluster must share.
pub trait Dataflow: Send + Sync + 'static {
    /// What the job's feeds emit (a record, or a rejected one).
    type Item: 'static;

    /// The job's settings in [`Settings`] (its own config; the engine adds the cluster's and
    /// the store's, see [`job_settings`]).
    fn settings(&self) -> Settings;

    /// Builds the dataflow on one worker over `worker.feed` (see [`WorkerParts`]).
    fn build<F>(&self, scope: Scope<'_, u64>, worker: WorkerParts<'_, F>)
    where
        F: EventFeed<Item = Self::Item> + 'static;
}

/// What the driver gives a job's dataflow on one worker: it reads `feed`, writes with
/// `writer`, rejected and late records to `side`. `probe`'s frontier must pass watermark `t`
/// once every record the feed emitted before `t` is durably written (a Kafka feed commits the
/// offsets it passed).
pub struct WorkerParts<'a, F> {
    /// The worker's share of the input.
    pub feed: F,
    /// The worker's table writer.
    pub writer: Box<dyn TableWriter>,
    /// The dead-letter and late outputs.
    pub side: Arc<DeadLetters>,
    /// The engine's counters.
    pub stats: Arc<Stats>,
    /// The job's control: a failure anywhere fails the job.
    pub control: Arc<JobControl>,
    /// The probe of what is durable.
    pub probe: &'a ProbeHandle<u64>,
}

impl<F> std::fmt::Debug for WorkerParts<'_, F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerParts").finish_non_exhaustive()
    }
}

/// The table writer of a worker, counting each flush's batch into
/// [`Stats::sink_batches`]: the mutations written since the previous one.
pub struct CountingWriter {
    writer: Box<dyn TableWriter>,
    stats: Arc<Stats>,
    unflushed: u64,
}

impl CountingWriter {
    /// Counts what `writer` flushes into `stats`.
    pub fn new(writer: Box<dyn TableWriter>, stats: Arc<Stats>) -> Self {
        CountingWriter {
            writer,
            stats,
            unflushed: 0,
        }
    }

    /// The engine's counters it counts into.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }
}

impl std::fmt::Debug for CountingWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CountingWriter")
            .field("unflushed", &self.unflushed)
            .finish_non_exhaustive()
    }
}

impl BatchWriter<Mutation> for CountingWriter {
    type Error = sinks::Error;

    fn write(&mut self, batch: Vec<Mutation>) -> sinks::Result<()> {
        let mutations = batch.len() as u64;
        self.writer.write(batch)?;
        self.unflushed += mutations;
        Ok(())
    }

    fn flush(&mut self) -> sinks::Result<()> {
        self.writer.flush()?;
        if self.unflushed > 0 {
            self.stats
                .sink_batches
                .observe(std::mem::take(&mut self.unflushed));
        }
        Ok(())
    }
}

/// How a source wants a job's writes paced (see [`Source::flush_every`],
/// [`Source::flush_min_gap`], [`Source::early_fire_past_hours`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pace {
    /// Longest time written data may wait in a worker's writer buffer.
    pub flush_every: Duration,
    /// Shortest time between two flushes caused by event-time progress.
    pub flush_min_gap: Duration,
    /// Whether windows the wall clock has left fire early too.
    pub early_fire_past_hours: bool,
}

impl Pace {
    /// The pace `source` asks for.
    pub fn of(source: &impl Source) -> Self {
        Pace {
            flush_every: source.flush_every(),
            flush_min_gap: source.flush_min_gap(),
            early_fire_past_hours: source.early_fire_past_hours(),
        }
    }
}

/// Where a job's records come from: the driver's other parameter.
pub trait Source: Send + Sync + 'static {
    /// One worker's feed.
    type Feed: EventFeed + 'static;
    /// What watches the job while it runs (a progress bar, a status line); dropped once the
    /// workers have stopped.
    type Watch;
    /// The end-of-run report.
    type Report: Report;

    /// Timely worker threads of this process; a cluster has this many in every process.
    fn workers(&self) -> usize;

    /// The source's settings every process of a cluster must share (the topic, the speed of a
    /// replay…), beside the job's (`cluster::job_settings`).
    fn settings(&self) -> Settings;

    /// Longest time written data may wait in a worker's writer buffer.
    fn flush_every(&self) -> Duration;

    /// Shortest time between two flushes caused by event-time progress
    /// ([`operators::FlushPace::min_gap`]); zero, the least latency, unless the source races
    /// through event time.
    fn flush_min_gap(&self) -> Duration {
        Duration::ZERO
    }

    /// Whether hours the wall clock has left fire early too (a job's window, e.g. the sensor
    /// job's `GraphConfig::early_fire_past_hours`): a source that commits offsets past what is
    /// durable needs it.
    fn early_fire_past_hours(&self) -> bool {
        false
    }

    /// Opens worker `worker`'s feed (its index over every process of a cluster). `probe` passes
    /// a time once what the feed emitted before it is durable.
    ///
    /// # Errors
    /// The message the job fails with; the driver then gives that worker an empty feed, since
    /// every worker must build the same dataflow.
    fn open(
        &self,
        worker: usize,
        probe: &ProbeHandle<u64>,
        backend: &Backend,
    ) -> Result<WorkerInput<Self::Feed>, String>;

    /// Starts watching the job.
    ///
    /// # Errors
    /// What watches cannot start.
    fn watch(&self) -> Result<Self::Watch>;

    /// The end-of-run report of a job that stopped cleanly.
    fn report(&self, counters: Summary, stats: &Stats) -> Self::Report;
}

/// How the driver runs a job.
#[derive(Debug, Clone, Copy)]
pub struct JobOptions<'a> {
    /// The shared flags.
    pub args: &'a JobArgs,
    /// Where to serve `/metrics` (the flag or the config), checked.
    pub metrics_listen: Option<&'a str>,
    /// Stop cleanly on the first SIGINT/SIGTERM and exit 130 on the second, instead of the
    /// default (exit at once).
    pub stop_on_signals: bool,
    /// Do not print the report's headline.
    pub quiet: bool,
    /// This process's place in a cluster ([`Cluster::single`] for one process).
    pub cluster: &'a Cluster,
    /// The kinds of refusal of the job's records ([`crate::source::Refusal::KINDS`]), the
    /// labels of `/metrics`' `rejected` counter.
    pub reject_kinds: &'static [&'static str],
}

impl<'a> JobOptions<'a> {
    /// A replay's: `/metrics` where `--metrics-listen` says, a signal ends it at once, the
    /// report's headline unless `quiet`.
    ///
    /// # Errors
    /// `--metrics-listen` is not `HOST:PORT`.
    pub fn replay(
        args: &'a JobArgs,
        quiet: bool,
        cluster: &'a Cluster,
        reject_kinds: &'static [&'static str],
    ) -> Result<Self> {
        Ok(JobOptions {
            args,
            metrics_listen: args.checked_metrics_listen()?,
            stop_on_signals: false,
            quiet,
            cluster,
            reject_kinds,
        })
    }

    /// A long-running job's: `/metrics` at `metrics_listen` (the config's, which
    /// `--metrics-listen` overrides), stopped cleanly by a signal, the report's headline
    /// printed.
    pub fn run(
        args: &'a JobArgs,
        metrics_listen: Option<&'a str>,
        cluster: &'a Cluster,
        reject_kinds: &'static [&'static str],
    ) -> Self {
        JobOptions {
            args,
            metrics_listen,
            stop_on_signals: true,
            quiet: false,
            cluster,
            reject_kinds,
        }
    }
}

/// A job started but not yet reading: counters, control and metrics exist, so that the source
/// can be prepared under them (a Kafka source waits for its topic, stoppable by a signal).
pub struct Job {
    args: JobArgs,
    quiet: bool,
    cluster: Cluster,
    stats: Arc<Stats>,
    control: Arc<JobControl>,
    metrics: Arc<JobMetrics>,
    server: Option<MetricsServer>,
    signals: Option<signal_hook::iterator::Handle>,
}

impl Job {
    /// Starts the metrics server (at once, so that a taken port fails the job before it does
    /// anything) and the signal handlers.
    ///
    /// # Errors
    /// The metrics address cannot be bound, or the signal handlers cannot be installed.
    pub fn start(opts: JobOptions<'_>) -> Result<Self> {
        let stats = Arc::new(Stats::default());
        let control = Arc::new(JobControl::default());
        let metrics = Arc::new(JobMetrics::new(
            stats.clone(),
            control.clone(),
            opts.reject_kinds,
        ));
        if opts.cluster.is_cluster() {
            metrics.set_process(opts.cluster.process);
        }
        let server = opts
            .metrics_listen
            .map(|addr| MetricsServer::start(addr, metrics.clone(), &opts.args.http))
            .transpose()?;
        if let Some(server) = &server {
            // Tests and scripts read the address (port 0 picks one) from this line.
            eprintln!("metrics: http://{}/metrics", server.addr());
        }
        let signals = opts
            .stop_on_signals
            .then(|| handle_signals(control.clone()))
            .transpose()?;
        Ok(Job {
            args: opts.args.clone(),
            quiet: opts.quiet,
            cluster: opts.cluster.clone(),
            stats,
            control,
            metrics,
            server,
            signals,
        })
    }

    /// The job's control: stopping it, failing it.
    pub fn control(&self) -> &Arc<JobControl> {
        &self.control
    }

    /// The job's counters.
    pub fn stats(&self) -> &Arc<Stats> {
        &self.stats
    }

    /// What `/metrics` reports, to attach the source's own state to.
    pub fn metrics(&self) -> &JobMetrics {
        &self.metrics
    }

    /// Runs `job` over `source` into `backend` until it is done, stopped or failed, then
    /// prints the report (and writes `--stats-json`). `window` and `store` are the engine's
    /// settings every process of a cluster must share, beside the job's and the source's.
    ///
    /// # Errors
    /// A worker failed, the job failed (the first error), or an output cannot be written.
    pub fn run<S, D>(
        self,
        source: S,
        job: D,
        window: &WindowConfig,
        store: &StoreConfig,
        backend: &Backend,
    ) -> Result<S::Report>
    where
        S: Source,
        D: Dataflow,
        S::Feed: EventFeed<Item = D::Item>,
    {
        if let Some(writers) = backend.metrics() {
            self.metrics.attach_writers(writers);
        }
        let side = Arc::new(DeadLetters::new(
            self.args.dead_letter.clone(),
            self.args.late_output.clone(),
        ));
        let workers = source.workers();
        let mut settings = job_settings(window, store, workers, self.cluster.processes());
        settings.extend(job.settings());
        settings.sort();
        settings.extend(source.settings());
        let job = Arc::new(job);
        let in_cluster = self.cluster.is_cluster();
        if in_cluster {
            eprintln!(
                "cluster: process {} of {}, {workers} workers each; connecting to {}",
                self.cluster.process,
                self.cluster.processes(),
                self.cluster.addresses.join(", ")
            );
        }
        let watch = source.watch()?;
        let fail_together = in_cluster.then(|| cluster::FailTogether::start(self.control.clone()));
        let source = Arc::new(source);
        let started = Instant::now();

        let (w_job, w_source, w_stats, w_control, w_side, w_backend) = (
            job,
            source.clone(),
            self.stats.clone(),
            self.control.clone(),
            side.clone(),
            backend.clone(),
        );
        let guards = self.cluster.execute(workers, move |worker| {
            let probe = ProbeHandle::new();
            let side = w_side.clone();
            let (stats, control) = (w_stats.clone(), w_control.clone());
            // Before any worker opens its share of the input: a process that disagrees would
            // read another split of it, or write another layout into the shared store.
            let opened = match in_cluster
                .then(|| cluster::disagreement(worker, &settings))
                .flatten()
            {
                Some(e) => Err(e),
                None => w_source.open(worker.index(), &probe, &w_backend),
            };
            match opened {
                Ok(input) => {
                    worker.dataflow::<u64, _, _>(|scope| {
                        let parts = WorkerParts {
                            feed: input.feed,
                            writer: input.writer,
                            side,
                            stats,
                            control,
                            probe: &probe,
                        };
                        w_job.build(scope, parts);
                    });
                    while worker.step_or_park(None) {}
                    if let Some(Err(e)) = input.finish.map(|finish| finish()) {
                        w_control.fail(e);
                    }
                }
                Err(e) => {
                    w_control.fail(e);
                    worker.dataflow::<u64, _, _>(|scope| {
                        let parts = WorkerParts {
                            feed: NoInput::<D::Item>(std::marker::PhantomData),
                            writer: w_backend.writer(),
                            side,
                            stats,
                            control,
                            probe: &probe,
                        };
                        w_job.build(scope, parts);
                    });
                }
            }
        })?;
        for result in guards.join() {
            result.map_err(|e| Error::Failed(format!("a worker failed: {e}")))?;
        }
        drop(fail_together);
        let elapsed = started.elapsed().as_secs_f64();
        drop(watch);
        drop(self.server);
        if let Some(signals) = self.signals {
            signals.close();
        }
        side.flush().map_err(Error::Storage)?;
        backend.persist().map_err(Error::Storage)?;
        if let Some(e) = self.control.error() {
            return Err(Error::Failed(e));
        }

        let report = source.report(self.stats.summary(elapsed), &self.stats);
        for line in report.footer(side.rejected_path(), side.late_path()) {
            eprintln!("{line}");
        }
        if let Some(path) = &self.args.stats_json {
            let json = serde_json::to_vec_pretty(&report).context("serializing the report")?;
            std::fs::write(path, json).with_context(|| format!("writing {}", path.display()))?;
        }
        if !self.quiet {
            eprintln!("{}", report.headline(&backend.location()));
        }
        Ok(report)
    }
}

/// The feed of a worker whose source could not open: the job is failing, but every worker must
/// build the same dataflow.
struct NoInput<T>(std::marker::PhantomData<T>);

impl<T: 'static> EventFeed for NoInput<T> {
    type Item = T;
    fn poll(&mut self) -> Poll<T> {
        Poll::Done
    }
    fn watermark(&self) -> u64 {
        0
    }
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
