//! The profile job's sinks, each a [`BatchWriter`] under `operators::WriteBatches`: the tables,
//! the short-term store, and the dead-letter file.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use operators::BatchWriter;
use pipeline::control::JobControl;
use pipeline::stats::{add, Stats};
use serde_json::json;
use sinks::dead_letter::DeadLetters;

use super::stats::ProfileStats;
use crate::event::Reason;
use crate::merge::ShortTermValue;
use crate::short_term::{is_retriable, ShortTermStore};

/// A line, or one tag of it, that the job does not write: what the dead-letter file gets.
#[derive(Debug, Clone, PartialEq)]
pub struct DeadLetter {
    /// 1-based line number in the input, or the record's offset in its Kafka partition.
    pub line: u64,
    /// The Kafka partition of a line refused by its source (`None` for a file, and for a tag
    /// refused at a flush).
    pub partition: Option<i32>,
    /// Why.
    pub reason: Reason,
    /// The raw line.
    pub raw: Vec<u8>,
    /// For a tag refused at a flush: the user and the tag's code.
    pub tag: Option<(String, String)>,
}

impl DeadLetter {
    /// The dead-letter record: `{"line":N,"kind":"…","reason":"…","raw":"…"}`, with
    /// `partition`, `raw_hex` (a line that is not UTF-8) and, for a refused tag, `user_id` and
    /// `tag`.
    pub fn record(&self) -> serde_json::Value {
        let mut record = json!({
            "line": self.line,
            "kind": self.reason.kind(),
            "reason": self.reason.to_string(),
            "raw": String::from_utf8_lossy(&self.raw),
        });
        if let Some(partition) = self.partition {
            record["partition"] = json!(partition);
        }
        if std::str::from_utf8(&self.raw).is_err() {
            let mut hex = String::with_capacity(self.raw.len() * 2);
            for b in &self.raw {
                let _ = write!(hex, "{b:02x}");
            }
            record["raw_hex"] = json!(hex);
        }
        if let Some((user, code)) = &self.tag {
            record["user_id"] = json!(user);
            record["tag"] = json!(code);
        }
        record
    }
}

impl DeadLetter {
    /// The dead letter of a line its source rejected.
    pub fn of_line(r: pipeline::source::Rejected<Reason>) -> Box<Self> {
        Box::new(DeadLetter {
            line: r.line,
            partition: r.partition,
            reason: r.reason,
            raw: r.raw,
            tag: None,
        })
    }
}

/// Appends dead letters to the job's dead-letter file, counting them by kind.
pub(crate) struct DeadLetterSink {
    pub(crate) side: Arc<DeadLetters>,
    pub(crate) stats: Arc<Stats>,
    pub(crate) profile: Arc<ProfileStats>,
}

impl BatchWriter<Box<DeadLetter>> for DeadLetterSink {
    type Error = sinks::Error;

    fn write(&mut self, batch: Vec<Box<DeadLetter>>) -> sinks::Result<()> {
        for d in batch {
            let future = matches!(d.reason, Reason::Future { .. });
            self.stats.count_rejected(d.reason.kind_index(), future);
            if d.tag.is_some() {
                // Lines refused whole are counted by their source.
                add(&self.stats.rejected, 1);
                add(&self.profile.tags_rejected, 1);
            }
            self.side.append_rejected(&d.record())?;
        }
        Ok(())
    }

    fn flush(&mut self) -> sinks::Result<()> {
        self.side.flush()
    }
}

/// First wait before a short-term batch (or a cache invalidation, `invalidate.rs`) is tried
/// again; it doubles up to [`MAX_BACKOFF`].
pub(super) const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// Longest wait between two attempts.
pub(super) const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// How long a batch is retried before the job fails: a Redis restart or failover takes
/// seconds; ten minutes without it is an outage for people to look at.
const RETRY_FOR: Duration = Duration::from_secs(600);

