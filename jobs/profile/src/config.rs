//! The profile job's configuration file (TOML): registry, short-term store, merge, limits,
//! gray test users, and the engine's `[source]`, `[store]`, `[window]` and `[cluster]`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use pipeline::config::{
    check_listen_address, check_workers, ClusterConfig, SourceConfig, StoreConfig, WindowConfig,
};
use serde::Deserialize;

use crate::audience::IndexConfig;
use crate::cache::CacheConfig;
use crate::event::EventLimits;
use crate::merge::MergeConfig;
use crate::short_term::DEFAULT_EMBEDDED_PATH;
use crate::{Error, Result};

/// The topic `hourglass profile run` reads when the config names none.
pub const DEFAULT_TOPIC: &str = "profile-tags";

/// The registry a command uses when none is given: a SQLite file beside the embedded store's
/// default directory (`hourglass-data`), relative to the working directory.
pub const DEFAULT_REGISTRY_URL: &str = "sqlite://./hourglass-data/tags.sqlite";

/// The profile job's configuration. The sensor job's `[registry]` is a device registry; this
/// one is the tag registry, so the two jobs keep separate files.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProfileConfig {
    /// The tag registry.
    #[serde(default)]
    pub registry: RegistryConfig,
    /// Where the short-term tags go: Redis when given (default none: the embedded SQLite file
    /// of `[short_term]`).
    #[serde(default)]
    pub redis: Option<RedisConfig>,
    /// The embedded store of the short-term tags, used without `[redis]`.
    #[serde(default)]
    pub short_term: ShortTermConfig,
    /// The profile cache of the read path, in the Redis of `[redis]`.
    #[serde(default)]
    pub cache: CacheConfig,
    /// The audience index: maintained by the job or not, and the queries' limits.
    #[serde(default)]
    pub index: IndexConfig,
    /// When the job's per-user merge flushes.
    #[serde(default)]
    pub merge: MergeConfig,
    /// Limits of one event.
    #[serde(default)]
    pub limits: EventLimits,
    /// The users gray tags are written for.
    #[serde(default)]
    pub gray: GrayConfig,
    /// Where `hourglass profile run` reads tag events (the sensor job's `[source]`, each key
    /// with its default but `topic`, which defaults to [`DEFAULT_TOPIC`] whether the table is
    /// absent or omits it).
    #[serde(
        default = "default_source",
        deserialize_with = "source_or_profile_topic"
    )]
    pub source: SourceConfig,
    /// Where the tables live (the sensor job's `[store]`).
    #[serde(default)]
    pub store: StoreConfig,
    /// Event-time settings of the sources: `watermark_bound_secs` and `max_future_skew_secs`
    /// (the sensor job's `[window]`; the window keys are unused, the profile job has no window).
    #[serde(default)]
    pub window: WindowConfig,
    /// Timely worker threads of `hourglass profile run`, 1 to 256 (default: the number of
    /// cores, at most 256).
    #[serde(default)]
    pub workers: Option<usize>,
    /// Seconds between two status lines of `hourglass profile run` (default 10).
    #[serde(default = "default_status_interval")]
    pub status_interval_secs: u64,
    /// `host:port` of the job's own `/metrics` and `/healthz` (default none).
    #[serde(default)]
    pub metrics_listen: Option<String>,
    /// The timely cluster this process belongs to (default: one process).
    #[serde(default)]
    pub cluster: ClusterConfig,
}

impl Default for ProfileConfig {
    fn default() -> Self {
        ProfileConfig {
            registry: RegistryConfig::default(),
            redis: None,
            short_term: ShortTermConfig::default(),
            cache: CacheConfig::default(),
            index: IndexConfig::default(),
            merge: MergeConfig::default(),
            limits: EventLimits::default(),
            gray: GrayConfig::default(),
            source: default_source(),
            store: StoreConfig::default(),
            window: WindowConfig::default(),
            workers: None,
            status_interval_secs: default_status_interval(),
            metrics_listen: None,
            cluster: ClusterConfig::default(),
        }
    }
}

fn default_source() -> SourceConfig {
    SourceConfig {
        topic: DEFAULT_TOPIC.to_string(),
        ..SourceConfig::default()
    }
}

/// `[source]` as given, its `topic` [`DEFAULT_TOPIC`] when it names none: the engine's default
/// is the sensor job's topic.
fn source_or_profile_topic<'de, D>(d: D) -> std::result::Result<SourceConfig, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let mut table = toml::Table::deserialize(d)?;
    table.entry("topic").or_insert_with(|| DEFAULT_TOPIC.into());
    table.try_into().map_err(serde::de::Error::custom)
}

const fn default_status_interval() -> u64 {
    10
}

/// `[short_term]`: the embedded store of the short-term tags, when no `[redis]` is given.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShortTermConfig {
    /// The SQLite file (created with its directory; default
    /// [`crate::short_term::DEFAULT_EMBEDDED_PATH`], relative to the working directory).
    #[serde(default = "default_short_term_path")]
    pub path: PathBuf,
}

impl Default for ShortTermConfig {
    fn default() -> Self {
        ShortTermConfig {
            path: default_short_term_path(),
        }
    }
}

fn default_short_term_path() -> PathBuf {
    PathBuf::from(DEFAULT_EMBEDDED_PATH)
}

