//! `hourglass bench live`: produce → visible delays of a live job, measured from outside it.
//!
//! The bench creates a fresh topic, starts `hourglass run --serve` as a child process (the
//! binary running the bench), publishes readings of `--devices` devices at `--rate` readings/s
//! stamped with the wall clock (the lines `hourglass generate` writes: values that vary from
//! reading to reading, about 130 bytes with their extra fields), and polls the child's dashboard
//! API for a sample of them: the delay from the producer's `send` to the reading being the
//! device's `/api/v1/latest` (the narrow table) and to its point being in `/api/v1/hour` (the
//! open hour's wide row). With `--backlog N` it measures a catch-up instead: N readings are
//! published first, then the job consumes them as fast as it goes.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use crate::Result;
use pipeline::Context;
use rdkafka::config::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord};

use child::{finish_job, job_config, start_job};
use probe::{narrow_visible, now_ms, poll_samples, wide_visible, Sample, GIVE_UP};

use crate::tools::generate::LiveFleet;
use crate::tools::produce::{self, create_topic, flush_all, Deliveries};

mod child;
mod probe;

/// The bench's producer: delivery failures are counted, so that none goes unnoticed.
type Producer = BaseProducer<Deliveries>;

/// Arguments of `hourglass bench live`.
#[derive(Debug, Clone, clap::Args)]
pub struct LiveArgs {
    /// Devices of the fleet (`dev00000`…, named as `hourglass generate` names them); each
    /// reports every `devices / rate` seconds.
    #[arg(long, default_value_t = 100_000)]
    pub devices: u32,
    /// Readings published per second.
    #[arg(long, default_value_t = 10_000.0)]
    pub rate: f64,
    /// How long to publish (`90s`, `2m`); the first `--warmup` is not sampled.
    #[arg(long, default_value = "2m")]
    pub duration: String,
    /// Readings published before sampling starts (the job connects, the watermark forms).
    #[arg(long, default_value = "10s")]
    pub warmup: String,
    /// Partitions of the fresh topic.
    #[arg(long, default_value_t = 4)]
    pub partitions: i32,
    /// Kafka bootstrap brokers.
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub brokers: String,
    /// Write into HBase through its Thrift1 gateway at HOST:PORT instead of a fresh embedded
    /// store.
    #[arg(long, value_name = "HOST:PORT")]
    pub hbase: Option<String>,
    /// HBase Thrift2 gateway [default: the --hbase host, port 9091].
    #[arg(long, value_name = "HOST:PORT", requires = "hbase")]
    pub thrift2: Option<String>,
    /// Timely workers of the job [default: the job's default, one per core].
    #[arg(long)]
    pub workers: Option<usize>,
    /// Readings per second whose narrow row is polled for (`/api/v1/latest`, a one-row read).
    #[arg(long, default_value_t = 10.0)]
    pub samples_per_sec: f64,
    /// Of those, readings per second whose wide cell is polled for too (`/api/v1/hour`, a read
    /// of the whole hour's row, about 85 times a sample: each adds load to the job and the
    /// store that a dashboard would not).
    #[arg(long, default_value_t = 4.0)]
    pub wide_samples_per_sec: f64,
    /// The producer's `linger.ms` (as `hourglass produce`: 5).
    #[arg(long, default_value_t = 5)]
    pub linger_ms: u64,
    /// Extra lines appended to the job's configuration (TOML), e.g. `[source.rdkafka]` settings
    /// or `[window] early_fire_secs = 5`; repeatable.
    #[arg(long, value_name = "TOML")]
    pub config_line: Vec<String>,
    /// Measure a catch-up instead: publish this many readings first (at full speed, event
    /// times the fleet's last `N / rate` seconds), then start the job and report how fast it
    /// consumes them.
    #[arg(long, value_name = "N")]
    pub backlog: Option<u64>,
    /// Working directory (job config, store, dead letters, the job's log) [default: a
    /// temporary one].
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// `text` (a table) or `json`.
    #[arg(long, default_value = "text")]
    pub format: String,
}

