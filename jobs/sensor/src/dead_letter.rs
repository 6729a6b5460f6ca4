//! Dead-letter and late-data records: what was rejected and why, as the JSON lines that
//! [`sinks::dead_letter::DeadLetters`] appends to its files (formats in its module docs).

use std::fmt::Write as _;

use serde_json::json;
use sinks::dead_letter::DeadLetters;

use crate::decode::Rejected;
use crate::graph::SideOutput;
use crate::registry::RejectedRecord;
use crate::Result;

/// The dead-letter record of a rejected line.
pub fn rejected_record(r: &Rejected) -> serde_json::Value {
    let mut record = json!({
        "line": r.line,
        "kind": r.reason.kind(),
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
        Ok(self.append_rejected(&rejected_record(rejected))?)
    }

    fn registry_rejected(&self, rejected: &RejectedRecord) -> Result<()> {
        Ok(self.append_rejected(&registry_record(rejected))?)
    }

    fn late(&self, device: &str, ts: i64, value: f64, watermark: u64) -> Result<()> {
        Ok(self.append_late(&json!({
            "device": device,
            "ts": ts,
            "value": value,
            "watermark": watermark,
            "reason": "beyond allowed lateness: written to the narrow table only",
        }))?)
    }

    fn flush(&self) -> Result<()> {
        Ok(DeadLetters::flush(self)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::decode_line;

    #[test]
    fn writes_reasons_and_raw_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let dl = DeadLetters::new(dir.path().join("dead.jsonl"), dir.path().join("late.jsonl"));
        assert!(dl.rejected_path().is_none());
        let rej = decode_line(3, b"{\"device\":\"d\xff\"}", "temp").unwrap_err();
        dl.rejected(&rej).unwrap();
        SideOutput::flush(&dl).unwrap();
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
            let error = crate::registry::parse_record(Some(key), Some(value)).unwrap_err();
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
        SideOutput::flush(&dl).unwrap();
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

    #[test]
    fn a_line_too_long_keeps_its_exact_bytes_in_hex() {
        let mut raw = vec![b'x'; 100];
        raw[0] = 0xff;
        let record = rejected_record(&Rejected {
            line: 9,
            partition: Some(2),
            reason: pipeline::source::LineFault::TooLong(100).into(),
            raw,
        });
        assert_eq!(record["line"], 9);
        assert_eq!(record["partition"], 2);
        assert_eq!(record["kind"], "too_long");
        assert_eq!(record["raw_hex"].as_str().unwrap().len(), 200);
    }

    #[test]
    fn late_readings_say_why() {
        let dir = tempfile::tempdir().unwrap();
        let dl = DeadLetters::new(dir.path().join("dead.jsonl"), dir.path().join("late.jsonl"));
        dl.late("d2", 7200, 1.5, 9000).unwrap();
        SideOutput::flush(&dl).unwrap();
        let text = std::fs::read_to_string(dl.late_path().unwrap()).unwrap();
        let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
        assert_eq!(
            (v["device"].as_str(), v["ts"].as_i64()),
            (Some("d2"), Some(7200))
        );
        assert_eq!(v["watermark"], 9000);
        assert!(v["reason"].as_str().unwrap().contains("allowed lateness"));
    }
}
