//! `hourglass profile`: the profile job (`replay`, `run`), its queries (`get`, `audience`) and its test
//! traffic (`generate`). Flags and config here; the job is `profile::job`.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use operators::EventFeed;
use pipeline::driver::{
    self, Cluster, Job, JobArgs, JobOptions, MakeReport, Pace, RecordingSource, Source, TopicSource,
};
use pipeline::source::kafka::KafkaShared;
use pipeline::store::{Backend, BackendArgs};
use profile::audience::build::{self, Finished, ReplayIndex};
use profile::generate::{self, EventGenerator, GenerateConfig};
use profile::job::{ProfileDecoder, ProfileJob, ProfileReport, ProfileStats};
use profile::{ProfileConfig, ProfileReader, RejectReason, Selection};

/// The profile job's commands.
#[derive(Debug, clap::Subcommand)]
pub enum ProfileCommand {
    /// Replay a file of tag events (JSON Lines, optionally .gz/.zst; `-` reads stdin) into the
    /// profile tables and the short-term store.
    Replay(ReplayArgs),
    /// The long-running job: consume tag events from Kafka (the config's `[source] topic`).
    Run(RunArgs),
    /// Print a user's tags as JSON, short-term tags included, cache first:
    /// `{"user_id": …, "tags": {code: value}, "source": "cache"|"store"}`. Exits 1 for a user
    /// with none.
    Get(GetArgs),
    /// Count or list the users a tag condition selects, from the index `user_tag_index`:
    /// `hourglass profile audience 'dim_city = hz AND beh_buy_30d >= 3 AND NOT vip = true'`.
    Audience(crate::audience::AudienceArgs),
    /// Compare the index `user_tag_index` with `user_profile_tag`: prints the missing and stale
    /// entries' counts as JSON, exits 1 when they do not match; `--repair` fixes them.
    Reconcile(crate::audience::ReconcileArgs),
    /// Measure freshness end to end: publish tag events to a fresh topic at a rate, run the job
    /// (`profile run --serve`) as a child, and time how long a sample of changed tags takes from
    /// the producer's send to `GET /api/v1/profile/{user}` showing them (p50/p90/p99/max).
    BenchLive(profile::bench::live::LiveArgs),
    /// Write realistic tag traffic: the registry CSV (--registry-out, for `hourglass tags
    /// import`) and JSON Lines tag events (--out) checked against it; same seed, same bytes.
    Generate(GenerateArgs),
    /// Move the short-term tags of the Redis layout before hourglass kept a hash a user (one
    /// key `short:{user}:{code}` a value) into the hashes `short-tags:{user}`, and delete them;
    /// prints the counts as JSON. Run it once after upgrading the job (again is harmless).
    MigrateShortTerm(MigrateArgs),
}

/// Arguments of `hourglass profile migrate-short-term`.
#[derive(Debug, Clone, clap::Args)]
pub struct MigrateArgs {
    /// Profile job configuration (TOML): the registry (the tags' TTLs) and `[redis]`.
    #[arg(long)]
    pub config: PathBuf,
}

/// Arguments of `hourglass profile replay`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReplayArgs {
    /// Tag events: JSON Lines, optionally `.gz` or `.zst`; `-` reads stdin.
    pub file: PathBuf,
    /// Profile job configuration (TOML; config/profile.example.toml).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Where the tables are: `--store DIR` (embedded) or `--hbase HOST:PORT`.
    #[command(flatten)]
    pub backend: BackendArgs,
    /// Timely worker threads, 1 to 256 [default: the config's workers, else the cores].
    #[arg(long)]
    pub workers: Option<usize>,
    /// Do not print the summary on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// Output, metrics and store-recovery flags, as `hourglass replay`'s.
    #[command(flatten)]
    pub job: JobArgs,
}

