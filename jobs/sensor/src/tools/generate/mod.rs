//! `hourglass generate`: writes realistic recorded sensor traffic as JSON Lines.

mod delivery;
mod faults;
mod fleet;
mod format;
mod live;
mod output;
mod plan;
#[cfg(test)]
mod testing;

use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::Instant;

use pipeline::Context as _;

pub use live::LiveFleet;
use output::{write_file, OUT_BUFFER};
use plan::Plan;

/// Arguments of `hourglass generate`.
#[derive(Debug, Clone, clap::Args)]
pub struct GenerateArgs {
    /// Number of devices (ids `dev00000`, `dev00001`, ...; wider when ids pass 99999).
    #[arg(long, default_value_t = 1000)]
    pub devices: u32,
    /// Length of the recording: `90s`, `10m`, `1h`, `2d`, or a sum such as `1h30m`.
    #[arg(long, default_value = "1h")]
    pub duration: String,
    /// First timestamp: epoch seconds or RFC 3339; default: start of the previous UTC hour
    /// (so the data is "recent"; of HOURGLASS_NOW when set, as the replay's future check).
    #[arg(long)]
    pub start: Option<String>,
    /// RNG seed (same seed, same args → byte-identical output).
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Output file; `.gz` / `.zst` extensions compress; `-` or absent = stdout.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Seconds between two readings of one device.
    #[arg(long, default_value_t = 10)]
    pub interval: u32,
    /// Fraction of well-formed lines delivered late: 30 s .. 10 min of event time behind,
    /// about a tenth of them more than 1 h behind when the recording is long enough.
    #[arg(long, default_value_t = 0.0)]
    pub late_rate: f64,
    /// Fraction of lines that are malformed (truncated JSON, missing/NaN-like/string metric,
    /// bad device id with '_', negative or millisecond ts, non-UTF-8 bytes, null fields).
    #[arg(long, default_value_t = 0.0)]
    pub malformed_rate: f64,
    /// Fraction of lines that duplicate another (same reading delivered twice).
    #[arg(long, default_value_t = 0.0)]
    pub duplicate_rate: f64,
    /// Number of rooms devices are spread over.
    #[arg(long, default_value_t = 100)]
    pub rooms: u32,
}

/// What `generate` wrote. `lines = readings + duplicates + malformed`.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct GenerateSummary {
    /// Lines written.
    pub lines: u64,
    /// Distinct readings: devices × (duration / interval).
    pub readings: u64,
    /// Malformed lines (not decodable as a reading).
    pub malformed: u64,
    /// Well-formed lines (originals or duplicates) delivered at least 30 s late.
    pub late: u64,
    /// Extra copies of readings.
    pub duplicates: u64,
}

/// Generates the recording described by `args` and writes it to `args.out`.
///
/// Streams: memory holds the device table, a few seconds of reordering and the held-back late
/// lines, never the recording. Shows a progress bar when writing to a file with stderr on a
/// terminal, and always prints a one-line summary to stderr at the end.
///
/// # Errors
/// Invalid arguments (with what to change), or failure to create or write the output.
pub fn run(args: &GenerateArgs) -> crate::Result<GenerateSummary> {
    let plan = Plan::new(args)?;
    let began = Instant::now();
    let path = args.out.as_deref().filter(|p| *p != Path::new("-"));
    let summary = match path {
        None => {
            let mut out = BufWriter::with_capacity(OUT_BUFFER, io::stdout().lock());
            let summary = plan.write(&mut out, None).context("writing to stdout")?;
            out.flush().context("writing to stdout")?;
            summary
        }
        Some(path) => write_file(&plan, path)?,
    };
    let elapsed = began.elapsed();
    eprintln!(
        "generated {} lines ({} readings, {} malformed, {} late, {} duplicates) \
         in {:.1} s, {:.0} lines/s",
        summary.lines,
        summary.readings,
        summary.malformed,
        summary.late,
        summary.duplicates,
        elapsed.as_secs_f64(),
        summary.lines as f64 / elapsed.as_secs_f64().max(1e-9),
    );
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use crate::tools::generate::testing::{args, generate};

    #[test]
    fn same_seed_same_bytes_other_seed_other_bytes() {
        let mut a = args(50, "10m");
        a.late_rate = 0.05;
        a.malformed_rate = 0.02;
        a.duplicate_rate = 0.02;
        let (first, _) = generate(&a);
        let (again, _) = generate(&a);
        assert!(first == again, "same seed gave different output");
        a.seed += 1;
        let (other, _) = generate(&a);
        assert!(first != other, "different seeds gave the same output");
    }
}
