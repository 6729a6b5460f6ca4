//! The subset of the Prometheus HTTP API that Grafana's built-in Prometheus data source uses, so
//! dashboards need no plugin: `query_range`, `query`, `labels`, `label/{name}/values`,
//! `series`, `metadata` and `status/buildinfo`, by GET or form POST.
//!
//! Queries are vector selectors only: a metric name (the job's metric, `temp` by default) and
//! label matchers (`=`, `!=`, `=~`, `!~`) on `device` and `room`. Series are one per device,
//! labelled `__name__`, `device` and, when the room view knows it, `room`. Functions, operators,
//! aggregations and range vectors answer `400 bad_data` "unsupported PromQL", except constant
//! arithmetic such as `1+1`, which Grafana's "Save & test" sends.
//!
//! Sampling follows Prometheus: the value of a series at evaluation time `t` is its newest
//! reading in `(t - w, t]`, with `w = max(step, lookback_delta)` and `lookback_delta` 5 min
//! unless the request sets it. With `step >= 5m` that is the last reading of each step; with
//! shorter steps a reading is repeated for up to 5 min, as Prometheus does, so sparse sensors
//! draw connected lines. Unlike Prometheus, `series` and `label/…/values` ignore
//! `start`/`end` and list every matching device.

mod eval;
mod handlers;
pub(crate) mod params;
pub(crate) mod promql;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::api::MAX_RANGE_SECS;
use super::ApiError;

pub(crate) use handlers::{buildinfo, label_values, labels, metadata, query, query_range, series};

/// Prometheus' own limit on points per series in a range query.
const MAX_RESOLUTION: f64 = 11_000.0;
/// Most series one query may select.
const MAX_SERIES: usize = 1_000;
/// Prometheus' default lookback, in seconds.
const DEFAULT_LOOKBACK: f64 = 300.0;
/// Longest `lookback_delta`: a day. Each series reads `max(step, lookback_delta)` before
/// `start`, so this bounds the work of one query with the range and step limits.
const MAX_LOOKBACK: f64 = 86_400.0;
/// Longest `step`: the longest range, which then holds one point.
const MAX_STEP: f64 = MAX_RANGE_SECS as f64;

/// An error in Prometheus' shape: `{"status":"error","errorType":…,"error":…}`.
#[derive(Debug)]
pub(crate) struct PromError {
    status: StatusCode,
    error_type: &'static str,
    pub(crate) message: String,
}

fn bad_data(message: impl Into<String>) -> PromError {
    PromError {
        status: StatusCode::BAD_REQUEST,
        error_type: "bad_data",
        message: message.into(),
    }
}

impl From<ApiError> for PromError {
    fn from(e: ApiError) -> Self {
        let error_type = match e.status {
            StatusCode::BAD_REQUEST => "bad_data",
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::NOT_IMPLEMENTED => "unavailable",
            _ => "internal",
        };
        PromError {
            status: e.status,
            error_type,
            message: e.message,
        }
    }
}

impl IntoResponse for PromError {
    fn into_response(self) -> Response {
        (
            self.status,
            Json(json!({ "status": "error", "errorType": self.error_type, "error": self.message })),
        )
            .into_response()
    }
}

fn success(data: Value) -> Json<Value> {
    Json(json!({ "status": "success", "data": data }))
}
