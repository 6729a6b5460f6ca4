//! The librdkafka settings of every hourglass client of a `[source]`: the passthrough table
//! (`source.rdkafka`: security, tuning), then what hourglass owns (brokers, group, manual
//! offsets); and the errors its clients report.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll, Wake};

use rdkafka::config::ClientConfig;
use rdkafka::consumer::BaseConsumer;

use crate::config::SourceConfig;
use crate::{Error, Result};

/// `defaults` (which the passthrough table may override), the passthrough table, then the
/// brokers.
fn base_config(source: &SourceConfig, defaults: &[(&str, &str)]) -> ClientConfig {
    let mut cfg = ClientConfig::new();
    for (key, value) in defaults {
        cfg.set(*key, *value);
    }
    for (key, value) in &source.rdkafka {
        cfg.set(key, value);
    }
    cfg.set("bootstrap.servers", &source.brokers);
    cfg
}

/// Offsets are hourglass's business alone: nothing is committed or stored behind its back.
fn manual_offsets(mut cfg: ClientConfig, group: &str) -> ClientConfig {
    cfg.set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false");
    cfg
}

/// The librdkafka settings of an admin client of `source`'s brokers: its passthrough table
/// (security, …) and its brokers.
pub fn admin_config(source: &SourceConfig) -> ClientConfig {
    base_config(source, &[])
}

/// The librdkafka settings of the job's readings consumers: the passthrough table, then what
/// hourglass owns (brokers, group `source.group_id`, manual offsets); `auto.offset.reset`
/// defaults to `earliest`, and the prefetch queue is bounded by `source.prefetch_max_messages`
/// and `source.prefetch_max_kbytes`. Unknown settings fail when a client is created.
pub fn client_config(source: &SourceConfig) -> ClientConfig {
    let fetch_wait = source.fetch_wait_max_ms.to_string();
    let (messages, kbytes) = (
        source.prefetch_max_messages.to_string(),
        source.prefetch_max_kbytes.to_string(),
    );
    manual_offsets(
        base_config(
            source,
            &[
                ("auto.offset.reset", "earliest"),
                ("fetch.wait.max.ms", &fetch_wait),
                // A worker that cannot write reads nothing; these keep librdkafka from fetching
                // on for it (its defaults hold up to 100,000 records or 64 MiB per consumer).
                ("queued.min.messages", &messages),
                ("queued.max.messages.kbytes", &kbytes),
            ],
        ),
        &source.group_id,
    )
}

/// The librdkafka settings of a registry reader: as [`admin_config`], nothing committed. The
/// group `<source.group_id>.registry` is only there because librdkafka's `assign` wants one: it
/// is never joined and nothing is committed to it.
pub fn registry_config(source: &SourceConfig) -> ClientConfig {
    manual_offsets(
        admin_config(source),
        &format!("{}.registry", source.group_id),
    )
}

/// Creates a consumer of `source` (no partition assigned).
///
/// # Errors
/// [`Error::Config`] naming the librdkafka setting it rejects.
pub fn consumer(source: &SourceConfig, client_id: &str) -> Result<BaseConsumer> {
    client_config(source)
        .set("client.id", client_id)
        .create()
        .map_err(rejected_setting)
}

/// A client that librdkafka refused to create: a setting of the passthrough table is wrong.
pub fn rejected_setting(e: rdkafka::error::KafkaError) -> Error {
    Error::Config(format!("source.rdkafka: {e}"))
}

/// An error talking to the brokers about `topic` (the readings' topic or the registry's, as
/// `what` says).
pub fn topic_error(what: &str, topic: &str, brokers: &str, message: String) -> Error {
    Error::Io {
        path: format!("kafka {what} {topic} at {brokers}"),
        source: std::io::Error::other(message),
    }
}

/// An error talking to the brokers about the readings' topic of `source`.
pub(super) fn kafka_error(source: &SourceConfig, message: String) -> Error {
    topic_error("topic", &source.topic, &source.brokers, message)
}

/// Runs a future to completion on this thread (rdkafka's admin client resolves its futures from
/// its own thread, so no runtime is needed).
pub fn block_on<F: Future>(f: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Arc::new(Unpark(std::thread::current())).into();
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source() -> SourceConfig {
        let mut source = SourceConfig {
            brokers: "b:9092".into(),
            group_id: "g".into(),
            ..SourceConfig::default()
        };
        source
            .rdkafka
            .insert("auto.offset.reset".into(), "latest".into());
        source
            .rdkafka
            .insert("bootstrap.servers".into(), "ignored:1".into());
        source
            .rdkafka
            .insert("enable.auto.commit".into(), "true".into());
        source
    }

    #[test]
    fn hourglass_owns_brokers_group_and_offsets_the_passthrough_the_rest() {
        let source = source();
        let job = client_config(&source);
        let registry = registry_config(&source);
        let admin = admin_config(&source);
        for cfg in [&job, &registry, &admin] {
            assert_eq!(cfg.get("bootstrap.servers"), Some("b:9092"));
        }
        assert_eq!(job.get("auto.offset.reset"), Some("latest"));
        assert_eq!(job.get("group.id"), Some("g"));
        assert_eq!(registry.get("group.id"), Some("g.registry"));
        for cfg in [&job, &registry] {
            assert_eq!(cfg.get("enable.auto.commit"), Some("false"));
            assert_eq!(cfg.get("enable.auto.offset.store"), Some("false"));
        }
        assert_eq!(admin.get("group.id"), None);
        let default = client_config(&SourceConfig::default());
        assert_eq!(default.get("auto.offset.reset"), Some("earliest"));
        assert_eq!(default.get("fetch.wait.max.ms"), Some("100"));
        assert_eq!(default.get("queued.min.messages"), Some("30000"));
        assert_eq!(default.get("queued.max.messages.kbytes"), Some("8192"));
        let mut tuned = SourceConfig {
            fetch_wait_max_ms: 20,
            ..SourceConfig::default()
        };
        assert_eq!(client_config(&tuned).get("fetch.wait.max.ms"), Some("20"));
        tuned.rdkafka.insert("fetch.wait.max.ms".into(), "7".into());
        assert_eq!(client_config(&tuned).get("fetch.wait.max.ms"), Some("7"));
        assert_eq!(
            registry_config(&SourceConfig::default()).get("auto.offset.reset"),
            None
        );
    }
}
