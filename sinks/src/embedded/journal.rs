//! A read-only check of fjall's journal files, which finds damage before fjall's recovery hides it.
//!
//! fjall 3.1 replays each `*.jnl` file on open and, at the first record it cannot decode, truncates
//! the file there and carries on without an error (`journal/reader.rs`, `batch_reader.rs`); a
//! checksum mismatch instead fails the open. A flipped bit in the middle of a journal therefore
//! silently drops every later write, and the truncation makes the loss permanent, even for a
//! command that only meant to read. fjall has no read-only or strict recovery option, so the store
//! walks the journals itself, with fjall's record layout, before it lets fjall near them.
//!
//! Layout (fjall `journal/entry.rs`): a batch is `Start` (tag 1, u32 item count, u64 seqno), that
//! many `Item`s (tag 2) or `Clear`s (tag 4), then `End` (tag 3, u64 xxh3 of the items' bytes,
//! magic `FJL\x03`). Integers are little-endian. A journal file is preallocated with zeros, so
//! the written part ends where a zero tag starts and every byte after it is zero.
//! The checksum covers a batch's items but not its seqno, so a flip in a seqno goes unseen here
//! as it does in fjall.

use std::fmt;
use std::path::{Path, PathBuf};

const TAG_START: u8 = 1;
const TAG_ITEM: u8 = 2;
const TAG_END: u8 = 3;
const TAG_CLEAR: u8 = 4;
const MAGIC: &[u8] = b"FJL\x03";

/// Damage found in one journal file: where the replay stops and what it would drop.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalDamage {
    /// The journal file.
    pub file: PathBuf,
    /// Offset of the first byte fjall's recovery would not replay.
    pub offset: u64,
    /// Why the record at `offset` is unreadable.
    pub reason: &'static str,
    /// Bytes of written data from `offset` to the end of the last intact batch after it (or to
    /// the last non-zero byte if no intact batch follows).
    pub lost_bytes: u64,
    /// Intact write batches after `offset` that recovery drops with the damaged one; zero means
    /// the damage is an incomplete last write (a torn tail, as a crash leaves).
    pub lost_batches: u64,
    /// Cells (puts, deletes) in those intact batches.
    pub lost_cells: u64,
}

impl JournalDamage {
    /// Whether intact writes follow the damage: a torn tail is the expected result of a crash
    /// during a write, anything else is corruption.
    pub fn is_torn_tail(&self) -> bool {
        self.lost_batches == 0
    }
}

impl fmt::Display for JournalDamage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_torn_tail() {
            write!(
                f,
                "journal {} ends in an incomplete write batch at byte {} ({}): {} bytes, no \
                 intact batch after it",
                self.file.display(),
                self.offset,
                self.reason,
                self.lost_bytes
            )
        } else {
            write!(
                f,
                "journal {} is damaged at byte {} ({}): the {} bytes after it hold {} intact \
                 write batches ({} cells) that recovery would drop",
                self.file.display(),
                self.offset,
                self.reason,
                self.lost_bytes,
                self.lost_batches,
                self.lost_cells
            )
        }
    }
}

/// What a scan of one journal file found.
#[derive(Debug, Clone)]
pub(crate) struct JournalScan {
    /// The journal file.
    pub(crate) file: PathBuf,
    /// End of the last batch fjall replays: the bytes worth keeping.
    pub(crate) valid_end: u64,
    /// `None` if only zeros (preallocation) follow `valid_end`.
    pub(crate) damage: Option<JournalDamage>,
}

/// Little-endian reads from a byte slice that fail instead of panicking past its end.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], &'static str> {
        let end = self.pos.checked_add(n).ok_or("record length overflows")?;
        let bytes = self
            .buf
            .get(self.pos..end)
            .ok_or("record runs past the end of the file")?;
        self.pos = end;
        Ok(bytes)
    }

    fn u8(&mut self) -> Result<u8, &'static str> {
        Ok(self.take(1)?[0])
    }

    fn uint(&mut self, n: usize) -> Result<u64, &'static str> {
        let mut le = [0u8; 8];
        le[..n].copy_from_slice(self.take(n)?);
        Ok(u64::from_le_bytes(le))
    }
}

