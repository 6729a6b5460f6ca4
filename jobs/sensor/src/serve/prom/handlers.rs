//! The HTTP handlers, one per endpoint, and the JSON they answer.

use std::collections::BTreeSet;

use crate::reading::format_value;
use axum::extract::{Path, State};
use axum::Json;
use serde_json::{json, Value};

use super::eval::{fetch, resolve, resolve_all, sample, ts_json};
use super::params::{check_duration, PromParams};
use super::promql::{parse_query, Expr, Selector};
use super::{
    bad_data, success, PromError, DEFAULT_LOOKBACK, MAX_LOOKBACK, MAX_RESOLUTION, MAX_STEP,
};
use crate::serve::api::{all_devices, check_range, room_map};
use crate::serve::{blocking, Shared, StoreResult};

/// `/api/v1/query_range?query=&start=&end=&step=[&lookback_delta=]`: a matrix.
pub(crate) async fn query_range(
    State(st): State<Shared>,
    params: PromParams,
) -> Result<Json<Value>, PromError> {
    let expr = parse_query(params.required("query")?)?;
    let start = params
        .time("start")?
        .ok_or_else(|| bad_data("missing parameter `start`"))?;
    let end = params
        .time("end")?
        .ok_or_else(|| bad_data("missing parameter `end`"))?;
    let step = params
        .duration("step")?
        .ok_or_else(|| bad_data("missing parameter `step`"))?;
    let lookback = params
        .duration("lookback_delta")?
        .unwrap_or(DEFAULT_LOOKBACK);
    if end < start {
        return Err(bad_data("end timestamp must not be before start time"));
    }
    if step <= 0.0 {
        return Err(bad_data(
            "zero or negative query resolution step widths are not accepted. Try a positive integer",
        ));
    }
    let step = check_duration(step, "step", MAX_STEP)?;
    if (end - start) / step > MAX_RESOLUTION {
        return Err(bad_data(
            "exceeded maximum resolution of 11,000 points per timeseries. Try decreasing the query resolution (?step=XX)",
        ));
    }
    let lookback = check_duration(lookback, "lookback_delta", MAX_LOOKBACK)?;
    // The same limit as /api/v1/curve, on the range actually read.
    check_range(start.floor() as i64, end.floor() as i64 + 1).map_err(bad_data)?;
    let window = step.max(lookback);
    let sel = match expr {
        Expr::Scalar(v) => {
            let values: Vec<Value> = sample(&[(i64::MIN, v)], start, end, step, f64::INFINITY)
                .into_iter()
                .map(|(t, v)| json!([ts_json(t), format_value(v)]))
                .collect();
            return Ok(success(json!({
                "resultType": "matrix",
                "result": [{ "metric": {}, "values": values }],
            })));
        }
        Expr::Selector(sel) => sel,
    };
    let result = blocking(&st, move |st| {
        let mut result = Vec::new();
        for s in resolve(st, &sel)? {
            let points = fetch(st, &s.device, start, end, window)?;
            let values: Vec<Value> = sample(&points, start, end, step, window)
                .into_iter()
                .map(|(t, v)| json!([ts_json(t), format_value(v)]))
                .collect();
            if !values.is_empty() {
                result.push(json!({ "metric": s.labels(&st.metric), "values": values }));
            }
        }
        Ok(result)
    })
    .await?;
    Ok(success(json!({ "resultType": "matrix", "result": result })))
}

