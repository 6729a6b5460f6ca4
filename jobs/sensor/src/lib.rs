//! The sensor job: readings and their decoder, the row codecs and tables, the room view, the
//! dataflow graph the engine runs, and the read path (queries, `serve`, `report`).
#![deny(missing_docs)]

/// Returns a [`Error::Engine`] failure with the formatted message.
macro_rules! bail {
    ($($t:tt)*) => {
        return Err(failed!($($t)*))
    };
}

/// [`bail!`] unless the condition holds.
macro_rules! ensure {
    ($cond:expr, $($t:tt)*) => {
        let holds: bool = $cond;
        if !holds {
            bail!($($t)*);
        }
    };
}

/// A [`Error::Engine`] failure with the formatted message.
macro_rules! failed {
    ($($t:tt)*) => {
        $crate::Error::Engine(pipeline::Error::Failed(format!($($t)*)))
    };
}

pub mod codec;
pub mod config;
pub mod dead_letter;
pub mod decode;
#[cfg(test)]
mod fuzz;
pub mod graph;
pub mod job;
pub mod query;
pub mod reading;
pub mod registry;
pub mod registry_topic;
pub mod replay;
pub mod report;
pub mod room;
pub mod run;
pub mod serve;
pub mod stats;
pub mod summary;
pub mod tables;
pub mod tools;

/// Errors of the sensor crate: the engine's (the store, configuration, arguments, files), or
/// another library's.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The engine failed, a value is invalid, or a command could not do what it was asked, as
    /// it says: [`pipeline::Error::Invalid`], [`pipeline::Error::Config`],
    /// [`pipeline::Error::Io`], [`pipeline::Error::Store`] among them.
    #[error(transparent)]
    Engine(#[from] pipeline::Error),
    /// Another library failed, as it says.
    #[error(transparent)]
    Other(Box<dyn std::error::Error + Send + Sync>),
}

impl Error {
    /// An invalid argument or value, as [`pipeline::Error::Invalid`].
    pub fn invalid(message: impl Into<String>) -> Self {
        Error::Engine(pipeline::Error::Invalid(message.into()))
    }

    /// An invalid configuration value, as [`pipeline::Error::Config`].
    pub fn config(message: impl Into<String>) -> Self {
        Error::Engine(pipeline::Error::Config(message.into()))
    }
}

/// `?` on the errors of the libraries the commands call: [`Error::Other`] (I/O errors are the
/// engine's [`pipeline::Error::Os`]).
macro_rules! other_errors {
    ($($t:ty),* $(,)?) => {
        $(impl From<$t> for Error {
            fn from(e: $t) -> Self {
                Error::Other(Box::new(e))
            }
        })*
    };
}

other_errors!(
    serde_json::Error,
    std::num::ParseIntError,
    std::num::ParseFloatError,
    std::fmt::Error,
);

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Engine(pipeline::Error::Os(e))
    }
}

/// Result with the sensor [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<sinks::Error> for Error {
    /// Keeps the storage crate's own argument, configuration and file errors what they are (a
    /// query with a bad argument is the caller's fault, not an unavailable store).
    fn from(e: sinks::Error) -> Self {
        pipeline::Error::from(e).into()
    }
}
