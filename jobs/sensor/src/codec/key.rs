//! What every row key shares: the separator, Java-compatible salt buckets and the device-id
//! rule.
//!
//! The separator and a salt bucket's bytes are also where the tables are split: the sensor
//! tables (`tables.rs`) cut their split keys at this separator, and a salt bucket's bytes
//! have their one definition in the storage crate's split policies
//! ([`sinks::schema::push_salt_bucket`]), which the codec writes its keys with.

use crate::{Error, Result};
use sinks::schema::push_salt_bucket;

/// The separator between row-key parts; device ids may not contain it. The id-keyed tables are
/// split at it.
pub const SEPARATOR: u8 = b'_';
/// Number of salt buckets of the narrow table's keys (and of its regions).
pub const SALT_BUCKETS: u32 = 16;

/// Java's `String.hashCode()`: `s[0]*31^(n-1) + … + s[n-1]` over UTF-16 code units, wrapping.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

/// The salt bucket of a device: `Math.abs(device.hashCode() % 16)` as Java computes it
/// ([`SALT_BUCKETS`] buckets).
pub fn salt_bucket(device: &str) -> u32 {
    salt_bucket_of(device, SALT_BUCKETS)
}

/// The salt bucket of a device over `buckets` buckets, `Math.abs(device.hashCode() % buckets)`,
/// for asking where rows would land with another number of buckets.
///
/// Java's `%` truncates toward zero, as Rust's does, so the remainder's magnitude is below
/// `buckets` and `abs` cannot overflow (even for `i32::MIN`).
///
/// # Panics
/// If `buckets` is 0 or above `i32::MAX`.
pub fn salt_bucket_of(device: &str, buckets: u32) -> u32 {
    let buckets = i32::try_from(buckets).expect("salt buckets fit an i32");
    (java_string_hash(device) % buckets).unsigned_abs()
}

/// The prefix of every row of `id` in a table keyed `<id>_…` (the hourly table's devices, the
/// room view's rooms): the id and the separator, so that `dev1`'s rows are not `dev10`'s.
pub fn id_prefix(id: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(id.len() + 1);
    push_id_prefix(&mut key, id);
    key
}

/// The prefix of every salted row of `device`: `<bucket>_<device>_`, the bucket two digits
/// ([`salt_bucket`]).
pub fn salted_prefix(device: &str) -> Vec<u8> {
    let mut key = Vec::with_capacity(device.len() + 4);
    push_salted_prefix(&mut key, device);
    key
}

/// Appends [`id_prefix`]`(id)` to `key`.
pub fn push_id_prefix(key: &mut Vec<u8>, id: &str) {
    key.extend_from_slice(id.as_bytes());
    key.push(SEPARATOR);
}

/// Appends [`salted_prefix`]`(device)` to `key`.
pub fn push_salted_prefix(key: &mut Vec<u8>, device: &str) {
    push_salt_bucket(key, salt_bucket(device));
    key.push(SEPARATOR);
    push_id_prefix(key, device);
}

/// Checks a device id: 1–64 bytes of `[A-Za-z0-9.:-]`.
///
/// # Errors
/// [`pipeline::Error::Invalid`] naming the offending byte or length.
pub fn validate_device(device: &str) -> Result<()> {
    if device.is_empty() || device.len() > 64 {
        return Err(Error::invalid(format!(
            "device id must be 1-64 bytes, got {} bytes",
            device.len()
        )));
    }
    if let Some(c) = device
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | ':' | '-')))
    {
        return Err(Error::invalid(format!(
            "device id {device:?} contains {c:?}; allowed are A-Z a-z 0-9 . : - ('_' separates row-key parts)"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_bucket_over_another_count_is_javas_too() {
        for &(s, hash, _) in JAVA_VECTORS {
            assert_eq!(salt_bucket_of(s, SALT_BUCKETS), salt_bucket(s), "{s:?}");
            assert_eq!(salt_bucket_of(s, 7), (hash % 7).unsigned_abs(), "{s:?}");
        }
        // `Math.abs(Integer.MIN_VALUE % 7)` is 2 in Java.
        assert_eq!(salt_bucket_of("polygenelubricants", 7), 2);
        assert_eq!(salt_bucket_of("polygenelubricants", 1000), 648);
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
}
