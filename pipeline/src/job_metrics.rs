//! The job's own `/metrics` (Prometheus text) and `/healthz`, served while `hourglass run` or
//! `replay` runs (`--metrics-listen`).
//!
//! Nothing here touches the hot path: every value is read at scrape time from counters the job
//! keeps anyway ([`Stats`], [`KafkaShared`], the store's [`MetricsSource`]). Consumer lag comes from
//! the high watermarks the status thread already fetches once a second.

use std::borrow::Cow;
use std::fmt;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use crate::control::JobControl;
use crate::source::kafka::KafkaShared;
use crate::stats::{Stats, BATCH_SIZE_BOUNDS};
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, NoLabelSet};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;
use sinks::MetricsSource;

use crate::http_thread::{HttpLimits, HttpThread};
use crate::{Context, Result};

/// The counters a job names itself, served at `/metrics` as `hourglass_job_<name>_total`: its
/// own (the sensor job's narrow rows, the profile job's users flushed), and the engine's
/// [`Stats`] it gives its domain's name (records decoded are the sensor job's readings).
pub trait JobCounters: fmt::Debug + Send + Sync {
    /// `(name, help, value)` of each counter, read at each scrape, with the engine's `stats`.
    fn counters(&self, stats: &Stats) -> Vec<(&'static str, &'static str, u64)>;
}

/// What `/metrics` reports: the job's counters, read at each scrape. The Kafka state and the
/// HBase writers' counters are attached once they exist (the server starts before both, so
/// that a taken port fails the job at once and `/healthz` answers while it waits for the topic).
#[derive(Debug)]
pub struct JobMetrics {
    stats: Arc<Stats>,
    control: Arc<JobControl>,
    /// The job's kinds of refusal, in the order of [`Stats::rejected_by_kind`].
    reject_kinds: &'static [&'static str],
    kafka: OnceLock<Arc<KafkaShared>>,
    writers: OnceLock<Arc<dyn MetricsSource>>,
    /// The job's own counters, if it keeps any.
    counters: OnceLock<Arc<dyn JobCounters>>,
    /// The process index of a cluster's process, a `process` label on every sample.
    process: OnceLock<usize>,
}

impl JobMetrics {
    /// Metrics of a job counting into `stats`, failing through `control`, whose refusals are
    /// of `reject_kinds` ([`crate::source::Refusal::KINDS`]).
    pub fn new(
        stats: Arc<Stats>,
        control: Arc<JobControl>,
        reject_kinds: &'static [&'static str],
    ) -> Self {
        JobMetrics {
            stats,
            control,
            reject_kinds,
            kafka: OnceLock::new(),
            writers: OnceLock::new(),
            counters: OnceLock::new(),
            process: OnceLock::new(),
        }
    }

    /// Labels every sample with `process="I"` (a cluster's process index); before the server
    /// starts.
    pub fn set_process(&self, process: usize) {
        let _ = self.process.set(process);
    }

    /// Adds the Kafka feed's shared state: lag, committed offsets, commits, watermark.
    pub fn attach_kafka(&self, shared: Arc<KafkaShared>) {
        let _ = self.kafka.set(shared);
    }

    /// Adds the store writers' counters ([`sinks::Store::metrics`]: HBase counts its
    /// `retries`).
    pub fn attach_writers(&self, writers: Arc<dyn MetricsSource>) {
        let _ = self.writers.set(writers);
    }

    /// Adds the job's own counters ([`JobCounters`]).
    pub fn attach_counters(&self, counters: Arc<dyn JobCounters>) {
        let _ = self.counters.set(counters);
    }

    fn registry(self: &Arc<Self>) -> Registry {
        let labels = self
            .process
            .get()
            .map(|p| (Cow::Borrowed("process"), Cow::Owned(p.to_string())));
        let mut registry = Registry::with_prefix_and_labels("hourglass", labels.into_iter());
        registry
            .sub_registry_with_prefix("job")
            .register_collector(Box::new(self.clone()));
        registry.register_collector(Box::new(ProduceToDurable(self.clone())));
        registry
    }
}

/// Upper bounds of the produce → durable histogram, milliseconds: fine below the live target
/// (1 s), coarse up to a catch-up's minutes.
const DELAY_BOUNDS_MS: [u64; 14] = [
    25, 50, 100, 250, 500, 750, 1_000, 2_500, 5_000, 10_000, 30_000, 60_000, 300_000, 600_000,
];

