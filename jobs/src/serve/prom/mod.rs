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

use std::collections::BTreeSet;

use axum::extract::{FromRequest, Path, Query, Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::{Form, Json};
use pipeline::query::{self, CurveSource};
use pipeline::reading::format_value;
use pipeline::rowkey;
use regex::Regex;
use serde_json::{json, Value};

use super::api::{all_devices, check_range, no_room_table, room_map, MAX_RANGE_SECS};
use super::{blocking, ApiError, AppState, Shared, StoreResult};

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

/// Query string and, for POST, form body parameters, in order (Prometheus merges both).
#[derive(Debug)]
pub(crate) struct PromParams(Vec<(String, String)>);

impl<S: Send + Sync> FromRequest<S> for PromParams {
    type Rejection = PromError;

    async fn from_request(req: Request, state: &S) -> Result<Self, PromError> {
        let mut pairs = match req.uri().query() {
            Some(_) => {
                Query::<Vec<(String, String)>>::try_from_uri(req.uri())
                    .map_err(|e| bad_data(format!("cannot read the query string: {e}")))?
                    .0
            }
            None => Vec::new(),
        };
        if req.method() == Method::POST {
            let Form(body) = Form::<Vec<(String, String)>>::from_request(req, state)
                .await
                .map_err(|e| {
                    bad_data(format!(
                        "cannot read the form body ({e}); POST application/x-www-form-urlencoded"
                    ))
                })?;
            pairs.extend(body);
        }
        Ok(PromParams(pairs))
    }
}

impl PromParams {
    /// The last value of `name`, if present and non-empty.
    fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .rev()
            .find(|(k, v)| k == name && !v.is_empty())
            .map(|(_, v)| v.as_str())
    }

    fn required(&self, name: &str) -> Result<&str, PromError> {
        self.get(name)
            .ok_or_else(|| bad_data(format!("missing parameter `{name}`")))
    }

    /// Every `match[]` selector.
    fn matches(&self) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == "match[]")
            .map(|(_, v)| v.as_str())
            .collect()
    }

    fn time(&self, name: &str) -> Result<Option<f64>, PromError> {
        self.get(name)
            .map(|s| parse_prom_time(s).map_err(|e| bad_data(format!("parameter `{name}`: {e}"))))
            .transpose()
    }

    fn duration(&self, name: &str) -> Result<Option<f64>, PromError> {
        self.get(name)
            .map(|s| parse_duration(s).map_err(|e| bad_data(format!("parameter `{name}`: {e}"))))
            .transpose()
    }
}

/// A Prometheus time: float epoch seconds or RFC 3339, within the years 0000 to 9999.
pub(crate) fn parse_prom_time(s: &str) -> Result<f64, String> {
    use pipeline::time::{MAX_TIME, MIN_TIME};
    if let Ok(t) = s.trim().parse::<f64>() {
        // Also refuses NaN and the infinities.
        if !(MIN_TIME as f64..=MAX_TIME as f64).contains(&t) {
            return Err(format!(
                "time {s} is out of range: use epoch seconds from {MIN_TIME} to {MAX_TIME} \
                 (years 0000 to 9999)"
            ));
        }
        return Ok(t);
    }
    pipeline::time::parse_time(s)
        .map(|t| t as f64)
        .map_err(|e| e.to_string())
}

/// `d` if it lies in `(0, max]`, else a 400 naming `name` and the limit.
fn check_duration(d: f64, name: &str, max: f64) -> Result<f64, PromError> {
    if d > 0.0 && d <= max {
        Ok(d)
    } else {
        Err(bad_data(format!(
            "parameter `{name}`: {d} s is out of range: use a positive duration of at most {max} s"
        )))
    }
}

/// A Prometheus duration: float seconds (`15`, `0.5`) or units (`1m30s`, `500ms`, `1h`, `7d`).
pub(crate) fn parse_duration(s: &str) -> Result<f64, String> {
    let bad = || format!("cannot read {s:?} as a duration: use seconds (60) or units (1m, 1h30m)");
    if let Ok(secs) = s.trim().parse::<f64>() {
        return if secs.is_finite() {
            Ok(secs)
        } else {
            Err(bad())
        };
    }
    let mut total = 0.0;
    let mut rest = s.trim();
    if rest.is_empty() {
        return Err(bad());
    }
    while !rest.is_empty() {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(bad());
        }
        let n: f64 = rest[..digits].parse().map_err(|_| bad())?;
        rest = &rest[digits..];
        let unit_len = rest.bytes().take_while(u8::is_ascii_alphabetic).count();
        let unit = match &rest[..unit_len] {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "d" => 86_400.0,
            "w" => 604_800.0,
            "y" => 31_536_000.0,
            _ => return Err(bad()),
        };
        rest = &rest[unit_len..];
        total += n * unit;
    }
    // Enough digits overflow to infinity.
    if total.is_finite() {
        Ok(total)
    } else {
        Err(bad())
    }
}