/// How often a sampled reading's narrow row, and its wide cell, are looked for.
const NARROW_POLL: Duration = Duration::from_millis(20);
const WIDE_POLL: Duration = Duration::from_millis(100);
/// Rooms the fleet's devices are spread over.
const ROOMS: u32 = 500;

/// CPU seconds (user + system) a live process has used, from `/proc/PID/stat` (Linux; clock
/// ticks taken as 100 per second, the kernel's `USER_HZ`).
fn cpu_secs(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which may hold spaces, end with ')'.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i)?.parse::<f64>().ok();
    Some((ticks(11)? + ticks(12)?) / 100.0)
}

fn load_average() -> Option<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// p50/p90/p99/max of delays in ms, and how many.
fn distribution(mut ms: Vec<i64>) -> serde_json::Value {
    ms.sort_unstable();
    let at = |q: f64| {
        (!ms.is_empty()).then(|| ms[((ms.len() as f64 * q).ceil() as usize).clamp(1, ms.len()) - 1])
    };
    serde_json::json!({
        "n": ms.len(), "p50_ms": at(0.5), "p90_ms": at(0.9), "p99_ms": at(0.99), "max_ms": at(1.0),
    })
}

/// Publishes the fleet's readings to the bench's topic.
struct Publisher<'a> {
    producer: &'a Producer,
    topic: &'a str,
    fleet: LiveFleet,
}

impl Publisher<'_> {
    /// Publishes device `id`'s reading at `ts`, stamped `at_ms`; returns the device's name.
    fn send(&mut self, id: u32, ts: i64, at_ms: i64) -> Result<String> {
        let device = self.fleet.device_name(id);
        let record = BaseRecord::to(self.topic)
            .key(device.as_bytes())
            .payload(self.fleet.line(id, ts))
            .timestamp(at_ms);
        produce::send(self.producer, record, self.topic)?;
        Ok(device)
    }
}

/// Runs `hourglass bench live` and prints its result.
pub fn run(args: &LiveArgs) -> Result<()> {
    ensure!(
        args.rate.is_finite() && args.rate > 0.0,
        "--rate {}: use a positive number of readings per second",
        args.rate
    );
    ensure!(args.devices > 0, "--devices: use at least 1");
    let duration = pipeline::time::parse_duration(&args.duration)?;
    let warmup = pipeline::time::parse_duration(&args.warmup)?;
    let tmp = tempfile::tempdir()?;
    let dir = args.dir.clone().unwrap_or_else(|| tmp.path().to_path_buf());
    std::fs::create_dir_all(&dir)?;
    let _ = std::fs::remove_dir_all(dir.join("store"));
    let topic = format!("bench-live-{}-{}", std::process::id(), now_ms());
    let mut kafka = ClientConfig::new();
    kafka
        .set("bootstrap.servers", &args.brokers)
        .set("linger.ms", args.linger_ms.to_string());
    create_topic(&kafka, &topic, args.partitions, false)?;
    let config = dir.join("job.toml");
    std::fs::write(&config, job_config(args, &dir, &topic))?;
    let producer: Producer = kafka
        .create_with_context(Deliveries::default())
        .context("creating the Kafka producer")?;
    // The readings of `hourglass generate`'s fleet; its start is a day back, before any
    // backlog's first reading.
    let mut publisher = Publisher {
        producer: &producer,
        topic: &topic,
        fleet: LiveFleet::new(args.devices, ROOMS, now_ms().div_euclid(1000) - 86_400)?,
    };

    let result = match args.backlog {
        Some(n) => catch_up(args, &dir, &config, &mut publisher, n)?,
        None => live(args, &dir, &config, &mut publisher, duration, warmup)?,
    };
    if args.format == "json" {
        println!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        print_text(&result);
    }
    Ok(())
}

