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

use std::path::Path;
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use crate::Result;
use pipeline::live_bench::{
    cpu_secs, distribution, finish_job, load_average, poll_samples, publish_paced, terminate,
    wall_ms, BenchFlags, LoadSampler, Publisher, Schedule, GIVE_UP,
};

use child::{job_config, start_job};
use probe::{narrow_visible, wide_visible, Sample};

use crate::tools::generate::LiveFleet;

mod child;
mod probe;

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
    /// Readings per second whose narrow row is polled for (`/api/v1/latest`, a one-row read).
    #[arg(long, default_value_t = 10.0)]
    pub samples_per_sec: f64,
    /// Of those, readings per second whose wide cell is polled for too (`/api/v1/hour`, a read
    /// of the whole hour's row, about 85 times a sample: each adds load to the job and the
    /// store that a dashboard would not).
    #[arg(long, default_value_t = 4.0)]
    pub wide_samples_per_sec: f64,
    /// Measure a catch-up instead: publish this many readings first (at full speed, event
    /// times the fleet's last `N / rate` seconds), then start the job and report how fast it
    /// consumes them.
    #[arg(long, value_name = "N")]
    pub backlog: Option<u64>,
    /// The engine's flags: timing, Kafka, the store, the job's configuration, output.
    #[command(flatten)]
    pub bench: BenchFlags,
}

/// How often a sampled reading's narrow row, and its wide cell, are looked for.
const NARROW_POLL: Duration = Duration::from_millis(20);
const WIDE_POLL: Duration = Duration::from_millis(100);
/// Rooms the fleet's devices are spread over.
const ROOMS: u32 = 500;

/// Publishes device `id`'s reading of `fleet` at `ts`, stamped `at_ms`; returns the device's
/// name.
fn send(
    publisher: &mut Publisher,
    fleet: &mut LiveFleet,
    id: u32,
    ts: i64,
    at_ms: i64,
) -> Result<String> {
    let device = fleet.device_name(id);
    publisher.send(device.as_bytes(), fleet.line(id, ts), at_ms)?;
    Ok(device)
}

/// Runs `hourglass bench live` and prints its result.
pub fn run(args: &LiveArgs) -> Result<()> {
    ensure!(
        args.rate.is_finite() && args.rate > 0.0,
        "--rate {}: use a positive number of readings per second",
        args.rate
    );
    ensure!(args.devices > 0, "--devices: use at least 1");
    let duration = pipeline::time::parse_duration(&args.bench.duration)?;
    let warmup = pipeline::time::parse_duration(&args.bench.warmup)?;
    let tmp = tempfile::tempdir()?;
    let dir = args
        .bench
        .dir
        .clone()
        .unwrap_or_else(|| tmp.path().to_path_buf());
    std::fs::create_dir_all(&dir)?;
    let _ = std::fs::remove_dir_all(dir.join("store"));
    let mut publisher = args.bench.publisher("bench-live")?;
    let topic = publisher.topic().to_string();
    let config = dir.join("job.toml");
    std::fs::write(&config, job_config(args, &dir, &topic))?;
    // The readings of `hourglass generate`'s fleet; its start is a day back, before any
    // backlog's first reading.
    let mut fleet = LiveFleet::new(args.devices, ROOMS, wall_ms().div_euclid(1000) - 86_400)?;

    let result = match args.backlog {
        Some(n) => catch_up(args, &dir, &config, &mut publisher, &mut fleet, n)?,
        None => live(
            args,
            &dir,
            &config,
            &mut publisher,
            &mut fleet,
            duration,
            warmup,
        )?,
    };
    if args.bench.format == "json" {
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
    publisher: &mut Publisher,
    fleet: &mut LiveFleet,
    duration: Duration,
    warmup: Duration,
) -> Result<serde_json::Value> {
    // The job must outlive the pollers: a wide cell published last shows up to `early_fire_secs`
    // later, and a job that exits 5 s after its last record (as the catch-up's does) left such
    // samples missing. It idles out only if the bench dies; the bench stops it with SIGTERM.
    let idle_exit = format!("{}s", GIVE_UP.as_secs() + 30);
    let mut job = start_job(dir, config, &idle_exit)?;
    let addr = job.addr()?;
    let loads = LoadSampler::start();
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
    let (mut sampled_sent, mut wide_sent) = (0u64, 0u64);
    let schedule = Schedule {
        rate: args.rate,
        warmup,
        duration,
    };
    let published = publish_paced(
        publisher,
        schedule,
        &mut job,
        |publisher, n, at, sampled| {
            let i = (n % u64::from(args.devices)) as u32;
            let ts = at.div_euclid(1000);
            let dev = send(publisher, fleet, i, ts, at)?;
            if sampled && n.is_multiple_of(sample_every) {
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
            Ok::<_, crate::Error>(())
        },
    )?;
    let n = published.sent;
    // A record the brokers did not take would be a sample never seen, or a reading the job
    // is blamed for not reading: fail instead.
    publisher.flush("readings")?;
    drop((narrow_tx, wide_tx));
    let narrow = narrow
        .join()
        .map_err(|_| failed!("narrow poller panicked"))?;
    let wide = wide.join().map_err(|_| failed!("wide poller panicked"))?;
    let loads = loads.finish();
    let job_cpu = cpu_secs(job.child.id());
    // Every sample is seen or given up: stop the job as an operator would. On SIGTERM it writes
    // what its windows hold, flushes, commits and writes its stats.
    terminate(&job)?;
    let stats = finish_job(job, dir)?;
    let window_s = duration.as_secs_f64();
    Ok(serde_json::json!({
        "bench": "live",
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "store": args.bench.store(),
        "topic": publisher.topic(),
        "partitions": args.bench.partitions,
        "devices": args.devices,
        "rate": args.rate,
        "published": n,
        "published_per_s": n as f64 / published.publish_s,
        "published_per_s_sampled_window": published.in_window as f64 / window_s,
        "sends_behind_100ms": published.late_sends,
        "samples": sampled_sent,
        "wide_samples": wide_sent,
        "narrow": distribution(narrow.delays_ms),
        "narrow_missing": narrow.missing,
        "narrow_poll_ms": NARROW_POLL.as_millis() as u64,
        "wide": distribution(wide.delays_ms),
        "wide_missing": wide.missing,
        "wide_poll_ms": WIDE_POLL.as_millis() as u64,
        "poll_errors": narrow.errors + wide.errors,
        "job_cpu_s": job_cpu,
        "job_cpu_us_per_reading": job_cpu.map(|c| c * 1e6 / n.max(1) as f64),
        "load_average": loads,
        "job": stats,
    }))
}

fn catch_up(
    args: &LiveArgs,
    dir: &Path,
    config: &Path,
    publisher: &mut Publisher,
    fleet: &mut LiveFleet,
    backlog: u64,
) -> Result<serde_json::Value> {
    // The fleet's last `backlog / rate` seconds, in order.
    let now = wall_ms();
    let span_ms = (backlog as f64 / args.rate * 1000.0) as i64;
    let started = Instant::now();
    for n in 0..backlog {
        let i = (n % u64::from(args.devices)) as u32;
        let at = now - span_ms + (n as f64 * 1000.0 / args.rate) as i64;
        send(publisher, fleet, i, at.div_euclid(1000), at)?;
    }
    publisher.flush("readings")?;
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
        "store": args.bench.store(),
        "topic": publisher.topic(),
        "partitions": args.bench.partitions,
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
    use super::*;

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
