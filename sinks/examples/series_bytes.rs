//! Bytes per reading of the series chunk on a recorded JSON Lines file, column by column, its
//! encode and decode speed, and what pcodec, varints under zstd and Gorilla make of the same
//! numeric columns (issue 38; figures in docs/BENCHMARKS.md).
//!
//! `cargo run --release -p hourglass-sinks --example series_bytes -- FILE [METRIC] [PARTITION_S]
//! [BLOCKS]` (defaults `temp`, 3600, none). Each line is read as the sensor decoder's reference
//! path does: `device`, `ts` and the metric apart, every other field as compact JSON with sorted
//! keys. `BLOCKS`, a comma-separated list of block sizes in readings (`0`: a block a series,
//! `max`: one block a chunk), compares them as the store cuts chunks (64 series buckets a
//! partition): bytes a reading, and the CPU time of a read of one series (`decode_series`).

use std::collections::{BTreeMap, HashMap};
use std::io::BufRead;
use std::time::Instant;

use pco::standalone::{simple_compress, simple_decompress};
use pco::ChunkConfig;
use serde_json::Value;
use sinks::embedded::series::{column_sizes, decode, decode_series, encode, encode_blocks, Point};
use xxhash_rust::xxh3::xxh3_64;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .ok_or("usage: series_bytes FILE [METRIC] [PARTITION_S] [BLOCKS]")?;
    let metric = args.next().unwrap_or_else(|| "temp".to_owned());
    let partition: i64 = args.next().map_or(Ok(3600), |s| s.parse())?;
    let blocks: Vec<usize> = match args.next() {
        None => Vec::new(),
        Some(list) => list
            .split(',')
            .map(|b| {
                if b == "max" {
                    Ok(usize::MAX)
                } else {
                    b.parse()
                }
            })
            .collect::<Result<_, _>>()?,
    };

    let started = Instant::now();
    let mut partitions: BTreeMap<i64, Vec<Point>> = BTreeMap::new();
    let mut input_bytes = 0u64;
    let mut skipped = 0u64;
    for line in std::io::BufReader::new(std::fs::File::open(&path)?).lines() {
        let line = line?;
        input_bytes += line.len() as u64 + 1;
        let Ok(mut fields) = serde_json::from_str::<BTreeMap<String, Value>>(&line) else {
            skipped += 1;
            continue;
        };
        let (Some(Value::String(device)), Some(ts), Some(value)) = (
            fields.remove("device"),
            fields.remove("ts").and_then(|v| v.as_i64()),
            fields.remove(&metric).and_then(|v| v.as_f64()),
        ) else {
            skipped += 1;
            continue;
        };
        let extra = serde_json::to_string(&fields)?;
        partitions
            .entry(ts.div_euclid(partition))
            .or_default()
            .push(Point {
                series: device,
                ts,
                value,
                extra,
            });
    }
    let readings: usize = partitions.values().map(Vec::len).sum();
    eprintln!(
        "read {readings} readings ({skipped} lines skipped) into {} partitions of {partition} s in {:.1} s",
        partitions.len(),
        started.elapsed().as_secs_f64()
    );

    let mut chunks = Vec::new();
    let (started, cpu) = (Instant::now(), cpu_seconds());
    for points in partitions.values() {
        chunks.push(encode(points)?);
    }
    let (encode_s, encode_cpu) = (started.elapsed().as_secs_f64(), cpu_seconds() - cpu);
    let (started, cpu) = (Instant::now(), cpu_seconds());
    let mut decoded = Vec::new();
    for chunk in &chunks {
        decoded.push(decode(chunk)?);
    }
    let (decode_s, decode_cpu) = (started.elapsed().as_secs_f64(), cpu_seconds() - cpu);
    for (points, back) in partitions.values_mut().zip(&decoded) {
        points.sort_by(|a, b| (a.series.as_str(), a.ts).cmp(&(b.series.as_str(), b.ts)));
        let same = points.len() == back.len()
            && points.iter().zip(back).all(|(a, b)| {
                a.series == b.series
                    && a.ts == b.ts
                    && a.value.to_bits() == b.value.to_bits()
                    && a.extra == b.extra
            });
        if !same {
            return Err("a decoded chunk differs from its readings".into());
        }
    }

    let total: usize = chunks.iter().map(Vec::len).sum();
    let mut columns: Vec<(String, usize)> = Vec::new();
    for chunk in &chunks {
        for (name, bytes) in column_sizes(chunk)? {
            match columns.iter_mut().find(|(n, _)| *n == name) {
                Some(c) => c.1 += bytes,
                None => columns.push((name, bytes)),
            }
        }
    }
    let per = |bytes: usize| bytes as f64 / readings as f64;
    println!(
        "series chunk, {readings} readings, {} chunks:",
        chunks.len()
    );
    for (name, bytes) in &columns {
        println!(
            "  {name:<16} {bytes:>11} bytes  {:>7.3} B/reading",
            per(*bytes)
        );
    }
    println!(
        "  {:<16} {total:>11} bytes  {:>7.3} B/reading (input JSON {:.1} B/reading)",
        "total",
        per(total),
        input_bytes as f64 / readings as f64
    );
    println!(
        "encode {:.0} readings/s ({encode_s:.2} s, {encode_cpu:.2} CPU s: {:.0} a CPU s), \
         decode {:.0} readings/s ({decode_s:.2} s, {decode_cpu:.2} CPU s: {:.0} a CPU s)",
        readings as f64 / encode_s,
        readings as f64 / encode_cpu,
        readings as f64 / decode_s,
        readings as f64 / decode_cpu,
    );

    compare(partitions.values().flatten(), readings, &metric);
    if !blocks.is_empty() {
        compare_blocks(&partitions, readings, &blocks)?;
    }
    Ok(())
}

