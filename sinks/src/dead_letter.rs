//! Dead-letter and late-data files: JSON Lines, created on first use, shared by the workers.
//! The records themselves are made by `sensor::dead_letter`, which knows what was rejected.
//!
//! Dead letters: `{"line":N,"kind":"invalid_json","reason":"…","raw":"…"}`; a line that is not
//! UTF-8 has `raw` decoded lossily and `raw_hex` with its exact bytes. Refused device registry
//! topic records, in the same file: `{"registry_topic":"…","partition":P,"offset":O,
//! "kind":"bad_room","reason":"…","key":"…","value":"…"}` (`key`/`value` null when absent, lossy
//! with `key_hex`/`value_hex` when not UTF-8). Late readings:
//! `{"device":"…","ts":N,"value":V,"watermark":W,"reason":"…"}`.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::{Error, Result};

/// Bytes of whole lines held before they are written out. Only whole lines are ever written, so
/// a line longer than this is written on its own, at once.
const BUFFER_BYTES: usize = 64 * 1024;

/// An open JSON Lines file and the whole lines not written to it yet.
#[derive(Debug)]
struct Open {
    file: File,
    pending: Vec<u8>,
}

impl Open {
    /// Writes the pending lines. With `O_APPEND`, one `write_all` of whole lines can be cut short
    /// only by a failure or a kill, never by a buffer boundary: records never interleave with
    /// other writers' and a torn tail is the last record alone (repaired at the next open).
    fn write_pending(&mut self) -> std::io::Result<()> {
        let result = self.file.write_all(&self.pending);
        self.pending.clear();
        result
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        // As `BufWriter` did: records already accepted are whole lines, worth keeping even on
        // a path that did not flush (an error elsewhere, a panic unwinding).
        let _ = self.write_pending();
    }
}

/// A JSON Lines file created when the first record arrives.
#[derive(Debug)]
struct LazyFile {
    path: PathBuf,
    out: Mutex<Option<Open>>,
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

    fn open(&self) -> Result<Open> {
        // Append: a restarted job must not wipe what earlier runs rejected.
        let file = std::fs::OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&self.path)
            .map_err(|e| self.io_error(e))?;
        let dropped = repair_torn_tail(&file).map_err(|e| self.io_error(e))?;
        if dropped > 0 {
            // The record was cut short by a crash of the previous run before it was flushed:
            // the probe had not passed it, so its input is re-read and the record written again.
            eprintln!(
                "{}: dropped a torn last line ({dropped} bytes without a final newline, left by \
                 a run that was killed while writing it); its record is written again as its \
                 input is re-read",
                self.path.display()
            );
        }
        Ok(Open {
            file,
            pending: Vec::with_capacity(BUFFER_BYTES),
        })
    }

    fn append(&self, record: &serde_json::Value) -> Result<()> {
        let mut guard = self
            .out
            .lock()
            .map_err(|_| Error::Invalid("dead-letter writer poisoned".into()))?;
        if guard.is_none() {
            *guard = Some(self.open()?);
        }
        if let Some(out) = guard.as_mut() {
            serde_json::to_writer(&mut out.pending, record)
                .map_err(|e| self.io_error(std::io::Error::other(e)))?;
            out.pending.push(b'\n');
            if out.pending.len() >= BUFFER_BYTES {
                out.write_pending().map_err(|e| self.io_error(e))?;
            }
        }
        Ok(())
    }

    fn flush(&self) -> Result<()> {
        let mut guard = self
            .out
            .lock()
            .map_err(|_| Error::Invalid("dead-letter writer poisoned".into()))?;
        match guard.as_mut() {
            Some(out) => out.write_pending().map_err(|e| self.io_error(e)),
            None => Ok(()),
        }
    }

    fn written(&self) -> bool {
        self.out.lock().map(|g| g.is_some()).unwrap_or(false)
    }
}

