//! `hourglass serve`'s guard rails: bearer-token auth, 503 when the store is down, two
//! servers of one store, `/metrics`, `/healthz` and the built-in page;
//! hostile parameters, handler panics, idle and slow connections, the connection limit and the
//! open-file limit.

mod serve_common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serve_common::{
    agent, error_of, get, get_json, start, start_limited, start_under, start_with, Server, H,
};

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
        for scheme in ["Bearer", "bearer", "BEARER"] {
            let ok = status_with(&server, path, Some(&format!("{scheme} s3cret-token")));
            assert!(
                ok == 200 || (path.contains("room") && ok == 501),
                "{path} with the token after {scheme:?}: {ok}"
            );
        }
    }
    assert_eq!(status_with(&server, "/healthz", None), 200);
}

#[test]
fn store_down_is_503_and_counted() {
    // Nothing listens on the ports of sockets bound and dropped just now: neither gateway
    // (reads go through Thrift2, whose default port 9091 may well have a live gateway).
    let bind = || std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
    let (one, two) = (bind(), bind());
    let addr = |l: &std::net::TcpListener| l.local_addr().expect("address").to_string();
    let (thrift1, thrift2) = (addr(&one), addr(&two));
    drop((one, two));
    let server = start_with(&["--hbase", &thrift1, "--thrift2", &thrift2], false);
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

/// `serve` opens the embedded store read-only, on a private snapshot, so it takes no lock: a
/// second `serve` of the same directory starts and answers the same as the first (it used to
/// fail with "locked" while the first ran).
#[test]
fn two_serves_read_one_store() {
    use std::io::BufRead;
    let first = start();
    let mut second = e2e::hourglass_command(
        first.dir(),
        e2e::NOW,
        &["serve", "--store", "store", "--listen", "127.0.0.1:0"],
    )
    .stdout(std::process::Stdio::piped())
    .stderr(std::process::Stdio::null())
    .spawn()
    .expect("running hourglass serve");
    let mut line = String::new();
    std::io::BufReader::new(second.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("reading serve's stdout");
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .map(str::to_string);
    let answer = url.as_ref().map(|url| {
        agent()
            .get(format!("{url}/api/v1/devices"))
            .call()
            .expect("GET /api/v1/devices")
            .body_mut()
            .read_to_string()
            .expect("body")
    });
    let _ = second.kill();
    let _ = second.wait();
    let answer = answer.unwrap_or_else(|| panic!("the second serve did not start: {line:?}"));
    let (status, expected) = get(&first, "/api/v1/devices", &[]);
    assert_eq!(status, 200, "{expected}");
    assert_eq!(answer, expected);
    assert!(expected.contains("dev00786"), "{expected}");
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

/// A request's path and parameters, and what its 400 must name.
type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);

/// Requests that once made the server allocate without bound and abort: each is now a 400
/// naming the limit, and the server answers the next request.
#[test]
fn hostile_numbers_are_400s_naming_the_limit() {
    let server = start();
    let sel = r#"temp{device="dev00786"}"#;
    let h = H.to_string();
    let h_end = (H + 1800).to_string();
    let cases: &[Case<'_>] = &[
        (
            "/api/v1/curve",
            &[
                ("device", "dev00786"),
                ("from", "9223372036854775800"),
                ("to", "9223372036854775807"),
            ],
            "253402300799",
        ),
        (
            "/api/v1/curve",
            &[
                ("device", "dev00786"),
                ("from", "-9223372036854775808"),
                ("to", "9223372036854775807"),
            ],
            "253402300799",
        ),
        (
            "/api/v1/curve",
            &[
                ("device", "dev00786"),
                ("from", "-62167219200"),
                ("to", "253402300799"),
            ],
            "31 days",
        ),
        (
            "/api/v1/curve",
            &[
                ("device", "dev00786"),
                ("from", &h),
                ("to", &h_end),
                ("step", "9223372036854775807"),
            ],
            "31 days",
        ),
        (
            "/api/v1/hour",
            &[("device", "dev00786"), ("hour", "-9223372036854775808")],
            "253402300799",
        ),
        (
            "/api/v1/query_range",
            &[
                ("query", sel),
                ("start", &h),
                ("end", &h_end),
                ("step", "1e300"),
            ],
            "step",
        ),
        (
            "/api/v1/query_range",
            &[
                ("query", sel),
                ("start", "-1e19"),
                ("end", "9e18"),
                ("step", "1e16"),
            ],
            "253402300799",
        ),
        (
            "/api/v1/query",
            &[("query", sel), ("time", "-1e300")],
            "253402300799",
        ),
        (
            "/api/v1/query",
            &[("query", sel), ("time", "NaN")],
            "253402300799",
        ),
        (
            "/api/v1/query",
            &[("query", sel), ("time", &h), ("lookback_delta", "1e15")],
            "lookback_delta",
        ),
        (
            "/api/v1/query",
            &[("query", sel), ("time", &h), ("lookback_delta", "3e10")],
            "86400",
        ),
        (
            "/api/v1/query_range",
            &[
                ("query", sel),
                ("start", &h),
                ("end", &h_end),
                ("step", "60"),
                ("lookback_delta", "99999999999y"),
            ],
            "lookback_delta",
        ),
    ];
    for (path, params, limit) in cases {
        let (status, got) = get_json(&server, path, params);
        assert_eq!(status, 400, "{path} {params:?}: {got}");
        assert!(error_of(&got).contains(limit), "{path} {params:?}: {got}");
    }
    let (status, got) = get_json(
        &server,
        "/api/v1/curve",
        &[("device", "dev00786"), ("from", &h), ("to", &h_end)],
    );
    assert_eq!(status, 200, "{got}");
    assert!(!got["points"].as_array().expect("points").is_empty());
}

#[test]
fn a_handler_panic_is_a_500_and_the_server_goes_on() {
    let server = start();
    for place in ["async", "blocking"] {
        let (status, got) = get_json(&server, "/debug/panic", &[("in", place)]);
        assert_eq!(status, 500, "{place}: {got}");
        assert!(error_of(&got).contains("please report"), "{place}: {got}");
        let (status, _) = get(&server, "/api/v1/devices", &[]);
        assert_eq!(status, 200, "after a panic in {place}");
    }
}

/// `--http-request-timeout 1`: a handler still working after a second is answered 503, naming
/// the flag, and the server goes on; a quicker one is answered as usual.
#[test]
fn a_request_past_the_request_timeout_is_a_503_and_the_server_goes_on() {
    let server = start_with(&["--store", "store", "--http-request-timeout", "1"], true);
    let (status, body) = get(&server, "/debug/sleep", &[("ms", "10")]);
    assert_eq!((status, body.as_str()), (200, "slept\n"));
    let (status, got) = get_json(&server, "/debug/sleep", &[("ms", "60000")]);
    assert_eq!(status, 503, "{got}");
    assert!(error_of(&got).contains("--http-request-timeout"), "{got}");
    assert_eq!(got["errorType"], "timeout", "{got}");
    let (status, _) = get(&server, "/api/v1/devices", &[]);
    assert_eq!(status, 200, "after a timed-out request");
}

fn limited_server(extra: &[&str]) -> Server {
    limited_server_with_fds(extra, None)
}

fn limited_server_with_fds(extra: &[&str], fds: Option<u32>) -> Server {
    let mut args = vec![
        "--store",
        "store",
        "--http-max-connections",
        "4",
        "--http-header-timeout",
        "1",
        "--http-idle-timeout",
        "1",
    ];
    args.extend(extra);
    start_limited(&args, true, fds)
}

fn addr(server: &Server) -> String {
    server
        .url
        .strip_prefix("http://")
        .expect("http URL")
        .to_string()
}

#[test]
fn idle_connections_beyond_the_limit_do_not_starve_a_request() {
    // Fewer file descriptors than idle connections: without a limit below it, the server
    // runs out of descriptors and never accepts the normal request.
    let server = limited_server_with_fds(&[], Some(64));
    let idle: Vec<TcpStream> = (0..80)
        .map(|_| TcpStream::connect(addr(&server)).expect("connect"))
        .collect();
    let patient = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build();
    let agent: ureq::Agent = patient.into();
    let res = agent
        .get(format!("{}/api/v1/devices", server.url))
        .call()
        .expect("a normal request is answered once idle connections are closed");
    assert_eq!(res.status().as_u16(), 200);
    drop(idle);
}

/// Reads `stream` until the server closes it, trickling a header byte between reads so that
/// the connection is never idle; false if it is still open after 30 s.
fn closed_by_server(mut stream: TcpStream, trickle: bool) -> bool {
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .expect("read timeout");
    let mut buf = [0u8; 1024];
    for _ in 0..150 {
        if trickle && stream.write_all(b"X").is_err() {
            return true;
        }
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return true,
        }
    }
    false
}

#[test]
fn a_slowloris_connection_is_closed() {
    // Header timeout 1 s; the byte sent every 200 ms keeps the idle timeout from acting.
    let server = limited_server(&[]);
    let mut stream = TcpStream::connect(addr(&server)).expect("connect");
    stream
        .write_all(b"GET /api/v1/devices HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .expect("partial headers");
    assert!(
        closed_by_server(stream, true),
        "a client sending its headers a byte at a time kept the connection 30 s"
    );
    assert_eq!(get(&server, "/healthz", &[]).0, 200);
}

#[test]
fn an_idle_keep_alive_connection_is_closed() {
    let server = limited_server(&[]);
    let mut stream = TcpStream::connect(addr(&server)).expect("connect");
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .expect("request");
    assert!(
        closed_by_server(stream, false),
        "an idle keep-alive connection stayed open 30 s"
    );
}

/// A connection that has sent a request line and one header of a request, and nothing more.
fn slow_client(server: &Server) -> TcpStream {
    let mut stream = TcpStream::connect(addr(server)).expect("connect");
    stream
        .write_all(b"GET /api/v1/devices HTTP/1.1\r\nHost: x\r\n")
        .expect("partial head");
    stream
}

/// Whether the server has closed `stream`: its end (or an answer, or a reset) is there within
/// `wait`.
fn closed_within(stream: &mut TcpStream, wait: Duration) -> bool {
    stream.set_read_timeout(Some(wait)).expect("read timeout");
    let mut buf = [0u8; 1024];
    match stream.read(&mut buf) {
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
        // Its end (0 bytes), or an answer (such as 408) before it.
        Ok(_end_or_answer) => true,
    }
}

/// An agent that waits up to 30 s for an answer.
fn patient_agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .build()
        .into()
}

#[test]
fn a_normal_request_is_answered_while_slow_clients_fill_the_connection_limit() {
    // Four slow clients hold the four connections the server allows, and their header deadline
    // is a minute away: the normal request gets in by closing the one that has waited longest.
    let server = start_with(
        &[
            "--store",
            "store",
            "--http-max-connections",
            "4",
            "--http-header-timeout",
            "60",
            "--http-idle-timeout",
            "60",
        ],
        true,
    );
    let mut slow: Vec<TcpStream> = (0..4).map(|_| slow_client(&server)).collect();
    let mut res = patient_agent()
        .get(format!("{}/api/v1/devices", server.url))
        .call()
        .expect("a normal request is answered beside slow clients at the connection limit");
    assert_eq!(res.status().as_u16(), 200);
    let body = res.body_mut().read_to_string().expect("body");
    assert!(body.contains("dev"), "{body}");
    assert!(
        closed_within(&mut slow[0], Duration::from_secs(5)),
        "the oldest slow client is still open"
    );
    for (k, stream) in slow.iter_mut().enumerate().skip(1) {
        assert!(
            !closed_within(stream, Duration::from_millis(200)),
            "slow client {k} was closed: only the oldest had to make room"
        );
    }
}

#[test]
fn requests_being_answered_are_never_closed_to_make_room() {
    // Both connections the server allows are answering a request (2 s each): a third waits for
    // one of them instead of cutting it.
    let server = start_with(&["--store", "store", "--http-max-connections", "2"], true);
    let sleepers: Vec<_> = (0..2)
        .map(|_| {
            let url = format!("{}/debug/sleep?ms=2000", server.url);
            std::thread::spawn(move || {
                let mut res = patient_agent().get(url).call().expect("sleeping request");
                (
                    res.status().as_u16(),
                    res.body_mut().read_to_string().expect("body"),
                )
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    let res = patient_agent()
        .get(format!("{}/healthz", server.url))
        .call()
        .expect("the third request is answered once a connection is free");
    assert_eq!(res.status().as_u16(), 200);
    for s in sleepers {
        let (status, body) = s.join().expect("sleeper thread");
        assert_eq!((status, body.as_str()), (200, "slept\n"));
    }
}

/// The soft and hard `Max open files` of process `pid` (`None` for unlimited).
fn open_file_limits(pid: &str) -> (Option<u64>, Option<u64>) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("limits");
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("Max open files line");
    let mut values = line.split_whitespace().skip(3).map(|v| v.parse().ok());
    (values.next().flatten(), values.next().flatten())
}

#[test]
fn serve_raises_its_soft_open_file_limit_to_the_hard_one() {
    let (_, hard) = open_file_limits("self");
    let server = start_under(&["--store", "store"], true, Some("ulimit -Sn 64"));
    assert_eq!(get(&server, "/healthz", &[]).0, 200);
    let (soft, server_hard) = open_file_limits(&server.pid().to_string());
    assert_eq!(server_hard, hard, "the hard limit is left as it was");
    match hard {
        Some(hard) if hard > 64 => assert_eq!(soft, Some(hard), "{}", server.stderr()),
        // Unlimited: raised to what its connections and the store need.
        None => assert!(soft.is_some_and(|s| s > 64), "{soft:?}"),
        Some(_) => {}
    }
}

#[test]
fn serve_says_when_the_open_file_limit_holds_fewer_connections_than_asked() {
    // Both limits at 64: the default 2,048 connections cannot be held; it serves 32 and says so.
    let server = start_under(&["--store", "store"], true, Some("ulimit -n 64"));
    assert_eq!(get(&server, "/healthz", &[]).0, 200);
    let stderr = server.stderr();
    assert!(
        stderr.contains("open-file limit (ulimit -n) is 64")
            && stderr.contains("serving at most 32 connections")
            && stderr.contains("--http-max-connections 2048"),
        "{stderr}"
    );
}
