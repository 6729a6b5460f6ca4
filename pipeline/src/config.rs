//! Job configuration (TOML), with defaults for everything.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::rowkey::KeyScheme;
use crate::{Error, Result};

/// The example configuration shipped in `config/hourglass.example.toml`.
pub const EXAMPLE: &str = include_str!("../../config/hourglass.example.toml");

const fn default_bound() -> u64 {
    30
}
const fn default_lateness() -> u64 {
    3600
}
const fn default_early_fire() -> u64 {
    10
}
fn default_metric() -> String {
    "temp".to_string()
}
fn default_dir() -> PathBuf {
    PathBuf::from("./hourglass-data")
}

/// A job's configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobConfig {
    /// Name of the primary metric field (default `temp`).
    #[serde(default = "default_metric")]
    pub metric: String,
    /// Narrow row-key scheme (default `salted`).
    #[serde(default)]
    pub key_scheme: KeyScheme,
    /// Event-time settings.
    #[serde(default)]
    pub window: WindowConfig,
    /// Where the tables live.
    #[serde(default)]
    pub store: StoreConfig,
}

impl Default for JobConfig {
    fn default() -> Self {
        JobConfig {
            metric: default_metric(),
            key_scheme: KeyScheme::default(),
            window: WindowConfig::default(),
            store: StoreConfig::default(),
        }
    }
}

/// Event-time settings of the hourly window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowConfig {
    /// Watermark = max event time seen − this bound (default 30 s).
    #[serde(default = "default_bound")]
    pub watermark_bound_secs: u64,
    /// Readings this late (past their hour's end, by watermark) still land in the wide row
    /// (default 3600 s).
    #[serde(default = "default_lateness")]
    pub allowed_lateness_secs: u64,
    /// Processing-time period of early firings of open hours; 0 disables (default 10 s).
    #[serde(default = "default_early_fire")]
    pub early_fire_secs: u64,
}

impl Default for WindowConfig {
    fn default() -> Self {
        WindowConfig {
            watermark_bound_secs: default_bound(),
            allowed_lateness_secs: default_lateness(),
            early_fire_secs: default_early_fire(),
        }
    }
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

impl JobConfig {
    /// Parses a TOML configuration.
    ///
    /// # Errors
    /// [`Error::Config`] naming the offending key.
    pub fn parse(text: &str) -> Result<Self> {
        let cfg: JobConfig = toml::from_str(text).map_err(|e| Error::Config(e.to_string()))?;
        cfg.validate()?;
        Ok(cfg)
    }

    /// Reads and parses a TOML configuration file.
    ///
    /// # Errors
    /// [`Error::Io`] if it cannot be read, [`Error::Config`] if it is invalid.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text).map_err(|e| Error::Config(format!("{}: {e}", path.display())))
    }

    /// Checks values that parse but make no sense.
    ///
    /// # Errors
    /// [`Error::Config`] naming the key.
    pub fn validate(&self) -> Result<()> {
        if self.metric.is_empty() || matches!(self.metric.as_str(), "device" | "ts") {
            return Err(Error::Config(format!(
                "metric = {:?}: name a numeric field other than device and ts",
                self.metric
            )));
        }
        if self.store.kind == StoreKind::Hbase && self.store.hbase.is_none() {
            return Err(Error::Config(
                "store.kind = \"hbase\" needs store.hbase = \"host:port\" (the Thrift1 gateway)"
                    .into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn example_config_parses_to_the_defaults() {
        let cfg = JobConfig::parse(EXAMPLE).unwrap();
        assert_eq!(cfg, JobConfig::default());
    }

    #[test]
    fn unknown_keys_are_named() {
        let err = JobConfig::parse("[window]\nlateness = 5\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("lateness"), "{err}");
        let err = JobConfig::parse("metric = \"ts\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("metric"), "{err}");
        let err = JobConfig::parse("[store]\nkind = \"hbase\"\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("store.hbase"), "{err}");
    }
}
