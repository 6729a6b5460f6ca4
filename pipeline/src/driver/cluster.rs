//! The job as a timely cluster: which process this is, its peers' addresses, the connection
//! phase with its deadline, and the check at start that every process runs the same settings.

use std::cell::RefCell;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use timely::communication::allocator::zero_copy::initialize::initialize_networking_from_sockets;
use timely::communication::allocator::{AllocatorBuilder, ProcessBuilder};
use timely::communication::{Hooks, WorkerGuards};
use timely::container::CapacityContainerBuilder;
use timely::dataflow::operators::vec::Broadcast;
use timely::dataflow::operators::{Input, Inspect, Probe};
use timely::dataflow::{InputHandle, ProbeHandle};
use timely::worker::Worker;

use crate::config::{ClusterConfig, StoreConfig, StoreKind, WindowConfig};
use crate::control::JobControl;
use crate::{Context, Error, Result};

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
    /// How long the processes may take to connect to each other at start (`30s`, `2m`; whole
    /// seconds, rounded up); past it every process still waiting stops with an error naming
    /// the processes it misses [default: the config's cluster.connect_timeout_secs, 60 s].
    #[arg(long, value_name = "DURATION", value_parser = crate::time::parse_duration)]
    pub connect_timeout: Option<Duration>,
}

