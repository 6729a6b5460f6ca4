//! The flags every live bench takes, and the part of its job's configuration they make.

use std::path::{Path, PathBuf};

use super::Publisher;

/// Flags of a live bench that are the engine's: timing, Kafka, the store, the job's workers
/// and extra configuration, the working directory and the output format.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchFlags {
    /// How long to publish (`90s`, `2m`) after the warm-up; only this part is sampled.
    #[arg(long, default_value = "2m")]
    pub duration: String,
    /// Published before sampling starts (the job connects, its watermark forms, its caches
    /// warm).
    #[arg(long, default_value = "10s")]
    pub warmup: String,
    /// Partitions of the fresh topic.
    #[arg(long, default_value_t = 4)]
    pub partitions: i32,
    /// Kafka bootstrap brokers.
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub brokers: String,
    /// Write into HBase through its Thrift1 gateway at HOST:PORT instead of a fresh embedded
    /// store.
    #[arg(long, value_name = "HOST:PORT")]
    pub hbase: Option<String>,
    /// HBase Thrift2 gateway [default: the --hbase host, port 9091].
    #[arg(long, value_name = "HOST:PORT", requires = "hbase")]
    pub thrift2: Option<String>,
    /// Timely workers of the job [default: the job's default, one per core].
    #[arg(long)]
    pub workers: Option<usize>,
    /// The producer's `linger.ms` (as `hourglass produce`: 5).
    #[arg(long, default_value_t = 5)]
    pub linger_ms: u64,
    /// Extra lines appended to the job's configuration (TOML), e.g. `[source.rdkafka]`
    /// settings, `[window]` then `early_fire_secs = 5`, `[merge]` then
    /// `flush_interval_ms = 5000`; repeatable.
    #[arg(long, value_name = "TOML")]
    pub config_line: Vec<String>,
    /// Working directory (job config, store, dead letters, the job's log) [default: a
    /// temporary one].
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// `text` (a table) or `json`.
    #[arg(long, default_value = "text")]
    pub format: String,
}

impl BenchFlags {
    /// The job's configuration: `workers`, then the job's own tables `domain` (TOML), then
    /// `[source]` (`topic` on the brokers, read as a group of its own name) and `[store]`
    /// (HBase, or a fresh embedded store at `dir/store`), then the `--config-line`s.
    pub fn job_config(&self, dir: &Path, topic: &str, domain: &str) -> String {
        let mut cfg = String::new();
        if let Some(w) = self.workers {
            cfg += &format!("workers = {w}\n");
        }
        cfg += domain;
        cfg += &format!(
            "[source]\nbrokers = {:?}\ntopic = {topic:?}\ngroup_id = {topic:?}\n",
            self.brokers
        );
        match &self.hbase {
            Some(hbase) => {
                cfg += &format!("[store]\nkind = \"hbase\"\nhbase = {hbase:?}\n");
                if let Some(t2) = &self.thrift2 {
                    cfg += &format!("[store.hbase_client]\nthrift2 = {t2:?}\n");
                }
            }
            None => {
                cfg += &format!(
                    "[store]\nkind = \"embedded\"\ndir = {:?}\n",
                    dir.join("store").display().to_string()
                );
            }
        }
        for line in &self.config_line {
            cfg += line;
            cfg.push('\n');
        }
        cfg
    }

    /// A publisher on a fresh topic `{name}-{pid}-{ms}` of `--partitions` ([`Publisher::create`]).
    ///
    /// # Errors
    /// As [`Publisher::create`].
    pub fn publisher(&self, name: &str) -> crate::Result<Publisher> {
        let topic = format!("{name}-{}-{}", std::process::id(), super::wall_ms());
        Publisher::create(&self.brokers, self.linger_ms, &topic, self.partitions)
    }

    /// Where the bench reports writing: `embedded`, or the HBase gateway.
    pub fn store(&self) -> String {
        self.hbase.clone().unwrap_or_else(|| "embedded".into())
    }
}
