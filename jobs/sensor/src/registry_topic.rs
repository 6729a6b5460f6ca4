//! The device registry as a compacted Kafka topic: every partition read from the beginning, then
//! followed, with no group membership and no commits (the whole topic *is* the registry).
//!
//! Record key = device id, value = `room[,gateway,…]` (UTF-8), null value (tombstone) = the
//! device leaves the registry; see [`crate::registry::parse_record`]. The topic is "caught up"
//! once every partition has been read to the high watermark it had when the reader opened; the
//! room view holds its output until then, so a job starts with the whole registry. Partitions
//! added to the topic while the job runs are found within [`PARTITION_CHECK_EVERY`] and read
//! from their beginning.

use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::types::RDKafkaErrorCode;
use rdkafka::{Offset, TopicPartitionList};

use pipeline::config::SourceConfig;
use pipeline::source::kafka::{
    admin_config, block_on, partition_count, registry_config, rejected_setting, ErrorNote,
    TopicProblem, ADMIN_TIMEOUT,
};

use crate::registry::{parse_record, Registry, RejectedRecord};
use crate::{Error, Result};

/// How often a running reader looks for partitions added to its topic.
pub const PARTITION_CHECK_EVERY: Duration = Duration::from_secs(10);
/// How long that look may hold the worker that reads the registry.
const PARTITION_CHECK_TIMEOUT: Duration = Duration::from_secs(1);

fn topic_error(brokers: &str, topic: &str, message: String) -> Error {
    pipeline::source::kafka::topic_error("registry topic", topic, brokers, message).into()
}

/// The topic's `cleanup.policy` as the brokers report it (`None`: not reported).
///
/// # Errors
/// The admin client cannot be created or the brokers do not answer.
pub fn cleanup_policy(cfg: &ClientConfig, topic: &str) -> Result<Option<String>> {
    let admin: AdminClient<DefaultClientContext> = cfg
        .create()
        .map_err(|e| Error::config(format!("Kafka admin client: {e}")))?;
    let opts = AdminOptions::new().request_timeout(Some(ADMIN_TIMEOUT));
    let results = block_on(admin.describe_configs([&ResourceSpecifier::Topic(topic)], &opts))
        .map_err(|e| Error::invalid(format!("describing topic {topic}: {e}")))?;
    for result in results {
        let resource =
            result.map_err(|code| Error::invalid(format!("describing topic {topic}: {code}")))?;
        if let Some(entry) = resource.get("cleanup.policy") {
            return Ok(entry.value.clone());
        }
    }
    Ok(None)
}

/// Logs the registry consumer's errors as warnings, except reaching the end of a partition,
/// which librdkafka reports for a consumer that starts at the beginning even with
/// `enable.partition.eof=false`, and which is the normal state of a registry topic.
struct RegistryContext;

impl ClientContext for RegistryContext {
    fn error(&self, error: KafkaError, reason: &str) {
        let eof = matches!(
            error,
            KafkaError::PartitionEOF(_) | KafkaError::Global(RDKafkaErrorCode::PartitionEOF)
        );
        if !eof {
            tracing::warn!("device registry topic: {error}: {reason}");
        }
    }
}

impl ConsumerContext for RegistryContext {}

/// What one [`RegistryTopic::poll`] read.
#[derive(Debug, Default)]
pub struct Polled {
    /// Valid records in order: `(device, Some(room))` or a tombstone `(device, None)`.
    pub updates: Vec<(String, Option<String>)>,
    /// Records refused (bad key or value); they change nothing.
    pub rejected: Vec<RejectedRecord>,
    /// The poll stopped at its limit: more records may be ready.
    pub more: bool,
}

/// A reader of the whole registry topic (one per job, on worker 0).
pub struct RegistryTopic {
    consumer: BaseConsumer<RegistryContext>,
    topic: String,
    brokers: String,
    /// Per partition: the high watermark at open while it has not been reached.
    behind: Vec<Option<i64>>,
    error_note: ErrorNote,
    /// When the topic's partitions were last counted.
    last_partition_check: Instant,
}

impl std::fmt::Debug for RegistryTopic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryTopic")
            .field("topic", &self.topic)
            .field("behind", &self.behind)
            .finish_non_exhaustive()
    }
}

