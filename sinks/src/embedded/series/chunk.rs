//! A chunk's frame: header, one section per column, checksum; and [`Point`], what it holds.

use std::collections::HashMap;

use xxhash_rust::xxh3::xxh3_64;

use super::bytes::{put_section, put_varint, Reader};
use super::{extras, floats, ids, times, Error, Result};

/// The first bytes of every series chunk.
pub const MAGIC: [u8; 4] = *b"HGSC";
/// The chunk format this build writes: 2, blocks of whole series behind a directory. It also
/// reads version 1 (one chunk-wide block, one checksum), as one block.
pub const FORMAT_VERSION: u8 = 2;
/// The format of the chunks written before blocks, read as one block.
const VERSION_1: u8 = 1;
/// Bytes of a checksum (xxh3-64, little end).
const CHECKSUM_BYTES: usize = 8;
/// The most readings one chunk holds (run lengths and indexes are `u32`).
pub const MAX_POINTS: usize = u32::MAX as usize;
/// The readings a block of [`encode`] holds before it is cut at the next series: a read of one
/// series decodes the columns of one block of about this many readings and renders only its
/// own. Measured on generator data (`examples/series_bytes.rs`, docs/BENCHMARKS.md "The series
/// layout"): a block's columns cost a fixed part (pcodec's headers, the extras' shapes), so
/// smaller blocks take more bytes and larger ones more CPU a read; at 1024 a read of one
/// series costs 1/14 of the whole chunk's decode for 1.5 times its bytes.
pub const BLOCK_POINTS: usize = 1024;

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

/// Encodes `points` as one chunk, sorted by (series, time), in blocks of whole series of about
/// [`BLOCK_POINTS`] readings; readings of equal series and time keep their order in `points`.
///
/// # Errors
/// As [`encode_blocks`].
pub fn encode(points: &[Point]) -> Result<Vec<u8>> {
    encode_blocks(points, BLOCK_POINTS)
}

/// Encodes `points` as [`encode`] does, a block being cut after the first series that brings it
/// to `block_points` readings or more (so a block holds whole series, and a series with more
/// readings is a block of its own; 0 or 1: a block a series).
///
/// Layout (version 2): [`MAGIC`]; [`FORMAT_VERSION`] (one byte); the number of readings and the
/// number of blocks (varints); the directory, a section (varint length, bytes) holding per
/// block its first series id (bytes shared with the previous block's last id, varint, then the
/// rest as a section), its last series id (bytes shared with its own first, then the rest), its
/// readings (varint), its bytes (varint) and the xxh3-64 of its bytes (8, little end); the
/// xxh3-64 of every byte before it (8, little end); then the blocks, back to back. A block is
/// four sections, each a varint length and its bytes: series ids, times, values and extras of
/// its readings (the column codecs of `ids`, `times`, `floats` and `extras`).
///
/// # Errors
/// [`Error::Compress`] if a column cannot be compressed, or there are more than [`MAX_POINTS`].
pub fn encode_blocks(points: &[Point], block_points: usize) -> Result<Vec<u8>> {
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

    let mut blocks = Vec::with_capacity(points.len() * 2 + 64);
    let mut directory = Vec::new();
    let mut previous_last: &[u8] = &[];
    let mut block_count = 0u64;
    let (mut first, mut row) = (0, 0);
    while first < series.len() {
        let mut last = first;
        let mut rows = 0usize;
        while last < series.len() && (last == first || rows < block_points) {
            rows += runs[last] as usize;
            last += 1;
        }
        let at = blocks.len();
        put_block(
            &mut blocks,
            &series[first..last],
            &runs[first..last],
            &ts[row..row + rows],
            &values[row..row + rows],
            &extra[row..row + rows],
        )?;
        let (low, high) = (series[first].as_bytes(), series[last - 1].as_bytes());
        put_shared(&mut directory, previous_last, low);
        put_shared(&mut directory, low, high);
        put_varint(&mut directory, rows as u64);
        put_varint(&mut directory, (blocks.len() - at) as u64);
        directory.extend_from_slice(&xxh3_64(&blocks[at..]).to_le_bytes());
        previous_last = high;
        block_count += 1;
        (first, row) = (last, row + rows);
    }

    let mut out = Vec::with_capacity(blocks.len() + directory.len() + 32);
    out.extend_from_slice(&MAGIC);
    out.push(FORMAT_VERSION);
    put_varint(&mut out, points.len() as u64);
    put_varint(&mut out, block_count);
    put_section(&mut out, &directory);
    let checksum = xxh3_64(&out);
    out.extend_from_slice(&checksum.to_le_bytes());
    out.extend_from_slice(&blocks);
    Ok(out)
}

