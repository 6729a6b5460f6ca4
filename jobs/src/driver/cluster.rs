//! The job as a timely cluster: which process this is, its peers' addresses, and the check at
//! start that every process runs the same settings.

use std::cell::RefCell;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use pipeline::config::{JobConfig, StoreKind};
use pipeline::control::JobControl;
use timely::container::CapacityContainerBuilder;
use timely::dataflow::operators::vec::Broadcast;
use timely::dataflow::operators::{Input, Inspect, Probe};
use timely::dataflow::{InputHandle, ProbeHandle};
use timely::worker::Worker;

/// Cluster flags of `hourglass run` and `hourglass replay`; they override the config's
/// `[cluster]` table.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ClusterArgs {
    /// Run as one process of a timely cluster of N processes, each with `--workers` threads;
    /// every process must be started, with the same settings [default: the config's
    /// cluster.processes, else 1].
    #[arg(long, value_name = "N")]
    pub processes: Option<usize>,
    /// This process's index in the cluster, 0 to N-1 [default: the config's cluster.process].
    #[arg(long, value_name = "I")]
    pub process: Option<usize>,
    /// File listing every process's host:port (timely's own connections), one a line in index
    /// order [default: the config's cluster.hosts or cluster.addresses].
    #[arg(long, value_name = "FILE")]
    pub hosts: Option<PathBuf>,
}

impl ClusterArgs {
    /// Applies the flags to `cfg.cluster`.
    pub fn apply(&self, cfg: &mut JobConfig) {
        if let Some(n) = self.processes {
            cfg.cluster.processes = n;
        }
        if let Some(i) = self.process {
            cfg.cluster.process = Some(i);
        }
        if let Some(path) = &self.hosts {
            cfg.cluster.hosts = Some(path.clone());
            cfg.cluster.addresses.clear();
        }
    }
}

/// Where this process stands: alone, or process `process` of `addresses.len()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cluster {
    /// This process's index.
    pub process: usize,
    /// Every process's address, in index order; empty when the job runs as one process.
    pub addresses: Vec<String>,
}

impl Cluster {
    /// One process, no network.
    pub fn single() -> Self {
        Cluster {
            process: 0,
            addresses: Vec::new(),
        }
    }

    /// The cluster `cfg` describes (after [`ClusterArgs::apply`] and `JobConfig::validate`).
    ///
    /// # Errors
    /// The process index is missing, the addresses are missing or do not match the number of
    /// processes, or the store is the embedded one.
    pub fn from_config(cfg: &JobConfig) -> Result<Self> {
        let c = &cfg.cluster;
        if c.processes <= 1 {
            return Ok(Cluster::single());
        }
        let Some(process) = c.process else {
            bail!(
                "a cluster of {} processes: give each its index with --process 0..={} (or \
                 cluster.process)",
                c.processes,
                c.processes - 1
            );
        };
        if process >= c.processes {
            bail!(
                "--process {process}: process indices run from 0 to --processes - 1 = {}",
                c.processes - 1
            );
        }
        if cfg.store.kind == StoreKind::Embedded {
            bail!(
                "the embedded store cannot be used by a cluster of {} processes: each process \
                 would write a store of its own on its own host, with only its share of the \
                 readings, and queries would see a fraction of them. Use HBase, which every \
                 process reaches (store.kind = \"hbase\" or --hbase HOST:PORT)",
                c.processes
            );
        }
        Ok(Cluster {
            process,
            addresses: c.resolve_addresses()?,
        })
    }

    /// Number of processes.
    pub fn processes(&self) -> usize {
        self.addresses.len().max(1)
    }

    /// Whether the job runs as several processes.
    pub fn is_cluster(&self) -> bool {
        self.processes() > 1
    }

    /// Workers of the whole cluster, `threads` per process: what partitions and recording
    /// lines are spread over (by the global `worker.index()`).
    pub fn peers(&self, threads: usize) -> usize {
        threads * self.processes()
    }

    /// Timely's configuration for `threads` workers in this process.
    pub fn timely_config(&self, threads: usize) -> timely::Config {
        if !self.is_cluster() {
            return timely::Config::process(threads);
        }
        timely::Config {
            communication: timely::CommunicationConfig::Cluster {
                threads,
                process: self.process,
                addresses: self.addresses.clone(),
                report: false,
                zerocopy: false,
            },
            worker: timely::WorkerConfig::default(),
        }
    }

