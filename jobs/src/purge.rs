//! `hourglass tags purge CODE`: an offline tag's stored values deleted from the profile tables,
//! with a progress bar on a terminal and status lines elsewhere.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use profile::purge::{Progress, PAGE_ROWS};
use profile::{PurgeCounts, PurgeOptions, PurgeOutcome, TagRegistry};
use sinks::config::{StoreConfig, StoreKind};
use sinks::embedded::OpenMode;
use sinks::OpenOptions;

use pipeline::store::BackendArgs;

/// How long an unreachable HBase is retried before the purge gives up (its checkpoint keeps
/// the pages done).
const RETRY_LIMIT: Duration = Duration::from_secs(60);

/// Most often a status line is printed when stderr is not a terminal.
const STATUS_EVERY: Duration = Duration::from_secs(5);

/// The checkpoint file of a purge of `code` when none is given.
pub fn default_checkpoint(code: &str) -> PathBuf {
    Path::new("hourglass-data").join(format!("purge-{code}.json"))
}

/// Runs a purge of `code`, invalidating the cached profiles of `cache` (its Redis URL and
/// entry TTL) as it goes; a refusal is an error, so the exit status is non-zero. Users whose
/// cached profile could not be invalidated are said on stderr, and are no failure.
pub fn run(
    code: &str,
    registry: &mut dyn TagRegistry,
    backend: &BackendArgs,
    checkpoint: Option<&Path>,
    page_rows: Option<usize>,
    cache: Option<(String, u64)>,
) -> Result<ExitCode> {
    let checkpoint = checkpoint.map_or_else(|| default_checkpoint(code), Path::to_path_buf);
    let options = PurgeOptions {
        page_rows: page_rows.unwrap_or(PAGE_ROWS),
        cache_url: cache.as_ref().map(|(url, _)| url.as_str()),
        ..PurgeOptions::new(code, &checkpoint)
    };
    // Asked first, so that a refused purge opens no store (nor creates an embedded one).
    profile::purge::check(registry, &options)?;
    let store = open_store(backend)?;
    let mut report = Reporter::new();
    let outcome = profile::purge(&store, registry, &options, &mut |p| report.progress(p));
    report.finish();
    let outcome = outcome.with_context(|| {
        format!(
            "purging tag {code} from {} (checkpoint {}; run the command again to resume)",
            store.location(),
            checkpoint.display()
        )
    })?;
    let cached = cache.is_some();
    let counts = match outcome {
        PurgeOutcome::Purged(counts) => {
            println!(
                "purged tag {code} from {}: {}; major compaction asked for both tables",
                store.location(),
                summary(&counts, cached)
            );
            counts
        }
        PurgeOutcome::AlreadyPurged(counts) => {
            println!(
                "tag {code} was already purged ({}; checkpoint {}): nothing to do",
                summary(&counts, cached),
                checkpoint.display()
            );
            return Ok(ExitCode::SUCCESS);
        }
        PurgeOutcome::Stopped(counts) => {
            println!(
                "purge of tag {code} stopped: {}; run it again to go on",
                summary(&counts, cached)
            );
            counts
        }
    };
    if let Some((_, ttl)) = cache.filter(|_| counts.cache_not_invalidated > 0) {
        eprintln!(
            "warning: {} users' cached profiles could not be invalidated (the profile cache's \
             Redis failed): they show tag {code} until they expire, at most {ttl} s ([cache] \
             ttl_secs) after they were cached",
            counts.cache_not_invalidated
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// The counts in words; the cache's only when the purge has one (`cached`).
fn summary(c: &PurgeCounts, cached: bool) -> String {
    let mut text = format!(
        "{} profile rows held it, {} columns deleted; {} history rows scanned, {} deleted; {} \
         index entries deleted",
        c.profile_rows, c.columns_deleted, c.history_rows, c.history_deleted, c.index_deleted
    );
    if cached {
        text.push_str(&format!(
            "; {} users' cached profiles invalidated",
            c.cache_invalidated
        ));
        if c.cache_not_invalidated > 0 {
            text.push_str(&format!(", {} could not be", c.cache_not_invalidated));
        }
    }
    text
}

/// The profile tables' store as the flags name it (the embedded store by default, in
/// `./hourglass-data`), opened for writing, HBase retries bounded by [`RETRY_LIMIT`].
fn open_store(backend: &BackendArgs) -> Result<sinks::Store> {
    let mut store_cfg = StoreConfig::default();
    backend.apply(&mut store_cfg);
    if store_cfg.kind == StoreKind::Embedded && !store_cfg.dir.exists() {
        anyhow::bail!(
            "no embedded store at {}: pass --store DIR where the profile tables are, or \
             --hbase HOST:PORT",
            store_cfg.dir.display()
        );
    }
    let options = OpenOptions {
        clock: Arc::new(pipeline::time::now_ms),
        retry_limit: Some(RETRY_LIMIT),
        ..OpenOptions::new(OpenMode::ReadWrite)
    };
    let store = sinks::open(&store_cfg, &profile::tables(), &options)?;
    for warning in store.open_warnings() {
        eprintln!("warning: {warning}");
    }
    store.ensure_tables()?;
    Ok(store)
}

/// Shows a purge's progress: a spinner per table on a terminal, a status line at most every
/// [`STATUS_EVERY`] (and at each table's end) elsewhere.
struct Reporter {
    bar: Option<ProgressBar>,
    last_line: Instant,
}

impl Reporter {
    fn new() -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let style = ProgressStyle::with_template("{spinner} [{elapsed_precise}] {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner());
            let bar = ProgressBar::new_spinner().with_style(style);
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        Reporter {
            bar,
            last_line: Instant::now(),
        }
    }

    fn progress(&mut self, progress: Progress) {
        let (line, always) = match progress {
            Progress::Page { table, counts } => (status(table, &counts), false),
            Progress::TableDone { table, counts } => {
                (format!("{} (done)", status(table, &counts)), true)
            }
            Progress::Compacting { table } => (format!("asking {table} to major-compact"), true),
        };
        match &self.bar {
            Some(bar) if always => bar.println(&line),
            Some(bar) => bar.set_message(line),
            None if always || self.last_line.elapsed() >= STATUS_EVERY => {
                eprintln!("{line}");
                self.last_line = Instant::now();
            }
            None => {}
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// One table's counts so far.
fn status(table: &str, c: &PurgeCounts) -> String {
    if table == profile::PROFILE_TABLE {
        format!(
            "{table}: {} rows with the tag, {} columns deleted",
            c.profile_rows, c.columns_deleted
        )
    } else {
        format!(
            "{table}: {} rows scanned, {} of the tag deleted",
            c.history_rows, c.history_deleted
        )
    }
}
