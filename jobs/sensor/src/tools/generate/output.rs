//! Where the recording goes: stdout, or a plain, `.gz` or `.zst` file, with a progress bar.

use std::fs::File;
use std::io::{self, BufWriter, IsTerminal as _, Write};
use std::path::Path;

use indicatif::{ProgressBar, ProgressStyle};
use pipeline::Context as _;

use super::plan::Plan;
use super::GenerateSummary;

pub(super) const OUT_BUFFER: usize = 1 << 20;

pub(super) fn write_file(plan: &Plan, path: &Path) -> crate::Result<GenerateSummary> {
    let context = || format!("writing {}", path.display());
    let file = File::create(path).with_context(|| {
        format!(
            "cannot create {}: check the directory exists",
            path.display()
        )
    })?;
    let bar = io::stderr().is_terminal().then(|| progress_bar(plan.ticks));
    let bar = bar.as_ref();
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let summary = match ext {
        "gz" => {
            // Level 1: level 6 makes these files about 30% smaller but compresses 3× slower
            // (about 400k lines/s); `.zst` is both smaller and faster.
            let gz = flate2::write::GzEncoder::new(file, flate2::Compression::fast());
            let mut out = BufWriter::with_capacity(OUT_BUFFER, gz);
            let summary = plan.write(&mut out, bar).with_context(context)?;
            let gz = out.into_inner().map_err(io::IntoInnerError::into_error);
            gz.and_then(|gz| gz.finish()).with_context(context)?;
            summary
        }
        "zst" => {
            let zst = zstd::Encoder::new(file, 3).with_context(context)?;
            let mut out = BufWriter::with_capacity(OUT_BUFFER, zst);
            let summary = plan.write(&mut out, bar).with_context(context)?;
            let zst = out.into_inner().map_err(io::IntoInnerError::into_error);
            zst.and_then(|zst| zst.finish()).with_context(context)?;
            summary
        }
        _ => {
            let mut out = BufWriter::with_capacity(OUT_BUFFER, file);
            let summary = plan.write(&mut out, bar).with_context(context)?;
            out.flush().with_context(context)?;
            summary
        }
    };
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    Ok(summary)
}

fn progress_bar(event_seconds: u64) -> ProgressBar {
    let style = ProgressStyle::with_template(
        "{elapsed_precise} [{wide_bar}] {pos}/{len} s of event time, eta {eta}",
    )
    .unwrap_or_else(|_| ProgressStyle::default_bar());
    ProgressBar::new(event_seconds).with_style(style)
}

#[cfg(test)]
mod tests {
    use std::io::Read as _;

    use super::*;
    use crate::tools::generate::run;
    use crate::tools::generate::testing::{args, generate, lines};

    #[test]
    fn compressed_files_round_trip() {
        let dir = std::env::temp_dir();
        let mut a = args(30, "5m");
        a.malformed_rate = 0.05;
        let (plain, _) = generate(&a);
        for ext in ["gz", "zst", "jsonl"] {
            let path = dir.join(format!("hourglass-generate-{}.{ext}", std::process::id()));
            a.out = Some(path.clone());
            let summary = run(&a).unwrap();
            let file = File::open(&path).unwrap();
            let mut text = Vec::new();
            match ext {
                "gz" => flate2::read::GzDecoder::new(file).read_to_end(&mut text),
                "zst" => zstd::Decoder::new(file).unwrap().read_to_end(&mut text),
                _ => {
                    let mut file = file;
                    file.read_to_end(&mut text)
                }
            }
            .unwrap();
            std::fs::remove_file(&path).unwrap();
            assert!(text == plain, "{ext} output differs");
            assert_eq!(summary.lines, lines(&text).len() as u64);
        }
    }
}
