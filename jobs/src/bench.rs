//! `hourglass bench`: throughput measurements that write JSON, never assertions.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;

use crate::generate::{self, GenerateArgs};
use crate::replay::{self, ReplayArgs};

/// Benchmarks.
#[derive(Debug, clap::Subcommand)]
pub enum BenchCommand {
    /// Generate traffic, then replay it at full speed into a fresh embedded store.
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
                store: Some(store_dir.clone()),
                workers,
                speed: "max".into(),
                rebase_time: false,
                dead_letter: dir.join("bench-dead.jsonl"),
                late_output: dir.join("bench-late.jsonl"),
                stats_json: None,
                quiet: true,
            };
            let cfg = replay::job_config(&args)?;
            let store = crate::store::open_embedded(&store_dir)?;
            let summary = replay::replay_into(&args, &cfg, store)?;
            let result = serde_json::json!({
                "bench": "replay-embedded",
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
