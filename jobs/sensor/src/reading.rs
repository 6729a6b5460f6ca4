//! The sensor reading, and how its values are written as cell text.

use serde::{Deserialize, Serialize};

/// One decoded sensor reading.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reading {
    /// Device id (validated: 1–64 bytes of `[A-Za-z0-9.:-]`).
    pub device: String,
    /// Event time, epoch seconds (`>= 0`).
    pub ts: i64,
    /// The primary metric (finite).
    pub value: f64,
    /// Every other field of the input object as compact JSON (`{}` if none), keys sorted.
    ///
    /// Produced once, by decoding, and stored as is in the narrow row's `t:x`.
    pub extra: String,
    /// The `room` field (also in `extra`), if the reading carries one as a string: kept apart
    /// so that the room view needs no second parse of `extra`.
    #[serde(default)]
    pub room: Option<String>,
}

impl Reading {
    /// The `room` field, if the reading carries one as a string.
    pub fn room(&self) -> Option<String> {
        self.room.clone()
    }
}

/// The `room` field of `extra` (compact JSON of a reading's other fields), if it is a string:
/// for readings recovered from storage, whose room is only in `t:x`.
pub fn room_of_extra(extra: &str) -> Option<String> {
    // Borrowing and skipping every other field.
    #[derive(Deserialize)]
    struct RoomOnly<'a> {
        #[serde(borrow)]
        room: Option<std::borrow::Cow<'a, str>>,
    }
    serde_json::from_str::<RoomOnly<'_>>(extra)
        .ok()?
        .room
        .map(std::borrow::Cow::into_owned)
}

/// The shortest decimal text that parses back to exactly `v` (`25.5`, `-3`, `1e-7`).
///
/// Plain notation for `1e-5 <= |v| < 1e16`, scientific outside, so no text is longer than
/// about 24 bytes. Both Java's `Double.parseDouble` and Rust's `str::parse` read it back.
pub fn format_value(v: f64) -> String {
    if let Some(text) = format_few_decimals(v) {
        return text;
    }
    // ryu (a fraction of `std::fmt`'s time) gives the shortest digits too, and its notation is
    // `{v}`'s in this range and `{v:e}`'s outside, but for a whole number's `.0` (`-3.0`). Of
    // 15 digits or fewer, the shortest digits that parse back to a normal `v` are the only
    // ones (two such decimals lie further apart than a double's rounding interval is wide), so
    // both give them. Of 16 or 17 more than one may, and the two can choose differently
    // (`-230629992262018.12` against `.13`): those, and subnormal values, take `std::fmt`.
    if v == 0.0 || v.is_normal() {
        let mut buf = ryu::Buffer::new();
        let text = buf.format_finite(v);
        let text = text.strip_suffix(".0").unwrap_or(text);
        let digits = text
            .bytes()
            .take_while(|&b| b != b'e')
            .filter(u8::is_ascii_digit)
            .count();
        if digits <= 15 {
            return text.to_owned();
        }
    }
    format_value_by_std(v)
}

/// [`format_value`] of a value with at most three decimals (`21.8`, `-67`, `3.705`), as sensors
/// send them, in a few multiplications instead of ryu's search for the shortest digits.
///
/// For the smallest `k <= 3` with `m = round(v * 10^k)` and `m / 10^k == v`, `m` with `k`
/// decimals is the text: the division is correctly rounded, as parsing the text is, so the text
/// parses back to `v`. It is the shortest such text: one with `j < k` decimals would have been
/// found at `j`, since `v * 10^j` is then within far less than ½ of its digits (`|v| < 1e12`, so
/// `|v * 10^j| < 2^50`). And of its length it is the only one, having at most 15 digits
/// (`format_value`'s rule). `None` if no `k <= 3` fits, or outside `1e-3 <= |v| < 1e12`.
fn format_few_decimals(v: f64) -> Option<String> {
    const SCALES: [f64; 4] = [1.0, 10.0, 100.0, 1000.0];
    if !(1e-3..1e12).contains(&v.abs()) {
        return None;
    }
    let (decimals, m) = SCALES
        .iter()
        .enumerate()
        .map(|(k, scale)| (k, (v * scale).round(), scale))
        .find(|(_, m, scale)| m / *scale == v)
        .map(|(k, m, _)| (k, m))?;
    // `|m| < 1e15`: exact as an integer.
    let mut n = m.abs() as u64;
    let mut buf = [0u8; 24];
    let mut at = buf.len();
    let mut push = |byte: u8| {
        at -= 1;
        buf[at] = byte;
    };
    for _ in 0..decimals {
        push(b'0' + (n % 10) as u8);
        n /= 10;
    }
    if decimals > 0 {
        push(b'.');
    }
    loop {
        push(b'0' + (n % 10) as u8);
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if v < 0.0 {
        push(b'-');
    }
    std::str::from_utf8(&buf[at..]).ok().map(str::to_owned)
}

/// [`format_value`] by `std::fmt`: its definition.
fn format_value_by_std(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 || (1e-5..1e16).contains(&a) {
        format!("{v}")
    } else {
        format!("{v:e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn value_text_is_short() {
        assert_eq!(format_value(25.5), "25.5");
        assert_eq!(format_value(-3.0), "-3");
        assert_eq!(format_value(0.1 + 0.2), "0.30000000000000004");
        assert_eq!(format_value(1e300), "1e300");
        assert_eq!(format_value(1.5e-7), "1.5e-7");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]

        /// Any bits (every sign, exponent and mantissa), whole numbers, powers of ten (the
        /// notation's edges) and sensor-like values of up to 15 digits.
        #[test]
        fn value_text_is_std_s(
            bits in any::<u64>(),
            whole in -1_000_000i64..1_000_000,
            exp in -30i32..30,
            hundredths in -100_000_000i64..100_000_000,
            decimals in -(1i64 << 53)..1 << 53,
            scale in prop::sample::select(vec![1.0, 10.0, 100.0, 1000.0, 10_000.0]),
        ) {
            let values = [
                f64::from_bits(bits),
                whole as f64,
                10f64.powi(exp),
                -(10f64.powi(exp)),
                hundredths as f64 / 100.0,
                decimals as f64 / scale,
                (decimals % 1_000_000) as f64 / scale,
                0.0,
                -0.0,
            ];
            for v in values {
                prop_assert_eq!(format_value(v), format_value_by_std(v));
            }
        }
    }

    proptest! {
        #[test]
        fn value_text_round_trips(v in proptest::num::f64::NORMAL | proptest::num::f64::SUBNORMAL | proptest::num::f64::ZERO) {
            let text = format_value(v);
            prop_assert_eq!(text.parse::<f64>().unwrap().to_bits(), v.to_bits());
            prop_assert!(text.len() <= 25, "{} is long", text);
        }
    }
}