/// Truncates a regular file that does not end with `\n` to just after its last `\n` (or to
/// empty), so that the next line appended starts on its own line. Returns the bytes dropped.
/// Anything else (a pipe, `/dev/stderr`) is left alone.
fn repair_torn_tail(file: &File) -> std::io::Result<u64> {
    let meta = file.metadata()?;
    let len = meta.len();
    if !meta.is_file() || len == 0 {
        return Ok(0);
    }
    let mut last = [0u8];
    file.read_exact_at(&mut last, len - 1)?;
    if last[0] == b'\n' {
        return Ok(0);
    }
    let mut chunk = vec![0u8; BUFFER_BYTES];
    let mut end = len;
    let keep = loop {
        if end == 0 {
            break 0;
        }
        let start = end.saturating_sub(chunk.len() as u64);
        let buf = &mut chunk[..(end - start) as usize];
        file.read_exact_at(buf, start)?;
        if let Some(i) = buf.iter().rposition(|&b| b == b'\n') {
            break start + i as u64 + 1;
        }
        end = start;
    };
    file.set_len(keep)?;
    Ok(len - keep)
}

/// The dead-letter file and the late-data file of a job.
#[derive(Debug)]
pub struct DeadLetters {
    rejected: LazyFile,
    late: LazyFile,
}

impl DeadLetters {
    /// Rejected lines go to `rejected`, readings beyond the allowed lateness to `late`.
    /// Neither file is created until something is written to it. Records are written as whole
    /// lines; a file whose last line was torn by a killed run is cut back to its last whole line
    /// when it is opened, with a note on stderr.
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

    /// Appends `record` as one line of the dead-letter file, creating the file if needed.
    ///
    /// # Errors
    /// [`Error::Io`] if the file cannot be created or written.
    pub fn append_rejected(&self, record: &serde_json::Value) -> Result<()> {
        self.rejected.append(record)
    }

    /// Appends `record` as one line of the late-data file, creating the file if needed.
    ///
    /// # Errors
    /// [`Error::Io`] if the file cannot be created or written.
    pub fn append_late(&self, record: &serde_json::Value) -> Result<()> {
        self.late.append(record)
    }

