//! The mutation engine: byte edits, splices between corpus entries, and numbers and strings
//! replaced by the values that break parsers (integer bounds, huge floats, NaN, long strings).

use rand::Rng;
use rand_chacha::ChaCha8Rng;

/// Inputs are cut at this length: past the decoder's 64 KiB limit, below what slows a run.
const MAX_LEN: usize = 80 * 1024;

/// Numbers at the edges of `i64`, `u64`, `f64`, epoch seconds and the hour and range limits.
const NUMBERS: &[&str] = &[
    "-9223372036854775808",
    "9223372036854775807",
    "9223372036854775808",
    "-9223372036854775809",
    "18446744073709551615",
    "18446744073709551616",
    "1e300",
    "-1e300",
    "1e308",
    "1.8e308",
    "-1e999",
    "1e999",
    "1e-320",
    "NaN",
    "nan",
    "inf",
    "-inf",
    "+Inf",
    "Infinity",
    "0",
    "-0",
    "-1",
    "1",
    "0.5",
    "1e15",
    "1e16",
    "-1e19",
    "9e18",
    "1e16m",
    "1e308d",
    "4294967296",
    "2147483648",
    "9999999999",
    "10000000000",
    "1724101200",
    "1724104799",
    "3599",
    "3600",
    "86400",
    "2678400",
    "2678401",
    "00000000000000000000001",
    "1.5",
    ".5",
    "5.",
    "1e",
    "+1",
    "0x10",
    "1_000",
    "99999999999999999999999999999999999999999999",
];

/// Strings that are empty, long, not ASCII, or separators and metacharacters of the formats.
fn strings(rng: &mut ChaCha8Rng) -> String {
    let long = |n: usize| "x".repeat(n);
    match rng.random_range(0..35) {
        0 => String::new(),
        1 => "_".into(),
        2 => "a_b".into(),
        3 => long(64),
        4 => long(65),
        5 => long(rng.random_range(100..70_000)),
        6 => "é".into(),
        7 => "日本語".into(),
        8 => "\u{1F600}".into(),
        9 => "\u{0}".into(),
        10 => "\\u0000".into(),
        11 => "\\ud800".into(),
        12 => "%00".into(),
        13 => "%ff".into(),
        14 => "%".into(),
        15 => "%zz".into(),
        16 => "\\".into(),
        17 => "\"".into(),
        18 => "'".into(),
        19 => "`".into(),
        20 => "{}".into(),
        21 => "[]".into(),
        22 => "null".into(),
        23 => "true".into(),
        24 => "(a|b)*".into(),
        25 => ".*".into(),
        26 => "(".into(),
        27 => "(?i)x{1000}{1000}".into(),
        28 => "=~".into(),
        29 => "!~".into(),
        30 => "[5m]".into(),
        31 => "&".into(),
        32 => "=".into(),
        // Past f64's range: an overflow to infinity.
        33 => "9".repeat(400),
        _ => "/../".into(),
    }
}

/// Single bytes that are structure in JSON, PromQL, URLs or row keys.
const BYTES: &[u8] = b"{}[]\"'`\\,:_-.%&=?/#~!+*()@ \t\n\r\x00\x7f\xff\xc3\xa9";

/// A random range of `data`: `start..end`, possibly empty.
fn range(rng: &mut ChaCha8Rng, len: usize) -> (usize, usize) {
    let start = rng.random_range(0..=len);
    let end = start + rng.random_range(0..=(len - start).min(64));
    (start, end)
}

/// The spans of numeric text (digits with sign, point and exponent) in `data`.
fn number_spans(data: &[u8]) -> Vec<(usize, usize)> {
    let mut spans = Vec::new();
    let mut i = 0;
    while i < data.len() {
        if data[i].is_ascii_digit() {
            let mut start = i;
            if start > 0 && data[start - 1] == b'-' {
                start -= 1;
            }
            while i < data.len() && (data[i].is_ascii_alphanumeric() || data[i] == b'.') {
                i += 1;
            }
            spans.push((start, i));
        } else {
            i += 1;
        }
    }
    spans
}

