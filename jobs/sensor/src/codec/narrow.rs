//! The narrow table (`ts_metric`): one row per reading, its key, its cells and their decoding.
//!
//! Row key: `<bucket>_<device>_<Long.MAX - ts>` (salted, newest first) or `<device>_<ts>`
//! (plain). Cells: `t:v` = primary metric as text, `t:x` = the reading's other fields as compact
//! JSON (absent when there are none), both stamped with the event time in milliseconds, so HBase
//! time-range scans and TTL follow event time. Device and time come from the row key, so a
//! reading is recovered as `{device, ts, <metric>: v, ..x}`.

use serde::{Deserialize, Serialize};

use super::key::SALT_BUCKETS;
use super::key::{push_id_prefix, push_salted_prefix, salt_bucket, validate_device, SEPARATOR};
use super::{cell, parse_value};
use crate::reading::{format_value, room_of_extra, Reading};
use crate::tables::{FAMILY, NARROW_TABLE};
use crate::{Error, Result};
use sinks::schema::push_salt_bucket;
use sinks::table::{prefix_successor, Cell, Mutation, Row};

/// `Long.MAX_VALUE`, the base of reversed timestamps.
pub const LONG_MAX: i64 = i64::MAX;
/// Width of a reversed timestamp in a row key: `Long.MAX_VALUE` has 19 decimal digits.
pub const REVERSED_TS_WIDTH: usize = 19;
/// Width of a forward timestamp in a scheme-A key (epoch seconds up to 9999999999, year 2286).
pub const FORWARD_TS_WIDTH: usize = 10;

/// Qualifier of the primary metric in a narrow row.
pub const VALUE_QUALIFIER: &[u8] = b"v";
/// Qualifier of the other fields in a narrow row.
pub const EXTRA_QUALIFIER: &[u8] = b"x";

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

/// The narrow row key of a reading of `device` at `ts` (epoch seconds, `ts >= 0`).
pub fn narrow_key(scheme: KeyScheme, device: &str, ts: i64) -> Vec<u8> {
    use std::io::Write as _;
    let mut key = narrow_prefix(scheme, device);
    // Writing to a Vec cannot fail.
    let _ = match scheme {
        KeyScheme::Salted => write!(key, "{:019}", LONG_MAX - ts),
        KeyScheme::Plain => write!(key, "{ts:010}"),
    };
    key
}

/// The prefix shared by every narrow row of `device`: `<bucket>_<device>_` or `<device>_`.
pub fn narrow_prefix(scheme: KeyScheme, device: &str) -> Vec<u8> {
    // Room for the timestamp narrow_key appends.
    let mut key = Vec::with_capacity(device.len() + 24);
    match scheme {
        KeyScheme::Salted => push_salted_prefix(&mut key, device),
        KeyScheme::Plain => push_id_prefix(&mut key, device),
    }
    key
}

/// The prefix shared by every salted narrow row of salt bucket `bucket`: `<bucket>_`.
pub fn bucket_prefix(bucket: u32) -> Vec<u8> {
    let mut key = Vec::with_capacity(3);
    push_salt_bucket(&mut key, bucket);
    key.push(SEPARATOR);
    key
}

/// The key range holding exactly the salted narrow rows of salt bucket `bucket`, newest first
/// within each device.
pub fn bucket_range(bucket: u32) -> KeyRange {
    let start = bucket_prefix(bucket);
    KeyRange {
        stop: prefix_successor(&start),
        start,
        newest_first: true,
    }
}

