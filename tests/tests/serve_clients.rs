//! Real clients against `hourglass serve`: the Prometheus API client from PyPI, and the
//! built-in page in headless Chromium. They need tools outside Cargo, so they are `#[ignore]`d;
//! run them with
//!
//! ```sh
//! python3 -m venv /tmp/promvenv && /tmp/promvenv/bin/pip install prometheus-api-client
//! apt-get install -y chromium
//! HOURGLASS_PYTHON=/tmp/promvenv/bin/python cargo test -p hourglass-tests --test serve_clients -- --ignored
//! ```
//!
//! The page test keeps its screenshots in `target/serve-artifacts/`.

mod serve_common;

use std::process::Command;

use serde_json::Value;
use serve_common::{cli, start, H};

/// The CLI's points of `device` in `[from, to)`.
fn cli_points(device: &str, from: i64, to: i64) -> Vec<(i64, f64)> {
    let out: Value = serde_json::from_str(&cli(&[
        "query",
        "curve",
        "--device",
        device,
        "--from",
        &from.to_string(),
        "--to",
        &to.to_string(),
        "--format",
        "json",
    ]))
    .expect("CLI JSON");
    serde_json::from_value(out["points"].clone()).expect("points")
}

#[test]
#[ignore = "needs Python with prometheus-api-client (HOURGLASS_PYTHON); see the module docs"]
fn prometheus_api_client_gets_the_cli_points() {
    let python = std::env::var("HOURGLASS_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = e2e::repo_root().join("tests/tests/serve_prom_client.py");
    let server = start();
    for (device, step) in [("dev00786", 300), ("sensor-1", 600), ("dev00786", 900)] {
        let (start_ts, end_ts) = (H, H + 7200);
        let out = Command::new(&python)
            .arg(&script)
            .args([
                server.url.as_str(),
                &format!("temp{{device=\"{device}\"}}"),
                &start_ts.to_string(),
                &end_ts.to_string(),
                &step.to_string(),
            ])
            .output()
            .unwrap_or_else(|e| panic!("running {python}: {e}"));
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let result: Value = serde_json::from_slice(&out.stdout).expect("JSON");
        let got: Vec<(i64, f64)> = result[0]["values"]
            .as_array()
            .expect("values")
            .iter()
            .map(|p| {
                let ts = p[0].as_f64().expect("ts") as i64;
                (ts, p[1].as_str().expect("value").parse().expect("number"))
            })
            .collect();
        // step >= 5 min: each point is the newest reading in (t - step, t].
        let points = cli_points(device, start_ts - step, end_ts + 1);
        let want: Vec<(i64, f64)> = (0..)
            .map(|k| start_ts + k * step)
            .take_while(|t| *t <= end_ts)
            .filter_map(|t| {
                points
                    .iter()
                    .rev()
                    .find(|(ts, _)| *ts <= t && *ts > t - step)
                    .map(|(_, v)| (t, *v))
            })
            .collect();
        assert!(want.len() >= 8, "{want:?}");
        assert_eq!(got, want, "{device} at step {step}");
    }
}

/// Runs headless Chromium on `url` with `args`, after the page's scripts had 10 s of virtual
/// time (they wait for the API's answers).
fn chromium(args: &[&str], url: &str) -> std::process::Output {
    let bin = std::env::var("HOURGLASS_CHROMIUM").unwrap_or_else(|_| "chromium".into());
    let profile = tempfile::tempdir().expect("profile dir");
    Command::new(&bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--no-first-run",
            "--hide-scrollbars",
            "--window-size=1200,900",
            "--virtual-time-budget=10000",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(url)
        .output()
        .unwrap_or_else(|e| panic!("running {bin}: {e}"))
}

#[test]
#[ignore = "needs Chromium (Debian package chromium); see the module docs"]
fn page_draws_curves_and_the_room_table_in_chromium() {
    let server = start();
    let artifacts = e2e::repo_root().join("target/serve-artifacts");
    std::fs::create_dir_all(&artifacts).expect("artifacts dir");
    for (view, must) in [
        (
            "device=dev00786",
            vec!["<canvas", "dev00786 avg", "readings from"],
        ),
        (
            "room=room031",
            // Which devices the room view holds is the room job's business (and its tests').
            vec!["<canvas", "id=\"room-table\"", "data-device=\""],
        ),
    ] {
        let url = format!("{}/#{view}", server.url);
        let out = chromium(&["--dump-dom"], &url);
        let dom = String::from_utf8_lossy(&out.stdout);
        for m in must {
            assert!(dom.contains(m), "{view}: no {m:?} in the page:\n{dom}");
        }
        assert!(
            !dom.contains("class=\"error\""),
            "{view}: the page shows an error:\n{dom}"
        );
        let png = artifacts.join(format!("page-{}.png", view.replace('=', "-")));
        let _ = std::fs::remove_file(&png);
        let out = chromium(&[&format!("--screenshot={}", png.display())], &url);
        let size = std::fs::metadata(&png).map(|m| m.len()).unwrap_or(0);
        assert!(
            size > 10_000,
            "{view}: no screenshot ({size} bytes): {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
