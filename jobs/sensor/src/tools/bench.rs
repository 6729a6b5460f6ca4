//! `hourglass bench`: throughput measurements that write JSON, never assertions.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::Result;
use pipeline::time::HOUR_SECS;

use crate::replay::{self, ReplayArgs};
use crate::tools::generate::{self, GenerateArgs};
use pipeline::driver::JobArgs;
use pipeline::http_thread::HttpLimits;
use pipeline::store::BackendArgs;

mod live;

/// Benchmarks.
#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// Generate traffic, then replay it at full speed into a fresh embedded store, or with
    /// `--hbase` into the live HBase tables (created if missing; timestamps rebased to now so
    /// HBase's TTL keeps them).
    Replay {
        /// Devices in the generated traffic.
        #[arg(long, default_value_t = 10_000)]
        devices: u32,
        /// Length of the generated recording (`10m`, `1h`, …).
        #[arg(long, default_value = "1h")]
        duration: String,
        /// Timely worker threads [default: number of cores].
        #[arg(long)]
        workers: Option<usize>,
        /// Working directory for the traffic file and the store [default: a temporary one].
        #[arg(long)]
        dir: Option<PathBuf>,
        /// Also write the result as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
        /// Replay into HBase through its Thrift1 gateway at HOST:PORT.
        #[arg(long, value_name = "HOST:PORT")]
        hbase: Option<String>,
        /// HBase Thrift2 gateway, for the writes and to create missing tables [default: the --hbase host, port 9091].
        #[arg(long, value_name = "HOST:PORT")]
        thrift2: Option<String>,
    },
    /// A live job at fleet rate, measured from outside: a fresh topic, `hourglass run --serve`
    /// as a child, readings published at `--rate` and polled on its API until visible in the
    /// narrow table and in the open hour's wide row (p50/p90/p99/max of both delays). With
    /// `--backlog N`, a catch-up: N readings first, then how fast the job consumes them.
    Live(live::LiveArgs),
    /// Latencies (p50/p99) of the dashboard queries on existing tables: `query hour`, a 24 h
    /// `query curve` (auto vs narrow), a 30-day `query curve` (auto) and `query room` (view vs
    /// fanout over the same devices).
    Queries {
        /// Where the tables are.
        #[command(flatten)]
        backend: BackendArgs,
        /// Devices to sample from: `dev00000`… as `hourglass generate` names them.
        #[arg(long, default_value_t = 1000)]
        devices: u32,
        /// Queries of each kind.
        #[arg(long, default_value_t = 200)]
        iterations: u32,
        /// Also write the result as JSON to this file.
        #[arg(long)]
        json: Option<PathBuf>,
    },
}

/// p50 and p99 of some latencies, in milliseconds.
fn percentiles(mut samples: Vec<f64>) -> serde_json::Value {
    samples.sort_by(f64::total_cmp);
    let at = |q: f64| {
        samples
            .get(((samples.len() as f64 - 1.0) * q).round() as usize)
            .copied()
    };
    serde_json::json!({ "n": samples.len(), "p50_ms": at(0.5), "p99_ms": at(0.99) })
}

fn time_ms<T>(f: impl FnOnce() -> crate::Result<T>) -> Result<(f64, T)> {
    let start = std::time::Instant::now();
    let out = f()?;
    Ok((start.elapsed().as_secs_f64() * 1000.0, out))
}

/// The span of the month curve: 30 days, in seconds (a dashboard's month view).
const MONTH_SECS: i64 = 30 * 86_400;

fn bench_queries(
    backend: &BackendArgs,
    devices: u32,
    iterations: u32,
) -> Result<serde_json::Value> {
    use crate::query::{self, CurveSource};
    use rand::{Rng, SeedableRng};
    let mut cfg = crate::config::JobConfig::default();
    backend.apply(&mut cfg.store);
    let db = pipeline::store::open(
        &cfg.store,
        &crate::tables::all_tables(),
        backend,
        false,
        false,
    )?
    .reader();
    let scheme = cfg.key_scheme;
    let width = devices.saturating_sub(1).max(1).to_string().len().max(5);
    let name = |i: u32| format!("dev{i:0width$}");
    let Some(newest) = query::latest(&db, scheme, &name(0))? else {
        bail!(
            "{} has no readings: replay `hourglass generate --devices {devices}` output first",
            name(0)
        );
    };
    let at = newest.ts;
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    let (mut hour, mut auto, mut narrow, mut month, mut view, mut fanout) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for _ in 0..iterations {
        let device = name(rng.random_range(0..devices));
        hour.push(time_ms(|| query::hour(&db, scheme, &device, at - HOUR_SECS))?.0);
        auto.push(
            time_ms(|| {
                query::curve_points(&db, scheme, &device, at - 86_400, at, CurveSource::Auto)
            })?
            .0,
        );
        narrow.push(
            time_ms(|| {
                query::curve_points(&db, scheme, &device, at - 86_400, at, CurveSource::Narrow)
            })?
            .0,
        );
        month.push(
            time_ms(|| {
                query::curve_points(&db, scheme, &device, at - MONTH_SECS, at, CurveSource::Auto)
            })?
            .0,
        );
        let room = query::latest(&db, scheme, &device)?.and_then(|r| r.room());
        if let Some(room) = room {
            let (ms, entries) = time_ms(|| crate::room::room(&db, &room))?;
            view.push(ms);
            let members: Vec<String> = entries.into_iter().map(|e| e.device).collect();
            fanout.push(time_ms(|| crate::room::room_fanout(&db, scheme, &members))?.0);
        }
    }
    Ok(serde_json::json!({
        "bench": "queries",
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "backend": cfg.store.hbase.clone().unwrap_or_else(|| cfg.store.dir.display().to_string()),
        "at": at,
        "query_hour": percentiles(hour),
        "query_curve_24h_auto": percentiles(auto),
        "query_curve_24h_narrow": percentiles(narrow),
        "query_curve_30d_auto": percentiles(month),
        "query_room_view": percentiles(view),
        "query_room_fanout": percentiles(fanout),
    }))
}