/// `[gray]`: who gray tags are written for.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GrayConfig {
    /// The test users (ids as the events give them; default none: gray tags are written for
    /// nobody).
    #[serde(default)]
    pub test_users: HashSet<String>,
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
        let config: ProfileConfig = toml::from_str(text).map_err(|e| Error::Config {
            path: path.to_string(),
            reason: e.to_string(),
        })?;
        config.validate().map_err(|reason| Error::Config {
            path: path.to_string(),
            reason,
        })?;
        Ok(config)
    }

    /// Checks values that parse but make no sense; the message names the key.
    fn validate(&self) -> std::result::Result<(), String> {
        if self.merge.max_users == 0 {
            return Err("merge.max_users must be at least 1".into());
        }
        if self.merge.flush_interval_ms == 0 {
            return Err("merge.flush_interval_ms must be at least 1".into());
        }
        if self.limits.max_tags == 0 || self.limits.max_value_bytes == 0 {
            return Err("limits.max_tags and limits.max_value_bytes must be at least 1".into());
        }
        if self.status_interval_secs == 0 {
            return Err("status_interval_secs must be at least 1".into());
        }
        self.cache.validate()?;
        if let Some(workers) = self.workers {
            check_workers("workers", workers).map_err(|e| e.to_string())?;
        }
        if let Some(addr) = &self.metrics_listen {
            check_listen_address("metrics_listen", addr).map_err(|e| e.to_string())?;
        }
        self.store.validate().map_err(|e| e.to_string())?;
        self.cluster.validate().map_err(|e| e.to_string())?;
        self.source.validate().map_err(|e| e.to_string())
    }

    /// The Redis URL of the short-term tags, if configured.
    pub fn redis_url(&self) -> Option<&str> {
        self.redis.as_ref().map(|r| r.url.as_str())
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
    fn merge_limits_and_gray_users() {
        let c = ProfileConfig::parse(
            "p.toml",
            "[merge]\nmax_users = 10\nflush_interval_ms = 200\n[limits]\nmax_tags = 5\n\
             max_value_bytes = 100\n[gray]\ntest_users = [\"10086\"]\n[short_term]\n\
             path = \"st.sqlite\"\n[source]\ntopic = \"tags\"\n",
        )
        .unwrap();
        assert_eq!(
            (c.merge.max_users, c.merge.flush_interval_ms),
            (10, 200),
            "{c:?}"
        );
        assert_eq!((c.limits.max_tags, c.limits.max_value_bytes), (5, 100));
        assert!(c.gray.test_users.contains("10086"));
        assert_eq!(c.short_term.path, PathBuf::from("st.sqlite"));
        assert_eq!(c.source.topic, "tags");
        assert_eq!(ProfileConfig::default().source.topic, DEFAULT_TOPIC);
        for bad in [
            "[merge]\nmax_users = 0\n",
            "[limits]\nmax_tags = 0\n",
            "[merge]\nflush_interval_ms = 0\n",
            "workers = 0\n",
            "[gray]\nusers = []\n",
            "[cache]\nttl_secs = 0\n",
            "[cache]\nttl = 5\n",
        ] {
            assert!(ProfileConfig::parse("p.toml", bad).is_err(), "{bad}");
        }
    }

    /// Every engine table the profile job shares with the sensor job takes the profile job's
    /// defaults whether it is absent or present with a key omitted: `[source]` without `topic`
    /// reads the profile topic, not the sensor job's.
    #[test]
    fn shared_tables_default_alike_absent_or_partial() {
        let absent = ProfileConfig::parse("p.toml", "").unwrap();
        for (table, key) in [
            ("source", "brokers = \"127.0.0.1:9092\""),
            ("source", "group_id = \"hourglass\""),
            ("store", "kind = \"embedded\""),
            ("window", "watermark_bound_secs = 30"),
            ("cluster", "processes = 1"),
        ] {
            let partial = ProfileConfig::parse("p.toml", &format!("[{table}]\n{key}\n")).unwrap();
            assert_eq!(partial, absent, "[{table}] with only {key}");
        }
        assert_eq!(absent.source.topic, DEFAULT_TOPIC);
        let c = ProfileConfig::parse("p.toml", "[source]\ngroup_id = \"g\"\n").unwrap();
        assert_eq!(
            (c.source.topic.as_str(), c.source.group_id.as_str()),
            (DEFAULT_TOPIC, "g")
        );
        let e = ProfileConfig::parse("p.toml", "[source]\ntopics = \"t\"\n").unwrap_err();
        assert!(e.to_string().contains("unknown field `topics`"), "{e}");
    }

    #[test]
    fn the_cache_table() {
        let c = ProfileConfig::parse(
            "p.toml",
            "[cache]\nttl_secs = 60\nactive_days = 1\nhigh_value_users = [\"vip\"]\n\
             core_tags = [\"dim_city\"]\nmax_tags = 9\ntimeout_ms = 20\nretry_after_ms = 5\n\
             backfill_queue = 8\nenabled = false\n",
        )
        .unwrap();
        let cache = &c.cache;
        assert_eq!(
            (cache.ttl_secs, cache.active_days, cache.max_tags),
            (60, 1, 9)
        );
        assert_eq!(
            (cache.timeout_ms, cache.retry_after_ms, cache.backfill_queue),
            (20, 5, 8)
        );
        assert!(!cache.enabled && cache.high_value_users.contains("vip"));
        assert!(cache.core_tags.contains("dim_city"));
        assert_eq!(ProfileConfig::default().cache.ttl_secs, 600);
        assert_eq!(ProfileConfig::default().cache.active_days, 7);
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