    /// What status lines and `/metrics` name this process by: `process I` in a cluster.
    pub fn label(&self) -> Option<String> {
        self.is_cluster()
            .then(|| format!("process {}", self.process))
    }
}

/// Settings every process of a cluster must share, as `(name, value)` pairs: two processes
/// that disagree would split the input two ways, or write two layouts into one store.
pub type Settings = Vec<(String, String)>;

/// The job settings in [`Settings`] that do not depend on the source.
pub fn job_settings(cfg: &JobConfig, threads: usize, processes: usize) -> Settings {
    let w = &cfg.window;
    let mut s: Settings = vec![
        ("processes".into(), processes.to_string()),
        ("workers".into(), threads.to_string()),
        ("metric".into(), cfg.metric.clone()),
        ("key_scheme".into(), format!("{:?}", cfg.key_scheme)),
        (
            "window.watermark_bound_secs".into(),
            w.watermark_bound_secs.to_string(),
        ),
        (
            "window.allowed_lateness_secs".into(),
            w.allowed_lateness_secs.to_string(),
        ),
        (
            "window.early_fire_secs".into(),
            w.early_fire_secs.to_string(),
        ),
        (
            "window.max_pending_items".into(),
            w.max_pending_items.to_string(),
        ),
        (
            "window.max_future_skew_secs".into(),
            w.future_skew_secs().to_string(),
        ),
        (
            "room_write_interval_secs".into(),
            cfg.room_write_interval_secs.to_string(),
        ),
        ("store.kind".into(), format!("{:?}", cfg.store.kind)),
        (
            "store.hbase".into(),
            cfg.store.hbase.clone().unwrap_or_default(),
        ),
        (
            "registry_topic".into(),
            cfg.registry_topic.clone().unwrap_or_default(),
        ),
    ];
    s.sort();
    s
}

/// Exchanges every worker's `settings` over the cluster and compares them with this worker's:
/// the first setting another worker disagrees on, as an error message naming it. Every worker
/// of every process runs it (timely requires the same dataflows everywhere), and every worker
/// receives every worker's settings, so all of them fail together.
pub fn disagreement(worker: &mut Worker, settings: &Settings) -> Option<String> {
    let peers = worker.peers();
    let index = worker.index();
    let received: Rc<RefCell<Vec<(usize, Settings)>>> = Rc::default();
    let mut input = InputHandle::<u64, CapacityContainerBuilder<Vec<(usize, Settings)>>>::new();
    let probe = ProbeHandle::new();
    let sink = received.clone();
    worker.dataflow::<u64, _, _>(|scope| {
        scope
            .input_from(&mut input)
            .broadcast()
            .inspect(move |x| sink.borrow_mut().push(x.clone()))
            .probe_with(&probe);
    });
    input.send((index, settings.clone()));
    input.close();
    while !probe.done() {
        worker.step();
    }
    let received = received.borrow();
    debug_assert_eq!(received.len(), peers);
    received
        .iter()
        .find_map(|(other, theirs)| compare(settings, *other, theirs))
        .map(|e| {
            format!("process settings differ: {e}; start every process with the same settings")
        })
}

/// The first setting `theirs` (of worker `other`) differs on from `mine`, described.
fn compare(mine: &Settings, other: usize, theirs: &Settings) -> Option<String> {
    let lookup = |s: &Settings, k: &str| {
        s.iter()
            .find(|(name, _)| name == k)
            .map_or_else(|| "(unset)".to_string(), |(_, v)| v.clone())
    };
    let mut names: Vec<&String> = mine.iter().chain(theirs).map(|(k, _)| k).collect();
    names.sort();
    names.dedup();
    names.into_iter().find_map(|name| {
        let (a, b) = (lookup(mine, name), lookup(theirs, name));
        (a != b).then(|| format!("{name} is {a:?} here but {b:?} at worker {other}"))
    })
}

/// The message of a panic that means a peer process is gone (timely's network threads panic
/// when a connection drops), for the panic hook; `None` for any other panic.
pub fn lost_peer_message(info: &std::panic::PanicHookInfo<'_>) -> Option<String> {
    let text = info
        .payload()
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| info.payload().downcast_ref::<&str>().copied())
        .unwrap_or_default();
    let on_network_thread = std::thread::current()
        .name()
        .is_some_and(|n| n.starts_with("timely:send") || n.starts_with("timely:recv"));
    (on_network_thread || text.starts_with("timely communication error")).then(|| {
        format!(
            "error: lost the connection to another process of the cluster ({text}): a cluster \
             fails together, so this process stops too. `run` commits offsets only for what \
             every process has stored: restart every process (same --processes and --hosts) \
             and it resumes without loss (a replay starts over)"
        )
    })
}

