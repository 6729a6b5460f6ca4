//! The JSON API: a device's curve (raw or downsampled), hour, latest reading, the device list
//! and a room's current values.
//!
//! Limits protect the server: a curve covers at most [`MAX_RANGE_SECS`] and returns at most
//! [`MAX_POINTS`] points or buckets; asking for more is a 400 naming the limit.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use crate::codec::key::{validate_device, SEPARATOR};
use crate::codec::narrow::{self, KeyScheme};
use crate::query::{self, CurveSource};
use crate::tables::{NARROW_TABLE, ROOM_TABLE};
use axum::extract::{Path, Query, State};
use axum::Json;
use pipeline::time::parse_time;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use sinks::table::{prefix_successor, ScanSpec, TableReader};

use super::{blocking, ApiError, AppState, Shared, StoreResult, LIST_TTL};

/// Longest range a curve may cover: 31 days.
pub(crate) const MAX_RANGE_SECS: i64 = 31 * 86_400;
/// Most points (or buckets, with `step`) one curve answer may hold.
pub(crate) const MAX_POINTS: usize = 100_000;
/// Most device ids `/api/v1/devices` returns at once.
const MAX_DEVICES: usize = 10_000;
/// Most devices listed internally (Prometheus label values, regex matchers).
pub(crate) const MAX_DEVICES_LISTED: usize = 100_000;

/// A required query parameter, or 400 naming it.
fn required<'a>(value: &'a Option<String>, name: &str) -> Result<&'a str, ApiError> {
    value
        .as_deref()
        .filter(|v| !v.is_empty())
        .ok_or_else(|| ApiError::bad_request(format!("missing query parameter `{name}`")))
}

fn device_param(value: &Option<String>) -> Result<String, ApiError> {
    let device = required(value, "device")?;
    validate_device(device).map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok(device.to_string())
}

fn time_param(value: &Option<String>, name: &str) -> Result<i64, ApiError> {
    parse_time(required(value, name)?)
        .map_err(|e| ApiError::bad_request(format!("parameter `{name}`: {e}")))
}

/// Checks `[from, to)` against the range limit.
pub(crate) fn check_range(from: i64, to: i64) -> Result<(), String> {
    if from >= to {
        return Err(format!(
            "`from` ({from}) must be before `to` ({to}): the range is [from, to)"
        ));
    }
    // Checked: `to - from` of two far-apart times wraps past the limit.
    match to.checked_sub(from) {
        Some(span) if span <= MAX_RANGE_SECS => {}
        _ => {
            return Err(format!(
                "range of {:.1} days exceeds the limit of 31 days ({MAX_RANGE_SECS} s): split the query",
                (i128::from(to) - i128::from(from)) as f64 / 86_400.0
            ))
        }
    }
    Ok(())
}

/// Parameters of `/api/v1/curve`.
#[derive(Debug, Deserialize)]
pub(crate) struct CurveParams {
    device: Option<String>,
    from: Option<String>,
    to: Option<String>,
    step: Option<String>,
}

/// One bucket of a downsampled curve: the readings with `ts <= t < ts + step`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Bucket {
    /// Start of the bucket, epoch seconds (`from + k * step`).
    ts: i64,
    /// Number of readings in it (buckets without readings are left out).
    n: usize,
    min: f64,
    max: f64,
    avg: f64,
}

/// Groups ascending points into `step`-second buckets aligned on `from`.
fn downsample(points: &[(i64, f64)], from: i64, step: i64) -> Vec<Bucket> {
    let mut out: Vec<Bucket> = Vec::new();
    let mut sum = 0.0;
    for &(ts, v) in points {
        let start = from + (ts - from).div_euclid(step) * step;
        match out.last_mut() {
            Some(b) if b.ts == start => {
                b.n += 1;
                b.min = b.min.min(v);
                b.max = b.max.max(v);
                sum += v;
            }
            _ => {
                if let Some(b) = out.last_mut() {
                    b.avg = sum / b.n as f64;
                }
                out.push(Bucket {
                    ts: start,
                    n: 1,
                    min: v,
                    max: v,
                    avg: v,
                });
                sum = v;
            }
        }
    }
    if let Some(b) = out.last_mut() {
        b.avg = sum / b.n as f64;
    }
    out
}

