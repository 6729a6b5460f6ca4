//! The Prometheus API subset Grafana uses, on the replayed scenario: `query_range` returns the
//! points of `hourglass query curve` sampled as documented, GET and form POST agree, selectors
//! pick the right series and anything else is a Prometheus-style `bad_data` error.

mod serve_common;

use serde_json::{json, Value};
use serve_common::{cli, cli_points, cli_points_per_step, get_json, post_form, start, H};

/// The labels of a device's series: `room` too when the room view (if this build has it) holds
/// the device.
fn labels(device: &str) -> Value {
    let mut labels = json!({ "__name__": "temp", "device": device });
    if sensor::tables::all_tables()
        .iter()
        .any(|t| t.name == "ts_room_latest")
    {
        let dump = cli(&["tables", "dump", "ts_room_latest"]);
        let room = dump.lines().find_map(|line| {
            let key = line.split('\t').next()?;
            let (room, d) = sensor::codec::room::parse_room_key(key)?;
            (d == device).then(|| room.to_string())
        });
        if let Some(room) = room {
            labels["room"] = json!(room);
        }
    }
    labels
}

/// `[[ts, "value"], …]` → `(ts, value)`.
fn values(series: &Value) -> Vec<(i64, f64)> {
    series["values"]
        .as_array()
        .expect("values")
        .iter()
        .map(|p| {
            let v: f64 = p[1]
                .as_str()
                .expect("value is a string")
                .parse()
                .expect("number");
            (p[0].as_i64().expect("whole ts"), v)
        })
        .collect()
}

fn range(
    query: &str,
    start: i64,
    end: i64,
    step: &str,
    lookback: Option<&str>,
) -> Vec<(&'static str, String)> {
    let mut p = vec![
        ("query", query.to_string()),
        ("start", start.to_string()),
        ("end", end.to_string()),
        ("step", step.to_string()),
    ];
    if let Some(l) = lookback {
        p.push(("lookback_delta", l.to_string()));
    }
    p
}

