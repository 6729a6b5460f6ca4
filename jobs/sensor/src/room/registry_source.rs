//! The device registry as a source of the room view: a file reloaded when it changes, or a
//! topic followed, emitted as changes on worker 0.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use timely::dataflow::operators::generic::operator::source;
use timely::dataflow::{ProbeHandle, StreamVec};

use crate::graph::SideOutput;
use crate::registry::{self, Registry, RegistrySource};
use crate::registry_topic::RegistryTopic;
use pipeline::control::JobControl;
use pipeline::stats::add;

use crate::stats::SensorStats;

/// A change of the registry: (device, room), +1 or -1.
type RegistryChange = ((String, String), isize);

/// How often the registry file or topic is checked for changes.
const REGISTRY_POLL: Duration = Duration::from_millis(250);
/// How often the registry topic is polled while it is being read at start.
const REGISTRY_CATCH_UP_POLL: Duration = Duration::from_millis(10);
/// Most registry topic records read in one activation.
const REGISTRY_BATCH: usize = 10_000;

/// The registry of the room view, and where its refused records go.
pub struct RegistryInput {
    /// Where the registry comes from (`None`: rooms come from the readings only).
    pub source: Option<RegistrySource>,
    /// The job's dead-letter output, for refused registry topic records.
    pub side: Arc<dyn SideOutput>,
    /// Counts refused registry topic records.
    pub stats: Arc<SensorStats>,
    /// Fails the job when the registry topic cannot be opened.
    pub control: Arc<JobControl>,
}

impl std::fmt::Debug for RegistryInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RegistryInput")
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// Where worker 0 reads the registry from, and how far it is.
enum Loader {
    File {
        path: PathBuf,
        seen_mtime: Option<SystemTime>,
    },
    Topic {
        reader: RegistryTopic,
        opened: Instant,
        next_note: Duration,
        announced: bool,
    },
}

impl Loader {
    /// Opens the source; a registry topic that cannot be read fails the job.
    fn open(source: RegistrySource, control: &JobControl) -> Option<Self> {
        match source {
            RegistrySource::File(path) => Some(Loader::File {
                path,
                seen_mtime: None,
            }),
            RegistrySource::Topic { source, topic } => match RegistryTopic::open(&source, &topic) {
                Ok(reader) => Some(Loader::Topic {
                    reader,
                    opened: Instant::now(),
                    next_note: Duration::from_secs(10),
                    announced: false,
                }),
                Err(e) => {
                    control.fail(format!("device registry: {e}"));
                    None
                }
            },
        }
    }

    /// The changes since the last call, whether the registry is complete (a topic read up to
    /// where it ended at start), and when to look again.
    fn poll(
        &mut self,
        current: &mut Registry,
        input: &RegistryInput,
    ) -> (Vec<RegistryChange>, bool, Duration) {
        match self {
            Loader::File { path, seen_mtime } => {
                let mtime = std::fs::metadata(&*path).and_then(|m| m.modified()).ok();
                let mut changes = Vec::new();
                if mtime.is_some() && mtime != *seen_mtime {
                    *seen_mtime = mtime;
                    match registry::load(path) {
                        Ok(new) => {
                            changes = registry::diff(current, &new);
                            tracing::info!(
                                changes = changes.len(),
                                devices = new.len(),
                                "device registry loaded"
                            );
                            *current = new;
                        }
                        Err(e) => tracing::warn!(
                            "device registry not reloaded, keeping the previous one: {e}"
                        ),
                    }
                }
                (changes, true, REGISTRY_POLL)
            }
            Loader::Topic {
                reader,
                opened,
                next_note,
                announced,
            } => {
                let polled = reader.poll(REGISTRY_BATCH);
                if !polled.rejected.is_empty() {
                    for r in &polled.rejected {
                        tracing::warn!(
                            topic = %r.topic,
                            partition = r.partition,
                            offset = r.offset,
                            kind = r.error.kind(),
                            "device registry record refused (dead-lettered, changes nothing): {}",
                            r.error
                        );
                        add(&input.stats.registry_rejected, 1);
                        if let Err(e) = input.side.registry_rejected(r) {
                            input.control.fail(format!("dead-letter output: {e}"));
                        }
                    }
                    // Rare, and worth seeing while the job runs.
                    if let Err(e) = input.side.flush() {
                        input.control.fail(format!("dead-letter output: {e}"));
                    }
                }
                let changes = registry::apply(current, polled.updates);
                let ready = reader.caught_up();
                if ready && !*announced {
                    *announced = true;
                    tracing::info!(
                        topic = reader.topic(),
                        devices = current.len(),
                        "device registry topic read"
                    );
                    eprintln!(
                        "device registry: read topic {} ({} devices), following it",
                        reader.topic(),
                        current.len()
                    );
                } else if !ready && opened.elapsed() >= *next_note {
                    *next_note += Duration::from_secs(10);
                    tracing::warn!(
                        topic = reader.topic(),
                        partitions_behind = reader.partitions_behind(),
                        "still reading the device registry topic; the room view waits for it"
                    );
                }
                let again = match (polled.more, ready) {
                    (true, _) => Duration::ZERO,
                    (false, false) => REGISTRY_CATCH_UP_POLL,
                    (false, true) => REGISTRY_POLL,
                };
                (changes, ready, again)
            }
        }
    }
}

/// Emits the registry's changes on worker 0 at the readings' frontier, and closes when the
/// readings close. A file is polled for changes; a topic is read without blocking at every
/// activation. Until the registry is complete (a file: at once; a topic: read up to where it
/// ended at start) the source holds its first time, so no row of the view is written before the
/// registry is known (and the durable probe, hence Kafka commits, waits too).
pub(super) fn registry_source<'scope>(
    scope: timely::dataflow::Scope<'scope, u64>,
    input: RegistryInput,
    readings_probe: ProbeHandle<u64>,
) -> StreamVec<'scope, u64, ((String, String), u64, isize)> {
    source::<_, timely::container::CapacityContainerBuilder<Vec<_>>, _, _>(
        scope,
        "DeviceRegistry",
        move |cap, info| {
            let activator = scope.activator_for(info.address);
            let mut loader = match (scope.index(), input.source.clone()) {
                (0, Some(source)) => Loader::open(source, &input.control),
                _ => None,
            };
            let mut cap = loader.is_some().then_some(cap);
            let mut current = Registry::new();
            move |output| {
                let (Some(c), Some(loader)) = (cap.as_mut(), loader.as_mut()) else {
                    return;
                };
                let (changes, complete, again) = loader.poll(&mut current, &input);
                if !changes.is_empty() {
                    let time = *c.time();
                    output
                        .session(c)
                        .give_iterator(changes.into_iter().map(|(d, r)| (d, time, r)));
                }
                let frontier = readings_probe.with_frontier(|f| f.first().copied());
                match frontier {
                    // An incomplete registry is still read to its end after the readings close
                    // (a short replay), unless the job is stopping.
                    None if complete || input.control.stopped() => {
                        cap = None;
                        return;
                    }
                    Some(f) if complete && f > *c.time() => c.downgrade(&f),
                    _ => {}
                }
                if again.is_zero() {
                    activator.activate();
                } else {
                    activator.activate_after(again);
                }
            }
        },
    )
}
