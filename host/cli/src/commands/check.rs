//! `onestep check [--strict] [--connect] [--json] FILE` (docs/cli.md#onestep-check): loads the
//! file as `onestep run` does, then loads every task's component as a worker does at start
//! (compile through the compile cache, link against the host's imports for the task's sandbox),
//! so a component the worker would refuse is reported here first, with the same message.

use std::path::PathBuf;
use std::time::Duration;

use onestep_mysql::MySqlBackend;

use onestep_config::AppConfig;

use super::common::{EnvArgs, load};
use crate::wiring::store::StoreOptions;
use crate::wiring::wasm_runner::load_task_handler;
use crate::wiring::{backend_key, build_runtime, sandbox_settings, store_options};

/// Arguments of `onestep check`.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// The YAML app file.
    pub target: PathBuf,
    /// Apply strict validation (unknown keys and the rules of docs/configuration.md#strict-validation) first.
    #[arg(long)]
    pub strict: bool,
    /// Also open every execution source: report reachability, server version, session settings
    /// and table presence (with `auto_create: true` this creates missing tables).
    #[arg(long)]
    pub connect: bool,
    /// Seconds allowed per connectivity probe.
    #[arg(long, default_value_t = 10.0, value_name = "SECONDS")]
    pub connect_timeout: f64,
    /// Print the summary as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub env: EnvArgs,
}

/// Exit codes: 0 loaded (and every probe connected); 1 a probe failed; 2 load/validation error
/// (including a component that cannot be loaded).
pub async fn run(args: CheckArgs) -> u8 {
    let cfg = match load(&args.target, args.strict, &args.env) {
        Ok(c) => c,
        Err(code) => return code,
    };
    for w in &cfg.warnings {
        eprintln!("onestep: warning: {w}");
    }
    let errors = component_errors(&cfg);
    if !errors.is_empty() {
        let target = args.target.display();
        for e in &errors {
            eprintln!("onestep: failed to load {target}: {e}");
        }
        return 2;
    }
    if args.json {
        match serde_json::to_string_pretty(&cfg.json_summary()) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("onestep: cannot render the summary: {e}");
                return 2;
            }
        }
    } else {
        print!("{}", cfg.summary());
    }
    if !args.connect {
        return 0;
    }
    if !(args.connect_timeout.is_finite() && args.connect_timeout > 0.0) {
        eprintln!("onestep: --connect-timeout must be a positive number");
        return 2;
    }
    let limit = Duration::from_secs_f64(args.connect_timeout);
    let mut seen = std::collections::BTreeSet::new();
    let mut ok = true;
    println!("Connectivity:");
    for source in cfg.sources.values() {
        if !seen.insert(backend_key(source)) {
            continue;
        }
        let line = match store_options(&cfg, source) {
            Err(e) => {
                ok = false;
                format!("failed ({e:#})")
            }
            Ok(opts) => match tokio::time::timeout(limit, probe(opts)).await {
                Ok(Ok(line)) => line,
                Ok(Err(e)) => {
                    ok = false;
                    format!("failed ({e})")
                }
                Err(_) => {
                    ok = false;
                    "timed_out".to_owned()
                }
            },
        };
        let display = match source.kind {
            onestep_config::DatabaseKind::Mysql => "MySQLExecutionSource",
            onestep_config::DatabaseKind::Postgres => "PostgresExecutionSource",
        };
        println!("- {}<{display}>: {line}", source.name);
    }
    println!("Connectivity: {}", if ok { "ok" } else { "failed" });
    if ok { 0 } else { 1 }
}

/// Loads every task's component into one runtime built as `onestep run` builds it; returns one
/// message per task whose component cannot be loaded (the message `onestep run` fails with).
fn component_errors(cfg: &AppConfig) -> Vec<String> {
    let runtime = match build_runtime(cfg) {
        Ok(r) => r,
        Err(e) => return vec![format!("{e:#}")],
    };
    cfg.tasks
        .iter()
        .filter_map(|task| {
            let sandbox = sandbox_settings(&task.sandbox, &cfg.env);
            load_task_handler(&runtime, task, &sandbox)
                .err()
                .map(|e| format!("{e:#}"))
        })
        .collect()
}

async fn probe(opts: StoreOptions) -> Result<String, onestep_core::ExecutionError> {
    let tables = opts.tables.clone();
    if opts.kind == onestep_config::DatabaseKind::Postgres {
        let backend = onestep_postgres::PgBackend::open(opts.postgres()).await?;
        let session = backend.session_state().await?;
        let line = format!(
            "connected server=PostgreSQL {} time_zone={} isolation={} tables={},{} created=[{}]",
            backend.server().version_string,
            session.time_zone,
            session.isolation,
            tables.executions,
            tables.attempts,
            backend.schema_report().created.join(",")
        );
        backend.close().await?;
        return Ok(line);
    }
    let backend = MySqlBackend::open(opts.mysql()).await?;
    let session = backend.session_state().await?;
    let line = format!(
        "connected server={} time_zone={} isolation={} tables={},{} created=[{}]",
        backend.server().version_string,
        session.time_zone,
        session.isolation,
        tables.executions,
        tables.attempts,
        backend.schema_report().created.join(",")
    );
    backend.close().await?;
    Ok(line)
}
