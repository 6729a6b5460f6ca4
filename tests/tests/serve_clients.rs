//! Real clients against `hourglass serve`: the Prometheus API client from PyPI, and the
//! built-in page in headless Chromium. They need tools outside Cargo, which
//! `scripts/test-tools.sh` installs (`make test` runs it): Debian's `chromium` and a venv
//! `.services/clients` with `prometheus-api-client`. `HOURGLASS_PYTHON` and
//! `HOURGLASS_CHROMIUM` point the tests at other installs. A missing tool fails the tests;
//! outside CI, `HOURGLASS_SKIP_CLIENTS=1` skips them instead.
//!
//! The page test keeps its screenshots in `target/serve-artifacts/`.

mod serve_common;

use std::path::PathBuf;
use std::process::Command;

use e2e::services::in_ci;
use serde_json::Value;
use serve_common::{cli_points_per_step, start, H};

/// Whether these tests are skipped: only outside CI, and only when asked to.
fn skipped() -> bool {
    let skip = !in_ci() && std::env::var("HOURGLASS_SKIP_CLIENTS").is_ok_and(|v| v == "1");
    if skip {
        eprintln!("HOURGLASS_SKIP_CLIENTS=1: skipping a test with a real client");
    }
    skip
}

/// The tool named by the environment variable `env`, else `default` (a path, or a command on
/// `PATH`); a panic saying how to install it when it is missing.
fn tool(env: &str, default: PathBuf, what: &str) -> PathBuf {
    let path = std::env::var_os(env).map_or(default, PathBuf::from);
    let found = if path.components().count() == 1 {
        // A bare command name: look it up on PATH.
        std::env::var_os("PATH")
            .is_some_and(|dirs| std::env::split_paths(&dirs).any(|d| d.join(&path).is_file()))
    } else {
        path.is_file()
    };
    assert!(
        found,
        "{what} not found at {} ({env}): run `scripts/test-tools.sh` (`make test` does){}",
        path.display(),
        if in_ci() {
            ""
        } else {
            ", or set HOURGLASS_SKIP_CLIENTS=1 to skip these tests"
        }
    );
    path
}

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

/// Runs headless Chromium on `url` with `args`, after the page's scripts had 10 s of virtual
/// time (they wait for the API's answers).
fn chromium(args: &[&str], url: &str) -> std::process::Output {
    let bin = tool("HOURGLASS_CHROMIUM", "chromium".into(), "Chromium");
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
        .unwrap_or_else(|e| panic!("running {}: {e}", bin.display()))
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