/// A label matcher operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Eq,
    Ne,
    Re,
    Nre,
}

/// One label matcher, its regex compiled (anchored, as Prometheus does).
#[derive(Debug, Clone)]
pub(crate) struct Matcher {
    pub(crate) label: String,
    pub(crate) op: Op,
    pub(crate) value: String,
    regex: Option<Regex>,
}

impl Matcher {
    fn new(label: String, op: Op, value: String) -> Result<Self, String> {
        let regex = match op {
            Op::Re | Op::Nre => Some(
                Regex::new(&format!("^(?s:{value})$"))
                    .map_err(|e| format!("invalid regular expression in {label} matcher: {e}"))?,
            ),
            Op::Eq | Op::Ne => None,
        };
        Ok(Matcher {
            label,
            op,
            value,
            regex,
        })
    }

    fn matches(&self, v: &str) -> bool {
        match (self.op, &self.regex) {
            (Op::Eq, _) => v == self.value,
            (Op::Ne, _) => v != self.value,
            (Op::Re, Some(re)) => re.is_match(v),
            (Op::Nre, Some(re)) => !re.is_match(v),
            (Op::Re | Op::Nre, None) => false,
        }
    }
}

/// A vector selector: `metric{label op "value", …}`.
#[derive(Debug, Clone)]
pub(crate) struct Selector {
    pub(crate) metric: Option<String>,
    pub(crate) matchers: Vec<Matcher>,
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.s.get(self.i).is_some_and(u8::is_ascii_whitespace) {
            self.i += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.get(self.i).copied()
    }

    fn eat(&mut self, token: &str) -> bool {
        if self.s[self.i..].starts_with(token.as_bytes()) {
            self.i += token.len();
            true
        } else {
            false
        }
    }

    /// `[a-zA-Z_][a-zA-Z0-9_]*`, plus `:` in metric names.
    fn ident(&mut self, colon: bool) -> Option<String> {
        let ok_first = |b: u8| b.is_ascii_alphabetic() || b == b'_' || (colon && b == b':');
        let ok = |b: u8| ok_first(b) || b.is_ascii_digit();
        if !self.peek().is_some_and(ok_first) {
            return None;
        }
        let start = self.i;
        while self.peek().is_some_and(ok) {
            self.i += 1;
        }
        Some(String::from_utf8_lossy(&self.s[start..self.i]).into_owned())
    }

    /// A quoted string: `"…"` or `'…'` with Go escapes, or a raw `` `…` ``.
    fn string(&mut self) -> Result<String, String> {
        let quote = self.peek().filter(|q| matches!(q, b'"' | b'\'' | b'`'));
        let Some(quote) = quote else {
            return Err(self.unexpected("a quoted label value"));
        };
        self.i += 1;
        let mut out = Vec::new();
        loop {
            let Some(b) = self.peek() else {
                return Err("unterminated string".to_string());
            };
            self.i += 1;
            match b {
                b if b == quote => break,
                b'\\' if quote != b'`' => {
                    let Some(e) = self.peek() else {
                        return Err("unterminated string".to_string());
                    };
                    self.i += 1;
                    match e {
                        b'n' => out.push(b'\n'),
                        b't' => out.push(b'\t'),
                        b'r' => out.push(b'\r'),
                        b'\\' | b'"' | b'\'' => out.push(e),
                        // Regexes keep their escapes: `\.` stays `\.`.
                        other => out.extend([b'\\', other]),
                    }
                }
                b => out.push(b),
            }
        }
        String::from_utf8(out).map_err(|_| "label value is not UTF-8".to_string())
    }

    fn unexpected(&self, wanted: &str) -> String {
        match self.peek() {
            Some(b) => format!(
                "expected {wanted} at offset {}, found {:?}",
                self.i, b as char
            ),
            None => format!("expected {wanted}, found the end of the query"),
        }
    }

