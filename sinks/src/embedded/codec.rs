//! Byte layout of cells in fjall and HBase's TTL rule.

use crate::{Error, Result};

/// Separator between row, family and qualifier in a stored key.
///
/// A cell is stored under the key `row 0x00 family 0x00 qualifier` with the value
/// `timestamp (8 bytes, big-endian i64) ++ value`. Rows and families never contain `0x00`, and
/// `0x00` is the smallest byte, so byte order of keys is the order of
/// `(row, family, qualifier)`: a row sorts before every longer row it is a prefix of (`a` before
/// `a_b` before `ab`), exactly as HBase compares row keys. The qualifier is last, so it may hold
/// any byte.
pub(crate) const SEP: u8 = 0;

/// Longest row key HBase accepts (`HConstants.MAX_ROW_LENGTH = Short.MAX_VALUE`).
pub(crate) const MAX_ROW_LEN: usize = i16::MAX as usize;

/// Longest key fjall accepts (it stores key lengths as `u16`).
const MAX_KEY_LEN: usize = u16::MAX as usize;

/// Length of the timestamp prefix of a stored value.
const TS_LEN: usize = 8;

/// Checks that `row` can be stored.
pub(crate) fn check_row(table: &str, row: &[u8]) -> Result<()> {
    if row.is_empty() {
        return Err(Error::Invalid(format!(
            "empty row key for table {table}: HBase rejects it, give every row a key"
        )));
    }
    if row.len() > MAX_ROW_LEN {
        return Err(Error::Invalid(format!(
            "row key of {} bytes for table {table} exceeds HBase's limit of {MAX_ROW_LEN}",
            row.len()
        )));
    }
    if row.contains(&SEP) {
        return Err(Error::Invalid(format!(
            "row key {} for table {table} contains a 0x00 byte, which the embedded store uses as \
             a separator; encode the row key without 0x00",
            String::from_utf8_lossy(row).escape_debug()
        )));
    }
    Ok(())
}

/// Checks that the key of a cell fits fjall's key size limit. The row and family are checked
/// elsewhere (rows by [`check_row`], families against the table spec).
pub(crate) fn check_key_len(table: &str, row: &[u8], family: &str, qualifier: &[u8]) -> Result<()> {
    let len = row.len() + family.len() + qualifier.len() + 2;
    if len > MAX_KEY_LEN {
        return Err(Error::Invalid(format!(
            "cell {family}:{} of a row in table {table} needs a {len}-byte key, more than the \
             embedded store's limit of {MAX_KEY_LEN}; shorten the row key or qualifier",
            String::from_utf8_lossy(qualifier).escape_debug()
        )));
    }
    Ok(())
}

/// Writes the key of one cell into `buf` (cleared first). Check it with [`check_key_len`] first.
pub(crate) fn encode_key(buf: &mut Vec<u8>, row: &[u8], family: &str, qualifier: &[u8]) {
    buf.clear();
    buf.reserve(row.len() + family.len() + qualifier.len() + 2);
    buf.extend_from_slice(row);
    buf.push(SEP);
    buf.extend_from_slice(family.as_bytes());
    buf.push(SEP);
    buf.extend_from_slice(qualifier);
}

/// Writes the key prefix shared by every cell of `row` into `buf` (cleared first).
pub(crate) fn encode_row_prefix(buf: &mut Vec<u8>, row: &[u8]) {
    buf.clear();
    buf.extend_from_slice(row);
    buf.push(SEP);
}

/// Splits a stored key into `(row, family, qualifier)`; `None` if it is not one of ours.
pub(crate) fn decode_key(key: &[u8]) -> Option<(&[u8], &[u8], &[u8])> {
    let row_end = key.iter().position(|&b| b == SEP)?;
    let (row, rest) = (&key[..row_end], &key[row_end + 1..]);
    let family_end = rest.iter().position(|&b| b == SEP)?;
    Some((row, &rest[..family_end], &rest[family_end + 1..]))
}

