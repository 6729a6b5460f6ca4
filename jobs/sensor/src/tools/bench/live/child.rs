//! The `hourglass run --serve` child process the bench measures: its config and start.

use std::path::Path;
use std::process::Command;

use crate::Result;
use pipeline::live_bench::JobChild;
use pipeline::Context;

use super::LiveArgs;

/// Starts `hourglass run --serve` (the binary running the bench) on `config`, its outputs in
/// `dir`, exiting after `exit_on_idle` without records.
pub(super) fn start_job(dir: &Path, config: &Path, exit_on_idle: &str) -> Result<JobChild> {
    let exe = std::env::current_exe().context("finding the hourglass binary")?;
    let mut command = Command::new(exe);
    command.arg("run").arg("--config").arg(config).args([
        "--serve",
        "127.0.0.1:0",
        "--exit-on-idle",
        exit_on_idle,
    ]);
    Ok(JobChild::start(command, dir, "dashboards: http://")?)
}

pub(super) fn job_config(args: &LiveArgs, dir: &Path, topic: &str) -> String {
    args.bench.job_config(dir, topic, "")
}
