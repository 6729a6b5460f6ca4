//! Opening the embedded store the way every subcommand does.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use pipeline::schema;
use sinks::embedded::EmbeddedStore;

/// Opens (or creates) the embedded store in `dir` with every hourglass table, measuring TTLs
/// against [`pipeline::time::now_ms`] (so `HOURGLASS_NOW` applies).
pub fn open_embedded(dir: &Path) -> Result<EmbeddedStore> {
    EmbeddedStore::open_with_clock(dir, &schema::all_tables(), Arc::new(pipeline::time::now_ms))
        .with_context(|| format!("opening the embedded store at {}", dir.display()))
}
