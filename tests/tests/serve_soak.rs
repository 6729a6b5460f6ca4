//! Soak runs of `hourglass serve` under load, on loopback: 1,000 clients trickling their headers
//! a line a second beside normal requests, and 200 clients asking 30-minute curves at once.
//! Ignored (a minute each, and they measure the machine): `make soak` runs them. Each prints its
//! figures (`SOAK serve …` lines); docs/RELIABILITY.md records them with the command.
//!
//! The store is `hourglass generate --devices 200 --duration 2h --interval 10` replayed into an
//! embedded store; the server is the debug build the other end-to-end tests run, with its
//! default settings, started with a soft file-descriptor limit of 256 so that it must raise it
//! itself to hold 1,000 connections.

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Child;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

mod serve_common;

use e2e::hourglass_ok;

/// First second of the generated recording (2024-08-19T21:00:00Z); it spans two hours.
const START: i64 = 1724101200;
const DEVICES: u32 = 200;

/// Seconds a soak's load lasts: `HOURGLASS_SOAK_SECS`, else `default`.
fn soak_secs(default: u64) -> Duration {
    let secs = std::env::var("HOURGLASS_SOAK_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default);
    Duration::from_secs(secs)
}

/// A directory holding `store/`: 200 devices × 2 h every 10 s (144,000 readings).
fn store_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let start = START.to_string();
    hourglass_ok(
        dir.path(),
        &[
            "generate",
            "--devices",
            &DEVICES.to_string(),
            "--duration",
            "2h",
            "--interval",
            "10",
            "--start",
            &start,
            "--out",
            "traffic.jsonl",
        ],
    );
    hourglass_ok(dir.path(), &["replay", "traffic.jsonl", "--store", "store"]);
    dir
}

/// More flags for the server, from `HOURGLASS_SOAK_SERVE_ARGS` (split on whitespace), to
/// measure other settings than the defaults.
fn extra_serve_args() -> Vec<String> {
    std::env::var("HOURGLASS_SOAK_SERVE_ARGS")
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// A running `hourglass serve`, killed when dropped.
struct Serve {
    child: Child,
    addr: SocketAddr,
    stderr: PathBuf,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Serve {
    /// `hourglass serve --store store` in `dir`, under a soft file-descriptor limit of 256 (the
    /// hard limit left as it is), with its default HTTP settings.
    fn start(dir: &Path) -> Self {
        let mut args = vec!["--store".to_string(), "store".to_string()];
        args.extend(extra_serve_args());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (child, url) = serve_common::spawn_serve(dir, &args, Some("ulimit -Sn 256"));
        let addr = url
            .strip_prefix("http://")
            .and_then(|a| a.parse().ok())
            .expect("listen address");
        Serve {
            child,
            addr,
            stderr: dir.join("serve.err"),
        }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

/// A line of `/proc/<pid>/status`, in KiB (`VmRSS`, `VmHWM`).
fn status_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("process status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

fn rss_kib(pid: u32) -> u64 {
    status_kib(pid, "VmRSS")
}

/// Resets the peak RSS (`VmHWM`) of process `pid` to its current RSS, so that the peak of a
/// load leaves out that of the start (the embedded store's journal is read then); false if
/// the kernel refused.
fn reset_peak_rss(pid: u32) -> bool {
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

/// File descriptors process `pid` holds open.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, Iterator::count)
}

/// Threads of process `pid`.
fn threads(pid: u32) -> u64 {
    status_kib(pid, "Threads")
}

/// The soft limit on open files of this process.
fn own_fd_limit() -> u64 {
    let limits = std::fs::read_to_string("/proc/self/limits").expect("/proc/self/limits");
    limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3)?.parse().ok())
        .unwrap_or(u64::MAX)
}

/// A small xorshift generator: reproducible request choices without a dependency.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// A 30-minute curve of a random device, starting at a random minute of the recording (one in
/// three crosses the hour boundary, so it reads a wide row and the narrow table).
fn curve_path(rng: &mut Rng) -> String {
    let device = rng.below(u64::from(DEVICES));
    let from = START + 60 * rng.below(90) as i64;
    format!(
        "/api/v1/curve?device=dev{device:05}&from={from}&to={}",
        from + 1800
    )
}

/// Milliseconds at quantile `q` of sorted `ms`.
fn quantile(ms: &[u64], q: f64) -> u64 {
    if ms.is_empty() {
        return 0;
    }
    let i = ((ms.len() as f64 * q).ceil() as usize).clamp(1, ms.len()) - 1;
    ms[i]
}

/// One answered GET on a fresh connection: its status and whether its body was read whole.
fn fresh_get(url: &str) -> Result<u16, String> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(30)))
        .max_idle_connections(0)
        .build()
        .into();
    let mut res = agent.get(url).call().map_err(|e| e.to_string())?;
    let status = res.status().as_u16();
    res.body_mut()
        .read_to_vec()
        .map_err(|e| format!("reading the body: {e}"))?;
    Ok(status)
}

