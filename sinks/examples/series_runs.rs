//! Runs of a store's series keyspace per (hour partition, bucket): how far merges got (issue 38;
//! figures in docs/BENCHMARKS.md, "The series layout").
//!
//! `cargo run -p hourglass-sinks --example series_runs -- STORE_DIR [TABLE]` (default
//! `ts_metric`). It opens a copy of the store's directory (fjall replays its journal, which
//! would change the original) and reads the keys of `#series#TABLE`: `partition (8) ‖ bucket
//! (2) ‖ seq (8)`, a 10-byte key being a partition's marker (never merged), and each run's
//! chunk header (its blocks, and whether it is of format version 1), and every keyspace's disk
//! bytes. Then it compacts the copy's series keyspace whole and prints its disk bytes before
//! and after: runs a merge replaced stay on disk, shadowed, until compactions reach them.

use std::collections::BTreeMap;
use std::path::Path;

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let dir = args.next().ok_or("usage: series_runs STORE_DIR [TABLE]")?;
    let table = args.next().unwrap_or_else(|| "ts_metric".to_owned());
    let copy = tempfile::tempdir()?;
    copy_dir(Path::new(&dir), copy.path())?;
    let db = fjall::Database::builder(copy.path()).open()?;
    let keyspace = db.keyspace(&format!("#series#{table}"), Default::default)?;
    // Per partition: runs per bucket, bytes, and whether it is marked.
    let mut partitions: BTreeMap<u64, (BTreeMap<u16, usize>, u64, bool)> = BTreeMap::new();
    let (mut blocks, mut version_1) = (0usize, 0usize);
    for item in keyspace.iter() {
        let (key, value) = item.into_inner()?;
        let partition = u64::from_be_bytes(key[..8].try_into()?) ^ (1 << 63);
        let entry = partitions.entry(partition).or_default();
        match key.len() {
            18 => {
                let bucket = u16::from_be_bytes(key[8..10].try_into()?);
                *entry.0.entry(bucket).or_default() += 1;
                entry.1 += value.len() as u64;
                blocks += sinks::embedded::series::block_count(&value)?;
                version_1 += usize::from(value.get(4) == Some(&1));
            }
            _ => entry.2 = true,
        }
    }
    for (partition, (buckets, bytes, marked)) in &partitions {
        let runs: usize = buckets.values().sum();
        let most = buckets.values().max().copied().unwrap_or(0);
        println!(
            "partition {} (hour starting {}): {} buckets, {runs} runs ({:.1} a bucket, at most \
             {most}), {bytes} bytes{}",
            *partition as i64,
            *partition as i64 * 3600,
            buckets.len(),
            runs as f64 / buckets.len().max(1) as f64,
            if *marked { ", marked" } else { "" }
        );
    }
    let runs: usize = partitions
        .values()
        .map(|p| p.0.values().sum::<usize>())
        .sum();
    println!(
        "{runs} runs, {blocks} blocks ({:.1} a run), {version_1} runs of format version 1",
        blocks as f64 / runs.max(1) as f64
    );
    // Every keyspace's bytes (generations, series runs, spans), before the compaction below.
    for name in db.list_keyspace_names() {
        let bytes = db.keyspace(&name, Default::default)?.disk_space();
        println!("keyspace {name}: {bytes} bytes on disk");
    }
    let before = keyspace.disk_space();
    keyspace.rotate_memtable_and_wait()?;
    keyspace.major_compact()?;
    println!(
        "#series#{table} on disk: {before} bytes, {} after a major compaction",
        keyspace.disk_space()
    );
    Ok(())
}