/// `GET /api/v1/curve?device=&from=&to=[&step=]`: the readings with `from <= ts < to`.
///
/// Without `step`: `{"device","from","to","points":[[ts,value],…]}`, the same document as
/// `hourglass query curve --format json`. With `step` (seconds): `"step"` and
/// `"buckets":[{"ts","n","min","max","avg"},…]` instead of `points`, one bucket per `step`
/// seconds starting at `from` that holds at least one reading.
pub(crate) async fn curve(
    State(st): State<Shared>,
    Query(p): Query<CurveParams>,
) -> Result<Json<Value>, ApiError> {
    let device = device_param(&p.device)?;
    let from = time_param(&p.from, "from")?;
    let to = time_param(&p.to, "to")?;
    check_range(from, to).map_err(ApiError::bad_request)?;
    let step = match p.step.as_deref().filter(|s| !s.is_empty()) {
        None => None,
        Some(s) => {
            let step: i64 = s
                .parse()
                .ok()
                .filter(|n| (1..=MAX_RANGE_SECS).contains(n))
                .ok_or_else(|| {
                    ApiError::bad_request(format!(
                        "parameter `step`: {s:?} is not a positive whole number of seconds up to \
                         {MAX_RANGE_SECS} (31 days)"
                    ))
                })?;
            // `check_range` bounds `to - from`, and `step` is at most as large: no overflow.
            let buckets = (to - from + step - 1) / step;
            if buckets > MAX_POINTS as i64 {
                return Err(ApiError::bad_request(format!(
                    "step {step} s makes {buckets} buckets, more than the limit of {MAX_POINTS}: use a larger step"
                )));
            }
            Some(step)
        }
    };
    let answer_device = device.clone();
    let points = blocking(&st, move |st| {
        query::curve_points(st.reader(), st.scheme, &device, from, to, CurveSource::Auto).store()
    })
    .await?;
    Ok(Json(match step {
        None => {
            if points.len() > MAX_POINTS {
                return Err(ApiError::bad_request(format!(
                    "{} points in range, more than the limit of {MAX_POINTS} without `step`: pass step=SECONDS to downsample",
                    points.len()
                )));
            }
            json!({ "device": answer_device, "from": from, "to": to, "points": points })
        }
        Some(step) => json!({
            "device": answer_device,
            "from": from,
            "to": to,
            "step": step,
            "buckets": downsample(&points, from, step),
        }),
    }))
}

/// Parameters of `/api/v1/hour`.
#[derive(Debug, Deserialize)]
pub(crate) struct HourParams {
    device: Option<String>,
    hour: Option<String>,
}

/// `GET /api/v1/hour?device=&hour=`: the hour containing `hour`, from one Get of its wide row
/// (its narrow rows when the row is marked dirty, `query::hour`):
/// `{"device","hour_start","points","summary":{n,min,max,sum,first,last}|null}`.
pub(crate) async fn hour(
    State(st): State<Shared>,
    Query(p): Query<HourParams>,
) -> Result<Json<query::HourAnswer>, ApiError> {
    let device = device_param(&p.device)?;
    let at = time_param(&p.hour, "hour")?;
    let answer = blocking(&st, move |st| {
        query::hour(st.reader(), st.scheme, &device, at).store()
    })
    .await?;
    Ok(Json(answer))
}

/// Parameters of `/api/v1/latest`.
#[derive(Debug, Deserialize)]
pub(crate) struct LatestParams {
    device: Option<String>,
}

/// `GET /api/v1/latest?device=`: `{"device","ts","value"}`, or `ts`/`value` null if the device
/// has no reading.
pub(crate) async fn latest(
    State(st): State<Shared>,
    Query(p): Query<LatestParams>,
) -> Result<Json<Value>, ApiError> {
    let device = device_param(&p.device)?;
    let d = device.clone();
    let reading = blocking(&st, move |st| {
        query::latest(st.reader(), st.scheme, &d).store()
    })
    .await?;
    Ok(Json(json!({
        "device": device,
        "ts": reading.as_ref().map(|r| r.ts),
        "value": reading.as_ref().map(|r| r.value),
    })))
}

/// Parameters of `/api/v1/devices`.
#[derive(Debug, Deserialize)]
pub(crate) struct DevicesParams {
    prefix: Option<String>,
    limit: Option<String>,
}

/// `GET /api/v1/devices?prefix=&limit=`: `{"devices":[…],"truncated":bool}`, device ids in
/// row-key order (see [`list_devices`]; default limit 100, at most 10000).
pub(crate) async fn devices(
    State(st): State<Shared>,
    Query(p): Query<DevicesParams>,
) -> Result<Json<Value>, ApiError> {
    let prefix = p.prefix.unwrap_or_default();
    if !prefix.is_empty() {
        validate_device(&prefix)
            .map_err(|e| ApiError::bad_request(format!("parameter `prefix`: {e}")))?;
    }
    let limit = match p.limit.as_deref().filter(|s| !s.is_empty()) {
        None => 100,
        Some(s) => s
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_DEVICES).contains(n))
            .ok_or_else(|| {
                ApiError::bad_request(format!(
                    "parameter `limit`: {s:?} is not a number from 1 to {MAX_DEVICES}"
                ))
            })?,
    };
    let mut devices = blocking(&st, move |st| {
        list_devices(st.reader(), st.scheme, &prefix, limit + 1).store()
    })
    .await?;
    let truncated = devices.len() > limit;
    devices.truncate(limit);
    Ok(Json(json!({ "devices": devices, "truncated": truncated })))
}

