//! A chunk's frame: header, one section per column, checksum; and [`Point`], what it holds.

use std::collections::HashMap;

use xxhash_rust::xxh3::xxh3_64;

use super::bytes::{put_section, put_varint, Reader};
use super::{extras, floats, ids, times, Error, Result};

/// The first bytes of every series chunk.
pub const MAGIC: [u8; 4] = *b"HGSC";
/// The chunk format this build writes and reads.
pub const FORMAT_VERSION: u8 = 1;
/// Bytes of the trailing checksum.
const CHECKSUM_BYTES: usize = 8;
/// The most readings one chunk holds (run lengths and indexes are `u32`).
pub const MAX_POINTS: usize = u32::MAX as usize;

/// One reading of a series: what a sealed partition stores of it, exactly.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// The series (a device id): any string.
    pub series: String,
    /// Event time, in the unit the caller chose (the sensor tables use epoch seconds).
    pub ts: i64,
    /// The primary value; any double, NaN payloads and `-0.0` included, kept to the bit.
    pub value: f64,
    /// The reading's other fields, kept to the byte: a compact JSON object as the narrow row's
    /// `t:x` holds it (`{}` or empty when there are none), or any other text.
    pub extra: String,
}

/// Encodes `points` as one chunk, sorted by (series, time); readings of equal series and time
/// keep their order in `points`.
///
/// Layout: [`MAGIC`], [`FORMAT_VERSION`] (one byte), the number of readings (varint), then four
/// sections, each a varint length and its bytes (series ids, times, values, extras), then the
/// xxh3-64 of every byte before it (8 bytes, little end).
///
/// # Errors
/// [`Error::Compress`] if a column cannot be compressed, or there are more than [`MAX_POINTS`].
pub fn encode(points: &[Point]) -> Result<Vec<u8>> {
    if points.len() > MAX_POINTS {
        return Err(Error::Compress {
            column: "chunk",
            detail: format!("{} readings, above {MAX_POINTS}", points.len()),
        });
    }
    let (order, series, runs) = group(points);
    let ts: Vec<i64> = order.iter().map(|p| p.ts).collect();
    let values: Vec<f64> = order.iter().map(|p| p.value).collect();
    let extra: Vec<&str> = order.iter().map(|p| p.extra.as_str()).collect();

    let mut out = Vec::with_capacity(points.len() * 2 + 64);
    out.extend_from_slice(&MAGIC);
    out.push(FORMAT_VERSION);
    put_varint(&mut out, points.len() as u64);
    let mut section = Vec::new();
    ids::put(&mut section, &series, &runs)?;
    put_section(&mut out, &section);
    section.clear();
    times::put(&mut section, &ts, &runs)?;
    put_section(&mut out, &section);
    section.clear();
    floats::put(&mut section, &values)?;
    put_section(&mut out, &section);
    section.clear();
    extras::put(&mut section, &extra)?;
    put_section(&mut out, &section);
    let checksum = xxh3_64(&out);
    out.extend_from_slice(&checksum.to_le_bytes());
    Ok(out)
}

/// `points` in (series, time) order, stably, with the distinct series in order and each one's
/// number of readings.
///
/// Grouping by series first (one hash a reading, then a sort of the distinct ids and of each
/// series' few readings, which come nearly in time order) costs a fraction of one sort of all
/// readings by (id, time), whose comparisons of ids dominated encoding.
fn group(points: &[Point]) -> (Vec<&Point>, Vec<&str>, Vec<u32>) {
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut lists: Vec<(&str, Vec<&Point>)> = Vec::new();
    let mut last: Option<usize> = None;
    for p in points {
        let i = match last {
            // Consecutive readings of one series skip the hash.
            Some(i) if lists[i].0 == p.series => i,
            _ => *index.entry(&p.series).or_insert_with(|| {
                lists.push((&p.series, Vec::new()));
                lists.len() - 1
            }),
        };
        lists[i].1.push(p);
        last = Some(i);
    }
    // Ids are distinct: no order among equals to keep.
    lists.sort_unstable_by(|a, b| a.0.cmp(b.0));
    let mut order = Vec::with_capacity(points.len());
    let mut series = Vec::with_capacity(lists.len());
    let mut runs = Vec::with_capacity(lists.len());
    for (id, mut list) in lists {
        // Stable: readings of equal time keep their order.
        list.sort_by_key(|p| p.ts);
        series.push(id);
        runs.push(list.len() as u32);
        order.extend(list);
    }
    (order, series, runs)
}