/// Appends `id` as the bytes it shares with `previous` (a varint) and the rest (a section): a
/// prefix cut at a byte boundary may not be UTF-8, so the rest is bytes, checked when read.
fn put_shared(out: &mut Vec<u8>, previous: &[u8], id: &[u8]) {
    let shared = previous.iter().zip(id).take_while(|(a, b)| a == b).count();
    put_varint(out, shared as u64);
    put_section(out, &id[shared..]);
}

/// Reads what [`put_shared`] wrote after `previous`, into `previous`'s place.
fn get_shared(r: &mut Reader<'_>, id: &mut Vec<u8>) -> Result<()> {
    let shared = r.count(id.len())?;
    id.truncate(shared);
    id.extend_from_slice(r.section()?);
    Ok(())
}

/// Appends one block: the four column sections of readings sorted by (series, time).
fn put_block(
    out: &mut Vec<u8>,
    series: &[&str],
    runs: &[u32],
    ts: &[i64],
    values: &[f64],
    extra: &[&str],
) -> Result<()> {
    let mut section = Vec::new();
    ids::put(&mut section, series, runs)?;
    put_section(out, &section);
    section.clear();
    times::put(&mut section, ts, runs)?;
    put_section(out, &section);
    section.clear();
    floats::put(&mut section, values)?;
    put_section(out, &section);
    section.clear();
    extras::put(&mut section, extra)?;
    put_section(out, &section);
    Ok(())
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

/// Decodes a chunk written by [`encode`] (or by version 1): its readings, sorted by (series,
/// time).
///
/// # Errors
/// [`Error::Version`] for a chunk of another format version, [`Error::Corrupt`] for bytes that
/// are not a whole intact chunk (checked by the checksums first, then every bound). Never panics.
pub fn decode(bytes: &[u8]) -> Result<Vec<Point>> {
    decode_where(bytes, &Wanted::All, None)
}

/// The readings of the series from `first` to `last` (both included, by byte order) of a chunk,
/// sorted by (series, time), as [`decode`] followed by a filter would give them; only the blocks
/// that may hold them are checked and decoded, and only their readings rendered.
///
/// # Errors
/// As [`decode`], for the header and the blocks read (a damaged block not read is not seen).
pub fn decode_series(bytes: &[u8], first: &str, last: &str) -> Result<Vec<Point>> {
    decode_where(bytes, &Wanted::Series(first, last), None)
}

/// The bytes each column of a chunk takes, by name (`series ids`, `times`, `values`, `extra
/// shapes`, `extra <key>`, `extra raw`, and `frame` for the header, directory, lengths and
/// checksums), summed over its blocks, in the order the blocks first name them; they add up to
/// the chunk's length.
///
/// # Errors
/// As [`decode`].
pub fn column_sizes(bytes: &[u8]) -> Result<Vec<(String, usize)>> {
    let mut sizes = Vec::new();
    decode_where(bytes, &Wanted::All, Some(&mut sizes))?;
    let columns: usize = sizes.iter().map(|(_, b)| b).sum();
    sizes.push(("frame".to_owned(), bytes.len() - columns));
    Ok(sizes)
}

/// The number of blocks of a chunk (1 for a version 1 chunk), from its checked header.
///
/// # Errors
/// As [`decode`], for the header.
pub fn block_count(bytes: &[u8]) -> Result<usize> {
    Ok(match header(bytes)? {
        Header::V1 { .. } => 1,
        Header::V2 { blocks, .. } => blocks.len(),
    })
}

/// Which readings a decode returns.
enum Wanted<'a> {
    All,
    /// The series from the first to the last, both included.
    Series(&'a str, &'a str),
}

