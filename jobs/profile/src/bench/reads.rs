//! The timed loops of `hourglass bench profile`: single reads and batch reads drawn by a Zipf
//! law, on client threads, with a progress line every 5 s.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use serde_json::{json, Value};

use super::users::Zipf;
use crate::Result;

/// What a benchmark reads through: the in-process read path or `hourglass serve`'s API.
pub trait Client: Sync {
    /// Reads one user's profile: `Some(true)` from the cache, `Some(false)` from the store,
    /// `None` when the user has no tag.
    ///
    /// # Errors
    /// The read failed.
    fn get(&self, user: &str) -> Result<Option<bool>>;

    /// Reads `users`' profiles in one batch: (answered from the cache, from the store).
    ///
    /// # Errors
    /// The read failed.
    fn batch(&self, users: &[String]) -> Result<(u64, u64)>;
}

/// Latencies in microseconds of the reads answered from the cache and from the store.
#[derive(Debug, Default)]
pub struct Samples {
    /// Reads answered from the cache.
    pub hits: Vec<u32>,
    /// Reads answered from the store.
    pub misses: Vec<u32>,
    /// Reads of users without a tag (none expected: the users are listed from the store).
    pub empty: u64,
    /// Wall time of the loop.
    pub elapsed: Duration,
}

impl Samples {
    fn merge(&mut self, other: Samples) {
        self.hits.extend(other.hits);
        self.misses.extend(other.misses);
        self.empty += other.empty;
    }

    /// Reads done.
    pub fn reads(&self) -> u64 {
        (self.hits.len() + self.misses.len()) as u64 + self.empty
    }

    /// Share of the reads answered from the cache.
    pub fn hit_ratio(&self) -> f64 {
        self.hits.len() as f64 / self.reads().max(1) as f64
    }

    /// The figures as JSON: reads, reads/s, hit ratio, and latencies of hits, misses and all.
    pub fn to_json(&self) -> Value {
        let all: Vec<u32> = self.hits.iter().chain(&self.misses).copied().collect();
        let secs = self.elapsed.as_secs_f64();
        json!({
            "reads": self.reads(),
            "secs": round(secs, 2),
            "reads_per_s": (self.reads() as f64 / secs.max(1e-9)).round() as u64,
            "hit_ratio": round(self.hit_ratio(), 4),
            "empty": self.empty,
            "hits": latencies(self.hits.clone()),
            "misses": latencies(self.misses.clone()),
            "all": latencies(all),
        })
    }
}

/// `x` rounded to `digits` decimals, for JSON meant to be read.
pub fn round(x: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (x * scale).round() / scale
}

/// n, mean, p50, p99, p99.9 and max of latencies in µs, given in ms.
pub fn latencies(mut us: Vec<u32>) -> Value {
    if us.is_empty() {
        return json!({ "n": 0 });
    }
    us.sort_unstable();
    let at = |q: f64| {
        let i = ((q * us.len() as f64).ceil() as usize).clamp(1, us.len()) - 1;
        round(f64::from(us[i]) / 1000.0, 3)
    };
    let mean = us.iter().map(|&u| f64::from(u)).sum::<f64>() / us.len() as f64;
    json!({
        "n": us.len(),
        "mean_ms": round(mean / 1000.0, 3),
        "p50_ms": at(0.5),
        "p99_ms": at(0.99),
        "p999_ms": at(0.999),
        "max_ms": at(1.0),
    })
}

fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

/// Progress shared by the client threads and the line printer.
#[derive(Default)]
struct Progress {
    done: AtomicU64,
    hits: AtomicU64,
    stop: AtomicBool,
}

