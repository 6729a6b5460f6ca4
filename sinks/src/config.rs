//! Where the tables live: the `[store]` section of the job configuration.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

fn default_dir() -> PathBuf {
    PathBuf::from("./hourglass-data")
}

/// Which backend holds the tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StoreKind {
    /// The embedded LSM store in `dir` (default).
    #[default]
    Embedded,
    /// HBase through its Thrift gateway at `hbase`.
    Hbase,
}

/// Where the tables live.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// Backend (default `embedded`).
    #[serde(default)]
    pub kind: StoreKind,
    /// Directory of the embedded store (default `./hourglass-data`).
    #[serde(default = "default_dir")]
    pub dir: PathBuf,
    /// HBase Thrift1 gateway `host:port`, for `kind = "hbase"`.
    #[serde(default)]
    pub hbase: Option<String>,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            kind: StoreKind::default(),
            dir: default_dir(),
            hbase: None,
        }
    }
}

impl StoreConfig {
    /// Checks values that parse but make no sense.
    ///
    /// # Errors
    /// [`Error::Config`] naming the key.
    pub fn validate(&self) -> Result<()> {
        if self.kind == StoreKind::Hbase && self.hbase.is_none() {
            return Err(Error::Config(
                "store.kind = \"hbase\" needs store.hbase = \"host:port\" (the Thrift1 gateway)"
                    .into(),
            ));
        }
        Ok(())
    }
}