    /// Names what the text left after a selector is, for the error.
    fn unsupported_tail(&self) -> String {
        let what = match self.peek() {
            Some(b'(') => "functions and aggregations",
            Some(b'[') => "range vectors",
            Some(b'+' | b'-' | b'*' | b'/' | b'%' | b'^' | b'<' | b'>' | b'=' | b'!') => {
                "operators"
            }
            Some(_) if self.s[self.i..].starts_with(b"offset") => "offset modifiers",
            Some(b'@') => "@ modifiers",
            _ => "anything but a selector",
        };
        format!("{what} (at offset {})", self.i)
    }
}

/// Parses a vector selector, or says what in `q` is not one.
pub(crate) fn parse_selector(q: &str) -> Result<Selector, String> {
    let mut p = Parser {
        s: q.as_bytes(),
        i: 0,
    };
    p.ws();
    let metric = p.ident(true);
    p.ws();
    let mut matchers = Vec::new();
    if p.eat("{") {
        loop {
            p.ws();
            if p.eat("}") {
                break;
            }
            let label = p.ident(false).ok_or_else(|| p.unexpected("a label name"))?;
            p.ws();
            let op = if p.eat("=~") {
                Op::Re
            } else if p.eat("!~") {
                Op::Nre
            } else if p.eat("!=") {
                Op::Ne
            } else if p.eat("=") {
                Op::Eq
            } else {
                return Err(p.unexpected("=, !=, =~ or !~"));
            };
            p.ws();
            let value = p.string()?;
            matchers.push(Matcher::new(label, op, value)?);
            p.ws();
            if p.eat(",") {
                continue;
            }
            if p.eat("}") {
                break;
            }
            return Err(p.unexpected(", or }"));
        }
    } else if metric.is_none() {
        return Err(p.unsupported_tail());
    }
    p.ws();
    if p.peek().is_some() {
        return Err(p.unsupported_tail());
    }
    if metric.is_none() && matchers.iter().all(|m| m.matches("")) {
        return Err(
            "a selector needs a metric name or at least one matcher that does not match the empty string"
                .to_string(),
        );
    }
    Ok(Selector { metric, matchers })
}

/// Constant arithmetic (`1+1`, `2 * 3 - 1`), left to right with `*` `/` before `+` `-`.
fn parse_scalar(q: &str) -> Option<f64> {
    let mut terms: Vec<f64> = Vec::new();
    let mut ops: Vec<u8> = Vec::new();
    let mut product: Option<f64> = None;
    let mut pending: Option<u8> = None;
    let mut rest = q.trim();
    loop {
        let len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == 'e' || c == 'E'))
            .unwrap_or(rest.len());
        let n: f64 = rest[..len].parse().ok()?;
        rest = rest[len..].trim_start();
        product = Some(match (product, pending) {
            (Some(p), Some(b'*')) => p * n,
            (Some(p), Some(b'/')) => p / n,
            _ => n,
        });
        let Some(op) = rest.bytes().next() else {
            terms.push(product?);
            break;
        };
        // Only an ASCII operator may follow: slicing past any other first byte could split a
        // multi-byte character (found by the promql fuzz target: `1\u{2c1}1`).
        if !matches!(op, b'*' | b'/' | b'+' | b'-') {
            return None;
        }
        rest = rest[1..].trim_start();
        match op {
            b'*' | b'/' => pending = Some(op),
            b'+' | b'-' => {
                terms.push(product.take()?);
                ops.push(op);
                pending = None;
            }
            _ => return None,
        }
    }
    let mut total = terms[0];
    for (op, t) in ops.iter().zip(&terms[1..]) {
        total = if *op == b'+' { total + t } else { total - t };
    }
    Some(total)
}

/// What a `query` parameter asks for.
pub(crate) enum Expr {
    Scalar(f64),
    Selector(Selector),
}

pub(crate) fn parse_query(q: &str) -> Result<Expr, PromError> {
    if let Some(v) = parse_scalar(q) {
        return Ok(Expr::Scalar(v));
    }
    parse_selector(q).map(Expr::Selector).map_err(|detail| {
        bad_data(format!(
            "unsupported PromQL: {detail} in {q:?}; hourglass answers selectors such as \
             temp{{device=\"dev00786\"}}, temp{{room=\"room031\"}} or temp{{device=~\"dev0078.*\"}}"
        ))
    })
}

