//! Committing a worker's offsets once the tables hold what they cover, and resuming from what
//! the previous run committed.
//!
//! # Commits
//! Each reading is emitted at timely time = the watermark before it arrived. The feed records,
//! per emission time, the next offset of each partition; the graph's probe passes `t` only once
//! every reading emitted before `t` is durable in both tables (narrow row and wide cell). A
//! partition is committed up to what is durable, but never past the first reading of an hour
//! that is not final yet (the probe has not passed its end plus the allowed lateness): the
//! window computes each hour's summary cells from the whole hour, so a restarted job must re-read
//! every reading of the hours it may still change. Offsets thus trail the stream by up to one
//! hour plus the allowed lateness of event time; re-reading is harmless (idempotent puts),
//! except for hours the previous run had already closed: the commit's metadata also holds the
//! durable frontier and offset, so that a restart keeps those hours closed (see `CommitMeta`).
//! A job without a window (the profile job) has no hours to re-read: its partitions are
//! committed up to what is durable. Commits are synchronous, every `commit_interval_ms`; after the dataflow has drained,
//! [`OffsetCommitter::finish`] commits the rest. A feed that is told to stop (SIGTERM, idle)
//! first holds its watermark until the durable frontier reaches it, so that final commit also
//! passes the hours the watermark made final. Nothing is committed once the job has failed.

use std::cell::{RefCell, RefMut};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};
use timely::dataflow::ProbeHandle;

use super::client::kafka_error;
use super::ledger::OffsetLedger;
use super::metadata::KafkaShared;
use super::retry::{retrying, BROKER_TIMEOUT};
use crate::config::SourceConfig;
use crate::control::JobControl;
use crate::Result;

/// Commits a worker's durable offsets. Shared by its feed (periodic commits) and the worker
/// (the final commit once the dataflow drained).
#[derive(Clone)]
pub struct OffsetCommitter {
    inner: Rc<CommitterInner>,
}

struct CommitterInner {
    consumer: BaseConsumer,
    source: SourceConfig,
    /// Global partition number of each local partition.
    partitions: Vec<i32>,
    ledger: RefCell<OffsetLedger>,
    probe: ProbeHandle<u64>,
    control: Arc<JobControl>,
    shared: Arc<KafkaShared>,
}

impl std::fmt::Debug for OffsetCommitter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OffsetCommitter")
            .field("partitions", &self.inner.partitions)
            .finish_non_exhaustive()
    }
}

impl OffsetCommitter {
    /// The committer of `partitions` (global numbers, in local order) read by `consumer`.
    pub(super) fn new(
        consumer: BaseConsumer,
        source: SourceConfig,
        partitions: Vec<i32>,
        ledger: OffsetLedger,
        probe: ProbeHandle<u64>,
        control: Arc<JobControl>,
        shared: Arc<KafkaShared>,
    ) -> Self {
        OffsetCommitter {
            inner: Rc::new(CommitterInner {
                consumer,
                source,
                partitions,
                ledger: RefCell::new(ledger),
                probe,
                control,
                shared,
            }),
        }
    }

    /// Assigns `partitions` (global numbers) to `consumer`, each at its committed offset in the
    /// job's group (or `auto.offset.reset`, default earliest, when it has none), and returns
    /// their committer with, per partition, the offset and metadata the previous run committed.
    /// `probe` is the probe the graph reports durability to.
    ///
    /// # Errors
    /// The brokers did not answer for committed offsets, or the assignment failed.
    pub(super) fn assign(
        consumer: BaseConsumer,
        source: &SourceConfig,
        partitions: Vec<i32>,
        window: Option<operators::WindowSpec>,
        probe: ProbeHandle<u64>,
        control: Arc<JobControl>,
        shared: Arc<KafkaShared>,
    ) -> Result<(Self, Vec<Option<Committed>>)> {
        let mut ledger = OffsetLedger::new(partitions.len(), window);
        let mut resumed = vec![None; partitions.len()];
        if !partitions.is_empty() {
            let mut wanted = TopicPartitionList::new();
            for &p in &partitions {
                wanted.add_partition(&source.topic, p);
            }
            let committed = committed_offsets(&consumer, &wanted, source, &control)?;
            let mut assign = TopicPartitionList::new();
            for (local, &partition) in partitions.iter().enumerate() {
                let elem = committed.find_partition(&source.topic, partition);
                let start = match elem.as_ref().map(|e| e.offset()) {
                    Some(Offset::Offset(o)) if o >= 0 => {
                        ledger.committed[local] = Some(o);
                        shared.committed[partition as usize].store(o, Ordering::Relaxed);
                        shared.positions[partition as usize].store(o, Ordering::Relaxed);
                        let meta = elem
                            .as_ref()
                            .map(|e| CommitMeta::parse(e.metadata()))
                            .unwrap_or_default();
                        ledger.resumed_frontier[local] = meta.frontier.unwrap_or(0);
                        resumed[local] = Some((o, meta));
                        Offset::Offset(o)
                    }
                    _ => Offset::Stored,
                };
                assign
                    .add_partition_offset(&source.topic, partition, start)
                    .map_err(|e| kafka_error(source, e.to_string()))?;
            }
            consumer
                .assign(&assign)
                .map_err(|e| kafka_error(source, format!("assigning partitions: {e}")))?;
        }
        let committer = OffsetCommitter::new(
            consumer,
            source.clone(),
            partitions,
            ledger,
            probe,
            control,
            shared,
        );
        Ok((committer, resumed))
    }

