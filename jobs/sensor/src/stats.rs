//! The sensor job's own counters, beside the engine's [`Stats`], and its end-of-run reports
//! (`--stats-json` of `hourglass replay` and `hourglass run`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use pipeline::driver::Report;
use pipeline::job_metrics::JobCounters;
use pipeline::stats::{Stats, Summary};
use serde::Serialize;

/// What the sensor job counts that the engine's [`Stats`] does not: the rows its tables got,
/// the repeated readings and the refused registry records. Shared by the workers; relaxed
/// atomics.
#[derive(Debug, Default)]
pub struct SensorStats {
    /// Readings of a second their hour already had (a resend or a correction): the narrow table
    /// keeps the last, and the hour's wide row is marked so that reads take the narrow table.
    pub repeated: AtomicU64,
    /// Narrow rows written.
    pub narrow_rows: AtomicU64,
    /// Point cells of wide rows written.
    pub wide_cells: AtomicU64,
    /// Room view rows written (puts and deletes of `ts_room_latest`).
    pub room_rows: AtomicU64,
    /// Registry topic records refused (bad key or value) and sent to the dead-letter output.
    pub registry_rejected: AtomicU64,
}

/// The sensor job's metrics, `(name, help)`, in the order [`SensorStats::counters`] gives their
/// values.
const METRICS: [(&str, &str); 7] = [
    ("readings_decoded", "Records decoded into readings"),
    (
        "registry_rejected",
        "Device registry topic records refused (bad key or value) and sent to the dead-letter \
         output",
    ),
    (
        "late_dropped",
        "Readings beyond the allowed lateness: stored in the narrow table and the late-data \
         output, not in their hour's wide row",
    ),
    (
        "repeated",
        "Readings of a second their hour already had (a resend or a correction): the narrow \
         table keeps the last; the hour's wide row is marked so that reads take the narrow table",
    ),
    (
        "expired",
        "Readings already older than the tables' 90-day TTL when read (invisible to queries)",
    ),
    (
        "narrow_rows_written",
        "Narrow rows (ts_metric, one per reading) handed to the table writers",
    ),
    (
        "wide_cells_written",
        "Point cells of hourly wide rows (ts_metric_hourly) handed to the table writers, summary \
         cells not counted",
    ),
];

/// Served at `/metrics` as `hourglass_job_<name>_total`, the names dashboards and the benches
/// query.
impl JobCounters for SensorStats {
    fn counters(&self, stats: &Stats) -> Vec<(&'static str, &'static str, u64)> {
        let values = [
            &stats.ok,
            &self.registry_rejected,
            &stats.late_dropped,
            &self.repeated,
            &stats.expired,
            &self.narrow_rows,
            &self.wide_cells,
        ];
        METRICS
            .iter()
            .zip(values)
            .map(|(&(name, help), value)| (name, help, value.load(Ordering::Relaxed)))
            .collect()
    }
}

/// The summary of `hourglass replay`; `--stats-json` writes exactly these keys.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplaySummary {
    /// Input lines read.
    pub read: u64,
    /// Lines decoded into readings.
    pub ok: u64,
    /// Lines rejected to the dead-letter output.
    pub rejected: u64,
    /// Of `rejected`, the readings too far ahead of the wall clock or the watermark (kind
    /// `future`): a device clock running ahead.
    pub future: u64,
    /// Readings beyond the allowed lateness.
    pub late_dropped: u64,
    /// Readings of a second their hour already had (a resend or a correction; the last wins).
    pub repeated: u64,
    /// Narrow rows written.
    pub narrow_rows: u64,
    /// Wide cells written.
    pub wide_cells: u64,
    /// Room view rows written (puts and deletes of `ts_room_latest`).
    pub room_rows: u64,
    /// Wall-clock duration of the run, seconds.
    pub elapsed_s: f64,
    /// Lines read per second of wall-clock time.
    pub readings_per_s: f64,
    /// Readings older than the tables' TTL when read (a warning, not a key).
    #[serde(skip)]
    pub expired: u64,
    /// Registry topic records refused (in the dead-letter file).
    #[serde(skip)]
    pub registry_rejected: u64,
}

impl ReplaySummary {
    /// The engine's `counters` with the sensor job's `sensor`.
    pub fn new(counters: &Summary, sensor: &SensorStats) -> Self {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        ReplaySummary {
            read: counters.read,
            ok: counters.ok,
            rejected: counters.rejected,
            future: counters.future,
            late_dropped: counters.late_dropped,
            repeated: get(&sensor.repeated),
            narrow_rows: get(&sensor.narrow_rows),
            wide_cells: get(&sensor.wide_cells),
            room_rows: get(&sensor.room_rows),
            elapsed_s: counters.elapsed_s,
            readings_per_s: counters.read_per_s(),
            expired: counters.expired,
            registry_rejected: get(&sensor.registry_rejected),
        }
    }

