//! The other fields of each reading: a compact JSON object (`{"battery":3.71,"fw":"2.4.1"}`),
//! split by key into typed columns, exact to the byte.
//!
//! A reading's *shape* is its keys in order, each with its kind (decimal number, string,
//! `true`, `false`, `null`); shapes form a dictionary and each reading has a shape index. A
//! number column holds each value as an integer at the column's scale (the most decimals any
//! of its values has) plus the value's own number of decimals, so `45.0` and `45` stay apart; a
//! string column is a dictionary column. An object this cannot rebuild byte for byte (escaped
//! strings, nested values, exponents, long numbers, whitespace, not an object at all) is kept
//! whole in the raw column, zstd-compressed: every extra round-trips, whatever it is.

use std::collections::HashMap;

use super::bytes::{put_section, put_str, put_varint, Reader};
use super::{numbers, strings, Error, Result};

/// Kinds of a shape's field.
const NUM: u8 = 0;
const STR: u8 = 1;
const TRUE: u8 = 2;
const FALSE: u8 = 3;
const NULL: u8 = 4;

/// The most decimals of a number in a number column.
const MAX_DECIMALS: u32 = 6;
/// The most digits of a number in a number column: with [`MAX_DECIMALS`], any value scaled to
/// its column's scale stays below 10^18, inside an `i64`.
const MAX_DIGITS: u32 = 12;
/// The most bytes the raw column may hold once decompressed (a chunk's raw extras are a
/// fallback for odd inputs, far below this).
const MAX_RAW_BYTES: usize = 1 << 30;
/// zstd's level for the raw column.
const RAW_LEVEL: i32 = 3;

/// One field's value in a parsed object.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Value<'a> {
    /// A decimal number: `mantissa / 10^decimals`, as written.
    Num {
        mantissa: i64,
        decimals: u32,
    },
    Str(&'a str),
    /// `true`, `false` or `null`: its kind says which, it has no column.
    Literal,
}

/// Parses a compact flat JSON object whose strings have no escapes into its shape (keys and
/// kinds) and its values, in order, replacing what the two held; `false` for anything else.
fn parse<'a>(text: &'a str, shape: &mut Vec<(&'a str, u8)>, values: &mut Vec<Value<'a>>) -> bool {
    shape.clear();
    values.clear();
    parse_fields(text, shape, values).is_some()
}

fn parse_fields<'a>(
    text: &'a str,
    shape: &mut Vec<(&'a str, u8)>,
    values: &mut Vec<Value<'a>>,
) -> Option<()> {
    let mut rest = text.strip_prefix('{')?.strip_suffix('}')?;
    while !rest.is_empty() {
        if !shape.is_empty() {
            rest = rest.strip_prefix(',')?;
        }
        let (key, after) = quoted(rest)?;
        rest = after.strip_prefix(':')?;
        let (kind, value, after) = if let Some((s, after)) = quoted(rest) {
            (STR, Value::Str(s), after)
        } else if let Some(after) = rest.strip_prefix("true") {
            (TRUE, Value::Literal, after)
        } else if let Some(after) = rest.strip_prefix("false") {
            (FALSE, Value::Literal, after)
        } else if let Some(after) = rest.strip_prefix("null") {
            (NULL, Value::Literal, after)
        } else {
            let end = rest
                .find(|c: char| !(c.is_ascii_digit() || c == '-' || c == '.'))
                .unwrap_or(rest.len());
            let (token, after) = rest.split_at(end);
            (NUM, number(token)?, after)
        };
        shape.push((key, kind));
        values.push(value);
        rest = after;
    }
    Some(())
}

/// The string at the start of `text` (`"…"` without `\` inside) and what follows it.
fn quoted(text: &str) -> Option<(&str, &str)> {
    let inner = text.strip_prefix('"')?;
    let end = inner.find(['"', '\\'])?;
    (inner.as_bytes()[end] == b'"').then(|| (&inner[..end], &inner[end + 1..]))
}

