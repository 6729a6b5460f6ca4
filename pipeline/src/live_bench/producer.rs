//! Publishing to Kafka so that no record is lost unnoticed: delivery failures counted, a full
//! queue waited out, every record acknowledged before the figures are read.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext};

use crate::source::kafka::block_on;
use crate::{Context, Error, Result};

/// Counts delivery failures reported by librdkafka.
#[derive(Debug, Default)]
pub struct Deliveries {
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result {
            self.failed.fetch_add(1, Ordering::Relaxed);
            if let Ok(mut first) = self.first_error.lock() {
                first.get_or_insert_with(|| e.to_string());
            }
        }
    }
}

/// Creates `topic` unless it exists (`compact`: with `cleanup.policy=compact`); returns whether
/// it was created.
///
/// # Errors
/// The admin client cannot be made, or the brokers refuse the topic.
pub fn create_topic(
    cfg: &ClientConfig,
    topic: &str,
    partitions: i32,
    compact: bool,
) -> Result<bool> {
    let admin: AdminClient<DefaultClientContext> =
        cfg.create().context("creating the Kafka admin client")?;
    let mut new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    if compact {
        new = new.set("cleanup.policy", "compact");
    }
    let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let results = block_on(admin.create_topics([&new], &opts))
        .with_context(|| format!("creating topic {topic}"))?;
    let mut created = false;
    for r in results {
        match r {
            Ok(_) => {
                created = true;
                let policy = if compact {
                    ", cleanup.policy=compact"
                } else {
                    ""
                };
                eprintln!("created topic {topic} with {partitions} partitions{policy}");
            }
            Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
            Err((t, code)) => return Err(Error::Failed(format!("creating topic {t}: {code}"))),
        }
    }
    Ok(created)
}

/// Sends `record`, waiting while the producer's queue is full.
///
/// # Errors
/// The producer refuses the record for another reason than a full queue.
pub fn send(
    producer: &BaseProducer<Deliveries>,
    record: BaseRecord<'_, [u8], [u8]>,
    topic: &str,
) -> Result<()> {
    let mut record = Some(record);
    while let Some(r) = record.take() {
        match producer.send(r) {
            Ok(()) => {}
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                producer.poll(Duration::from_millis(10));
                record = Some(r);
            }
            Err((e, _)) => return Err(Error::Failed(format!("publishing to {topic}: {e}"))),
        }
    }
    Ok(())
}

/// Waits until the brokers acknowledged the `sent` records (`what`), failing if any was not
/// delivered.
///
/// # Errors
/// The brokers did not acknowledge within a minute, or a record was not delivered.
pub fn flush_all(
    producer: &BaseProducer<Deliveries>,
    sent: u64,
    what: &str,
    topic: &str,
) -> Result<()> {
    producer
        .flush(Duration::from_secs(60))
        .context("waiting for the brokers to acknowledge every record")?;
    let ctx = producer.context();
    let failed = ctx.failed.load(Ordering::Relaxed);
    if failed > 0 {
        let first = ctx
            .first_error
            .lock()
            .ok()
            .and_then(|e| e.clone())
            .unwrap_or_default();
        return Err(Error::Failed(format!(
            "{failed} of {sent} {what} were not delivered to {topic} (first error: {first})"
        )));
    }
    Ok(())
}

/// A bench's producer on a fresh topic of its own: records keyed and stamped as the bench
/// says, counted, and all acknowledged by [`Publisher::flush`].
pub struct Publisher {
    producer: BaseProducer<Deliveries>,
    topic: String,
    sent: u64,
}

impl std::fmt::Debug for Publisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Publisher")
            .field("topic", &self.topic)
            .field("sent", &self.sent)
            .finish_non_exhaustive()
    }
}

impl Publisher {
    /// Creates `topic` with `partitions` on `brokers` and a producer for it lingering
    /// `linger_ms` (as `hourglass produce`: 5).
    ///
    /// # Errors
    /// The topic or the producer cannot be created.
    pub fn create(brokers: &str, linger_ms: u64, topic: &str, partitions: i32) -> Result<Self> {
        let mut kafka = ClientConfig::new();
        kafka
            .set("bootstrap.servers", brokers)
            .set("linger.ms", linger_ms.to_string());
        create_topic(&kafka, topic, partitions, false)?;
        let producer = kafka
            .create_with_context(Deliveries::default())
            .context("creating the Kafka producer")?;
        Ok(Publisher {
            producer,
            topic: topic.to_string(),
            sent: 0,
        })
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// Records sent so far.
    pub fn sent(&self) -> u64 {
        self.sent
    }

    /// Publishes `payload` keyed `key`, its Kafka timestamp `at_ms`; serves delivery reports
    /// every 256 records.
    ///
    /// # Errors
    /// As [`send`].
    pub fn send(&mut self, key: &[u8], payload: &[u8], at_ms: i64) -> Result<()> {
        let record = BaseRecord::to(&self.topic)
            .key(key)
            .payload(payload)
            .timestamp(at_ms);
        send(&self.producer, record, &self.topic)?;
        self.sent += 1;
        if self.sent.is_multiple_of(256) {
            self.producer.poll(Duration::ZERO);
        }
        Ok(())
    }

    /// Serves delivery reports without waiting.
    pub fn poll(&self) {
        self.producer.poll(Duration::ZERO);
    }

    /// Waits until every record sent is acknowledged ([`flush_all`]; `what` names them).
    ///
    /// # Errors
    /// As [`flush_all`].
    pub fn flush(&self, what: &str) -> Result<()> {
        flush_all(&self.producer, self.sent, what, &self.topic)
    }
}