fn call(
    server: &serve_common::Server,
    path: &str,
    params: &[(&'static str, String)],
) -> (u16, Value) {
    let p: Vec<(&str, &str)> = params.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let get = get_json(server, path, &p);
    let post = post_form(server, path, &p);
    assert_eq!(get, post, "GET and POST of {path} {params:?} differ");
    get
}

#[test]
fn query_range_at_step_1_returns_exactly_the_cli_points() {
    let server = start();
    let (start, end) = (H, H + 7199);
    let (status, got) = call(
        &server,
        "/api/v1/query_range",
        &range(r#"temp{device="dev00786"}"#, start, end, "1", Some("1")),
    );
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["status"], "success");
    assert_eq!(got["data"]["resultType"], "matrix");
    let result = got["data"]["result"].as_array().expect("result");
    assert_eq!(result.len(), 1);
    assert_eq!(result[0]["metric"], labels("dev00786"));
    let want = cli_points("dev00786", start, end + 1);
    assert!(want.len() > 20);
    assert_eq!(values(&result[0]), want);
}

#[test]
fn query_range_samples_the_last_value_per_step() {
    let server = start();
    let (start, end, step) = (H + 600, H + 7200, 600);
    for device in ["dev00786", "sensor-1"] {
        let (status, got) = call(
            &server,
            "/api/v1/query_range",
            &range(
                &format!("temp{{device=\"{device}\"}}"),
                start,
                end,
                "10m",
                None,
            ),
        );
        assert_eq!(status, 200, "{got}");
        // Window = max(step, 5 min lookback) = step: the newest reading in (t - 600, t].
        let want = cli_points_per_step(device, start, end, step);
        assert!(want.len() >= 10, "{want:?}");
        assert_eq!(values(&got["data"]["result"][0]), want, "{device}");
    }
}

#[test]
fn selectors_pick_devices_by_regex() {
    let server = start();
    let devices = |q: &str| -> Vec<String> {
        let (status, got) = call(
            &server,
            "/api/v1/query_range",
            &range(q, H, H + 3600, "60", None),
        );
        assert_eq!(status, 200, "{q}: {got}");
        got["data"]["result"]
            .as_array()
            .expect("result")
            .iter()
            .map(|s| s["metric"]["device"].as_str().expect("device").to_string())
            .collect()
    };
    assert_eq!(devices(r#"temp{device=~"dev0078.*"}"#), ["dev00786"]);
    assert_eq!(
        devices(r#"temp{device!~"dev0078.*"}"#),
        ["gateway-7:temp.sensor-000123", "sensor-1"]
    );
    assert_eq!(
        devices(r#"temp{device=~"sensor-1|dev00786"}"#),
        ["dev00786", "sensor-1"]
    );
    assert_eq!(devices(r#"{__name__="temp", device!="sensor-1"}"#).len(), 2);
    assert_eq!(devices("temp").len(), 3);
    assert!(devices("humidity").is_empty());
    assert!(devices(r#"temp{device="dev99999"}"#).is_empty());
}

#[test]
fn instant_query_is_the_latest_within_five_minutes() {
    let server = start();
    let t = H + 3600;
    let points = cli_points("sensor-1", t - 300, t + 1);
    let (status, got) = call(
        &server,
        "/api/v1/query",
        &[
            ("query", r#"temp{device="sensor-1"}"#.to_string()),
            ("time", t.to_string()),
        ],
    );
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["data"]["resultType"], "vector");
    let (ts, v) = points.last().expect("a reading in the 5 minutes before t");
    assert!(*ts <= t);
    let value = &got["data"]["result"][0]["value"];
    assert_eq!(value[0], t);
    assert_eq!(
        value[1]
            .as_str()
            .expect("string")
            .parse::<f64>()
            .expect("number"),
        *v
    );
    // Grafana's "Save & test" query.
    let (status, got) = call(
        &server,
        "/api/v1/query",
        &[("query", "1+1".to_string()), ("time", t.to_string())],
    );
    assert_eq!(
        (status, &got["data"]),
        (200, &json!({ "resultType": "scalar", "result": [t, "2"] }))
    );
}

#[test]
fn labels_values_series_and_buildinfo() {
    let server = start();
    let (status, got) = call(&server, "/api/v1/labels", &[]);
    assert_eq!(status, 200);
    let names = got["data"].as_array().expect("names");
    assert!(
        names.contains(&json!("__name__")) && names.contains(&json!("device")),
        "{got}"
    );
    let (_, got) = get_json(&server, "/api/v1/label/device/values", &[]);
    assert_eq!(
        got["data"],
        json!(["dev00786", "gateway-7:temp.sensor-000123", "sensor-1"])
    );
    let (_, got) = get_json(&server, "/api/v1/label/__name__/values", &[]);
    assert_eq!(got["data"], json!(["temp"]));
    let (_, got) = get_json(
        &server,
        "/api/v1/label/device/values",
        &[("match[]", r#"temp{device=~"s.*"}"#)],
    );
    assert_eq!(got["data"], json!(["sensor-1"]));
    let (status, got) = call(
        &server,
        "/api/v1/series",
        &[
            ("match[]", r#"temp{device="dev00786"}"#.to_string()),
            ("match[]", r#"{device=~"sensor.*"}"#.to_string()),
        ],
    );
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["data"], json!([labels("dev00786"), labels("sensor-1")]));
    let (status, got) = get_json(&server, "/api/v1/status/buildinfo", &[]);
    assert_eq!(status, 200);
    assert!(got["data"]["version"]
        .as_str()
        .expect("version")
        .starts_with("2."));
}

#[test]
fn unsupported_promql_is_bad_data() {
    let server = start();
    for (q, what) in [
        ("rate(temp[5m])", "functions and aggregations"),
        ("sum(temp)", "functions and aggregations"),
        ("temp[5m]", "range vectors"),
        ("temp * 2", "operators"),
        (r#"temp{device=~"("}"#, "invalid regular expression"),
        (r#"{device=~".*"}"#, "empty string"),
    ] {
        let (status, got) = call(
            &server,
            "/api/v1/query_range",
            &range(q, H, H + 3600, "60", None),
        );
        assert_eq!(status, 400, "{q}: {got}");
        assert_eq!(got["status"], "error");
        assert_eq!(got["errorType"], "bad_data");
        let error = got["error"].as_str().expect("error");
        assert!(error.starts_with("unsupported PromQL: "), "{q}: {error}");
        assert!(error.contains(what), "{q}: {error}");
    }
    for (params, what) in [
        (range("temp", H, H + 3600, "0", None), "positive"),
        (range("temp", H, H + 86_400, "1", None), "11,000 points"),
        (range("temp", H, H + 40 * 86_400, "3600", None), "31 days"),
        (range("temp", H + 10, H, "60", None), "before start"),
        (vec![("query", "temp".to_string())], "`start`"),
    ] {
        let (status, got) = call(&server, "/api/v1/query_range", &params);
        assert_eq!(
            (status, &got["errorType"]),
            (400, &json!("bad_data")),
            "{params:?}: {got}"
        );
        assert!(
            got["error"].as_str().expect("error").contains(what),
            "{params:?}: {got}"
        );
    }
}

#[test]
fn room_selector_needs_the_room_view() {
    let server = start();
    let (status, got) = call(
        &server,
        "/api/v1/query_range",
        &range(r#"temp{room="room031"}"#, H, H + 3600, "60", None),
    );
    if sensor::tables::all_tables()
        .iter()
        .any(|t| t.name == "ts_room_latest")
    {
        assert_eq!(status, 200, "{got}");
        for series in got["data"]["result"].as_array().expect("result") {
            assert_eq!(series["metric"]["room"], "room031", "{got}");
        }
    } else {
        assert_eq!(
            (status, &got["errorType"]),
            (501, &json!("unavailable")),
            "{got}"
        );
        assert!(got["error"]
            .as_str()
            .expect("error")
            .contains("ts_room_latest"));
    }
}
