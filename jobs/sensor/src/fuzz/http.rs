//! The HTTP target: requests with mutated paths, parameters and form bodies, sent to the real
//! dashboard server over a small embedded store, are answered with a 2xx or 4xx status (a 400
//! with a message), never a 5xx or a dropped connection.

use std::collections::BTreeMap;
use std::io::{Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use crate::codec::hourly::{hour_start, wide_put};
use crate::codec::narrow::narrow_put;
use crate::codec::room::room_put;
use crate::config::JobConfig;
use crate::decode::decode_line;
use crate::summary::HourSummary;
use pipeline::config::StoreConfig;

use super::{lines, run, Verdict};
use crate::serve::DashboardServer;
use pipeline::store::Backend;

/// "Now" for the store's TTLs: the day after the scenario, as the end-to-end tests fix it.
const NOW_MS: i64 = 1_724_200_000_000;
/// A request that gets no answer in this long is reported as hanging.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(120);

/// Requests the serve tests send, plus the mutation engine's splices between them.
pub(super) fn corpus() -> Vec<Vec<u8>> {
    lines(include_bytes!("../../../fuzz-corpus/http.txt"))
}

/// The scenario's readings in a new embedded store: narrow rows, wide rows with summaries and
/// the room view, as a replay writes them.
fn scenario_store(dir: &std::path::Path) -> Backend {
    let options = sinks::OpenOptions {
        clock: Arc::new(|| NOW_MS),
        ..sinks::OpenOptions::default()
    };
    let store = StoreConfig {
        dir: dir.to_path_buf(),
        ..StoreConfig::default()
    };
    let backend =
        sinks::open(&store, &crate::tables::all_tables(), &options).expect("a new embedded store");
    let mut puts = Vec::new();
    let mut hours: BTreeMap<(String, i64), Vec<(i64, f64)>> = BTreeMap::new();
    let mut latest: BTreeMap<String, (i64, f64, String)> = BTreeMap::new();
    let scenario = include_bytes!("../../../../tests/data/scenario.jsonl");
    for (n, line) in scenario.split(|&b| b == b'\n').enumerate() {
        let Ok(r) = decode_line(n as u64 + 1, line, "temp") else {
            continue;
        };
        puts.push(narrow_put(JobConfig::default().key_scheme, &r));
        let points = hours
            .entry((r.device.clone(), hour_start(r.ts)))
            .or_default();
        if !points.iter().any(|p| p.0 == r.ts) {
            points.push((r.ts, r.value));
        }
        if let Some(room) = r.room() {
            if latest.get(&r.device).is_none_or(|l| l.0 <= r.ts) {
                latest.insert(r.device.clone(), (r.ts, r.value, room));
            }
        }
    }
    for ((device, hour), mut points) in hours {
        points.sort_by_key(|p| p.0);
        let summary = HourSummary::of_points(&points);
        puts.push(wide_put(&device, hour, &points, summary.as_ref()));
    }
    for (device, (ts, value, room)) in latest {
        // As the view writes a device whose reading reported its room.
        let value = crate::reading::format_value(value);
        puts.push(room_put(&room, &device, ts, value, Some(room.clone())));
    }
    let mut writer = backend.writer();
    writer.write(puts).expect("scenario rows written");
    writer.flush().expect("scenario rows flushed");
    backend
}

/// An input line as an HTTP request: `METHOD TARGET [BODY]`, the target percent-encoded where
/// a request line could not carry it, so the server sees the mutated bytes once decoded.
fn request(input: &[u8]) -> Vec<u8> {
    let (method, rest) = match input.iter().position(|&b| b == b' ') {
        Some(i) if input[..i].iter().all(u8::is_ascii_uppercase) && i > 0 => {
            (&input[..i], &input[i + 1..])
        }
        _ => (&b"GET"[..], input),
    };
    let (target, body) = match rest.iter().position(|&b| b == b' ') {
        Some(i) if method == b"POST" => (&rest[..i], &rest[i + 1..]),
        _ => (rest, &b""[..]),
    };
    let mut req = method.to_vec();
    req.push(b' ');
    if target.first() != Some(&b'/') {
        req.push(b'/');
    }
    // What a request line may carry as is; `%` stays raw so broken escapes reach the server.
    let raw = |b: u8| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/?%".contains(&b);
    for &b in target {
        if raw(b) {
            req.push(b);
        } else {
            req.extend(format!("%{b:02X}").bytes());
        }
    }
    req.extend_from_slice(b" HTTP/1.1\r\nHost: fuzz\r\nConnection: close\r\n");
    if method == b"POST" {
        req.extend(
            format!(
                "Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n",
                body.len()
            )
            .bytes(),
        );
    }
    req.extend_from_slice(b"\r\n");
    req.extend_from_slice(body);
    req
}

/// Sends `req` and returns the status code and body, or what went wrong.
fn send(addr: SocketAddr, req: &[u8]) -> Result<(u16, Vec<u8>), String> {
    let mut conn = TcpStream::connect(addr).map_err(|e| format!("cannot connect: {e}"))?;
    conn.set_read_timeout(Some(ANSWER_TIMEOUT))
        .map_err(|e| e.to_string())?;
    conn.write_all(req)
        .map_err(|e| format!("sending the request: {e}"))?;
    let mut answer = Vec::new();
    if let Err(e) = conn.read_to_end(&mut answer) {
        if answer.is_empty() {
            return Err(format!("no answer (a hang or a handler panic?): {e}"));
        }
    }
    if answer.is_empty() {
        return Err("connection closed without an answer: a handler panicked (see stderr)".into());
    }
    let status = answer
        .get(9..12)
        .and_then(|s| std::str::from_utf8(s).ok())
        .and_then(|s| s.parse::<u16>().ok())
        .ok_or_else(|| format!("not an HTTP answer: {:?}", String::from_utf8_lossy(&answer)))?;
    let body = answer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or_else(Vec::new, |i| answer[i + 4..].to_vec());
    Ok((status, body))
}

fn check(addr: SocketAddr, last: &std::path::Path, input: &[u8]) -> Verdict {
    let req = request(input);
    // An allocation failure aborts the process before any report: this file keeps the input.
    let _ = std::fs::write(last, &req);
    let (status, body) = send(addr, &req)?;
    let text = String::from_utf8_lossy(&body);
    let path = String::from_utf8_lossy(&req)
        .split(['?', ' '])
        .nth(1)
        .unwrap_or("")
        .to_string();
    match status {
        200..=299 | 404 | 405 => Ok(()),
        400 if !text.trim().is_empty() => Ok(()),
        400..=499 if status != 400 => Ok(()),
        // The first line names the problem (failures are grouped by it), the second the case.
        _ => Err(format!(
            "status {status}\n  {path}: {}",
            text.chars().take(300).collect::<String>()
        )),
    }
}

#[test]
fn http() {
    let dir = tempfile::tempdir().expect("tempdir");
    let backend = scenario_store(&dir.path().join("store"));
    let server = DashboardServer::start(
        "127.0.0.1:0",
        &backend,
        &JobConfig::default(),
        None,
        &pipeline::http_thread::HttpLimits::default(),
    )
    .expect("dashboard server");
    let last =
        std::env::temp_dir().join(format!("hourglass-fuzz-http-{}.last", std::process::id()));
    println!(
        "fuzz http: the request being sent is kept in {}",
        last.display()
    );
    run("fuzz::http::http", &corpus(), |input| {
        check(server.addr(), &last, input)
    });
    let _ = std::fs::remove_file(&last);
}

#[test]
fn requests_carry_any_bytes() {
    let req = request(b"POST /api/v1/query a b=%zz\xff");
    assert!(
        req.starts_with(b"POST /api/v1/query HTTP/1.1\r\n"),
        "{req:?}"
    );
    assert!(req.ends_with(b"\r\n\r\na b=%zz\xff"), "{req:?}");
    let req = request(b"api/v1/curve?device=d\xc3\xa9v x#y`");
    assert!(
        req.starts_with(b"GET /api/v1/curve?device=d%C3%A9v%20x%23y%60 HTTP/1.1\r\n"),
        "{}",
        String::from_utf8_lossy(&req)
    );
}