/// The first `limit` device ids starting with `prefix`, in row-key order (an id followed by
/// `_`, so `dev1.x` < `dev10` < `dev1` < `dev1a`), found by a skip-scan of the
/// narrow table: in each salt bucket (or the whole table with the plain scheme), read one row,
/// note its device, and jump past every row of that device (`prefix_successor` of
/// `<bucket>_<device>_`). Costs one single-row scan per device, however many readings each has.
///
/// The jump is exact because device ids cannot contain `_` or the byte after it: no other
/// device's keys start with `<bucket>_<device>_`.
///
/// # Errors
/// A store error, or a row key that is not a narrow key of `scheme`.
pub(crate) fn list_devices(
    store: &dyn TableReader,
    scheme: KeyScheme,
    prefix: &str,
    limit: usize,
) -> crate::Result<Vec<String>> {
    let mut devices = Vec::new();
    for mut start in narrow::id_prefixes(scheme, prefix) {
        let stop = prefix_successor(&start);
        // Each bucket is ascending, so its first `limit` devices suffice for the merged answer.
        for _ in 0..limit {
            if !stop.is_empty() && start >= stop {
                break;
            }
            let spec = ScanSpec {
                start: start.clone(),
                stop: stop.clone(),
                limit: Some(1),
                columns: Vec::new(),
                time_range: None,
                ..ScanSpec::default()
            };
            let Some(row) = store.scan(NARROW_TABLE, &spec)?.into_iter().next() else {
                break;
            };
            let key = narrow::parse_narrow_key(scheme, &row.key)?;
            start = prefix_successor(&narrow::narrow_prefix(scheme, &key.device));
            devices.push(key.device);
            if start.is_empty() {
                break;
            }
        }
    }
    // Row-key order (the id followed by `_`): the order each bucket yields them in, so the
    // first `limit` of each bucket hold the first `limit` overall.
    devices.sort_unstable_by(|a, b| key_order(a).cmp(&key_order(b)));
    devices.dedup();
    devices.truncate(limit);
    Ok(devices)
}

fn key_order(device: &str) -> impl Ord + '_ {
    device
        .bytes()
        .chain(std::iter::once(SEPARATOR))
        .collect::<Vec<u8>>()
}

/// Every device id (at most [`MAX_DEVICES_LISTED`]), reused for [`LIST_TTL`].
pub(crate) fn all_devices(st: &AppState) -> crate::Result<Arc<Vec<String>>> {
    let mut cached = st.devices.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((at, list)) = cached.as_ref() {
        if at.elapsed() < LIST_TTL {
            return Ok(list.clone());
        }
    }
    let list = Arc::new(list_devices(
        st.reader(),
        st.scheme,
        "",
        MAX_DEVICES_LISTED,
    )?);
    *cached = Some((Instant::now(), list.clone()));
    Ok(list)
}

/// The message of every answer that needs the room table before it exists.
pub(crate) fn no_room_table() -> String {
    format!(
        "the room view table {ROOM_TABLE} does not exist in this build yet; room queries \
         answer once hourglass writes it"
    )
}

/// Room view rows in `spec` as `(room, device)`.
fn room_rows(store: &dyn TableReader, spec: &ScanSpec) -> crate::Result<Vec<(String, String)>> {
    let rows = store.scan(ROOM_TABLE, spec)?;
    Ok(rows
        .into_iter()
        .filter_map(|row| {
            let key = String::from_utf8(row.key).ok()?;
            let (room, device) = crate::codec::room::parse_room_key(&key)?;
            Some((room.to_string(), device.to_string()))
        })
        .collect())
}

/// Device → room for every device in the room view, reused for [`LIST_TTL`]; `None` if the
/// table does not exist.
pub(crate) fn room_map(st: &AppState) -> crate::Result<Option<Arc<HashMap<String, String>>>> {
    if !st.room_table {
        return Ok(None);
    }
    let mut cached = st.rooms.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((at, map)) = cached.as_ref() {
        if at.elapsed() < LIST_TTL {
            return Ok(Some(map.clone()));
        }
    }
    let spec = ScanSpec {
        limit: Some(MAX_DEVICES_LISTED),
        ..ScanSpec::default()
    };
    let map: HashMap<String, String> = room_rows(st.reader(), &spec)?
        .into_iter()
        .map(|(room, device)| (device, room))
        .collect();
    let map = Arc::new(map);
    *cached = Some((Instant::now(), map.clone()));
    Ok(Some(map))
}

