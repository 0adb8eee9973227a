//! The execution store behind a connector: one small enum over the two storage backends
//! (MySQL/MariaDB and PostgreSQL, docs/postgres.md), so every command opens, migrates, uses and
//! closes either through the same code. The ports themselves (`ExecutionStore`, `LeaseStore`,
//! `Readiness`, `StoreStats`) are trait objects; only opening and closing need the concrete type.

use std::sync::Arc;

use onestep_config::DatabaseKind;
use onestep_core::names::TableNames;
use onestep_core::ports::{ExecutionStore, LeaseStore, Readiness, StoreStats};
use onestep_core::{ExecutionError, Limits};
use onestep_mysql::{MySqlBackend, MySqlOptions};
use onestep_postgres::{PgBackend, PgOptions};

/// Backend-neutral options (the fields both backends share).
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// Which backend.
    pub kind: DatabaseKind,
    /// Its DSN (secret; never logged).
    pub dsn: String,
    /// The table pair.
    pub tables: TableNames,
    /// Create missing tables at open.
    pub auto_create: bool,
    /// Value size limits.
    pub limits: Limits,
    /// Per-claim cap of each maintenance step.
    pub reclaim_batch_size: u32,
    /// Idle connections kept (MySQL only; the PostgreSQL pool opens connections on demand).
    pub pool_min: usize,
    /// Pool bound.
    pub pool_max: usize,
    /// Store and read submits' traceparents (docs/observability.md#traces).
    pub traces: bool,
}

/// The database kind a DSN names by its scheme (`postgres://`, `postgresql[+driver]://` →
/// PostgreSQL, anything else MySQL, whose parser reports a bad scheme).
pub fn kind_of_dsn(dsn: &str) -> DatabaseKind {
    let scheme = dsn.trim().split_once("://").map_or("", |(s, _)| s);
    if onestep_postgres::dsn::is_postgres_scheme(scheme) {
        DatabaseKind::Postgres
    } else {
        DatabaseKind::Mysql
    }
}

impl StoreOptions {
    /// Defaults for `dsn` (kind from its scheme): default tables, `auto_create`, default limits,
    /// batch 100, pool 0..=10.
    pub fn new(dsn: impl Into<String>) -> Self {
        let dsn = dsn.into();
        StoreOptions {
            kind: kind_of_dsn(&dsn),
            dsn,
            tables: TableNames::default(),
            auto_create: true,
            limits: Limits::default(),
            reclaim_batch_size: 100,
            pool_min: 0,
            pool_max: 10,
            traces: false,
        }
    }

    /// The MySQL backend's options.
    pub fn mysql(&self) -> MySqlOptions {
        let mut o = MySqlOptions::new(self.dsn.clone());
        o.tables = self.tables.clone();
        o.auto_create = self.auto_create;
        o.limits = self.limits;
        o.reclaim_batch_size = self.reclaim_batch_size;
        o.pool_min = self.pool_min;
        o.pool_max = self.pool_max;
        o.traces = self.traces;
        o
    }

    /// The PostgreSQL backend's options.
    pub fn postgres(&self) -> PgOptions {
        let mut o = PgOptions::new(self.dsn.clone());
        o.tables = self.tables.clone();
        o.auto_create = self.auto_create;
        o.limits = self.limits;
        o.reclaim_batch_size = self.reclaim_batch_size;
        o.pool_max = self.pool_max;
        o.traces = self.traces;
        o
    }
}

/// An open execution store.
#[derive(Debug, Clone)]
pub enum Store {
    /// MySQL or MariaDB.
    Mysql(MySqlBackend),
    /// PostgreSQL.
    Postgres(PgBackend),
}

impl Store {
    /// Opens the backend `opts.kind` names.
    pub async fn open(opts: &StoreOptions) -> Result<Store, ExecutionError> {
        Ok(match opts.kind {
            DatabaseKind::Mysql => Store::Mysql(MySqlBackend::open(opts.mysql()).await?),
            DatabaseKind::Postgres => Store::Postgres(PgBackend::open(opts.postgres()).await?),
        })
    }

