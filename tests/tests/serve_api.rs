//! `hourglass serve`'s JSON API on the replayed scenario: answers equal the CLI's, downsampling
//! adds up, bad inputs get a 400 naming the problem, unknown devices an empty answer.

mod serve_common;

use serde_json::{json, Value};
use serve_common::{cli, error_of, get_json, start, H};

const DEVICES: [&str; 3] = ["dev00786", "gateway-7:temp.sensor-000123", "sensor-1"];

#[test]
fn curve_equals_the_cli() {
    let server = start();
    // Whole hours (from wide rows), partial hours (narrow) and an empty range.
    let ranges = [(H, H + 7200), (H + 1234, H + 5555), (H + 7200, H + 9000)];
    for device in DEVICES {
        for (from, to) in ranges {
            let (from, to) = (from.to_string(), to.to_string());
            let want: Value = serde_json::from_str(&cli(&[
                "query", "curve", "--device", device, "--from", &from, "--to", &to, "--format",
                "json",
            ]))
            .expect("CLI JSON");
            let (status, got) = get_json(
                &server,
                "/api/v1/curve",
                &[("device", device), ("from", &from), ("to", &to)],
            );
            assert_eq!(status, 200, "{got}");
            assert_eq!(got, want, "{device} [{from}, {to})");
        }
    }
    // RFC 3339 times answer the same as epoch seconds.
    let (_, a) = get_json(
        &server,
        "/api/v1/curve",
        &[
            ("device", "dev00786"),
            ("from", "2024-08-19T21:00:00Z"),
            ("to", "2024-08-19T22:00:00Z"),
        ],
    );
    let (_, b) = get_json(
        &server,
        "/api/v1/curve",
        &[
            ("device", "dev00786"),
            ("from", &H.to_string()),
            ("to", &(H + 3600).to_string()),
        ],
    );
    assert_eq!(a, b);
    assert!(!a["points"].as_array().expect("points").is_empty());
}

#[test]
fn step_downsamples_to_min_max_avg_per_bucket() {
    let server = start();
    let (from, to) = (H.to_string(), (H + 7200).to_string());
    let (_, raw) = get_json(
        &server,
        "/api/v1/curve",
        &[("device", "dev00786"), ("from", &from), ("to", &to)],
    );
    let points: Vec<(i64, f64)> = serde_json::from_value(raw["points"].clone()).expect("points");
    let (status, got) = get_json(
        &server,
        "/api/v1/curve",
        &[
            ("device", "dev00786"),
            ("from", &from),
            ("to", &to),
            ("step", "900"),
        ],
    );
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["step"], 900);
    let buckets = got["buckets"].as_array().expect("buckets");
    assert_eq!(buckets.len(), 8, "{got}");
    for b in buckets {
        let start = b["ts"].as_i64().expect("ts");
        let inside: Vec<f64> = points
            .iter()
            .filter(|(ts, _)| (start..start + 900).contains(ts))
            .map(|(_, v)| *v)
            .collect();
        let min = inside.iter().copied().fold(f64::INFINITY, f64::min);
        let max = inside.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let avg = inside.iter().sum::<f64>() / inside.len() as f64;
        assert_eq!(b["n"], inside.len(), "{b}");
        assert_eq!(b["min"].as_f64(), Some(min), "{b}");
        assert_eq!(b["max"].as_f64(), Some(max), "{b}");
        assert!((b["avg"].as_f64().expect("avg") - avg).abs() < 1e-9, "{b}");
    }
    let total: u64 = buckets.iter().map(|b| b["n"].as_u64().expect("n")).sum();
    assert_eq!(total as usize, points.len());
}

#[test]
fn hour_equals_the_cli_with_summary() {
    let server = start();
    for device in DEVICES {
        for at in [H + 10, H + 3600 + 42] {
            let at = at.to_string();
            let want: Value = serde_json::from_str(&cli(&[
                "query", "hour", "--device", device, "--hour", &at, "--format", "json",
            ]))
            .expect("CLI JSON");
            let (status, got) = get_json(
                &server,
                "/api/v1/hour",
                &[("device", device), ("hour", &at)],
            );
            assert_eq!(status, 200, "{got}");
            assert_eq!(got, want);
            assert!(got["summary"]["n"].as_u64().expect("summary") > 0, "{got}");
        }
    }
}

#[test]
fn latest_equals_the_cli() {
    let server = start();
    let want: Value = serde_json::from_str(&cli(&[
        "query", "latest", "--device", "sensor-1", "--format", "json",
    ]))
    .expect("CLI JSON");
    let (status, got) = get_json(&server, "/api/v1/latest", &[("device", "sensor-1")]);
    assert_eq!(status, 200);
    assert_eq!((&got["ts"], &got["value"]), (&want["ts"], &want["value"]));
    let (status, got) = get_json(&server, "/api/v1/latest", &[("device", "nobody")]);
    assert_eq!(
        (status, got),
        (
            200,
            json!({ "device": "nobody", "ts": null, "value": null })
        )
    );
}

