//! Reading recorded traffic: files (plain, `.gz`, `.zst`) or stdin, line by line.

use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::path::Path;
use std::sync::Arc;

use crate::source::MAX_LINE_BYTES;
use crate::stats::{add, Stats};
use crate::{Error, Result};

/// Counts bytes read from the underlying (possibly compressed) file, for progress.
struct Counting<R> {
    inner: R,
    stats: Option<Arc<Stats>>,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some(stats) = &self.stats {
            add(&stats.bytes, n as u64);
        }
        Ok(n)
    }
}

/// Opens `path` (`-` for stdin), decompressing by extension (`.gz`, `.zst`).
///
/// When `stats` is given, bytes read from the file are added to `stats.bytes`.
///
/// # Errors
/// [`Error::Io`] if the file cannot be opened.
pub fn open(path: &Path, stats: Option<Arc<Stats>>) -> Result<Box<dyn BufRead + Send>> {
    let io_err = |source| Error::Io {
        path: path.display().to_string(),
        source,
    };
    if path == Path::new("-") {
        return Ok(Box::new(BufReader::with_capacity(
            1 << 16,
            Counting {
                inner: io::stdin(),
                stats,
            },
        )));
    }
    let file = Counting {
        inner: File::open(path).map_err(io_err)?,
        stats,
    };
    let name = path.to_string_lossy();
    Ok(if name.ends_with(".gz") {
        Box::new(BufReader::with_capacity(
            1 << 16,
            flate2::read::MultiGzDecoder::new(file),
        ))
    } else if name.ends_with(".zst") || name.ends_with(".zstd") {
        Box::new(BufReader::with_capacity(
            1 << 16,
            zstd::Decoder::new(file).map_err(io_err)?,
        ))
    } else {
        Box::new(BufReader::with_capacity(1 << 16, file))
    })
}

/// Reads lines with their 1-based numbers, never holding more than 64 KiB + 1 byte of a line:
/// a longer line is returned truncated with its full length, so it can be rejected.
#[derive(Debug)]
pub struct LineReader<R> {
    inner: R,
    line_no: u64,
}

/// One line read by [`LineReader`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// 1-based line number.
    pub number: u64,
    /// The line without its newline (and `\r`), truncated to 64 KiB + 1 byte if longer.
    pub bytes: Vec<u8>,
    /// The line's full length in bytes.
    pub len: usize,
}

impl<R: BufRead> LineReader<R> {
    /// Wraps a buffered reader.
    pub fn new(inner: R) -> Self {
        LineReader { inner, line_no: 0 }
    }

    /// How many lines were read so far: the number of the last one. When
    /// [`LineReader::next_line`] fails, the damage is in line `lines_read() + 1`.
    pub fn lines_read(&self) -> u64 {
        self.line_no
    }

    /// Consumes input through the next newline without buffering it: the bytes before the
    /// newline, `None` if the input had ended.
    fn pass_rest_of_line(&mut self) -> io::Result<Option<usize>> {
        let mut passed = None;
        loop {
            let chunk = self.inner.fill_buf()?;
            if chunk.is_empty() {
                return Ok(passed);
            }
            let before = passed.unwrap_or(0);
            match memchr::memchr(b'\n', chunk) {
                Some(i) => {
                    self.inner.consume(i + 1);
                    return Ok(Some(before + i));
                }
                None => {
                    let k = chunk.len();
                    self.inner.consume(k);
                    passed = Some(before + k);
                }
            }
        }
    }

    /// The next line, reusing `buf`'s allocation; `None` at the end of input.
    ///
    /// # Errors
    /// An I/O or decompression error of the input.
    pub fn next_line(&mut self, buf: &mut Vec<u8>) -> io::Result<Option<Line>> {
        buf.clear();
        let n = (&mut self.inner)
            .take(MAX_LINE_BYTES as u64 + 1)
            .read_until(b'\n', buf)?;
        if n == 0 {
            return Ok(None);
        }
        self.line_no += 1;
        let mut len = buf.len();
        if buf.last() == Some(&b'\n') {
            buf.pop();
            len -= 1;
        } else if buf.len() > MAX_LINE_BYTES {
            // Skip the rest of an over-long line without buffering it.
            len += self.pass_rest_of_line()?.unwrap_or(0);
        }
        if buf.last() == Some(&b'\r') {
            buf.pop();
            len -= 1;
        }
        Ok(Some(Line {
            number: self.line_no,
            bytes: std::mem::take(buf),
            len,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_lines_and_bounds_long_ones() {
        let long = "x".repeat(MAX_LINE_BYTES + 10);
        let text = format!("a\r\n\n{long}\nlast");
        let mut r = LineReader::new(text.as_bytes());
        let mut buf = Vec::new();
        let mut lines = Vec::new();
        while let Some(l) = r.next_line(&mut buf).unwrap() {
            lines.push(l);
        }
        assert_eq!(lines.len(), 4);
        assert_eq!((lines[0].number, lines[0].bytes.as_slice()), (1, &b"a"[..]));
        assert_eq!((lines[1].number, lines[1].len), (2, 0));
        assert_eq!(lines[2].len, MAX_LINE_BYTES + 10);
        assert_eq!(lines[2].bytes.len(), MAX_LINE_BYTES + 1);
        assert_eq!(
            (lines[3].number, lines[3].bytes.as_slice()),
            (4, &b"last"[..])
        );
    }

    #[test]
    fn a_small_buffer_reads_the_same_lines() {
        let long = "y".repeat(MAX_LINE_BYTES + 10);
        let text = format!("a\n{long}\nb\r\n\nc\nd");
        let mut all = Vec::new();
        let mut r = LineReader::new(text.as_bytes());
        let mut buf = Vec::new();
        while let Some(l) = r.next_line(&mut buf).unwrap() {
            all.push(l);
        }
        assert_eq!(all.len(), 6);
        // A small buffer, so that the long line spans many of `fill_buf`'s chunks.
        let mut r = LineReader::new(std::io::BufReader::with_capacity(7, text.as_bytes()));
        for want in &all {
            assert_eq!(r.next_line(&mut buf).unwrap().as_ref(), Some(want));
            assert_eq!(r.lines_read(), want.number);
        }
        assert_eq!(r.next_line(&mut buf).unwrap(), None);
        assert_eq!(r.lines_read(), all.len() as u64);
    }
}