impl RegistryTopic {
    /// Connects, reads the topic's partitions and their high watermarks, and assigns every
    /// partition from its beginning.
    ///
    /// # Errors
    /// An invalid client setting, the topic does not exist, or the brokers did not answer.
    pub fn open(source: &SourceConfig, topic: &str) -> Result<Self> {
        let consumer: BaseConsumer<RegistryContext> = registry_config(source)
            .set("client.id", "hourglass-registry")
            .create_with_context(RegistryContext)
            .map_err(rejected_setting)?;
        let partitions = match partition_count(&consumer, topic, ADMIN_TIMEOUT) {
            Ok(partitions) => partitions,
            Err(problem @ TopicProblem::Metadata(_)) => {
                return Err(topic_error(&source.brokers, topic, problem.to_string()))
            }
            Err(_) => {
                return Err(topic_error(
                    &source.brokers,
                    topic,
                    format!(
                        "topic not found: publish the registry first, e.g. `hourglass produce \
                         --registry devices.csv --topic {topic} --brokers {}`",
                        source.brokers
                    ),
                ))
            }
        };
        match cleanup_policy(&admin_config(source), topic) {
            Ok(Some(policy)) if !policy.split(',').any(|p| p.trim() == "compact") => {
                tracing::warn!(
                    topic,
                    policy,
                    "the device registry topic is not compacted: entries older than its retention \
                     will be deleted and their devices leave the registry at the next restart; \
                     set cleanup.policy=compact"
                );
            }
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(topic, error = %e, "cannot read the registry topic's cleanup.policy")
            }
        }
        let mut behind = Vec::with_capacity(partitions);
        let mut assign = TopicPartitionList::new();
        for p in 0..partitions as i32 {
            let (low, high) = consumer
                .fetch_watermarks(topic, p, ADMIN_TIMEOUT)
                .map_err(|e| {
                    topic_error(
                        &source.brokers,
                        topic,
                        format!("partition {p} watermarks: {e}"),
                    )
                })?;
            behind.push((high > low).then_some(high));
            assign
                .add_partition_offset(topic, p, Offset::Beginning)
                .map_err(|e| topic_error(&source.brokers, topic, e.to_string()))?;
        }
        consumer.assign(&assign).map_err(|e| {
            topic_error(&source.brokers, topic, format!("assigning partitions: {e}"))
        })?;
        tracing::info!(topic, partitions, "reading the device registry topic");
        Ok(RegistryTopic {
            consumer,
            topic: topic.to_string(),
            brokers: source.brokers.clone(),
            behind,
            error_note: ErrorNote::default(),
            last_partition_check: Instant::now(),
        })
    }

    /// The topic's name.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Whether every partition has been read up to where it ended when the reader opened.
    pub fn caught_up(&self) -> bool {
        self.behind.iter().all(Option::is_none)
    }

    /// Partitions not yet read up to where they ended when the reader opened.
    pub fn partitions_behind(&self) -> usize {
        self.behind.iter().filter(|b| b.is_some()).count()
    }

    /// Notes that `partition` was read up to `next_offset` (exclusive).
    fn reached(&mut self, partition: i32, next_offset: i64) {
        if let Some(slot) = self.behind.get_mut(partition as usize) {
            if slot.is_some_and(|high| next_offset >= high) {
                *slot = None;
            }
        }
    }

    /// Marks partitions whose position passed their start high watermark: the last records of
    /// a partition may be transaction markers, which are never delivered.
    fn check_positions(&mut self) {
        let Ok(positions) = self.consumer.position() else {
            return;
        };
        for elem in positions.elements_for_topic(&self.topic) {
            if let Offset::Offset(next) = elem.offset() {
                self.reached(elem.partition(), next);
            }
        }
    }

    /// Reads the topic up to where it ended when the reader opened and returns the registry it
    /// holds (refused records change nothing), as a job has it when it starts.
    ///
    /// # Errors
    /// The topic was not read that far within `limit`.
    pub fn read_to_end(&mut self, limit: Duration) -> Result<Registry> {
        let mut registry = Registry::new();
        let started = Instant::now();
        loop {
            let polled = self.poll(10_000);
            crate::registry::apply(&mut registry, polled.updates);
            if polled.more {
                continue;
            }
            if self.caught_up() {
                return Ok(registry);
            }
            if started.elapsed() > limit {
                return Err(topic_error(
                    &self.brokers,
                    &self.topic,
                    format!(
                        "not read to its end after {}s ({} partitions behind)",
                        limit.as_secs(),
                        self.partitions_behind()
                    ),
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Assigns, from their beginning, the partitions added to the topic since the last look
    /// (every [`PARTITION_CHECK_EVERY`]). They hold nothing the reader must wait for at start.
    fn assign_new_partitions(&mut self) {
        if self.last_partition_check.elapsed() < PARTITION_CHECK_EVERY {
            return;
        }
        self.last_partition_check = Instant::now();
        let Ok(now) = partition_count(&self.consumer, &self.topic, PARTITION_CHECK_TIMEOUT) else {
            return;
        };
        let known = self.behind.len();
        if now <= known {
            return;
        }
        let mut added = TopicPartitionList::new();
        for p in known..now {
            if let Err(e) = added.add_partition_offset(&self.topic, p as i32, Offset::Beginning) {
                tracing::warn!(topic = %self.topic, partition = p, error = %e, "device registry topic: cannot add the partition");
                return;
            }
        }
        match self.consumer.incremental_assign(&added) {
            Ok(()) => {
                self.behind.resize(now, None);
                tracing::info!(topic = %self.topic, partitions = now, "device registry topic: reading its new partitions");
            }
            Err(e) => {
                tracing::warn!(topic = %self.topic, error = %e, "device registry topic: cannot assign its new partitions (retrying)");
            }
        }
    }

    /// Reads up to `max` records without waiting (but for a look at the topic's partitions
    /// every [`PARTITION_CHECK_EVERY`]). Consumer errors are logged (at most every 10 s) and
    /// retried by librdkafka.
    pub fn poll(&mut self, max: usize) -> Polled {
        self.assign_new_partitions();
        let mut out = Polled::default();
        for _ in 0..max {
            match self.consumer.poll(Duration::ZERO) {
                None => {
                    if !self.caught_up() {
                        self.check_positions();
                    }
                    return out;
                }
                Some(Ok(msg)) => {
                    let (partition, offset) = (msg.partition(), msg.offset());
                    match parse_record(msg.key(), msg.payload()) {
                        Ok(update) => out.updates.push(update),
                        Err(error) => out.rejected.push(RejectedRecord {
                            topic: self.topic.clone(),
                            partition,
                            offset,
                            error,
                            key: msg.key().map(<[u8]>::to_vec),
                            value: msg.payload().map(<[u8]>::to_vec),
                        }),
                    }
                    self.reached(partition, offset + 1);
                }
                Some(Err(e)) => {
                    if self.error_note.due() {
                        tracing::warn!(topic = %self.topic, error = %e, "device registry topic: consumer error (retrying)");
                    }
                    return out;
                }
            }
        }
        out.more = true;
        out
    }
}
