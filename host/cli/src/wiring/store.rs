//! The execution store behind a connector: one [`Backend`] handle (docs/postgres.md), so every
//! command opens, migrates, uses and closes MySQL/MariaDB or PostgreSQL through the same code.
//! [`open_backend`] is the one place that names the concrete backends (CONTRIBUTING.md,
//! "Adding a backend").

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use onestep_config::DatabaseKind;
use onestep_core::{Backend, ExecutionError, UpgradeReport};

/// The options of one store: the backend-neutral options of core plus which backend opens
/// them (the connector's kind; the DSN's scheme by default). Reads and writes of the options
/// go through to [`onestep_core::StoreOptions`].
#[derive(Debug, Clone)]
pub(crate) struct StoreOptions {
    /// Which backend.
    pub(crate) kind: DatabaseKind,
    /// What it opens with.
    pub(crate) store: onestep_core::StoreOptions,
}

impl Deref for StoreOptions {
    type Target = onestep_core::StoreOptions;

    fn deref(&self) -> &Self::Target {
        &self.store
    }
}

impl DerefMut for StoreOptions {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.store
    }
}

impl StoreOptions {
    /// Core's defaults for `dsn`, the backend picked by its scheme ([`kind_of_dsn`]).
    pub(crate) fn new(dsn: impl Into<String>) -> Self {
        let store = onestep_core::StoreOptions::new(dsn);
        StoreOptions {
            kind: kind_of_dsn(&store.dsn),
            store,
        }
    }
}

/// The database kind a DSN names by its scheme (`postgres://`, `postgresql[+driver]://` →
/// PostgreSQL, `sqlite://` → SQLite, anything else MySQL, whose parser reports a bad scheme).
pub(crate) fn kind_of_dsn(dsn: &str) -> DatabaseKind {
    let scheme = dsn.trim().split_once("://").map_or("", |(s, _)| s);
    if onestep_postgres::dsn::is_postgres_scheme(scheme) {
        DatabaseKind::Postgres
    } else if scheme == "sqlite" {
        DatabaseKind::Sqlite
    } else {
        DatabaseKind::Mysql
    }
}

/// Opens the backend of `kind`: the only code that names the concrete backends, one line each.
async fn open_backend(
    kind: DatabaseKind,
    opts: onestep_core::StoreOptions,
) -> Result<Arc<dyn Backend>, ExecutionError> {
    Ok(match kind {
        DatabaseKind::Mysql => Arc::new(onestep_mysql::MySqlBackend::open(opts).await?),
        DatabaseKind::Postgres => Arc::new(onestep_postgres::PgBackend::open(opts).await?),
        DatabaseKind::Sqlite => Arc::new(onestep_sqlite::SqliteBackend::open(opts).await?),
    })
}

/// An open execution store: the backend handle, whatever the backend.
#[derive(Debug, Clone)]
pub(crate) struct Store(Arc<dyn Backend>);

impl Deref for Store {
    type Target = dyn Backend;

    fn deref(&self) -> &Self::Target {
        self.0.as_ref()
    }
}

impl From<Arc<dyn Backend>> for Store {
    /// Wraps a backend opened elsewhere (the benchmarks open theirs with bench-only options).
    fn from(backend: Arc<dyn Backend>) -> Self {
        Store(backend)
    }
}

impl Store {
    /// Opens the backend `opts.kind` names.
    pub(crate) async fn open(opts: &StoreOptions) -> Result<Store, ExecutionError> {
        Ok(Store(open_backend(opts.kind, opts.store.clone()).await?))
    }

    /// Opens with `auto_create` and a one-connection pool (`onestep migrate`).
    async fn open_for_ddl(opts: &StoreOptions) -> Result<Store, ExecutionError> {
        let mut store = opts.store.clone();
        store.auto_create = true;
        store.pool_min = 0;
        store.pool_max = 1;
        Ok(Store(open_backend(opts.kind, store).await?))
    }

    /// Creates the table pair if missing, then closes; the names of the tables created.
    pub(crate) async fn migrate(opts: &StoreOptions) -> Result<Vec<String>, ExecutionError> {
        let store = Self::open_for_ddl(opts).await?;
        let created = store.tables_created();
        store.close().await?;
        Ok(created)
    }

    /// `onestep migrate --upgrade`: creates the table pair if missing, adds what the tables lack
    /// (docs/schema.md#upgrading-reference-tables), then closes.
    pub(crate) async fn upgrade(opts: &StoreOptions) -> Result<UpgradeReport, ExecutionError> {
        let store = Self::open_for_ddl(opts).await?;
        let report = store.0.upgrade().await;
        let closed = store.close().await;
        let report = report?;
        closed?;
        Ok(report)
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
            ("sqlite://./dev/x.db", DatabaseKind::Sqlite),
            ("sqlite:///abs/x.db", DatabaseKind::Sqlite),
        ] {
            assert_eq!(kind_of_dsn(dsn), kind, "{dsn}");
            assert_eq!(StoreOptions::new(dsn).kind, kind);
        }
    }
}