/// Runs a benchmark and prints its JSON result on stdout.
pub fn run(cmd: BenchCommand) -> Result<ExitCode> {
    match cmd {
        BenchCommand::Live(args) => live::run(&args)?,
        BenchCommand::Queries {
            backend,
            devices,
            iterations,
            json,
        } => {
            let result = bench_queries(&backend, devices, iterations)?;
            println!("{}", serde_json::to_string_pretty(&result)?);
            if let Some(path) = json {
                std::fs::write(path, serde_json::to_vec_pretty(&result)?)?;
            }
        }
        BenchCommand::Replay {
            devices,
            duration,
            workers,
            dir,
            json,
            hbase,
            thrift2,
        } => {
            let tmp = tempfile::tempdir()?;
            let dir = dir.unwrap_or_else(|| tmp.path().to_path_buf());
            std::fs::create_dir_all(&dir)?;
            let traffic = dir.join("bench-traffic.jsonl");
            let store_dir = dir.join("bench-store");
            if store_dir.exists() {
                std::fs::remove_dir_all(&store_dir)?;
            }
            let gen = GenerateArgs {
                devices,
                duration: duration.clone(),
                start: Some("1724100000".into()),
                seed: 7,
                out: Some(traffic.clone()),
                interval: 10,
                late_rate: 0.0,
                malformed_rate: 0.0,
                duplicate_rate: 0.0,
                rooms: 100,
            };
            generate::run(&gen)?;
            let args = ReplayArgs {
                file: traffic.clone(),
                config: None,
                backend: BackendArgs {
                    store: hbase.is_none().then(|| store_dir.clone()),
                    hbase: hbase.clone(),
                    thrift2,
                },
                workers,
                speed: "max".into(),
                rebase_time: hbase.is_some(),
                registry: None,
                quiet: true,
                job: JobArgs {
                    dead_letter: dir.join("bench-dead.jsonl"),
                    late_output: dir.join("bench-late.jsonl"),
                    stats_json: None,
                    metrics_listen: None,
                    http: HttpLimits::default(),
                    recover: false,
                    cluster: Default::default(),
                },
            };
            let cfg = replay::job_config(&args)?;
            let backend = pipeline::store::open(
                &cfg.store,
                &crate::tables::all_tables(),
                &args.backend,
                false,
                true,
            )?;
            backend.admin().create_tables()?;
            let summary = replay::replay_into(&args, &cfg, &backend)?;
            // The writers' statistics as the backend names them (HBase's `putMultiple` calls;
            // the embedded store keeps none), and the means per call.
            let batches = match backend.metrics() {
                Some(metrics) => {
                    let stats = metrics.stats();
                    let get = |name: &str| metrics.stat(name).unwrap_or(0);
                    let calls = get("calls").max(1) as f64;
                    let mut batches: serde_json::Map<String, serde_json::Value> = stats
                        .into_iter()
                        .map(|(name, value)| (name, value.value().into()))
                        .collect();
                    if hbase.is_some() {
                        batches.insert("call".into(), "putMultiple".into());
                    }
                    for what in ["rows", "cells", "bytes"] {
                        batches.insert(
                            format!("mean_{what}_per_call"),
                            (get(what) as f64 / calls).into(),
                        );
                    }
                    serde_json::Value::Object(batches)
                }
                None => serde_json::Value::Null,
            };
            let result = serde_json::json!({
                "bench": if hbase.is_some() { "replay-hbase" } else { "replay-embedded" },
                "store": backend.location(),
                "hbase_batches": batches,
                "command": std::env::args().collect::<Vec<_>>().join(" "),
                "devices": devices,
                "duration": duration,
                "workers": workers.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
                "input_bytes": std::fs::metadata(&traffic)?.len(),
                "summary": summary,
            });
            println!("{}", serde_json::to_string_pretty(&result)?);
            if let Some(path) = json {
                std::fs::write(path, serde_json::to_vec_pretty(&result)?)?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
