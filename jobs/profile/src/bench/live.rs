//! `hourglass profile bench-live`: produce → visible delays of a live profile job, measured
//! from outside it.
//!
//! The bench creates a fresh topic, starts `hourglass profile run --serve` as a child process
//! (the binary running the bench) on a fresh store, publishes the generator's tag events
//! (`crate::generate`, stamped with the wall clock) at `--rate` events/s, and for a sample of
//! them, each setting [`PROBE_TAG`] of one user to a value of its own, polls
//! `GET /api/v1/profile/{user}` until that value shows: the delay from the producer's `send`
//! to the first answer that shows it, from the cache or the store, as a client sees it.

use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use pipeline::live_bench::{
    cpu_secs, distribution, finish_job, get, poll_samples, publish_paced, terminate, BenchFlags,
    JobChild, LoadSampler, Produced, Schedule, GIVE_UP,
};
use serde_json::{json, Value};

use crate::generate::{self, probe_tag, EventGenerator, GenerateConfig, PROBE_TAG};
use crate::{Error, Result};

/// How often a sampled event's user is read until the event shows.
const PROBE_POLL: Duration = Duration::from_millis(20);

/// Arguments of `hourglass profile bench-live`.
#[derive(Debug, Clone, clap::Args)]
pub struct LiveArgs {
    /// Users of the generated traffic (`hourglass profile generate`'s ids; a few make most
    /// events). Keep it above --samples-per-sec: the sampled users go round them in rank order.
    #[arg(long, default_value_t = 100_000)]
    pub users: u64,
    /// Tag events published per second.
    #[arg(long, default_value_t = 2_000.0)]
    pub rate: f64,
    /// The tag registry the job reads (`sqlite://…` or `mysql://…`); the generated registry and
    /// the probe tag are imported into it (an upsert). [default: a fresh SQLite file in --dir]
    #[arg(long, value_name = "URL")]
    pub registry: Option<String>,
    /// Redis of the job's `[redis]`: the profile cache the reads go through (and the
    /// short-term tags). Without it there is no cache and every read is a store Get. Use a
    /// database of its own (`redis://127.0.0.1:6379/12`): the bench's users are the generator's.
    #[arg(long, value_name = "URL")]
    pub redis: Option<String>,
    /// Events per second that carry a probe value whose user is polled for.
    #[arg(long, default_value_t = 10.0)]
    pub samples_per_sec: f64,
    /// The generator's seed.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// The engine's flags: timing, Kafka, the store, the job's configuration, output.
    #[command(flatten)]
    pub bench: BenchFlags,
}

/// A probe event: whose, which probe (its value is `p{seq}`), when it was sent.
#[derive(Debug, Clone)]
struct Probe {
    user: String,
    seq: u64,
    produced_ms: i64,
}

impl Produced for Probe {
    fn produced_ms(&self) -> i64 {
        self.produced_ms
    }
}

/// Answers that showed a probe, by where they came from.
#[derive(Debug, Default)]
struct Sources {
    cache: AtomicU64,
    store: AtomicU64,
}

