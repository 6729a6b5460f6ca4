//! The end-of-run report: the headline and the lines about the side outputs on stderr, and the
//! `--stats-json` document. Each job writes its own, naming its counters.

use std::fmt::Debug;
use std::path::Path;

use serde::Serialize;

/// A job's end-of-run report, made from the engine's [`crate::stats::Summary`] and the job's
/// own counters; `--stats-json` writes its serialisation.
pub trait Report: Serialize + Debug {
    /// The one line that says what the job did; `location` is where the tables are.
    fn headline(&self, location: &str) -> String;

    /// The lines printed before the headline: warnings, and what the side outputs got (the
    /// dead-letter file at `rejected`, the late records' file at `late`, each `Some` if
    /// written).
    fn footer(&self, rejected: Option<&Path>, late: Option<&Path>) -> Vec<String>;
}