/// Latencies (ms) and failures of normal requests.
#[derive(Default)]
struct Normal {
    ms: Vec<u64>,
    failures: Vec<String>,
}

/// `clients` threads asking, each on a fresh connection every 100 ms, a 30-minute curve, the
/// device list or `/healthz`, until `stop`.
fn normal_clients(
    serve: &Serve,
    clients: u64,
    stop: &Arc<AtomicBool>,
) -> Vec<std::thread::JoinHandle<Normal>> {
    (0..clients)
        .map(|c| {
            let base = serve.url("");
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ (c + 1));
                let mut out = Normal::default();
                let mut k = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let path = match k % 3 {
                        0 => curve_path(&mut rng),
                        1 => "/api/v1/devices".to_string(),
                        _ => "/healthz".to_string(),
                    };
                    k += 1;
                    let t = Instant::now();
                    let got = fresh_get(&format!("{base}{path}"));
                    out.ms
                        .push(u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX));
                    match got {
                        Ok(200) => {}
                        Ok(status) => out.failures.push(format!("{path}: status {status}")),
                        Err(e) => out.failures.push(format!("{path}: {e}")),
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                out
            })
        })
        .collect()
}

fn join_normal(handles: Vec<std::thread::JoinHandle<Normal>>) -> Normal {
    let mut all = Normal::default();
    for h in handles {
        let n = h.join().expect("client thread");
        all.ms.extend(n.ms);
        all.failures.extend(n.failures);
    }
    all.ms.sort_unstable();
    all
}

/// A connection sending a request's headers a line at a time and never their end.
struct Trickler {
    stream: TcpStream,
    opened: Instant,
    lines: u64,
}

impl Trickler {
    fn open(addr: SocketAddr) -> Option<Self> {
        let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok()?;
        stream.write_all(b"GET /api/v1/devices HTTP/1.1\r\n").ok()?;
        stream.set_nonblocking(true).ok()?;
        Some(Trickler {
            stream,
            opened: Instant::now(),
            lines: 0,
        })
    }

    /// Whether the server closed it (an answer such as 408, an end of stream or a reset).
    fn closed(&mut self) -> bool {
        let mut buf = [0u8; 512];
        !matches!(self.stream.read(&mut buf), Err(e) if e.kind() == ErrorKind::WouldBlock)
    }

    /// Sends one more header line; false if the socket refused it.
    fn trickle(&mut self) -> bool {
        self.lines += 1;
        let line = format!("X-Trickle-{}: {}\r\n", self.lines, self.lines);
        self.stream.write_all(line.as_bytes()).is_ok()
    }
}

/// What the trickling clients saw.
#[derive(Debug, Default)]
struct Trickled {
    /// Connections the server closed.
    cut: u64,
    /// Longest a connection stayed open before the server closed it.
    longest: Duration,
    /// Connections that could not be opened.
    refused: u64,
    /// Least connections open at once after the first second.
    least_open: usize,
}

/// Keeps `n` connections open against `addr`, each sending one header line a second (spread
/// over the second), reopening each one the server closes, until `stop`.
fn trickle(addr: SocketAddr, n: usize, stop: &AtomicBool, opened: &AtomicU64) -> Trickled {
    let mut out = Trickled {
        least_open: n,
        ..Trickled::default()
    };
    let mut conns: Vec<Option<Trickler>> = (0..n).map(|_| Trickler::open(addr)).collect();
    opened.store(conns.iter().flatten().count() as u64, Ordering::Relaxed);
    let started = Instant::now();
    let tick = Duration::from_millis(100);
    let mut slot = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        // A tenth of the connections per tick: each sends a line a second.
        for _ in 0..n.div_ceil(10) {
            let i = slot % n;
            slot += 1;
            let alive = match &mut conns[i] {
                Some(c) => !c.closed() && c.trickle(),
                None => false,
            };
            if !alive {
                if let Some(c) = conns[i].take() {
                    out.cut += 1;
                    out.longest = out.longest.max(c.opened.elapsed());
                }
                conns[i] = Trickler::open(addr);
                if conns[i].is_none() {
                    out.refused += 1;
                }
            }
        }
        if started.elapsed() > Duration::from_secs(1) {
            out.least_open = out.least_open.min(conns.iter().flatten().count());
        }
        std::thread::sleep(tick.saturating_sub(t.elapsed()));
    }
    out
}