    /// Writes every record appended so far to its file.
    ///
    /// # Errors
    /// [`Error::Io`] if a write fails.
    pub fn flush(&self) -> Result<()> {
        self.rejected.flush()?;
        self.late.flush()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// A record about `bytes` long, as a rejected line of that length makes.
    fn record(line: u64, bytes: usize) -> serde_json::Value {
        json!({ "line": line, "kind": "too_long", "raw": "x".repeat(bytes) })
    }

    #[test]
    fn files_are_created_by_the_first_record_only() {
        let dir = tempfile::tempdir().unwrap();
        let dl = DeadLetters::new(dir.path().join("dead.jsonl"), dir.path().join("late.jsonl"));
        assert!(dl.rejected_path().is_none());
        dl.append_rejected(&record(3, 4)).unwrap();
        dl.flush().unwrap();
        assert!(dl.late_path().is_none());
        assert!(!dir.path().join("late.jsonl").exists());
        let text = std::fs::read_to_string(dl.rejected_path().unwrap()).unwrap();
        let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(v["line"], 3);
    }

    #[test]
    fn a_torn_tail_is_dropped_at_open_and_the_next_record_starts_its_own_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dead.jsonl");
        std::fs::write(&path, "{\"line\":1}\n{\"line\":2,\"kind\":\"inv").unwrap();
        let dl = DeadLetters::new(path.clone(), dir.path().join("late.jsonl"));
        dl.append_rejected(&record(3, 1)).unwrap();
        dl.flush().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.ends_with('\n'), "{text:?}");
        let lines: Vec<serde_json::Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
            .collect();
        assert_eq!(lines.len(), 2, "{text:?}");
        assert_eq!(lines[0]["line"], 1);
        assert_eq!(lines[1]["line"], 3);
    }

    #[test]
    fn a_torn_late_data_tail_is_dropped_too() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("late.jsonl");
        std::fs::write(&path, "{\"device\":\"d1\",\"ts\":1}\n{\"dev").unwrap();
        let dl = DeadLetters::new(dir.path().join("dead.jsonl"), path.clone());
        dl.append_late(&json!({ "device": "d2", "ts": 7200 }))
            .unwrap();
        dl.flush().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let devices: Vec<String> = text
            .lines()
            .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["device"].to_string())
            .collect();
        assert_eq!(devices, ["\"d1\"", "\"d2\""], "{text:?}");
    }

    #[test]
    fn repair_keeps_whole_lines_and_finds_the_last_newline_far_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f.jsonl");
        let open = |content: &[u8]| {
            std::fs::write(&path, content).unwrap();
            let file = std::fs::OpenOptions::new()
                .read(true)
                .append(true)
                .open(&path)
                .unwrap();
            let dropped = repair_torn_tail(&file).unwrap();
            (dropped, std::fs::read(&path).unwrap())
        };
        assert_eq!(open(b""), (0, b"".to_vec()));
        assert_eq!(open(b"{}\n{}\n"), (0, b"{}\n{}\n".to_vec()));
        assert_eq!(open(b"{\"a\""), (4, b"".to_vec()));
        let mut long = b"{}\n".to_vec();
        long.resize(3 + 2 * BUFFER_BYTES + 5, b'x');
        assert_eq!(open(&long), (2 * BUFFER_BYTES as u64 + 5, b"{}\n".to_vec()));
    }

    #[test]
    fn a_record_larger_than_the_buffer_is_written_whole() {
        let dir = tempfile::tempdir().unwrap();
        let dl = DeadLetters::new(dir.path().join("dead.jsonl"), dir.path().join("late.jsonl"));
        dl.append_rejected(&record(9, BUFFER_BYTES + 1)).unwrap();
        // No flush: what a kill would leave on disk now must be whole lines only.
        let text = std::fs::read_to_string(dl.rejected_path().unwrap()).unwrap();
        assert!(text.len() > BUFFER_BYTES, "{} bytes", text.len());
        assert!(text.ends_with('\n'), "a torn record: {} bytes", text.len());
        let v: serde_json::Value = serde_json::from_str(text.trim_end()).unwrap();
        assert_eq!(v["line"], 9);
        assert_eq!(v["raw"].as_str().unwrap().len(), BUFFER_BYTES + 1);
    }

    #[test]
    fn small_records_wait_for_the_flush_then_land_as_whole_lines() {
        let dir = tempfile::tempdir().unwrap();
        let dl = DeadLetters::new(dir.path().join("dead.jsonl"), dir.path().join("late.jsonl"));
        let mut written = 0;
        while written < 3 * BUFFER_BYTES {
            let r = record(1, 3000);
            written += r.to_string().len() + 1;
            dl.append_rejected(&r).unwrap();
            let on_disk = std::fs::read(dl.rejected_path().unwrap()).unwrap();
            assert!(on_disk.is_empty() || on_disk.ends_with(b"\n"));
        }
        dl.flush().unwrap();
        let text = std::fs::read_to_string(dl.rejected_path().unwrap()).unwrap();
        assert_eq!(text.len(), written);
        assert!(text
            .lines()
            .all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok()));
    }

    #[test]
    fn records_not_flushed_yet_are_written_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("dead.jsonl");
        let dl = DeadLetters::new(path.clone(), dir.path().join("late.jsonl"));
        dl.append_rejected(&record(4, 1)).unwrap();
        assert!(std::fs::read(&path).unwrap().is_empty());
        drop(dl);
        let text = std::fs::read_to_string(&path).unwrap();
        let v: serde_json::Value = serde_json::from_str(text.trim_end()).unwrap();
        assert_eq!(v["line"], 4);
    }
}
