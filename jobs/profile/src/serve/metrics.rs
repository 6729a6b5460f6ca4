//! The profile lines of `hourglass serve`'s `/metrics`: the cache's counters, the store
//! reads' latency, and `user_profile_tag`'s reads per region.
//!
//! - `hourglass_profile_cache_{hits,misses,redis_errors,…}_total` ([`CacheStats`]): the hit
//!   ratio is derived, `hits / (hits + misses)` (in PromQL,
//!   `rate(…hits_total[5m]) / (rate(…hits_total[5m]) + rate(…misses_total[5m]))`); with no
//!   `[redis]` there is no cache and both stay 0.
//! - `hourglass_profile_store_read_duration_seconds{call}`, a histogram of each call the
//!   profile routes make to the store (HBase or the embedded store): `get` (one user's row on
//!   a miss), `multi_get` (a batch's misses, one multi-get), `versions`, `scan` (history and
//!   audience index).
//! - `hourglass_profile_store_region_reads_total{region, start}`: rows of `user_profile_tag`
//!   asked for by gets and multi-gets, per region (its encoded name and start key), counted by
//!   the HBase reader from the region boundaries it caches: the hot-region signal. At most
//!   [`sinks::hbase::MAX_COUNTED_REGIONS`] regions by name, the rest as `region="other"`. The
//!   embedded store has no regions and shows no series of it.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use sinks::table::{Row, ScanSpec, TableReader, TimeRange};
use sinks::Reader;

use crate::cache::CacheStats;
use crate::tables::PROFILE_TABLE;

/// Upper bounds of the latency buckets, seconds: 0.25 ms doubling to 8.2 s (as the server's
/// `request_duration_seconds`), then `+Inf`.
const BOUNDS: [f64; 16] = [
    0.000_25, 0.000_5, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024,
    2.048, 4.096, 8.192,
];

/// The store calls timed, the `call` label.
const CALLS: [&str; 4] = ["get", "multi_get", "versions", "scan"];

/// One latency histogram: counts per bucket (the last one `+Inf`), their sum in nanoseconds.
#[derive(Debug, Default)]
struct Histogram {
    buckets: [AtomicU64; BOUNDS.len() + 1],
    sum_nanos: AtomicU64,
}

impl Histogram {
    fn observe(&self, took: Duration) {
        let secs = took.as_secs_f64();
        let bucket = BOUNDS.partition_point(|&b| b < secs);
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }
}

/// What the profile routes add to `/metrics`, shared by the routes (which time their store
/// calls through [`ServeMetrics::timed`]) and the server's `/metrics` (which calls
/// [`ServeMetrics::exposition`]). Cloning shares it.
#[derive(Debug, Clone)]
pub struct ServeMetrics(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    cache: Arc<CacheStats>,
    /// One histogram per [`CALLS`] entry.
    reads: [Histogram; CALLS.len()],
    /// The store reader, once the routes are made: its region counts.
    store: OnceLock<Reader>,
}

impl ServeMetrics {
    /// Metrics over the cache counters `cache` (those the profile reader counts into).
    pub fn new(cache: Arc<CacheStats>) -> Self {
        ServeMetrics(Arc::new(Inner {
            cache,
            reads: Default::default(),
            store: OnceLock::new(),
        }))
    }

    /// Reads the region counts of `store` from now on (the first store given is kept).
    pub(crate) fn attach(&self, store: &Reader) {
        let _ = self.0.store.set(store.clone());
    }

    /// `store`, its calls timed into these metrics.
    pub(crate) fn timed<'a>(&'a self, store: &'a dyn TableReader) -> Timed<'a> {
        Timed {
            inner: store,
            metrics: self,
        }
    }

    fn time<T>(&self, call: usize, f: impl FnOnce() -> T) -> T {
        let started = Instant::now();
        let out = f();
        self.0.reads[call].observe(started.elapsed());
        out
    }

