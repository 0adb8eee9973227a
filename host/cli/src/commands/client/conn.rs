//! How client commands reach the store: `--config FILE` (the `api:` section's connector,
//! tables and namespace) and/or `--dsn`/`--namespace` (env `ONESTEP_DSN`, `ONESTEP_NAMESPACE`),
//! `--table`/`--attempts-table`. Flags win over the file.

use std::path::PathBuf;

use crate::wiring::store::{Store, StoreOptions};
use onestep_config::{ApiAuth, LoadOptions};
use onestep_core::names::TableNames;
use onestep_core::{ExecutionClient, Limits};

use super::output::Failure;

/// Connection and output options shared by every client command.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ConnArgs {
    /// YAML app file whose `api:` section names the connector, tables and namespace.
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    /// MySQL/MariaDB (`mysql://user:pass@host:port/db`), PostgreSQL (`postgresql://…`) or
    /// embedded SQLite (`sqlite://./dir/x.db`, a file) URL; overrides the config's connector.
    #[arg(long, env = "ONESTEP_DSN", hide_env_values = true)]
    pub(crate) dsn: Option<String>,
    /// Namespace; overrides the config's `api.namespace` (required with tokens or `--dsn`).
    #[arg(long, env = "ONESTEP_NAMESPACE")]
    pub(crate) namespace: Option<String>,
    /// Executions table (default `onestep_executions` or the config's `api.table`).
    #[arg(long)]
    pub(crate) table: Option<String>,
    /// Attempts table (default `onestep_execution_attempts` or the config's `api.attempts_table`).
    #[arg(long)]
    pub(crate) attempts_table: Option<String>,
    /// Print JSON (the HTTP API's execution view) instead of human-readable text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// An open client and the backend to close afterwards.
pub(crate) struct Connected {
    /// The namespace-bound client.
    pub(crate) client: ExecutionClient,
    backend: Store,
}

impl Connected {
    /// The backend, for the operations outside the client (`purge`).
    pub(crate) fn backend(&self) -> &Store {
        &self.backend
    }

    /// Closes the pool.
    pub(crate) async fn close(self) {
        let _ = self.backend.close().await;
    }
}

/// Resolves the options and opens the backend (never creating tables).
pub(crate) async fn connect(args: &ConnArgs) -> Result<Connected, Failure> {
    let mut dsn = args.dsn.clone();
    let mut namespace = args.namespace.clone();
    let mut tables = TableNames::default();
    let mut limits = Limits::default();
    if let Some(path) = &args.config {
        let opts = LoadOptions {
            check_files: false,
            ..LoadOptions::default()
        };
        let config =
            onestep_config::load(path, &opts).map_err(|e| Failure::usage(e.to_string()))?;
        let api = config
            .api
            .as_ref()
            .ok_or_else(|| Failure::usage(format!("{}: no `api:` section", path.display())))?;
        if dsn.is_none() {
            let connector = config.connectors.get(&api.connector).ok_or_else(|| {
                Failure::usage(format!(
                    "api.connector: unknown connector resource '{}'",
                    api.connector
                ))
            })?;
            dsn = Some(connector.dsn.expose().to_owned());
        }
        if namespace.is_none()
            && let ApiAuth::Namespace(ns) = &api.auth
        {
            namespace = Some(ns.clone());
        }
        tables = TableNames {
            executions: api.table.clone(),
            attempts: api.attempts_table.clone(),
        };
        limits = api.settings.limits;
    }
    let dsn = dsn.ok_or_else(|| {
        Failure::usage("no database: pass --config FILE or --dsn URL (or set ONESTEP_DSN)")
    })?;
    let namespace = namespace.ok_or_else(|| {
        Failure::usage("no namespace: pass --namespace NS (or set ONESTEP_NAMESPACE)")
    })?;
    let tables = TableNames::new(
        args.table.clone().unwrap_or(tables.executions),
        args.attempts_table.clone().unwrap_or(tables.attempts),
    )
    .map_err(Failure::from)?;
    let mut opts = StoreOptions::new(dsn);
    opts.tables = tables;
    opts.auto_create = false;
    opts.limits = limits;
    opts.pool_max = 4;
    let backend = Store::open(&opts).await.map_err(Failure::from)?;
    let client =
        ExecutionClient::new(backend.executions(), &namespace, limits).map_err(Failure::from)?;
    Ok(Connected { client, backend })
}
