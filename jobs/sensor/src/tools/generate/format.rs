//! One reading (or a broken copy of it) as a JSON line, formatted by hand.

use super::delivery::Pending;
use super::faults::{Field, Flaw, NOT_NUMBERS};
use super::fleet::FIRMWARE;
use super::plan::{digits, Plan};

impl Plan {
    /// Formats one line, newline included, into `line`.
    pub(super) fn format(&self, pending: &Pending, rooms: &[u32], line: &mut Vec<u8>) {
        line.clear();
        let s = &pending.sample;
        let flaw = pending.flaw;
        let ts = self.start + s.offset as i64;
        line.push(b'{');
        match flaw {
            Some(Flaw::Missing(Field::Device)) => {}
            Some(Flaw::Null(Field::Device)) => key_raw(line, "device", b"null"),
            _ => {
                key(line, "device");
                line.extend_from_slice(b"\"dev");
                if flaw == Some(Flaw::DeviceUnderscore) {
                    line.push(b'_');
                }
                push_padded(line, u64::from(s.device), self.device_width);
                line.push(b'"');
            }
        }
        match flaw {
            Some(Flaw::Missing(Field::Ts)) => {}
            Some(Flaw::Null(Field::Ts)) => key_raw(line, "ts", b"null"),
            Some(Flaw::NegativeTs) => {
                key(line, "ts");
                push_int(line, -ts.max(1));
            }
            Some(Flaw::MillisTs) => {
                // A device clock in milliseconds; `seq` stands in for the sub-second part.
                key(line, "ts");
                push_int(line, ts * 1000 + (s.seq % 1000) as i64);
            }
            _ => {
                key(line, "ts");
                push_int(line, ts);
            }
        }
        match flaw {
            Some(Flaw::Missing(Field::Temp)) => {}
            Some(Flaw::Null(Field::Temp)) => key_raw(line, "temp", b"null"),
            Some(Flaw::TempNotNumber(token)) => key_raw(line, "temp", NOT_NUMBERS[token as usize]),
            Some(Flaw::TempString) => {
                key(line, "temp");
                line.push(b'"');
                push_fixed(line, i64::from(s.temp), 1);
                line.push(b'"');
            }
            _ => {
                key(line, "temp");
                push_fixed(line, i64::from(s.temp), 1);
            }
        }
        key(line, "room");
        line.extend_from_slice(b"\"room");
        push_padded(line, u64::from(rooms[s.device as usize]), self.room_width);
        line.push(b'"');
        key(line, "humidity");
        push_fixed(line, i64::from(s.humidity), 1);
        key(line, "battery");
        push_fixed(line, i64::from(s.battery), 2);
        key(line, "rssi");
        push_int(line, i64::from(s.rssi));
        key(line, "fw");
        line.push(b'"');
        line.extend_from_slice(FIRMWARE[s.fw as usize].0.as_bytes());
        if flaw == Some(Flaw::NotUtf8) {
            // A Latin-1 "é" from a misconfigured device: not UTF-8.
            line.extend_from_slice(b"-r\xe9v");
        }
        line.push(b'"');
        key(line, "seq");
        push_int(line, s.seq as i64);
        line.push(b'}');
        if let Some(Flaw::Truncated { keep_permille }) = flaw {
            // Any proper prefix of an object is invalid JSON; keep at least the `{`.
            let keep = line.len() * usize::from(keep_permille) / 1000;
            line.truncate(keep.clamp(1, line.len() - 1));
        }
        line.push(b'\n');
    }
}

/// Writes `,"name":` (no comma after the opening brace).
fn key(line: &mut Vec<u8>, name: &str) {
    if line.last() != Some(&b'{') {
        line.push(b',');
    }
    line.push(b'"');
    line.extend_from_slice(name.as_bytes());
    line.extend_from_slice(b"\":");
}

fn key_raw(line: &mut Vec<u8>, name: &str, value: &[u8]) {
    key(line, name);
    line.extend_from_slice(value);
}

// Hand-written number formatting: it runs for every field of every line, and skipping the
// `fmt` machinery keeps it cheap.
fn push_uint(line: &mut Vec<u8>, mut n: u64) {
    let mut buf = [0u8; 20];
    let mut at = buf.len();
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    line.extend_from_slice(&buf[at..]);
}

fn push_padded(line: &mut Vec<u8>, n: u64, width: usize) {
    line.resize(line.len() + width.saturating_sub(digits(n)), b'0');
    push_uint(line, n);
}

fn push_int(line: &mut Vec<u8>, n: i64) {
    if n < 0 {
        line.push(b'-');
    }
    push_uint(line, n.unsigned_abs());
}

/// Writes `scaled / 10^decimals` with exactly `decimals` decimals.
fn push_fixed(line: &mut Vec<u8>, scaled: i64, decimals: u32) {
    if scaled < 0 {
        line.push(b'-');
    }
    let unit = 10u64.pow(decimals);
    let abs = scaled.unsigned_abs();
    push_uint(line, abs / unit);
    line.push(b'.');
    push_padded(line, abs % unit, decimals as usize);
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use super::*;
    use crate::tools::generate::testing::{args, generate, lines};

    #[test]
    fn lines_have_the_example_layout() {
        let (out, _) = generate(&args(30, "2m"));
        for line in lines(&out) {
            let text = std::str::from_utf8(line).unwrap();
            let v: Value = serde_json::from_str(text).unwrap();
            let expected = format!(
                r#"{{"device":"{}","ts":{},"temp":{:.1},"room":"{}","humidity":{:.1},"battery":{:.2},"rssi":{},"fw":"{}","seq":{}}}"#,
                v["device"].as_str().unwrap(),
                v["ts"].as_i64().unwrap(),
                v["temp"].as_f64().unwrap(),
                v["room"].as_str().unwrap(),
                v["humidity"].as_f64().unwrap(),
                v["battery"].as_f64().unwrap(),
                v["rssi"].as_i64().unwrap(),
                v["fw"].as_str().unwrap(),
                v["seq"].as_u64().unwrap(),
            );
            assert_eq!(text, expected);
            assert!(text.starts_with(r#"{"device":"dev000"#), "{text}");
            assert!(text.contains(r#","room":"room00"#), "{text}");
        }
    }

    #[test]
    fn wide_device_and_room_ids() {
        let mut a = args(100_001, "10s");
        a.rooms = 1001;
        let (out, summary) = generate(&a);
        assert_eq!(summary.readings, 100_001);
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains(r#""device":"dev100000""#));
        assert!(text.contains(r#""device":"dev000000""#));
        assert!(text.contains(r#""room":"room0000""#));
        assert!(text.contains(r#""room":"room1000""#));
    }

    #[test]
    fn number_formatting() {
        let mut line = Vec::new();
        push_fixed(&mut line, 255, 1);
        line.push(b' ');
        push_fixed(&mut line, -5, 1);
        line.push(b' ');
        push_fixed(&mut line, 361, 2);
        line.push(b' ');
        push_fixed(&mut line, 305, 2);
        line.push(b' ');
        push_padded(&mut line, 786, 5);
        line.push(b' ');
        push_int(&mut line, -67);
        line.push(b' ');
        push_int(&mut line, 0);
        assert_eq!(
            String::from_utf8(line).unwrap(),
            "25.5 -0.5 3.61 3.05 00786 -67 0"
        );
    }
}
