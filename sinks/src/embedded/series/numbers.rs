//! Integer columns, compressed by pcodec (which picks delta order, common multiple and bin
//! widths per column), framed as a section.

use pco::data_types::Number;
use pco::standalone::{simple_compress, simple_decompress};
use pco::ChunkConfig;

use super::bytes::{put_section, Reader};
use super::{Error, Result};

/// Appends `values` as a section of pcodec bytes (empty for no values).
pub(super) fn put<T: Number>(out: &mut Vec<u8>, column: &'static str, values: &[T]) -> Result<()> {
    if values.is_empty() {
        put_section(out, &[]);
        return Ok(());
    }
    let bytes = simple_compress(values, &ChunkConfig::default()).map_err(|e| Error::Compress {
        column,
        detail: e.to_string(),
    })?;
    put_section(out, &bytes);
    Ok(())
}

/// Reads a section written by [`put`], which must hold exactly `n` values.
pub(super) fn get<T: Number>(r: &mut Reader<'_>, column: &'static str, n: usize) -> Result<Vec<T>> {
    let bytes = r.section()?;
    if bytes.is_empty() {
        return if n == 0 {
            Ok(Vec::new())
        } else {
            Err(Error::corrupt(format!(
                "column {column}: no values, {n} expected"
            )))
        };
    }
    let values = simple_decompress::<T>(bytes)
        .map_err(|e| Error::corrupt(format!("column {column}: {e}")))?;
    if values.len() != n {
        return Err(Error::corrupt(format!(
            "column {column}: {} values, {n} expected",
            values.len()
        )));
    }
    Ok(values)
}