/// `hourglass_produce_to_durable_seconds`: named without the `job` part, as the issue's
/// dashboards query it.
#[derive(Debug)]
struct ProduceToDurable(Arc<JobMetrics>);

impl Collector for ProduceToDurable {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> fmt::Result {
        let Some(kafka) = self.0.kafka.get() else {
            return Ok(());
        };
        let snap = kafka.delays.snapshot(&DELAY_BOUNDS_MS);
        enc.encode_descriptor(
            "produce_to_durable_seconds",
            "Kafka record timestamp to the moment its record's row is durable (its writer's \
             flush returned), per record of the job's record table; beyond 10 min counted as 10 \
             min",
            None,
            MetricType::Histogram,
        )?
        .encode_histogram::<NoLabelSet>(snap.sum_secs, snap.count, &snap.buckets, None)
    }
}

fn counter(enc: &mut DescriptorEncoder<'_>, name: &str, help: &str, value: u64) -> fmt::Result {
    ConstCounter::new(value).encode(enc.encode_descriptor(name, help, None, MetricType::Counter)?)
}

fn gauge<T>(enc: &mut DescriptorEncoder<'_>, name: &str, help: &str, value: T) -> fmt::Result
where
    ConstGauge<T>: EncodeMetric,
{
    ConstGauge::new(value).encode(enc.encode_descriptor(name, help, None, MetricType::Gauge)?)
}

/// A gauge with one sample per partition that has a value.
fn partition_gauge(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    values: &[Option<i64>],
) -> fmt::Result {
    let mut family = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (partition, value) in values.iter().enumerate() {
        if let Some(v) = value {
            ConstGauge::new(*v).encode(family.encode_family(&[("partition", partition)])?)?;
        }
    }
    Ok(())
}

impl Collector for JobMetrics {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> fmt::Result {
        use std::sync::atomic::Ordering::Relaxed;
        let s = &self.stats;
        counter(
            &mut enc,
            "records_read",
            "Records read from the source, decoded or rejected (rate() gives records/s)",
            s.read.load(Relaxed),
        )?;
        let mut rejected = enc.encode_descriptor(
            "rejected",
            "Records rejected to the dead-letter output, by reason kind (as the dead letters' kind)",
            None,
            MetricType::Counter,
        )?;
        for (kind, n) in self.reject_kinds.iter().zip(&s.rejected_by_kind) {
            ConstCounter::new(n.load(Relaxed))
                .encode(rejected.encode_family(&[("reason", *kind)])?)?;
        }
        let batches = s.sink_batches.snapshot();
        let buckets: Vec<(f64, u64)> = BATCH_SIZE_BOUNDS
            .iter()
            .map(|&b| b as f64)
            .chain([f64::INFINITY])
            .zip(batches.buckets)
            .collect();
        enc.encode_descriptor(
            "sink_batch_rows",
            "Rows (mutations) made durable per flush of a worker's table writer; the backend may \
             split a flush (embedded: commits of at most 4096, HBase: calls of at most 1000 rows)",
            None,
            MetricType::Histogram,
        )?
        .encode_histogram::<NoLabelSet>(
            batches.sum as f64,
            batches.count,
            &buckets,
            None,
        )?;
        counter(
            &mut enc,
            "sink_retries",
            "Table writes retried after a retriable failure (HBase; the embedded store does not \
             retry)",
            self.writers
                .get()
                .and_then(|w| w.stat("retries"))
                .unwrap_or(0),
        )?;
        gauge(
            &mut enc,
            "failed",
            "1 once the job has failed and is stopping (see its stderr), else 0",
            i64::from(self.control.error().is_some()),
        )?;
        if let Some(counters) = self.counters.get() {
            for (name, help, value) in counters.counters(s) {
                counter(&mut enc, name, help, value)?;
            }
        }
        let Some(kafka) = self.kafka.get() else {
            return Ok(());
        };
        counter(
            &mut enc,
            "offset_commits",
            "Offset commits to the consumer group that succeeded (one per worker and commit \
             interval while offsets move)",
            kafka.commits(),
        )?;
        partition_gauge(
            &mut enc,
            "committed_offset",
            "Next offset committed to the consumer group, per partition: every record before it \
             is durable in the job's stores (absent until a first commit or a committed offset at \
             start)",
            &kafka.committed(),
        )?;
        partition_gauge(
            &mut enc,
            "consumer_lag",
            "Records on the brokers not read yet, per partition: high watermark - position, as \
             of the last offset refresh (every second; absent until the first)",
            &kafka.partition_lags(),
        )?;
        // 0: no partition has had a reading yet; absent rather than 55 years of delay.
        if let Some(watermark) = kafka.watermark().filter(|&w| w > 0) {
            let watermark = watermark as i64;
            gauge(
                &mut enc,
                "watermark_seconds",
                "Event-time watermark, epoch seconds: newest event time - watermark_bound_secs \
                 per partition, minimum over partitions (idle ones excepted) and workers (a job \
                 without a window moves it past the newest event time when it has nothing to \
                 read)",
                watermark,
            )?;
            gauge(
                &mut enc,
                "watermark_delay_seconds",
                "Now - watermark, seconds (HOURGLASS_NOW fixes now): how far event time lags \
                 behind the clock",
                crate::time::now_ms() / 1000 - watermark,
            )?;
        }
        Ok(())
    }
}

/// The running metrics server; dropping it stops it.
#[derive(Debug)]
pub struct MetricsServer(HttpThread);

impl MetricsServer {
    /// Binds `addr` (at once, so that a taken port fails before the job starts) and serves
    /// `/metrics` and `/healthz` from a thread of its own.
    ///
    /// # Errors
    /// The address cannot be bound (taken, not local, no permission).
    pub fn start(addr: &str, metrics: Arc<JobMetrics>, limits: &HttpLimits) -> Result<Self> {
        let listener = std::net::TcpListener::bind(addr).with_context(|| {
            format!(
                "cannot serve metrics on {addr}: pick a free port with --metrics-listen HOST:PORT \
                 or metrics_listen in the config (port 0 picks one)"
            )
        })?;
        let app = axum::Router::new()
            .route("/metrics", get(export))
            .route("/healthz", get(healthz))
            .with_state(Arc::new(Served {
                registry: metrics.registry(),
                metrics,
            }));
        Ok(MetricsServer(HttpThread::start(
            listener, app, limits, "metrics", 1,
        )?))
    }

    /// The address it listens on (with the port chosen for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.0.addr()
    }
}

