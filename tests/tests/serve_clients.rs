//! Real clients against `hourglass serve`: the Prometheus API client from PyPI, and the
//! built-in page in headless Chromium. They need tools outside Cargo, which
//! `scripts/test-tools.sh` installs (`make test` runs it): Debian's `chromium` and a venv
//! `.services/clients` with `prometheus-api-client`. `HOURGLASS_PYTHON` and
//! `HOURGLASS_CHROMIUM` point the tests at other installs. A missing tool fails the tests;
//! outside CI, `HOURGLASS_SKIP_CLIENTS=1` skips them instead.
//!
//! The page test keeps its screenshots in `target/serve-artifacts/`.

mod serve_common;

use std::process::Command;

use serde_json::Value;
use serve_common::{chromium, cli_points_per_step, skipped, start, tool, H};

#[test]
fn prometheus_api_client_gets_the_cli_points() {
    if skipped() {
        return;
    }
    let python = tool(
        "HOURGLASS_PYTHON",
        e2e::repo_root().join(".services/clients/bin/python"),
        "Python with prometheus-api-client",
    );
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
            .unwrap_or_else(|e| panic!("running {}: {e}", python.display()));
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
        let want = cli_points_per_step(device, start_ts, end_ts, step);
        assert!(want.len() >= 8, "{want:?}");
        assert_eq!(got, want, "{device} at step {step}");
    }
}

#[test]
fn page_draws_curves_and_the_room_table_in_chromium() {
    if skipped() {
        return;
    }
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