/// The labels of one series.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Series {
    device: String,
    room: Option<String>,
}

impl Series {
    fn labels(&self, metric: &str) -> Value {
        let mut m = serde_json::Map::new();
        m.insert("__name__".into(), metric.into());
        m.insert("device".into(), self.device.clone().into());
        if let Some(room) = &self.room {
            m.insert("room".into(), room.clone().into());
        }
        Value::Object(m)
    }
}

/// The series `sel` selects, ascending by device. Runs on the blocking pool.
fn resolve(st: &AppState, sel: &Selector) -> Result<Vec<Series>, ApiError> {
    let label = |m: &Matcher, device: &str, room: Option<&str>| -> bool {
        match m.label.as_str() {
            "__name__" => m.matches(&st.metric),
            "device" => m.matches(device),
            "room" => m.matches(room.unwrap_or("")),
            _ => m.matches(""),
        }
    };
    if sel.metric.as_ref().is_some_and(|m| *m != st.metric) {
        return Ok(Vec::new());
    }
    let has = |name: &str, op: Op| {
        sel.matchers
            .iter()
            .find(|m| m.label == name && m.op == op)
            .map(|m| m.value.clone())
    };
    let rooms = room_map(st).store()?;
    if rooms.is_none() && sel.matchers.iter().any(|m| m.label == "room") {
        return Err(ApiError::not_implemented(no_room_table()));
    }
    let candidates: Vec<String> = if let Some(device) = has("device", Op::Eq) {
        if rowkey::validate_device(&device).is_ok() {
            vec![device]
        } else {
            Vec::new()
        }
    } else if let (Some(room), Some(map)) = (has("room", Op::Eq), &rooms) {
        map.iter()
            .filter(|(_, r)| **r == room)
            .map(|(d, _)| d.clone())
            .collect()
    } else {
        all_devices(st).store()?.to_vec()
    };
    let mut series: Vec<Series> = candidates
        .into_iter()
        .map(|device| {
            let room = rooms.as_ref().and_then(|m| m.get(&device).cloned());
            Series { device, room }
        })
        .filter(|s| {
            sel.matchers
                .iter()
                .all(|m| label(m, &s.device, s.room.as_deref()))
        })
        .collect();
    series.sort();
    if series.len() > MAX_SERIES {
        return Err(ApiError::bad_request(format!(
            "the selector matches {} series, more than the limit of {MAX_SERIES}: narrow it with device=, device=~ or room=",
            series.len()
        )));
    }
    Ok(series)
}

/// A timestamp as Prometheus writes it: a number of seconds, whole if it is whole.
fn ts_json(t: f64) -> Value {
    if t.fract() == 0.0 && t.abs() < 1e15 {
        json!(t as i64)
    } else {
        json!((t * 1000.0).round() / 1000.0)
    }
}

/// The value at each `start + k * step <= end`: the newest point in `(t - window, t]`.
fn sample(points: &[(i64, f64)], start: f64, end: f64, step: f64, window: f64) -> Vec<(f64, f64)> {
    let mut out = Vec::new();
    let mut next = 0; // index of the first point after t
    let steps = ((end - start) / step).floor() as u64;
    for k in 0..=steps {
        let t = start + k as f64 * step;
        while next < points.len() && (points[next].0 as f64) <= t {
            next += 1;
        }
        if let Some(&(ts, v)) = next.checked_sub(1).and_then(|i| points.get(i)) {
            if ts as f64 > t - window {
                out.push((t, v));
            }
        }
    }
    out
}

/// Reads the points of `device` that `sample` needs for `[start, end]` with `window`.
fn fetch(
    st: &AppState,
    device: &str,
    start: f64,
    end: f64,
    window: f64,
) -> Result<Vec<(i64, f64)>, ApiError> {
    let from = (start - window).floor() as i64;
    let to = end.floor() as i64 + 1;
    query::curve_points(st.reader(), st.scheme, device, from, to, CurveSource::Auto).store()
}

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

