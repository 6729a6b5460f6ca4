//! Times a multi-get of `user_profile_tag` rows on a live HBase for several
//! `TableSpec::get_rows_per_call` values, interleaved, to choose the profile table's
//! (`tables::PROFILE_GET_ROWS_PER_CALL`; figures in docs/BENCHMARKS.md).
//!
//! `cargo run --release -p hourglass-profile --example batch_get_sizes -- THRIFT1 USERS_FILE
//! ROUNDS BATCH SIZE…`: each round draws BATCH users of USERS_FILE (one id a line) and reads
//! them once per size, sizes in turn; prints the median and worst time of each size.

use std::time::Instant;

use profile::tables::profile_table;
use rand::seq::IndexedRandom;
use rand::SeedableRng;
use sinks::config::{StoreConfig, StoreKind};
use sinks::table::TableReader;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [thrift1, users, rounds, batch, sizes @ ..] = args.as_slice() else {
        eprintln!("usage: batch_get_sizes THRIFT1 USERS_FILE ROUNDS BATCH SIZE…");
        std::process::exit(2);
    };
    let users: Vec<String> = std::fs::read_to_string(users)
        .expect("reading the users file")
        .lines()
        .map(str::to_string)
        .collect();
    let (rounds, batch): (usize, usize) = (rounds.parse().unwrap(), batch.parse().unwrap());
    let cfg = StoreConfig {
        kind: StoreKind::Hbase,
        hbase: Some(thrift1.clone()),
        ..Default::default()
    };
    let readers: Vec<(usize, sinks::Reader)> = sizes
        .iter()
        .map(|s| {
            let size: usize = s.parse().unwrap();
            let spec = sinks::schema::TableSpec {
                get_rows_per_call: size,
                ..profile_table()
            };
            let store = sinks::open(&cfg, &[spec], &sinks::OpenOptions::default()).unwrap();
            (size, store.reader())
        })
        .collect();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(37);
    let mut times: Vec<Vec<f64>> = vec![Vec::new(); readers.len()];
    // One warm-up round, not counted: connections and region boundaries.
    for round in 0..=rounds {
        let keys: Vec<Vec<u8>> = users
            .choose_multiple(&mut rng, batch)
            .map(|u| profile::profile_row(u))
            .collect();
        for (i, (_, reader)) in readers.iter().enumerate() {
            let started = Instant::now();
            let rows = reader
                .get_many(profile::PROFILE_TABLE, &keys, None)
                .unwrap();
            let took = started.elapsed().as_secs_f64() * 1000.0;
            assert_eq!(rows.len(), keys.len());
            if round > 0 {
                times[i].push(took);
            }
        }
    }
    for ((size, reader), t) in readers.iter().zip(&mut times) {
        t.sort_by(f64::total_cmp);
        println!(
            "rows/call {size:>5}: median {:7.1} ms, max {:7.1} ms, calls {:?} over {} batches",
            t[t.len() / 2],
            t[t.len() - 1],
            reader.stat("get_rows_calls"),
            rounds + 1
        );
    }
}
