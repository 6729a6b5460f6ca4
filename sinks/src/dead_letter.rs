//! Dead-letter and late-data files: JSON Lines, created on first use, shared by the workers.
//!
//! Dead letters: `{"line":N,"kind":"invalid_json","reason":"…","raw":"…"}`; a line that is not
//! UTF-8 has `raw` decoded lossily and `raw_hex` with its exact bytes. Late readings:
//! `{"device":"…","ts":N,"value":V,"watermark":W,"reason":"…"}`.

use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use pipeline::decode::Rejected;
use pipeline::graph::SideOutput;
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
    if std::str::from_utf8(&r.raw).is_err() {
        let mut hex = String::with_capacity(r.raw.len() * 2);
        for b in &r.raw {
            let _ = write!(hex, "{b:02x}");
        }
        record["raw_hex"] = json!(hex);
    }
    record
}

impl SideOutput for DeadLetters {
    fn rejected(&self, rejected: &Rejected) -> Result<()> {
        self.rejected.append(&rejected_record(rejected))
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
}