/// Decodes the batch that starts at `pos`; returns its end and its number of items.
fn read_batch(buf: &[u8], pos: usize) -> Result<(usize, u64), &'static str> {
    let mut c = Cursor { buf, pos };
    if c.u8()? != TAG_START {
        return Err("expected the start of a write batch");
    }
    let count = c.uint(4)?;
    c.take(8)?;
    let items_start = c.pos;
    for _ in 0..count {
        match c.u8()? {
            TAG_ITEM => {
                if !matches!(c.u8()?, 0..=2) {
                    return Err("unknown value type");
                }
                if !matches!(c.u8()?, 0 | 1) {
                    return Err("unknown compression");
                }
                c.take(8)?;
                let key_len = c.uint(2)?;
                c.take(4)?;
                let disk_len = c.uint(4)?;
                let len = usize::try_from(key_len + disk_len).map_err(|_| "record too long")?;
                c.take(len)?;
            }
            TAG_CLEAR => {
                c.take(8)?;
            }
            TAG_START => return Err("write batch starts inside another one"),
            TAG_END => return Err("write batch ends before its item count"),
            _ => return Err("unknown record tag"),
        }
    }
    let items_end = c.pos;
    if c.u8()? != TAG_END {
        return Err("write batch has more items than its count");
    }
    let checksum = c.uint(8)?;
    if c.take(MAGIC.len())? != MAGIC {
        return Err("bad end-of-batch trailer");
    }
    if xxhash_rust::xxh3::xxh3_64(&buf[items_start..items_end]) != checksum {
        return Err("checksum mismatch");
    }
    Ok((c.pos, count))
}

fn all_zero(bytes: &[u8]) -> bool {
    bytes.iter().all(|&b| b == 0)
}

/// Scans a journal held in memory; `file` only names it in the result.
pub(crate) fn scan_bytes(file: &Path, buf: &[u8]) -> JournalScan {
    let mut pos = 0;
    let reason = loop {
        if all_zero(&buf[pos..]) {
            return JournalScan {
                file: file.to_path_buf(),
                valid_end: pos as u64,
                damage: None,
            };
        }
        match read_batch(buf, pos) {
            Ok((end, _)) => pos = end,
            Err(reason) => break reason,
        }
    };
    let damaged_at = pos;
    // Look for intact batches past the damage, as fjall would have replayed them had it not
    // stopped: a false match needs a valid trailer and a 64-bit checksum by chance.
    let (mut lost_batches, mut lost_cells, mut data_end) = (0u64, 0u64, None);
    let mut probe = damaged_at + 1;
    while probe < buf.len() {
        match buf[probe..].iter().position(|&b| b == TAG_START) {
            None => break,
            Some(skip) => probe += skip,
        }
        match read_batch(buf, probe) {
            Ok((end, cells)) => {
                lost_batches += 1;
                lost_cells += cells;
                data_end = Some(end);
                probe = end;
            }
            Err(_) => probe += 1,
        }
    }
    let end = data_end.unwrap_or_else(|| {
        buf.iter()
            .rposition(|&b| b != 0)
            .map_or(damaged_at, |last| last + 1)
    });
    JournalScan {
        file: file.to_path_buf(),
        valid_end: damaged_at as u64,
        damage: Some(JournalDamage {
            file: file.to_path_buf(),
            offset: damaged_at as u64,
            reason,
            lost_bytes: (end - damaged_at) as u64,
            lost_batches,
            lost_cells,
        }),
    }
}

/// The journal files of the store in `dir` (`<number>.jnl`), oldest first.
pub(crate) fn journal_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let id = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".jnl"))
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(id) = id {
            files.push((id, path));
        }
    }
    files.sort();
    Ok(files.into_iter().map(|(_, p)| p).collect())
}