    /// The consumer the feed reads with (the one that commits).
    pub(super) fn consumer(&self) -> &BaseConsumer {
        &self.inner.consumer
    }

    /// The ledger of what may be committed, for the feed to record what it reads.
    pub(super) fn ledger(&self) -> RefMut<'_, OffsetLedger> {
        self.inner.ledger.borrow_mut()
    }

    /// The durable frontier: the probe's (`None` once the dataflow has drained).
    pub(super) fn durable_frontier(&self) -> Option<u64> {
        self.inner.probe.with_frontier(|f| f.first().copied())
    }

    /// Commits, synchronously, every partition up to its durable readings but not past the
    /// first reading of an hour that is not final (see the module docs). Returns how many
    /// partitions were committed. Commits nothing once the job has failed.
    ///
    /// # Errors
    /// The commit request failed (the offsets stay pending and are retried next time).
    pub fn commit_durable(&self) -> Result<usize> {
        let inner = &self.inner;
        // Read the probe before the error flag: a failed sink records its error before it
        // lets its frontier advance.
        let frontier = self.durable_frontier();
        self.ledger().advance(frontier);
        tracing::trace!(?frontier, "durable frontier");
        if inner.control.error().is_some() {
            return Ok(0);
        }
        let ready = inner.ledger.borrow().to_commit();
        if ready.is_empty() {
            return Ok(0);
        }
        let mut tpl = TopicPartitionList::with_capacity(ready.len());
        for &(local, (next, newest), durable, frontier) in &ready {
            let mut elem = tpl.add_partition(&inner.source.topic, inner.partitions[local]);
            elem.set_offset(Offset::Offset(next))
                .map_err(|e| kafka_error(&inner.source, e.to_string()))?;
            let meta = CommitMeta {
                newest,
                frontier: Some(frontier),
                durable: Some(durable),
            };
            elem.set_metadata(meta.to_string());
        }
        inner
            .consumer
            .commit(&tpl, CommitMode::Sync)
            .map_err(|e| kafka_error(&inner.source, format!("offset commit failed: {e}")))?;
        let mut ledger = inner.ledger.borrow_mut();
        for &(local, (next, _), _, _) in &ready {
            ledger.committed[local] = Some(next);
            inner.shared.committed[inner.partitions[local] as usize].store(next, Ordering::Relaxed);
        }
        inner.shared.commits.fetch_add(1, Ordering::Relaxed);
        tracing::debug!(
            partitions = ready.len(),
            "committed offsets of durable readings"
        );
        Ok(ready.len())
    }

    /// The final commit, once the worker's dataflow has drained (its probe is empty).
    ///
    /// # Errors
    /// As [`OffsetCommitter::commit_durable`].
    /// A failed commit is tried again for up to `FINAL_COMMIT_RETRY_FOR` (30 s: a group
    /// coordinator that is moving answers `NotCoordinator` for a while).
    pub fn finish(&self) -> Result<()> {
        retrying(
            "the final offset commit",
            FINAL_COMMIT_RETRY_FOR,
            || false,
            || self.commit_durable(),
        )
        .map(|_| ())
    }
}

/// What the previous run committed for a partition: the offset, and the metadata stored with it.
pub(super) type Committed = (i64, CommitMeta);