/// A number token `-?digits(.digits)?` within [`MAX_DIGITS`] and [`MAX_DECIMALS`]; the render
/// check in [`split`] turns away any other spelling (leading zeros, `-0`).
fn number(token: &str) -> Option<Value<'static>> {
    let unsigned = token.strip_prefix('-').unwrap_or(token);
    let (int, fraction) = unsigned.split_once('.').unwrap_or((unsigned, ""));
    let digits = int.len() + fraction.len();
    if int.is_empty()
        || (unsigned.contains('.') && fraction.is_empty())
        || digits > MAX_DIGITS as usize
        || fraction.len() > MAX_DECIMALS as usize
        || !int
            .bytes()
            .chain(fraction.bytes())
            .all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let mut mantissa: i64 = 0;
    for b in int.bytes().chain(fraction.bytes()) {
        mantissa = mantissa * 10 + i64::from(b - b'0');
    }
    if token.starts_with('-') {
        mantissa = -mantissa;
    }
    Some(Value::Num {
        mantissa,
        decimals: fraction.len() as u32,
    })
}

/// Appends a number's text: `mantissa` with `decimals` digits after the point (`-5`, 2:
/// `-0.05`).
fn push_number(out: &mut String, mantissa: i64, decimals: u32) {
    // 19 digits of an i64, the point, and the zeros of at most MAX_DECIMALS decimals fit.
    let mut buf = [0u8; 32];
    let mut at = buf.len();
    let mut m = mantissa.unsigned_abs();
    let mut written = 0;
    loop {
        at -= 1;
        buf[at] = b'0' + (m % 10) as u8;
        m /= 10;
        written += 1;
        if written == decimals {
            at -= 1;
            buf[at] = b'.';
        }
        if m == 0 && written > decimals {
            break;
        }
    }
    if mantissa < 0 {
        out.push('-');
    }
    out.extend(buf[at..].iter().map(|&b| char::from(b)));
}

/// Appends the object of `shape` with `values`, as [`parse`] reads it.
fn render<'v, K: AsRef<str>>(
    out: &mut String,
    shape: &[(K, u8)],
    mut value: impl FnMut(usize) -> Field<'v>,
) {
    out.push('{');
    for (i, (key, kind)) in shape.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('"');
        out.push_str(key.as_ref());
        out.push_str("\":");
        match *kind {
            TRUE => out.push_str("true"),
            FALSE => out.push_str("false"),
            NULL => out.push_str("null"),
            _ => match value(i) {
                Field::Num { mantissa, decimals } => push_number(out, mantissa, decimals),
                Field::Str(s) => {
                    out.push('"');
                    out.push_str(s);
                    out.push('"');
                }
            },
        }
    }
    out.push('}');
}

/// A field's value as [`render`] asks for it.
#[derive(Debug)]
enum Field<'a> {
    Num { mantissa: i64, decimals: u32 },
    Str(&'a str),
}