/// How long a failed process of a cluster waits for its workers to finish before it exits.
const FAILED_EXIT_GRACE: Duration = Duration::from_secs(5);

/// Makes a failed process of a cluster exit instead of waiting for the others: its workers
/// cannot finish while the other processes still read, and those would read on, unaware. Its
/// exit drops their connections, so they stop too (see [`lost_peer_message`]); nothing past
/// what is durable has been committed. Dropping the guard (the job's end) stops the watch.
pub struct FailTogether {
    done: Arc<AtomicBool>,
}

impl FailTogether {
    /// Watches `control` for a failure.
    pub fn start(control: Arc<JobControl>) -> Self {
        let done = Arc::new(AtomicBool::new(false));
        let flag = done.clone();
        std::thread::Builder::new()
            .name("fail-together".into())
            .spawn(move || {
                let mut failed_at: Option<Instant> = None;
                while !flag.load(Ordering::Relaxed) {
                    if let Some(e) = control.error() {
                        let at = *failed_at.get_or_insert_with(Instant::now);
                        if at.elapsed() >= FAILED_EXIT_GRACE {
                            eprintln!(
                                "error: {e}\nerror: this process of the cluster failed and exits \
                                 now, which stops the others; restart every process once the \
                                 cause is fixed"
                            );
                            std::process::exit(1);
                        }
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            })
            .ok();
        FailTogether { done }
    }
}

impl Drop for FailTogether {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(pairs: &[(&str, &str)]) -> Settings {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn a_differing_setting_is_named() {
        let a = settings(&[("source.topic", "t"), ("window.watermark_bound_secs", "30")]);
        let b = settings(&[("source.topic", "t"), ("window.watermark_bound_secs", "60")]);
        assert_eq!(compare(&a, 1, &a), None);
        let e = compare(&a, 1, &b).unwrap();
        assert!(
            e.contains("window.watermark_bound_secs is \"30\" here but \"60\" at worker 1"),
            "{e}"
        );
        let e = compare(&a, 2, &settings(&[("source.topic", "t")])).unwrap();
        assert!(e.contains("(unset)"), "{e}");
    }

    #[test]
    fn workers_of_one_process_agree() {
        let cfg = JobConfig::default();
        let results = timely::execute(timely::Config::process(3), move |worker| {
            let mut mine = job_settings(&cfg, 3, 1);
            assert_eq!(disagreement(worker, &mine), None);
            // The second exchange: worker 2 now differs from the others.
            if worker.index() == 2 {
                mine.push(("source.topic".into(), "other".into()));
            }
            disagreement(worker, &mine)
        })
        .unwrap()
        .join();
        let errors: Vec<String> = results.into_iter().map(|r| r.unwrap().unwrap()).collect();
        assert!(
            errors[0].contains("source.topic is \"(unset)\" here but \"other\" at worker 2"),
            "{errors:?}"
        );
        assert!(
            errors[2].contains("source.topic is \"other\" here"),
            "{errors:?}"
        );
    }

    #[test]
    fn the_embedded_store_is_refused_in_a_cluster() {
        let mut cfg = JobConfig::default();
        ClusterArgs {
            processes: Some(2),
            process: Some(1),
            hosts: None,
        }
        .apply(&mut cfg);
        cfg.cluster.addresses = vec!["127.0.0.1:1".into(), "127.0.0.1:2".into()];
        let e = Cluster::from_config(&cfg).unwrap_err().to_string();
        assert!(
            e.contains("embedded store cannot be used") && e.contains("HBase"),
            "{e}"
        );
        cfg.store.kind = StoreKind::Hbase;
        cfg.store.hbase = Some("h:9090".into());
        let c = Cluster::from_config(&cfg).unwrap();
        assert_eq!((c.process, c.processes(), c.peers(3)), (1, 2, 6));
        assert_eq!(c.label().as_deref(), Some("process 1"));
        cfg.cluster.process = None;
        let e = Cluster::from_config(&cfg).unwrap_err().to_string();
        assert!(e.contains("--process"), "{e}");
    }
}
