//! Dead-letter and late-data files: JSON Lines, created on first use, shared by the workers.
//!
//! Dead letters: `{"line":N,"kind":"invalid_json","reason":"…","raw":"…"}`; a line that is not
//! UTF-8 has `raw` decoded lossily and `raw_hex` with its exact bytes. Refused device registry
//! topic records, in the same file: `{"registry_topic":"…","partition":P,"offset":O,
//! "kind":"bad_room","reason":"…","key":"…","value":"…"}` (`key`/`value` null when absent, lossy
//! with `key_hex`/`value_hex` when not UTF-8). Late readings:
//! `{"device":"…","ts":N,"value":V,"watermark":W,"reason":"…"}`.

use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use pipeline::decode::Rejected;
use pipeline::graph::SideOutput;
use pipeline::registry::RejectedRecord;
use pipeline::{Error, Result};
use serde_json::json;

/// A JSON Lines file created when the first record arrives.
#[derive(Debug)]
struct LazyFile {
    path: PathBuf,
    out: Mutex<Option<BufWriter<File>>>,
}

impl LazyFile {
    fn new(path: PathBuf) -> Self {
        LazyFile {
            path,
            out: Mutex::new(None),
        }
    }

    fn io_error(&self, source: std::io::Error) -> Error {
        Error::Io {
            path: self.path.display().to_string(),
            source,
        }
    }

    fn append(&self, record: &serde_json::Value) -> Result<()> {
        let mut guard = self
            .out
            .lock()
            .map_err(|_| Error::Invalid("dead-letter writer poisoned".into()))?;
        if guard.is_none() {
            // Append: a restarted job must not wipe what earlier runs rejected.
            let file = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)
                .map_err(|e| self.io_error(e))?;
            *guard = Some(BufWriter::new(file));
        }
        if let Some(out) = guard.as_mut() {
            serde_json::to_writer(&mut *out, record)
                .map_err(|e| self.io_error(std::io::Error::other(e)))?;
            out.write_all(b"\n").map_err(|e| self.io_error(e))?;
        }
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        let mut guard = self
            .out
            .lock()
            .map_err(|_| Error::Invalid("dead-letter writer poisoned".into()))?;
        match guard.as_mut() {
            Some(out) => out.flush().map_err(|e| self.io_error(e)),
            None => Ok(()),
        }
    }

    fn written(&self) -> bool {
        self.out.lock().map(|g| g.is_some()).unwrap_or(false)
    }
}

/// The dead-letter file and the late-data file of a job.
#[derive(Debug)]
pub struct DeadLetters {
    rejected: LazyFile,
    late: LazyFile,
}

impl DeadLetters {
    /// Rejected lines go to `rejected`, readings beyond the allowed lateness to `late`.
    /// Neither file is created until something is written to it.
    pub fn new(rejected: PathBuf, late: PathBuf) -> Self {
        DeadLetters {
            rejected: LazyFile::new(rejected),
            late: LazyFile::new(late),
        }
    }

    /// The dead-letter file's path, if anything was written to it.
    pub fn rejected_path(&self) -> Option<&Path> {
        self.rejected
            .written()
            .then_some(self.rejected.path.as_path())
    }

    /// The late-data file's path, if anything was written to it.
    pub fn late_path(&self) -> Option<&Path> {
        self.late.written().then_some(self.late.path.as_path())
    }
}

/// The dead-letter record of a rejected line.
pub fn rejected_record(r: &Rejected) -> serde_json::Value {
    let kind = serde_json::to_value(&r.reason)
        .ok()
        .and_then(|v| v.get("kind").and_then(|k| k.as_str()).map(str::to_string))
        .unwrap_or_default();
    let mut record = json!({
        "line": r.line,
        "kind": kind,
        "reason": r.reason.to_string(),
        "raw": String::from_utf8_lossy(&r.raw),
    });
    if let Some(partition) = r.partition {
        record["partition"] = json!(partition);
    }
    if std::str::from_utf8(&r.raw).is_err() {
        record["raw_hex"] = json!(hex(&r.raw));
    }
    record
}

fn hex(bytes: &[u8]) -> String {
    let mut hex = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(hex, "{b:02x}");
    }
    hex
}

/// The dead-letter record of a refused registry topic record.
pub fn registry_record(r: &RejectedRecord) -> serde_json::Value {
    let mut record = json!({
        "registry_topic": r.topic,
        "partition": r.partition,
        "offset": r.offset,
        "kind": r.error.kind(),
        "reason": r.error.to_string(),
        "key": r.key.as_deref().map(String::from_utf8_lossy),
        "value": r.value.as_deref().map(String::from_utf8_lossy),
    });
    for (name, bytes) in [("key_hex", &r.key), ("value_hex", &r.value)] {
        if let Some(b) = bytes.as_deref().filter(|b| std::str::from_utf8(b).is_err()) {
            record[name] = json!(hex(b));
        }
    }
    record
}

impl SideOutput for DeadLetters {
    fn rejected(&self, rejected: &Rejected) -> Result<()> {
        self.rejected.append(&rejected_record(rejected))
    }

    fn registry_rejected(&self, rejected: &RejectedRecord) -> Result<()> {
        self.rejected.append(&registry_record(rejected))
    }

    fn late(&self, device: &str, ts: i64, value: f64, watermark: u64) -> Result<()> {
        self.late.append(&json!({
            "device": device,
            "ts": ts,
            "value": value,
            "watermark": watermark,
            "reason": "beyond allowed lateness: written to the narrow table only",
        }))
    }

    fn flush(&self) -> Result<()> {
        self.rejected.flush()?;
        self.late.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pipeline::decode::decode_line;

    #[test]
    fn writes_reasons_and_raw_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let dl = DeadLetters::new(dir.path().join("dead.jsonl"), dir.path().join("late.jsonl"));
        assert!(dl.rejected_path().is_none());
        let rej = decode_line(3, b"{\"device\":\"d\xff\"}", "temp").unwrap_err();
        dl.rejected(&rej).unwrap();
        dl.flush().unwrap();
        assert!(dl.late_path().is_none());
        let text = std::fs::read_to_string(dl.rejected_path().unwrap()).unwrap();
        let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(v["line"], 3);
        assert_eq!(v["kind"], "not_utf8");
        assert_eq!(v["raw_hex"], "7b22646576696365223a2264ff227d");
    }

    #[test]
    fn registry_records_say_where_and_why() {
        let dir = tempfile::tempdir().unwrap();
        let dl = DeadLetters::new(dir.path().join("dead.jsonl"), dir.path().join("late.jsonl"));
        for (key, value) in [(&b"dev1"[..], &b"room_1"[..]), (b"d\xff", b"room1")] {
            let error = pipeline::registry::parse_record(Some(key), Some(value)).unwrap_err();
            dl.registry_rejected(&RejectedRecord {
                topic: "devices".into(),
                partition: 1,
                offset: 7,
                error,
                key: Some(key.to_vec()),
                value: Some(value.to_vec()),
            })
            .unwrap();
        }
        dl.flush().unwrap();
        let text = std::fs::read_to_string(dl.rejected_path().unwrap()).unwrap();
        let v: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(v[0]["registry_topic"], "devices");
        assert_eq!(v[0]["offset"], 7);
        assert_eq!(v[0]["kind"], "bad_room");
        assert_eq!(v[0]["value"], "room_1");
        assert!(v[0].get("key_hex").is_none());
        assert_eq!(v[1]["kind"], "key_not_utf8");
        assert_eq!(v[1]["key_hex"], "64ff");
    }
}