impl ClusterArgs {
    /// Applies the flags to a config's `[cluster]`.
    pub fn apply(&self, cluster: &mut ClusterConfig) {
        if let Some(n) = self.processes {
            cluster.processes = n;
        }
        if let Some(i) = self.process {
            cluster.process = Some(i);
        }
        if let Some(path) = &self.hosts {
            cluster.hosts = Some(path.clone());
            cluster.addresses.clear();
        }
        if let Some(timeout) = self.connect_timeout {
            cluster.connect_timeout_secs =
                timeout.as_secs() + u64::from(timeout.subsec_nanos() > 0);
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
    /// How long [`Cluster::execute`] waits for the other processes to connect.
    pub connect_timeout: Duration,
}

impl Cluster {
    /// One process, no network.
    pub fn single() -> Self {
        Cluster {
            process: 0,
            addresses: Vec::new(),
            connect_timeout: Duration::ZERO,
        }
    }

    /// The cluster a config's `[cluster]` describes (after [`ClusterArgs::apply`] and
    /// [`ClusterConfig::validate`]), for a job storing into `store`.
    ///
    /// # Errors
    /// The process index is missing, the addresses are missing or do not match the number of
    /// processes, or the store is the embedded one.
    pub fn from_config(c: &ClusterConfig, store: &StoreConfig) -> Result<Self> {
        if c.processes <= 1 {
            return Ok(Cluster::single());
        }
        let Some(process) = c.process else {
            return Err(Error::Failed(format!(
                "a cluster of {} processes: give each its index with --process 0..={} (or \
                 cluster.process)",
                c.processes,
                c.processes - 1
            )));
        };
        if process >= c.processes {
            return Err(Error::Failed(format!(
                "--process {process}: process indices run from 0 to --processes - 1 = {}",
                c.processes - 1
            )));
        }
        if store.kind == StoreKind::Embedded {
            return Err(Error::Failed(format!(
                "the embedded store cannot be used by a cluster of {} processes: each process \
                 would write a store of its own on its own host, with only its share of the \
                 readings, and queries would see a fraction of them. Use HBase, which every \
                 process reaches (store.kind = \"hbase\" or --hbase HOST:PORT)",
                c.processes
            )));
        }
        Ok(Cluster {
            process,
            addresses: c.resolve_addresses()?,
            connect_timeout: Duration::from_secs(c.connect_timeout_secs),
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

    /// Starts `threads` timely workers running `func`: in one process, or, in a cluster, once
    /// this process is connected to every other ([`connect_peers`], within
    /// `connect_timeout`), over those connections.
    ///
    /// # Errors
    /// A process that did not connect in time, named with its address; timely's refusal.
    pub fn execute<T, F>(&self, threads: usize, func: F) -> Result<WorkerGuards<T>>
    where
        T: Send + 'static,
        F: Fn(&mut Worker) -> T + Send + Sync + 'static,
    {
        let started = |e: String| Error::Failed(format!("starting timely workers failed: {e}"));
        if !self.is_cluster() {
            return timely::execute(timely::Config::process(threads), func).map_err(started);
        }
        let sockets = connect_peers(&self.addresses, self.process, self.connect_timeout)?;
        // What timely's `CommunicationConfig::Cluster` builds, from our sockets: its own
        // connection loops retry forever.
        let hooks = Hooks::default();
        let local =
            ProcessBuilder::new_typed_vector(threads, hooks.refill.clone(), hooks.spill.clone());
        let (builders, guard) =
            initialize_networking_from_sockets(local, sockets, self.process, threads, hooks)
                .context("starting timely's network threads")?;
        timely::execute::execute_from(
            builders.into_iter().map(AllocatorBuilder::Tcp).collect(),
            Box::new(guard),
            timely::WorkerConfig::default(),
            func,
        )
        .map_err(started)
    }

    /// What status lines and `/metrics` name this process by: `process I` in a cluster.
    pub fn label(&self) -> Option<String> {
        self.is_cluster()
            .then(|| format!("process {}", self.process))
    }
}

/// How long one connection attempt to a peer, or one peer's greeting, may take.
const CONNECT_ATTEMPT: Duration = Duration::from_secs(1);
/// Pause between two rounds of connection attempts.
const CONNECT_RETRY: Duration = Duration::from_millis(200);

/// Connects this process (`me`) to every other process of `addresses` as timely's own
/// connection phase does: it listens on its own address, connects to each process of a lower
/// index and greets it with its index (a big-endian `u64`), and accepts the processes of a
/// higher index, which greet it likewise. Returns a socket per process in index order, `None`
/// at `me`, for `initialize_networking_from_sockets`.
///
/// Timely's loops retry forever, so a process whose peer never starts would wait forever;
/// this gives up at `timeout`. A connection that does not greet with a valid index (a port
/// scan, a health check) is closed and ignored.
///
/// # Errors
/// The own address cannot be listened on; `timeout` passed with processes missing: the message
/// names each by index and address, and what was seen of it.
pub fn connect_peers(
    addresses: &[String],
    me: usize,
    timeout: Duration,
) -> Result<Vec<Option<TcpStream>>> {
    let deadline = Instant::now() + timeout;
    let listeners = addresses[me]
        .split_whitespace()
        .map(|addr| {
            let listener = TcpListener::bind(addr).with_context(|| {
                format!("process {me} cannot listen on its address {addr} for the cluster")
            })?;
            listener.set_nonblocking(true)?;
            Ok(listener)
        })
        .collect::<Result<Vec<_>>>()?;
    let n = addresses.len();
    let mut sockets: Vec<Option<TcpStream>> = (0..n).map(|_| None).collect();
    let mut last_error: Vec<Option<String>> = vec![None; n];
    loop {
        for peer in 0..me {
            if sockets[peer].is_none() {
                match connect_once(&addresses[peer], me, deadline) {
                    Ok(stream) => sockets[peer] = Some(stream),
                    Err(e) => last_error[peer] = Some(e.to_string()),
                }
            }
        }
        for listener in &listeners {
            loop {
                match listener.accept() {
                    Ok((stream, from)) => {
                        match greeting(stream, me, n) {
                            Ok((peer, stream)) if sockets[peer].is_none() => {
                                sockets[peer] = Some(stream);
                            }
                            Ok((peer, _)) => {
                                eprintln!("cluster: a second connection from process {peer} ({from}) ignored");
                            }
                            Err(e) => eprintln!("cluster: a connection from {from} ignored: {e}"),
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) => return Err(e).context("accepting the other processes' connections"),
                }
            }
        }
        let missing: Vec<usize> = (0..n)
            .filter(|&p| p != me && sockets[p].is_none())
            .collect();
        if missing.is_empty() {
            return Ok(sockets);
        }
        let now = Instant::now();
        if now >= deadline {
            return Err(Error::Failed(timeout_message(
                addresses,
                me,
                timeout,
                &missing,
                &last_error,
            )));
        }
        std::thread::sleep(CONNECT_RETRY.min(deadline - now));
    }
}

/// One attempt to connect to the process at `addr` and greet it as process `me`.
fn connect_once(addr: &str, me: usize, deadline: Instant) -> std::io::Result<TcpStream> {
    let mut last = None;
    for sock in addr.to_socket_addrs()? {
        let wait = deadline
            .saturating_duration_since(Instant::now())
            .clamp(Duration::from_millis(1), CONNECT_ATTEMPT);
        match TcpStream::connect_timeout(&sock, wait) {
            Ok(mut stream) => {
                stream.set_nodelay(true)?;
                stream.write_all(&(me as u64).to_be_bytes())?;
                return Ok(stream);
            }
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| std::io::Error::other(format!("{addr} resolves to no address"))))
}

/// The index a connecting process greets with, checked to be one of the processes above `me`.
fn greeting(mut stream: TcpStream, me: usize, n: usize) -> std::io::Result<(usize, TcpStream)> {
    stream.set_nonblocking(false)?;
    stream.set_read_timeout(Some(CONNECT_ATTEMPT))?;
    let mut index = [0u8; 8];
    stream.read_exact(&mut index)?;
    let peer = u64::from_be_bytes(index);
    match usize::try_from(peer) {
        Ok(peer) if peer > me && peer < n => {
            stream.set_read_timeout(None)?;
            stream.set_nodelay(true)?;
            Ok((peer, stream))
        }
        _ => Err(std::io::Error::other(format!(
            "it greeted as process {peer}, not one of {}..{n}",
            me + 1
        ))),
    }
}

/// The error of a connection phase that timed out with `missing` processes.
fn timeout_message(
    addresses: &[String],
    me: usize,
    timeout: Duration,
    missing: &[usize],
    last_error: &[Option<String>],
) -> String {
    let each: Vec<String> = missing
        .iter()
        .map(|&p| {
            if p < me {
                format!(
                    "process {p} at {} could not be reached ({})",
                    addresses[p],
                    last_error[p].as_deref().unwrap_or("no attempt finished")
                )
            } else {
                format!(
                    "process {p} at {} never connected to this one",
                    addresses[p]
                )
            }
        })
        .collect();
    format!(
        "the cluster did not connect within {}s: {}. This is process {me} of {}, listening on \
         {}. Start every process, with the same --processes and --hosts, within the timeout \
         (--connect-timeout or cluster.connect_timeout_secs)",
        timeout.as_secs_f64(),
        each.join("; "),
        addresses.len(),
        addresses[me]
    )
}

/// Settings every process of a cluster must share, as `(name, value)` pairs: two processes
/// that disagree would split the input two ways, or write two layouts into one store.
pub type Settings = Vec<(String, String)>;

/// The engine's settings in [`Settings`], sorted: the cluster's shape, the event-time window
/// and the store; a job adds its own ([`super::Dataflow::settings`]) and a source its own.
pub fn job_settings(
    w: &WindowConfig,
    store: &StoreConfig,
    threads: usize,
    processes: usize,
) -> Settings {
    let mut s: Settings = vec![
        ("processes".into(), processes.to_string()),
        ("workers".into(), threads.to_string()),
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
        ("store.kind".into(), format!("{:?}", store.kind)),
        (
            "store.hbase".into(),
            store.hbase.clone().unwrap_or_default(),
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
        let results = timely::execute(timely::Config::process(3), move |worker| {
            let mut mine = job_settings(&WindowConfig::default(), &StoreConfig::default(), 3, 1);
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
        let mut cfg = crate::config::ClusterConfig::default();
        let mut store = StoreConfig::default();
        ClusterArgs {
            processes: Some(2),
            process: Some(1),
            hosts: None,
            connect_timeout: Some(Duration::from_millis(1500)),
        }
        .apply(&mut cfg);
        assert_eq!(cfg.connect_timeout_secs, 2);
        cfg.addresses = vec!["127.0.0.1:1".into(), "127.0.0.1:2".into()];
        let e = Cluster::from_config(&cfg, &store).unwrap_err().to_string();
        assert!(
            e.contains("embedded store cannot be used") && e.contains("HBase"),
            "{e}"
        );
        store.kind = StoreKind::Hbase;
        store.hbase = Some("h:9090".into());
        let c = Cluster::from_config(&cfg, &store).unwrap();
        assert_eq!((c.process, c.processes(), c.peers(3)), (1, 2, 6));
        assert_eq!(c.connect_timeout, Duration::from_secs(2));
        assert_eq!(c.label().as_deref(), Some("process 1"));
        cfg.process = None;
        let e = Cluster::from_config(&cfg, &store).unwrap_err().to_string();
        assert!(e.contains("--process"), "{e}");
    }

    /// Two free loopback ports' addresses.
    fn two_addresses() -> Vec<String> {
        let a = TcpListener::bind("127.0.0.1:0").unwrap();
        let b = TcpListener::bind("127.0.0.1:0").unwrap();
        vec![
            a.local_addr().unwrap().to_string(),
            b.local_addr().unwrap().to_string(),
        ]
    }

    #[test]
    fn peers_connect_and_a_stray_connection_is_ignored() {
        let addresses = two_addresses();
        let first = addresses.clone();
        let zero = std::thread::spawn(move || connect_peers(&first, 0, Duration::from_secs(30)));
        // A stray client that greets with nonsense, before process 1 arrives.
        let stray = loop {
            if let Ok(mut s) = TcpStream::connect(&addresses[0]) {
                s.write_all(&7u64.to_be_bytes()).unwrap();
                break s;
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let one = connect_peers(&addresses, 1, Duration::from_secs(30)).unwrap();
        let zero = zero.join().unwrap().unwrap();
        drop(stray);
        assert!(zero[0].is_none() && zero[1].is_some());
        assert!(one[0].is_some() && one[1].is_none());
    }

    #[test]
    fn a_peer_that_never_starts_is_named_when_the_time_is_up() {
        let addresses = two_addresses();
        let e = connect_peers(&addresses, 0, Duration::from_millis(300))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("process 1 at {} never connected", addresses[1])),
            "{e}"
        );
        let e = connect_peers(&addresses, 1, Duration::from_millis(300))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!(
                "process 0 at {} could not be reached",
                addresses[0]
            )),
            "{e}"
        );
    }
}