#[test]
#[ignore]
fn soak_serve_1000_trickling_connections_do_not_delay_normal_requests() {
    const TRICKLERS: usize = 1000;
    let limit = own_fd_limit();
    assert!(
        limit >= 2 * TRICKLERS as u64,
        "this test opens {TRICKLERS} connections and more: raise `ulimit -n` (now {limit}) to 2048 or more"
    );
    let dir = store_dir();
    let serve = Serve::start(dir.path());
    let pid = serve.pid();
    let secs = soak_secs(30);

    // Normal requests alone first: the baseline, and the idle RSS after them.
    let stop = Arc::new(AtomicBool::new(false));
    let clients = normal_clients(&serve, 4, &stop);
    std::thread::sleep(Duration::from_secs(5));
    stop.store(true, Ordering::Relaxed);
    let baseline = join_normal(clients);
    std::thread::sleep(Duration::from_secs(1));
    let idle_kib = rss_kib(pid);
    let hwm_reset = reset_peak_rss(pid);

    let stop = Arc::new(AtomicBool::new(false));
    let opened = Arc::new(AtomicU64::new(0));
    let trickling = {
        let (stop, opened) = (stop.clone(), opened.clone());
        let addr = serve.addr;
        std::thread::spawn(move || trickle(addr, TRICKLERS, &stop, &opened))
    };
    while opened.load(Ordering::Relaxed) == 0 {
        std::thread::sleep(Duration::from_millis(50));
    }
    let normal_stop = Arc::new(AtomicBool::new(false));
    let clients = normal_clients(&serve, 4, &normal_stop);
    let (mut max_kib, mut max_fds, mut max_threads) = (0u64, 0usize, 0u64);
    let t = Instant::now();
    while t.elapsed() < secs {
        max_kib = max_kib.max(rss_kib(pid));
        max_fds = max_fds.max(open_fds(pid));
        max_threads = max_threads.max(threads(pid));
        std::thread::sleep(Duration::from_millis(200));
    }
    normal_stop.store(true, Ordering::Relaxed);
    let normal = join_normal(clients);
    stop.store(true, Ordering::Relaxed);
    let trickled = trickling.join().expect("trickling thread");
    if hwm_reset {
        max_kib = max_kib.max(status_kib(pid, "VmHWM"));
    }

    let growth_mib = max_kib.saturating_sub(idle_kib) as f64 / 1024.0;
    println!(
        "SOAK serve slow clients: {TRICKLERS} trickling connections for {} s: cut by the server {}, \
         longest open {:.1} s, refused {}, least open at once {}; server fds max {max_fds}, threads max {max_threads}",
        secs.as_secs(),
        trickled.cut,
        trickled.longest.as_secs_f64(),
        trickled.refused,
        trickled.least_open,
    );
    println!(
        "SOAK serve slow clients: normal requests alone: {} answered, p50 {} ms, p99 {} ms, max {} ms, failed {}",
        baseline.ms.len(),
        quantile(&baseline.ms, 0.5),
        quantile(&baseline.ms, 0.99),
        quantile(&baseline.ms, 1.0),
        baseline.failures.len()
    );
    println!(
        "SOAK serve slow clients: normal requests beside them: {} answered, p50 {} ms, p99 {} ms, max {} ms, failed {}",
        normal.ms.len(),
        quantile(&normal.ms, 0.5),
        quantile(&normal.ms, 0.99),
        quantile(&normal.ms, 1.0),
        normal.failures.len()
    );
    println!(
        "SOAK serve slow clients: RSS idle {:.1} MiB, max {:.1} MiB, growth {growth_mib:.1} MiB",
        idle_kib as f64 / 1024.0,
        max_kib as f64 / 1024.0
    );
    assert!(
        baseline.failures.is_empty(),
        "normal requests failed without slow clients: {:?}",
        &baseline.failures[..baseline.failures.len().min(10)]
    );
    assert!(
        normal.failures.is_empty(),
        "{} normal requests failed beside the slow clients: {:?}\n{}",
        normal.failures.len(),
        &normal.failures[..normal.failures.len().min(10)],
        serve.stderr()
    );
    assert!(
        normal.ms.len() > 40,
        "too few normal requests to measure: {}",
        normal.ms.len()
    );
    assert!(
        quantile(&normal.ms, 0.99) < 1000,
        "normal requests' p99 beside {TRICKLERS} slow clients is {} ms, the bound is 1 s",
        quantile(&normal.ms, 0.99)
    );
    assert!(
        growth_mib <= 64.0,
        "RSS grew {growth_mib:.1} MiB beside {TRICKLERS} slow clients, the bound is 64 MiB"
    );
    assert!(
        trickled.cut > 0,
        "no trickling connection was closed in {} s: the header deadline did not act",
        secs.as_secs()
    );
}

