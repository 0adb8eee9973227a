//! `onestep copy --from URL --to URL` (docs/cli.md#onestep-copy): every execution, attempt,
//! attempt-diagnostics row and trace-context row of one store written into another, every
//! column kept, the target's tables created when missing; the loop, the lease rule and the
//! verification are core's (`onestep_core::transfer::copy`).

use std::path::PathBuf;

use onestep_config::LoadOptions;
use onestep_core::SystemClock;
use onestep_core::names::TableNames;
use onestep_core::transfer::{CopyError, CopyOptions, CopyReport, copy};

use crate::wiring::store::{Store, StoreOptions};

/// Arguments of `onestep copy`.
#[derive(Debug, clap::Args)]
pub(crate) struct CopyArgs {
    /// The source: MySQL/MariaDB (`mysql://user:pass@host:port/db`), PostgreSQL
    /// (`postgresql://…`) or SQLite (`sqlite://./dir/x.db`) URL; overrides the connector of
    /// `--config`.
    #[arg(long, value_name = "URL")]
    pub(crate) from: Option<String>,
    /// The target URL; its tables are created when missing (as `onestep migrate` does).
    #[arg(long, value_name = "URL")]
    pub(crate) to: String,
    /// YAML app file whose `api:` section names the source's connector and tables.
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// Source executions table (default `onestep_executions` or the config's `api.table`).
    #[arg(long)]
    pub(crate) table: Option<String>,
    /// Source attempts table (default `onestep_execution_attempts` or the config's
    /// `api.attempts_table`).
    #[arg(long)]
    pub(crate) attempts_table: Option<String>,
    /// Target executions table (default: the source's name).
    #[arg(long)]
    pub(crate) to_table: Option<String>,
    /// Target attempts table (default: the source's name).
    #[arg(long)]
    pub(crate) to_attempts_table: Option<String>,
    /// Copy executions whose lease is still valid, written with their lease expired, so the
    /// target's workers reclaim them (docs/semantics.md#copying-a-store); without it such a
    /// source is refused.
    #[arg(long)]
    pub(crate) release_leases: bool,
    /// Read and count everything, write nothing (the target's tables are still created).
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Executions per page: one export and one import transaction (1–10000).
    #[arg(long, default_value_t = 500)]
    pub(crate) batch_size: u32,
}

/// The source's URL and table names: flags first, then the config's `api:` section, then the
/// defaults.
fn source_of(args: &CopyArgs) -> Result<(String, TableNames), String> {
    let mut dsn = args.from.clone();
    let mut tables = TableNames::default();
    if let Some(path) = &args.config {
        let opts = LoadOptions {
            check_files: false,
            ..LoadOptions::default()
        };
        let config = onestep_config::load(path, &opts).map_err(|e| e.to_string())?;
        let api = config
            .api
            .as_ref()
            .ok_or_else(|| format!("{}: no `api:` section", path.display()))?;
        if dsn.is_none() {
            let connector = config.connectors.get(&api.connector).ok_or_else(|| {
                format!(
                    "api.connector: unknown connector resource '{}'",
                    api.connector
                )
            })?;
            dsn = Some(connector.dsn.expose().to_owned());
        }
        tables = TableNames {
            executions: api.table.clone(),
            attempts: api.attempts_table.clone(),
        };
    }
    let dsn = dsn.ok_or("no source: pass --from URL or --config FILE")?;
    let tables = TableNames::new(
        args.table.clone().unwrap_or(tables.executions),
        args.attempts_table.clone().unwrap_or(tables.attempts),
    )
    .map_err(|e| e.to_string())?;
    Ok((dsn, tables))
}

fn options(dsn: String, tables: TableNames, auto_create: bool) -> StoreOptions {
    let mut o = StoreOptions::new(dsn);
    o.tables = tables;
    o.auto_create = auto_create;
    o.pool_min = 0;
    o.pool_max = 2;
    o
}

/// Exit codes: 0 copied and verified (or a dry run); 1 a database failed or the verification
/// did; 2 bad arguments, the same store on both sides, or live leases without
/// `--release-leases`.
pub(crate) async fn run(args: CopyArgs) -> u8 {
    let (dsn, tables) = match source_of(&args) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("onestep: {e}");
            return 2;
        }
    };
    let target_tables = match TableNames::new(
        args.to_table.clone().unwrap_or(tables.executions.clone()),
        args.to_attempts_table
            .clone()
            .unwrap_or(tables.attempts.clone()),
    ) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("onestep: {e}");
            return 2;
        }
    };
    let source = match Store::open(&options(dsn, tables, false)).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("onestep: source: {e}");
            return 1;
        }
    };
    let target = match Store::open(&options(args.to.clone(), target_tables, true)).await {
        Ok(s) => s,
        Err(e) => {
            let _ = source.close().await;
            eprintln!("onestep: target: {e}");
            return 1;
        }
    };
    for t in target.tables_created() {
        eprintln!("copy: target: created {t}");
    }
    let opts = CopyOptions {
        page_size: args.batch_size,
        release_leases: args.release_leases,
        dry_run: args.dry_run,
    };
    let done = copy(
        source.transfer().as_ref(),
        target.transfer().as_ref(),
        &SystemClock,
        opts,
        |p| {
            eprintln!(
                "copy: page {}: {} executions; so far {} written, {} skipped",
                p.page, p.executions, p.copied.executions, p.skipped.executions
            );
        },
    )
    .await;
    let _ = source.close().await;
    let _ = target.close().await;
    match done {
        Ok(report) => {
            print_report(&report, args.dry_run);
            0
        }
        Err(e @ CopyError::LiveLeases { .. }) => {
            eprintln!(
                "onestep: {e}; stop the workers and let their leases expire (or wait for the \
                 executions to finish), or pass --release-leases to copy them with their lease \
                 expired: the target's workers then reclaim them (retried or failed per their \
                 retry policy, a requested cancel honoured)"
            );
            2
        }
        Err(e @ (CopyError::SameStore(_) | CopyError::Invalid(_))) => {
            eprintln!("onestep: {e}");
            2
        }
        Err(e) => {
            eprintln!(
                "onestep: {e}; running the same command again resumes (copied executions are skipped)"
            );
            1
        }
    }
}

fn print_report(report: &CopyReport, dry_run: bool) {
    if dry_run {
        println!("dry run: would copy at most {}", report.copied);
        println!("source holds {}", report.source);
        return;
    }
    println!("copied: {}", report.copied);
    println!("skipped (already in the target): {}", report.skipped);
    if !report.released.is_empty() {
        let by: Vec<String> = report
            .released
            .iter()
            .map(|(s, n)| format!("{s}: {n}"))
            .collect();
        println!(
            "leases released (reclaimed by the target's workers): {}",
            by.join(", ")
        );
    }
    if let Some(held) = report.target {
        println!(
            "verified: the target holds {held}; the source held {}",
            report.source
        );
    }
}