/// Series buckets a partition, as `store/series.rs` cuts runs.
const BUCKETS: u64 = 64;
/// Series read per block size, spread over the devices.
const READS: usize = 2000;

/// Per block size: the bytes a reading of the partitions' chunks cut by bucket as the store
/// does, and the CPU time of a read of one series from its bucket's chunk.
fn compare_blocks(
    partitions: &BTreeMap<i64, Vec<Point>>,
    readings: usize,
    blocks: &[usize],
) -> Result<(), Box<dyn std::error::Error>> {
    let mut buckets: Vec<Vec<Point>> = Vec::new();
    for points in partitions.values() {
        let mut by_bucket: Vec<Vec<Point>> = vec![Vec::new(); BUCKETS as usize];
        for p in points {
            by_bucket[(xxh3_64(p.series.as_bytes()) % BUCKETS) as usize].push(p.clone());
        }
        buckets.extend(by_bucket.into_iter().filter(|b| !b.is_empty()));
    }
    let mut devices: Vec<&str> = partitions
        .values()
        .flatten()
        .map(|p| p.series.as_str())
        .collect();
    devices.sort_unstable();
    devices.dedup();
    let step = (devices.len() / READS).max(1);
    let sample: Vec<&str> = devices.iter().step_by(step).copied().collect();
    println!(
        "block sizes, {} chunks (partition × bucket), reads of {} series:",
        buckets.len(),
        sample.len()
    );
    for &block in blocks {
        let chunks = buckets
            .iter()
            .map(|points| encode_blocks(points, block))
            .collect::<Result<Vec<_>, _>>()?;
        let bytes: usize = chunks.iter().map(Vec::len).sum();
        let (mut found, at) = (0usize, cpu_seconds());
        for id in &sample {
            let bucket = (xxh3_64(id.as_bytes()) % BUCKETS) as usize;
            // A series' chunk in every partition of the recording.
            for (chunk, points) in chunks.iter().zip(&buckets) {
                if xxh3_64(points[0].series.as_bytes()) % BUCKETS == bucket as u64 {
                    found += decode_series(chunk, id, id)?.len();
                }
            }
        }
        let cpu = cpu_seconds() - at;
        let name = if block == usize::MAX {
            "max".to_owned()
        } else {
            block.to_string()
        };
        println!(
            "  {name:>6} readings a block: {:>7.3} B/reading; a read of one series {:>8.1} µs CPU ({found} readings read)",
            bytes as f64 / readings as f64,
            cpu * 1e6 / sample.len() as f64,
        );
    }
    Ok(())
}