#[test]
#[ignore]
fn soak_serve_200_concurrent_curves_memory_stays_bounded() {
    const CLIENTS: u64 = 200;
    let dir = store_dir();
    let serve = Serve::start(dir.path());
    let pid = serve.pid();
    let secs = soak_secs(10);

    // A few requests first, so that idle is the RSS of a server that has answered.
    for k in 0..20 {
        let mut rng = Rng(k + 1);
        assert_eq!(fresh_get(&serve.url(&curve_path(&mut rng))), Ok(200));
    }
    std::thread::sleep(Duration::from_secs(1));
    let idle_kib = rss_kib(pid);
    let hwm_reset = reset_peak_rss(pid);

    let stop = Arc::new(AtomicBool::new(false));
    let failures = Arc::new(Mutex::new(Vec::<String>::new()));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (stop, failures) = (stop.clone(), failures.clone());
            let base = serve.url("");
            std::thread::spawn(move || {
                let agent: ureq::Agent = ureq::Agent::config_builder()
                    .http_status_as_error(false)
                    .timeout_global(Some(Duration::from_secs(30)))
                    .build()
                    .into();
                let mut rng = Rng(0xD1B5_4A32_D192_ED03 ^ (c + 1));
                let mut ms = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let path = curve_path(&mut rng);
                    let t = Instant::now();
                    let got = agent
                        .get(format!("{base}{path}"))
                        .call()
                        .map_err(|e| e.to_string())
                        .and_then(|mut res| {
                            let status = res.status().as_u16();
                            res.body_mut()
                                .read_to_vec()
                                .map(|_| status)
                                .map_err(|e| e.to_string())
                        });
                    ms.push(u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX));
                    if got != Ok(200) {
                        failures
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(format!("{path}: {got:?}"));
                    }
                }
                ms
            })
        })
        .collect();
    let (mut max_kib, mut max_threads) = (0u64, 0u64);
    let t = Instant::now();
    while t.elapsed() < secs {
        max_kib = max_kib.max(rss_kib(pid));
        max_threads = max_threads.max(threads(pid));
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    let mut ms: Vec<u64> = clients
        .into_iter()
        .flat_map(|h| h.join().expect("client thread"))
        .collect();
    ms.sort_unstable();
    let end_kib = rss_kib(pid);
    std::thread::sleep(Duration::from_secs(5));
    let after_kib = rss_kib(pid);
    // Without the reset, VmHWM is the start's peak: the samples alone count.
    let hwm_kib = if hwm_reset {
        status_kib(pid, "VmHWM")
    } else {
        max_kib
    };
    let failures = failures.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let growth_mib = max_kib.max(hwm_kib).saturating_sub(idle_kib) as f64 / 1024.0;
    let mib = |k: u64| k as f64 / 1024.0;
    println!(
        "SOAK serve curves: {CLIENTS} clients × {} s: {} requests, p50 {} ms, p99 {} ms, max {} ms, failed {}; server threads max {max_threads}",
        secs.as_secs(),
        ms.len(),
        quantile(&ms, 0.5),
        quantile(&ms, 0.99),
        quantile(&ms, 1.0),
        failures.len()
    );
    println!(
        "SOAK serve curves: RSS idle {:.1} MiB, peak {:.1} MiB (VmHWM {:.1}), at the end {:.1}, 5 s later {:.1}; growth {growth_mib:.1} MiB",
        mib(idle_kib),
        mib(max_kib),
        mib(hwm_kib),
        mib(end_kib),
        mib(after_kib)
    );
    assert!(
        failures.is_empty(),
        "{} curve requests failed: {:?}",
        failures.len(),
        &failures[..failures.len().min(10)]
    );
    assert!(
        growth_mib <= 64.0,
        "RSS grew {growth_mib:.1} MiB under {CLIENTS} concurrent curve clients, the bound is 64 MiB"
    );
}
