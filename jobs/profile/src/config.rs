//! The profile job's configuration file (TOML): its `[registry]` and `[redis]` tables.

use std::path::Path;

use serde::Deserialize;

use crate::{Error, Result};

/// The registry a command uses when none is given: a SQLite file beside the embedded store's
/// default directory (`hourglass-data`), relative to the working directory.
pub const DEFAULT_REGISTRY_URL: &str = "sqlite://./hourglass-data/tags.sqlite";

/// The profile job's configuration. The sensor job's `[registry]` is a device registry; this
/// one is the tag registry, so the two jobs keep separate files.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileConfig {
    /// The tag registry.
    #[serde(default)]
    pub registry: RegistryConfig,
    /// Where the short-term tags go: Redis when given (default none: the embedded SQLite file
    /// [`crate::short_term::DEFAULT_EMBEDDED_PATH`]).
    #[serde(default)]
    pub redis: Option<RedisConfig>,
}

/// `[redis]`: the Redis server of the short-term tags.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedisConfig {
    /// `redis://[:password@]host:port/db`, e.g. `redis://127.0.0.1:6379/0`. Required in the
    /// table: a `[redis]` without a URL is a mistake, not a default server.
    pub url: String,
}

/// `[registry]`: where the tag definitions are.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegistryConfig {
    /// `sqlite://PATH` or `mysql://user:pass@host:port/db`; default [`DEFAULT_REGISTRY_URL`].
    #[serde(default = "default_registry_url")]
    pub url: String,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        Self {
            url: default_registry_url(),
        }
    }
}

fn default_registry_url() -> String {
    DEFAULT_REGISTRY_URL.to_string()
}

impl ProfileConfig {
    /// Parses a configuration from TOML text.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming `path` and the key at fault (unknown keys are refused).
    pub fn parse(path: &str, text: &str) -> Result<Self> {
        toml::from_str(text).map_err(|e| Error::Config {
            path: path.to_string(),
            reason: e.to_string(),
        })
    }

    /// Reads and parses the configuration file at `path`.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when it cannot be read; as [`ProfileConfig::parse`].
    pub fn load(path: &Path) -> Result<Self> {
        let shown = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            path: shown.clone(),
            source,
        })?;
        Self::parse(&shown, &text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_example_parses() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../config/profile.example.toml"
        );
        let config = ProfileConfig::load(Path::new(path)).unwrap();
        assert_eq!(config.registry.url, DEFAULT_REGISTRY_URL);
        assert_eq!(config, ProfileConfig::default());
    }

    #[test]
    fn registry_url_and_unknown_keys() {
        let c = ProfileConfig::parse("p.toml", "[registry]\nurl = \"mysql://u:p@h:3306/db\"\n")
            .unwrap();
        assert_eq!(c.registry.url, "mysql://u:p@h:3306/db");
        assert_eq!(
            ProfileConfig::parse("p.toml", "").unwrap(),
            ProfileConfig::default()
        );
        let e = ProfileConfig::parse("p.toml", "[registry]\nuri = \"x\"\n").unwrap_err();
        assert!(e.to_string().contains("unknown field `uri`"), "{e}");
    }

    #[test]
    fn redis_is_none_by_default_and_needs_its_url() {
        assert_eq!(ProfileConfig::default().redis, None);
        let c = ProfileConfig::parse("p.toml", "[redis]\nurl = \"redis://127.0.0.1:6379/0\"\n")
            .unwrap();
        assert_eq!(
            c.redis,
            Some(RedisConfig {
                url: "redis://127.0.0.1:6379/0".into()
            })
        );
        let e = ProfileConfig::parse("p.toml", "[redis]\n").unwrap_err();
        assert!(e.to_string().contains("missing field `url`"), "{e}");
        let e =
            ProfileConfig::parse("p.toml", "[redis]\nurl = \"redis://h\"\ndb = 1\n").unwrap_err();
        assert!(e.to_string().contains("unknown field `db`"), "{e}");
    }
}