    /// The lines printed before the headline: readings past the TTL (with `advice`), the
    /// side outputs (`rejected` as `dead_letters` says, the late readings' file).
    fn footer_lines(
        &self,
        advice: &str,
        dead_letters: Vec<String>,
        late: Option<&Path>,
    ) -> Vec<String> {
        let mut lines = Vec::new();
        if self.expired > 0 {
            lines.push(format!(
                "warning: {} readings are older than the tables' 90-day TTL and are invisible \
                 to queries{advice}",
                self.expired
            ));
        }
        lines.extend(dead_letters);
        if let Some(path) = late {
            lines.push(format!(
                "{} readings beyond the allowed lateness written to {}",
                self.late_dropped,
                path.display()
            ));
        }
        lines
    }
}

/// A replay's report: the counters alone.
impl Report for ReplaySummary {
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

    fn footer(&self, rejected: Option<&Path>, late: Option<&Path>) -> Vec<String> {
        let mut dead = Vec::new();
        if let Some(path) = rejected {
            dead.push(format!(
                "{} rejected lines written to {}",
                self.rejected,
                path.display()
            ));
        }
        if self.registry_rejected > 0 {
            dead.push(format!(
                "{} refused registry topic records in the dead-letter file",
                self.registry_rejected
            ));
        }
        self.footer_lines(
            "; replay with --rebase-time to move the recording to the current hour",
            dead,
            late,
        )
    }
}

/// The end-of-run summary of `hourglass run`: the replay's counters plus what only a Kafka job
/// measures.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    /// Counters shared with `hourglass replay`.
    #[serde(flatten)]
    pub counters: ReplaySummary,
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

    fn footer(&self, rejected: Option<&Path>, late: Option<&Path>) -> Vec<String> {
        let dead = rejected
            .map(|path| {
                format!(
                    "{} rejected records and {} refused registry records written to {}",
                    self.counters.rejected,
                    self.registry_rejected,
                    path.display()
                )
            })
            .into_iter()
            .collect();
        self.counters.footer_lines("", dead, late)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counters() -> ReplaySummary {
        ReplaySummary {
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
            expired: 0,
            registry_rejected: 4,
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
            run.footer(Some(Path::new("dead.jsonl")), None),
            ["3 rejected records and 4 refused registry records written to dead.jsonl"]
        );
    }

    /// The keys `--stats-json` wrote before the engine's counters became generic, which tests
    /// and the benches read, and no other.
    #[test]
    fn stats_json_keys_are_kept() {
        let json = serde_json::to_value(counters()).unwrap();
        let keys: Vec<&str> = json
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut want = [
            "read",
            "ok",
            "rejected",
            "future",
            "late_dropped",
            "repeated",
            "narrow_rows",
            "wide_cells",
            "room_rows",
            "elapsed_s",
            "readings_per_s",
        ];
        want.sort_unstable();
        let mut keys = keys;
        keys.sort_unstable();
        assert_eq!(keys, want);
        let summary = Summary {
            read: 10,
            ok: 7,
            rejected: 3,
            future: 1,
            late_dropped: 2,
            expired: 0,
            elapsed_s: 2.0,
        };
        let stats = SensorStats::default();
        stats.narrow_rows.store(7, Ordering::Relaxed);
        stats.wide_cells.store(5, Ordering::Relaxed);
        stats.room_rows.store(4, Ordering::Relaxed);
        stats.repeated.store(1, Ordering::Relaxed);
        stats.registry_rejected.store(4, Ordering::Relaxed);
        assert_eq!(ReplaySummary::new(&summary, &stats), counters());
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
        assert_eq!(json["readings_per_s"], 5.0);
        assert_eq!(json["resume_skipped"], 0);
        assert!(json.get("config").is_none(), "{json}");
        assert!(json.get("counters").is_none(), "{json}");
    }

    /// The sensor job's metrics keep their names.
    #[test]
    fn metric_names_are_kept() {
        let names: Vec<&str> = SensorStats::default()
            .counters(&Stats::default())
            .into_iter()
            .map(|(name, _, _)| name)
            .collect();
        assert_eq!(
            names,
            [
                "readings_decoded",
                "registry_rejected",
                "late_dropped",
                "repeated",
                "expired",
                "narrow_rows_written",
                "wide_cells_written"
            ]
        );
    }
}
