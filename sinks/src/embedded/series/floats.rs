//! The primary value column, decimal-aware: sensors send decimals (`21.4`, `3.71`), which are
//! stored as integers at the column's scale (`214` at scale 1), exact to the bit; the few
//! values that are not such a decimal (NaN, infinities, `-0.0`, `0.1 + 0.2`) are kept apart as
//! their bits.

use super::bytes::{put_varint, Reader};
use super::{numbers, Error, Result};

/// The most decimals a value may have to be stored as a scaled integer.
const MAX_SCALE: u8 = 9;
/// Powers of ten up to [`MAX_SCALE`], each exact as a double.
const POW10: [f64; MAX_SCALE as usize + 1] = [1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9];
/// Below 2^53 every integer is exact as a double.
const EXACT: f64 = 9_007_199_254_740_992.0;

/// `v` as an integer `m` with `m / 10^scale == v` to the bit, if there is one.
///
/// The division is correctly rounded, so a decimal with fewer decimals than `scale` is found
/// at `scale` too: `m / 10^k` and `(m * 10^(scale-k)) / 10^scale` are the same rational number,
/// rounded the same way (while both integers are exact).
fn at_scale(v: f64, scale: u8) -> Option<i64> {
    let p = POW10[usize::from(scale)];
    let m = (v * p).round();
    if m.is_nan() || m.abs() >= EXACT {
        return None;
    }
    let m = m as i64;
    ((m as f64 / p).to_bits() == v.to_bits()).then_some(m)
}

/// Appends `values`.
///
/// Layout: the scale `K` (one byte); the mantissas `round(v * 10^K)` as an integer column (an
/// exception repeats the mantissa before it); the number of exceptions, then for each the
/// distance from the previous exception's index (varint) and its bits (8 bytes, little end).
pub(super) fn put(out: &mut Vec<u8>, values: &[f64]) -> Result<()> {
    let scale = values
        .iter()
        .filter_map(|&v| (0..=MAX_SCALE).find(|&k| at_scale(v, k).is_some()))
        .max()
        .unwrap_or(0);
    let mut mantissas = Vec::with_capacity(values.len());
    let mut exceptions = Vec::new();
    let mut previous = 0;
    for (i, &v) in values.iter().enumerate() {
        match at_scale(v, scale) {
            Some(m) => previous = m,
            None => exceptions.push((i, v.to_bits())),
        }
        mantissas.push(previous);
    }
    out.push(scale);
    numbers::put(out, "values", &mantissas)?;
    put_varint(out, exceptions.len() as u64);
    let mut last = 0;
    for (i, bits) in exceptions {
        put_varint(out, (i - last) as u64);
        out.extend_from_slice(&bits.to_le_bytes());
        last = i;
    }
    Ok(())
}

/// Reads `n` values written by [`put`].
pub(super) fn get(r: &mut Reader<'_>, n: usize) -> Result<Vec<f64>> {
    let scale = r.byte()?;
    if scale > MAX_SCALE {
        return Err(Error::corrupt(format!("values: scale {scale}")));
    }
    let p = POW10[usize::from(scale)];
    let mantissas: Vec<i64> = numbers::get(r, "values", n)?;
    let mut values: Vec<f64> = mantissas.iter().map(|&m| m as f64 / p).collect();
    let exceptions = r.count(n)?;
    let mut at = 0usize;
    for k in 0..exceptions {
        let gap = r.count(n)?;
        at = at
            .checked_add(gap)
            .filter(|&i| i < n && (k == 0 || gap > 0))
            .ok_or_else(|| Error::corrupt("values: exception index out of order"))?;
        let bits = r.take(8)?;
        let mut le = [0u8; 8];
        le.copy_from_slice(bits);
        values[at] = f64::from_bits(u64::from_le_bytes(le));
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decimals_are_scaled_integers() {
        assert_eq!(at_scale(21.4, 1), Some(214));
        assert_eq!(at_scale(21.4, 3), Some(21_400));
        assert_eq!(at_scale(3.71, 1), None);
        assert_eq!(at_scale(-0.0, 0), None);
        assert_eq!(at_scale(f64::NAN, 0), None);
        assert_eq!(at_scale(0.1 + 0.2, MAX_SCALE), None);
    }
}