/// Arguments of `hourglass profile run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    /// Profile job configuration (TOML): `[source]` (Kafka), `[store]`, registry, Redis.
    #[arg(long)]
    pub config: PathBuf,
    /// Flush, commit and exit 0 once no record has arrived for this long (`500ms`, `5s`).
    #[arg(long, value_name = "DURATION")]
    pub exit_on_idle: Option<String>,
    /// Serve the profile read API from the job's own store while it runs, with the routes of
    /// `hourglass serve --profile-config` (`GET /api/v1/profile/{user}`, `POST
    /// /api/v1/profiles:batchGet`, `GET /api/v1/audience`), at http://HOST:PORT/, cache first
    /// as the config's `[cache]` says. The way to read a job writing the embedded store, which
    /// admits one process. Port 0 picks a free port (printed on stderr); no token, so keep it
    /// on loopback.
    #[arg(long, value_name = "HOST:PORT")]
    pub serve: Option<String>,
    /// Output, metrics and store-recovery flags, as `hourglass run`'s.
    #[command(flatten)]
    pub job: JobArgs,
}

/// Arguments of `hourglass profile get`.
#[derive(Debug, Clone, clap::Args)]
pub struct GetArgs {
    /// The user id, as the events give it.
    pub user: String,
    /// Profile job configuration (TOML): registry, Redis, store.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Where the tables are: `--store DIR` (embedded) or `--hbase HOST:PORT`.
    #[command(flatten)]
    pub backend: BackendArgs,
    /// Also give each behaviour tag's last N values with their event times (`"versions"`,
    /// at most the 3 the table keeps), read from the store.
    #[arg(long, value_name = "N", conflicts_with = "at")]
    pub versions: Option<u32>,
    /// The tags as they were at this time (epoch seconds or RFC 3339), from the history table
    /// (`"source": "history"`; short-term tags have no history).
    #[arg(long, value_name = "T")]
    pub at: Option<String>,
    /// Only these tags (comma-separated codes).
    #[arg(long, value_delimiter = ',', value_name = "CODES")]
    pub tags: Vec<String>,
    /// Only the tags of these families (comma-separated: dimension, behavior, short_term).
    #[arg(long, value_delimiter = ',', value_name = "FAMILIES")]
    pub families: Vec<String>,
}

/// Arguments of `hourglass profile generate`.
#[derive(Debug, Clone, clap::Args)]
pub struct GenerateArgs {
    /// Distinct users; a few make most events (power law), ids mostly 11-digit mobile numbers.
    #[arg(long, default_value_t = 10_000)]
    pub users: u64,
    /// Events (lines) to write.
    #[arg(long, default_value_t = 100_000)]
    pub events: u64,
    /// The events' file, `-` for stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Also write the generated registry (about 200 tags) as an import CSV here.
    #[arg(long, value_name = "FILE")]
    pub registry_out: Option<PathBuf>,
    /// RNG seed (same seed and arguments → byte-identical output).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Event time of the first event, epoch seconds.
    #[arg(long, value_name = "TS", default_value_t = 1_796_500_000)]
    pub start: i64,
    /// Seconds the event times cover (about one event in 20 is up to 10 minutes late).
    #[arg(long, value_name = "SECS", default_value_t = 86_400)]
    pub span: u64,
    /// Share of bad events (0 to 1), one dead-letter kind each, spread evenly over the kinds.
    #[arg(long, default_value_t = 0.0)]
    pub bad_ratio: f64,
    /// Exponent of the users' power law (1 classic, larger more skewed).
    #[arg(long, default_value_t = 1.0)]
    pub zipf: f64,
}

