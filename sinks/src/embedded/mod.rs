//! The embedded store: HBase's table model (rows, families, qualifiers, timestamps, TTLs) on fjall.

mod codec;
mod generations;
mod journal;
mod prepare;
pub mod series;
mod storage;
mod store;
mod ttl;
mod writer;

#[cfg(test)]
mod tests;

pub use generations::GENERATION_BYTES;
pub use journal::JournalDamage;
pub use prepare::OpenMode;
pub use storage::{EmbeddedConfig, EmbeddedStorage};
pub use store::EmbeddedStore;
pub(crate) use ttl::system_now_ms;
pub use writer::EmbeddedWriter;

use std::path::{Path, PathBuf};

/// Why the embedded store failed; each message says what to do about it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// Another handle holds fjall's lock on the directory.
    #[error(
        "embedded store at {dir} is locked by another hourglass process; stop it or use \
         --store OTHER_DIR (within one process, open the store once and clone the handle)"
    )]
    Locked {
        /// The store directory.
        dir: PathBuf,
    },
    /// An earlier journal write or sync failed; fjall refuses writes from then on.
    #[error(
        "embedded store at {dir} stopped accepting writes after an earlier write to disk failed \
         (disk full or I/O error); fix the disk and restart the job, the journal is recovered on \
         open"
    )]
    Poisoned {
        /// The store directory.
        dir: PathBuf,
    },
    /// The operating system refused an operation.
    #[error(
        "i/o error during {doing} of embedded store at {dir}: {source}; check that the \
         directory exists, is writable and its disk has space"
    )]
    Io {
        /// The store directory.
        dir: PathBuf,
        /// What the store was doing.
        doing: &'static str,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The directory holds data this build cannot read.
    #[error(
        "embedded store at {dir} was written by an incompatible storage format ({detail}); \
         open it with the hourglass version that wrote it, or use a new --store directory"
    )]
    Incompatible {
        /// The store directory.
        dir: PathBuf,
        /// fjall's description.
        detail: String,
    },
    /// Data on disk is damaged.
    #[error(
        "embedded store at {dir} is damaged ({detail}) during {doing}; restore it from a backup \
         or rebuild it by replaying the input into a new --store directory"
    )]
    Damaged {
        /// The store directory.
        dir: PathBuf,
        /// What the store was doing.
        doing: &'static str,
        /// fjall's description.
        detail: String,
    },
    /// A journal holds damage followed by intact writes that opening would drop.
    #[error(
        "embedded store at {dir} has a damaged journal: {damage}; the store was left unchanged. \
         Restore it from a backup, or back the directory up and rerun `hourglass replay` or \
         `hourglass run` with --recover to keep the writes before the damage and drop the rest"
    )]
    JournalDamaged {
        /// The store directory.
        dir: PathBuf,
        /// What is damaged and what would be lost, one journal after another.
        damage: String,
    },
    /// A read-only command was pointed at a directory that holds no embedded store.
    #[error(
        "no embedded store at {dir} ({why}); read-only commands never create one: pass the \
         --store DIR that `hourglass replay` or `hourglass run` wrote"
    )]
    NotAStore {
        /// The directory.
        dir: PathBuf,
        /// What is missing.
        why: &'static str,
    },
    /// A writing job was pointed at a directory that holds other files and no embedded store.
    #[error(
        "{dir} holds other files and no embedded store (no fjall `version` file and `keyspaces` \
         folder); a store is created only in a new or empty directory: pass --store with a new \
         directory, or the one `hourglass replay` or `hourglass run` wrote"
    )]
    NotEmpty {
        /// The directory.
        dir: PathBuf,
    },
    /// A stored key or value does not have the embedded store's layout.
    #[error(
        "embedded store at {dir} holds a malformed cell in table {table} (key {key}); the \
         directory was written by another program or is damaged: use a new --store directory"
    )]
    Corrupt {
        /// The store directory.
        dir: PathBuf,
        /// The table.
        table: &'static str,
        /// The stored key, escaped.
        key: String,
    },
}

impl StoreError {
    /// Classifies a fjall error raised while `doing` something to the store in `dir`.
    pub(crate) fn from_fjall(dir: &Path, doing: &'static str, error: fjall::Error) -> Self {
        let dir = dir.to_path_buf();
        match error {
            fjall::Error::Locked => StoreError::Locked { dir },
            fjall::Error::Poisoned => StoreError::Poisoned { dir },
            fjall::Error::Io(source) | fjall::Error::Storage(fjall::LsmError::Io(source)) => {
                StoreError::Io { dir, doing, source }
            }
            fjall::Error::InvalidVersion(version) => StoreError::Incompatible {
                dir,
                detail: format!("format version {version:?}"),
            },
            other => StoreError::Damaged {
                dir,
                doing,
                detail: format!("{other:?}"),
            },
        }
    }
}
