//! The fast path of `decode_line`: a borrowed tokenizer for the lines sensors actually send
//! (one flat object of strings without escapes, plain numbers and literals, no repeated key).
//!
//! It answers only where it is sure to agree with the reference decoder byte for byte, and
//! says `None` for everything else, including every line the reference rejects: rejections
//! keep one source of truth and bad input is rare.

use serde::Serializer as _;

use crate::codec::key::validate_device;
use crate::reading::Reading;
use crate::registry::validate_room;
use pipeline::json::MAX_TS;

/// More fields than this go to the reference decoder (sensor lines carry about ten).
const MAX_FIELDS: usize = 16;
/// Longer numbers go to the reference decoder: the fast path parses only ordinary ones.
const MAX_NUMBER_BYTES: usize = 32;
/// Integers with more digits may not fit an `i64`, where serde_json's `Number` changes kind.
const MAX_INT_DIGITS: usize = 18;

/// A field's value. Strings hold their text between the quotes, which needs no unescaping;
/// integers keep their text, already what serde_json prints for them; floats keep their
/// text (`-?(0|[1-9][0-9]*)\.[0-9]+`, at most 32 bytes, so always finite), read when needed.
#[derive(Debug, Clone, Copy)]
enum Scalar<'a> {
    Str(&'a str),
    Int(&'a str, i64),
    Float(&'a str),
    Bool(bool),
    Null,
}

struct Tokens<'a> {
    text: &'a str,
    at: usize,
}

impl<'a> Tokens<'a> {
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    fn skip_whitespace(&mut self) {
        // JSON's whitespace, exactly: serde_json accepts no other.
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.peek() {
            self.at += 1;
        }
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    /// A string without escapes or control characters (serde_json rejects the latter and
    /// prints the former differently), as the text between its quotes.
    fn string(&mut self) -> Option<&'a str> {
        self.eat(b'"')?;
        let start = self.at;
        let rest = self.text.as_bytes().get(start..)?;
        let len = memchr::memchr2(b'"', b'\\', rest)?;
        let body = rest.get(..len)?;
        // A fold, not `any`: no early exit, so it compiles to a few wide compares.
        if rest.get(len) != Some(&b'"') || body.iter().fold(false, |c, &b| c | (b < 0x20)) {
            return None;
        }
        let s = self.text.get(start..start + len)?;
        self.at = start + len + 1;
        Some(s)
    }

    fn digits(&mut self) -> usize {
        let start = self.at;
        while let Some(b'0'..=b'9') = self.peek() {
            self.at += 1;
        }
        self.at - start
    }

    /// `-?(0|[1-9][0-9]*)(.[0-9]+)?`: no exponent, no leading zero, not `-0`.
    fn number(&mut self) -> Option<Scalar<'a>> {
        let start = self.at;
        let negative = self.eat(b'-').is_some();
        let first = self.peek()?;
        let int_digits = self.digits();
        if int_digits == 0 || (first == b'0' && int_digits > 1) {
            return None;
        }
        let fraction = self.eat(b'.').is_some();
        if fraction && self.digits() == 0 {
            return None;
        }
        if matches!(self.peek(), Some(b'e' | b'E')) || self.at - start > MAX_NUMBER_BYTES {
            return None;
        }
        let text = self.text.get(start..self.at)?;
        if fraction {
            Some(Scalar::Float(text))
        } else {
            // serde_json reads `-0` as the float -0.0.
            if int_digits > MAX_INT_DIGITS || (negative && first == b'0') {
                return None;
            }
            Some(Scalar::Int(text, text.parse().ok()?))
        }
    }

    fn literal(&mut self, word: &str, value: Scalar<'a>) -> Option<Scalar<'a>> {
        let rest = self.text.get(self.at..)?;
        rest.starts_with(word).then(|| {
            self.at += word.len();
            value
        })
    }

    fn scalar(&mut self) -> Option<Scalar<'a>> {
        match self.peek()? {
            b'"' => self.string().map(Scalar::Str),
            b'-' | b'0'..=b'9' => self.number(),
            b't' => self.literal("true", Scalar::Bool(true)),
            b'f' => self.literal("false", Scalar::Bool(false)),
            b'n' => self.literal("null", Scalar::Null),
            // Arrays and objects: the reference decoder.
            _ => None,
        }
    }
}

/// Whether serde_json prints the double nearest to `text` (`-?(0|[1-9][0-9]*)\.[0-9]+`) as
/// `text` itself. It prints a double's shortest digits, and a decimal of at most 15
/// significant digits is the shortest text of its double (doubles tell apart all such
/// decimals, from 1e-307 up): so when `text` has at most 15, no trailing zero but in `X.0`,
/// and a magnitude serde_json prints without an exponent (here 1e-4 ≤ |v| < 1e15, or 0).
pub(super) fn prints_as_itself(text: &str) -> bool {
    let unsigned = text.strip_prefix('-').unwrap_or(text);
    let Some((int, fraction)) = unsigned.split_once('.') else {
        return false;
    };
    if fraction == "0" {
        return int.len() <= 15;
    }
    if fraction.ends_with('0') {
        return false;
    }
    if int == "0" {
        let zeros = fraction.bytes().take_while(|&b| b == b'0').count();
        zeros <= 3 && fraction.len() - zeros <= 15
    } else {
        int.len() + fraction.len() <= 15
    }
}