fn live(
    args: &LiveArgs,
    dir: &Path,
    config: &Path,
    publisher: &mut Publisher<'_>,
    duration: Duration,
    warmup: Duration,
) -> Result<serde_json::Value> {
    // The job must outlive the pollers: a wide cell published last shows up to `early_fire_secs`
    // later, and a job that exits 5 s after its last record (as the catch-up's does) left such
    // samples missing. It idles out only if the bench dies; the bench stops it with SIGTERM.
    let idle_exit = format!("{}s", GIVE_UP.as_secs() + 30);
    let mut job = start_job(dir, config, &idle_exit)?;
    let addr = job
        .addr
        .recv_timeout(Duration::from_secs(120))
        .with_context(|| {
            format!(
                "the job did not start; see {}",
                dir.join("job.log").display()
            )
        })?;
    // Load average once a second while publishing.
    let loads = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let load_thread = {
        let (loads, stop) = (loads.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                if let (Some(l), Ok(mut v)) = (load_average(), loads.lock()) {
                    v.push(l);
                }
                std::thread::sleep(Duration::from_secs(1));
            }
        })
    };
    let (narrow_tx, narrow_rx) = mpsc::channel();
    let (wide_tx, wide_rx) = mpsc::channel();
    let narrow = {
        let addr = addr.clone();
        std::thread::spawn(move || poll_samples(&addr, narrow_rx, NARROW_POLL, narrow_visible))
    };
    let wide = {
        let addr = addr.clone();
        std::thread::spawn(move || poll_samples(&addr, wide_rx, WIDE_POLL, wide_visible))
    };

    let sample_every = (args.rate / args.samples_per_sec.max(0.001)).max(1.0) as u64;
    // Every wide sample is a narrow one too.
    let wide_every = ((args.rate / args.wide_samples_per_sec.max(0.001)).max(1.0) as u64)
        .next_multiple_of(sample_every);
    let start = Instant::now();
    let end = start + warmup + duration;
    let sampled_from = start + warmup;
    let mut n: u64 = 0;
    let (mut sampled_sent, mut wide_sent, mut late_sends) = (0u64, 0u64, 0u64);
    let sent_in_window = AtomicU64::new(0);
    while Instant::now() < end {
        let due = start + Duration::from_secs_f64(n as f64 / args.rate);
        let now = Instant::now();
        if due > now {
            // A sleep, not `producer.poll(due - now)`: the producer's poll spins through the
            // last part of a millisecond, and the records are due every 100 µs, so the loop
            // took a core (70 CPU s in a 100 s run) that the job and the store needed. Records
            // falling due during the millisecond go out together.
            publisher.producer.poll(Duration::ZERO);
            std::thread::sleep((due - now).max(Duration::from_millis(1)));
            continue;
        }
        if now - due > Duration::from_millis(100) {
            late_sends += 1;
        }
        let i = (n % u64::from(args.devices)) as u32;
        let at = now_ms();
        let ts = at.div_euclid(1000);
        let dev = publisher.send(i, ts, at)?;
        if now >= sampled_from {
            sent_in_window.fetch_add(1, Ordering::Relaxed);
            if n.is_multiple_of(sample_every) {
                sampled_sent += 1;
                let s = Sample {
                    device: dev,
                    ts,
                    produced_ms: at,
                };
                if n.is_multiple_of(wide_every) {
                    wide_sent += 1;
                    let _ = wide_tx.send(s.clone());
                }
                let _ = narrow_tx.send(s);
            }
        }
        n += 1;
        if n.is_multiple_of(256) {
            publisher.producer.poll(Duration::ZERO);
        }
        if n.is_multiple_of(8192) {
            if let Some(status) = job.child.try_wait()? {
                bail!(
                    "hourglass run exited ({status}) while the bench was publishing; see {}",
                    dir.join("job.log").display()
                );
            }
        }
    }
    let publish_s = start.elapsed().as_secs_f64();
    // A record the brokers did not take would be a sample never seen, or a reading the job
    // is blamed for not reading: fail instead.
    flush_all(publisher.producer, n, "readings", publisher.topic)?;
    stop.store(true, Ordering::Relaxed);
    drop((narrow_tx, wide_tx));
    let (narrow_ms, narrow_missing, narrow_errors) = narrow
        .join()
        .map_err(|_| failed!("narrow poller panicked"))?;
    let (wide_ms, wide_missing, wide_errors) =
        wide.join().map_err(|_| failed!("wide poller panicked"))?;
    let _ = load_thread.join();
    let job_cpu = cpu_secs(job.child.id());
    // Every sample is seen or given up: stop the job as an operator would. On SIGTERM it writes
    // what its windows hold, flushes, commits and writes its stats.
    let term = Command::new("kill")
        .args(["-TERM", &job.child.id().to_string()])
        .status()
        .context("running kill -TERM on the job")?;
    if !term.success() {
        bail!("kill -TERM {} failed ({term})", job.child.id());
    }
    let stats = finish_job(job, dir)?;
    let loads = loads.lock().map(|v| v.clone()).unwrap_or_default();
    let window_s = duration.as_secs_f64();
    Ok(serde_json::json!({
        "bench": "live",
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "store": args.hbase.clone().unwrap_or_else(|| "embedded".into()),
        "topic": publisher.topic,
        "partitions": args.partitions,
        "devices": args.devices,
        "rate": args.rate,
        "published": n,
        "published_per_s": n as f64 / publish_s,
        "published_per_s_sampled_window": sent_in_window.load(Ordering::Relaxed) as f64 / window_s,
        "sends_behind_100ms": late_sends,
        "samples": sampled_sent,
        "wide_samples": wide_sent,
        "narrow": distribution(narrow_ms),
        "narrow_missing": narrow_missing,
        "narrow_poll_ms": NARROW_POLL.as_millis() as u64,
        "wide": distribution(wide_ms),
        "wide_missing": wide_missing,
        "wide_poll_ms": WIDE_POLL.as_millis() as u64,
        "poll_errors": narrow_errors + wide_errors,
        "job_cpu_s": job_cpu,
        "job_cpu_us_per_reading": job_cpu.map(|c| c * 1e6 / n.max(1) as f64),
        "load_average": {
            "min": loads.iter().copied().reduce(f64::min),
            "max": loads.iter().copied().reduce(f64::max),
            "mean": (!loads.is_empty()).then(|| loads.iter().sum::<f64>() / loads.len() as f64),
        },
        "job": stats,
    }))
}