#[test]
fn devices_are_listed_by_skip_scan() {
    let server = start();
    let (status, got) = get_json(&server, "/api/v1/devices", &[]);
    assert_eq!(status, 200);
    assert_eq!(got, json!({ "devices": DEVICES, "truncated": false }));
    let (_, got) = get_json(&server, "/api/v1/devices", &[("prefix", "s")]);
    assert_eq!(got, json!({ "devices": ["sensor-1"], "truncated": false }));
    let (_, got) = get_json(&server, "/api/v1/devices", &[("limit", "2")]);
    assert_eq!(got, json!({ "devices": &DEVICES[..2], "truncated": true }));
    let (_, got) = get_json(&server, "/api/v1/devices", &[("prefix", "zzz")]);
    assert_eq!(got, json!({ "devices": [], "truncated": false }));
}

#[test]
fn room_needs_the_room_view() {
    let server = start();
    let (status, got) = get_json(&server, "/api/v1/room/room031", &[]);
    if sensor::tables::all_tables()
        .iter()
        .any(|t| t.name == "ts_room_latest")
    {
        assert_eq!(status, 200, "{got}");
        assert_eq!(got["room"], "room031");
    } else {
        assert_eq!(status, 501, "{got}");
        assert!(error_of(&got).contains("ts_room_latest"), "{got}");
    }
    let (status, got) = get_json(&server, "/api/v1/room/room_1", &[]);
    assert_eq!(status, 400, "{got}");
}

#[test]
fn unknown_device_is_an_empty_answer() {
    let server = start();
    let (status, got) = get_json(
        &server,
        "/api/v1/curve",
        &[
            ("device", "dev99999"),
            ("from", &H.to_string()),
            ("to", &(H + 3600).to_string()),
        ],
    );
    assert_eq!((status, &got["points"]), (200, &json!([])));
    let (status, got) = get_json(
        &server,
        "/api/v1/hour",
        &[("device", "dev99999"), ("hour", &H.to_string())],
    );
    assert_eq!(
        (status, &got["points"], &got["summary"]),
        (200, &json!([]), &Value::Null)
    );
}

/// Path, query parameters, and what the error message must contain.
type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, &'a str);

#[test]
fn bad_parameters_are_400_with_a_message() {
    let server = start();
    let h = H.to_string();
    let h1 = (H + 3600).to_string();
    let cases: Vec<Case<'_>> = vec![
        (
            "/api/v1/curve",
            vec![("from", &h), ("to", &h1)],
            "missing query parameter `device`",
        ),
        (
            "/api/v1/curve",
            vec![("device", "dev00786"), ("to", &h1)],
            "`from`",
        ),
        (
            "/api/v1/curve",
            vec![("device", "a_b"), ("from", &h), ("to", &h1)],
            "contains '_'",
        ),
        (
            "/api/v1/curve",
            vec![("device", "dev00786"), ("from", "yesterday"), ("to", &h1)],
            "epoch seconds",
        ),
        (
            "/api/v1/curve",
            vec![("device", "dev00786"), ("from", &h1), ("to", &h)],
            "must be before",
        ),
        (
            "/api/v1/curve",
            vec![("device", "dev00786"), ("from", "0"), ("to", &h)],
            "limit of 31 days",
        ),
        (
            "/api/v1/curve",
            vec![
                ("device", "dev00786"),
                ("from", &h),
                ("to", &h1),
                ("step", "0"),
            ],
            "positive whole number",
        ),
        (
            "/api/v1/curve",
            vec![
                ("device", "dev00786"),
                ("from", "1724000000"),
                ("to", "1726000000"),
                ("step", "1"),
            ],
            "limit of 100000",
        ),
        (
            "/api/v1/hour",
            vec![("device", "dev00786")],
            "missing query parameter `hour`",
        ),
        (
            "/api/v1/hour",
            vec![("device", "dev00786"), ("hour", "noon")],
            "epoch seconds",
        ),
        ("/api/v1/devices", vec![("limit", "0")], "1 to 10000"),
        ("/api/v1/devices", vec![("limit", "many")], "1 to 10000"),
        ("/api/v1/devices", vec![("prefix", "a/b")], "prefix"),
        ("/api/v1/latest", vec![], "missing query parameter `device`"),
    ];
    for (path, params, message) in cases {
        let (status, got) = get_json(&server, path, &params);
        assert_eq!(status, 400, "{path} {params:?}: {got}");
        assert!(error_of(&got).contains(message), "{path} {params:?}: {got}");
    }
}
