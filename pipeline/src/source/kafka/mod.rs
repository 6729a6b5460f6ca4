//! The Kafka source: records of a topic → decoded readings, with a per-partition watermark and
//! offsets committed only once the tables hold what they cover.
//!
//! One file per concern: the librdkafka settings of every client (`client.rs`), the topic's
//! partitions and the state the workers share (`metadata.rs`), the offsets that may be committed
//! (`ledger.rs`), committing them and resuming from them (`committer.rs`), the feed itself
//! (`feed.rs`: assignment and watermark), produce → durable delays (`histogram.rs`, measured by
//! `delay.rs`), retrying broker calls (`retry.rs`).

mod client;
mod committer;
mod delay;
mod feed;
mod histogram;
mod ledger;
mod metadata;
mod retry;

pub use client::{
    admin_config, block_on, client_config, consumer, registry_config, rejected_setting, topic_error,
};
pub use committer::OffsetCommitter;
pub use delay::TimedWriter;
pub use feed::{KafkaFeed, KafkaOptions};
pub use histogram::{DelayHistogram, DelaySnapshot};
pub use metadata::{partition_count, wait_for_partitions, KafkaShared, TopicProblem};
pub use retry::{ErrorNote, ADMIN_TIMEOUT};
