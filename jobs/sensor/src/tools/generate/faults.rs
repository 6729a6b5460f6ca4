//! How malformed lines are broken.

use rand::Rng;
use rand_chacha::ChaCha8Rng;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Field {
    Device,
    Ts,
    Temp,
}

/// How a malformed line is broken. Each makes the line fail the pipeline's decoder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Flaw {
    Truncated {
        keep_permille: u16,
    },
    Missing(Field),
    Null(Field),
    /// Index into [`NOT_NUMBERS`].
    TempNotNumber(u8),
    TempString,
    DeviceUnderscore,
    NegativeTs,
    MillisTs,
    NotUtf8,
}

/// What buggy firmware writes for a metric it could not read: JSON extensions serde rejects,
/// out-of-range numbers, or strings.
pub(super) const NOT_NUMBERS: [&[u8]; 6] = [
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"1e999",
    b"\"NaN\"",
    b"\"n/a\"",
];

impl Flaw {
    pub(super) fn random(rng: &mut ChaCha8Rng) -> Self {
        let field =
            |rng: &mut ChaCha8Rng| [Field::Device, Field::Ts, Field::Temp][rng.random_range(0..3)];
        match rng.random_range(0..9) {
            0 => Self::Truncated {
                keep_permille: rng.random_range(1..1000),
            },
            1 => Self::Missing(field(rng)),
            2 => Self::Null(field(rng)),
            3 => Self::TempNotNumber(rng.random_range(0..NOT_NUMBERS.len() as u8)),
            4 => Self::TempString,
            5 => Self::DeviceUnderscore,
            6 => Self::NegativeTs,
            7 => Self::MillisTs,
            _ => Self::NotUtf8,
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    use crate::tools::generate::plan::MAX_TS;
    use crate::tools::generate::testing::{args, generate, lines, reading, ts};

    #[test]
    fn malformed_lines_are_a_mix_of_rejects() {
        let mut a = args(100, "10m");
        a.malformed_rate = 0.2;
        let (out, summary) = generate(&a);
        let bad: Vec<&[u8]> = lines(&out)
            .into_iter()
            .filter(|l| reading(l).is_none())
            .collect();
        assert_eq!(bad.len() as u64, summary.malformed);
        let count = |f: &dyn Fn(&[u8]) -> bool| bad.iter().filter(|l| f(l)).count();
        let has = |l: &[u8], s: &str| l.windows(s.len()).any(|w| w == s.as_bytes());
        let kinds = [
            count(&|l| serde_json::from_slice::<Value>(l).is_err() && l.last() != Some(&b'}')),
            count(&|l| std::str::from_utf8(l).is_err()),
            count(&|l| has(l, "\"dev_")),
            count(&|l| has(l, "\"ts\":-")),
            count(&|l| has(l, ":null")),
            count(&|l| has(l, "\"temp\":\"")),
            count(&|l| has(l, "\"temp\":NaN") || has(l, "Infinity") || has(l, "1e999")),
            count(&|l| !has(l, "\"temp\"") && l.last() == Some(&b'}')),
            count(&|l| {
                ts(l).is_none()
                    && serde_json::from_slice::<Value>(l)
                        .ok()
                        .and_then(|v| v["ts"].as_i64())
                        .is_some_and(|t| t > MAX_TS)
            }),
        ];
        assert!(
            kinds.iter().all(|&n| n > 0),
            "some kind never appears: {kinds:?}"
        );
    }
}