impl Wanted<'_> {
    /// Whether a block holding the series from `low` to `high` may hold a wanted one.
    fn meets(&self, low: &str, high: &str) -> bool {
        match self {
            Wanted::All => true,
            Wanted::Series(first, last) => high >= *first && low <= *last,
        }
    }
}

/// One entry of a version 2 chunk's directory.
struct BlockEntry {
    low: String,
    high: String,
    readings: usize,
    bytes: std::ops::Range<usize>,
    checksum: u64,
}

/// A chunk's checked header.
enum Header<'a> {
    /// Version 1: the body (readings and the four sections), its checksum checked.
    V1 { body: &'a [u8] },
    /// Version 2: the directory, checked; each block's bytes are `bytes[entry.bytes]`.
    V2 { blocks: Vec<BlockEntry> },
}

fn header(bytes: &[u8]) -> Result<Header<'_>> {
    let head = MAGIC.len() + 1;
    if bytes.len() < head + CHECKSUM_BYTES || bytes[..MAGIC.len()] != MAGIC {
        return Err(Error::corrupt("not a series chunk (no magic bytes)"));
    }
    match bytes[MAGIC.len()] {
        VERSION_1 => {
            let (body, tail) = bytes.split_at(bytes.len() - CHECKSUM_BYTES);
            if xxh3_64(body) != checksum_of(tail) {
                return Err(Error::corrupt("checksum mismatch"));
            }
            Ok(Header::V1 {
                body: &body[head..],
            })
        }
        FORMAT_VERSION => {
            let mut r = Reader::new(&bytes[head..], "series chunk header");
            let n = r.count(MAX_POINTS)?;
            let count = r.count(n)?;
            let directory = r.section()?;
            let end = bytes.len() - r.remaining();
            let stored = r.take(CHECKSUM_BYTES)?;
            if xxh3_64(&bytes[..end]) != checksum_of(stored) {
                return Err(Error::corrupt("header checksum mismatch"));
            }
            let mut at = end + CHECKSUM_BYTES;
            let mut d = Reader::new(directory, "series chunk directory");
            let mut blocks: Vec<BlockEntry> = Vec::with_capacity(count.min(1 << 16));
            let (mut low, mut high) = (Vec::new(), Vec::new());
            let mut total = 0usize;
            for _ in 0..count {
                get_shared(&mut d, &mut high)?;
                low.clone_from(&high);
                get_shared(&mut d, &mut high)?;
                let text = |id: &[u8]| {
                    String::from_utf8(id.to_vec())
                        .map_err(|_| Error::corrupt("directory: a series id is not UTF-8"))
                };
                let entry_low = text(&low)?;
                let entry_high = text(&high)?;
                if entry_low > entry_high || blocks.last().is_some_and(|b| b.high >= entry_low) {
                    return Err(Error::corrupt("directory: blocks out of series order"));
                }
                let readings = d.count(n - total)?;
                if readings == 0 {
                    return Err(Error::corrupt("directory: an empty block"));
                }
                total += readings;
                let len = d.count(bytes.len() - at)?;
                let checksum = checksum_of(d.take(CHECKSUM_BYTES)?);
                blocks.push(BlockEntry {
                    low: entry_low,
                    high: entry_high,
                    readings,
                    bytes: at..at + len,
                    checksum,
                });
                at += len;
            }
            d.finish()?;
            if total != n || at != bytes.len() {
                return Err(Error::corrupt(format!(
                    "directory: blocks hold {total} readings of {n} and end at byte {at} of {}",
                    bytes.len()
                )));
            }
            Ok(Header::V2 { blocks })
        }
        version => Err(Error::Version(version)),
    }
}

fn checksum_of(bytes: &[u8]) -> u64 {
    let mut le = [0u8; CHECKSUM_BYTES];
    le.copy_from_slice(bytes);
    u64::from_le_bytes(le)
}

