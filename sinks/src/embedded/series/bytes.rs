//! Varints, zigzag integers and a reader that checks every bound, for the chunk's framing.

use super::{Error, Result};

/// Appends `v` as an LEB128 varint (7 bits a byte, low first).
pub(super) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Maps signed to unsigned so that small magnitudes stay small: 0, -1, 1, -2, … → 0, 1, 2, 3, ….
pub(super) fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// The inverse of [`zigzag`].
pub(super) fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Appends `payload` as a section: its length as a varint, then its bytes.
pub(super) fn put_section(out: &mut Vec<u8>, payload: &[u8]) {
    put_varint(out, payload.len() as u64);
    out.extend_from_slice(payload);
}

/// Appends `s` as a varint length and its bytes.
pub(super) fn put_str(out: &mut Vec<u8>, s: &str) {
    put_section(out, s.as_bytes());
}

/// Reads a chunk's bytes front to back; every read past the end is an error, never a panic.
#[derive(Debug)]
pub(super) struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
    /// What is being read, for error messages.
    what: &'static str,
}

impl<'a> Reader<'a> {
    /// A reader of `bytes`, which hold `what`.
    pub(super) fn new(bytes: &'a [u8], what: &'static str) -> Self {
        Reader { bytes, at: 0, what }
    }

    fn truncated(&self) -> Error {
        Error::corrupt(format!("{} truncated at byte {}", self.what, self.at))
    }

    /// The next byte.
    pub(super) fn byte(&mut self) -> Result<u8> {
        let b = *self.bytes.get(self.at).ok_or_else(|| self.truncated())?;
        self.at += 1;
        Ok(b)
    }

    /// The next `n` bytes.
    pub(super) fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.at.checked_add(n).ok_or_else(|| self.truncated())?;
        let s = self
            .bytes
            .get(self.at..end)
            .ok_or_else(|| self.truncated())?;
        self.at = end;
        Ok(s)
    }

    /// The next varint (at most 10 bytes, fitting a `u64`).
    pub(super) fn varint(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            let bits = u64::from(b & 0x7f);
            if shift == 63 && bits > 1 {
                break;
            }
            v |= bits << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(Error::corrupt(format!(
            "{}: varint overflows 64 bits at byte {}",
            self.what, self.at
        )))
    }

    /// The next varint as a count or length, at most `max`.
    pub(super) fn count(&mut self, max: usize) -> Result<usize> {
        let v = self.varint()?;
        usize::try_from(v)
            .ok()
            .filter(|&v| v <= max)
            .ok_or_else(|| Error::corrupt(format!("{}: count {v} above {max}", self.what)))
    }

    /// The next zigzag varint.
    pub(super) fn signed(&mut self) -> Result<i64> {
        self.varint().map(unzigzag)
    }

    /// The next section's bytes (a varint length, then the bytes).
    pub(super) fn section(&mut self) -> Result<&'a [u8]> {
        let n = self.count(self.remaining())?;
        self.take(n)
    }

    /// The next string written by [`put_str`].
    pub(super) fn str(&mut self) -> Result<&'a str> {
        let bytes = self.section()?;
        std::str::from_utf8(bytes)
            .map_err(|_| Error::corrupt(format!("{}: a string is not UTF-8", self.what)))
    }

    /// Bytes not read yet.
    pub(super) fn remaining(&self) -> usize {
        self.bytes.len() - self.at
    }

    /// Fails unless every byte was read.
    pub(super) fn finish(&self) -> Result<()> {
        if self.remaining() == 0 {
            Ok(())
        } else {
            Err(Error::corrupt(format!(
                "{}: {} bytes left over",
                self.what,
                self.remaining()
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn varints_round_trip(v in any::<u64>(), s in any::<i64>()) {
            let mut out = Vec::new();
            put_varint(&mut out, v);
            put_varint(&mut out, zigzag(s));
            let mut r = Reader::new(&out, "test");
            prop_assert_eq!(r.varint().unwrap(), v);
            prop_assert_eq!(r.signed().unwrap(), s);
            prop_assert!(r.finish().is_ok());
        }
    }

    #[test]
    fn overlong_varint_is_an_error() {
        let bytes = [0xff; 11];
        assert!(matches!(
            Reader::new(&bytes, "test").varint(),
            Err(Error::Corrupt(_))
        ));
        let bytes = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        assert!(matches!(
            Reader::new(&bytes, "test").varint(),
            Err(Error::Corrupt(_))
        ));
        let bytes = [0x80];
        assert!(matches!(
            Reader::new(&bytes, "test").varint(),
            Err(Error::Corrupt(_))
        ));
    }
}