    /// The profile families as OpenMetrics text lines, without the closing `# EOF`.
    pub fn exposition(&self) -> String {
        let mut text = self.0.cache.exposition();
        let name = "hourglass_profile_store_read_duration_seconds";
        let _ = writeln!(
            text,
            "# HELP {name} Store calls of the profile routes, by call (get, multi_get, versions, \
             scan).\n# TYPE {name} histogram"
        );
        for (call, h) in CALLS.iter().zip(&self.0.reads) {
            let mut cumulative = 0u64;
            for (i, count) in h.buckets.iter().enumerate() {
                cumulative += count.load(Ordering::Relaxed);
                let le = BOUNDS
                    .get(i)
                    .map_or_else(|| "+Inf".to_string(), |b| format!("{b}"));
                let _ = writeln!(
                    text,
                    "{name}_bucket{{call=\"{call}\",le=\"{le}\"}} {cumulative}"
                );
            }
            let sum = Duration::from_nanos(h.sum_nanos.load(Ordering::Relaxed)).as_secs_f64();
            let _ = writeln!(text, "{name}_sum{{call=\"{call}\"}} {sum:?}");
            let _ = writeln!(text, "{name}_count{{call=\"{call}\"}} {cumulative}");
        }
        let name = "hourglass_profile_store_region_reads";
        let _ = writeln!(
            text,
            "# HELP {name} Rows of {PROFILE_TABLE} asked for by gets and multi-gets, per region \
             (encoded name, start key): the hot-region signal.\n# TYPE {name} counter"
        );
        if let Some(store) = self.0.store.get() {
            for r in store
                .region_reads()
                .into_iter()
                .filter(|r| r.table == PROFILE_TABLE)
            {
                let _ = writeln!(
                    text,
                    "{name}_total{{region=\"{}\",start=\"{}\"}} {}",
                    escape(&r.region),
                    escape(&r.start),
                    r.rows
                );
            }
        }
        text
    }
}

/// `text` as an OpenMetrics label value: `\`, `"` and newlines escaped.
fn escape(text: &str) -> String {
    text.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A store whose calls are timed into [`ServeMetrics`].
pub(crate) struct Timed<'a> {
    inner: &'a dyn TableReader,
    metrics: &'a ServeMetrics,
}

impl TableReader for Timed<'_> {
    fn get(&self, table: &str, row: &[u8], time: Option<TimeRange>) -> sinks::Result<Option<Row>> {
        self.metrics.time(0, || self.inner.get(table, row, time))
    }

    fn get_versions(
        &self,
        table: &str,
        row: &[u8],
        time: Option<TimeRange>,
        max_versions: u32,
    ) -> sinks::Result<Option<Row>> {
        self.metrics.time(2, || {
            self.inner.get_versions(table, row, time, max_versions)
        })
    }

    fn get_many(
        &self,
        table: &str,
        rows: &[Vec<u8>],
        time: Option<TimeRange>,
    ) -> sinks::Result<Vec<Option<Row>>> {
        self.metrics
            .time(1, || self.inner.get_many(table, rows, time))
    }

    fn scan(&self, table: &str, spec: &ScanSpec) -> sinks::Result<Vec<Row>> {
        self.metrics.time(3, || self.inner.scan(table, spec))
    }

    fn scan_keys(
        &self,
        table: &str,
        spec: &ScanSpec,
        visit: &mut dyn FnMut(&[u8]),
    ) -> sinks::Result<usize> {
        self.metrics
            .time(3, || self.inner.scan_keys(table, spec, visit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_histogram_counts_each_call_in_its_bucket() {
        let m = ServeMetrics::new(Arc::default());
        m.0.reads[1].observe(Duration::from_micros(300));
        m.0.reads[1].observe(Duration::from_secs(20));
        let text = m.exposition();
        let name = "hourglass_profile_store_read_duration_seconds";
        for line in [
            format!("{name}_bucket{{call=\"multi_get\",le=\"0.00025\"}} 0"),
            format!("{name}_bucket{{call=\"multi_get\",le=\"0.0005\"}} 1"),
            format!("{name}_bucket{{call=\"multi_get\",le=\"8.192\"}} 1"),
            format!("{name}_bucket{{call=\"multi_get\",le=\"+Inf\"}} 2"),
            format!("{name}_count{{call=\"multi_get\"}} 2"),
            format!("{name}_sum{{call=\"multi_get\"}} 20.0003"),
            format!("{name}_count{{call=\"get\"}} 0"),
            "# TYPE hourglass_profile_store_region_reads counter".to_string(),
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in\n{text}");
        }
        // No store attached (or the embedded store): no region series.
        assert!(!text.contains("region_reads_total"), "{text}");
        assert_eq!(escape("a\"b\\c"), "a\\\"b\\\\c");
    }
}
