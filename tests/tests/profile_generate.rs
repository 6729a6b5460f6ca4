//! `hourglass profile generate` end to end: the registry CSV imports with `hourglass tags
//! import`, the events are as many as asked, the same seed writes the same bytes, and every
//! line the generator did not make bad passes the decoder and the imported registry's checks.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use e2e::hourglass;
use profile::{check_tag, decode_event, EventLimits, TagDef};

const EVENTS: usize = 5_000;

/// Runs `profile generate` in `dir` with `seed`; returns the events' bytes and stderr.
fn generate(dir: &Path, seed: &str) -> (Vec<u8>, String) {
    let args = [
        "profile",
        "generate",
        "--users",
        "500",
        "--events",
        "5000",
        "--seed",
        seed,
        "--bad-ratio",
        "0.05",
        "--out",
        "events.jsonl",
        "--registry-out",
        "tags.csv",
    ];
    let out = hourglass(dir, &args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "profile generate failed:\n{stderr}");
    (
        std::fs::read(dir.join("events.jsonl")).expect("events written"),
        stderr,
    )
}

#[test]
fn generated_traffic_imports_decodes_and_repeats() {
    let (one, two, other) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let (events, stderr) = generate(one.path(), "7");
    let (again, _) = generate(two.path(), "7");
    let (different, _) = generate(other.path(), "8");
    assert!(events == again, "two runs of one seed differ");
    assert!(events != different, "another seed wrote the same events");
    let csv = std::fs::read(one.path().join("tags.csv")).unwrap();
    assert_eq!(csv, std::fs::read(two.path().join("tags.csv")).unwrap());
    assert_eq!(events.iter().filter(|&&b| b == b'\n').count(), EVENTS);
    assert!(stderr.contains("wrote 5000 events ("), "{stderr}");
    let bad: usize = stderr
        .split("wrote 5000 events (")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no bad count in {stderr}"));

    // The CSV imports whole into a fresh SQLite registry.
    let url = format!("sqlite://{}/reg/tags.sqlite", one.path().display());
    let out = hourglass(
        one.path(),
        &["tags", "import", "tags.csv", "--registry", &url],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tags import failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let count = profile::generate::registry().len();
    assert!(
        stdout.contains(&format!("imported {count} tags")),
        "{stdout}"
    );
    assert!(stdout.contains("0 refused"), "{stdout}");

    // Checked against the registry as stored, the bad lines are exactly those generated bad.
    let defs: HashMap<String, TagDef> = profile::open(&url)
        .unwrap()
        .list()
        .unwrap()
        .into_iter()
        .map(|t| (t.tag_code.clone(), t))
        .collect();
    assert_eq!(defs.len(), count);
    let gray = HashSet::new();
    let mut rejected = 0;
    for (n, raw) in events
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .enumerate()
    {
        let ok = match decode_event(n as u64 + 1, raw, &EventLimits::default()) {
            Err(_) => false,
            Ok(e) => e.tags.iter().all(|(code, v)| {
                check_tag(
                    defs.get(code),
                    code,
                    &e.user_id,
                    v,
                    &gray,
                    &EventLimits::default(),
                )
                .is_ok()
            }),
        };
        rejected += usize::from(!ok);
    }
    assert_eq!(
        rejected, bad,
        "lines rejected by the decoder or the registry"
    );
    assert!((100..400).contains(&bad), "{bad} bad of 5000 at 5%");
}

#[test]
fn nothing_to_write_and_bad_settings_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let out = hourglass(dir.path(), &["profile", "generate"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing to write"));
    let out = hourglass(
        dir.path(),
        &["profile", "generate", "--users", "0", "--out", "e.jsonl"],
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("users must be 1 to"), "{stderr}");
    assert!(
        !dir.path().join("e.jsonl").exists(),
        "no file for refused settings"
    );
}
