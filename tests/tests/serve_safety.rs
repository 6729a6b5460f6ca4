//! `hourglass serve`'s guard rails: bearer-token auth, 503 when the store is down, a clear
//! error when the store directory is locked, `/metrics`, `/healthz` and the built-in page.

mod serve_common;

use serve_common::{agent, get, get_json, start, start_with, Server, H};

fn status_with(server: &Server, path: &str, auth: Option<&str>) -> u16 {
    let mut req = agent().get(format!("{}{path}", server.url));
    if let Some(a) = auth {
        req = req.header("Authorization", a);
    }
    req.call().expect("HTTP GET").status().as_u16()
}

#[test]
fn token_guards_every_endpoint_but_healthz() {
    let dir = tempfile::tempdir().expect("tempdir");
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret-token\n").expect("token file");
    let server = start_with(
        &[
            "--store",
            "store",
            "--token-file",
            token_file.to_str().expect("utf-8"),
        ],
        true,
    );
    let hour = format!("/api/v1/hour?device=dev00786&hour={H}");
    let paths = [
        "/",
        "/assets/uPlot.iife.min.js",
        hour.as_str(),
        "/api/v1/devices",
        "/api/v1/room/room031",
        "/api/v1/labels",
        "/api/v1/status/buildinfo",
        "/metrics",
    ];
    for path in paths {
        assert_eq!(
            status_with(&server, path, None),
            401,
            "{path} without a token"
        );
        assert_eq!(
            status_with(&server, path, Some("Bearer wrong")),
            401,
            "{path} with a wrong token"
        );
        assert_eq!(
            status_with(&server, path, Some("s3cret-token")),
            401,
            "{path} without `Bearer `"
        );
        let ok = status_with(&server, path, Some("Bearer s3cret-token"));
        assert!(
            ok == 200 || (path.contains("room") && ok == 501),
            "{path} with the token: {ok}"
        );
    }
    assert_eq!(status_with(&server, "/healthz", None), 200);
}

#[test]
fn store_down_is_503_and_counted() {
    // Nothing listens on the port of a socket bound and dropped just now.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let server = start_with(&["--hbase", &format!("127.0.0.1:{port}")], false);
    let (status, got) = get_json(
        &server,
        "/api/v1/hour",
        &[("device", "dev00786"), ("hour", &H.to_string())],
    );
    assert_eq!(status, 503, "{got}");
    assert!(
        got["error"]
            .as_str()
            .expect("error")
            .starts_with("store unavailable"),
        "{got}"
    );
    let (status, got) = get_json(
        &server,
        "/api/v1/query",
        &[("query", r#"temp{device="dev00786"}"#)],
    );
    assert_eq!(
        (status, &got["errorType"]),
        (503, &serde_json::json!("unavailable")),
        "{got}"
    );
    let (_, metrics) = get(&server, "/metrics", &[]);
    assert!(
        metrics.contains("hourglass_serve_store_errors_total 2"),
        "{metrics}"
    );
    assert_eq!(get(&server, "/healthz", &[]).0, 200);
}

#[test]
fn a_locked_store_names_the_other_process() {
    let first = start();
    let out = e2e::hourglass_command(
        first.dir(),
        e2e::NOW,
        &["serve", "--store", "store", "--listen", "127.0.0.1:0"],
    )
    .output()
    .expect("running hourglass serve");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("locked"), "{stderr}");
    assert!(stderr.contains("hourglass replay"), "{stderr}");
}

#[test]
fn metrics_count_requests_per_endpoint() {
    let server = start();
    for _ in 0..3 {
        get(&server, "/api/v1/devices", &[]);
    }
    get(&server, "/api/v1/curve", &[("device", "a_b")]);
    let mut res = agent()
        .get(format!("{}/metrics", server.url))
        .call()
        .expect("GET /metrics");
    let content_type = res.headers()["content-type"]
        .to_str()
        .expect("ascii")
        .to_string();
    let text = res.body_mut().read_to_string().expect("body");
    assert!(
        content_type.starts_with("application/openmetrics-text"),
        "{content_type}"
    );
    assert!(
        text.contains(r#"hourglass_serve_requests_total{endpoint="/api/v1/devices",method="GET",status="200"} 3"#),
        "{text}"
    );
    assert!(
        text.contains(r#"hourglass_serve_requests_total{endpoint="/api/v1/curve",method="GET",status="400"} 1"#),
        "{text}"
    );
    assert!(
        text.contains(
            r#"hourglass_serve_request_duration_seconds_count{endpoint="/api/v1/devices"} 3"#
        ),
        "{text}"
    );
    assert!(
        text.contains("hourglass_serve_store_errors_total 0"),
        "{text}"
    );
    assert!(text.ends_with("# EOF\n"));
}

#[test]
fn page_and_chart_library_are_built_in() {
    let server = start();
    let (status, page) = get(&server, "/", &[]);
    assert_eq!(status, 200);
    assert!(page.contains(r#"<script src="/assets/uPlot.iife.min.js"></script>"#));
    assert!(
        page.contains("/api/v1/curve"),
        "the page draws curves from the JSON API"
    );
    assert!(
        !page.contains("https://"),
        "nothing is fetched from elsewhere"
    );
    let mut res = agent()
        .get(format!("{}/assets/uPlot.iife.min.js", server.url))
        .call()
        .expect("GET uPlot");
    assert_eq!(res.status().as_u16(), 200);
    assert!(res.headers()["content-type"]
        .to_str()
        .expect("ascii")
        .starts_with("text/javascript"));
    assert!(res
        .body_mut()
        .read_to_string()
        .expect("body")
        .contains("uPlot"));
    assert_eq!(get(&server, "/assets/uPlot.min.css", &[]).0, 200);
    assert_eq!(get(&server, "/nope", &[]).0, 404);
}
