//! Domain types, row-key codec, job configuration and the dataflow graph of hourglass.
#![deny(missing_docs)]

pub mod codec;
pub mod config;
pub mod control;
pub mod dead_letter;
pub mod decode;
pub mod graph;
pub mod query;
pub mod reading;
pub mod registry;
pub mod room;
pub mod source;
pub mod stats;
pub mod summary;
pub mod tables;
pub mod time;

// The table model belongs to the storage crate; this path keeps `pipeline::table::…` working
// for the dataflow and its users.
pub use sinks::table;

/// The sensor tables ([`tables`]) and the generic table model they are declared with
/// (`sinks::schema`: [`TableSpec`](sinks::schema::TableSpec), split policies), under one path.
pub mod schema {
    pub use crate::tables::*;
    pub use sinks::schema::*;
}

/// Errors of the pipeline crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The storage backend failed; [`sinks::Error::is_retriable`] tells whether the same call
    /// may succeed later.
    #[error("store error: {0}")]
    Store(sinks::Error),
    /// A configuration value is invalid.
    #[error("invalid configuration: {0}")]
    Config(String),
    /// An argument is invalid.
    #[error("{0}")]
    Invalid(String),
    /// Reading input failed.
    #[error("i/o error on {path}: {source}")]
    Io {
        /// The file or stream involved.
        path: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

/// Result with the pipeline [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<sinks::Error> for Error {
    /// Keeps the storage crate's own argument, configuration and file errors what they are (a
    /// query with a bad argument is the caller's fault, not an unavailable store).
    fn from(e: sinks::Error) -> Self {
        match e {
            sinks::Error::Invalid(message) => Error::Invalid(message),
            sinks::Error::Config(message) => Error::Config(message),
            sinks::Error::Io { path, source } => Error::Io { path, source },
            other => Error::Store(other),
        }
    }
}