    /// Creates the table pair if missing, then closes; the names of the tables created.
    pub async fn migrate(opts: &StoreOptions) -> Result<Vec<String>, ExecutionError> {
        Ok(match opts.kind {
            DatabaseKind::Mysql => MySqlBackend::migrate(opts.mysql()).await?.created,
            DatabaseKind::Postgres => PgBackend::migrate(opts.postgres()).await?.created,
        })
    }

    /// The client-side port.
    pub fn executions(&self) -> Arc<dyn ExecutionStore> {
        match self {
            Store::Mysql(b) => Arc::new(b.clone()),
            Store::Postgres(b) => Arc::new(b.clone()),
        }
    }

    /// The worker-side port.
    pub fn leases(&self) -> Arc<dyn LeaseStore> {
        match self {
            Store::Mysql(b) => Arc::new(b.clone()),
            Store::Postgres(b) => Arc::new(b.clone()),
        }
    }

    /// The readiness probe.
    pub fn readiness(&self) -> Arc<dyn Readiness> {
        match self {
            Store::Mysql(b) => Arc::new(b.clone()),
            Store::Postgres(b) => Arc::new(b.clone()),
        }
    }

    /// The benchmark figures.
    pub fn stats(&self) -> &dyn StoreStats {
        match self {
            Store::Mysql(b) => b,
            Store::Postgres(b) => b,
        }
    }

    /// The server's version text.
    pub fn server_version(&self) -> String {
        match self {
            Store::Mysql(b) => b.server().version_string.clone(),
            Store::Postgres(b) => format!("PostgreSQL {}", b.server().version_string),
        }
    }

    /// The dashboard's overview figures and the API's gauge (docs/ui.md).
    pub fn insights(&self) -> Option<Arc<dyn onestep_core::ports::ExecutionInsights>> {
        match self {
            Store::Mysql(b) => Some(Arc::new(b.clone())),
            Store::Postgres(b) => Some(Arc::new(b.clone())),
        }
    }

    /// `onestep purge` (docs/cli.md#purge); `None` where the backend has none.
    pub fn retention(&self) -> Option<&dyn onestep_core::ports::Retention> {
        match self {
            Store::Mysql(b) => Some(b),
            Store::Postgres(b) => Some(b),
        }
    }

    /// Whether attempt diagnostics are persisted: their table exists and they are not turned
    /// off (docs/observability.md#attempt-diagnostics).
    pub fn diagnostics_persisted(&self) -> bool {
        match self {
            Store::Mysql(b) => b.schema_report().features.diagnostics_table,
            Store::Postgres(b) => b.schema_report().features.diagnostics_table,
        }
    }

    /// The MySQL backend, when this is one (for the MySQL-only tooling: `--upgrade`, history).
    pub fn as_mysql(&self) -> Option<&MySqlBackend> {
        match self {
            Store::Mysql(b) => Some(b),
            Store::Postgres(_) => None,
        }
    }

    /// Closes the pool.
    pub async fn close(&self) -> Result<(), ExecutionError> {
        match self {
            Store::Mysql(b) => b.close().await,
            Store::Postgres(b) => b.close().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dsn_scheme_picks_the_backend() {
        for (dsn, kind) in [
            ("mysql://root@127.0.0.1:3306/db", DatabaseKind::Mysql),
            ("mysql+asyncmy://root@h/db", DatabaseKind::Mysql),
            (
                "postgres://postgres@127.0.0.1:5432/db",
                DatabaseKind::Postgres,
            ),
            ("postgresql+psycopg://u@h/db", DatabaseKind::Postgres),
            ("postgresql://u@h/db", DatabaseKind::Postgres),
        ] {
            assert_eq!(kind_of_dsn(dsn), kind, "{dsn}");
            assert_eq!(StoreOptions::new(dsn).kind, kind);
        }
    }
}