/// Appends the extras of `n` readings.
///
/// Layout: the shape dictionary (count; per shape its field count and each field's key and
/// kind); each reading's shape index as an integer column (the dictionary's length: raw); for
/// each (key, kind) column, in the order the shapes first name them, a number column (its scale
/// byte, the decimals column, the mantissas column) or a string column; the raw column (count,
/// decompressed length, then a section of zstd bytes of length-prefixed objects).
pub(super) fn put(out: &mut Vec<u8>, extras: &[&str]) -> Result<()> {
    let mut shapes: Vec<Vec<(&str, u8)>> = Vec::new();
    let mut shape_index: HashMap<Vec<(&str, u8)>, u32> = HashMap::new();
    let mut codes = Vec::with_capacity(extras.len());
    // The values of every object that is not raw, one after another.
    let mut flat: Vec<Value<'_>> = Vec::new();
    let mut raw = Vec::new();
    let mut raw_count = 0u64;
    let mut check = String::new();
    let (mut shape, mut values) = (Vec::new(), Vec::new());
    let mut last: Option<u32> = None;
    for extra in extras {
        let fits = parse(extra, &mut shape, &mut values) && {
            check.clear();
            render(&mut check, &shape, |i| match values[i] {
                Value::Num { mantissa, decimals } => Field::Num { mantissa, decimals },
                Value::Str(s) => Field::Str(s),
                Value::Literal => Field::Str(""),
            });
            check == *extra
        };
        if !fits {
            codes.push(u32::MAX);
            put_str(&mut raw, extra);
            raw_count += 1;
            continue;
        }
        let code = match last {
            // Sorted by series, a device's objects share a shape: skip the hash.
            Some(code) if shapes[code as usize] == shape => code,
            _ => match shape_index.get(&shape) {
                Some(&code) => code,
                None => {
                    let code = shapes.len() as u32;
                    shape_index.insert(shape.clone(), code);
                    shapes.push(shape.clone());
                    code
                }
            },
        };
        last = Some(code);
        codes.push(code);
        flat.extend_from_slice(&values);
    }
    let raw_code = shapes.len() as u32;
    for c in &mut codes {
        if *c == u32::MAX {
            *c = raw_code;
        }
    }
    put_varint(out, shapes.len() as u64);
    for shape in &shapes {
        put_varint(out, shape.len() as u64);
        for &(key, kind) in shape {
            put_str(out, key);
            out.push(kind);
        }
    }
    numbers::put(out, "extra shapes", &codes)?;

    let (columns, shape_columns) = columns_of(&shapes);
    let mut nums: Vec<(Vec<i64>, Vec<u32>)> = vec![(Vec::new(), Vec::new()); columns.len()];
    let mut strs: Vec<Vec<&str>> = vec![Vec::new(); columns.len()];
    let mut at = 0;
    for &code in &codes {
        let Some(fields) = shape_columns.get(code as usize) else {
            continue;
        };
        for (&c, value) in fields.iter().zip(&flat[at..at + fields.len()]) {
            match *value {
                Value::Num { mantissa, decimals } => {
                    nums[c].0.push(mantissa);
                    nums[c].1.push(decimals);
                }
                Value::Str(s) => strs[c].push(s),
                Value::Literal => {}
            }
        }
        at += fields.len();
    }
    for (c, &(_, kind)) in columns.iter().enumerate() {
        if kind == NUM {
            let (mantissas, decimals) = &nums[c];
            let scale = decimals.iter().copied().max().unwrap_or(0);
            // Exact: at most MAX_DIGITS digits and MAX_DECIMALS decimals (see MAX_DIGITS).
            let scaled: Vec<i64> = mantissas
                .iter()
                .zip(decimals)
                .map(|(&m, &d)| m * 10i64.pow(scale - d))
                .collect();
            out.push(scale as u8);
            numbers::put(out, "extra decimals", decimals)?;
            numbers::put(out, "extra numbers", &scaled)?;
        } else {
            strings::put(out, "extra strings", &strs[c])?;
        }
    }

    put_varint(out, raw_count);
    put_varint(out, raw.len() as u64);
    if raw.len() > MAX_RAW_BYTES {
        return Err(Error::Compress {
            column: "extra raw",
            detail: format!("{} bytes of raw extras, above {MAX_RAW_BYTES}", raw.len()),
        });
    }
    let packed = if raw.is_empty() {
        Vec::new()
    } else {
        zstd::bulk::compress(&raw, RAW_LEVEL).map_err(|e| Error::Compress {
            column: "extra raw",
            detail: e.to_string(),
        })?
    };
    put_section(out, &packed);
    Ok(())
}

/// The (key, kind) columns of `shapes`' number and string fields, in first-named order, and
/// for each shape its fields' column indexes (a literal's is never read: `usize::MAX`).
fn columns_of<K: AsRef<str>>(shapes: &[Vec<(K, u8)>]) -> (Vec<(&str, u8)>, Vec<Vec<usize>>) {
    let mut columns: Vec<(&str, u8)> = Vec::new();
    let mut shape_columns = Vec::with_capacity(shapes.len());
    for shape in shapes {
        let mut fields = Vec::with_capacity(shape.len());
        for (key, kind) in shape {
            let field = (key.as_ref(), *kind);
            let c = if matches!(*kind, NUM | STR) {
                columns.iter().position(|&c| c == field).unwrap_or_else(|| {
                    columns.push(field);
                    columns.len() - 1
                })
            } else {
                usize::MAX
            };
            fields.push(c);
        }
        shape_columns.push(fields);
    }
    (columns, shape_columns)
}

/// One decoded column.
enum Column {
    Num {
        scale: u32,
        decimals: Vec<u32>,
        scaled: Vec<i64>,
    },
    Str {
        dictionary: Vec<String>,
        codes: Vec<u32>,
    },
}

