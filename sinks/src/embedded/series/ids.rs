//! The series-id column: the chunk's distinct ids in sorted order, front-coded, and how many
//! readings each has (run lengths, since readings are sorted by series).

use super::bytes::{put_section, put_varint, Reader};
use super::{numbers, Error, Result};

/// Appends the distinct `ids` (strictly increasing) and their run lengths `runs`.
pub(super) fn put(out: &mut Vec<u8>, ids: &[&str], runs: &[u32]) -> Result<()> {
    put_varint(out, ids.len() as u64);
    let mut block = Vec::new();
    let mut previous: &[u8] = &[];
    for id in ids {
        let id = id.as_bytes();
        let shared = previous.iter().zip(id).take_while(|(a, b)| a == b).count();
        put_varint(&mut block, shared as u64);
        // A prefix of a UTF-8 string cut at a byte boundary may not be UTF-8: the suffix is
        // written as bytes, and the whole id checked when read.
        put_section(&mut block, &id[shared..]);
        previous = id;
    }
    put_section(out, &block);
    numbers::put(out, "series runs", runs)
}

/// Reads what [`put`] wrote for a chunk of `n` readings: the ids and their run lengths, which
/// are at least 1 each and add up to `n`.
pub(super) fn get(r: &mut Reader<'_>, n: usize) -> Result<(Vec<String>, Vec<u32>)> {
    let count = r.count(n)?;
    let block = r.section()?;
    let mut b = Reader::new(block, "series ids");
    let mut ids: Vec<String> = Vec::new();
    let mut id = Vec::new();
    for _ in 0..count {
        let shared = b.count(id.len())?;
        id.truncate(shared);
        id.extend_from_slice(b.section()?);
        let text = std::str::from_utf8(&id)
            .map_err(|_| Error::corrupt("series ids: an id is not UTF-8"))?;
        if ids.last().is_some_and(|last| last.as_str() >= text) {
            return Err(Error::corrupt("series ids: not strictly increasing"));
        }
        ids.push(text.to_owned());
    }
    b.finish()?;
    let runs: Vec<u32> = numbers::get(r, "series runs", count)?;
    let total: u64 = runs.iter().map(|&k| u64::from(k)).sum();
    if runs.contains(&0) || total != n as u64 {
        return Err(Error::corrupt(format!(
            "series runs add up to {total} for {n} readings, or one is empty"
        )));
    }
    Ok((ids, runs))
}
