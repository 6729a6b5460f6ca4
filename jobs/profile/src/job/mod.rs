//! The profile job on the engine's driver: tag events → per-user merge → `user_profile_tag`,
//! `user_tag_history` and the short-term store.
//!
//! ```text
//! feed ─ event_source ─ ok_err_in_order ─┬─ events ─ exchange_in_order (user) ─ merge_users ─┬─ puts ─ write_batches (tables) ─────┬─ probe
//!                                        │                                                  │  (index entries added first, job/index.rs; then invalidates the users' cache entries)
//!                                        │                                                  ├─ short-term ─ write_batches (store) ┤
//!                                        │                                                  └─ refused tags ─┐                    │
//!                                        └─ rejected lines ──────────────────────────────────────────────────┴─ write_batches (dead letters)
//! ```
//!
//! Every operator from the source to the writers keeps arrival order (`operators::InOrder`).
//! The merge emits a flush at the least time it buffered and holds its capability until then,
//! and each sink's frontier passes a time only once what it got before it is durable (the
//! table writer flushed, the short-term batch acknowledged, the dead letters written): the
//! probe over the three passes a time only when all are, and a Kafka feed commits what it
//! passed.

mod decoder;
mod flush;
mod index;
mod invalidate;
mod source;
mod stats;
mod writers;

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use operators::{bounded_event_source, EventFeed, FlushPace, InFlight, InOrder, WriteBatches};
use pipeline::driver::{CountingWriter, Dataflow, Pace, Settings, WorkerParts};
use pipeline::source::Decoded;
use timely::dataflow::operators::{Concat, Probe};
use timely::dataflow::{ProbeHandle, Scope};

pub use decoder::{user_hint, ProfileDecoder, ProfileEvent};
pub use source::{replay_options, topic_options};
pub use stats::{EventCounters, ProfileCounters, ProfileReport, ProfileStats};
pub use writers::DeadLetter;

use crate::config::ProfileConfig;
use crate::event::{EventLimits, Reason};
use crate::merge::{MergeConfig, UserMerge};
use crate::registry::RegistryUrl;
use crate::Result;
use flush::{merge_users, FlushTimes, UserBuffer};
use index::IndexingWriter;
use invalidate::InvalidatingWriter;
use writers::{DeadLetterSink, ShortTermSink};

/// Events a worker's source may have read and not yet delivered through the exchange by user
/// (see [`operators::bounded_event_source`]): a decoded event with its raw line is about 1 KB,
/// so about 64 MB per reading worker.
pub const MAX_IN_FLIGHT: usize = 1 << 16;

/// What a source of the profile job emits: an event, or a rejected line.
pub type Item = Decoded<ProfileEvent, Reason>;

/// Checks that the registry of `cfg` can be read and defines tags, before any worker starts.
///
/// # Errors
/// The registry cannot be opened or read; [`crate::Error::Invalid`] when it defines no tag
/// (every tag would be refused).
pub fn check_registry(cfg: &ProfileConfig) -> Result<()> {
    let mut registry = crate::registry::open(&cfg.registry.url)?;
    if registry.list()?.is_empty() {
        return Err(crate::Error::Invalid(format!(
            "the tag registry {} defines no tag: every tag would be refused; import the \
             definitions first (`hourglass tags import FILE`)",
            registry.location()
        )));
    }
    Ok(())
}

/// Creates the embedded short-term store's file (without `[redis]`) before any worker opens
/// it: two workers setting up a new SQLite file at once (WAL mode, the schema) could fail with
/// "database is locked" (seen once in 25 replays with 2 workers), where opening a file already
/// set up only reads its schema.
///
/// # Errors
/// The file cannot be created or opened as a database.
pub fn prepare_short_term(cfg: &ProfileConfig) -> Result<()> {
    if cfg.redis_url().is_none() {
        crate::short_term::SqliteStore::open(&cfg.short_term.path)?;
    }
    Ok(())
}

/// The profile job: its configuration, as each worker's dataflow needs it.
#[derive(Debug)]
pub struct ProfileJob {
    registry: RegistryUrl,
    redis_url: Option<String>,
    /// The cache to invalidate after each table flush (`[redis]` with `[cache] enabled`), and
    /// its entries' TTL.
    cache: Option<(String, u64)>,
    short_term_path: PathBuf,
    merge: MergeConfig,
    limits: EventLimits,
    gray: Arc<HashSet<String>>,
    pace: Pace,
    profile: Arc<ProfileStats>,
    /// The store's reader, for the index's read before write (`None`: no index), and the
    /// bytes of users' values each worker remembers.
    index: Option<(sinks::Reader, u64)>,
}

impl ProfileJob {
    /// The job `cfg` describes, paced as its source asks, counting into `profile`.
    ///
    /// # Errors
    /// [`crate::Error::Url`]: the registry URL is not one.
    pub fn new(cfg: &ProfileConfig, pace: Pace, profile: Arc<ProfileStats>) -> Result<Self> {
        Ok(ProfileJob {
            registry: RegistryUrl::parse(&cfg.registry.url)?,
            redis_url: cfg.redis_url().map(str::to_string),
            cache: cfg
                .redis_url()
                .filter(|_| cfg.cache.enabled)
                .map(|url| (url.to_string(), cfg.cache.ttl_secs)),
            short_term_path: cfg.short_term.path.clone(),
            merge: cfg.merge,
            limits: cfg.limits,
            gray: Arc::new(cfg.gray.test_users.clone()),
            pace,
            profile,
            index: None,
        })
    }

