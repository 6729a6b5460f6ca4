//! Row-key codec: Java-compatible salt buckets, time-reversed narrow keys and hourly wide keys.

use serde::{Deserialize, Serialize};

use crate::schema::SALT_BUCKETS;
use crate::{Error, Result};

/// `Long.MAX_VALUE`, the base of reversed timestamps.
pub const LONG_MAX: i64 = i64::MAX;
/// Width of a reversed timestamp in a row key: `Long.MAX_VALUE` has 19 decimal digits.
pub const REVERSED_TS_WIDTH: usize = 19;
/// Width of a forward timestamp in a scheme-A key (epoch seconds up to 9999999999, year 2286).
pub const FORWARD_TS_WIDTH: usize = 10;
/// The separator between row-key parts; device ids may not contain it.
pub const SEPARATOR: u8 = b'_';

/// How narrow row keys are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KeyScheme {
    /// Scheme A: `<device>_<ts>`, ts as 10-digit zero-padded epoch seconds, oldest first.
    /// Unsalted: fine for small, stable fleets; a large fleet writing "now" hot-spots one region.
    Plain,
    /// Scheme B (default): `<bucket>_<device>_<Long.MAX - ts>`, newest first, salted over
    /// 16 buckets so that concurrent writes spread over 16 regions.
    #[default]
    Salted,
}

/// Java's `String.hashCode()`: `s[0]*31^(n-1) + … + s[n-1]` over UTF-16 code units, wrapping.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

/// The salt bucket of a device: `Math.abs(device.hashCode() % 16)` as Java computes it.
///
/// Java's `%` truncates toward zero, as Rust's does, so the remainder lies in `-15..=15` and
/// `abs` cannot overflow (even for `i32::MIN`).
pub fn salt_bucket(device: &str) -> u32 {
    (java_string_hash(device) % SALT_BUCKETS as i32).unsigned_abs()
}

/// Checks a device id: 1–64 bytes of `[A-Za-z0-9.:-]`.
///
/// # Errors
/// [`Error::Invalid`] naming the offending byte or length.
pub fn validate_device(device: &str) -> Result<()> {
    if device.is_empty() || device.len() > 64 {
        return Err(Error::Invalid(format!(
            "device id must be 1-64 bytes, got {} bytes",
            device.len()
        )));
    }
    if let Some(c) = device
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '-')))
    {
        return Err(Error::Invalid(format!(
            "device id {device:?} contains {c:?}; allowed are A-Z a-z 0-9 . : - ('_' separates row-key parts)"
        )));
    }
    Ok(())
}

/// The narrow row key of a reading of `device` at `ts` (epoch seconds, `ts >= 0`).
pub fn narrow_key(scheme: KeyScheme, device: &str, ts: i64) -> Vec<u8> {
    let mut key = narrow_prefix(scheme, device);
    push_ts(&mut key, scheme, ts);
    key
}

fn push_ts(key: &mut Vec<u8>, scheme: KeyScheme, ts: i64) {
    use std::io::Write as _;
    // Writing to a Vec cannot fail.
    let _ = match scheme {
        KeyScheme::Salted => write!(key, "{:019}", LONG_MAX - ts),
        KeyScheme::Plain => write!(key, "{ts:010}"),
    };
}

/// The prefix shared by every narrow row of `device`: `<bucket>_<device>_` or `<device>_`.
pub fn narrow_prefix(scheme: KeyScheme, device: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(device.len() + 24);
    if scheme == KeyScheme::Salted {
        key.extend_from_slice(format!("{:02}", salt_bucket(device)).as_bytes());
        key.push(SEPARATOR);
    }
    key.extend_from_slice(device.as_bytes());
    key.push(SEPARATOR);
    key
}

/// The row-key range `[start, stop)` holding exactly the readings of `device` with
/// `from <= ts < to`, and whether rows come newest first in it. `None` if the range is empty.
///
/// With the salted scheme keys are time-reversed, so the start key is made from `to - 1` and
/// the stop key just after the key of `from` (the seed swapped them and scanned nothing).
pub fn narrow_range(scheme: KeyScheme, device: &str, from: i64, to: i64) -> Option<KeyRange> {
    let from = from.max(0);
    if to <= from {
        return None;
    }
    let (start, mut stop) = match scheme {
        KeyScheme::Salted => (
            narrow_key(scheme, device, to - 1),
            narrow_key(scheme, device, from),
        ),
        KeyScheme::Plain => (
            narrow_key(scheme, device, from),
            narrow_key(scheme, device, to - 1),
        ),
    };
    // Every key of this device has the same length, so `key ++ 0x00` is the next possible key.
    stop.push(0);
    Some(KeyRange {
        start,
        stop,
        newest_first: scheme == KeyScheme::Salted,
    })
}

