//! `onestep migrate (FILE | --dsn URL) [--upgrade]`: creates the execution tables with a
//! DDL-capable DSN, the production path where API and workers then run with `auto_create: false`
//! (docs/semantics.md#opening-a-backend); with `--upgrade`, also adds the `claimable` column and
//! indexes to tables the reference created (docs/schema.md#upgrading-reference-tables).

use std::path::PathBuf;

use onestep_core::names::TableNames;

use super::common::{EnvArgs, load};
use crate::wiring::store::{Store, StoreOptions};
use crate::wiring::{backend_key, store_options};

/// Arguments of `onestep migrate`.
#[derive(Debug, clap::Args)]
pub(crate) struct MigrateArgs {
    /// A YAML app file: every table pair its sources (and its `api:` section) use is created.
    #[arg(required_unless_present = "dsn", conflicts_with = "dsn")]
    pub(crate) target: Option<PathBuf>,
    /// A DSN (`mysql://user:password@host:port/database`,
    /// `postgresql://user:password@host:port/database` or `sqlite://./dir/x.db`) instead of a
    /// file.
    #[arg(long)]
    pub(crate) dsn: Option<String>,
    /// Executions table (with `--dsn`).
    #[arg(long, default_value = "onestep_executions")]
    pub(crate) table: String,
    /// Attempts table (with `--dsn`).
    #[arg(long, default_value = "onestep_execution_attempts")]
    pub(crate) attempts_table: String,
    /// Also upgrade reference-created tables: add the `claimable` column and its two indexes
    /// (additive, online DDL; nothing happens on tables that have them).
    #[arg(long)]
    pub(crate) upgrade: bool,
    #[command(flatten)]
    pub(crate) env: EnvArgs,
}

/// Exit codes: 0 created, upgraded or already present; 1 the database refused; 2 bad arguments
/// or file.
pub(crate) async fn run(args: MigrateArgs) -> u8 {
    let mut jobs: Vec<(String, StoreOptions)> = Vec::new();
    if let Some(target) = &args.target {
        let cfg = match load(target, false, &args.env) {
            Ok(c) => c,
            Err(code) => return code,
        };
        let mut seen = std::collections::BTreeSet::new();
        for source in cfg.sources.values() {
            if !seen.insert(backend_key(source)) {
                continue;
            }
            match store_options(&cfg, source) {
                Ok(o) => jobs.push((source.name.clone(), o)),
                Err(e) => {
                    eprintln!("onestep: {e:#}");
                    return 2;
                }
            }
        }
        if let Some(api) = &cfg.api {
            let key = (
                api.connector.clone(),
                api.table.clone(),
                api.attempts_table.clone(),
            );
            if seen.insert(key) {
                let Some(conn) = cfg.connectors.get(&api.connector) else {
                    eprintln!("onestep: unknown resource '{}'", api.connector);
                    return 2;
                };
                let mut o = StoreOptions::new(conn.dsn.expose());
                o.kind = conn.kind;
                match TableNames::new(&api.table, &api.attempts_table) {
                    Ok(t) => o.tables = t,
                    Err(e) => {
                        eprintln!("onestep: {e}");
                        return 2;
                    }
                }
                jobs.push(("api".into(), o));
            }
        }
    } else if let Some(dsn) = &args.dsn {
        let mut o = StoreOptions::new(dsn.clone());
        match TableNames::new(&args.table, &args.attempts_table) {
            Ok(t) => o.tables = t,
            Err(e) => {
                eprintln!("onestep: {e}");
                return 2;
            }
        }
        jobs.push(("--dsn".into(), o));
    }
    let mut code = 0;
    for (label, opts) in jobs {
        let tables = format!("{}, {}", opts.tables.executions, opts.tables.attempts);
        if args.upgrade {
            // docs/schema.md#upgrading-reference-tables, docs/postgres.md#upgrading-reference-tables
            match Store::upgrade(&opts).await {
                Ok(report) => print_upgrade(
                    &label,
                    &tables,
                    &report.created,
                    report
                        .steps
                        .iter()
                        .map(|s| (s.added.as_str(), s.form.as_str())),
                ),
                Err(e) => {
                    eprintln!("onestep: {label}: {e}");
                    code = 1;
                }
            }
            continue;
        }
        match Store::migrate(&opts).await {
            Ok(created) if created.is_empty() => {
                println!("{label}: tables {tables} already exist");
            }
            Ok(created) => println!("{label}: created {}", created.join(", ")),
            Err(e) => {
                eprintln!("onestep: {label}: {e}");
                code = 1;
            }
        }
    }
    code
}

/// The lines of `migrate --upgrade`: what was created, then each step (or "up to date").
fn print_upgrade<'a>(
    label: &str,
    tables: &str,
    created: &[String],
    steps: impl Iterator<Item = (&'a str, &'a str)>,
) {
    if !created.is_empty() {
        println!("{label}: created {}", created.join(", "));
    }
    let mut any = false;
    for (added, form) in steps {
        any = true;
        println!("{label}: added {added} ({form})");
    }
    if !any {
        println!("{label}: tables {tables} are up to date");
    }
}