/// The key prefixes under which lie the narrow rows of every device whose id starts with
/// `id_prefix`, in key order: `<bucket>_<id_prefix>` for each of the [`SALT_BUCKETS`] buckets,
/// or `<id_prefix>` alone with the plain scheme (an empty `id_prefix`: each bucket's rows, or
/// the whole table).
pub fn id_prefixes(scheme: KeyScheme, id_prefix: &str) -> Vec<Vec<u8>> {
    match scheme {
        KeyScheme::Salted => (0..SALT_BUCKETS)
            .map(|b| {
                let mut key = bucket_prefix(b);
                key.extend_from_slice(id_prefix.as_bytes());
                key
            })
            .collect(),
        KeyScheme::Plain => vec![id_prefix.as_bytes().to_vec()],
    }
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
/// [`pipeline::Error::Invalid`] if the key does not have the scheme's shape or its bucket is wrong.
pub fn parse_narrow_key(scheme: KeyScheme, key: &[u8]) -> Result<NarrowKey> {
    let bad = || {
        Error::invalid(format!(
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

/// The device and time of a salted narrow row key, borrowed from it (the series layout's split,
/// `tables::NARROW_SERIES`); `None` if it is not one.
pub fn split_salted(key: &[u8]) -> Option<(&str, i64)> {
    let text = std::str::from_utf8(key).ok()?;
    let (bucket, rest) = text.split_once('_')?;
    let (device, ts_text) = rest.split_once('_')?;
    let digits_ok = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_digit());
    if !digits_ok(bucket, 2) || !digits_ok(ts_text, REVERSED_TS_WIDTH) {
        return None;
    }
    validate_device(device).ok()?;
    if bucket.parse::<u32>().ok()? != salt_bucket(device) {
        return None;
    }
    let ts = LONG_MAX - ts_text.parse::<i64>().ok()?;
    (ts >= 0).then_some((device, ts))
}

/// Appends the salted narrow row key of `device` at `ts` (the series layout's join).
pub fn join_salted(device: &str, ts: i64, key: &mut Vec<u8>) {
    use std::io::Write as _;
    push_salted_prefix(key, device);
    // Writing to a Vec cannot fail.
    let _ = write!(key, "{:019}", LONG_MAX - ts);
}

/// The device whose salted narrow rows alone can lie in `[start, stop)`: `start` begins with a
/// device's prefix `<bucket>_<device>_` and `stop` with the same, or is the prefix's successor.
pub fn salted_device_in(start: &[u8], stop: &[u8]) -> Option<String> {
    let text = std::str::from_utf8(start).ok()?;
    let (bucket, rest) = text.split_once('_')?;
    let (device, _) = rest.split_once('_')?;
    validate_device(device).ok()?;
    if bucket.len() != 2 || bucket.parse::<u32>().ok()? != salt_bucket(device) {
        return None;
    }
    let prefix = &start[..bucket.len() + device.len() + 2];
    (stop.starts_with(prefix) || stop == prefix_successor(prefix)).then(|| device.to_string())
}

/// The narrow-table put of a reading.
pub fn narrow_put(scheme: KeyScheme, r: &Reading) -> Mutation {
    let ts_ms = r.ts * 1000;
    let mut cells = vec![cell(
        VALUE_QUALIFIER.to_vec(),
        ts_ms,
        format_value(r.value).into_bytes(),
    )];
    // `extra` is the compact JSON decoding produced: written as is, never parsed again here.
    if r.extra != "{}" {
        cells.push(cell(
            EXTRA_QUALIFIER.to_vec(),
            ts_ms,
            r.extra.as_bytes().to_vec(),
        ));
    }
    Mutation::Put {
        table: NARROW_TABLE,
        row: narrow_key(scheme, &r.device, r.ts),
        cells,
    }
}

/// The `t:v` cell of a narrow row.
fn value_cell(row: &Row) -> Result<&Cell> {
    row.cell(FAMILY, VALUE_QUALIFIER).ok_or_else(|| {
        Error::invalid(format!(
            "row {:?} has no t:v cell",
            String::from_utf8_lossy(&row.key)
        ))
    })
}

/// The `(ts, value)` point of a narrow row: its key and `t:v` cell, all a curve needs (a scan
/// for one can leave out the `t:x` extras, half a row's bytes).
///
/// # Errors
/// [`pipeline::Error::Invalid`] if the key or the `t:v` cell is malformed.
pub fn point_from_narrow(scheme: KeyScheme, row: &Row) -> Result<(i64, f64)> {
    let key = parse_narrow_key(scheme, &row.key)?;
    Ok((key.ts, parse_value(&value_cell(row)?.value)?))
}

/// Recovers the reading stored in a narrow row.
///
/// # Errors
/// [`pipeline::Error::Invalid`] if the key or the `t:v` cell is malformed.
pub fn reading_from_narrow(scheme: KeyScheme, row: &Row) -> Result<Reading> {
    let key = parse_narrow_key(scheme, &row.key)?;
    let value = value_cell(row)?;
    let extra = row.cell(FAMILY, EXTRA_QUALIFIER).map_or_else(
        || "{}".to_string(),
        |c| String::from_utf8_lossy(&c.value).into_owned(),
    );
    Ok(Reading {
        device: key.device,
        ts: key.ts,
        value: parse_value(&value.value)?,
        room: room_of_extra(&extra),
        extra,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::decode_line;
    use proptest::prelude::*;

    #[test]
    fn series_split_and_join_are_the_salted_key_and_refuse_other_keys() {
        let key = narrow_key(KeyScheme::Salted, "dev00042", 1_796_400_123);
        assert_eq!(split_salted(&key), Some(("dev00042", 1_796_400_123)));
        let mut joined = Vec::new();
        join_salted("dev00042", 1_796_400_123, &mut joined);
        assert_eq!(joined, key);
        let plain = narrow_key(KeyScheme::Plain, "dev00042", 1_796_400_123);
        assert_eq!(split_salted(&plain), None);
        let mut wrong_bucket = key.clone();
        wrong_bucket[1] = if key[1] == b'0' { b'1' } else { b'0' };
        assert_eq!(split_salted(&wrong_bucket), None);
        assert_eq!(split_salted(&key[..key.len() - 1]), None);
    }

    #[test]
    fn the_series_of_a_range_is_named_only_when_the_range_holds_one_device() {
        let range = narrow_range(KeyScheme::Salted, "dev7", 100, 200).unwrap();
        assert_eq!(
            salted_device_in(&range.start, &range.stop).as_deref(),
            Some("dev7")
        );
        let prefix = narrow_prefix(KeyScheme::Salted, "dev7");
        let stop = prefix_successor(&prefix);
        assert_eq!(salted_device_in(&prefix, &stop).as_deref(), Some("dev7"));
        // A bucket's range holds every device of the bucket.
        let bucket = bucket_range(salt_bucket("dev7"));
        assert_eq!(salted_device_in(&bucket.start, &bucket.stop), None);
        let other = narrow_prefix(KeyScheme::Salted, "dev8");
        assert_eq!(salted_device_in(&prefix, &other), None);
        assert_eq!(salted_device_in(&prefix, b""), None);
    }

    fn put_parts(m: Mutation) -> (&'static str, Row) {
        let Mutation::Put { table, row, cells } = m else {
            panic!("narrow_put makes a put, got {m:?}")
        };
        (table, Row { key: row, cells })
    }

    #[test]
    fn narrow_key_matches_seed_layout() {
        // Java: String.format("%02d", b) + "_" + id + "_" + (Long.MAX_VALUE - 1724102400L)
        let cases: [(KeyScheme, &str, i64, &[u8]); 4] = [
            (
                KeyScheme::Salted,
                "dev00786",
                1724102400,
                b"00_dev00786_9223372035130673407",
            ),
            (
                KeyScheme::Salted,
                "Room-42:probe-9",
                1724102400,
                b"14_Room-42:probe-9_9223372035130673407",
            ),
            (KeyScheme::Plain, "dev1", 1724102400, b"dev1_1724102400"),
            (KeyScheme::Salted, "a", 0, b"01_a_9223372036854775807"),
        ];
        for (scheme, device, ts, key) in cases {
            assert_eq!(
                narrow_key(scheme, device, ts),
                key,
                "{scheme:?} {device} {ts}"
            );
        }
    }

    #[test]
    fn parse_rejects_wrong_bucket() {
        assert!(parse_narrow_key(KeyScheme::Salted, b"01_dev00786_9223372035130673407").is_err());
        assert!(parse_narrow_key(KeyScheme::Salted, b"00_dev00786_922337203513067340").is_err());
    }

    #[test]
    fn decoded_line_to_cells_and_back() {
        let line = br#"{"device":"dev00786","ts":1724102400,"temp":25.5,"room":"room031","humidity":41.2}"#;
        let r = decode_line(1, line, "temp").unwrap();
        let (table, row) = put_parts(narrow_put(KeyScheme::Salted, &r));
        assert_eq!(table, NARROW_TABLE);
        assert_eq!(row.key, b"00_dev00786_9223372035130673407");
        let cells = crate::codec::cell_parts(&row);
        // The `t:x` bytes are the stored format: keys sorted, compact, room included.
        assert_eq!(
            cells,
            [
                (&b"v"[..], 1724102400000, &b"25.5"[..]),
                (
                    &b"x"[..],
                    1724102400000,
                    &br#"{"humidity":41.2,"room":"room031"}"#[..]
                ),
            ]
        );
        let back = reading_from_narrow(KeyScheme::Salted, &row).unwrap();
        assert_eq!(back, r);
        assert_eq!(back.room.as_deref(), Some("room031"));
    }

    #[test]
    fn no_extra_cell_without_extra_fields() {
        let r = decode_line(1, br#"{"device":"d","ts":5,"temp":1}"#, "temp").unwrap();
        let (_, row) = put_parts(narrow_put(KeyScheme::Plain, &r));
        assert_eq!(row.cells.len(), 1);
        assert_eq!(reading_from_narrow(KeyScheme::Plain, &row).unwrap(), r);
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
        fn reading_round_trips(
            scheme in scheme(), d in device(), ts in 0i64..9_999_999_999,
            v in -1e9f64..1e9, room in proptest::option::of("[a-z0-9]{1,8}"),
            seq in proptest::option::of(0u32..1000),
        ) {
            let mut line = serde_json::json!({"device": d, "ts": ts, "temp": v});
            if let Some(room) = &room {
                line["room"] = room.clone().into();
            }
            if let Some(seq) = seq {
                line["seq"] = seq.into();
            }
            let r = decode_line(1, line.to_string().as_bytes(), "temp").unwrap();
            prop_assert_eq!(&r.room, &room);
            let (_, row) = put_parts(narrow_put(scheme, &r));
            prop_assert_eq!(reading_from_narrow(scheme, &row).unwrap(), r);
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
        fn a_bucket_range_holds_exactly_the_buckets_keys_and_region(
            d in device(), ts in 0i64..9_999_999_999, bucket in 0..SALT_BUCKETS,
        ) {
            let key = narrow_key(KeyScheme::Salted, &d, ts);
            let range = bucket_range(bucket);
            prop_assert_eq!(key >= range.start && key < range.stop, salt_bucket(&d) == bucket);
            // The narrow table's split keys give the bucket's keys the bucket's region.
            let splits = crate::tables::narrow_table().split_keys;
            let region = splits.partition_point(|s| s.as_slice() <= key.as_slice());
            prop_assert_eq!(region as u32, salt_bucket(&d));
        }

        #[test]
        fn id_prefixes_hold_exactly_the_devices_with_the_id_prefix(
            scheme in scheme(), d in device(), id_prefix in "[A-Za-z0-9.:-]{0,3}",
            ts in 0i64..9_999_999_999,
        ) {
            let key = narrow_key(scheme, &d, ts);
            let prefixes = id_prefixes(scheme, &id_prefix);
            prop_assert!(prefixes.windows(2).all(|w| w[0] < w[1]));
            let held = prefixes.iter().filter(|p| key.starts_with(p)).count();
            prop_assert_eq!(held, usize::from(d.starts_with(id_prefix.as_str())));
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
