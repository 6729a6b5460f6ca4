//! The input side of TBinaryProtocol, read straight from a buffer of the socket.
//!
//! The `thrift` crate's `TBinaryInputProtocol` over `TBufferedReadTransport` goes through
//! `std::io::Read` for every field, one `read_exact` per byte, short or integer, and that was
//! most of a reader's CPU: a 24 h curve is ~9,000 cells, and `perf record` of
//! `hourglass bench queries --hbase` put about half of the client's samples in cell decoding
//! and the buffered read under it. This reads each primitive from the buffer in place and
//! refills it only when it runs dry; the wire format, and so every generated client, is
//! unchanged.
//!
//! It also refuses what the crate would turn into an abort: a negative or huge length of a
//! binary, a list, a set or a map (a desynchronised or hostile stream) is a protocol error, not
//! an allocation of gigabytes or a capacity overflow.

use std::io::{self, Read};

use thrift::protocol::{
    TFieldIdentifier, TInputProtocol, TListIdentifier, TMapIdentifier, TMessageIdentifier,
    TMessageType, TSetIdentifier, TStructIdentifier, TType,
};
use thrift::{ProtocolError, ProtocolErrorKind};

/// Largest binary or string accepted: far above HBase's largest cell (10 MiB by default).
const MAX_BYTES: usize = 256 << 20;
/// Most elements of one list, set or map accepted.
const MAX_ELEMENTS: usize = 16 << 20;

/// Strict TBinaryProtocol input (the version header is required, as the gateways send it).
pub(crate) struct BinaryIn<R> {
    inner: R,
    buf: Box<[u8]>,
    pos: usize,
    end: usize,
}

fn protocol_error(kind: ProtocolErrorKind, message: String) -> thrift::Error {
    thrift::Error::Protocol(ProtocolError { kind, message })
}

/// A length or count from the wire, checked against `max`.
fn checked_len(n: i32, max: usize, what: &str) -> thrift::Result<usize> {
    let len = usize::try_from(n).map_err(|_| {
        protocol_error(
            ProtocolErrorKind::NegativeSize,
            format!("negative {what} length {n}"),
        )
    })?;
    if len > max {
        return Err(protocol_error(
            ProtocolErrorKind::SizeLimit,
            format!("{what} length {len} is above the limit of {max}"),
        ));
    }
    Ok(len)
}

fn ttype(b: u8) -> thrift::Result<TType> {
    Ok(match b {
        0x00 => TType::Stop,
        0x01 => TType::Void,
        0x02 => TType::Bool,
        0x03 => TType::I08,
        0x04 => TType::Double,
        0x06 => TType::I16,
        0x08 => TType::I32,
        0x0A => TType::I64,
        0x0B => TType::String,
        0x0C => TType::Struct,
        0x0D => TType::Map,
        0x0E => TType::Set,
        0x0F => TType::List,
        0x10 => TType::Utf8,
        0x11 => TType::Utf16,
        other => {
            return Err(protocol_error(
                ProtocolErrorKind::InvalidData,
                format!("cannot convert {other} to TType"),
            ))
        }
    })
}

impl<R: Read> BinaryIn<R> {
    /// Reads `inner` through a buffer of `capacity` bytes (at least 16).
    pub(crate) fn new(inner: R, capacity: usize) -> Self {
        BinaryIn {
            inner,
            buf: vec![0; capacity.max(16)].into_boxed_slice(),
            pos: 0,
            end: 0,
        }
    }

