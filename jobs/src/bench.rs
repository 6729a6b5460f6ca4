//! `hourglass bench`: throughput measurements that write JSON, never assertions.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

use crate::generate::{self, GenerateArgs};
use crate::replay::{self, ReplayArgs};
use crate::store::{Backend, BackendArgs};
use std::sync::atomic::Ordering;

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
        /// HBase Thrift2 gateway, to create missing tables [default: the --hbase host, port 9091].
        #[arg(long, value_name = "HOST:PORT")]
        thrift2: Option<String>,
    },
}

/// Runs a benchmark and prints its JSON result on stdout.
pub fn run(cmd: BenchCommand) -> Result<ExitCode> {
    match cmd {
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
                dead_letter: dir.join("bench-dead.jsonl"),
                late_output: dir.join("bench-late.jsonl"),
                stats_json: None,
                registry: None,
                quiet: true,
            };
            let cfg = replay::job_config(&args)?;
            let backend = crate::store::open(&cfg, &args.backend, false, true)?;
            if let Backend::Hbase { cfg: hb, .. } = &backend {
                sinks::hbase::admin::create_tables(hb, &pipeline::schema::all_tables())?;
            }
            let summary = replay::replay_into(&args, &cfg, &backend)?;
            let batches = match &backend {
                Backend::Embedded { .. } => serde_json::Value::Null,
                Backend::Hbase { cfg: hb, stats } => {
                    let get = |c: &std::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
                    let calls = get(&stats.calls).max(1);
                    serde_json::json!({
                        "call": "mutateRowsTs",
                        "max_rows_per_call": hb.batch_rows,
                        "max_bytes_per_call": hb.batch_bytes,
                        "calls": get(&stats.calls),
                        "rows": get(&stats.rows),
                        "cells": get(&stats.cells),
                        "bytes": get(&stats.bytes),
                        "mean_rows_per_call": get(&stats.rows) as f64 / calls as f64,
                        "mean_cells_per_call": get(&stats.cells) as f64 / calls as f64,
                        "mean_bytes_per_call": get(&stats.bytes) as f64 / calls as f64,
                        "largest_call_rows": get(&stats.max_call_rows),
                        "retries": get(&stats.retries),
                    })
                }
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
