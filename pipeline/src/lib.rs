//! The engine of hourglass: sources (Kafka, replay) generic over a job's line decoder, the job
//! driver generic over a job's dataflow, job control, counters, `/metrics`, the store flags and
//! the engine's configuration; it knows no domain.
#![deny(missing_docs)]

pub mod config;
pub mod control;
pub mod driver;
pub mod http_thread;
pub mod job_metrics;
pub mod json;
pub mod live_bench;
pub mod source;
pub mod stats;
pub mod store;
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
    /// The job failed, or could not start: the message says why.
    #[error("{0}")]
    Failed(String),
    /// `what` failed; `source` says why.
    #[error("{what}")]
    Context {
        /// What failed.
        what: String,
        /// Why.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// The storage backend failed, as it says (its own message, no prefix).
    #[error(transparent)]
    Storage(sinks::Error),
    /// An operating-system call failed, as it says.
    #[error(transparent)]
    Os(#[from] std::io::Error),
}

/// Result with the pipeline [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Adds what failed to an error, as [`Error::Context`].
pub trait Context<T> {
    /// The error, with `what` failed.
    ///
    /// # Errors
    /// [`Error::Context`] if `self` is an error.
    fn context(self, what: impl Into<String>) -> Result<T>;

    /// The error, with what `what()` says failed (computed only on an error).
    ///
    /// # Errors
    /// [`Error::Context`] if `self` is an error.
    fn with_context<S: Into<String>>(self, what: impl FnOnce() -> S) -> Result<T>;
}

impl<T, E: std::error::Error + Send + Sync + 'static> Context<T> for std::result::Result<T, E> {
    fn context(self, what: impl Into<String>) -> Result<T> {
        self.map_err(|e| Error::Context {
            what: what.into(),
            source: Box::new(e),
        })
    }

    fn with_context<S: Into<String>>(self, what: impl FnOnce() -> S) -> Result<T> {
        self.map_err(|e| Error::Context {
            what: what().into(),
            source: Box::new(e),
        })
    }
}

impl<T> Context<T> for Option<T> {
    /// `None` is the failure `what`, as [`Error::Failed`].
    fn context(self, what: impl Into<String>) -> Result<T> {
        self.ok_or_else(|| Error::Failed(what.into()))
    }

    fn with_context<S: Into<String>>(self, what: impl FnOnce() -> S) -> Result<T> {
        self.ok_or_else(|| Error::Failed(what().into()))
    }
}

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