/// CPU seconds this process has used (user and system; Linux' `/proc/self/stat`, 100 ticks a
/// second), so that speeds on a shared machine can be read apart from the wait for a core.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command's closing parenthesis; utime and stime are the 12th and 13th.
    let fields: Vec<&str> = stat
        .rsplit_once(')')
        .map_or(vec![], |(_, rest)| rest.split_whitespace().collect());
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (ticks(11) + ticks(12)) / 100.0
}

/// Bytes per reading of each numeric column by pcodec, by zigzag varints of deltas under zstd
/// (level 3) and by Gorilla (delta-of-delta times, XOR doubles; the bit count of the encoding),
/// over readings sorted by (series, time). Delta, delta-of-delta and XOR restart at each series.
fn compare<'a>(points: impl Iterator<Item = &'a Point>, readings: usize, metric: &str) {
    let mut series: Vec<&str> = Vec::new();
    let mut columns: HashMap<String, Vec<f64>> = HashMap::new();
    let mut ts = Vec::new();
    for p in points {
        series.push(&p.series);
        ts.push(p.ts);
        columns.entry(metric.to_owned()).or_default().push(p.value);
        let extra: BTreeMap<String, Value> = serde_json::from_str(&p.extra).unwrap_or_default();
        for (k, v) in extra {
            if let Some(v) = v.as_f64() {
                columns.entry(k).or_default().push(v);
            }
        }
    }
    let starts: Vec<bool> = (0..series.len())
        .map(|i| i == 0 || series[i] != series[i - 1])
        .collect();
    println!("numeric columns compared (B/reading): pcodec | varint deltas + zstd | Gorilla");
    // CPU seconds of pcodec and of varints + zstd: compressing, then decompressing.
    let mut cpu = [[0.0f64; 2]; 2];
    let mut row = |name: &str, ints: &[i64], gorilla_bits: u64| {
        let at = cpu_seconds();
        let packed = simple_compress(ints, &ChunkConfig::default()).unwrap_or_default();
        let mid = cpu_seconds();
        let back = simple_decompress::<i64>(&packed).unwrap_or_default();
        cpu[0][0] += mid - at;
        cpu[0][1] += cpu_seconds() - mid;
        assert_eq!(back.len(), ints.len());
        let pco = packed.len();
        let at = cpu_seconds();
        let mut varints = Vec::new();
        let mut previous = 0i64;
        for (i, &v) in ints.iter().enumerate() {
            let d = if starts.get(i).copied().unwrap_or(true) {
                v
            } else {
                v.wrapping_sub(previous)
            };
            previous = v;
            let mut z = ((d << 1) ^ (d >> 63)) as u64;
            while z >= 0x80 {
                varints.push((z as u8) | 0x80);
                z >>= 7;
            }
            varints.push(z as u8);
        }
        let packed = zstd::bulk::compress(&varints, 3).unwrap_or_default();
        let mid = cpu_seconds();
        let bytes = zstd::bulk::decompress(&packed, varints.len()).unwrap_or_default();
        let mut back = Vec::with_capacity(ints.len());
        let (mut value, mut shift, mut previous) = (0u64, 0, 0i64);
        for b in bytes {
            value |= u64::from(b & 0x7f) << shift;
            shift += 7;
            if b & 0x80 == 0 {
                let d = ((value >> 1) as i64) ^ -((value & 1) as i64);
                let v = if starts.get(back.len()).copied().unwrap_or(true) {
                    d
                } else {
                    previous.wrapping_add(d)
                };
                back.push(v);
                previous = v;
                (value, shift) = (0, 0);
            }
        }
        cpu[1][0] += mid - at;
        cpu[1][1] += cpu_seconds() - mid;
        assert_eq!(back, ints);
        let zstd = packed.len();
        println!(
            "  {name:<10} {:>7.3} | {:>7.3} | {:>7.3}",
            pco as f64 / readings as f64,
            zstd as f64 / readings as f64,
            gorilla_bits as f64 / 8.0 / readings as f64
        );
    };
    row("ts", &ts, dod_bits(&ts, &starts));
    let mut names: Vec<&String> = columns.keys().collect();
    names.sort();
    for name in names {
        let values = &columns[name];
        if values.len() != readings {
            continue;
        }
        // The decimal as an integer at the column's scale, as the chunk stores it.
        let scale = (0..=6)
            .find(|&k| {
                let p = 10f64.powi(k);
                values.iter().all(|&v| (v * p).round() / p == v)
            })
            .unwrap_or(6);
        let p = 10f64.powi(scale);
        let ints: Vec<i64> = values.iter().map(|&v| (v * p).round() as i64).collect();
        row(name, &ints, xor_bits(values, &starts));
    }
    println!(
        "CPU s over these columns: pcodec compress {:.2}, decompress {:.2}; varint deltas + zstd \
         compress {:.2}, decompress {:.2}",
        cpu[0][0], cpu[0][1], cpu[1][0], cpu[1][1]
    );
}