fn decode_where(
    bytes: &[u8],
    wanted: &Wanted<'_>,
    mut sizes: Option<&mut Vec<(String, usize)>>,
) -> Result<Vec<Point>> {
    let mut points = Vec::new();
    match header(bytes)? {
        Header::V1 { body } => {
            let mut r = Reader::new(body, "series chunk");
            let n = r.count(MAX_POINTS)?;
            decode_block(&mut r, n, None, wanted, &mut points, sizes)?;
            r.finish()?;
        }
        Header::V2 { blocks } => {
            // Blocks are in series order: those a wanted range meets are consecutive.
            let from = match wanted {
                Wanted::All => 0,
                Wanted::Series(first, _) => blocks.partition_point(|b| b.high.as_str() < *first),
            };
            for block in &blocks[from..] {
                if !wanted.meets(&block.low, &block.high) {
                    break;
                }
                let block_bytes = &bytes[block.bytes.clone()];
                if xxh3_64(block_bytes) != block.checksum {
                    return Err(Error::corrupt("block checksum mismatch"));
                }
                let mut r = Reader::new(block_bytes, "series chunk block");
                let ends = Some((block.low.as_str(), block.high.as_str()));
                decode_block(
                    &mut r,
                    block.readings,
                    ends,
                    wanted,
                    &mut points,
                    sizes.as_deref_mut(),
                )?;
                r.finish()?;
            }
        }
    }
    Ok(points)
}

/// Reads one block's four sections of `n` readings, whose first and last series are `ends` if
/// given (as the directory says), and appends the wanted readings to `points`; `sizes`, when
/// given, has each column's bytes added under its name.
fn decode_block(
    r: &mut Reader<'_>,
    n: usize,
    ends: Option<(&str, &str)>,
    wanted: &Wanted<'_>,
    points: &mut Vec<Point>,
    mut sizes: Option<&mut Vec<(String, usize)>>,
) -> Result<()> {
    let counting = sizes.is_some();
    let mut sized = |name: &str, bytes: usize| {
        if let Some(sizes) = sizes.as_deref_mut() {
            match sizes.iter_mut().find(|(n, _)| n == name) {
                Some((_, b)) => *b += bytes,
                None => sizes.push((name.to_owned(), bytes)),
            }
        }
    };
    let section = r.section()?;
    sized("series ids", section.len());
    let mut s = Reader::new(section, "series ids");
    let (series, runs) = ids::get(&mut s, n)?;
    s.finish()?;
    if let Some((low, high)) = ends {
        let first = series.first().map(String::as_str);
        if first != Some(low) || series.last().map(String::as_str) != Some(high) {
            return Err(Error::corrupt(
                "a block's series differ from its directory's",
            ));
        }
    }

    // The wanted series: a stretch of the sorted ids, and of the readings.
    let (first, last) = match wanted {
        Wanted::All => (0, series.len()),
        Wanted::Series(low, high) => (
            series.partition_point(|id| id.as_str() < *low),
            series.partition_point(|id| id.as_str() <= *high),
        ),
    };
    let skip: usize = runs[..first].iter().map(|&k| k as usize).sum();
    let rows = skip..skip
        + runs[first..last.max(first)]
            .iter()
            .map(|&k| k as usize)
            .sum::<usize>();

    let section = r.section()?;
    sized("times", section.len());
    let mut s = Reader::new(section, "times");
    let ts = times::get(&mut s, &runs)?;
    s.finish()?;

    let section = r.section()?;
    sized("values", section.len());
    let mut s = Reader::new(section, "values");
    let values = floats::get(&mut s, n)?;
    s.finish()?;

    let section = r.section()?;
    let mut s = Reader::new(section, "extras");
    let mut extra_sizes = Vec::new();
    let extra = extras::get(
        &mut s,
        n,
        rows.clone(),
        counting.then_some(&mut extra_sizes),
    )?;
    s.finish()?;
    for (name, bytes) in extra_sizes {
        sized(&name, bytes);
    }

    points.reserve(rows.len());
    let mut extra = extra.into_iter();
    let mut at = rows.start;
    for (id, &run) in series[first..last.max(first)].iter().zip(&runs[first..]) {
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
    Ok(())
}
