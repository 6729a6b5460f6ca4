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
///
/// A put's cells of a packed family ([`crate::schema::FamilySpec::packed`]) are one key-value
/// instead: see [`encode_packed_key`]; a family that keeps several versions of a cell
/// ([`crate::schema::FamilySpec::max_versions`] > 1) stores each under a key of its own: see
/// [`encode_version_key`].
pub(crate) const SEP: u8 = 0;

/// Ends a packed family's name in the key of a put's packed cells, where [`SEP`] ends it in a
/// cell's key. Families never contain it either.
pub(crate) const PACKED: u8 = 1;

/// Ends the name of a family that keeps several versions in the key of one version of a cell
/// ([`encode_version_key`]). Families never contain it either.
pub(crate) const VERSIONED: u8 = 2;

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
    check_len(
        table,
        row.len() + family.len() + qualifier.len() + 2,
        family,
        qualifier,
    )
}

/// Refuses a key of `len` bytes for the cell `family:qualifier` if fjall cannot store it.
fn check_len(table: &str, len: usize, family: &str, qualifier: &[u8]) -> Result<()> {
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

/// Checks that the key of one version of a cell ([`encode_version_key`]) fits fjall's key size
/// limit, as [`check_key_len`] does for a cell's key.
pub(crate) fn check_version_key_len(
    table: &str,
    row: &[u8],
    family: &str,
    qualifier: &[u8],
) -> Result<()> {
    let len = row.len() + family.len() + qualifier.len() + 2 + TS_LEN;
    check_len(table, len, family, qualifier)
}

/// Writes into `buf` (cleared first) the key of the version stamped `ts_ms` of a cell of a
/// family that keeps several versions: `row 0x00 family 0x02 qualifier` followed by the
/// timestamp as 8 bytes that sort newest first ([`descending_ts`]). Check it with
/// [`check_version_key_len`] first. The value is a cell's ([`encode_value`]).
///
/// A put of the same timestamp replaces the version, as in HBase; other timestamps are other
/// keys, the newest first among a cell's. The qualifier is not delimited: a cell's versions
/// share their key up to the timestamp and so come in order, newest first, but a longer
/// qualifier's keys may sort between them (`a` then 8 bytes, `a\x00` then 8 bytes), so reads
/// group versions by qualifier rather than by adjacency.
pub(crate) fn encode_version_key(
    buf: &mut Vec<u8>,
    row: &[u8],
    family: &str,
    qualifier: &[u8],
    ts_ms: i64,
) {
    buf.clear();
    buf.reserve(row.len() + family.len() + qualifier.len() + 2 + TS_LEN);
    buf.extend_from_slice(row);
    buf.push(SEP);
    buf.extend_from_slice(family.as_bytes());
    buf.push(VERSIONED);
    buf.extend_from_slice(qualifier);
    buf.extend_from_slice(&descending_ts(ts_ms));
}

/// `ts_ms` as 8 bytes whose byte order is the reverse of the timestamps' order: the sign bit
/// flipped (so that negative stamps sort before positive ones), then every bit inverted.
fn descending_ts(ts_ms: i64) -> [u8; TS_LEN] {
    (!((ts_ms as u64) ^ (1 << 63))).to_be_bytes()
}

/// The timestamp [`descending_ts`] encoded.
fn from_descending_ts(bytes: [u8; TS_LEN]) -> i64 {
    ((!u64::from_be_bytes(bytes)) ^ (1 << 63)) as i64
}

/// Writes the key prefix shared by every cell of `row` into `buf` (cleared first).
pub(crate) fn encode_row_prefix(buf: &mut Vec<u8>, row: &[u8]) {
    buf.clear();
    buf.extend_from_slice(row);
    buf.push(SEP);
}

/// What follows the family in a stored key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Column<'a> {
    /// One cell's qualifier: the value is the cell's ([`encode_value`]).
    Cell(&'a [u8]),
    /// The qualifiers of a put's packed cells ([`encode_packed_key`]): the value holds the
    /// cells ([`encode_packed_value`]).
    Packed(&'a [u8]),
    /// One version of a cell ([`encode_version_key`]): its qualifier and the timestamp in the
    /// key. The value is the cell's ([`encode_value`]), stamped the same unless a compaction
    /// expired it ([`EXPIRED`]).
    Version(&'a [u8], i64),
}

/// Splits a stored key into `(row, family, column)`; `None` if it is not one of ours.
pub(crate) fn decode_key(key: &[u8]) -> Option<(&[u8], &[u8], Column<'_>)> {
    let row_end = key.iter().position(|&b| b == SEP)?;
    let (row, rest) = (&key[..row_end], &key[row_end + 1..]);
    let family_end = rest.iter().position(|&b| b <= VERSIONED)?;
    let (family, tail) = (&rest[..family_end], &rest[family_end + 1..]);
    let column = match rest[family_end] {
        SEP => Column::Cell(tail),
        PACKED => Column::Packed(tail),
        _ => {
            let (qualifier, ts) = tail.split_last_chunk::<TS_LEN>()?;
            Column::Version(qualifier, from_descending_ts(*ts))
        }
    };
    Some((row, family, column))
}

/// Bytes a qualifier's length takes in a packed key.
const QUALIFIER_LEN: usize = 2;

/// Checks that a cell of a packed family fits a packed key on its own, like [`check_key_len`]
/// for a cell's key: it takes two bytes more, its qualifier's length. A put's cells are split
/// into key-values of at most [`PACKED_QUALIFIER_BYTES`] of qualifiers or one cell each
/// ([`packed_chunks`]), so every key of a put fits when each of its cells does (a row is at most
/// [`MAX_ROW_LEN`] bytes).
pub(crate) fn check_packed_key_len(
    table: &str,
    row: &[u8],
    family: &str,
    qualifier: &[u8],
) -> Result<()> {
    let len = row.len() + family.len() + 2 + QUALIFIER_LEN + qualifier.len();
    check_len(table, len, family, qualifier)
}

/// Writes into `buf` (cleared first) the key of a put's cells of a packed family:
/// `row 0x00 family 0x01` and each qualifier, in ascending order without repeats, as its length
/// (2 bytes, big-endian) and its bytes. Check each qualifier with [`check_packed_key_len`] and
/// take at most a chunk of [`packed_chunks`] first.
///
/// A key stands for the set of qualifiers it lists: a later put of the same set replaces the
/// key-value, as a put replaces a cell, and puts of other sets are other key-values, which
/// reads merge by their [`PackedValue::seq`]. `0x01` sorts after the `0x00` of the family's
/// cells and before any byte of a longer family's name, so a row's key-values stay together and
/// in family order.
pub(crate) fn encode_packed_key<'q>(
    buf: &mut Vec<u8>,
    row: &[u8],
    family: &str,
    qualifiers: impl Iterator<Item = &'q [u8]>,
) {
    buf.clear();
    buf.extend_from_slice(row);
    buf.push(SEP);
    buf.extend_from_slice(family.as_bytes());
    buf.push(PACKED);
    for q in qualifiers {
        let len = u16::try_from(q.len()).expect("checked by check_packed_key_len");
        debug_assert!(buf.len() + QUALIFIER_LEN + q.len() <= MAX_KEY_LEN);
        buf.extend_from_slice(&len.to_be_bytes());
        buf.extend_from_slice(q);
    }
}

/// The most bytes of qualifiers, each with its length, that the key of one packed key-value
/// lists, unless its one qualifier is longer: a put of more is stored as several. A wide row's
/// hour of points, 360 and more qualifiers, would otherwise be a key of 2 KB, and a table's
/// block index holds a key per block. 256 bytes are about 45 of a wide row's points.
pub(crate) const PACKED_QUALIFIER_BYTES: usize = 256;

/// The key-values a put's cells of a packed family are stored as, as consecutive runs of
/// `cells`: those cells sorted by whether `apart` says a qualifier is stored apart
/// ([`crate::schema::FamilySpec::packed_apart`]), then by qualifier, without repeats. A run
/// holds cells of one kind and at most [`PACKED_QUALIFIER_BYTES`] of qualifiers, or one cell.
///
/// A key-value is a set of qualifiers whatever the put it came from: reads merge a row's
/// key-values by seq, so how a put is split changes only how many there are.
pub(crate) fn packed_chunks<T>(
    cells: &[T],
    qualifier: impl Fn(&T) -> &[u8],
    apart: impl Fn(&[u8]) -> bool,
) -> impl Iterator<Item = &[T]> {
    let mut rest = cells;
    std::iter::from_fn(move || {
        let first = rest.first()?;
        let kind = apart(qualifier(first));
        let mut bytes = QUALIFIER_LEN + qualifier(first).len();
        let mut end = 1;
        for cell in &rest[1..] {
            let q = qualifier(cell);
            bytes += QUALIFIER_LEN + q.len();
            if bytes > PACKED_QUALIFIER_BYTES || apart(q) != kind {
                break;
            }
            end += 1;
        }
        let (chunk, tail) = rest.split_at(end);
        rest = tail;
        Some(chunk)
    })
}

/// Moves the `cells` whose qualifiers `apart` says are stored apart after the others, each
/// kind keeping its order, as [`packed_chunks`] takes them: a put's cells sorted by qualifier
/// become sorted by kind, then qualifier. One `apart` call per cell, where a sort by kind would
/// make two per comparison.
pub(crate) fn apart_last<T>(
    cells: &mut Vec<T>,
    qualifier: impl Fn(&T) -> &[u8],
    apart: impl Fn(&[u8]) -> bool,
) {
    // A narrow put has none apart: no allocation for it.
    if !cells.iter().any(|c| apart(qualifier(c))) {
        return;
    }
    let (mut others, kept_apart): (Vec<T>, Vec<T>) =
        cells.drain(..).partition(|c| !apart(qualifier(c)));
    others.extend(kept_apart);
    *cells = others;
}

/// The qualifiers a packed key lists; a `None` item if it is malformed.
pub(crate) fn packed_qualifiers(column: &[u8]) -> impl Iterator<Item = Option<&[u8]>> {
    let mut rest = column;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let Some((len, tail)) = rest.split_first_chunk::<QUALIFIER_LEN>() else {
            rest = &[];
            return Some(None);
        };
        let len = usize::from(u16::from_be_bytes(*len));
        if tail.len() < len {
            rest = &[];
            return Some(None);
        }
        let (q, tail) = tail.split_at(len);
        rest = tail;
        Some(Some(q))
    })
}

