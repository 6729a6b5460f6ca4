//! Writer throughput, a benchmark run on demand.

use std::time::{Duration, Instant};

use super::*;
use crate::test_tables as schema;

/// One reading as the replay job writes it: a narrow row with `t:v` and `t:x`, and one cell of
/// the device's hourly wide row.
fn reading(device: u32, ts_ms: i64) -> [Mutation; 2] {
    let salt = device % schema::SALT_BUCKETS;
    let narrow_row = format!("{salt:02}_dev{device:06}_{:019}", i64::MAX - ts_ms).into_bytes();
    let hour = ts_ms - ts_ms.rem_euclid(3_600_000);
    let wide_row = format!("dev{device:06}_{hour:013}").into_bytes();
    let offset = (ts_ms - hour) / 1000;
    let value = (f64::from(device) + 0.5).to_be_bytes().to_vec();
    [
        Mutation::Put {
            table: schema::NARROW_TABLE,
            row: narrow_row,
            cells: vec![
                Cell {
                    family: schema::FAMILY.into(),
                    qualifier: b"v".to_vec(),
                    ts_ms,
                    value: value.clone(),
                },
                Cell {
                    family: schema::FAMILY.into(),
                    qualifier: b"x".to_vec(),
                    ts_ms,
                    value: vec![1],
                },
            ],
        },
        Mutation::Put {
            table: schema::HOURLY_TABLE,
            row: wide_row,
            cells: vec![Cell {
                family: schema::FAMILY.into(),
                qualifier: offset.to_string().into_bytes(),
                ts_ms,
                value,
            }],
        },
    ]
}

/// CPU time this thread has run, from Linux's scheduler statistics; zero elsewhere.
fn thread_cpu() -> Duration {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .map_or(Duration::ZERO, Duration::from_nanos)
}

/// CPU time of the whole process (writers, fjall's flush and compaction threads), in ticks.
fn process_cpu() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are the 12th and 13th.
    let fields: Vec<u64> = stat
        .rsplit(')')
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|f| f.parse().ok())
        .collect();
    Duration::from_millis(fields.iter().sum::<u64>() * 10)
}

/// Time spent inside one writer, on the wall clock and on the CPU, and CPU spent building the
/// mutations it was given.
#[derive(Default)]
struct WriterTime {
    wall: Duration,
    cpu: Duration,
    building_cpu: Duration,
}

/// Feeds `readings` readings through one writer, timing the writer alone.
fn feed(store: &EmbeddedStore, worker: u32, readings: u32) -> WriterTime {
    const DEVICES: u32 = 10_000;
    const CHUNK: u32 = 2048;
    let mut writer = store.writer();
    let mut time = WriterTime::default();
    // Recent readings, so the 90-day TTL of hourglass's tables keeps them visible.
    let start_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
        - 24 * 3_600_000;
    let mut timed = |f: &mut dyn FnMut()| {
        let (wall, cpu) = (Instant::now(), thread_cpu());
        f();
        time.wall += wall.elapsed();
        time.cpu += thread_cpu() - cpu;
    };
    for first in (0..readings).step_by(CHUNK as usize) {
        let building = thread_cpu();
        let chunk: Vec<Mutation> = (first..(first + CHUNK).min(readings))
            .flat_map(|n| {
                let device = worker * DEVICES + n % DEVICES;
                reading(device, start_ms + i64::from(n / DEVICES) * 1000)
            })
            .collect();
        time.building_cpu += thread_cpu() - building;
        let mut chunk = Some(chunk);
        timed(&mut || writer.write(chunk.take().unwrap()).unwrap());
    }
    timed(&mut || writer.flush().unwrap());
    time
}

/// Writer throughput, one and two writers: run
/// `cargo test --release -p hourglass-sinks -- --ignored bench --nocapture`.
/// Readings per writer: `HOURGLASS_BENCH_READINGS` (default 1,000,000).
///
/// Prints cells per second of time spent inside `write`/`flush`, on the wall clock and per
/// CPU-second of the writer thread (the figure that does not depend on what else the machine
/// runs), and the CPU the whole process spent (fjall flushes and compacts in the background).
#[test]
#[ignore = "benchmark; run in release with --ignored bench --nocapture"]
fn bench_writer_throughput() {
    let readings: u32 = std::env::var("HOURGLASS_BENCH_READINGS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    for writers in [1u32, 2] {
        let dir = TempDir::new().unwrap();
        let store = EmbeddedStore::open(dir.path(), &schema::all_tables()).unwrap();
        let (wall, cpu) = (Instant::now(), process_cpu());
        let times: Vec<WriterTime> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..writers)
                .map(|w| {
                    let store = store.clone();
                    s.spawn(move || feed(&store, w, readings))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let (wall, cpu) = (wall.elapsed(), process_cpu() - cpu);
        let persist = Instant::now();
        store.persist().unwrap();
        let persist = persist.elapsed();

        let cells = f64::from(readings) * 3.0;
        let total_cells = cells * f64::from(writers);
        let in_wall: f64 = times.iter().map(|t| cells / t.wall.as_secs_f64()).sum();
        let in_cpu: f64 = times
            .iter()
            .map(|t| cells / t.cpu.as_secs_f64())
            .sum::<f64>()
            / f64::from(writers);
        let building: Duration = times.iter().map(|t| t.building_cpu).sum();
        let store_us = cpu.saturating_sub(building).as_secs_f64() * 1e6 / total_cells;
        let cores = std::thread::available_parallelism().map_or(1, usize::from);
        println!(
            "writers={writers}, {total_cells} cells ({} readings):\n  \
             inside write/flush: {in_wall:.0} cells/s wall (all writers), {in_cpu:.0} cells per \
             CPU-second of a writer thread\n  \
             store CPU (process minus building mutations, so writers + fjall flushes and \
             compactions): {store_us:.2} µs/cell, at most {:.0} cells/s on {cores} cores\n  \
             whole run: {:.0} cells/s wall; persist {persist:?}",
            readings * writers,
            cores as f64 * 1e6 / store_us,
            total_cells / wall.as_secs_f64(),
        );
        let rows = store.dump(schema::NARROW_TABLE).unwrap().len();
        assert_eq!(rows, (readings * writers) as usize);
    }
}
