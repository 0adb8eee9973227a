//! Throw-away databases for tests and benchmarks: [`ScratchDatabase::create`] makes an empty
//! database with a random name on a server and gives the DSN that names it;
//! [`ScratchDatabase::drop_database`] removes it. Nothing else in the product creates or drops
//! databases.

use onestep_core::store::{ScratchTarget, TxError, scratch_name};
use onestep_core::{ConnectorKind, ExecutionError};

use crate::dsn::parse_dsn;
use crate::errors::{OpError, backend_error};

/// An empty database created on a server, dropped by [`ScratchDatabase::drop_database`] (not
/// on drop: dropping needs the server).
pub struct ScratchDatabase {
    server_dsn: String,
    secrets: Vec<String>,
    target: ScratchTarget,
}

impl std::fmt::Debug for ScratchDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.target, f)
    }
}

/// `url` with its database replaced by `db` (scheme, credentials and query kept); `None` when
/// `url` is not a URL.
fn with_database(url: &str, db: &str) -> Option<String> {
    let (scheme, rest) = url.trim().split_once("://")?;
    let (base, query) = match rest.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (rest, None),
    };
    let authority = base.split('/').next().unwrap_or_default();
    let mut out = format!("{scheme}://{authority}/{db}");
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    Some(out)
}

async fn on_server(server_dsn: &str, sql: &str, op: &'static str) -> Result<(), ExecutionError> {
    let parsed = parse_dsn(server_dsn)
        .map_err(|m| backend_error(op, ConnectorKind::Misconfigured, &m.to_string(), &[]))?;
    let secrets = parsed.secrets.clone();
    let mut config = parsed.config.clone();
    config.options("");
    config.ssl_mode(tokio_postgres::config::SslMode::Disable);
    let run = async {
        let (client, connection) = config.connect(tokio_postgres::NoTls).await?;
        let task = tokio::spawn(connection);
        let r = client.batch_execute(sql).await;
        drop(client);
        let _ = task.await;
        r
    };
    run.await
        .map_err(|e| OpError::Db(e).into_execution_error(op, &secrets))
}

impl ScratchDatabase {
    /// Creates `<prefix><12 random hex digits>` over one connection to `server_url` (a DSN
    /// whose database part, if any, is replaced by `postgres` for the maintenance connection).
    /// The DSN of the new database keeps the scheme, credentials and query parameters of
    /// `server_url`. Scratch connections never use TLS (tests and benchmarks on loopback).
    pub async fn create(server_url: &str, prefix: &str) -> Result<Self, ExecutionError> {
        let name = scratch_name(
            prefix,
            |b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_',
            "lower-case letters, digits and underscores",
        )?;
        let op = "create_database";
        let bad = |e: &str| {
            backend_error(
                op,
                ConnectorKind::Misconfigured,
                &format!("invalid server URL: {e}"),
                &[],
            )
        };
        let server_dsn = with_database(server_url, "postgres").ok_or_else(|| bad("not a URL"))?;
        let dsn = with_database(server_url, &name).ok_or_else(|| bad("not a URL"))?;
        let secrets = parse_dsn(&server_dsn)
            .map_err(|m| backend_error(op, ConnectorKind::Misconfigured, &m.to_string(), &[]))?
            .secrets;
        on_server(&server_dsn, &format!("CREATE DATABASE \"{name}\""), op).await?;
        Ok(ScratchDatabase {
            server_dsn,
            secrets,
            target: ScratchTarget { name, dsn },
        })
    }

    /// The DSN naming the new database.
    pub fn dsn(&self) -> &str {
        &self.target.dsn
    }

    /// The database name.
    pub fn name(&self) -> &str {
        &self.target.name
    }

    /// Drops the database (`WITH (FORCE)`: connections still open to it are ended).
    pub async fn drop_database(self) -> Result<(), ExecutionError> {
        let _ = &self.secrets;
        on_server(
            &self.server_dsn,
            &format!(
                "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
                self.target.name
            ),
            "drop_database",
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn database_is_replaced_and_the_rest_kept() {
        assert_eq!(
            with_database("postgres://u:p@h:5432/", "x").unwrap(),
            "postgres://u:p@h:5432/x"
        );
        assert_eq!(
            with_database("postgresql+psycopg://u@h/old?sslmode=disable", "x").unwrap(),
            "postgresql+psycopg://u@h/x?sslmode=disable"
        );
        assert_eq!(
            with_database("postgres://h", "x").unwrap(),
            "postgres://h/x"
        );
    }
}
