//! `hourglass tags`: the profile job's tag registry (import a CSV, list, set a tag's status,
//! purge an offline tag's values).

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use profile::config::DEFAULT_REGISTRY_URL;
use profile::{ProfileConfig, TagDef, TagRegistry, TagStatus, Upserted};

/// Which registry a command uses.
#[derive(Debug, Clone, clap::Args)]
pub struct RegistryArgs {
    /// The tag registry: sqlite://PATH (created with its directory) or
    /// mysql://user:pass@host:port/db [default: the --config file's registry.url, else
    /// sqlite://./hourglass-data/tags.sqlite].
    #[arg(long, value_name = "URL", conflicts_with = "config")]
    pub registry: Option<String>,
    /// Profile job configuration (TOML) whose `[registry] url` names the registry
    /// (config/profile.example.toml).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

impl RegistryArgs {
    fn open(&self) -> Result<Box<dyn TagRegistry>> {
        let url = match (&self.registry, &self.config) {
            (Some(url), _) => url.clone(),
            (None, Some(path)) => ProfileConfig::load(path)?.registry.url,
            (None, None) => DEFAULT_REGISTRY_URL.to_string(),
        };
        Ok(profile::open(&url)?)
    }

    /// The profile cache of the `--config` file: its `[redis] url` and `[cache] ttl_secs`, when
    /// it has `[redis]` and the cache is enabled.
    fn cache(&self) -> Result<Option<(String, u64)>> {
        let Some(path) = &self.config else {
            return Ok(None);
        };
        let cfg = ProfileConfig::load(path)?;
        let url = cfg.redis_url().filter(|_| cfg.cache.enabled);
        Ok(url.map(|url| (url.to_string(), cfg.cache.ttl_secs)))
    }
}

/// Output format of `tags list`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ListFormat {
    /// Aligned columns for people.
    Table,
    /// A JSON array of definitions (the CSV's columns as keys; no TTL is null).
    Json,
}

/// A tag's status, as `set-status` takes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StatusArg {
    /// Written for every user.
    Online,
    /// Written only for the configured test users.
    Gray,
    /// No longer written; stored values kept.
    Offline,
}

impl From<StatusArg> for TagStatus {
    fn from(s: StatusArg) -> Self {
        match s {
            StatusArg::Online => TagStatus::Online,
            StatusArg::Gray => TagStatus::Gray,
            StatusArg::Offline => TagStatus::Offline,
        }
    }
}

