//! Harness of the end-to-end scenarios: the real `hourglass` binary, scratch dirs, golden files.
//!
//! Golden files live in `tests/golden/`. To accept new outputs after an intended change, run
//! the tests with `HOURGLASS_BLESS=1` and review the diff of `tests/golden/`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// "Now" for every scenario run: 2024-08-21T00:26:40Z, two days after the recordings, so the
/// 90-day TTL keeps them visible and outputs do not depend on the day the tests run.
pub const NOW: &str = "1724200000";

/// Path of the `hourglass` binary, built once per test process with the same cargo.
pub fn hourglass_bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let run = escargot::CargoBuild::new()
            .package("hourglass-jobs")
            .bin("hourglass")
            .run()
            .expect("building the hourglass binary failed");
        run.path().to_path_buf()
    })
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// A recorded input under `tests/data/`.
pub fn data(name: &str) -> PathBuf {
    repo_root().join("tests/data").join(name)
}

/// Runs `hourglass args…` in `dir` with `HOURGLASS_NOW` fixed.
pub fn hourglass(dir: &Path, args: &[&str]) -> Output {
    Command::new(hourglass_bin())
        .args(args)
        .current_dir(dir)
        .env("HOURGLASS_NOW", NOW)
        .env_remove("HOURGLASS_LOG")
        .output()
        .expect("running hourglass failed")
}

/// Runs `hourglass args…` and returns its stdout, failing the test on a non-zero exit.
pub fn hourglass_ok(dir: &Path, args: &[&str]) -> String {
    let out = hourglass(dir, args);
    assert!(
        out.status.success(),
        "hourglass {args:?} failed ({}):\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("stdout is UTF-8")
}

/// Compares `actual` with `tests/golden/<name>`, or writes it there with `HOURGLASS_BLESS=1`.
pub fn assert_golden(name: &str, actual: &str) {
    let path = repo_root().join("tests/golden").join(name);
    if std::env::var_os("HOURGLASS_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().expect("golden dir")).expect("create golden dir");
        std::fs::write(&path, actual).expect("write golden file");
        return;
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "missing golden file {} ({e}); run with HOURGLASS_BLESS=1 to create it",
            path.display()
        )
    });
    if expected != actual {
        let first = expected
            .lines()
            .zip(actual.lines())
            .position(|(e, a)| e != a)
            .unwrap_or_else(|| expected.lines().count().min(actual.lines().count()));
        panic!(
            "{name} differs from its golden file at line {}:\n  expected: {:?}\n  actual:   {:?}\n\
             (expected {} lines, got {}; HOURGLASS_BLESS=1 accepts the new output)",
            first + 1,
            expected.lines().nth(first),
            actual.lines().nth(first),
            expected.lines().count(),
            actual.lines().count()
        );
    }
}

/// Reads a JSON Lines file into values (empty if the file does not exist).
pub fn read_jsonl(path: &Path) -> Vec<serde_json::Value> {
    match std::fs::read_to_string(path) {
        Ok(text) => text
            .lines()
            .map(|l| serde_json::from_str(l).expect("JSON Lines output is valid JSON"))
            .collect(),
        Err(_) => Vec::new(),
    }
}
