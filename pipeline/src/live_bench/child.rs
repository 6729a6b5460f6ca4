//! The job a bench measures, a child process: its start, the address it announces, its end.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::{Context, Error, Result};

/// How long a job may take to announce its address (it opens its store and joins its group).
const START_LIMIT: Duration = Duration::from_secs(120);

/// The child job, its stderr copied to `DIR/job.log`, and the address it announced.
#[derive(Debug)]
pub struct JobChild {
    /// The process.
    pub child: Child,
    addr: mpsc::Receiver<String>,
    log: PathBuf,
}

impl JobChild {
    /// Starts `command` (the binary running the bench, with the job's arguments) with the
    /// engine's output flags into `dir` (`--dead-letter dir/dead.jsonl`, `--late-output
    /// dir/late.jsonl`, `--stats-json dir/stats.json`), its stdout discarded and its stderr
    /// copied to `dir/job.log`; the job's address is the first stderr line `{announce}ADDR/`.
    ///
    /// # Errors
    /// The process cannot be started, or the log created.
    pub fn start(mut command: Command, dir: &Path, announce: &'static str) -> Result<Self> {
        let mut child = command
            .arg("--dead-letter")
            .arg(dir.join("dead.jsonl"))
            .arg("--late-output")
            .arg(dir.join("late.jsonl"))
            .arg("--stats-json")
            .arg(dir.join("stats.json"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .context("starting the job")?;
        let stderr = child.stderr.take().context("the job's stderr")?;
        let log = dir.join("job.log");
        let mut file = std::fs::File::create(&log)?;
        let (tx, addr) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
                if let Some(a) = line
                    .strip_prefix(announce)
                    .and_then(|a| a.strip_suffix('/'))
                {
                    let _ = tx.send(a.to_string());
                }
                let _ = writeln!(file, "{line}");
            }
        });
        Ok(JobChild { child, addr, log })
    }

    /// The address the job announced, waiting up to two minutes for it.
    ///
    /// # Errors
    /// The job did not announce one (it failed: its log says why).
    pub fn addr(&self) -> Result<String> {
        self.addr.recv_timeout(START_LIMIT).map_err(|_| {
            Error::Failed(format!("the job did not start; see {}", self.log.display()))
        })
    }

    /// Fails if the job has exited (while the bench was publishing).
    ///
    /// # Errors
    /// The job exited, or its status cannot be read.
    pub fn check_running(&mut self) -> Result<()> {
        match self.child.try_wait()? {
            Some(status) => Err(Error::Failed(format!(
                "the job exited ({status}) while the bench was publishing; see {}",
                self.log.display()
            ))),
            None => Ok(()),
        }
    }
}

/// Stops the job as an operator would, with SIGTERM: it flushes, commits and writes its stats.
///
/// # Errors
/// `kill -TERM` fails.
pub fn terminate(job: &JobChild) -> Result<()> {
    let term = Command::new("kill")
        .args(["-TERM", &job.child.id().to_string()])
        .status()
        .context("running kill -TERM on the job")?;
    if !term.success() {
        return Err(Error::Failed(format!(
            "kill -TERM {} failed ({term})",
            job.child.id()
        )));
    }
    Ok(())
}

/// Waits for the job to exit (on its own, `--exit-on-idle`, or after [`terminate`]) and reads
/// its `--stats-json` at `dir/stats.json`, with the store's flush and write times its log
/// prints at the end (`store flushes: …`, `store writes: …`) as `store_flushes` and
/// `store_writes`.
///
/// # Errors
/// The job failed, or its stats cannot be read.
pub fn finish_job(mut job: JobChild, dir: &Path) -> Result<serde_json::Value> {
    let status = job.child.wait()?;
    if !status.success() {
        return Err(Error::Failed(format!(
            "the job failed ({status}); see {}",
            job.log.display()
        )));
    }
    let stats = std::fs::read(dir.join("stats.json")).context("reading the job's stats")?;
    let mut stats: serde_json::Value =
        serde_json::from_slice(&stats).context("reading the job's stats")?;
    let log = std::fs::read_to_string(&job.log).unwrap_or_default();
    for what in ["flushes", "writes"] {
        let prefix = format!("store {what}: ");
        if let Some(line) = log.lines().find_map(|l| l.strip_prefix(prefix.as_str())) {
            stats[format!("store_{what}")] = line.into();
        }
    }
    Ok(stats)
}