#[derive(Debug)]
struct Served {
    registry: Registry,
    metrics: Arc<JobMetrics>,
}

/// `GET /metrics`: Prometheus text format 0.0.4.
async fn export(State(st): State<Arc<Served>>) -> Response {
    let mut text = String::new();
    if let Err(e) = prometheus_client::encoding::prometheus_text::encode(&mut text, &st.registry) {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding metrics failed: {e}"),
        )
            .into_response();
    }
    (
        [(
            header::CONTENT_TYPE,
            prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
        )],
        text,
    )
        .into_response()
}

/// `GET /healthz`: `ok`, or 503 with the error once the job has failed.
async fn healthz(State(st): State<Arc<Served>>) -> Response {
    match st.metrics.control.error() {
        None => (StatusCode::OK, "ok\n").into_response(),
        Some(e) => (StatusCode::SERVICE_UNAVAILABLE, format!("failed: {e}\n")).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sensor job's kinds of refusal, `invalid_json` at index 2.
    const KINDS: &[&str] = &crate::source::job_kinds::<7>(&["future"]);

    #[test]
    fn produce_to_durable_is_a_histogram_of_every_recorded_delay() {
        let metrics = Arc::new(JobMetrics::new(Arc::default(), Arc::default(), KINDS));
        let kafka = Arc::new(KafkaShared::new(1, 1));
        kafka.delays.record([20, 80, 80, 400, 1_500, 90_000]);
        metrics.attach_kafka(kafka);
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &metrics.registry())
            .unwrap();
        for line in [
            "# TYPE hourglass_produce_to_durable_seconds histogram",
            "hourglass_produce_to_durable_seconds_bucket{le=\"0.025\"} 1",
            "hourglass_produce_to_durable_seconds_bucket{le=\"0.1\"} 3",
            "hourglass_produce_to_durable_seconds_bucket{le=\"0.5\"} 4",
            "hourglass_produce_to_durable_seconds_bucket{le=\"1\"} 4",
            "hourglass_produce_to_durable_seconds_bucket{le=\"2.5\"} 5",
            "hourglass_produce_to_durable_seconds_bucket{le=\"60\"} 5",
            "hourglass_produce_to_durable_seconds_bucket{le=\"300\"} 6",
            "hourglass_produce_to_durable_seconds_bucket{le=\"+Inf\"} 6",
            "hourglass_produce_to_durable_seconds_count 6",
            "hourglass_produce_to_durable_seconds_sum 92.08",
            // The job's own metrics keep their names.
            "hourglass_job_records_read_total 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} not in\n{text}");
        }
    }

    #[test]
    fn every_metric_has_help_and_type() {
        let stats = Arc::new(Stats::default());
        stats.read.store(7, std::sync::atomic::Ordering::Relaxed);
        stats.ok.store(5, std::sync::atomic::Ordering::Relaxed);
        stats.rejected_by_kind[2].store(2, std::sync::atomic::Ordering::Relaxed);
        stats.sink_batches.observe(3);
        stats.sink_batches.observe(5000);
        let metrics = Arc::new(JobMetrics::new(stats, Arc::default(), KINDS));
        metrics.attach_kafka(Arc::new(KafkaShared::new(2, 1)));
        #[derive(Debug)]
        struct Flushes;
        impl JobCounters for Flushes {
            fn counters(&self, stats: &Stats) -> Vec<(&'static str, &'static str, u64)> {
                vec![
                    ("flushes", "Flushes of a job's own operator", 4),
                    (
                        "things_decoded",
                        "Records decoded into things",
                        stats.ok.load(std::sync::atomic::Ordering::Relaxed),
                    ),
                ]
            }
        }
        metrics.attach_counters(Arc::new(Flushes));
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &metrics.registry())
            .unwrap();
        for line in [
            "# TYPE hourglass_job_flushes_total counter",
            "hourglass_job_flushes_total 4",
            "hourglass_job_things_decoded_total 5",
            "# TYPE hourglass_job_records_read_total counter",
            "hourglass_job_records_read_total 7",
            "hourglass_job_rejected_total{reason=\"invalid_json\"} 2",
            "hourglass_job_rejected_total{reason=\"bad_field\"} 0",
            "# TYPE hourglass_job_sink_batch_rows histogram",
            "hourglass_job_sink_batch_rows_bucket{le=\"4\"} 1",
            "hourglass_job_sink_batch_rows_bucket{le=\"4096\"} 1",
            "hourglass_job_sink_batch_rows_bucket{le=\"+Inf\"} 2",
            "hourglass_job_sink_batch_rows_count 2",
            "hourglass_job_sink_batch_rows_sum 5003.0",
            "hourglass_job_offset_commits_total 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} not in\n{text}");
        }
        // No delay recorded yet: an empty histogram.
        assert!(
            text.lines()
                .any(|l| l == "hourglass_produce_to_durable_seconds_count 0"),
            "{text}"
        );
        // Nothing known yet: no lag, no committed offset, no watermark.
        assert!(!text.contains("hourglass_job_consumer_lag{"), "{text}");
        assert!(!text.contains("hourglass_job_watermark_seconds "), "{text}");
    }

    /// The engine's metrics speak of records, not of one job's domain: a job names its own
    /// counters ([`JobCounters`]), so a job without readings, rooms or devices shows none.
    #[test]
    fn the_engine_names_no_domain() {
        let metrics = Arc::new(JobMetrics::new(Arc::default(), Arc::default(), KINDS));
        metrics.attach_kafka(Arc::new(KafkaShared::new(1, 1)));
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &metrics.registry())
            .unwrap();
        for word in [
            "reading", "device", "narrow", "wide", "room", "late", "repeated", "expired",
        ] {
            assert!(
                !text.to_lowercase().contains(word),
                "{word:?} in the engine's metrics:\n{text}"
            );
        }
    }

    #[test]
    fn a_cluster_process_labels_every_sample() {
        let metrics = Arc::new(JobMetrics::new(Arc::default(), Arc::default(), KINDS));
        metrics.set_process(1);
        let mut text = String::new();
        prometheus_client::encoding::prometheus_text::encode(&mut text, &metrics.registry())
            .unwrap();
        assert!(
            text.lines()
                .any(|l| l == "hourglass_job_records_read_total{process=\"1\"} 0"),
            "{text}"
        );
        assert!(
            text.lines()
                .filter(|l| !l.starts_with('#'))
                .all(|l| l.contains("process=\"1\"")),
            "{text}"
        );
    }
}