/// Runs `total` operations split over `threads` threads (thread `t` seeded `seed + t`), each
/// `op(rng) -> (µs, hit?)`, printing `label`'s progress every 5 s; the first error stops all.
fn run_threads<F>(total: u64, threads: usize, seed: u64, label: &str, op: F) -> Result<Samples>
where
    F: Fn(&mut rand_chacha::ChaCha8Rng) -> Result<(u32, Option<bool>)> + Sync,
{
    let threads = threads.max(1);
    let progress = Progress::default();
    let merged = Mutex::new(Samples::default());
    let failed = Mutex::new(None);
    let started = Instant::now();
    std::thread::scope(|scope| {
        for t in 0..threads {
            let share = total / threads as u64 + u64::from((t as u64) < total % threads as u64);
            let (progress, merged, failed, op) = (&progress, &merged, &failed, &op);
            scope.spawn(move || {
                let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed + t as u64);
                let mut mine = Samples::default();
                for _ in 0..share {
                    if progress.stop.load(Ordering::Relaxed) {
                        break;
                    }
                    match op(&mut rng) {
                        Ok((us, Some(true))) => {
                            mine.hits.push(us);
                            progress.hits.fetch_add(1, Ordering::Relaxed);
                        }
                        Ok((us, Some(false))) => mine.misses.push(us),
                        Ok((_, None)) => mine.empty += 1,
                        Err(e) => {
                            progress.stop.store(true, Ordering::Relaxed);
                            failed
                                .lock()
                                .unwrap_or_else(|p| p.into_inner())
                                .get_or_insert(e);
                            break;
                        }
                    }
                    progress.done.fetch_add(1, Ordering::Relaxed);
                }
                merged.lock().unwrap_or_else(|p| p.into_inner()).merge(mine);
            });
        }
        let mut last = (Instant::now(), 0u64);
        while progress.done.load(Ordering::Relaxed) < total
            && !progress.stop.load(Ordering::Relaxed)
        {
            std::thread::sleep(Duration::from_millis(100));
            if last.0.elapsed() >= Duration::from_secs(5) {
                let done = progress.done.load(Ordering::Relaxed);
                let hits = progress.hits.load(Ordering::Relaxed);
                let rate = (done - last.1) as f64 / last.0.elapsed().as_secs_f64();
                eprintln!(
                    "bench profile: {label}: {done} of {total}, {rate:.0}/s, hit ratio {:.1} %",
                    100.0 * hits as f64 / done.max(1) as f64
                );
                last = (Instant::now(), done);
            }
        }
    });
    if let Some(e) = failed.into_inner().unwrap_or_else(|p| p.into_inner()) {
        return Err(e);
    }
    let mut samples = merged.into_inner().unwrap_or_else(|p| p.into_inner());
    samples.elapsed = started.elapsed();
    Ok(samples)
}

/// `reads` single reads of users drawn by `zipf` from `ids`, on `threads` threads.
///
/// # Errors
/// The first read that failed.
pub fn single_reads(
    client: &dyn Client,
    ids: &[String],
    zipf: &Zipf,
    reads: u64,
    threads: usize,
    seed: u64,
    label: &str,
) -> Result<Samples> {
    run_threads(reads, threads, seed, label, |rng| {
        let user = &ids[zipf.draw(rng)];
        let started = Instant::now();
        let hit = client.get(user)?;
        Ok((micros(started.elapsed()), hit))
    })
}

/// What batch reads measured: one latency a batch, and the users answered from the cache and
/// from the store.
#[derive(Debug)]
pub struct Batches {
    /// Latencies of whole batches (all in [`Samples::hits`]).
    pub samples: Samples,
    /// Users answered from the cache.
    pub hits: u64,
    /// Users answered from the store.
    pub misses: u64,
}

/// `batches` batch reads of `size` distinct users each, drawn by `zipf`, on `threads` threads.
///
/// # Errors
/// The first batch that failed.
pub fn batch_reads(
    client: &dyn Client,
    ids: &[String],
    zipf: &Zipf,
    (batches, size): (u64, usize),
    threads: usize,
    seed: u64,
) -> Result<Batches> {
    let size = size.min(ids.len());
    let (hits, misses) = (AtomicU64::new(0), AtomicU64::new(0));
    let samples = run_threads(batches, threads, seed, "batches", |rng| {
        let mut chosen = HashSet::with_capacity(size);
        while chosen.len() < size {
            chosen.insert(zipf.draw(rng));
        }
        let users: Vec<String> = chosen.into_iter().map(|r| ids[r].clone()).collect();
        let started = Instant::now();
        let (h, m) = client.batch(&users)?;
        let us = micros(started.elapsed());
        hits.fetch_add(h, Ordering::Relaxed);
        misses.fetch_add(m, Ordering::Relaxed);
        Ok((us, Some(true)))
    })?;
    Ok(Batches {
        samples,
        hits: hits.into_inner(),
        misses: misses.into_inner(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Even;

    impl Client for Even {
        fn get(&self, user: &str) -> Result<Option<bool>> {
            Ok(Some(user.len().is_multiple_of(2)))
        }
        fn batch(&self, users: &[String]) -> Result<(u64, u64)> {
            Ok((users.len() as u64, 0))
        }
    }

    #[test]
    fn every_read_is_counted_once_and_split_by_source() {
        let ids: Vec<String> = ["ab", "c"].map(String::from).into();
        let zipf = Zipf::new(2, 1.1);
        let s = single_reads(&Even, &ids, &zipf, 1001, 3, 1, "t").unwrap();
        assert_eq!(s.reads(), 1001);
        assert!(s.hits.len() > s.misses.len() && !s.misses.is_empty());
        let b = batch_reads(&Even, &ids, &zipf, (7, 5), 2, 1).unwrap();
        assert_eq!((b.samples.reads(), b.hits, b.misses), (7, 14, 0));
        let l = latencies(vec![1000, 3000, 2000]);
        assert_eq!(
            (l["p50_ms"].as_f64(), l["max_ms"].as_f64()),
            (Some(2.0), Some(3.0))
        );
    }
}
