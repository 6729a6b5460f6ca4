//! The end-of-run report: the headline and the lines about the side outputs on stderr, and the
//! `--stats-json` document.

use std::fmt::Debug;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;

use crate::stats::{Stats, Summary};
use serde::Serialize;
use sinks::dead_letter::DeadLetters;

/// A job's end-of-run report; `--stats-json` writes its serialisation.
pub trait Report: Serialize + Debug {
    /// The counters every job keeps.
    fn counters(&self) -> &Summary;

    /// The one line that says what the job did; `location` is where the tables are.
    fn headline(&self, location: &str) -> String;

    /// Appended to the warning about readings past the TTL: what to do about them.
    fn expired_advice(&self) -> &'static str {
        ""
    }

    /// What to say about the dead-letter file at `path` (written if `Some`).
    fn dead_letters(&self, path: Option<&Path>, registry_rejected: u64) -> Vec<String>;
}

/// The lines printed before the headline: readings past the TTL, dead letters, late readings.
pub(super) fn footer(report: &impl Report, stats: &Stats, side: &DeadLetters) -> Vec<String> {
    let mut lines = Vec::new();
    let expired = stats.expired.load(Ordering::Relaxed);
    if expired > 0 {
        lines.push(format!(
            "warning: {expired} readings are older than the tables' 90-day TTL and are invisible \
             to queries{}",
            report.expired_advice()
        ));
    }
    lines.extend(report.dead_letters(
        side.rejected_path(),
        stats.registry_rejected.load(Ordering::Relaxed),
    ));
    if let Some(path) = side.late_path() {
        lines.push(format!(
            "{} readings beyond the allowed lateness written to {}",
            report.counters().late_dropped,
            path.display()
        ));
    }
    lines
}

/// A replay's report: the counters alone.
impl Report for Summary {
    fn counters(&self) -> &Summary {
        self
    }

    fn headline(&self, location: &str) -> String {
        format!(
            "replayed {} lines in {:.1}s ({:.0} readings/s): {} ok, {} rejected ({} of them \
             future), {} late beyond lateness; wrote {} narrow rows and {} wide cells to {}",
            self.read,
            self.elapsed_s,
            self.readings_per_s,
            self.ok,
            self.rejected,
            self.future,
            self.late_dropped,
            self.narrow_rows,
            self.wide_cells,
            location
        )
    }

    fn expired_advice(&self) -> &'static str {
        "; replay with --rebase-time to move the recording to the current hour"
    }

    fn dead_letters(&self, path: Option<&Path>, registry_rejected: u64) -> Vec<String> {
        let mut lines = Vec::new();
        if let Some(path) = path {
            lines.push(format!(
                "{} rejected lines written to {}",
                self.rejected,
                path.display()
            ));
        }
        if registry_rejected > 0 {
            lines.push(format!(
                "{registry_rejected} refused registry topic records in the dead-letter file"
            ));
        }
        lines
    }
}

/// The end-of-run summary of `hourglass run`: the replay's counters plus what only a Kafka job
/// measures.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    /// Counters shared with `hourglass replay`.
    #[serde(flatten)]
    pub counters: Summary,
    /// Seconds between the first and the last record read.
    pub input_span_s: f64,
    /// Records read per second over that span.
    pub consume_per_s: f64,
    /// Narrow rows whose produce → durable delay was measured.
    pub delay_samples: u64,
    /// Median delay from produce (record timestamp) to durable in the narrow table, ms.
    pub delay_p50_ms: Option<u64>,
    /// 99th percentile of that delay, ms.
    pub delay_p99_ms: Option<u64>,
    /// Largest measured delay, ms (capped at 10 min).
    pub delay_max_ms: Option<u64>,
    /// Registry topic records refused (bad key or value), in the dead-letter file.
    pub registry_rejected: u64,
    /// Records re-read after a restart and skipped: the previous run had stored them (its dead
    /// letters, and its readings of hours it had closed).
    pub resume_skipped: u64,
    /// The job's configuration file, which the headline names.
    #[serde(skip)]
    pub config: PathBuf,
}

impl Report for RunSummary {
    fn counters(&self) -> &Summary {
        &self.counters
    }

    fn headline(&self, _location: &str) -> String {
        let c = &self.counters;
        let delays = match (self.delay_p50_ms, self.delay_p99_ms) {
            (Some(p50), Some(p99)) => {
                format!("; produce → narrow table delay p50 {p50} ms, p99 {p99} ms")
            }
            _ => String::new(),
        };
        format!(
            "run ({}) stopped after {:.1}s: read {} records ({:.0}/s while consuming): {} ok, {} \
             rejected ({} of them future), {} late beyond lateness; wrote {} narrow rows and {} \
             wide cells{delays}",
            self.config.display(),
            c.elapsed_s,
            c.read,
            self.consume_per_s,
            c.ok,
            c.rejected,
            c.future,
            c.late_dropped,
            c.narrow_rows,
            c.wide_cells,
        )
    }

    fn dead_letters(&self, path: Option<&Path>, _registry_rejected: u64) -> Vec<String> {
        path.map(|path| {
            format!(
                "{} rejected records and {} refused registry records written to {}",
                self.counters.rejected,
                self.registry_rejected,
                path.display()
            )
        })
        .into_iter()
        .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters() -> Summary {
        Summary {
            read: 10,
            ok: 7,
            rejected: 3,
            future: 1,
            late_dropped: 2,
            repeated: 1,
            narrow_rows: 7,
            wide_cells: 5,
            room_rows: 4,
            elapsed_s: 2.0,
            readings_per_s: 5.0,
        }
    }

    /// Scripts and tests parse these lines: they must not drift while the code moves.
    #[test]
    fn headlines_read_as_before() {
        assert_eq!(
            counters().headline("store dir"),
            "replayed 10 lines in 2.0s (5 readings/s): 7 ok, 3 rejected (1 of them future), 2 \
             late beyond lateness; wrote 7 narrow rows and 5 wide cells to store dir"
        );
        let run = RunSummary {
            counters: counters(),
            input_span_s: 1.0,
            consume_per_s: 10.0,
            delay_samples: 7,
            delay_p50_ms: Some(12),
            delay_p99_ms: Some(40),
            delay_max_ms: Some(41),
            registry_rejected: 4,
            resume_skipped: 0,
            config: "job.toml".into(),
        };
        assert_eq!(
            run.headline("ignored"),
            "run (job.toml) stopped after 2.0s: read 10 records (10/s while consuming): 7 ok, 3 \
             rejected (1 of them future), 2 late beyond lateness; wrote 7 narrow rows and 5 wide \
             cells; produce → narrow table delay p50 12 ms, p99 40 ms"
        );
        assert_eq!(
            run.dead_letters(Some(Path::new("dead.jsonl")), 4),
            ["3 rejected records and 4 refused registry records written to dead.jsonl"]
        );
    }

    /// `run --stats-json` keeps the replay's keys at the top level, and not the config path.
    #[test]
    fn run_stats_json_is_flat() {
        let run = RunSummary {
            counters: counters(),
            input_span_s: 1.0,
            consume_per_s: 10.0,
            delay_samples: 0,
            delay_p50_ms: None,
            delay_p99_ms: None,
            delay_max_ms: None,
            registry_rejected: 0,
            resume_skipped: 0,
            config: "job.toml".into(),
        };
        let json = serde_json::to_value(&run).unwrap();
        assert_eq!(json["read"], 10);
        assert_eq!(json["resume_skipped"], 0);
        assert!(json.get("config").is_none(), "{json}");
        assert!(json.get("counters").is_none(), "{json}");
    }
}