/// Writes into `buf` (cleared first) the value of a put's packed cells, given as
/// `(timestamp, value)` in the order of their qualifiers in the key:
/// `newest timestamp (8 bytes, big-endian i64) ++ seq (8 bytes, big-endian u64)` and each cell
/// as its age against the newest timestamp and its length (LEB128 varints), then its bytes.
///
/// The newest timestamp comes first, where a cell's own is: what reads the timestamp of any
/// stored value (TTL compactions, purges, the generations' spans) sees that of the put's
/// youngest cell, so the key-value expires when all its cells have.
pub(crate) fn encode_packed_value<'v>(
    buf: &mut Vec<u8>,
    seq: u64,
    cells: impl Iterator<Item = (i64, &'v [u8])> + Clone,
) {
    buf.clear();
    let newest = cells.clone().map(|(ts, _)| ts).max().unwrap_or(i64::MIN);
    buf.extend_from_slice(&newest.to_be_bytes());
    buf.extend_from_slice(&seq.to_be_bytes());
    for (ts, value) in cells {
        // At most u64::MAX: `newest` is the largest timestamp.
        put_varint(buf, newest.abs_diff(ts));
        put_varint(buf, value.len() as u64);
        buf.extend_from_slice(value);
    }
}

/// The value of a put's packed cells whose cells all expired where a compaction cannot drop it
/// (see [`EXPIRED`]): it keeps only its `seq`, and hides what the cells did.
pub(crate) fn encode_packed_expired(buf: &mut Vec<u8>, seq: u64) {
    buf.clear();
    buf.extend_from_slice(&EXPIRED.to_be_bytes());
    buf.extend_from_slice(&seq.to_be_bytes());
}

