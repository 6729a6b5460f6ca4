//! The generated users: power-law activity (inverse-CDF Zipf) and ids of real-world shapes.

use std::fmt::Write as _;

/// Most users a run may have: every id style stays unique below it.
pub const MAX_USERS: u64 = 100_000_000;

/// Ranks `0..n` drawn with probability about proportional to `1 / (rank + 1)^s`: the
/// continuous inverse CDF of that law, floored. O(1) memory and time a draw, whatever `n`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Zipf {
    n: u64,
    s: f64,
    /// `(n + 1)^(1 - s) - 1`, or `ln(n + 1)` when `s` is 1.
    span: f64,
}

impl Zipf {
    /// `n` ranks, exponent `s` (> 0; 1 is the classic law, larger is more skewed).
    pub(crate) fn new(n: u64, s: f64) -> Self {
        let top = (n as f64) + 1.0;
        let span = if (s - 1.0).abs() < 1e-9 {
            top.ln()
        } else {
            top.powf(1.0 - s) - 1.0
        };
        Zipf { n, s, span }
    }

    /// The rank for `u` uniform in `[0, 1)`.
    pub(crate) fn rank(&self, u: f64) -> u64 {
        let x = if (self.s - 1.0).abs() < 1e-9 {
            (u * self.span).exp()
        } else {
            (1.0 + u * self.span).powf(1.0 / (1.0 - self.s))
        };
        // x is in [1, n + 1); rounding may reach n + 1.
        ((x as u64).saturating_sub(1)).min(self.n - 1)
    }
}

/// SplitMix64: a fixed, fast mixing of one word, for what must not depend on the draw order
/// (a user's id style, its dimension values).
pub(crate) fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Mobile number prefixes, the common ones repeated: most ids share a few leading digits.
const PHONE_PREFIXES: &[&str] = &[
    "138", "138", "138", "139", "139", "139", "137", "136", "135", "135", "134", "130", "131",
    "132", "133", "150", "151", "152", "157", "158", "158", "159", "159", "155", "156", "153",
    "180", "181", "182", "183", "186", "186", "187", "188", "188", "189", "189", "177", "176",
    "178", "199", "198",
];

/// How one user's id is written: most are 11-digit mobile numbers, then account numbers sent
/// as JSON integers, then string ids of other systems.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum IdStyle {
    /// `13812345678`, as a JSON string.
    Phone,
    /// An account number `1000000..=100999999`, as a JSON integer (or, some events, the same
    /// digits as a string: the same user).
    Account,
    /// `u-` and 12 hex digits.
    Uid,
    /// `anon:` and 12 hex digits, a device's anonymous visitor.
    Anonymous,
}

/// The id of user `index` (`< MAX_USERS`) of a run with `seed`, written into `out`
/// (cleared), and its style. Distinct indexes give distinct ids: each style's number is an
/// affine bijection of the index, and the styles' shapes never meet.
pub(crate) fn user_id(seed: u64, index: u64, out: &mut String) -> IdStyle {
    out.clear();
    let h = mix(seed ^ mix(index));
    let style = match h % 100 {
        0..=71 => IdStyle::Phone,
        72..=89 => IdStyle::Account,
        90..=96 => IdStyle::Uid,
        _ => IdStyle::Anonymous,
    };
    let offset = u128::from(mix(seed));
    // Coprime with 10^8 (odd, not a multiple of 5), and odd (a bijection modulo 2^48).
    let affine = |mul: u128, modulus: u128| (u128::from(index) * mul + offset) % modulus;
    // Infallible: writing to a String.
    let _ = match style {
        IdStyle::Phone => {
            let prefix = PHONE_PREFIXES[((h >> 8) % PHONE_PREFIXES.len() as u64) as usize];
            write!(out, "{prefix}{:08}", affine(54_435_761, 100_000_000))
        }
        IdStyle::Account => write!(out, "{}", 1_000_000 + affine(48_271, 100_000_000)),
        IdStyle::Uid => write!(out, "u-{:012x}", affine(0x0005_DEEC_E66D, 1 << 48)),
        IdStyle::Anonymous => write!(out, "anon:{:012x}", affine(0x2545_F491_4F6C_DD1D, 1 << 48)),
    };
    style
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::key::validate_user_id;

    #[test]
    fn ranks_stay_in_range_and_skew() {
        for s in [0.7, 1.0, 1.3] {
            let z = Zipf::new(1000, s);
            let mut counts = vec![0u32; 1000];
            for i in 0..100_000 {
                let r = z.rank(f64::from(i) / 100_000.0);
                counts[r as usize] += 1;
            }
            assert!(counts[0] > counts[10] && counts[10] > counts[500], "s {s}");
            let top10: u32 = counts[..10].iter().sum();
            assert!(
                top10 > 10_000,
                "s {s}: the top 1% of ranks has {top10} of 100000"
            );
        }
        let one = Zipf::new(1, 1.0);
        assert_eq!((one.rank(0.0), one.rank(0.999_999)), (0, 0));
        assert_eq!(Zipf::new(5, 1.0).rank(1.0 - f64::EPSILON), 4);
    }

    #[test]
    fn ids_are_valid_distinct_and_mostly_phone_numbers() {
        let mut seen = HashSet::new();
        let mut id = String::new();
        let mut phones = 0;
        for index in 0..50_000 {
            let style = user_id(7, index, &mut id);
            validate_user_id(&id).unwrap();
            match style {
                IdStyle::Phone => {
                    phones += 1;
                    assert_eq!(id.len(), 11);
                    assert!(["13", "15", "17", "18", "19"].contains(&&id[..2]), "{id}");
                }
                IdStyle::Account => assert!(id.parse::<u64>().unwrap() < 101_000_000),
                IdStyle::Uid => assert!(id.starts_with("u-") && id.len() == 14),
                IdStyle::Anonymous => assert!(id.starts_with("anon:") && id.len() == 17),
            }
            assert!(seen.insert(id.clone()), "{id} twice");
        }
        assert!(
            (33_000..39_000).contains(&phones),
            "{phones} phone ids of 50000"
        );
        user_id(8, 0, &mut id);
        let other_seed = id.clone();
        user_id(7, 0, &mut id);
        assert_ne!(id, other_seed, "the seed changes the ids");
    }
}
