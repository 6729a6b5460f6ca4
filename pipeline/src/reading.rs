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
        ) {
            let values = [
                f64::from_bits(bits),
                whole as f64,
                10f64.powi(exp),
                -(10f64.powi(exp)),
                hundredths as f64 / 100.0,
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