/// A decoded packed value.
pub(crate) struct PackedValue<'a> {
    /// Orders the puts of a row: of the cells that key-values of one row hold for a qualifier,
    /// the one with the largest `seq` is the visible one. Cells stored one per key-value
    /// (a store written before its family was packed) count as `seq` 0.
    pub(crate) seq: u64,
    /// The cells' timestamps and values in their qualifiers' order, or `None` for
    /// [`encode_packed_expired`]'s.
    cells: Option<(i64, &'a [u8])>,
}

impl<'a> PackedValue<'a> {
    /// Splits a packed value; `None` if it is too short to be one.
    pub(crate) fn decode(stored: &'a [u8]) -> Option<Self> {
        let (newest, rest) = stored.split_first_chunk::<TS_LEN>()?;
        let (seq, rest) = rest.split_first_chunk::<8>()?;
        let newest = i64::from_be_bytes(*newest);
        Some(PackedValue {
            seq: u64::from_be_bytes(*seq),
            cells: (newest != EXPIRED || !rest.is_empty()).then_some((newest, rest)),
        })
    }

    /// Whether the cells all expired and only their `seq` is kept.
    pub(crate) fn is_expired_marker(&self) -> bool {
        self.cells.is_none()
    }

    /// The cells' `(timestamp, value)` in their qualifiers' order; an item is `None` if the
    /// value is malformed.
    pub(crate) fn cells(&self) -> impl Iterator<Item = Option<(i64, &'a [u8])>> {
        let (newest, mut rest) = self.cells.unwrap_or((0, &[]));
        std::iter::from_fn(move || {
            if rest.is_empty() {
                return None;
            }
            let cell = (|| {
                let age = take_varint(&mut rest)?;
                let len = usize::try_from(take_varint(&mut rest)?).ok()?;
                if rest.len() < len {
                    return None;
                }
                let (value, tail) = rest.split_at(len);
                rest = tail;
                let ts = i64::try_from(i128::from(newest) - i128::from(age)).ok()?;
                Some((ts, value))
            })();
            if cell.is_none() {
                rest = &[];
            }
            Some(cell)
        })
    }
}

