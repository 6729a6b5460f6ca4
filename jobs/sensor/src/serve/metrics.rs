//! The server's own metrics: requests and latency per endpoint, store errors, as `/metrics`.

use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;

use super::Shared;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    /// The route template (`/api/v1/room/{room}`), never the raw path, so that label values
    /// stay few whatever clients send.
    endpoint: String,
    method: String,
    status: u16,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndpointLabels {
    endpoint: String,
}

type LatencyFamily = Family<EndpointLabels, Histogram, fn() -> Histogram>;

/// The registry and the handles the middleware updates.
#[derive(Debug)]
pub(crate) struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: LatencyFamily,
    store_errors: Counter,
}

fn latency_histogram() -> Histogram {
    // 0.25 ms … 8 s.
    Histogram::new(exponential_buckets(0.000_25, 2.0, 16))
}

impl Metrics {
    pub(crate) fn new() -> Self {
        let mut registry = Registry::with_prefix("hourglass_serve");
        let requests = Family::<RequestLabels, Counter>::default();
        let latency = LatencyFamily::new_with_constructor(latency_histogram);
        let store_errors = Counter::default();
        registry.register(
            "requests",
            "HTTP requests by endpoint, method and status",
            requests.clone(),
        );
        registry.register(
            "request_duration_seconds",
            "Time from request to response head, by endpoint",
            latency.clone(),
        );
        registry.register(
            "store_errors",
            "Requests that failed because the store failed (answered 5xx)",
            store_errors.clone(),
        );
        Metrics {
            registry,
            requests,
            latency,
            store_errors,
        }
    }

    pub(crate) fn store_error(&self) {
        self.store_errors.inc();
    }
}

/// Middleware: counts and times every request.
pub(crate) async fn track(State(st): State<Shared>, req: Request, next: Next) -> Response {
    let endpoint = req
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let method = req.method().as_str().to_string();
    let started = Instant::now();
    let response = next.run(req).await;
    st.metrics
        .latency
        .get_or_create(&EndpointLabels {
            endpoint: endpoint.clone(),
        })
        .observe(started.elapsed().as_secs_f64());
    st.metrics
        .requests
        .get_or_create(&RequestLabels {
            endpoint,
            method,
            status: response.status().as_u16(),
        })
        .inc();
    response
}

/// `GET /metrics`: OpenMetrics text, which Prometheus scrapes natively.
pub(crate) async fn export(State(st): State<Shared>) -> Response {
    let mut text = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut text, &st.metrics.registry) {
        return (
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding metrics failed: {e}"),
        )
            .into_response();
    }
    if let Some(extra) = &st.extra_metrics {
        // The extension's families go before the closing `# EOF`.
        let end = text.rfind("# EOF").unwrap_or(text.len());
        text.insert_str(end, &(extra.0)());
    }
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}