/// Reads the extras of `n` readings written by [`put`], every column checked, and renders
/// those of the readings in `keep` (a row range within `n`: a read of one series renders only
/// its rows, which is most of what decoding extras costs); `sizes`, when given, receives each
/// column's name and its bytes.
pub(super) fn get(
    r: &mut Reader<'_>,
    n: usize,
    keep: std::ops::Range<usize>,
    mut sizes: Option<&mut Vec<(String, usize)>>,
) -> Result<Vec<String>> {
    let mut mark = r.remaining();
    let mut note = |r: &Reader<'_>, name: String| {
        if let Some(sizes) = sizes.as_deref_mut() {
            sizes.push((name, mark - r.remaining()));
        }
        mark = r.remaining();
    };
    let shape_count = r.count(r.remaining())?;
    let mut shapes: Vec<Vec<(String, u8)>> = Vec::with_capacity(shape_count.min(1024));
    for _ in 0..shape_count {
        let fields = r.count(r.remaining())?;
        let mut shape = Vec::with_capacity(fields.min(1024));
        for _ in 0..fields {
            let key = r.str()?.to_owned();
            let kind = r.byte()?;
            if kind > NULL {
                return Err(Error::corrupt(format!("extras: field kind {kind}")));
            }
            shape.push((key, kind));
        }
        shapes.push(shape);
    }
    let codes: Vec<u32> = numbers::get(r, "extra shapes", n)?;
    if codes.iter().any(|&c| c as usize > shape_count) {
        return Err(Error::corrupt("extras: a shape index past the dictionary"));
    }
    note(r, "extra shapes".to_owned());

    let (columns, shape_columns) = columns_of(&shapes);
    let mut lengths = vec![0usize; columns.len()];
    let mut raw_expected = 0usize;
    for &code in &codes {
        match shape_columns.get(code as usize) {
            Some(fields) => {
                for &c in fields {
                    if let Some(length) = lengths.get_mut(c) {
                        *length += 1;
                    }
                }
            }
            None => raw_expected += 1,
        }
    }
    let mut decoded = Vec::with_capacity(columns.len());
    for (c, &(key, kind)) in columns.iter().enumerate() {
        let len = lengths[c];
        let column = if kind == NUM {
            let scale = u32::from(r.byte()?);
            if scale > MAX_DECIMALS {
                return Err(Error::corrupt(format!("extras: scale {scale} of {key}")));
            }
            let decimals: Vec<u32> = numbers::get(r, "extra decimals", len)?;
            let scaled: Vec<i64> = numbers::get(r, "extra numbers", len)?;
            if decimals.iter().any(|&d| d > scale) {
                return Err(Error::corrupt(format!(
                    "extras: decimals above scale in {key}"
                )));
            }
            Column::Num {
                scale,
                decimals,
                scaled,
            }
        } else {
            let (dictionary, codes) = strings::get(r, "extra strings", len)?;
            Column::Str { dictionary, codes }
        };
        note(r, format!("extra {key}"));
        decoded.push(column);
    }

    let raw_count = r.count(n)?;
    if raw_count != raw_expected {
        return Err(Error::corrupt(format!(
            "extras: {raw_count} raw objects, {raw_expected} expected"
        )));
    }
    let raw_len = r.count(MAX_RAW_BYTES)?;
    let packed = r.section()?;
    let raw = if raw_len == 0 && packed.is_empty() {
        Vec::new()
    } else {
        zstd::bulk::decompress(packed, raw_len)
            .map_err(|e| Error::corrupt(format!("extras: raw column: {e}")))?
    };
    if raw.len() != raw_len {
        return Err(Error::corrupt("extras: raw column length differs"));
    }
    let mut raw = Reader::new(&raw, "raw extras");
    note(r, "extra raw".to_owned());

    let mut cursors = vec![0usize; columns.len()];
    let mut extras = Vec::with_capacity(keep.len().min(n));
    let mut text = String::new();
    for (row, &code) in codes.iter().enumerate() {
        let (Some(shape), Some(fields)) =
            (shapes.get(code as usize), shape_columns.get(code as usize))
        else {
            let object = raw.str()?;
            if keep.contains(&row) {
                extras.push(object.to_owned());
            }
            continue;
        };
        if !keep.contains(&row) {
            // Skipped, but its fields' places in their columns are taken.
            for &c in fields {
                if let Some(cursor) = cursors.get_mut(c) {
                    *cursor += 1;
                }
            }
            continue;
        }
        text.clear();
        render(&mut text, shape, |i| {
            // Asked only for NUM and STR fields, which all have a column.
            let c = fields[i];
            let at = cursors[c];
            cursors[c] += 1;
            match &decoded[c] {
                Column::Num {
                    scale,
                    decimals,
                    scaled,
                } => Field::Num {
                    mantissa: scaled[at] / 10i64.pow(scale - decimals[at]),
                    decimals: decimals[at],
                },
                Column::Str { dictionary, codes } => Field::Str(&dictionary[codes[at] as usize]),
            }
        });
        extras.push(text.clone());
    }
    raw.finish()?;
    Ok(extras)
}