/// A half-open key range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyRange {
    /// First key included.
    pub start: Vec<u8>,
    /// First key excluded.
    pub stop: Vec<u8>,
    /// Whether rows in the range are ordered newest first.
    pub newest_first: bool,
}

/// The parts of a narrow row key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NarrowKey {
    /// Salt bucket (`None` for the plain scheme).
    pub bucket: Option<u32>,
    /// Device id.
    pub device: String,
    /// Event time, epoch seconds.
    pub ts: i64,
}

/// Parses a narrow row key.
///
/// # Errors
/// [`Error::Invalid`] if the key does not have the scheme's shape or its bucket is wrong.
pub fn parse_narrow_key(scheme: KeyScheme, key: &[u8]) -> Result<NarrowKey> {
    let bad = || {
        Error::Invalid(format!(
            "not a {scheme:?} narrow row key: {:?}",
            String::from_utf8_lossy(key)
        ))
    };
    let text = std::str::from_utf8(key).map_err(|_| bad())?;
    let (rest, ts_text) = text.rsplit_once('_').ok_or_else(bad)?;
    let digits_ok = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    let (bucket, device, ts) = match scheme {
        KeyScheme::Salted => {
            let (bucket, device) = rest.split_once('_').ok_or_else(bad)?;
            if !digits_ok(bucket, 2) || !digits_ok(ts_text, REVERSED_TS_WIDTH) {
                return Err(bad());
            }
            let reversed: i64 = ts_text.parse().map_err(|_| bad())?;
            let bucket: u32 = bucket.parse().map_err(|_| bad())?;
            if bucket != salt_bucket(device) {
                return Err(bad());
            }
            (Some(bucket), device, LONG_MAX - reversed)
        }
        KeyScheme::Plain => {
            if !digits_ok(ts_text, FORWARD_TS_WIDTH) {
                return Err(bad());
            }
            (None, rest, ts_text.parse().map_err(|_| bad())?)
        }
    };
    validate_device(device).map_err(|_| bad())?;
    Ok(NarrowKey {
        bucket,
        device: device.to_string(),
        ts,
    })
}

/// Start of the hour containing `ts` (epoch seconds).
pub fn hour_start(ts: i64) -> i64 {
    ts - ts.rem_euclid(3600)
}

/// The wide row key of `device`'s hour starting at `hour_start`: `<device>_<hourStart>`.
pub fn wide_key(device: &str, hour_start: i64) -> Vec<u8> {
    format!("{device}_{hour_start}").into_bytes()
}

/// The timestamp (ms) of every cell of the wide row of the hour starting at `hour_start`: the
/// hour's last millisecond.
///
/// One timestamp per row makes each write of a row (a window pane: its new points and the
/// updated summary) one HBase `Put`, which HBase applies atomically, so a `Get` never sees points
/// without the summary that counts them. The row also expires as a whole (TTL from the hour's
/// end). Points are never rewritten (a repeated second is a duplicate) and the summary's rewrites
/// share the timestamp, so the latest write is the visible one.
pub fn wide_cell_ts_ms(hour_start: i64) -> i64 {
    hour_start * 1000 + 3_599_999
}

