//! Throw-away databases for benchmarks: [`ScratchDatabase::create`] makes an empty database with
//! a random name on a server and gives the DSN that names it; [`ScratchDatabase::drop_database`]
//! removes it. Nothing else in the product creates or drops databases.

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Opts};
use onestep_core::store::{ScratchTarget, TxError, scratch_name};
use onestep_core::{ConnectorKind, ExecutionError};

use crate::dsn::parse_dsn;
use crate::errors::{OpError, backend_error};

/// An empty database created on a server, dropped by [`ScratchDatabase::drop_database`] (not
/// on drop: dropping needs the server).
pub struct ScratchDatabase {
    server: Opts,
    secrets: Vec<String>,
    target: ScratchTarget,
}

impl std::fmt::Debug for ScratchDatabase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.target, f)
    }
}

impl ScratchDatabase {
    /// Creates `<prefix><12 random hex digits>` over one connection to `server_url` (a DSN
    /// whose database part, if any, is ignored). The DSN of the new database keeps the scheme,
    /// credentials and query parameters of `server_url`.
    ///
    /// Errors ([`ExecutionError::Backend`], operation `create_database`) never carry the
    /// password; a `prefix` that is not a plain identifier is an invalid argument.
    pub async fn create(server_url: &str, prefix: &str) -> Result<Self, ExecutionError> {
        let name = scratch_name(
            prefix,
            |b| b.is_ascii_alphanumeric() || b == b'_',
            "letters, digits and underscores",
        )?;
        let op = "create_database";
        let parsed = parse_dsn(server_url)
            .map_err(|m| backend_error(op, ConnectorKind::Misconfigured, &m.to_string(), &[]))?;
        let secrets = parsed.secrets;
        let dsn = database_dsn(server_url, &name).map_err(|e| {
            backend_error(
                op,
                ConnectorKind::Misconfigured,
                &format!("invalid server URL: {e}"),
                &secrets,
            )
        })?;
        let mut conn = Conn::new(parsed.opts.clone()).await.map_err(|e| {
            backend_error(
                op,
                ConnectorKind::Disconnected,
                &format!("cannot connect to the server: {e}"),
                &secrets,
            )
        })?;
        let created = conn.query_drop(format!("CREATE DATABASE `{name}`")).await;
        conn.disconnect().await.ok();
        created.map_err(|e| OpError::from(e).into_execution_error(op, &secrets))?;
        Ok(ScratchDatabase {
            server: parsed.opts,
            secrets,
            target: ScratchTarget { name, dsn },
        })
    }

    /// The database's name.
    pub fn name(&self) -> &str {
        &self.target.name
    }

    /// A DSN naming the database (it carries the credentials of the server URL: never log it).
    pub fn dsn(&self) -> &str {
        &self.target.dsn
    }

    /// `DROP DATABASE IF EXISTS` over a new connection.
    pub async fn drop_database(self) -> Result<(), ExecutionError> {
        let dropped = async {
            let mut conn = Conn::new(self.server).await?;
            conn.query_drop(format!("DROP DATABASE IF EXISTS `{}`", self.target.name))
                .await?;
            conn.disconnect().await
        }
        .await;
        dropped.map_err(|e| OpError::from(e).into_execution_error("drop_database", &self.secrets))
    }
}

/// `server_url` with its path replaced by `/<name>` (scheme, credentials, host, port and query
/// kept).
fn database_dsn(server_url: &str, name: &str) -> Result<String, url::ParseError> {
    let mut url = url::Url::parse(server_url.trim())?;
    url.set_path(&format!("/{name}"));
    Ok(url.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dsn_names_the_database_and_keeps_the_rest() {
        for (server, dsn) in [
            (
                "mysql://root@127.0.0.1:3306/",
                "mysql://root@127.0.0.1:3306/db1",
            ),
            (
                "mysql://root@127.0.0.1:3306",
                "mysql://root@127.0.0.1:3306/db1",
            ),
            (
                "mysql://u:p%40ss@h:3307/other",
                "mysql://u:p%40ss@h:3307/db1",
            ),
            (
                "mysql+pymysql://u:p@h/?charset=utf8mb4",
                "mysql+pymysql://u:p@h/db1?charset=utf8mb4",
            ),
        ] {
            assert_eq!(database_dsn(server, "db1").unwrap(), dsn);
            assert_eq!(parse_dsn(dsn).unwrap().opts.db_name(), Some("db1"), "{dsn}");
        }
    }

    #[tokio::test]
    async fn refuses_a_prefix_that_is_not_an_identifier() {
        let e = ScratchDatabase::create("mysql://root@127.0.0.1:1/", "bad`name")
            .await
            .err();
        assert!(
            matches!(e, Some(ExecutionError::InvalidArgument(_))),
            "{e:?}"
        );
    }
}