/// Tag registry commands, and the purge of an offline tag's stored values.
#[derive(Debug, clap::Subcommand)]
pub enum TagsCommand {
    /// Insert or update tag definitions from a CSV file (header:
    /// tag_code,name,data_type,value_type,status,ttl_secs,category,owner,update_frequency).
    /// Bad rows are listed on stderr with their line numbers and the others imported; the exit
    /// status is then 1.
    Import {
        /// The CSV file.
        file: PathBuf,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// List every tag definition, ordered by code.
    List {
        /// Output format.
        #[arg(long, value_enum, default_value = "table")]
        format: ListFormat,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Set a tag's status: online (written), gray (written for test users only), offline (no
    /// longer written).
    SetStatus {
        /// The tag code.
        code: String,
        /// The new status.
        #[arg(value_enum)]
        status: StatusArg,
        #[command(flatten)]
        registry: RegistryArgs,
    },
    /// Delete an offline tag's stored values: its column from every user_profile_tag row and
    /// its user_tag_history rows, then ask the store to major-compact both tables. Refused
    /// unless the tag is offline. A killed purge resumes from its checkpoint; a finished one
    /// is not run again. With a --config that has [redis] (and the cache enabled), the cached
    /// profiles of the users it changed are invalidated as it goes; with Redis down the purge
    /// completes and counts those left to expire.
    Purge {
        /// The tag code.
        code: String,
        #[command(flatten)]
        registry: RegistryArgs,
        #[command(flatten)]
        backend: pipeline::store::BackendArgs,
        /// The purge's checkpoint file [default: hourglass-data/purge-CODE.json].
        #[arg(long, value_name = "FILE")]
        checkpoint: Option<PathBuf>,
        /// Rows scanned per page; the checkpoint is written after each [default: 1000].
        #[arg(long, value_name = "N")]
        page_rows: Option<usize>,
    },
}

pub fn run(cmd: TagsCommand) -> Result<ExitCode> {
    match cmd {
        TagsCommand::Import { file, registry } => import(&file, &registry),
        TagsCommand::List { format, registry } => {
            let tags = registry.open()?.list()?;
            let mut out = std::io::stdout().lock();
            match format {
                ListFormat::Json => {
                    // Written as bytes, so a closed pipe (`| head`) is an io::Error main ignores.
                    let mut text = serde_json::to_string_pretty(&tags)?;
                    text.push('\n');
                    out.write_all(text.as_bytes())?;
                }
                ListFormat::Table => write_table(&mut out, &tags)?,
            }
            out.flush()?;
            Ok(ExitCode::SUCCESS)
        }
        TagsCommand::SetStatus {
            code,
            status,
            registry,
        } => {
            let mut reg = registry.open()?;
            let status = TagStatus::from(status);
            let old = reg.set_status(&code, status)?;
            println!("{code}: {old} -> {status} ({})", reg.location());
            Ok(ExitCode::SUCCESS)
        }
        TagsCommand::Purge {
            code,
            registry,
            backend,
            checkpoint,
            page_rows,
        } => {
            let mut reg = registry.open()?;
            crate::purge::run(
                &code,
                reg.as_mut(),
                &backend,
                checkpoint.as_deref(),
                page_rows,
                registry.cache()?,
            )
        }
    }
}

fn import(file: &PathBuf, registry: &RegistryArgs) -> Result<ExitCode> {
    let shown = file.display().to_string();
    let input = std::fs::File::open(file).with_context(|| format!("cannot open {shown}"))?;
    let read = profile::import_csv(&shown, std::io::BufReader::new(input))?;
    let mut reg = registry.open()?;
    let defs: Vec<TagDef> = read.tags.iter().map(|(_, t)| t.clone()).collect();
    let outcomes = reg.upsert(&defs)?;

    // Every refused row, the file's own and the registry's, in line order.
    let mut refused: Vec<(u64, String)> = read
        .refused
        .iter()
        .map(|r| (r.line, r.reason.clone()))
        .collect();
    let (mut inserted, mut updated, mut unchanged) = (0usize, 0usize, 0usize);
    for ((line, _), outcome) in read.tags.iter().zip(outcomes) {
        match outcome {
            Ok(Upserted::Inserted) => inserted += 1,
            Ok(Upserted::Updated) => updated += 1,
            Ok(Upserted::Unchanged) => unchanged += 1,
            Err(e) => refused.push((*line, e.to_string())),
        }
    }
    refused.sort_by_key(|(line, _)| *line);
    let mut err = std::io::stderr().lock();
    for (line, reason) in &refused {
        writeln!(err, "{shown}:{line}: refused: {reason}")?;
    }
    let imported = inserted + updated + unchanged;
    println!(
        "imported {imported} tags into {} ({inserted} new, {updated} changed, {unchanged} unchanged), {} refused",
        reg.location(),
        refused.len()
    );
    if refused.is_empty() {
        return Ok(ExitCode::SUCCESS);
    }
    writeln!(
        err,
        "error: {} of {} rows of {shown} were refused (listed above, with their lines); the other {imported} were imported",
        refused.len(),
        refused.len() + imported
    )?;
    Ok(ExitCode::FAILURE)
}

/// Aligned columns, one definition a line.
fn write_table(out: &mut impl Write, tags: &[TagDef]) -> std::io::Result<()> {
    let header = [
        "TAG_CODE",
        "NAME",
        "DATA_TYPE",
        "VALUE_TYPE",
        "STATUS",
        "TTL_SECS",
        "CATEGORY",
        "OWNER",
        "UPDATE_FREQUENCY",
    ];
    let rows: Vec<[String; 9]> = tags
        .iter()
        .map(|t| {
            [
                t.tag_code.clone(),
                t.name.clone(),
                t.data_type.to_string(),
                t.value_type.to_string(),
                t.status.to_string(),
                t.ttl_secs
                    .map_or_else(|| "-".to_string(), |s| s.to_string()),
                t.category.clone(),
                t.owner.clone(),
                t.update_frequency.clone(),
            ]
        })
        .collect();
    let mut widths = header.map(|h| h.chars().count());
    for row in &rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut line = |cells: &[&str]| -> std::io::Result<()> {
        let mut text = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                text.push_str(cell);
            } else {
                let pad = w - cell.chars().count();
                text.push_str(cell);
                text.extend(std::iter::repeat_n(' ', pad + 2));
            }
        }
        writeln!(out, "{}", text.trim_end())
    };
    line(&header)?;
    for row in &rows {
        line(&row.each_ref().map(String::as_str))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use profile::{DataType, ValueType};

    #[test]
    fn table_columns_line_up() {
        let tags = [TagDef {
            tag_code: "rt_last_cat".into(),
            name: "最近类目".into(),
            data_type: DataType::String,
            value_type: ValueType::ShortTerm,
            status: TagStatus::Gray,
            ttl_secs: Some(86400),
            category: "beh".into(),
            owner: "reco".into(),
            update_frequency: "realtime".into(),
        }];
        let mut out = Vec::new();
        write_table(&mut out, &tags).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(lines[0].starts_with("TAG_CODE     NAME  DATA_TYPE  VALUE_TYPE  STATUS"));
        assert!(lines[1].starts_with("rt_last_cat  最近类目  STRING     short_term  gray    86400"));
        assert!(lines[1].ends_with("realtime"));
    }
}