/// The qualifier of the cell at `ts` in its wide row: the second offset `0`..`3599` as text.
pub fn wide_qualifier(ts: i64) -> Vec<u8> {
    ts.rem_euclid(3600).to_string().into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Produced by Java 17: `s.hashCode()` and `String.format("%02d", Math.abs(s.hashCode() % 16))`.
    const JAVA_VECTORS: &[(&str, i32, &str)] = &[
        ("dev00786", 1054986368, "00"),
        ("dev00000", 1054979387, "11"),
        ("dev99999", 1063568132, "04"),
        ("a", 97, "01"),
        ("", 0, "00"),
        ("sensor-1", 1262113502, "14"),
        ("Z:9.x", 84901091, "03"),
        ("dev-ÄÖ", -1335211702, "06"),
        ("日本語", 25921943, "07"),
        ("\u{1F600}emoji", -1233692477, "13"),
        ("AaAa", 2031744, "00"),
        ("BBBB", 2031744, "00"),
        ("polygenelubricants", i32::MIN, "00"),
        ("dev12345678901234567890", 1799376651, "11"),
        ("gateway-7:temp.sensor-000123", -341079321, "09"),
        ("zzzzzzzzzzzz", 1097476992, "00"),
        ("device.with.dots", 1364276954, "10"),
        ("Room-42:probe-9", -1611493262, "14"),
        ("xK9-q:Z.7", 158173267, "03"),
    ];

    #[test]
    fn bucket_matches_java() {
        for &(s, hash, bucket) in JAVA_VECTORS {
            assert_eq!(java_string_hash(s), hash, "hashCode of {s:?}");
            assert_eq!(format!("{:02}", salt_bucket(s)), bucket, "bucket of {s:?}");
        }
    }

    #[test]
    fn narrow_key_matches_seed_layout() {
        // Java: String.format("%02d", b) + "_" + id + "_" + (Long.MAX_VALUE - 1724102400L)
        assert_eq!(
            narrow_key(KeyScheme::Salted, "dev00786", 1724102400),
            b"00_dev00786_9223372035130673407".to_vec()
        );
        assert_eq!(
            narrow_key(KeyScheme::Salted, "Room-42:probe-9", 1724102400),
            b"14_Room-42:probe-9_9223372035130673407".to_vec()
        );
        assert_eq!(
            narrow_key(KeyScheme::Plain, "dev1", 1724102400),
            b"dev1_1724102400".to_vec()
        );
        assert_eq!(
            narrow_key(KeyScheme::Salted, "a", 0),
            b"01_a_9223372036854775807".to_vec()
        );
    }

    #[test]
    fn wide_key_and_qualifier() {
        assert_eq!(
            wide_key("dev00786", hour_start(1724104799)),
            b"dev00786_1724101200".to_vec()
        );
        assert_eq!(wide_qualifier(1724104799), b"3599".to_vec());
        assert_eq!(wide_qualifier(1724101200), b"0".to_vec());
    }

    #[test]
    fn rejects_bad_devices() {
        assert!(validate_device("dev_1").is_err());
        assert!(validate_device("").is_err());
        assert!(validate_device(&"x".repeat(65)).is_err());
        assert!(validate_device("dév").is_err());
        assert!(validate_device(&"x".repeat(64)).is_ok());
        assert!(validate_device("a.b:c-D9").is_ok());
    }

    #[test]
    fn parse_rejects_wrong_bucket() {
        assert!(parse_narrow_key(KeyScheme::Salted, b"01_dev00786_9223372035130673407").is_err());
        assert!(parse_narrow_key(KeyScheme::Salted, b"00_dev00786_922337203513067340").is_err());
    }

    fn device() -> impl Strategy<Value = String> {
        "[A-Za-z0-9.:-]{1,12}"
    }

    fn scheme() -> impl Strategy<Value = KeyScheme> {
        prop_oneof![Just(KeyScheme::Salted), Just(KeyScheme::Plain)]
    }

    proptest! {
        #[test]
        fn key_round_trips(scheme in scheme(), d in device(), ts in 0i64..9_999_999_999) {
            let key = narrow_key(scheme, &d, ts);
            let parsed = parse_narrow_key(scheme, &key).unwrap();
            prop_assert_eq!(parsed.device, d.clone());
            prop_assert_eq!(parsed.ts, ts);
            if scheme == KeyScheme::Salted {
                prop_assert_eq!(parsed.bucket, Some(salt_bucket(&d)));
            }
        }

        #[test]
        fn salted_byte_order_is_bucket_device_then_newest_first(
            a in (device(), 0i64..9_999_999_999), b in (device(), 0i64..9_999_999_999)
        ) {
            let ka = narrow_key(KeyScheme::Salted, &a.0, a.1);
            let kb = narrow_key(KeyScheme::Salted, &b.0, b.1);
            // Keys order by bucket, then by the device id followed by the separator, then by
            // time descending (the separator, not the id alone: `dev1_` sorts after `dev1.x_`).
            let order = |(d, ts): &(String, i64)| {
                (salt_bucket(d), format!("{d}_").into_bytes(), std::cmp::Reverse(*ts))
            };
            prop_assert_eq!(ka.cmp(&kb), order(&a).cmp(&order(&b)));
        }

        #[test]
        fn range_holds_exactly_the_readings_in_from_to(
            scheme in scheme(), d in device(), other in device(),
            ts in 0i64..100_000, from in 0i64..100_000, len in 0i64..50_000
        ) {
            let to = from + len;
            let key = narrow_key(scheme, &d, ts);
            let inside = match narrow_range(scheme, &d, from, to) {
                Some(r) => key >= r.start && key < r.stop,
                None => false,
            };
            prop_assert_eq!(inside, from <= ts && ts < to);
            // Rows of another device are never in the range.
            if other != d {
                let okey = narrow_key(scheme, &other, ts);
                if let Some(r) = narrow_range(scheme, &d, from, to) {
                    prop_assert!(!(okey >= r.start && okey < r.stop));
                }
            }
        }
    }
}