/// Bits of Gorilla's timestamp encoding (the buckets of Pelkonen et al. 2015, "Gorilla"): a
/// series' first time in 64 bits, its first delta in 14, then each delta-of-delta in 1 bit
/// (0), 2+7, 3+9, 4+12 or 4+32 bits.
fn dod_bits(ts: &[i64], starts: &[bool]) -> u64 {
    let mut bits = 0u64;
    let (mut previous, mut delta, mut n) = (0i64, 0i64, 0);
    for (i, &t) in ts.iter().enumerate() {
        if starts[i] {
            n = 0;
        }
        bits += match n {
            0 => 64,
            1 => 14,
            _ => {
                let dod = (t - previous) - delta;
                match dod {
                    0 => 1,
                    -63..=64 => 9,
                    -255..=256 => 12,
                    -2047..=2048 => 16,
                    _ => 36,
                }
            }
        };
        if n > 0 {
            delta = t - previous;
        }
        previous = t;
        n += 1;
    }
    bits
}

/// Bits of Gorilla's XOR encoding of doubles: a series' first value in 64 bits, then 1 bit for
/// an equal value, 2 bits plus the meaningful bits when they fit the previous window, or 2 + 5
/// + 6 bits plus the meaningful bits for a new window.
fn xor_bits(values: &[f64], starts: &[bool]) -> u64 {
    let mut bits = 0u64;
    let mut previous = 0u64;
    let (mut leading, mut trailing) = (u32::MAX, 0u32);
    for (i, &v) in values.iter().enumerate() {
        let v = v.to_bits();
        if starts[i] {
            bits += 64;
            leading = u32::MAX;
        } else {
            let x = v ^ previous;
            if x == 0 {
                bits += 1;
            } else {
                let (l, t) = (x.leading_zeros().min(31), x.trailing_zeros());
                if leading != u32::MAX && l >= leading && t >= trailing {
                    bits += 2 + u64::from(64 - leading - trailing);
                } else {
                    bits += 2 + 5 + 6 + u64::from(64 - l - t);
                    leading = l;
                    trailing = t;
                }
            }
        }
        previous = v;
    }
    bits
}
