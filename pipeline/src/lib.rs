//! The engine of hourglass: sources (Kafka, replay) generic over a job's line decoder, job
//! control, counters, time and the engine's configuration; it knows no domain.
#![deny(missing_docs)]

pub mod config;
pub mod control;
pub mod json;
pub mod source;
pub mod stats;
pub mod time;

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