/// `GET /api/v1/room/{room}`: `{"room","devices":[{"device","ts","value"},…]}` from a prefix
/// scan of the room view; 501 while that table does not exist.
pub(crate) async fn room(
    State(st): State<Shared>,
    Path(room): Path<String>,
) -> Result<Json<Value>, ApiError> {
    crate::registry::validate_room(&room).map_err(|e| ApiError::bad_request(e.to_string()))?;
    if !st.room_table {
        return Err(ApiError::not_implemented(no_room_table()));
    }
    let r = room.clone();
    let devices = blocking(&st, move |st| crate::room::room(st.reader(), &r).store()).await?;
    Ok(Json(json!({ "room": room, "devices": devices })))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sinks::table::{Row, TimeRange};
    use std::collections::BTreeMap;

    /// An in-memory narrow table that counts scans.
    struct Mem {
        rows: BTreeMap<Vec<u8>, ()>,
        scans: std::sync::atomic::AtomicUsize,
    }

    impl TableReader for Mem {
        fn get(&self, _: &str, _: &[u8], _: Option<TimeRange>) -> sinks::Result<Option<Row>> {
            Ok(None)
        }
        fn scan(&self, _: &str, spec: &ScanSpec) -> sinks::Result<Vec<Row>> {
            self.scans
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let it = self
                .rows
                .range(spec.start.clone()..)
                .take_while(|(k, _)| spec.stop.is_empty() || **k < spec.stop)
                .take(spec.limit.unwrap_or(usize::MAX));
            Ok(it
                .map(|(k, ())| Row {
                    key: k.clone(),
                    cells: Vec::new(),
                })
                .collect())
        }
    }

    fn mem(scheme: KeyScheme, devices: &[&str], readings: i64) -> Mem {
        let mut rows = BTreeMap::new();
        for d in devices {
            for ts in 0..readings {
                rows.insert(narrow::narrow_key(scheme, d, 1_724_100_000 + ts), ());
            }
        }
        Mem {
            rows,
            scans: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    const DEVICES: &[&str] = &["dev1", "dev1.x", "dev10", "dev1a", "a", "Z:9", "sensor-1"];

    #[test]
    fn skip_scan_finds_every_device_once_with_one_scan_each() {
        for scheme in [KeyScheme::Salted, KeyScheme::Plain] {
            let store = mem(scheme, DEVICES, 50);
            assert_eq!(
                list_devices(&store, scheme, "", 100).unwrap(),
                ["Z:9", "a", "dev1.x", "dev10", "dev1", "dev1a", "sensor-1"]
            );
            // One hit per device plus one empty scan per root, not one per reading.
            let roots = if scheme == KeyScheme::Salted { 16 } else { 1 };
            assert!(
                store.scans.load(std::sync::atomic::Ordering::Relaxed) <= DEVICES.len() + roots,
                "{scheme:?}: {} scans",
                store.scans.load(std::sync::atomic::Ordering::Relaxed)
            );
        }
    }

    #[test]
    fn skip_scan_honours_prefix_and_limit() {
        for scheme in [KeyScheme::Salted, KeyScheme::Plain] {
            let store = mem(scheme, DEVICES, 3);
            assert_eq!(
                list_devices(&store, scheme, "dev1", 100).unwrap(),
                ["dev1.x", "dev10", "dev1", "dev1a"]
            );
            assert_eq!(
                list_devices(&store, scheme, "dev1", 2).unwrap(),
                ["dev1.x", "dev10"]
            );
            assert!(list_devices(&store, scheme, "nope", 10).unwrap().is_empty());
        }
    }

    #[test]
    fn downsample_groups_by_step_from_the_start() {
        let points = [(100, 1.0), (105, 3.0), (110, 2.0), (135, 5.0)];
        let b = downsample(&points, 100, 10);
        assert_eq!(
            b,
            [
                Bucket {
                    ts: 100,
                    n: 2,
                    min: 1.0,
                    max: 3.0,
                    avg: 2.0
                },
                Bucket {
                    ts: 110,
                    n: 1,
                    min: 2.0,
                    max: 2.0,
                    avg: 2.0
                },
                Bucket {
                    ts: 130,
                    n: 1,
                    min: 5.0,
                    max: 5.0,
                    avg: 5.0
                },
            ]
        );
        assert!(downsample(&[], 0, 10).is_empty());
    }

    #[test]
    fn range_limit_is_named() {
        assert!(check_range(0, MAX_RANGE_SECS).is_ok());
        assert!(check_range(0, MAX_RANGE_SECS + 1)
            .unwrap_err()
            .contains("31 days"));
        assert!(check_range(5, 5).unwrap_err().contains("before"));
        assert!(check_range(i64::MIN, i64::MAX)
            .unwrap_err()
            .contains("31 days"));
    }
}
