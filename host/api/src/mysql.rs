//! Readiness of the MySQL/MariaDB backend for `GET /readyz`: the server answers and both
//! execution tables exist.

use async_trait::async_trait;
use mysql_async::prelude::Queryable;
use onestep_core::{BackendError, ConnectorKind, ExecutionError};
use onestep_mysql::MySqlBackend;

use crate::state::Readiness;

/// [`Readiness`] of a [`MySqlBackend`]: `SELECT 1 FROM <table> LIMIT 0` on both tables, with a
/// bounded wait for a connection.
#[derive(Debug, Clone)]
pub struct MySqlReadiness {
    backend: MySqlBackend,
    timeout: std::time::Duration,
}

impl MySqlReadiness {
    /// A probe over `backend` that gives up after 5 seconds.
    pub fn new(backend: MySqlBackend) -> Self {
        MySqlReadiness {
            backend,
            timeout: std::time::Duration::from_secs(5),
        }
    }
}

fn not_ready(kind: ConnectorKind, message: String) -> ExecutionError {
    ExecutionError::Backend(BackendError {
        backend: "mysql",
        operation: "ready",
        kind,
        message,
    })
}

#[async_trait]
impl Readiness for MySqlReadiness {
    async fn check(&self) -> Result<(), ExecutionError> {
        let tables = self.backend.tables();
        let probe = async {
            let mut conn = self.backend.pool().get_conn().await?;
            for table in [&tables.executions, &tables.attempts] {
                // Table names are validated identifiers (docs/semantics.md#tables-and-names); quoting keeps them literal.
                let sql = format!("SELECT 1 FROM `{}` LIMIT 0", table.replace('`', "``"));
                conn.query_drop(sql).await?;
            }
            Ok::<_, mysql_async::Error>(())
        };
        match tokio::time::timeout(self.timeout, probe).await {
            Ok(Ok(())) => Ok(()),
            // The driver's message can name the server but never the password (the DSN is not
            // part of driver errors); it is only logged by the caller.
            Ok(Err(mysql_async::Error::Server(e))) => Err(not_ready(
                ConnectorKind::Misconfigured,
                format!("server error {}: {}", e.code, e.message),
            )),
            Ok(Err(_)) => Err(not_ready(
                ConnectorKind::Disconnected,
                "cannot reach the database".into(),
            )),
            Err(_) => Err(not_ready(
                ConnectorKind::Transient,
                "timed out waiting for the database".into(),
            )),
        }
    }
}
