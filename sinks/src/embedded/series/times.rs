//! The timestamp column: the chunk's first time, then each reading's distance from the reading
//! before it in its series (from the first time for a series' first reading), so a device
//! reporting every 10 s gives a column of 9s, 10s and 11s that pcodec packs into 1–2 bits.

use super::bytes::{put_varint, zigzag, Reader};
use super::{numbers, Result};

/// Appends the times `ts` of readings sorted by (series, time), series by series as `runs`.
pub(super) fn put(out: &mut Vec<u8>, ts: &[i64], runs: &[u32]) -> Result<()> {
    let base = ts.iter().copied().min().unwrap_or(0);
    put_varint(out, zigzag(base));
    let mut deltas = Vec::with_capacity(ts.len());
    let mut at = 0;
    for &run in runs {
        let mut previous = base;
        for &t in &ts[at..at + run as usize] {
            // Wrapping: any two i64 times differ by a u64, and wrapping back restores them.
            deltas.push(t.wrapping_sub(previous) as u64);
            previous = t;
        }
        at += run as usize;
    }
    numbers::put(out, "times", &deltas)
}

/// Reads what [`put`] wrote for `runs` (which add up to the number of readings).
pub(super) fn get(r: &mut Reader<'_>, runs: &[u32]) -> Result<Vec<i64>> {
    let base = r.signed()?;
    let n = runs.iter().map(|&k| k as usize).sum();
    let deltas: Vec<u64> = numbers::get(r, "times", n)?;
    let mut ts = Vec::with_capacity(n);
    let mut at = 0;
    for &run in runs {
        let mut previous = base;
        for &d in &deltas[at..at + run as usize] {
            previous = previous.wrapping_add(d as i64);
            ts.push(previous);
        }
        at += run as usize;
    }
    Ok(ts)
}