/// Most short-term values [`ShortTermSink`] holds before writing them without waiting for
/// the sink's flush: about 10 MB.
const MAX_PENDING: usize = 1 << 16;

/// Writes short-term values to their store: the values of the batches since the last flush in
/// one call ([`ShortTermStore::write_batch`]: one transaction of the SQLite file, one pipelined
/// round trip to Redis) when the sink flushes, durable (acknowledged) when `flush` returns.
/// One call per flush, not per merge batch: each SQLite commit rewrites every page it touched,
/// and values of random users touch a page each, so that a commit of a hundred values cost
/// about what one of thousands does (`perf` of a 1M-event replay: a fifth of the job's time
/// in SQLite commits and WAL checkpoints). Retriable errors
/// ([`crate::short_term::is_retriable`]) are retried with backoff, blocking the worker as the
/// table writers do; anything else fails the job.
pub(crate) struct ShortTermSink {
    /// `None` if it could not be opened (the job is failing).
    store: Option<Box<dyn ShortTermStore>>,
    profile: Arc<ProfileStats>,
    control: Arc<JobControl>,
    /// Values written to the sink and not yet to the store, in arrival order (the store keeps
    /// the newer event time of two values of one user and tag, whatever their order).
    pending: Vec<ShortTermValue>,
}

impl ShortTermSink {
    /// A sink writing to `store` (`None`: it could not be opened, and every flush fails).
    pub(crate) fn new(
        store: Option<Box<dyn ShortTermStore>>,
        profile: Arc<ProfileStats>,
        control: Arc<JobControl>,
    ) -> Self {
        ShortTermSink {
            store,
            profile,
            control,
            pending: Vec::new(),
        }
    }

    /// Writes the pending values in one call, retrying what may pass.
    fn write_pending(&mut self) -> crate::Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let Some(store) = self.store.as_mut() else {
            return Err(crate::Error::Invalid(
                "the short-term store could not be opened".into(),
            ));
        };
        let started = Instant::now();
        let mut backoff = FIRST_BACKOFF;
        loop {
            let now = pipeline::time::now_ms() / 1000;
            match store.write_batch(&self.pending, now) {
                Ok(w) => {
                    add(&self.profile.short_term_written, w.written as u64);
                    add(&self.profile.short_term_expired, w.expired as u64);
                    self.pending.clear();
                    return Ok(());
                }
                Err(e)
                    if is_retriable(&e)
                        && started.elapsed() < RETRY_FOR
                        && self.control.error().is_none() =>
                {
                    tracing::warn!(error = %e, store = %store.location(), "short-term write failed; retrying");
                    add(&self.profile.short_term_retries, 1);
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
                Err(e) => return Err(e),
            }
        }
    }
}

impl BatchWriter<ShortTermValue> for ShortTermSink {
    type Error = crate::Error;

    fn write(&mut self, mut batch: Vec<ShortTermValue>) -> crate::Result<()> {
        self.pending.append(&mut batch);
        if self.pending.len() >= MAX_PENDING {
            self.write_pending()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> crate::Result<()> {
        self.write_pending()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_tag_names_its_user_and_code() {
        let d = DeadLetter {
            line: 4,
            partition: None,
            reason: Reason::Offline("dim_old".into()),
            raw: b"{\"user_id\":\"u\"}".to_vec(),
            tag: Some(("u".into(), "dim_old".into())),
        };
        let r = d.record();
        assert_eq!(r["kind"], "offline_tag");
        assert_eq!(
            (r["user_id"].as_str(), r["tag"].as_str()),
            (Some("u"), Some("dim_old"))
        );
        assert!(r.get("raw_hex").is_none());
        let bad = DeadLetter {
            raw: b"caf\xE9".to_vec(),
            tag: None,
            partition: Some(2),
            ..d
        };
        let r = bad.record();
        assert_eq!(
            (r["raw_hex"].as_str(), r["partition"].as_i64()),
            (Some("636166e9"), Some(2))
        );
    }
}
