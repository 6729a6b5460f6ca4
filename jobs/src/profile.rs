//! `hourglass profile`: the profile job's commands; for now `generate`, its test traffic.

use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use anyhow::{bail, Context, Result};
use profile::generate::{self, EventGenerator, GenerateConfig};

/// The profile job's commands.
#[derive(Debug, clap::Subcommand)]
pub enum ProfileCommand {
    /// Write realistic tag traffic: the registry CSV (--registry-out, for `hourglass tags
    /// import`) and JSON Lines tag events (--out) checked against it; same seed, same bytes.
    Generate(GenerateArgs),
}

/// Arguments of `hourglass profile generate`.
#[derive(Debug, Clone, clap::Args)]
pub struct GenerateArgs {
    /// Distinct users; a few make most events (power law), ids mostly 11-digit mobile numbers.
    #[arg(long, default_value_t = 10_000)]
    pub users: u64,
    /// Events (lines) to write.
    #[arg(long, default_value_t = 100_000)]
    pub events: u64,
    /// The events' file, `-` for stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Also write the generated registry (about 200 tags) as an import CSV here.
    #[arg(long, value_name = "FILE")]
    pub registry_out: Option<PathBuf>,
    /// RNG seed (same seed and arguments → byte-identical output).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Event time of the first event, epoch seconds.
    #[arg(long, value_name = "TS", default_value_t = 1_796_500_000)]
    pub start: i64,
    /// Seconds the event times cover (about one event in 20 is up to 10 minutes late).
    #[arg(long, value_name = "SECS", default_value_t = 86_400)]
    pub span: u64,
    /// Share of bad events (0 to 1), one dead-letter kind each, spread evenly over the kinds.
    #[arg(long, default_value_t = 0.0)]
    pub bad_ratio: f64,
    /// Exponent of the users' power law (1 classic, larger more skewed).
    #[arg(long, default_value_t = 1.0)]
    pub zipf: f64,
}

pub fn run(cmd: ProfileCommand) -> Result<ExitCode> {
    match cmd {
        ProfileCommand::Generate(args) => generate(&args).map(|()| ExitCode::SUCCESS),
    }
}

fn generate(args: &GenerateArgs) -> Result<()> {
    if args.out.is_none() && args.registry_out.is_none() {
        bail!("nothing to write: give --out FILE (or - for stdout) and/or --registry-out FILE");
    }
    let config = GenerateConfig {
        users: args.users,
        events: args.events,
        seed: args.seed,
        start: args.start,
        span_secs: args.span,
        bad_ratio: args.bad_ratio,
        zipf_exponent: args.zipf,
    };
    // Checked before any file is created.
    let generator = EventGenerator::new(config)?;
    if let Some(path) = &args.registry_out {
        let tags = generate::registry();
        let file = create(path)?;
        generate::write_registry_csv(BufWriter::new(file), &tags)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!("wrote {} tag definitions to {}", tags.len(), path.display());
    }
    let Some(path) = &args.out else {
        return Ok(());
    };
    let started = Instant::now();
    let summary = if path == Path::new("-") {
        let stdout = std::io::stdout().lock();
        generate::write_events(generator, BufWriter::with_capacity(1 << 16, stdout))?
    } else {
        let file = create(path)?;
        generate::write_events(generator, BufWriter::with_capacity(1 << 16, file))
            .with_context(|| format!("writing {}", path.display()))?
    };
    let secs = started.elapsed().as_secs_f64();
    let bad: u64 = summary.bad.iter().sum();
    let mut err = std::io::stderr().lock();
    writeln!(
        err,
        "wrote {} events ({bad} bad) of {} users to {} in {secs:.1} s ({:.0} events/s)",
        summary.events,
        args.users,
        path.display(),
        summary.events as f64 / secs.max(1e-9)
    )?;
    Ok(())
}

fn create(path: &Path) -> Result<std::fs::File> {
    std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))
}