/// Decodes a chunk written by [`encode`]: its readings, sorted by (series, time).
///
/// # Errors
/// [`Error::Version`] for a chunk of another format version, [`Error::Corrupt`] for bytes that
/// are not a whole intact chunk (checked by the checksum first, then every bound). Never panics.
pub fn decode(bytes: &[u8]) -> Result<Vec<Point>> {
    decode_with_sizes(bytes, None)
}

/// The bytes each column of a chunk takes, by name (`series ids`, `times`, `values`, `extra
/// shapes`, `extra <key>`, `extra raw`, and `frame` for the header, lengths and checksum), in
/// chunk order; they add up to the chunk's length.
///
/// # Errors
/// As [`decode`].
pub fn column_sizes(bytes: &[u8]) -> Result<Vec<(String, usize)>> {
    let mut sizes = Vec::new();
    decode_with_sizes(bytes, Some(&mut sizes))?;
    Ok(sizes)
}

fn decode_with_sizes(
    bytes: &[u8],
    mut sizes: Option<&mut Vec<(String, usize)>>,
) -> Result<Vec<Point>> {
    let header = MAGIC.len() + 1;
    if bytes.len() < header + CHECKSUM_BYTES || bytes[..MAGIC.len()] != MAGIC {
        return Err(Error::corrupt("not a series chunk (no magic bytes)"));
    }
    if bytes[MAGIC.len()] != FORMAT_VERSION {
        return Err(Error::Version(bytes[MAGIC.len()]));
    }
    let (body, tail) = bytes.split_at(bytes.len() - CHECKSUM_BYTES);
    let mut stored = [0u8; CHECKSUM_BYTES];
    stored.copy_from_slice(tail);
    if xxh3_64(body) != u64::from_le_bytes(stored) {
        return Err(Error::corrupt("checksum mismatch"));
    }
    let mut r = Reader::new(&body[header..], "series chunk");
    let n = r.count(MAX_POINTS)?;
    let mut sized = |name: &str, section: &[u8]| {
        if let Some(sizes) = sizes.as_deref_mut() {
            sizes.push((name.to_owned(), section.len()));
        }
    };

    let section = r.section()?;
    sized("series ids", section);
    let mut s = Reader::new(section, "series ids");
    let (series, runs) = ids::get(&mut s, n)?;
    s.finish()?;

    let section = r.section()?;
    sized("times", section);
    let mut s = Reader::new(section, "times");
    let ts = times::get(&mut s, &runs)?;
    s.finish()?;

    let section = r.section()?;
    sized("values", section);
    let mut s = Reader::new(section, "values");
    let values = floats::get(&mut s, n)?;
    s.finish()?;

    let section = r.section()?;
    let mut s = Reader::new(section, "extras");
    let mut extra_sizes = Vec::new();
    let extra = extras::get(&mut s, n, sizes.is_some().then_some(&mut extra_sizes))?;
    s.finish()?;
    r.finish()?;
    if let Some(sizes) = sizes {
        sizes.extend(extra_sizes);
        let columns: usize = sizes.iter().map(|(_, b)| b).sum();
        sizes.push(("frame".to_owned(), bytes.len() - columns));
    }

    let mut points = Vec::with_capacity(n);
    let mut extra = extra.into_iter();
    let mut at = 0;
    for (id, &run) in series.iter().zip(&runs) {
        for i in at..at + run as usize {
            points.push(Point {
                series: id.clone(),
                ts: ts[i],
                value: values[i],
                extra: extra.next().unwrap_or_default(),
            });
        }
        at += run as usize;
    }
    Ok(points)
}
