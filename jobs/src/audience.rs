//! `hourglass profile audience`: the users a tag condition selects, from `user_tag_index`.

use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use pipeline::store::BackendArgs;
use profile::audience::select;
use profile::ProfileConfig;

/// How `profile audience` prints its answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// The number of users.
    Count,
    /// One user id per line.
    Ids,
    /// `{"query": …, "count": n, "users": [...], "truncated": bool}`.
    Json,
}

/// Arguments of `hourglass profile audience`.
#[derive(Debug, Clone, clap::Args)]
pub struct AudienceArgs {
    /// The condition: `dim_city = hz AND beh_buy_30d >= 3 AND NOT vip = true` (`=`, `!=`, `<`,
    /// `<=`, `>`, `>=`, `IN (…)`, `CONTAINS`, `AND`, `OR`, `NOT`, parentheses; quote text with
    /// spaces or keywords in '…').
    pub query: String,
    /// What to print.
    #[arg(long, value_enum, default_value_t = Format::Count)]
    pub format: Format,
    /// Print at most N ids (`ids`, `json`; the count is always the whole audience's).
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
    /// Write the answer to FILE instead of stdout.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Profile job configuration (TOML): registry, store, `[index]` limits.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Where the tables are: `--store DIR` (embedded) or `--hbase HOST:PORT`.
    #[command(flatten)]
    pub backend: BackendArgs,
}

pub fn audience(args: &AudienceArgs, cfg: &ProfileConfig) -> Result<ExitCode> {
    let backend =
        pipeline::store::open(&cfg.store, &profile::tables(), &args.backend, true, false)?;
    let defs = profile::registry::open(&cfg.registry.url)?.list()?;
    let store = backend.reader();
    let found = select(&store, &args.query, &defs, cfg.index.limits())?;
    let out: Box<dyn Write> = match &args.out {
        Some(path) => Box::new(
            std::fs::File::create(path)
                .with_context(|| format!("cannot create {}", path.display()))?,
        ),
        None => Box::new(std::io::stdout().lock()),
    };
    let mut out = BufWriter::new(out);
    match args.format {
        Format::Count => writeln!(out, "{}", found.len())?,
        Format::Ids => {
            for id in found.user_ids(args.limit) {
                writeln!(out, "{id}")?;
            }
        }
        Format::Json => {
            let users: Vec<String> = found.user_ids(args.limit).collect();
            let answer = serde_json::json!({
                "query": args.query,
                "count": found.len(),
                "truncated": (users.len() as u64) < found.len(),
                "users": users,
            });
            serde_json::to_writer(&mut out, &answer)?;
            writeln!(out)?;
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// Arguments of `hourglass profile reconcile`.
#[derive(Debug, Clone, clap::Args)]
pub struct ReconcileArgs {
    /// Put the missing entries and delete the stale ones.
    #[arg(long)]
    pub repair: bool,
    /// Profile job configuration (TOML): registry, store.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Where the tables are: `--store DIR` (embedded) or `--hbase HOST:PORT`.
    #[command(flatten)]
    pub backend: BackendArgs,
}

/// Prints what `profile reconcile` found as JSON; exits 1 when the index does not match and
/// was not repaired.
pub fn reconcile(args: &ReconcileArgs, cfg: &ProfileConfig) -> Result<ExitCode> {
    // Writable only to repair: a check leaves an embedded store untouched.
    let backend = pipeline::store::open(
        &cfg.store,
        &profile::tables(),
        &args.backend,
        true,
        args.repair,
    )?;
    let defs = profile::registry::open(&cfg.registry.url)?.list()?;
    let reader = backend.reader();
    let found = if args.repair {
        let mut writer = backend.writer();
        profile::audience::reconcile::reconcile(&reader, Some(writer.as_mut()), &defs)?
    } else {
        profile::audience::reconcile::reconcile(&reader, None, &defs)?
    };
    if args.repair {
        backend.persist()?;
    }
    println!("{}", serde_json::to_string(&found)?);
    Ok(if found.consistent() || found.repaired {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
