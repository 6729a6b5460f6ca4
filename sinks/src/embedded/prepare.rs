//! Before fjall opens a store directory: how to open it, refusing what is no store, checking and
//! cutting the journals, and the snapshot a read-only open reads.

use super::journal::{self, JournalDamage, JournalScan};
use super::StoreError;
use crate::Result;
use std::path::Path;

/// How [`super::EmbeddedStore::open_with_options`] treats the directory and damage in its journals.
///
/// Journal damage is handled as RocksDB's WAL recovery modes name it: by default
/// `kTolerateCorruptedTailRecords` (an incomplete last write batch, as a crash leaves, is
/// dropped; damage followed by intact batches fails the open), with [`OpenMode::Recover`]
/// `kPointInTimeRecovery` within each journal file (replay stops at the damage and what follows
/// in that file is dropped; later journal files are still replayed, as fjall does).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum OpenMode {
    /// Open or create the store for writing; refuse a damaged journal.
    #[default]
    ReadWrite,
    /// As `ReadWrite`, but truncate a damaged journal at the damage, dropping what follows.
    Recover,
    /// Read an existing store without changing a byte of it: refuse a directory that holds no
    /// store or a damaged journal, and read a private snapshot (journals copied up to their
    /// last intact batch, table files hard-linked, or copied across file systems). Writes
    /// through such a handle go to the snapshot and are lost when it is dropped.
    ReadOnly,
}

/// Checks the journals of the store in `dir` before fjall opens it. For `ReadOnly`, returns
/// the snapshot fjall opens instead; otherwise cuts the journals that need it at their last
/// intact batch (fjall would cut them there too, or fail on a checksum mismatch).
pub(super) fn prepare(
    dir: &Path,
    mode: OpenMode,
) -> Result<(Option<tempfile::TempDir>, Vec<JournalDamage>)> {
    let is_store = dir.join("version").is_file() && dir.join("keyspaces").is_dir();
    if !is_store {
        if mode == OpenMode::ReadOnly {
            let why = if dir.is_dir() {
                "the directory has no fjall `version` file and `keyspaces` folder"
            } else {
                "the directory does not exist"
            };
            return Err(StoreError::NotAStore {
                dir: dir.to_path_buf(),
                why,
            }
            .into());
        }
        // fjall would add its files among the others: a mistyped --store must not scatter a
        // store into a directory of something else.
        if std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_some()) {
            return Err(StoreError::NotEmpty {
                dir: dir.to_path_buf(),
            }
            .into());
        }
        return Ok((None, Vec::new()));
    }
    let io = |doing: &'static str| {
        move |source| StoreError::Io {
            dir: dir.to_path_buf(),
            doing,
            source,
        }
    };
    // A read-only open must not copy files a running writer is changing; fjall's lock says
    // whether one is.
    let lock = match mode {
        OpenMode::ReadOnly => Some(lock_shared(dir)?),
        _ => None,
    };
    let scans = journal::scan_dir(dir).map_err(io("journal check"))?;
    let damage: Vec<&JournalDamage> = scans
        .iter()
        .filter_map(|s| s.damage.as_ref())
        .filter(|d| !d.is_torn_tail())
        .collect();
    if !damage.is_empty() && mode != OpenMode::Recover {
        let damage = damage.iter().map(ToString::to_string).collect::<Vec<_>>();
        return Err(StoreError::JournalDamaged {
            dir: dir.to_path_buf(),
            damage: damage.join("; "),
        }
        .into());
    }
    let dropped: Vec<JournalDamage> = scans.iter().filter_map(|s| s.damage.clone()).collect();
    for d in &dropped {
        tracing::warn!(dir = %dir.display(), "{d}; dropping it");
    }
    if mode == OpenMode::ReadOnly {
        let snapshot = snapshot(dir, &scans).map_err(io("snapshot for reading"))?;
        drop(lock);
        return Ok((Some(snapshot), dropped));
    }
    for scan in scans.iter().filter(|s| s.damage.is_some()) {
        cut(scan).map_err(io("journal recovery"))?;
    }
    Ok((None, dropped))
}

/// Takes fjall's lock file of `dir` without writing to it, for as long as the file stays open.
fn lock_shared(dir: &Path) -> Result<std::fs::File> {
    let path = dir.join("lock");
    let file = std::fs::File::open(&path).map_err(|source| StoreError::Io {
        dir: dir.to_path_buf(),
        doing: "lock",
        source,
    })?;
    match file.try_lock_shared() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(StoreError::Locked {
            dir: dir.to_path_buf(),
        }
        .into()),
        Err(std::fs::TryLockError::Error(source)) => Err(StoreError::Io {
            dir: dir.to_path_buf(),
            doing: "lock",
            source,
        }
        .into()),
    }
}

fn cut(scan: &JournalScan) -> std::io::Result<()> {
    let file = std::fs::OpenOptions::new().write(true).open(&scan.file)?;
    file.set_len(scan.valid_end)?;
    file.sync_all()
}

/// Copies the store in `dir` into a new temporary directory for fjall to open and change:
/// journals up to their last intact batch, table files (which fjall never rewrites, only
/// creates and deletes) as hard links, everything else as copies.
fn snapshot(dir: &Path, scans: &[JournalScan]) -> std::io::Result<tempfile::TempDir> {
    let tmp = tempfile::Builder::new()
        .prefix("hourglass-store-snapshot-")
        .tempdir()?;
    copy_tree(dir, tmp.path(), false)?;
    for scan in scans {
        let Some(name) = scan.file.file_name() else {
            continue;
        };
        let mut from = std::fs::File::open(&scan.file)?;
        let mut to = std::fs::File::create(tmp.path().join(name))?;
        std::io::copy(&mut std::io::Read::take(&mut from, scan.valid_end), &mut to)?;
    }
    Ok(tmp)
}

fn copy_tree(from: &Path, to: &Path, in_tables: bool) -> std::io::Result<()> {
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let (src, name) = (entry.path(), entry.file_name());
        let dst = to.join(&name);
        if entry.file_type()?.is_dir() {
            std::fs::create_dir(&dst)?;
            copy_tree(&src, &dst, in_tables || name == "tables")?;
        } else if src.extension().is_some_and(|e| e == "jnl") && !in_tables {
            // Journals are copied by `snapshot`, up to their last intact batch.
        } else if name == "lock" {
            std::fs::File::create(&dst)?;
        } else if !in_tables || std::fs::hard_link(&src, &dst).is_err() {
            std::fs::copy(&src, &dst)?;
        }
    }
    Ok(())
}