    /// The job maintaining `user_tag_index` (`[index] enabled`), reading the stored rows it
    /// replaces through `reader`, a reader of the store the job writes, each worker
    /// remembering up to `cache_bytes` of the users' values (`[index] cache_mib`).
    pub fn with_index(mut self, reader: sinks::Reader, cache_bytes: u64) -> Self {
        self.index = Some((reader, cache_bytes));
        self
    }

    /// Where the short-term tags go, for messages.
    pub fn short_term_location(&self) -> String {
        match &self.redis_url {
            Some(url) => crate::registry::redact(url),
            None => self.short_term_path.display().to_string(),
        }
    }
}

impl Dataflow for ProfileJob {
    type Item = Item;

    fn settings(&self) -> Settings {
        let mut gray: Vec<&String> = self.gray.iter().collect();
        gray.sort();
        vec![
            ("profile.registry".into(), self.registry.to_string()),
            ("profile.short_term".into(), self.short_term_location()),
            ("profile.merge".into(), format!("{:?}", self.merge)),
            ("profile.limits".into(), format!("{:?}", self.limits)),
            ("profile.gray".into(), format!("{gray:?}")),
            ("profile.index".into(), self.index.is_some().to_string()),
        ]
    }

    fn build<F>(&self, scope: Scope<'_, u64>, worker: WorkerParts<'_, F>)
    where
        F: EventFeed<Item = Item> + 'static,
    {
        let WorkerParts {
            feed,
            writer,
            side,
            stats,
            control,
            probe,
        } = worker;
        let pace = FlushPace {
            every: self.pace.flush_every,
            min_gap: self.pace.flush_min_gap,
        };
        let exchanged = ProbeHandle::new();
        let in_flight = InFlight {
            probe: exchanged.clone(),
            max_items: MAX_IN_FLIGHT,
        };
        let decoded = bounded_event_source(scope, "ReadTagEvents", feed, 1024, Some(in_flight));
        let (events, rejected) = decoded.ok_err_in_order(|item: Item| item);
        let events = events
            .exchange_in_order(|e: &ProfileEvent| operators::key_hash(&e.user_id))
            .probe_with(&exchanged);

        // Each worker its own connections: the registry's, checked at each flush, and the
        // short-term store's. A failure fails the job; the dataflow is built all the same, as
        // every worker must build the same one.
        let registry = self
            .registry
            .open()
            .map_err(|e| control.fail(format!("opening the tag registry {}: {e}", self.registry)))
            .ok();
        let short_term = crate::short_term::open(self.redis_url.as_deref(), &self.short_term_path)
            .map_err(|e| {
                control.fail(format!(
                    "opening the short-term store {}: {e}",
                    self.short_term_location()
                ))
            })
            .ok();
        let buffer = UserBuffer::new(
            UserMerge::new(self.merge),
            self.registry.clone(),
            registry,
            self.gray.clone(),
            self.limits,
            self.profile.clone(),
            control.clone(),
        );
        let times = FlushTimes {
            interval: Duration::from_millis(self.merge.flush_interval_ms),
            min_gap: pace.min_gap,
        };
        let (puts, short, refused) = merge_users(events, buffer, times);

        let fail = |what: &'static str| {
            let control = control.clone();
            move |e: String| control.fail(format!("{what}: {e}"))
        };
        let on_dead = fail("dead-letter output");
        rejected
            .map_in_order(|r| DeadLetter::of_line(*r))
            .concat(refused)
            .write_batches(
                "DeadLetters",
                DeadLetterSink {
                    side,
                    stats: stats.clone(),
                    profile: self.profile.clone(),
                },
                pace,
                move |e: sinks::Error| on_dead(e.to_string()),
            )
            .probe_with(probe);
        let on_tables = fail("writing tables failed");
        let invalidator = self.cache.as_ref().and_then(|(url, _)| {
            crate::cache::Invalidator::new(url)
                .map_err(|e| control.fail(format!("opening the profile cache {url}: {e}")))
                .ok()
        });
        // Under the counting writer: the index's entries are not counted as the job's writes.
        let indexing = IndexingWriter::new(
            writer,
            self.index.as_ref().map(|(reader, _)| reader.clone()),
            self.registry.clone(),
            self.index.as_ref().map_or(0, |(_, bytes)| *bytes),
            control.clone(),
        );
        let tables = InvalidatingWriter::new(
            CountingWriter::new(Box::new(indexing), stats),
            invalidator,
            self.cache.as_ref().map_or(0, |(_, ttl)| *ttl),
            self.profile.clone(),
            control.clone(),
        );
        puts.write_batches("WriteTables", tables, pace, move |e: sinks::Error| {
            on_tables(e.to_string())
        })
        .probe_with(probe);
        let on_short = fail("writing short-term tags failed");
        short
            .write_batches(
                "WriteShortTerm",
                ShortTermSink::new(short_term, self.profile.clone(), control),
                pace,
                move |e: crate::Error| on_short(e.to_string()),
            )
            .probe_with(probe);
    }
}