/// Writes the stored value of a cell into `buf` (cleared first).
pub(crate) fn encode_value(buf: &mut Vec<u8>, ts_ms: i64, value: &[u8]) {
    buf.clear();
    buf.reserve(TS_LEN + value.len());
    buf.extend_from_slice(&ts_ms.to_be_bytes());
    buf.extend_from_slice(value);
}

/// The timestamp of a cell a compaction found expired in a generation other than the oldest: it
/// is kept there only to hide older writes of its key, and is expired under any TTL and clock.
pub(crate) const EXPIRED: i64 = i64::MIN;

/// Splits a stored value into `(timestamp, value)`; `None` if it is too short to be ours.
pub(crate) fn decode_value(stored: &[u8]) -> Option<(i64, &[u8])> {
    let (ts, value) = stored.split_first_chunk::<TS_LEN>()?;
    Some((i64::from_be_bytes(*ts), value))
}

/// The timestamp of a stored value, if it is well formed.
pub(crate) fn decode_ts(stored: &[u8]) -> Option<i64> {
    decode_value(stored).map(|(ts, _)| ts)
}

/// A family's TTL in milliseconds, as HBase computes it (`HStore.determineTTLFromFamily`:
/// seconds × 1000). `None` means forever; a TTL too large for an `i64` of milliseconds is forever
/// too, as HBase maps `FOREVER` to `Long.MAX_VALUE`.
pub(crate) fn ttl_ms(ttl_secs: Option<u64>) -> Option<i64> {
    ttl_secs
        .and_then(|s| s.checked_mul(1000))
        .and_then(|ms| i64::try_from(ms).ok())
}

/// Whether a cell stamped `ts_ms` in a family with TTL `ttl_ms` is expired at `now_ms`.
///
/// HBase's rule, exactly: `StoreScanner` sets `oldestUnexpiredTS = now - ttl` (TTL in ms) and
/// the column trackers (`ScanWildcardColumnTracker.isExpired`, `ExplicitColumnTracker`) treat a
/// cell as expired when `timestamp < oldestStamp`; compactions use the same matcher
/// (`ScanQueryMatcher.preCheck` → `columns.isDone(timestamp)`). So a cell exactly `ttl` old
/// (`ts + ttl == now`) is still visible, and it expires one millisecond later.
pub(crate) fn is_expired(ts_ms: i64, ttl_ms: Option<i64>, now_ms: i64) -> bool {
    match ttl_ms {
        // Saturating: a clock near i64::MIN must not wrap around and expire everything.
        Some(ttl) => ts_ms < now_ms.saturating_sub(ttl),
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(row: &[u8], family: &str, qualifier: &[u8]) -> Vec<u8> {
        let mut buf = Vec::new();
        check_key_len("t", row, family, qualifier).unwrap();
        encode_key(&mut buf, row, family, qualifier);
        buf
    }

    #[test]
    fn key_round_trips() {
        let k = key(b"05_dev", "t", b"v\x00\xff");
        assert_eq!(
            decode_key(&k),
            Some((&b"05_dev"[..], &b"t"[..], &b"v\x00\xff"[..]))
        );
    }

    #[test]
    fn key_order_is_row_then_family_then_qualifier() {
        let ordered = [
            key(b"a", "t", b"x"),
            key(b"a", "tt", b""),
            key(b"a_b", "a", b"v"),
            key(b"ab", "t", b"v"),
            key(b"ab", "t", b"v\x00"),
            key(b"ab", "t", b"v2"),
        ];
        assert!(ordered.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn value_round_trips_negative_timestamps() {
        let mut buf = Vec::new();
        encode_value(&mut buf, -5, b"abc");
        assert_eq!(decode_value(&buf), Some((-5, &b"abc"[..])));
        assert_eq!(decode_value(&buf[..7]), None);
    }

    #[test]
    fn ttl_boundary_is_hbase_s() {
        let ttl = ttl_ms(Some(10));
        assert!(!is_expired(1_000, ttl, 11_000));
        assert!(is_expired(999, ttl, 11_000));
        assert!(!is_expired(i64::MIN, None, i64::MAX));
        assert_eq!(ttl_ms(Some(u64::MAX)), None);
    }
}