/// The spans of words (alphanumerics, `.`, `:`, `-`): device ids, labels, parameter values.
fn word_spans(data: &[u8]) -> Vec<(usize, usize)> {
    let word = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b':' | b'-');
    let mut spans = Vec::new();
    let mut i = 0;
    while i < data.len() {
        if word(data[i]) {
            let start = i;
            while i < data.len() && word(data[i]) {
                i += 1;
            }
            spans.push((start, i));
        } else {
            i += 1;
        }
    }
    spans
}

fn replace_span(rng: &mut ChaCha8Rng, data: &mut Vec<u8>, spans: &[(usize, usize)], with: &[u8]) {
    if spans.is_empty() {
        let at = rng.random_range(0..=data.len());
        data.splice(at..at, with.iter().copied());
    } else {
        let (start, end) = spans[rng.random_range(0..spans.len())];
        data.splice(start..end, with.iter().copied());
    }
}

fn mutate_once(rng: &mut ChaCha8Rng, data: &mut Vec<u8>, corpus: &[Vec<u8>]) {
    match rng.random_range(0..11) {
        0 if !data.is_empty() => {
            let i = rng.random_range(0..data.len());
            data[i] ^= 1 << rng.random_range(0..8);
        }
        1 if !data.is_empty() => {
            let i = rng.random_range(0..data.len());
            data[i] = BYTES[rng.random_range(0..BYTES.len())];
        }
        2 => {
            let at = rng.random_range(0..=data.len());
            let b = if rng.random_bool(0.5) {
                BYTES[rng.random_range(0..BYTES.len())]
            } else {
                rng.random()
            };
            data.insert(at, b);
        }
        3 => {
            let (start, end) = range(rng, data.len());
            data.drain(start..end);
        }
        4 => {
            let (start, end) = range(rng, data.len());
            let copy = data[start..end].to_vec();
            let at = rng.random_range(0..=data.len());
            data.splice(at..at, copy);
        }
        5 | 6 => {
            // Splice: a piece of another entry replaces a piece of this one.
            let other = &corpus[rng.random_range(0..corpus.len())];
            let (from, to) = range(rng, other.len());
            let (start, end) = range(rng, data.len());
            data.splice(start..end, other[from..to].iter().copied());
        }
        7 | 8 => {
            let n = NUMBERS[rng.random_range(0..NUMBERS.len())];
            let spans = number_spans(data);
            replace_span(rng, data, &spans, n.as_bytes());
        }
        9 => {
            let s = strings(rng);
            let spans = word_spans(data);
            replace_span(rng, data, &spans, s.as_bytes());
        }
        _ => {
            let s = strings(rng);
            let at = rng.random_range(0..=data.len());
            data.splice(at..at, s.bytes());
        }
    }
}

/// A mutated copy of a random corpus entry: one to eight stacked mutations.
pub(super) fn input(rng: &mut ChaCha8Rng, corpus: &[Vec<u8>]) -> Vec<u8> {
    let mut data = corpus[rng.random_range(0..corpus.len())].clone();
    let n = 1 << rng.random_range(0..4);
    for _ in 0..rng.random_range(1..=n) {
        mutate_once(rng, &mut data, corpus);
    }
    data.truncate(MAX_LEN);
    data
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn the_same_seed_makes_the_same_input() {
        let corpus = vec![br#"{"device":"dev1","ts":1724101200,"temp":20.5}"#.to_vec()];
        let make = |seed| input(&mut ChaCha8Rng::seed_from_u64(seed), &corpus);
        assert_eq!(make(7), make(7));
        assert!((0..20).any(|s| make(s) != corpus[0]), "inputs are mutated");
    }

    #[test]
    fn spans_find_numbers_and_words() {
        let line = b"ts=-1724101200&x=1.5e3 dev-1";
        let numbers: Vec<&[u8]> = number_spans(line)
            .iter()
            .map(|&(a, b)| &line[a..b])
            .collect();
        assert_eq!(numbers, [&b"-1724101200"[..], b"1.5e3", b"-1"]);
        let words: Vec<&[u8]> = word_spans(line).iter().map(|&(a, b)| &line[a..b]).collect();
        assert_eq!(
            words,
            [&b"ts"[..], b"-1724101200", b"x", b"1.5e3", b"dev-1"]
        );
    }
}