/// The series of every selector, deduplicated.
fn resolve_all(st: &AppState, sels: &[Selector]) -> Result<BTreeSet<Series>, ApiError> {
    let mut all = BTreeSet::new();
    for sel in sels {
        all.extend(resolve(st, sel)?);
    }
    Ok(all)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn sel(q: &str) -> Selector {
        parse_selector(q).unwrap_or_else(|e| panic!("{q}: {e}"))
    }

    #[test]
    fn parses_the_selectors_grafana_sends() {
        let s = sel(r#"temp{device="dev00786"}"#);
        assert_eq!(s.metric.as_deref(), Some("temp"));
        assert_eq!(s.matchers.len(), 1);
        assert_eq!(
            (s.matchers[0].label.as_str(), s.matchers[0].op),
            ("device", Op::Eq)
        );
        let s = sel(r#" temp { room = 'room031' , device !~ "dev0078\\..*", } "#);
        assert_eq!(s.matchers[0].value, "room031");
        assert_eq!(s.matchers[1].op, Op::Nre);
        assert!(s.matchers[1].matches("dev00786"));
        assert!(!s.matchers[1].matches("dev0078.x"));
        let s = sel(r#"{device=~"dev0078.*"}"#);
        assert!(s.metric.is_none());
        assert!(s.matchers[0].matches("dev00786"));
        assert!(!s.matchers[0].matches("xdev00786"), "regexes are anchored");
        let s = sel("temp{device=~`(dev1|dev2)`}");
        assert!(s.matchers[0].matches("dev2"));
        assert!(sel("temp").matchers.is_empty());
    }

    #[test]
    fn names_what_is_unsupported() {
        for (q, what) in [
            ("rate(temp[5m])", "functions"),
            ("sum by (device) (temp)", "anything but a selector"),
            ("temp[5m]", "range vectors"),
            ("temp > 20", "operators"),
            ("temp offset 5m", "offset"),
            (r#"{device=~".*"}"#, "empty string"),
            (r#"temp{device="x""#, "expected , or }"),
            (r#"temp{device=~"("}"#, "invalid regular expression"),
            ("", "anything but a selector"),
        ] {
            let err = parse_selector(q).unwrap_err();
            assert!(err.contains(what), "{q}: {err}");
        }
        let e = parse_query("avg(temp)").err().expect("unsupported");
        assert_eq!(e.error_type, "bad_data");
        assert!(
            e.message.starts_with("unsupported PromQL: functions"),
            "{}",
            e.message
        );
    }

    #[test]
    fn constants_for_grafanas_health_check() {
        assert_eq!(parse_scalar("1+1"), Some(2.0));
        assert_eq!(parse_scalar(" 2 * 3 - 1 / 2 "), Some(5.5));
        assert_eq!(parse_scalar("temp"), None);
        assert_eq!(parse_scalar("1 +"), None);
        // A number followed by a multi-byte character is no scalar, not a panic.
        assert_eq!(parse_scalar("1\u{2c1}1"), None);
    }

    #[test]
    fn durations_and_times() {
        assert_eq!(parse_duration("60").unwrap(), 60.0);
        assert_eq!(parse_duration("1m30s").unwrap(), 90.0);
        assert_eq!(parse_duration("500ms").unwrap(), 0.5);
        assert!(parse_duration("5x").is_err());
        assert!(parse_duration("1e400").is_err());
        assert!(parse_duration(&format!("{}y", "9".repeat(400))).is_err());
        for t in ["-1e300", "1e300", "NaN", "inf", "9223372036854775807"] {
            assert!(
                parse_prom_time(t).unwrap_err().contains("253402300799"),
                "{t}"
            );
        }
        assert_eq!(parse_prom_time("1724102400.5").unwrap(), 1724102400.5);
        assert_eq!(
            parse_prom_time("2024-08-19T21:20:00Z").unwrap(),
            1724102400.0
        );
    }

    #[test]
    fn samples_the_newest_point_in_the_window() {
        let points = [(100, 1.0), (130, 2.0), (170, 3.0)];
        // step 60, window 60: t=100 → 1, t=160 → (100,160] → 2, t=220 → (160,220] → 3.
        assert_eq!(
            sample(&points, 100.0, 220.0, 60.0, 60.0),
            [(100.0, 1.0), (160.0, 2.0), (220.0, 3.0)]
        );
        // A short window leaves gaps where no reading is recent enough.
        assert_eq!(sample(&points, 100.0, 200.0, 50.0, 20.0), [(100.0, 1.0)]);
        assert_eq!(ts_json(1.5), json!(1.5));
        assert_eq!(ts_json(2.0), json!(2));
    }
}
