//! `hourglass tables`: the schema as HBase shell DDL, and dumps of stored tables.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use pipeline::schema;

/// Table commands.
#[derive(Debug, clap::Subcommand)]
pub enum TablesCommand {
    /// Print the HBase shell DDL that creates every hourglass table.
    Ddl,
    /// Print every visible cell of a table: `row<TAB>family:qualifier<TAB>ts_ms<TAB>value`.
    Dump {
        /// Table name (`ts_metric` or `ts_metric_hourly`).
        table: String,
        /// Directory of the embedded store.
        #[arg(long, default_value = "./hourglass-data")]
        store: PathBuf,
    },
}

/// Runs a table command.
pub fn run(cmd: TablesCommand) -> Result<ExitCode> {
    let mut out = std::io::stdout().lock();
    match cmd {
        TablesCommand::Ddl => {
            for spec in schema::all_tables() {
                writeln!(out, "{}", spec.hbase_shell_ddl())?;
            }
        }
        TablesCommand::Dump { table, store } => {
            let spec = schema::all_tables()
                .into_iter()
                .find(|t| t.name == table)
                .with_context(|| {
                    format!(
                        "unknown table {table}: use {} or {}",
                        schema::NARROW_TABLE,
                        schema::HOURLY_TABLE
                    )
                })?;
            anyhow::ensure!(store.exists(), "no embedded store at {}", store.display());
            let db = crate::store::open_embedded(&store)?;
            for row in db.dump(spec.name)? {
                for c in &row.cells {
                    writeln!(
                        out,
                        "{}\t{}:{}\t{}\t{}",
                        String::from_utf8_lossy(&row.key),
                        c.family,
                        String::from_utf8_lossy(&c.qualifier),
                        c.ts_ms,
                        String::from_utf8_lossy(&c.value)
                    )?;
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