    /// Makes at least `n` (≤ the buffer's size) unread bytes available.
    #[cold]
    fn fill(&mut self, n: usize) -> io::Result<()> {
        self.buf.copy_within(self.pos..self.end, 0);
        self.end -= self.pos;
        self.pos = 0;
        while self.end < n {
            match self.inner.read(&mut self.buf[self.end..]) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(k) => self.end += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    #[inline]
    fn array<const N: usize>(&mut self) -> thrift::Result<[u8; N]> {
        if self.end - self.pos < N {
            self.fill(N)?;
        }
        let mut out = [0; N];
        out.copy_from_slice(&self.buf[self.pos..self.pos + N]);
        self.pos += N;
        Ok(out)
    }

    /// Fills `out` from the buffer, then straight from the socket for what is left.
    fn read_into(&mut self, out: &mut [u8]) -> thrift::Result<()> {
        let buffered = (self.end - self.pos).min(out.len());
        out[..buffered].copy_from_slice(&self.buf[self.pos..self.pos + buffered]);
        self.pos += buffered;
        let rest = &mut out[buffered..];
        if rest.is_empty() {
            return Ok(());
        }
        if rest.len() >= self.buf.len() {
            self.inner.read_exact(rest)?;
        } else {
            self.fill(rest.len())?;
            let n = rest.len();
            rest.copy_from_slice(&self.buf[..n]);
            self.pos = n;
        }
        Ok(())
    }

    fn element_type(&mut self) -> thrift::Result<TType> {
        ttype(self.read_byte()?)
    }
}

impl<R: Read> TInputProtocol for BinaryIn<R> {
    fn read_message_begin(&mut self) -> thrift::Result<TMessageIdentifier> {
        let header = self.array::<4>()?;
        if header[0..2] != [0x80, 0x01] {
            return Err(protocol_error(
                ProtocolErrorKind::BadVersion,
                format!("received bad version: {:?}", &header[0..2]),
            ));
        }
        let message_type = TMessageType::try_from(header[3])?;
        let name = self.read_string()?;
        let sequence_number = self.read_i32()?;
        Ok(TMessageIdentifier::new(name, message_type, sequence_number))
    }

    fn read_message_end(&mut self) -> thrift::Result<()> {
        Ok(())
    }

    fn read_struct_begin(&mut self) -> thrift::Result<Option<TStructIdentifier>> {
        Ok(None)
    }

    fn read_struct_end(&mut self) -> thrift::Result<()> {
        Ok(())
    }

    #[inline]
    fn read_field_begin(&mut self) -> thrift::Result<TFieldIdentifier> {
        let field_type = self.element_type()?;
        let id = match field_type {
            TType::Stop => 0,
            _ => self.read_i16()?,
        };
        Ok(TFieldIdentifier {
            name: None,
            field_type,
            id: Some(id),
        })
    }

    fn read_field_end(&mut self) -> thrift::Result<()> {
        Ok(())
    }

    #[inline]
    fn read_bool(&mut self) -> thrift::Result<bool> {
        Ok(self.read_byte()? != 0)
    }

    #[inline]
    fn read_bytes(&mut self) -> thrift::Result<Vec<u8>> {
        let len = checked_len(self.read_i32()?, MAX_BYTES, "binary")?;
        if self.end - self.pos >= len {
            let out = self.buf[self.pos..self.pos + len].to_vec();
            self.pos += len;
            return Ok(out);
        }
        let mut out = vec![0; len];
        self.read_into(&mut out)?;
        Ok(out)
    }

    #[inline]
    fn read_i8(&mut self) -> thrift::Result<i8> {
        Ok(i8::from_be_bytes(self.array()?))
    }

    #[inline]
    fn read_i16(&mut self) -> thrift::Result<i16> {
        Ok(i16::from_be_bytes(self.array()?))
    }

    #[inline]
    fn read_i32(&mut self) -> thrift::Result<i32> {
        Ok(i32::from_be_bytes(self.array()?))
    }

    #[inline]
    fn read_i64(&mut self) -> thrift::Result<i64> {
        Ok(i64::from_be_bytes(self.array()?))
    }

    fn read_double(&mut self) -> thrift::Result<f64> {
        Ok(f64::from_be_bytes(self.array()?))
    }

    fn read_string(&mut self) -> thrift::Result<String> {
        Ok(String::from_utf8(self.read_bytes()?)?)
    }

    fn read_list_begin(&mut self) -> thrift::Result<TListIdentifier> {
        let element_type = self.element_type()?;
        let size = checked_len(self.read_i32()?, MAX_ELEMENTS, "list")?;
        Ok(TListIdentifier::new(element_type, size as i32))
    }

    fn read_list_end(&mut self) -> thrift::Result<()> {
        Ok(())
    }

    fn read_set_begin(&mut self) -> thrift::Result<TSetIdentifier> {
        let element_type = self.element_type()?;
        let size = checked_len(self.read_i32()?, MAX_ELEMENTS, "set")?;
        Ok(TSetIdentifier::new(element_type, size as i32))
    }

    fn read_set_end(&mut self) -> thrift::Result<()> {
        Ok(())
    }

    fn read_map_begin(&mut self) -> thrift::Result<TMapIdentifier> {
        let key_type = self.element_type()?;
        let value_type = self.element_type()?;
        let size = checked_len(self.read_i32()?, MAX_ELEMENTS, "map")?;
        Ok(TMapIdentifier::new(key_type, value_type, size as i32))
    }

    fn read_map_end(&mut self) -> thrift::Result<()> {
        Ok(())
    }

    #[inline]
    fn read_byte(&mut self) -> thrift::Result<u8> {
        if self.pos < self.end {
            let b = self.buf[self.pos];
            self.pos += 1;
            return Ok(b);
        }
        Ok(self.array::<1>()?[0])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use thrift::protocol::{TBinaryInputProtocol, TBinaryOutputProtocol, TOutputProtocol};

    /// Hands out at most `step` bytes per read: every refill path runs.
    struct Trickle {
        data: Vec<u8>,
        at: usize,
        step: usize,
    }

    impl Read for Trickle {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            let n = self.step.min(out.len()).min(self.data.len() - self.at);
            out[..n].copy_from_slice(&self.data[self.at..self.at + n]);
            self.at += n;
            Ok(n)
        }
    }

    /// A message written by the crate's own output protocol, with every kind of field.
    fn message() -> Vec<u8> {
        let mut bytes = Vec::new();
        let mut out = TBinaryOutputProtocol::new(&mut bytes, true);
        out.write_message_begin(&TMessageIdentifier::new(
            "getMultiple",
            TMessageType::Reply,
            7,
        ))
        .unwrap();
        out.write_field_begin(&TFieldIdentifier::new("f", TType::List, 0))
            .unwrap();
        out.write_list_begin(&TListIdentifier::new(TType::String, 3))
            .unwrap();
        out.write_bytes(b"").unwrap();
        out.write_bytes(&[7; 100]).unwrap();
        out.write_bytes(&vec![9; 5000]).unwrap();
        out.write_field_begin(&TFieldIdentifier::new("m", TType::Map, 2))
            .unwrap();
        out.write_map_begin(&TMapIdentifier::new(TType::I64, TType::Double, 1))
            .unwrap();
        out.write_i64(-5).unwrap();
        out.write_double(2.5).unwrap();
        out.write_set_begin(&TSetIdentifier::new(TType::Bool, 2))
            .unwrap();
        out.write_bool(true).unwrap();
        out.write_bool(false).unwrap();
        out.write_i8(-3).unwrap();
        out.write_i16(-300).unwrap();
        out.write_i32(i32::MIN).unwrap();
        out.write_string("héllo").unwrap();
        out.write_field_stop().unwrap();
        out.flush().unwrap();
        bytes
    }

    /// Reads `message()` back with `p`, as the crate's generated code would.
    fn read_all(p: &mut dyn TInputProtocol) -> Vec<String> {
        let mut seen = Vec::new();
        let m = p.read_message_begin().unwrap();
        seen.push(format!(
            "{} {:?} {}",
            m.name, m.message_type, m.sequence_number
        ));
        let f = p.read_field_begin().unwrap();
        seen.push(format!("{:?} {:?}", f.field_type, f.id));
        let l = p.read_list_begin().unwrap();
        seen.push(format!("{l:?}"));
        for _ in 0..l.size {
            let b = p.read_bytes().unwrap();
            seen.push(format!("{} {:?}", b.len(), b.first()));
        }
        let f = p.read_field_begin().unwrap();
        seen.push(format!("{:?} {:?}", f.field_type, f.id));
        seen.push(format!("{:?}", p.read_map_begin().unwrap()));
        seen.push(format!(
            "{} {}",
            p.read_i64().unwrap(),
            p.read_double().unwrap()
        ));
        seen.push(format!("{:?}", p.read_set_begin().unwrap()));
        seen.push(format!(
            "{} {}",
            p.read_bool().unwrap(),
            p.read_bool().unwrap()
        ));
        seen.push(format!(
            "{} {} {} {}",
            p.read_i8().unwrap(),
            p.read_i16().unwrap(),
            p.read_i32().unwrap(),
            p.read_string().unwrap()
        ));
        seen.push(format!("{:?}", p.read_field_begin().unwrap().field_type));
        seen
    }

    #[test]
    fn reads_what_the_crates_protocol_reads_whatever_the_chunking() {
        let bytes = message();
        let mut reference = TBinaryInputProtocol::new(&bytes[..], true);
        let want = read_all(&mut reference);
        assert_eq!(want[0], "getMultiple Reply 7");
        for (step, capacity) in [(1, 16), (3, 64), (7, 1000), (bytes.len(), 64 << 10)] {
            let data = Trickle {
                data: bytes.clone(),
                at: 0,
                step,
            };
            let mut fast = BinaryIn::new(data, capacity);
            assert_eq!(read_all(&mut fast), want, "step {step}, buffer {capacity}");
        }
    }

    /// The message of a protocol error (its `Display` shows only the kind).
    fn protocol<T: std::fmt::Debug>(r: thrift::Result<T>) -> String {
        match r {
            Err(thrift::Error::Protocol(p)) => p.message,
            other => panic!("not a protocol error: {other:?}"),
        }
    }

    #[test]
    fn bad_lengths_and_truncation_are_errors_not_allocations() {
        let mut p = BinaryIn::new(&[0xFF, 0xFF, 0xFF, 0xFE][..], 16);
        let e = protocol(p.read_bytes());
        assert!(e.contains("negative binary length -2"), "{e}");
        let mut p = BinaryIn::new(&[0x7F, 0xFF, 0xFF, 0xFF][..], 16);
        let e = protocol(p.read_bytes());
        assert!(e.contains("above the limit"), "{e}");
        let mut p = BinaryIn::new(&[0x0C, 0x80, 0x00, 0x00, 0x00][..], 16);
        let e = protocol(p.read_list_begin());
        assert!(e.contains("negative list length"), "{e}");
        let mut p = BinaryIn::new(&[0x00, 0x00, 0x00, 0x05, 1, 2][..], 16);
        assert!(matches!(
            p.read_bytes(),
            Err(thrift::Error::Transport(t)) if t.kind == thrift::TransportErrorKind::EndOfFile
        ));
        let mut p = BinaryIn::new(&[0x00, 0x00, 0x00, 0x01][..], 16);
        let e = protocol(p.read_message_begin());
        assert!(e.contains("bad version"), "{e}");
    }
}