/// Byte order, as `str::cmp`, but inline: keys are a few bytes long, where a call to
/// `memcmp` per comparison costs more than the comparison.
fn key_order(a: &str, b: &str) -> std::cmp::Ordering {
    for (x, y) in a.bytes().zip(b.bytes()) {
        if x != y {
            return x.cmp(&y);
        }
    }
    a.len().cmp(&b.len())
}

/// The reading of `text`, or `None` if the reference decoder must decide.
pub(super) fn decode(text: &str, metric: &str) -> Option<Reading> {
    // The reference takes these fields out one after another: a metric named like one of
    // them is too unusual to reproduce here.
    if matches!(metric, "device" | "ts" | "room") {
        return None;
    }
    let mut fields = [("", Scalar::Null); MAX_FIELDS];
    let mut len = 0;
    let mut tokens = Tokens { text, at: 0 };
    tokens.skip_whitespace();
    tokens.eat(b'{')?;
    tokens.skip_whitespace();
    if tokens.eat(b'}').is_none() {
        loop {
            tokens.skip_whitespace();
            let key = tokens.string()?;
            tokens.skip_whitespace();
            tokens.eat(b':')?;
            tokens.skip_whitespace();
            let value = tokens.scalar()?;
            *fields.get_mut(len)? = (key, value);
            len += 1;
            tokens.skip_whitespace();
            match tokens.peek()? {
                b',' => tokens.at += 1,
                b'}' => {
                    tokens.at += 1;
                    break;
                }
                _ => return None,
            }
        }
    }
    tokens.skip_whitespace();
    if tokens.at != text.len() {
        return None;
    }
    let fields = &fields[..len];
    // serde_json's map is a BTreeMap: keys in byte order, a repeated key keeps its last
    // value. Repeats go to the reference, so the sort need not be stable. The fields' indexes
    // are sorted, not the fields (a byte each, not a key and its value).
    // Each compares first by its key's first 8 bytes, zero-padded, as a big-endian number:
    // byte order, as keys hold no zero byte (`string` refuses control characters).
    let key = |i: u8| fields.get(usize::from(i)).map_or("", |f| f.0);
    let prefixes: [u64; MAX_FIELDS] = std::array::from_fn(|i| {
        let mut head = [0u8; 8];
        let bytes = key(i as u8).as_bytes();
        let n = bytes.len().min(8);
        head[..n].copy_from_slice(&bytes[..n]);
        u64::from_be_bytes(head)
    });
    let compare = |a: u8, b: u8| {
        let prefix = |i: u8| prefixes.get(usize::from(i)).copied();
        prefix(a)
            .cmp(&prefix(b))
            .then_with(|| key_order(key(a), key(b)))
    };
    let mut order: [u8; MAX_FIELDS] = std::array::from_fn(|i| i as u8);
    let order = &mut order[..len];
    order.sort_unstable_by(|&a, &b| compare(a, b));
    if order.windows(2).any(|w| compare(w[0], w[1]).is_eq()) {
        return None;
    }
    let get = |key: &str| {
        fields
            .iter()
            .find(|f| key_order(f.0, key).is_eq())
            .map(|f| f.1)
    };

    let Scalar::Str(device) = get("device")? else {
        return None;
    };
    validate_device(device).ok()?;
    let ts = match get("ts")? {
        Scalar::Int(_, ts) => ts,
        Scalar::Str(s) => chrono::DateTime::parse_from_rfc3339(s).ok()?.timestamp(),
        _ => return None,
    };
    if !(0..=MAX_TS).contains(&ts) {
        return None;
    }
    let value = match get(metric)? {
        // At most 18 digits: exact as a double, as serde_json's `as_f64` gives it.
        Scalar::Int(_, v) => v as f64,
        Scalar::Float(text) => text.parse().ok()?,
        _ => return None,
    };
    let room = match get("room") {
        None | Some(Scalar::Null) => None,
        Some(Scalar::Str(room)) => {
            validate_room(room).ok()?;
            Some(room.to_string())
        }
        Some(_) => return None,
    };

    let mut extra = Vec::with_capacity(text.len());
    extra.push(b'{');
    for (key, value) in order.iter().filter_map(|&i| fields.get(usize::from(i))) {
        if [&"device", &"ts", &metric]
            .iter()
            .any(|k| key_order(key, k).is_eq())
        {
            continue;
        }
        if extra.len() > 1 {
            extra.push(b',');
        }
        extra.push(b'"');
        extra.extend_from_slice(key.as_bytes());
        extra.extend_from_slice(b"\":");
        match value {
            Scalar::Str(s) => {
                extra.push(b'"');
                extra.extend_from_slice(s.as_bytes());
                extra.push(b'"');
            }
            Scalar::Int(text, _) => extra.extend_from_slice(text.as_bytes()),
            // serde_json's own float formatting (`45.0`, `3.7`, `1e16`), not the input's
            // text (`45.0`, `3.70`, `10000000000000000.0`), but the input's text where it
            // is the same.
            Scalar::Float(text) if prints_as_itself(text) => {
                extra.extend_from_slice(text.as_bytes());
            }
            Scalar::Float(text) => serde_json::Serializer::new(&mut extra)
                .serialize_f64(text.parse().ok()?)
                .ok()?,
            Scalar::Bool(true) => extra.extend_from_slice(b"true"),
            Scalar::Bool(false) => extra.extend_from_slice(b"false"),
            Scalar::Null => extra.extend_from_slice(b"null"),
        }
    }
    extra.push(b'}');
    Some(Reading {
        device: device.to_string(),
        ts,
        value,
        extra: String::from_utf8(extra).ok()?,
        room,
    })
}
