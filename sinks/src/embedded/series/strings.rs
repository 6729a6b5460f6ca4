//! Dictionary columns of short strings (`room`, `fw`): the distinct strings in first-seen order,
//! then each value's index as an integer column.

use std::collections::HashMap;

use super::bytes::{put_str, put_varint, Reader};
use super::{numbers, Error, Result};

/// Appends `values` as a dictionary and indexes.
pub(super) fn put(out: &mut Vec<u8>, column: &'static str, values: &[&str]) -> Result<()> {
    let mut index: HashMap<&str, u32> = HashMap::new();
    let mut dictionary = Vec::new();
    let mut last: Option<(&str, u32)> = None;
    let codes: Vec<u32> = values
        .iter()
        .map(|&v| {
            // Sorted by series, a device's room and firmware repeat: skip the hash.
            if let Some((s, code)) = last {
                if s == v {
                    return code;
                }
            }
            let code = *index.entry(v).or_insert_with(|| {
                dictionary.push(v);
                (dictionary.len() - 1) as u32
            });
            last = Some((v, code));
            code
        })
        .collect();
    put_varint(out, dictionary.len() as u64);
    for s in dictionary {
        put_str(out, s);
    }
    numbers::put(out, column, &codes)
}

/// Reads `n` values written by [`put`]: the dictionary and each value's index into it.
pub(super) fn get(
    r: &mut Reader<'_>,
    column: &'static str,
    n: usize,
) -> Result<(Vec<String>, Vec<u32>)> {
    let count = r.count(n)?;
    let dictionary = (0..count)
        .map(|_| r.str().map(str::to_owned))
        .collect::<Result<Vec<_>>>()?;
    let codes: Vec<u32> = numbers::get(r, column, n)?;
    if codes.iter().any(|&c| c as usize >= count) {
        return Err(Error::corrupt(format!(
            "column {column}: an index past its dictionary"
        )));
    }
    Ok((dictionary, codes))
}