pub fn run(cmd: ProfileCommand) -> Result<ExitCode> {
    match cmd {
        ProfileCommand::Replay(args) => replay(&args).map(|_| ExitCode::SUCCESS),
        ProfileCommand::Run(args) => run_job(&args).map(|_| ExitCode::SUCCESS),
        ProfileCommand::Get(args) => get(&args),
        ProfileCommand::Reconcile(args) => {
            crate::audience::reconcile(&args, &load(args.config.as_deref())?)
        }
        ProfileCommand::Audience(args) => {
            crate::audience::audience(&args, &load(args.config.as_deref())?)
        }
        ProfileCommand::Generate(args) => generate(&args).map(|()| ExitCode::SUCCESS),
        ProfileCommand::MigrateShortTerm(args) => {
            let cfg = load(Some(&args.config))?;
            let now = pipeline::time::now_ms().div_euclid(1000);
            let migrated = profile::short_term::migrate(&cfg, now)?;
            println!("{}", serde_json::to_string(&migrated)?);
            Ok(ExitCode::SUCCESS)
        }
        ProfileCommand::BenchLive(args) => {
            let result = profile::bench::live::run(&args)?;
            if args.bench.format == "json" {
                println!("{}", serde_json::to_string_pretty(&result)?);
            } else {
                profile::bench::live::print_text(&result);
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

fn load(path: Option<&Path>) -> Result<ProfileConfig> {
    Ok(match path {
        Some(path) => ProfileConfig::load(path)?,
        None => ProfileConfig::default(),
    })
}

fn replay(args: &ReplayArgs) -> Result<ProfileReport> {
    let mut cfg = load(args.config.as_deref())?;
    args.backend.apply(&mut cfg.store);
    args.job.cluster.apply(&mut cfg.cluster);
    if let Some(workers) = args.workers {
        pipeline::config::check_workers("--workers", workers)?;
    }
    profile::job::check_registry(&cfg)?;
    profile::job::prepare_short_term(&cfg)?;
    let cluster = Cluster::from_config(&cfg.cluster, &cfg.store)?;
    let backend = open_store(&cfg, args.job.recover)?;
    drop(pipeline::source::replay::input::open(&args.file, None)?);
    let job = Job::start(JobOptions::replay(
        &args.job,
        args.quiet,
        &cluster,
        &RejectReason::KINDS,
    )?)?;
    let workers = args
        .workers
        .or(cfg.workers)
        .unwrap_or_else(driver::default_workers);
    let counters = Arc::new(ProfileStats::default());
    let source = RecordingSource {
        decoder: ProfileDecoder { limits: cfg.limits },
        base: profile::job::replay_options(&cfg, args.file.clone(), cluster.peers(workers)),
        threads: workers,
        stats: job.stats().clone(),
        control: job.control().clone(),
        report: report(counters.clone(), "replayed".into(), None),
    };
    // Into a store with no profile and no index, the index is built at the end from the
    // profiles written, rather than kept up at each write: cheaper, and the same entries. Not
    // in a cluster, whose processes end at different times.
    let upkeep = if cfg.index.enabled && !cluster.is_cluster() {
        build::replay_index(&backend.reader())?
    } else {
        ReplayIndex::PerWrite
    };
    if upkeep == ReplayIndex::Build {
        build::mark_pending(backend.writer().as_mut())?;
    }
    let report = run_profile(
        job,
        source,
        &cfg,
        counters,
        &backend,
        upkeep == ReplayIndex::PerWrite,
    )?;
    finish_index(&cfg, &backend, upkeep, args.quiet)?;
    Ok(report)
}

/// Builds or repairs the index at the end of a replay that did not keep it up
/// ([`profile::audience::build`]), and makes it durable.
fn finish_index(
    cfg: &ProfileConfig,
    backend: &Backend,
    upkeep: ReplayIndex,
    quiet: bool,
) -> Result<()> {
    if upkeep == ReplayIndex::PerWrite {
        return Ok(());
    }
    let started = Instant::now();
    let context = "building the audience index (the profiles are written; the next replay, or \
                   `hourglass profile reconcile --repair`, builds it)";
    let defs = profile::registry::open(&cfg.registry.url)
        .and_then(|mut r| r.list())
        .context(context)?;
    let mut writer = backend.writer();
    let finished =
        build::finish(&backend.reader(), writer.as_mut(), &defs, upkeep).context(context)?;
    drop(writer);
    backend.persist()?;
    let took = started.elapsed().as_secs_f64();
    match finished {
        Some(Finished::Built(b)) if !quiet => eprintln!(
            "audience index: {} entries of {} profile rows built in {took:.1} s",
            b.entries, b.profile_rows
        ),
        // Said even when quiet: an earlier replay was interrupted.
        Some(Finished::Repaired(r)) => eprintln!(
            "audience index: an earlier replay's build was interrupted; repaired in {took:.1} s: \
             {} missing entries put, {} stale deleted",
            r.missing, r.stale
        ),
        _ => {}
    }
    Ok(())
}

fn run_job(args: &RunArgs) -> Result<ProfileReport> {
    let mut cfg = ProfileConfig::load(&args.config)?;
    if let Some(addr) = args.job.checked_metrics_listen()? {
        cfg.metrics_listen = Some(addr.to_string());
    }
    args.job.cluster.apply(&mut cfg.cluster);
    let exit_on_idle = args
        .exit_on_idle
        .as_deref()
        .map(pipeline::time::parse_duration)
        .transpose()?;
    profile::job::check_registry(&cfg)?;
    profile::job::prepare_short_term(&cfg)?;
    let cluster = Cluster::from_config(&cfg.cluster, &cfg.store)?;
    let job = Job::start(JobOptions::run(
        &args.job,
        cfg.metrics_listen.as_deref(),
        &cluster,
        &RejectReason::KINDS,
    ))?;
    let backend = open_store(&cfg, args.job.recover)?;
    if cfg.index.enabled && build::is_pending(&backend.reader())? {
        eprintln!(
            "warning: a replay's build of the audience index was interrupted: entries are \
             missing until `hourglass profile reconcile --repair` puts them"
        );
    }
    let api = match &args.serve {
        Some(listen) => {
            let stats = Arc::new(profile::cache::CacheStats::default());
            let server = profile::serve::ApiServer::start(
                listen,
                ProfileReader::open(&cfg, stats.clone())?,
                backend.reader(),
                cfg.index.limits(),
                profile::serve::ServeMetrics::new(stats),
                &args.job.http,
            )?;
            // Tests and benches read the address (port 0 picks one) from this line.
            eprintln!("profile api: http://{}/", server.addr());
            Some(server)
        }
        None => None,
    };
    let source = &cfg.source;
    let split = job.split_topic(source, &cluster, cfg.workers)?;
    let (partitions, workers) = (split.partitions, split.workers);
    eprintln!(
        "profile run: topic {} ({partitions} partitions) at {}, group {}, {workers} workers → {}",
        source.topic,
        source.brokers,
        source.group_id,
        backend.location()
    );
    let counters = Arc::new(ProfileStats::default());
    let verb = format!("run ({}) stopped after reading", args.config.display());
    let decoder = ProfileDecoder { limits: cfg.limits };
    let base = profile::job::topic_options(&cfg, partitions, split.peers, exit_on_idle);
    let report = report(counters.clone(), verb, Some(split.shared.clone()));
    let topic = TopicSource {
        status_every: Duration::from_secs(cfg.status_interval_secs),
        stored: "tags",
        ..TopicSource::new(&job, &cluster, split, decoder, base, report)
    };
    let report = run_profile(job, topic, &cfg, counters, &backend, true)?;
    drop(api);
    Ok(report)
}

/// The profile tables of `cfg`, open for the job's merging writes and created if absent.
fn open_store(cfg: &ProfileConfig, recover: bool) -> Result<Backend> {
    let backend = pipeline::store::open_for_merging(
        &cfg.store,
        &profile::tables(),
        &BackendArgs::default(),
        recover,
    )?;
    backend.ensure_tables()?;
    Ok(backend)
}

/// The report of a job that `verb` the events, with the profile job's `counters` (and, for a
/// topic, the records skipped on resuming).
fn report(
    counters: Arc<ProfileStats>,
    verb: String,
    topic: Option<Arc<KafkaShared>>,
) -> MakeReport<ProfileReport> {
    Box::new(move |summary, stats| ProfileReport {
        verb: verb.clone(),
        counters: (&summary).into(),
        profile: counters.snapshot(stats),
        resume_skipped: topic.as_ref().map(|t| t.resume_skipped()),
    })
}

/// Runs the profile job of `cfg` over `source` into `backend`, counting into `counters`
/// (which `/metrics` reports), keeping the index up at each write if `[index] enabled` and
/// `index_upkeep`.
fn run_profile<S>(
    job: Job,
    source: S,
    cfg: &ProfileConfig,
    counters: Arc<ProfileStats>,
    backend: &Backend,
    index_upkeep: bool,
) -> Result<ProfileReport>
where
    S: Source<Report = ProfileReport>,
    S::Feed: EventFeed<Item = profile::job::Item>,
{
    job.metrics().attach_counters(counters.clone());
    let mut profile = ProfileJob::new(cfg, Pace::of(&source), counters)?;
    if cfg.index.enabled && index_upkeep {
        profile = profile.with_index(backend.reader(), cfg.index.cache_bytes());
    }
    Ok(job.run(source, profile, &cfg.window, &cfg.store, backend)?)
}

fn get(args: &GetArgs) -> Result<ExitCode> {
    let cfg = load(args.config.as_deref())?;
    let backend =
        pipeline::store::open(&cfg.store, &profile::tables(), &args.backend, true, false)?;
    let reader = ProfileReader::open(&cfg, Arc::default())?;
    let store = backend.reader();
    let now_ms = pipeline::time::now_ms();
    let answer = match (&args.at, args.versions) {
        (Some(at), _) => {
            let at_secs = pipeline::time::parse_time(at)?;
            reader.at(&store, &args.user, at_secs.saturating_mul(1000))?
        }
        (None, Some(n)) => reader.versions(&store, &args.user, n, now_ms)?,
        (None, None) => {
            let selection = Selection::new(&reader.defs(), &args.tags, &args.families)?;
            reader.get(&store, &args.user, &selection, now_ms)?
        }
    };
    let code = match answer {
        Some(profile) => {
            let mut out = std::io::stdout().lock();
            serde_json::to_writer(&mut out, &profile)?;
            writeln!(out)?;
            ExitCode::SUCCESS
        }
        None => {
            eprintln!(
                "error: user {:?} has no tags in {}{}",
                args.user,
                backend.location(),
                if args.at.is_some() {
                    " at that time"
                } else {
                    ""
                }
            );
            ExitCode::FAILURE
        }
    };
    // The answer is out; the backfill of a miss is written before the process exits.
    reader.finish();
    Ok(code)
}

fn generate(args: &GenerateArgs) -> Result<()> {
    if args.out.is_none() && args.registry_out.is_none() {
        bail!("nothing to write: give --out FILE (or - for stdout) and/or --registry-out FILE");
    }
    let config = GenerateConfig {
        users: args.users,
        events: args.events,
        seed: args.seed,
        start: args.start,
        span_secs: args.span,
        bad_ratio: args.bad_ratio,
        zipf_exponent: args.zipf,
    };
    // Checked before any file is created.
    let generator = EventGenerator::new(config)?;
    if let Some(path) = &args.registry_out {
        let tags = generate::registry();
        let file = create(path)?;
        generate::write_registry_csv(BufWriter::new(file), &tags)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {} tag definitions to {}", tags.len(), path.display());
    }
    let Some(path) = &args.out else {
        return Ok(());
    };
    let started = Instant::now();
    let summary = if path == Path::new("-") {
        let stdout = std::io::stdout().lock();
        generate::write_events(generator, BufWriter::with_capacity(1 << 16, stdout))?
    } else {
        let file = create(path)?;
        generate::write_events(generator, BufWriter::with_capacity(1 << 16, file))
            .with_context(|| format!("writing {}", path.display()))?
    };
    let secs = started.elapsed().as_secs_f64();
    let bad: u64 = summary.bad.iter().sum();
    let mut err = std::io::stderr().lock();
    writeln!(
        err,
        "wrote {} events ({bad} bad) of {} users to {} in {secs:.1} s ({:.0} events/s)",
        summary.events,
        args.users,
        path.display(),
        summary.events as f64 / secs.max(1e-9)
    )?;
    Ok(())
}

fn create(path: &Path) -> Result<std::fs::File> {
    std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))
}
