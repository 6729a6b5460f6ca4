//! Shared by the `serve_*` scenarios: the replayed scenario store, a `hourglass serve` on a
//! copy of it (so servers and CLI queries never contend for the store's lock), and HTTP calls.

#![allow(dead_code)] // Each test file uses a different part.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};

use e2e::services::in_ci;
use e2e::{data, hourglass_command, hourglass_ok, NOW};

/// The recording's first hour, 2024-08-19T21:00:00Z; the scenario spans two hours.
pub const H: i64 = 1724101200;

/// A directory holding `store/`, the scenario replayed once per test process.
pub fn scenario() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir").keep();
        let input = data("scenario.jsonl");
        hourglass_ok(
            &dir,
            &["replay", input.to_str().expect("utf-8"), "--store", "store"],
        );
        dir
    })
}

/// Runs `hourglass args… --store store` on the scenario (one at a time: the store is locked
/// while open) and returns stdout.
pub fn cli(args: &[&str]) -> String {
    static LOCK: Mutex<()> = Mutex::new(());
    let _guard = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let mut all = args.to_vec();
    all.extend(["--store", "store"]);
    hourglass_ok(scenario(), &all)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create dir");
    for entry in std::fs::read_dir(from).expect("read dir") {
        let entry = entry.expect("dir entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy file");
        }
    }
}

/// A running `hourglass serve`, killed when dropped.
pub struct Server {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    /// Its scratch directory (holds `store/` for embedded servers).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What it has written on stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("serve.err")).unwrap_or_default()
    }
}

/// At each step `t` from `start` to `end` (included), the CLI's newest point of `device` in
/// `(t - step, t]`, where there is one: what a range query sampling by `step` answers.
pub fn cli_points_per_step(device: &str, start: i64, end: i64, step: i64) -> Vec<(i64, f64)> {
    let points = cli_points(device, start - step, end + 1);
    (0..)
        .map(|k| start + k * step)
        .take_while(|t| *t <= end)
        .filter_map(|t| {
            points
                .iter()
                .rev()
                .find(|(ts, _)| *ts <= t && *ts > t - step)
                .map(|(_, v)| (t, *v))
        })
        .collect()
}

/// The CLI's points of `device` in `[from, to)`.
pub fn cli_points(device: &str, from: i64, to: i64) -> Vec<(i64, f64)> {
    let out: serde_json::Value = serde_json::from_str(&cli(&[
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

/// Starts `hourglass serve` on a free port with `args`, in a scratch dir that holds a copy of
/// the scenario store at `store/` when `with_store`.
pub fn start_with(args: &[&str], with_store: bool) -> Server {
    start_limited(args, with_store, None)
}

/// As [`start_with`], with the server's file descriptor limit lowered to `fds` when set.
pub fn start_limited(args: &[&str], with_store: bool, fds: Option<u32>) -> Server {
    start_under(
        args,
        with_store,
        fds.map(|n| format!("ulimit -n {n}")).as_deref(),
    )
}

/// As [`start_with`], started by `sh -c "<ulimit> && exec hourglass serve …"` when `ulimit` is
/// set (`ulimit -n 64` lowers both limits, `ulimit -Sn 64` the soft one).
pub fn start_under(args: &[&str], with_store: bool, ulimit: Option<&str>) -> Server {
    let dir = tempfile::tempdir().expect("tempdir");
    if with_store {
        copy_dir(&scenario().join("store"), &dir.path().join("store"));
    }
    let (child, url) = spawn_serve(dir.path(), args, ulimit);
    Server { url, child, dir }
}

/// Starts `hourglass serve --listen 127.0.0.1:0 ARGS…` in `dir` (stderr to `dir/serve.err`),
/// first running `ulimit` in a shell if given, and returns it with the URL it announced
/// (`http://HOST:PORT`); panics with its stderr if it did not start.
pub fn spawn_serve(dir: &Path, args: &[&str], ulimit: Option<&str>) -> (Child, String) {
    let stderr = std::fs::File::create(dir.join("serve.err")).expect("stderr file");
    let mut command = match ulimit {
        None => hourglass_command(dir, NOW, &["serve"]),
        Some(ulimit) => {
            let mut c = std::process::Command::new("sh");
            c.arg("-c")
                .arg(format!("{ulimit} && exec \"$0\" \"$@\""))
                .arg(e2e::hourglass_bin())
                .arg("serve")
                .current_dir(dir)
                .env("HOURGLASS_NOW", NOW)
                .env_remove("HOURGLASS_LOG");
            c
        }
    };
    let mut child = command
        .args(["--listen", "127.0.0.1:0"])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("starting hourglass serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("reading serve's stdout");
    let Some(url) = line.trim().strip_prefix("listening on ") else {
        let _ = child.wait();
        panic!(
            "hourglass serve did not start: {line:?}\n{}",
            std::fs::read_to_string(dir.join("serve.err")).unwrap_or_default()
        );
    };
    (child, url.to_string())
}

/// `hourglass serve --store store` on a copy of the scenario.
pub fn start() -> Server {
    start_with(&["--store", "store"], true)
}

/// An agent that returns 4xx/5xx answers instead of failing on them.
pub fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

/// GET `path` with query `params`: (status, body text).
pub fn get(server: &Server, path: &str, params: &[(&str, &str)]) -> (u16, String) {
    let mut req = agent().get(format!("{}{path}", server.url));
    for (k, v) in params {
        req = req.query(*k, *v);
    }
    let mut res = req.call().expect("HTTP GET");
    let status = res.status().as_u16();
    (status, res.body_mut().read_to_string().expect("body"))
}

/// GET `path` and parse its JSON body: (status, value).
pub fn get_json(server: &Server, path: &str, params: &[(&str, &str)]) -> (u16, serde_json::Value) {
    let (status, body) = get(server, path, params);
    let value = serde_json::from_str(&body).unwrap_or_else(|e| {
        panic!("{path} {params:?} answered {status} with non-JSON ({e}): {body}")
    });
    (status, value)
}

/// POST `params` as a form to `path` and parse the JSON answer.
pub fn post_form(server: &Server, path: &str, params: &[(&str, &str)]) -> (u16, serde_json::Value) {
    let mut res = agent()
        .post(format!("{}{path}", server.url))
        .send_form(params.iter().copied())
        .expect("HTTP POST");
    let status = res.status().as_u16();
    let body = res.body_mut().read_to_string().expect("body");
    (status, serde_json::from_str(&body).expect("JSON body"))
}

/// The `error` message of a JSON error answer.
pub fn error_of(v: &serde_json::Value) -> &str {
    v["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error message in {v}"))
}

/// Whether a test with a real client (Chromium, a Python client) is skipped: only outside CI,
/// and only when asked to (`HOURGLASS_SKIP_CLIENTS=1`).
pub fn skipped() -> bool {
    let skip = !in_ci() && std::env::var("HOURGLASS_SKIP_CLIENTS").is_ok_and(|v| v == "1");
    if skip {
        eprintln!("HOURGLASS_SKIP_CLIENTS=1: skipping a test with a real client");
    }
    skip
}

/// The tool named by the environment variable `env`, else `default` (a path, or a command on
/// `PATH`); a panic saying how to install it when it is missing.
pub fn tool(env: &str, default: PathBuf, what: &str) -> PathBuf {
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

/// Runs headless Chromium on `url` with `args`, after the page's scripts had 10 s of virtual
/// time (they wait for the API's answers).
pub fn chromium(args: &[&str], url: &str) -> std::process::Output {
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