/// `/api/v1/query?query=[&time=][&lookback_delta=]`: a vector (or a scalar for constants).
pub(crate) async fn query(
    State(st): State<Shared>,
    params: PromParams,
) -> Result<Json<Value>, PromError> {
    let expr = parse_query(params.required("query")?)?;
    let now = pipeline::time::now_ms() as f64 / 1000.0;
    let t = params.time("time")?.unwrap_or(now);
    let lookback = check_duration(
        params
            .duration("lookback_delta")?
            .unwrap_or(DEFAULT_LOOKBACK),
        "lookback_delta",
        MAX_LOOKBACK,
    )?;
    let sel = match expr {
        Expr::Scalar(v) => {
            return Ok(success(
                json!({ "resultType": "scalar", "result": [ts_json(t), format_value(v)] }),
            ));
        }
        Expr::Selector(sel) => sel,
    };
    let result = blocking(&st, move |st| {
        let mut result = Vec::new();
        for s in resolve(st, &sel)? {
            let points = fetch(st, &s.device, t, t, lookback)?;
            if let Some((t, v)) = sample(&points, t, t, 1.0, lookback).pop() {
                result.push(json!({
                    "metric": s.labels(&st.metric),
                    "value": [ts_json(t), format_value(v)],
                }));
            }
        }
        Ok(result)
    })
    .await?;
    Ok(success(json!({ "resultType": "vector", "result": result })))
}

/// Parses every `match[]` selector.
fn selectors(params: &PromParams) -> Result<Vec<Selector>, PromError> {
    params
        .matches()
        .into_iter()
        .map(|q| match parse_query(q)? {
            Expr::Selector(s) => Ok(s),
            Expr::Scalar(_) => Err(bad_data(format!("match[] {q:?} is not a series selector"))),
        })
        .collect()
}

/// `/api/v1/labels[?match[]=]`: the label names.
pub(crate) async fn labels(
    State(st): State<Shared>,
    params: PromParams,
) -> Result<Json<Value>, PromError> {
    // Validate selectors even though every series has the same labels.
    selectors(&params)?;
    let mut names = vec!["__name__", "device"];
    if st.room_table {
        names.push("room");
    }
    Ok(success(json!(names)))
}

/// `/api/v1/label/{name}/values[?match[]=]`: a label's values, ascending.
pub(crate) async fn label_values(
    State(st): State<Shared>,
    Path(name): Path<String>,
    params: PromParams,
) -> Result<Json<Value>, PromError> {
    let sels = selectors(&params)?;
    let values = blocking(&st, move |st| {
        let values: BTreeSet<String> = match name.as_str() {
            "__name__" => BTreeSet::from([st.metric.clone()]),
            "device" if sels.is_empty() => all_devices(st).store()?.iter().cloned().collect(),
            "device" => resolve_all(st, &sels)?
                .into_iter()
                .map(|s| s.device)
                .collect(),
            "room" if sels.is_empty() => match room_map(st).store()? {
                Some(map) => map.values().cloned().collect(),
                None => BTreeSet::new(),
            },
            "room" => resolve_all(st, &sels)?
                .into_iter()
                .filter_map(|s| s.room)
                .collect(),
            _ => BTreeSet::new(),
        };
        Ok(values)
    })
    .await?;
    Ok(success(json!(values)))
}

/// `/api/v1/series?match[]=…`: the label sets of the matching series.
pub(crate) async fn series(
    State(st): State<Shared>,
    params: PromParams,
) -> Result<Json<Value>, PromError> {
    let sels = selectors(&params)?;
    if sels.is_empty() {
        return Err(bad_data("no match[] parameter provided"));
    }
    let series = blocking(&st, move |st| {
        Ok(resolve_all(st, &sels)?
            .iter()
            .map(|s| s.labels(&st.metric))
            .collect::<Vec<_>>())
    })
    .await?;
    Ok(success(json!(series)))
}

/// `/api/v1/metadata`: the one metric, a gauge (Grafana's query editor shows its help).
pub(crate) async fn metadata(State(st): State<Shared>) -> Json<Value> {
    success(json!({
        st.metric.clone(): [{ "type": "gauge", "help": "sensor reading stored by hourglass", "unit": "" }]
    }))
}

/// `/api/v1/status/buildinfo`: Grafana reads the version to pick API features; hourglass
/// answers as a Prometheus 2.x without optional features.
pub(crate) async fn buildinfo() -> Json<Value> {
    success(json!({
        "version": "2.40.0",
        "revision": concat!("hourglass-", env!("CARGO_PKG_VERSION")),
        "branch": "hourglass",
        "buildUser": "hourglass",
        "buildDate": "",
        "goVersion": "none (hourglass serve)",
    }))
}
