//! A damaged embedded store: read-only commands report the damage and change nothing, writing
//! commands refuse it unless told to `--recover`, and read-only commands never create a store.

use std::path::{Path, PathBuf};

use e2e::{hourglass, hourglass_ok};

/// Replays generated traffic into `dir/store` and returns the store's directory.
fn replayed_store(dir: &Path) -> PathBuf {
    hourglass_ok(
        dir,
        &[
            "generate",
            "--devices",
            "20",
            "--duration",
            "2h",
            "--out",
            "in.jsonl",
        ],
    );
    hourglass_ok(dir, &["replay", "in.jsonl", "--store", "store", "--quiet"]);
    dir.join("store")
}

/// Flips one bit in the middle of the journal's first write batch; returns the journal's bytes.
///
/// The first batch, not the middle of the file: a damaged *last* batch is what a crash in the
/// middle of a write leaves (a torn tail), which recovery drops by design with a warning, and
/// how the replay's writes fall into batches varies from run to run (in some runs the middle of
/// the file was in the last batch, and the test failed).
fn flip_a_bit(store: &Path) -> Vec<u8> {
    let path = store.join("0.jnl");
    let mut bytes = std::fs::read(&path).unwrap();
    // A batch ends with its checksum and the magic `FJL\x03` (fjall `journal/entry.rs`).
    let first_end = bytes
        .windows(4)
        .position(|w| w == b"FJL\x03")
        .expect("a whole write batch in the journal")
        + 4;
    assert!(
        bytes[first_end..].iter().any(|&b| b != 0),
        "the journal holds one write batch: no later write for the damage to take with it"
    );
    bytes[first_end / 2] ^= 0x10;
    std::fs::write(&path, &bytes).unwrap();
    bytes
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_damaged_journal_is_reported_left_unchanged_and_recovered_only_when_asked() {
    let tmp = tempfile::tempdir().unwrap();
    let store = replayed_store(tmp.path());
    let damaged = flip_a_bit(&store);

    let dump = hourglass(
        tmp.path(),
        &["tables", "dump", "ts_metric", "--store", "store"],
    );
    let err = stderr(&dump);
    assert!(!dump.status.success(), "dump of a damaged store succeeded");
    assert!(err.contains("damaged at byte"), "{err}");
    assert!(err.contains("intact write batches"), "{err}");
    assert_eq!(std::fs::read(store.join("0.jnl")).unwrap(), damaged);

    let replay = hourglass(tmp.path(), &["replay", "in.jsonl", "--store", "store"]);
    let err = stderr(&replay);
    assert!(!replay.status.success(), "replay into a damaged store ran");
    assert!(err.contains("--recover"), "{err}");
    assert_eq!(std::fs::read(store.join("0.jnl")).unwrap(), damaged);

    let recover = hourglass(
        tmp.path(),
        &["replay", "in.jsonl", "--store", "store", "--recover"],
    );
    let err = stderr(&recover);
    assert!(recover.status.success(), "{err}");
    assert!(err.contains("dropped"), "{err}");
    assert!(err.contains("cells"), "{err}");
    let dump = hourglass_ok(
        tmp.path(),
        &["tables", "dump", "ts_metric", "--store", "store"],
    );
    assert!(!dump.is_empty());
}

/// Every file under `dir` with its length and a hash of its bytes, to compare a directory
/// before and after.
fn contents(dir: &Path) -> Vec<(PathBuf, usize, u64)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(contents(&path));
        } else {
            let bytes = std::fs::read(&path).unwrap();
            let mut hash = std::collections::hash_map::DefaultHasher::new();
            std::hash::Hash::hash(&bytes, &mut hash);
            out.push((path, bytes.len(), std::hash::Hasher::finish(&hash)));
        }
    }
    out.sort();
    out
}

#[test]
fn read_only_commands_leave_a_directory_that_is_not_a_store_unchanged() {
    let tmp = tempfile::tempdir().unwrap();
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("notes.txt"), "not a store").unwrap();
    let before = contents(&other);
    for args in [
        &["query", "latest", "--device", "dev-001", "--store", "other"][..],
        &["tables", "dump", "ts_metric", "--store", "other"],
    ] {
        let out = hourglass(tmp.path(), args);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(
            stderr(&out).contains("no embedded store"),
            "{}",
            stderr(&out)
        );
        assert_eq!(contents(&other), before, "{args:?} changed the directory");
    }
}

/// A replay pointed at a directory of other files (a mistyped `--store`) refuses, saying why
/// and what to do, and leaves the directory as it was; an empty directory takes a new store.
#[test]
fn replay_refuses_a_directory_of_other_files_and_creates_nothing_there() {
    let tmp = tempfile::tempdir().unwrap();
    let input = e2e::data("scenario.jsonl");
    let input = input.to_str().unwrap();
    let other = tmp.path().join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("notes.txt"), "not a store").unwrap();
    let before = contents(&other);
    let args = ["replay", input, "--store", "other", "--quiet"];
    let out = hourglass(tmp.path(), &args);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    for words in [
        "holds other files and no embedded store",
        "new or empty directory",
    ] {
        assert!(stderr(&out).contains(words), "{}", stderr(&out));
    }
    assert_eq!(contents(&other), before, "the replay changed the directory");
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    hourglass_ok(
        tmp.path(),
        &["replay", input, "--store", "empty", "--quiet"],
    );
    assert!(empty.join("version").is_file());
}

#[test]
fn a_read_only_command_changes_no_byte_of_a_clean_store() {
    let tmp = tempfile::tempdir().unwrap();
    let store = replayed_store(tmp.path());
    let before = contents(&store);
    let dump = hourglass_ok(
        tmp.path(),
        &["tables", "dump", "ts_metric", "--store", "store"],
    );
    assert!(!dump.is_empty());
    // A table the store does not hold (the profile job's, in a store only the sensor job
    // wrote) is an error that says how to create it, not an empty dump.
    let absent = hourglass(
        tmp.path(),
        &["tables", "dump", "user_profile_tag", "--store", "store"],
    );
    assert!(!absent.status.success(), "{}", stderr(&absent));
    assert!(absent.stdout.is_empty());
    for words in [
        "table user_profile_tag does not exist",
        "hourglass profile replay FILE --store DIR",
        "hourglass tables create",
    ] {
        assert!(stderr(&absent).contains(words), "{}", stderr(&absent));
    }
    assert_eq!(contents(&store), before);
}
