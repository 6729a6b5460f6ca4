//! The `hourglass` binary: replay recordings into the tables, generate traffic, answer
//! dashboard queries, manage tables and measure throughput.

mod audience;
mod landing;
mod profile;
mod purge;
mod query;
mod tables;
mod tags;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

// The embedded store allocates per cell (memtable nodes, batch entries): glibc's malloc took
// ~40% of replay CPU in profiles; mimalloc roughly halves that.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's purge delay in ms (its default: 1,000), the time a freed page stays committed in
/// case it is reused; arenas wait 10 times as long.
///
/// At the end of a replay the window's last firing, the room view's rows and the writers' last
/// buffers free and allocate many blocks of other sizes within a second: pages freed by one
/// stayed committed while the next took new ones, and the peak RSS of a 100k × 20 min replay was
/// 282 MB where its heap, with the system allocator, peaked at 150 MB. At 100 ms it was 238 MB
/// at the same speed; at 0 (purging at once) 221 MB, but the timely workers took 15 % more CPU
/// (docs/BENCHMARKS.md, "Where a replay's memory goes").
const PURGE_DELAY_MS: &str = "100";

/// Starts the binary again with [`PURGE_DELAY_MS`] in `MIMALLOC_PURGE_DELAY`, and for
/// `hourglass serve` with `MIMALLOC_ALLOW_THP=0`, unless they are set.
///
/// mimalloc reads its options from the environment once, when the process loads, before `main`;
/// setting one later takes its C API, which this workspace's `unsafe_code = "forbid"` rules
/// out. `exec` keeps the process id, its open files (stdin of `hourglass replay -` included) and
/// its arguments; if it fails (the binary was replaced), the process goes on with the defaults.
///
/// Transparent huge pages: mimalloc asks for them on its arenas (`MADV_HUGEPAGE`), so the few
/// small pages each of `serve`'s threads allocates from took whole 2 MiB pages. 200 clients
/// asking curves at once grew its RSS by 71 MiB with them and 39 MiB without, and its idle RSS
/// was 45 MiB against 33 (docs/RELIABILITY.md, "serve under slow clients and load").
#[cfg(unix)]
fn with_allocator_options() {
    use std::os::unix::process::CommandExt;
    let serving = std::env::args_os().nth(1).is_some_and(|a| a == "serve");
    let wanted = [
        ("MIMALLOC_PURGE_DELAY", PURGE_DELAY_MS, true),
        ("MIMALLOC_ALLOW_THP", "0", serving),
    ];
    let missing: Vec<(&str, &str)> = wanted
        .into_iter()
        .filter(|&(var, _, applies)| applies && std::env::var_os(var).is_none())
        .map(|(var, value, _)| (var, value))
        .collect();
    if missing.is_empty() {
        return;
    }
    let Ok(exe) = std::env::current_exe() else {
        return;
    };
    let mut args = std::env::args_os();
    let mut command = std::process::Command::new(exe);
    if let Some(arg0) = args.next() {
        command.arg0(arg0);
    }
    // Returns only if the exec failed.
    let _failed = command.args(args).envs(missing).exec();
}

#[cfg(not(unix))]
fn with_allocator_options() {}

/// hourglass: a streaming time-series pipeline that stores sensor readings the HBase way.
#[derive(Debug, Parser)]
#[command(version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Replay a recorded traffic file into the tables (narrow rows and hourly wide rows).
    Replay(sensor::replay::ReplayArgs),
    /// The long-running job: consume readings from Kafka into the tables.
    Run(sensor::run::RunArgs),
    /// Publish a recorded traffic file to a Kafka topic, keyed by device id.
    Produce(sensor::tools::produce::ProduceArgs),
    /// Write realistic recorded sensor traffic (JSON Lines).
    Generate(sensor::tools::generate::GenerateArgs),
    /// Answer a dashboard query.
    #[command(subcommand)]
    Query(query::QueryCommand),
    /// Show or inspect the tables.
    #[command(subcommand)]
    Tables(tables::TablesCommand),
    /// Measure throughput.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Serve dashboards over HTTP: JSON API, Prometheus API for Grafana, a page, /metrics; with
    /// --profile-config, the profile read API too.
    Serve(ServeCommand),
    /// A month per device and room from the hourly wide rows (a bounded timely job).
    Report(sensor::report::ReportArgs),
    /// The profile job's tag registry: import definitions from CSV, list them, set a status,
    /// purge an offline tag's values.
    #[command(subcommand)]
    Tags(tags::TagsCommand),
    /// The profile job: replay or consume tag events into the profile store, read a user's
    /// tags, generate tag traffic.
    #[command(subcommand)]
    Profile(profile::ProfileCommand),
}

/// `hourglass bench`: the sensor job's benchmarks and the profile reads'.
#[derive(Debug, Subcommand)]
enum BenchCommand {
    #[command(flatten)]
    Sensor(sensor::tools::bench::BenchCommand),
    /// Profile reads through the read path (Redis cache, then the store), Zipf-distributed over
    /// a populated store's users: reads/s, hit ratio, latencies of hits and misses; `--batch N`
    /// times batch reads, `--audience EXPR` an audience query.
    Profile(::profile::bench::BenchArgs),
}

