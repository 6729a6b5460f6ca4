//! The `hourglass run --serve` child process the bench measures: its config, start and end.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;

use crate::Result;
use pipeline::Context;

use super::LiveArgs;

/// The child job, its dashboard address once it printed it, and its stderr copied to a log.
pub(super) struct JobChild {
    pub(super) child: Child,
    pub(super) addr: mpsc::Receiver<String>,
}

pub(super) fn start_job(dir: &Path, config: &Path, exit_on_idle: &str) -> Result<JobChild> {
    let exe = std::env::current_exe().context("finding the hourglass binary")?;
    let mut child = Command::new(exe)
        .arg("run")
        .arg("--config")
        .arg(config)
        .args(["--serve", "127.0.0.1:0", "--exit-on-idle", exit_on_idle])
        .arg("--dead-letter")
        .arg(dir.join("dead.jsonl"))
        .arg("--late-output")
        .arg(dir.join("late.jsonl"))
        .arg("--stats-json")
        .arg(dir.join("stats.json"))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting hourglass run")?;
    let stderr = child.stderr.take().context("the job's stderr")?;
    let mut log = std::fs::File::create(dir.join("job.log"))?;
    let (tx, addr) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
            if let Some(a) = line
                .strip_prefix("dashboards: http://")
                .and_then(|a| a.strip_suffix('/'))
            {
                let _ = tx.send(a.to_string());
            }
            let _ = writeln!(log, "{line}");
        }
    });
    Ok(JobChild { child, addr })
}

/// Waits for the job to exit on its own (`--exit-on-idle`) and reads its `--stats-json`.
pub(super) fn finish_job(mut job: JobChild, dir: &Path) -> Result<serde_json::Value> {
    let status = job.child.wait()?;
    if !status.success() {
        bail!(
            "hourglass run failed ({status}); see {}",
            dir.join("job.log").display()
        );
    }
    let stats = std::fs::read(dir.join("stats.json")).context("reading the job's stats")?;
    let mut stats: serde_json::Value = serde_json::from_slice(&stats)?;
    // `run` prints its writers' flush times (the store's call time) when it stops.
    let log = std::fs::read_to_string(dir.join("job.log")).unwrap_or_default();
    for what in ["flushes", "writes"] {
        let prefix = format!("store {what}: ");
        if let Some(line) = log.lines().find_map(|l| l.strip_prefix(prefix.as_str())) {
            stats[format!("store_{what}")] = line.into();
        }
    }
    Ok(stats)
}

pub(super) fn job_config(args: &LiveArgs, dir: &Path, topic: &str) -> String {
    let mut cfg = String::new();
    if let Some(w) = args.workers {
        cfg += &format!("workers = {w}\n");
    }
    match &args.hbase {
        Some(hbase) => {
            cfg += &format!("[store]\nkind = \"hbase\"\nhbase = \"{hbase}\"\n");
            if let Some(t2) = &args.thrift2 {
                cfg += &format!("[store.hbase_client]\nthrift2 = \"{t2}\"\n");
            }
        }
        None => {
            cfg += &format!(
                "[store]\nkind = \"embedded\"\ndir = \"{}\"\n",
                dir.join("store").display()
            );
        }
    }
    cfg += &format!(
        "[source]\nbrokers = \"{}\"\ntopic = \"{topic}\"\ngroup_id = \"{topic}\"\n",
        args.brokers
    );
    for line in &args.config_line {
        cfg += line;
        cfg.push('\n');
    }
    cfg
}