/// Scans every journal file of the store in `dir`, reading only.
///
/// Each file is read whole; fjall rotates journals at its maximum journal size, which bounds
/// the memory this takes.
pub(crate) fn scan_dir(dir: &Path) -> std::io::Result<Vec<JournalScan>> {
    journal_files(dir)?
        .into_iter()
        .map(|path| Ok(scan_bytes(&path, &std::fs::read(&path)?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(items: &[&[u8]]) -> Vec<u8> {
        let mut body = Vec::new();
        for key in items {
            body.extend([TAG_ITEM, 0, 0]);
            body.extend(7u64.to_le_bytes());
            body.extend((key.len() as u16).to_le_bytes());
            body.extend(1u32.to_le_bytes());
            body.extend(1u32.to_le_bytes());
            body.extend(*key);
            body.push(b'v');
        }
        let mut out = vec![TAG_START];
        out.extend((items.len() as u32).to_le_bytes());
        out.extend(1u64.to_le_bytes());
        out.extend(&body);
        out.push(TAG_END);
        out.extend(xxhash_rust::xxh3::xxh3_64(&body).to_le_bytes());
        out.extend(MAGIC);
        out
    }

    fn journal() -> (Vec<u8>, usize) {
        let mut j = batch(&[b"a", b"b"]);
        let first = j.len();
        j.extend(batch(&[b"c"]));
        j.extend(batch(&[b"d", b"e", b"f"]));
        let end = j.len();
        j.resize(end + 100, 0);
        (j, first)
    }

    #[test]
    fn a_clean_journal_ends_where_the_zeros_start() {
        let (j, _) = journal();
        let scan = scan_bytes(Path::new("0.jnl"), &j);
        assert_eq!(scan.valid_end as usize, j.len() - 100);
        assert_eq!(scan.damage, None);
        assert_eq!(scan_bytes(Path::new("0.jnl"), &[]).damage, None);
    }

    #[test]
    fn a_flipped_bit_reports_the_intact_batches_after_it() {
        let (mut j, first) = journal();
        j[first + 20] ^= 0x10;
        let scan = scan_bytes(Path::new("0.jnl"), &j);
        let damage = scan.damage.unwrap();
        assert_eq!(scan.valid_end as usize, first);
        assert_eq!(damage.offset as usize, first);
        assert_eq!((damage.lost_batches, damage.lost_cells), (1, 3));
        assert!(!damage.is_torn_tail());
        assert_eq!(damage.lost_bytes as usize, j.len() - 100 - first);
    }

    #[test]
    fn every_single_bit_flip_in_the_data_is_found() {
        let (j, _) = journal();
        // fjall's checksum covers the items, not the batch's seqno: a flip there is invisible.
        let mut seqnos = Vec::new();
        let mut pos = 0;
        while let Ok((end, _)) = read_batch(&j, pos) {
            seqnos.push(pos + 5..pos + 13);
            pos = end;
        }
        for bit in 0..(j.len() - 100) * 8 {
            if seqnos.iter().any(|r| r.contains(&(bit / 8))) {
                continue;
            }
            let mut bad = j.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            let scan = scan_bytes(Path::new("0.jnl"), &bad);
            assert!(scan.damage.is_some(), "bit {bit} went unnoticed");
        }
    }

    #[test]
    fn an_incomplete_last_batch_is_a_torn_tail() {
        let (j, first) = journal();
        let mut torn = j[..first].to_vec();
        torn.extend(&batch(&[b"c"])[..10]);
        torn.resize(torn.len() + 50, 0);
        let damage = scan_bytes(Path::new("0.jnl"), &torn).damage.unwrap();
        assert!(damage.is_torn_tail());
        assert_eq!(damage.offset as usize, first);
        // The written prefix ends in the seqno's zero high bytes, which look like padding.
        assert_eq!(damage.lost_bytes, 6);
    }
}