/// Flags of `hourglass serve`: the sensor dashboards' and the profile API's.
#[derive(Debug, clap::Args)]
struct ServeCommand {
    #[command(flatten)]
    serve: sensor::serve::ServeArgs,
    /// Also serve profiles (`GET /api/v1/profile/{user}`, `POST /api/v1/profiles:batchGet`)
    /// with this profile job configuration: its registry, `[redis]` and `[cache]`; the tables
    /// are read from the store `serve` opens (--store, --hbase, --config).
    #[arg(long, value_name = "FILE")]
    profile_config: Option<std::path::PathBuf>,
}

/// `hourglass serve`, with the profile routes composed in when asked.
fn serve(cmd: &ServeCommand) -> anyhow::Result<()> {
    let extension = match &cmd.profile_config {
        Some(path) => {
            let cfg = ::profile::ProfileConfig::load(path)?;
            let stats = std::sync::Arc::new(::profile::cache::CacheStats::default());
            let reader = ::profile::ProfileReader::open(&cfg, stats.clone())?;
            let limits = cfg.index.limits();
            let metrics = ::profile::serve::ServeMetrics::new(stats);
            let exposed = metrics.clone();
            Some(sensor::serve::Extension {
                tables: ::profile::tables(),
                routes: Box::new(move |store, reads| {
                    ::profile::serve::routes(reader, store, reads, limits, metrics)
                }),
                metrics: Some(sensor::serve::ExtraMetrics(std::sync::Arc::new(
                    move || exposed.exposition(),
                ))),
            })
        }
        None => None,
    };
    Ok(sensor::serve::run_with(&cmd.serve, extension)?)
}

/// Whether `e` is an I/O error on a closed pipe: itself, or the one the engine's and the sensor
/// crate's errors carry (which show it as theirs instead of as a source).
fn is_broken_pipe(e: &(dyn std::error::Error + 'static)) -> bool {
    let io = e.downcast_ref::<std::io::Error>().or_else(|| {
        match e
            .downcast_ref::<sensor::Error>()
            .and_then(|e| match e {
                sensor::Error::Engine(e) => Some(e),
                _ => None,
            })
            .or_else(|| e.downcast_ref::<pipeline::Error>())
        {
            Some(pipeline::Error::Os(io)) => Some(io),
            _ => None,
        }
    });
    io.is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
}

fn main() -> ExitCode {
    with_allocator_options();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("HOURGLASS_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    // A panicking timely worker would leave the others waiting for it forever: report and exit
    // instead. Kafka offsets are committed only for what is durable, so a restart loses nothing.
    // HTTP threads are the exception: their panic unwinds into one 500 answer
    // (`http_thread::serve`), and the server, and the job it may serve beside, go on.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        // A peer process of a cluster is gone: not a bug (no backtrace), and the way out is a
        // restart of every process.
        if let Some(message) = pipeline::driver::lost_peer_message(info) {
            eprintln!("{message}");
            std::process::exit(101);
        }
        default_hook(info);
        if pipeline::http_thread::on_http_thread() {
            eprintln!("error: an HTTP request failed with an internal error (above) and was answered 500; please report it");
            return;
        }
        eprintln!("error: hourglass stopped after an internal error (above); please report it");
        std::process::exit(101);
    }));
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Replay(args) => sensor::replay::run(&args)
            .map(|_| ExitCode::SUCCESS)
            .map_err(Into::into),
        Command::Run(args) => sensor::run::run(&args)
            .map(|_| ExitCode::SUCCESS)
            .map_err(Into::into),
        Command::Produce(args) => sensor::tools::produce::run(&args)
            .map(|_| ExitCode::SUCCESS)
            .map_err(Into::into),
        Command::Generate(args) => sensor::tools::generate::run(&args)
            .map(|_| ExitCode::SUCCESS)
            .map_err(Into::into),
        Command::Query(cmd) => query::run(cmd),
        Command::Tables(cmd) => tables::run(cmd),
        Command::Bench(BenchCommand::Sensor(cmd)) => {
            sensor::tools::bench::run(cmd).map_err(Into::into)
        }
        Command::Bench(BenchCommand::Profile(args)) => ::profile::bench::run(&args)
            .map_err(Into::into)
            .and_then(|result| {
                println!("{}", serde_json::to_string_pretty(&result)?);
                Ok(ExitCode::SUCCESS)
            }),
        Command::Serve(cmd) => serve(&cmd).map(|()| ExitCode::SUCCESS),
        Command::Report(args) => sensor::report::run(&args).map_err(Into::into),
        Command::Tags(cmd) => tags::run(cmd),
        Command::Profile(cmd) => profile::run(cmd),
    };
    match result {
        Ok(code) => code,
        // `hourglass query … | head` closes our stdout early: that is not an error.
        Err(e) if e.chain().any(is_broken_pipe) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