/// The cells of a stored put of packed cells, `column` its key's qualifiers and `packed` its
/// value, as `(qualifier, timestamp, value)` in the key's order: for
/// [`encode_packed_expired`]'s value, every qualifier with [`EXPIRED`] and an empty value. A
/// `None` item, the last, if the key and the value do not hold the same number of well-formed
/// cells.
pub(crate) fn packed_cells<'a>(
    column: &'a [u8],
    packed: &PackedValue<'a>,
) -> impl Iterator<Item = Option<(&'a [u8], i64, &'a [u8])>> {
    let hidden = packed.is_expired_marker();
    let mut qualifiers = packed_qualifiers(column);
    let mut cells = packed.cells();
    let mut done = false;
    std::iter::from_fn(move || {
        if done {
            return None;
        }
        let cell = match qualifiers.next() {
            // A cell left over once the qualifiers ran out.
            None => match cells.next() {
                None => return None,
                Some(_) => None,
            },
            Some(qualifier) => (|| {
                let qualifier = qualifier?;
                let (ts, value) = if hidden {
                    (EXPIRED, &[][..])
                } else {
                    cells.next()??
                };
                Some((qualifier, ts, value))
            })(),
        };
        done = cell.is_none();
        Some(cell)
    })
}

fn put_varint(buf: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        buf.push((n as u8) | 0x80);
        n >>= 7;
    }
    buf.push(n as u8);
}

