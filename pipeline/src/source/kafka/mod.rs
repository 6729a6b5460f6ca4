//! The Kafka source: records of a topic → decoded readings, with a per-partition watermark and
//! offsets committed only once the tables hold what they cover; and the device registry topic.
//!
//! One file per concern: the librdkafka settings of every client (`client.rs`), the topic's
//! partitions and the state the workers share (`metadata.rs`), the offsets that may be committed
//! (`ledger.rs`), committing them and resuming from them (`committer.rs`), the feed itself
//! (`feed.rs`: assignment and watermark), produce → durable delays (`delay.rs`), retrying broker
//! calls (`retry.rs`) and the registry topic (`registry_topic.rs`).

mod client;
mod committer;
mod delay;
mod feed;
mod ledger;
mod metadata;
mod registry_topic;
mod retry;

pub use client::{admin_config, block_on, client_config, consumer, registry_config};
pub use committer::OffsetCommitter;
pub use delay::{DelayHistogram, DelaySnapshot, TimedWriter};
pub use feed::{KafkaFeed, KafkaOptions};
pub use metadata::{partition_count, wait_for_partitions, KafkaShared, TopicProblem};
pub use registry_topic::{cleanup_policy, Polled, RegistryTopic, PARTITION_CHECK_EVERY};