/// Whether `p`'s value shows in its user's profile: its own, or a later probe's of the same
/// user (which replaced it, so this one was written too). A user with no tags yet is a 404.
fn visible(addr: &str, p: &Probe, sources: &Sources) -> Result<bool> {
    let (status, body) = get(addr, &format!("/api/v1/profile/{}", p.user))?;
    match status {
        404 => return Ok(false),
        200 => {}
        _ => {
            return Err(Error::Invalid(format!(
                "GET /api/v1/profile/{}: {status} {body}",
                p.user
            )))
        }
    }
    let v: Value = serde_json::from_str(&body)
        .map_err(|e| Error::Invalid(format!("a profile that is not JSON ({e}): {body}")))?;
    let seen = v["tags"][PROBE_TAG]
        .as_str()
        .and_then(|s| s.strip_prefix('p'))
        .and_then(|s| s.parse::<u64>().ok());
    let shown = seen.is_some_and(|seq| seq >= p.seq);
    if shown {
        let counter = match v["source"].as_str() {
            Some("cache") => &sources.cache,
            _ => &sources.store,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }
    Ok(shown)
}

/// The job's configuration: the registry, the short-term store or Redis, the topic, the
/// store, then `--config-line`s.
fn job_config(args: &LiveArgs, dir: &Path, topic: &str, registry: &str) -> String {
    let mut domain = format!(
        "[registry]\nurl = {registry:?}\n[short_term]\npath = {:?}\n",
        dir.join("short_term.sqlite").display().to_string()
    );
    if let Some(redis) = &args.redis {
        domain += &format!("[redis]\nurl = {redis:?}\n");
    }
    args.bench.job_config(dir, topic, &domain)
}

/// Imports the generated registry and the probe tag into `url`.
fn import_registry(url: &str) -> Result<()> {
    let mut tags = generate::registry();
    tags.push(probe_tag());
    let mut registry = crate::registry::open(url)?;
    for result in registry.upsert(&tags)? {
        result?;
    }
    Ok(())
}

/// Starts `hourglass profile run --serve` on `config`, its outputs in `dir`.
fn start_job(dir: &Path, config: &Path) -> Result<JobChild> {
    let exe = std::env::current_exe().map_err(|source| Error::Io {
        path: "the hourglass binary".into(),
        source,
    })?;
    // It idles out only if the bench dies; the bench stops it with SIGTERM.
    let idle_exit = format!("{}s", GIVE_UP.as_secs() + 30);
    let mut command = Command::new(exe);
    command
        .args(["profile", "run", "--config"])
        .arg(config)
        .args(["--serve", "127.0.0.1:0", "--exit-on-idle", &idle_exit]);
    Ok(JobChild::start(command, dir, "profile api: http://")?)
}

/// Runs `hourglass profile bench-live`: the result as JSON (printed as `--format` asks).
///
/// # Errors
/// A bad argument, Kafka or the registry failing, the job failing or exiting early.
pub fn run(args: &LiveArgs) -> Result<Value> {
    if !(args.rate.is_finite() && args.rate > 0.0) {
        return Err(Error::Invalid(format!(
            "--rate {}: use a positive number of events per second",
            args.rate
        )));
    }
    if !(args.samples_per_sec.is_finite() && args.samples_per_sec > 0.0) {
        return Err(Error::Invalid(format!(
            "--samples-per-sec {}: use a positive number",
            args.samples_per_sec
        )));
    }
    let mut generator = EventGenerator::new(GenerateConfig {
        users: args.users,
        seed: args.seed,
        ..GenerateConfig::default()
    })?;
    let duration = pipeline::time::parse_duration(&args.bench.duration)?;
    let warmup = pipeline::time::parse_duration(&args.bench.warmup)?;
    let tmp = tempfile::tempdir().map_err(|source| Error::Io {
        path: "a temporary directory".into(),
        source,
    })?;
    let dir = args
        .bench
        .dir
        .clone()
        .unwrap_or_else(|| tmp.path().to_path_buf());
    let io = |path: &Path| {
        let path = path.display().to_string();
        move |source| Error::Io { path, source }
    };
    std::fs::create_dir_all(&dir).map_err(io(&dir))?;
    // A fresh store and registry each run; a stale registry file would keep old definitions.
    let _ = std::fs::remove_dir_all(dir.join("store"));
    for file in [
        "tags.sqlite",
        "short_term.sqlite",
        "dead.jsonl",
        "stats.json",
    ] {
        let _ = std::fs::remove_file(dir.join(file));
    }
    let registry = args
        .registry
        .clone()
        .unwrap_or_else(|| format!("sqlite://{}", dir.join("tags.sqlite").display()));
    import_registry(&registry)?;
    let mut publisher = args.bench.publisher("profile-bench-live")?;
    let topic = publisher.topic().to_string();
    let config = dir.join("job.toml");
    std::fs::write(&config, job_config(args, &dir, &topic, &registry)).map_err(io(&config))?;

    let mut job = start_job(&dir, &config)?;
    let addr = job.addr()?;
    let loads = LoadSampler::start();
    let sources = Arc::new(Sources::default());
    let (tx, rx) = mpsc::channel();
    let poller = {
        let (addr, sources) = (addr.clone(), sources.clone());
        std::thread::spawn(move || {
            poll_samples(&addr, rx, PROBE_POLL, |addr, p: &Probe| {
                visible(addr, p, &sources)
            })
        })
    };
    let sample_every = (args.rate / args.samples_per_sec).max(1.0) as u64;
    let mut probes = 0u64;
    let mut line = Vec::with_capacity(512);
    let schedule = Schedule {
        rate: args.rate,
        warmup,
        duration,
    };
    let published = publish_paced(
        &mut publisher,
        schedule,
        &mut job,
        |publisher, n, at, sampled| {
            let ts = at.div_euclid(1000);
            if sampled && n.is_multiple_of(sample_every) {
                // Users in rank order: the most active first, each again only after `users`
                // probes, so that two probes of one user are seconds apart.
                let value = format!("p{probes}");
                let user = generator.probe_line(probes, ts, &value, &mut line);
                let probe = Probe {
                    user: user.to_string(),
                    seq: probes,
                    produced_ms: at,
                };
                publisher.send(probe.user.as_bytes(), &line, at)?;
                let _ = tx.send(probe);
                probes += 1;
            } else {
                let user = generator.live_line(ts, &mut line);
                publisher.send(user.as_bytes(), &line, at)?;
            }
            Ok::<_, Error>(())
        },
    )?;
    // A record the brokers did not take would be a probe never seen: fail instead.
    publisher.flush("tag events")?;
    drop(tx);
    let polled = poller
        .join()
        .map_err(|_| Error::Invalid("the poller panicked; please report it".into()))?;
    let loads = loads.finish();
    let job_cpu = cpu_secs(job.child.id());
    // Every probe is seen or given up: stop the job as an operator would (it flushes, commits
    // and writes its stats).
    terminate(&job)?;
    let stats = finish_job(job, &dir)?;
    let n = published.sent;
    Ok(json!({
        "bench": "profile-live",
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "store": args.bench.store(),
        "cache": args.redis.is_some(),
        "topic": topic,
        "partitions": args.bench.partitions,
        "users": args.users,
        "rate": args.rate,
        "config_lines": args.bench.config_line,
        "published": n,
        "published_per_s": n as f64 / published.publish_s,
        "published_per_s_sampled_window": published.in_window as f64 / duration.as_secs_f64(),
        "sends_behind_100ms": published.late_sends,
        "samples": probes,
        "visible": distribution(polled.delays_ms),
        "visible_from_cache": sources.cache.load(Ordering::Relaxed),
        "visible_from_store": sources.store.load(Ordering::Relaxed),
        "missing": polled.missing,
        "give_up_s": GIVE_UP.as_secs(),
        "poll_ms": PROBE_POLL.as_millis() as u64,
        "poll_errors": polled.errors,
        "job_cpu_s": job_cpu,
        "job_cpu_us_per_event": job_cpu.map(|c| c * 1e6 / n.max(1) as f64),
        "load_average": loads,
        "job": stats,
    }))
}

/// `r` as a few lines of text.
pub fn print_text(r: &Value) {
    let d = &r["visible"];
    println!(
        "profile-live into {} (cache: {}, {} partitions, {} users)",
        r["store"], r["cache"], r["partitions"], r["users"]
    );
    println!(
        "published {} events at {:.0}/s (asked {}), sampled {}",
        r["published"],
        r["published_per_s_sampled_window"].as_f64().unwrap_or(0.0),
        r["rate"],
        r["samples"]
    );
    println!(
        "produce → visible in GET /api/v1/profile: n={} p50 {} ms  p90 {} ms  p99 {} ms  max {} ms",
        d["n"], d["p50_ms"], d["p90_ms"], d["p99_ms"], d["max_ms"]
    );
    println!(
        "seen from cache {}, from store {}; missing after {} s: {}; poll errors {}",
        r["visible_from_cache"],
        r["visible_from_store"],
        r["give_up_s"],
        r["missing"],
        r["poll_errors"]
    );
    println!(
        "job: {} CPU s ({} µs an event), flushes {}; load average {}",
        r["job_cpu_s"], r["job_cpu_us_per_event"], r["job"]["flushes"], r["load_average"]
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_job_config_parses() {
        use clap::{Args, FromArgMatches};
        let matches = LiveArgs::augment_args(clap::Command::new("bench-live")).get_matches_from([
            "x",
            "--redis",
            "redis://127.0.0.1:6379/12",
            "--workers",
            "2",
            "--config-line",
            "[merge]",
            "--config-line",
            "flush_interval_ms = 40",
        ]);
        let args = LiveArgs::from_arg_matches(&matches).unwrap();
        let text = job_config(
            &args,
            Path::new("/tmp/d"),
            "t",
            "sqlite:///tmp/d/tags.sqlite",
        );
        let cfg = crate::ProfileConfig::parse("job.toml", &text).unwrap();
        assert_eq!(cfg.source.topic, "t");
        assert_eq!(cfg.merge.flush_interval_ms, 40);
        assert_eq!(cfg.workers, Some(2));
        assert_eq!(cfg.redis_url(), Some("redis://127.0.0.1:6379/12"));
        assert_eq!(cfg.registry.url, "sqlite:///tmp/d/tags.sqlite");
    }
}
