//! Which series a selector picks, and their values at each evaluation step.

use std::collections::BTreeSet;

use crate::codec::key::validate_device;
use crate::query::{self, CurveSource};
use serde_json::{json, Value};

use super::promql::{Matcher, Op, Selector};
use super::MAX_SERIES;
use crate::serve::api::{all_devices, no_room_table, room_map};
use crate::serve::{ApiError, AppState, StoreResult};

/// The labels of one series.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Series {
    pub(super) device: String,
    pub(super) room: Option<String>,
}

impl Series {
    pub(super) fn labels(&self, metric: &str) -> Value {
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
pub(super) fn resolve(st: &AppState, sel: &Selector) -> Result<Vec<Series>, ApiError> {
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
        if validate_device(&device).is_ok() {
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
pub(super) fn ts_json(t: f64) -> Value {
    if t.fract() == 0.0 && t.abs() < 1e15 {
        json!(t as i64)
    } else {
        json!((t * 1000.0).round() / 1000.0)
    }
}

/// The value at each `start + k * step <= end`: the newest point in `(t - window, t]`.
pub(super) fn sample(
    points: &[(i64, f64)],
    start: f64,
    end: f64,
    step: f64,
    window: f64,
) -> Vec<(f64, f64)> {
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
pub(super) fn fetch(
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

/// The series of every selector, deduplicated.
pub(super) fn resolve_all(st: &AppState, sels: &[Selector]) -> Result<BTreeSet<Series>, ApiError> {
    let mut all = BTreeSet::new();
    for sel in sels {
        all.extend(resolve(st, sel)?);
    }
    Ok(all)
}

#[cfg(test)]
mod tests {
    use super::*;

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