fn catch_up(
    args: &LiveArgs,
    dir: &Path,
    config: &Path,
    publisher: &mut Publisher<'_>,
    backlog: u64,
) -> Result<serde_json::Value> {
    // The fleet's last `backlog / rate` seconds, in order.
    let now = now_ms();
    let span_ms = (backlog as f64 / args.rate * 1000.0) as i64;
    let started = Instant::now();
    for n in 0..backlog {
        let i = (n % u64::from(args.devices)) as u32;
        let at = now - span_ms + (n as f64 * 1000.0 / args.rate) as i64;
        publisher.send(i, at.div_euclid(1000), at)?;
        if n.is_multiple_of(1024) {
            publisher.producer.poll(Duration::ZERO);
        }
    }
    flush_all(publisher.producer, backlog, "readings", publisher.topic)?;
    let publish_s = started.elapsed().as_secs_f64();
    let load_before = load_average();
    let job_started = Instant::now();
    let job = start_job(dir, config, "5s")?;
    let pid = job.child.id();
    // Sampled until the job exits: the last sample is its total.
    let cpu = Arc::new(Mutex::new(None));
    let sampler = {
        let cpu = cpu.clone();
        std::thread::spawn(move || {
            while let Some(c) = cpu_secs(pid) {
                if let Ok(mut v) = cpu.lock() {
                    *v = Some(c);
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        })
    };
    let stats = finish_job(job, dir)?;
    let _ = sampler.join();
    let job_cpu = cpu.lock().ok().and_then(|c| *c);
    let wall = job_started.elapsed().as_secs_f64() - 5.0;
    Ok(serde_json::json!({
        "bench": "catch-up",
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "store": args.hbase.clone().unwrap_or_else(|| "embedded".into()),
        "topic": publisher.topic,
        "partitions": args.partitions,
        "devices": args.devices,
        "backlog": backlog,
        "published_per_s": backlog as f64 / publish_s,
        "consume_per_s": stats["consume_per_s"],
        "job_wall_s_without_idle_exit": wall,
        "readings_per_job_wall_s": backlog as f64 / wall.max(1e-9),
        "job_cpu_s": job_cpu,
        "job_cpu_us_per_reading": job_cpu.map(|c| c * 1e6 / backlog.max(1) as f64),
        "load_average": { "before": load_before, "after": load_average() },
        "job": stats,
    }))
}

fn print_text(r: &serde_json::Value) {
    let dist = |name: &str, d: &serde_json::Value| {
        println!(
            "{name:<28} n={:<5} p50 {} ms  p90 {} ms  p99 {} ms  max {} ms",
            d["n"], d["p50_ms"], d["p90_ms"], d["p99_ms"], d["max_ms"]
        );
    };
    println!(
        "{} into {} ({} partitions, {} devices)",
        r["bench"], r["store"], r["partitions"], r["devices"]
    );
    if r["bench"] == "live" {
        println!(
            "published {} readings at {:.0}/s (asked {}), sampled {} (wide cells: {})",
            r["published"],
            r["published_per_s_sampled_window"].as_f64().unwrap_or(0.0),
            r["rate"],
            r["samples"],
            r["wide_samples"]
        );
        dist("produce → narrow row", &r["narrow"]);
        dist("produce → open-hour cell", &r["wide"]);
        println!(
            "missing: narrow {}, wide {}; poll errors {}",
            r["narrow_missing"], r["wide_missing"], r["poll_errors"]
        );
        println!(
            "job: consumed {:.0}/s, produce → durable p50 {} ms, p99 {} ms",
            r["job"]["consume_per_s"].as_f64().unwrap_or(0.0),
            r["job"]["delay_p50_ms"],
            r["job"]["delay_p99_ms"]
        );
        println!("store flushes: {}", r["job"]["store_flushes"]);
        println!("store writes: {}", r["job"]["store_writes"]);
        println!(
            "job CPU: {} s, {} µs per reading",
            r["job_cpu_s"], r["job_cpu_us_per_reading"]
        );
        println!("load average: {}", r["load_average"]);
    } else {
        println!(
            "backlog {} readings: the job consumed {:.0}/s ({:.0}/s over its wall time)",
            r["backlog"],
            r["consume_per_s"].as_f64().unwrap_or(0.0),
            r["readings_per_job_wall_s"].as_f64().unwrap_or(0.0)
        );
        println!(
            "job CPU: {} s, {} µs per reading",
            r["job_cpu_s"], r["job_cpu_us_per_reading"]
        );
        println!("load average: {}", r["load_average"]);
    }
}

#[cfg(test)]
mod tests {
    use super::probe::poll_interval;
    use super::*;

    #[test]
    fn distribution_takes_nearest_ranks() {
        let d = distribution((1..=100).rev().collect());
        assert_eq!(d["n"], 100);
        assert_eq!(d["p50_ms"], 50);
        assert_eq!(d["p90_ms"], 90);
        assert_eq!(d["p99_ms"], 99);
        assert_eq!(d["max_ms"], 100);
        assert_eq!(distribution(vec![])["p50_ms"], serde_json::Value::Null);
    }

    #[test]
    fn a_sample_is_polled_less_often_as_it_ages() {
        let every = Duration::from_millis(20);
        // Young samples at the base interval: the delays that meet the targets are exact to it.
        assert_eq!(poll_interval(every, 0), every);
        assert_eq!(poll_interval(every, 1_000), every);
        // Then at a fiftieth of the age: 2 % of the delay.
        assert_eq!(poll_interval(every, 15_000), Duration::from_millis(300));
        assert_eq!(
            poll_interval(Duration::from_millis(100), 11_000),
            Duration::from_millis(220)
        );
        // A clock step back never makes it poll faster than the base interval.
        assert_eq!(poll_interval(every, -5_000), every);
    }

    #[test]
    fn the_job_config_parses() {
        use clap::Parser;
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            live: LiveArgs,
        }
        let cli = Cli::parse_from([
            "x",
            "--hbase",
            "h:9090",
            "--workers",
            "2",
            "--config-line",
            "[window]",
            "--config-line",
            "early_fire_secs = 5",
        ]);
        let text = job_config(&cli.live, Path::new("/tmp/d"), "t");
        let cfg = crate::config::JobConfig::parse(&text).unwrap();
        assert_eq!(cfg.source.topic, "t");
        assert_eq!(cfg.window.early_fire_secs, 5);
        assert_eq!(cfg.store.hbase.as_deref(), Some("h:9090"));
    }
}