/// What hourglass stores with a committed offset, as `max_ts=<s>;frontier=<s>;durable=<offset>`
/// (older commits hold only `max_ts`).
///
/// The committed offset trails what is durable: it stops at the first reading of an hour that
/// is not final yet, so a restart rebuilds that hour's window whole. Records between it and
/// `durable` were read and stored by the previous run, and among them may be readings of hours
/// that the previous run had already closed (the frontier passed their end plus the allowed
/// lateness). A restarted run must not open those hours again, or it would rewrite their summary
/// cells from the few readings it re-reads. So it starts its watermark at `frontier` (hours
/// final then stay final) and skips the re-read readings of final hours before `durable`
/// (their narrow rows and wide cells are durable already); readings after `durable` of a final
/// hour are late, as they were for the previous run. Rejected records before `durable` are
/// skipped too: their dead letters are flushed (the side outputs report to the durable probe),
/// so a restart does not write them again.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct CommitMeta {
    /// The partition's newest event time before the committed offset.
    pub(super) newest: Option<i64>,
    /// The durable frontier (watermark, seconds) when committing, or the frontier the partition
    /// resumed from if that is newer: hours closed once stay closed through any number of
    /// restarts (see `OffsetLedger::to_commit`).
    pub(super) frontier: Option<u64>,
    /// The next offset after everything durable in the partition.
    pub(super) durable: Option<i64>,
}

impl CommitMeta {
    pub(super) fn parse(metadata: &str) -> Self {
        let mut meta = CommitMeta::default();
        for field in metadata.split(';') {
            match field.split_once('=') {
                Some(("max_ts", v)) => meta.newest = v.parse().ok(),
                Some(("frontier", v)) => meta.frontier = v.parse().ok(),
                Some(("durable", v)) => meta.durable = v.parse().ok(),
                _ => {}
            }
        }
        meta
    }
}

impl std::fmt::Display for CommitMeta {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut sep = "";
        for (name, value) in [
            ("max_ts", self.newest.map(|v| v.to_string())),
            ("frontier", self.frontier.map(|v| v.to_string())),
            ("durable", self.durable.map(|v| v.to_string())),
        ] {
            if let Some(v) = value {
                write!(f, "{sep}{name}={v}")?;
                sep = ";";
            }
        }
        Ok(())
    }
}

/// How long the final offset commit is tried again after errors.
const FINAL_COMMIT_RETRY_FOR: Duration = Duration::from_secs(30);

/// How long a worker keeps asking for its group's committed offsets while the brokers answer
/// with errors (a group coordinator that is moving or still loading answers `NotCoordinator`
/// or `CoordinatorLoadInProgress` for a while).
const COMMITTED_RETRY_FOR: Duration = Duration::from_secs(120);

/// The committed offsets of `wanted` in the job's group, asked again (with a warning) while the
/// brokers answer with errors, for up to [`COMMITTED_RETRY_FOR`] or until the job stops.
fn committed_offsets(
    consumer: &BaseConsumer,
    wanted: &TopicPartitionList,
    source: &SourceConfig,
    control: &JobControl,
) -> Result<TopicPartitionList> {
    let what = format!("reading the committed offsets of group {}", source.group_id);
    let started = Instant::now();
    retrying(
        &what,
        COMMITTED_RETRY_FOR,
        || control.stopped(),
        || consumer.committed_offsets(wanted.clone(), BROKER_TIMEOUT),
    )
    .map_err(|e| {
        kafka_error(
            source,
            format!("{what} (for {}s): {e}", started.elapsed().as_secs()),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_round_trips() {
        let meta = CommitMeta {
            newest: Some(1724101200),
            frontier: Some(1724101170),
            durable: Some(42),
        };
        assert_eq!(
            meta.to_string(),
            "max_ts=1724101200;frontier=1724101170;durable=42"
        );
        assert_eq!(CommitMeta::parse(&meta.to_string()), meta);
        // What earlier versions committed, and what others may have.
        let old = CommitMeta::parse("max_ts=1724101200");
        assert_eq!(
            (old.newest, old.frontier, old.durable),
            (Some(1724101200), None, None)
        );
        assert_eq!(CommitMeta::parse(""), CommitMeta::default());
        assert_eq!(CommitMeta::parse("something else"), CommitMeta::default());
        let partial = CommitMeta {
            frontier: Some(7),
            ..CommitMeta::default()
        };
        assert_eq!(partial.to_string(), "frontier=7");
    }
}