fn take_varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut n = 0u64;
    for (i, &b) in bytes.iter().enumerate().take(10) {
        n |= u64::from(b & 0x7f) << (7 * i);
        if b < 0x80 {
            *bytes = &bytes[i + 1..];
            return Some(n);
        }
    }
    None
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
            Some((&b"05_dev"[..], &b"t"[..], Column::Cell(&b"v\x00\xff"[..])))
        );
    }

    fn packed_key(row: &[u8], family: &str, qualifiers: &[&[u8]]) -> Vec<u8> {
        let mut buf = Vec::new();
        for q in qualifiers {
            check_packed_key_len("t", row, family, q).unwrap();
        }
        encode_packed_key(&mut buf, row, family, qualifiers.iter().copied());
        buf
    }

    #[test]
    fn packed_key_round_trips_its_qualifiers() {
        let k = packed_key(b"05_dev", "t", &[b"", b"v", b"x\x00\x01"]);
        let Some((row, family, Column::Packed(column))) = decode_key(&k) else {
            panic!("not a packed key: {k:?}");
        };
        assert_eq!((row, family), (&b"05_dev"[..], &b"t"[..]));
        let qualifiers: Option<Vec<&[u8]>> = packed_qualifiers(column).collect();
        assert_eq!(qualifiers.unwrap(), [&b""[..], b"v", b"x\x00\x01"]);
        assert_eq!(
            packed_qualifiers(&column[..column.len() - 1]).last(),
            Some(None)
        );
        let long = vec![b'q'; u16::MAX as usize];
        assert!(check_packed_key_len("t", b"r", "t", &long).is_err());
    }

    #[test]
    fn a_put_is_split_by_kind_and_by_its_qualifiers_bytes() {
        let mut put: Vec<&[u8]> = vec![b"1", b"n", b"20", b"sum", b"3"];
        apart_last(&mut put, |q| q, |q| q == b"n" || q == b"sum");
        assert_eq!(put, [&b"1"[..], b"20", b"3", b"n", b"sum"]);
        let chunks = |qualifiers: &[&[u8]]| -> Vec<usize> {
            packed_chunks(qualifiers, |q| q, |q| q == b"n" || q == b"sum")
                .map(<[_]>::len)
                .collect()
        };
        assert_eq!(chunks(&[]), Vec::<usize>::new());
        assert_eq!(chunks(&[b"v", b"x"]), [2]);
        // The points, then the summary: sorted by kind first.
        assert_eq!(chunks(&[b"1", b"20", b"n", b"sum"]), [2, 2]);
        assert_eq!(chunks(&[b"n", b"sum"]), [2]);
        // 360 points of 3 digits take 5 bytes each: 51 to a key-value.
        let points: Vec<Vec<u8>> = (100..460)
            .map(|s: u32| s.to_string().into_bytes())
            .collect();
        let points: Vec<&[u8]> = points.iter().map(Vec::as_slice).collect();
        let lens = chunks(&points);
        assert_eq!(lens.iter().sum::<usize>(), 360);
        assert!(lens.iter().all(|&n| n == 51 || n == 360 % 51));
        // A qualifier longer than the limit is a key-value of its own.
        let long = vec![b'q'; PACKED_QUALIFIER_BYTES];
        assert_eq!(chunks(&[b"a", &long, b"z"]), [1, 1, 1]);
    }

    #[test]
    fn a_row_s_packed_keys_sort_with_its_cells_in_family_order() {
        let ordered = [
            key(b"a", "t", b"x"),
            packed_key(b"a", "t", &[b"v", b"x"]),
            key(b"a", "tt", b""),
            packed_key(b"a", "tt", &[b"v"]),
            key(b"a_b", "a", b"v"),
            packed_key(b"ab", "t", &[b"v"]),
        ];
        assert!(ordered.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn packed_value_round_trips_cells_of_any_timestamps() {
        let cells = [
            (5i64, &b"abc"[..]),
            (i64::MIN, b""),
            (i64::MAX, &[0u8; 200][..]),
        ];
        let mut buf = Vec::new();
        encode_packed_value(&mut buf, 42, cells.iter().copied());
        assert_eq!(decode_ts(&buf), Some(i64::MAX));
        let packed = PackedValue::decode(&buf).unwrap();
        assert_eq!(packed.seq, 42);
        assert!(!packed.is_expired_marker());
        let got: Option<Vec<(i64, &[u8])>> = packed.cells().collect();
        assert_eq!(got.unwrap(), cells);
        let cut = PackedValue::decode(&buf[..buf.len() - 1]).unwrap();
        assert_eq!(cut.cells().last(), Some(None));

        let column = &packed_key(b"r", "t", &[b"a", b"b", b"c"])[4..];
        let with_keys: Option<Vec<_>> = packed_cells(column, &packed).collect();
        assert_eq!(
            with_keys.unwrap(),
            [
                (&b"a"[..], 5, &b"abc"[..]),
                (b"b", i64::MIN, b""),
                (b"c", i64::MAX, &[0u8; 200])
            ]
        );
        // One qualifier fewer or more than cells.
        let short = &packed_key(b"r", "t", &[b"a", b"b"])[4..];
        assert_eq!(packed_cells(short, &packed).last(), Some(None));
        let long = &packed_key(b"r", "t", &[b"a", b"b", b"c", b"d"])[4..];
        assert_eq!(packed_cells(long, &packed).last(), Some(None));

        encode_packed_expired(&mut buf, 7);
        let marker = PackedValue::decode(&buf).unwrap();
        assert!(marker.is_expired_marker());
        assert_eq!((marker.seq, marker.cells().count()), (7, 0));
        let hidden: Option<Vec<_>> = packed_cells(column, &marker).collect();
        assert_eq!(
            hidden.unwrap(),
            [
                (&b"a"[..], EXPIRED, &b""[..]),
                (b"b", EXPIRED, b""),
                (b"c", EXPIRED, b"")
            ]
        );
        assert_eq!(decode_ts(&buf), Some(EXPIRED));
        assert!(PackedValue::decode(&buf[..15]).is_none());
    }

    fn version_key(row: &[u8], family: &str, qualifier: &[u8], ts: i64) -> Vec<u8> {
        let mut buf = Vec::new();
        check_version_key_len("t", row, family, qualifier).unwrap();
        encode_version_key(&mut buf, row, family, qualifier, ts);
        buf
    }

    #[test]
    fn version_keys_round_trip_and_sort_newest_first() {
        for ts in [i64::MIN, -1, 0, 1, 1_700_000_000_000, i64::MAX] {
            let k = version_key(b"05_dev", "b", b"q\x00\xff", ts);
            assert_eq!(
                decode_key(&k),
                Some((
                    &b"05_dev"[..],
                    &b"b"[..],
                    Column::Version(&b"q\x00\xff"[..], ts)
                ))
            );
        }
        let newest_first =
            [i64::MAX, 5, 1, 0, -1, i64::MIN].map(|ts| version_key(b"r", "b", b"q", ts));
        assert!(newest_first.windows(2).all(|w| w[0] < w[1]));
        // After the family's single cells and packed puts, before a longer family's keys.
        assert!(key(b"r", "b", b"q") < newest_first[0]);
        assert!(packed_key(b"r", "b", &[b"q"]) < newest_first[0]);
        assert!(newest_first[5] < key(b"r", "bb", b""));
        // Too short to hold a timestamp: not one of ours.
        assert_eq!(decode_key(b"r\x00b\x02q"), None);
        let long = vec![b'q'; u16::MAX as usize - 10];
        assert!(check_key_len("t", b"r", "t", &long).is_ok());
        assert!(check_version_key_len("t", b"r", "t", &long).is_err());
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
