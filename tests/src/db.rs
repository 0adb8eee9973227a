//! The test servers and one database per test on them: which servers the environment names
//! ([`servers`], [`Servers`]), the storage [`Backend`] each speaks, and [`TestDb`] (create, open,
//! drop).

use anyhow::{Context, Result};
use chrono::NaiveDateTime;
use mysql_async::prelude::Queryable;
use onestep_postgres::ScratchDatabase;
use uuid::Uuid;

use crate::Attempt;

/// The environment variable the `config/e2e/` files take their connector kind from: `mysql`
/// (the default) or `postgres`. The source kind is `${ONESTEP_E2E_BACKEND}_execution_source`.
pub const BACKEND_VAR: &str = "ONESTEP_E2E_BACKEND";

/// Which storage backend a test server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// MariaDB or MySQL (`onestep-mysql`).
    Mysql,
    /// PostgreSQL (`onestep-postgres`).
    Postgres,
}

impl Backend {
    /// The backend of a server label from [`servers`].
    pub fn of(server: &str) -> Backend {
        if server == "postgres" {
            Backend::Postgres
        } else {
            Backend::Mysql
        }
    }

    /// The connector `type` of this backend (the value of [`BACKEND_VAR`]).
    pub fn kind(self) -> &'static str {
        match self {
            Backend::Mysql => "mysql",
            Backend::Postgres => "postgres",
        }
    }
}

/// Which servers a case runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Servers {
    /// MariaDB, MySQL and PostgreSQL.
    All,
    /// MariaDB and MySQL only: for cases that need a feature the PostgreSQL backend lacks
    /// today (each call site names it).
    MysqlFamily,
}

/// Every server the suite runs against: `(label, root URL)`, labels `mariadb`, `mysql` and
/// `postgres`. MariaDB is always required; MySQL unless `ONESTEP_TEST_SKIP_MYSQL=1`;
/// PostgreSQL unless `ONESTEP_TEST_SKIP_POSTGRES=1`.
pub fn servers() -> Result<Vec<(&'static str, String)>> {
    servers_of(Servers::All)
}

/// The servers of `which` (see [`servers`]).
pub fn servers_of(which: Servers) -> Result<Vec<(&'static str, String)>> {
    let mut out = Vec::new();
    let maria = std::env::var("ONESTEP_TEST_MARIADB_URL").context(
        "ONESTEP_TEST_MARIADB_URL is not set: run the tests through scripts/test.sh (it starts the databases)",
    )?;
    out.push(("mariadb", maria));
    if std::env::var("ONESTEP_TEST_SKIP_MYSQL").as_deref() != Ok("1") {
        let mysql = std::env::var("ONESTEP_TEST_MYSQL_URL").context(
            "ONESTEP_TEST_MYSQL_URL is not set: run the tests through scripts/test.sh, or set ONESTEP_TEST_SKIP_MYSQL=1",
        )?;
        out.push(("mysql", mysql));
    }
    if which == Servers::All && std::env::var("ONESTEP_TEST_SKIP_POSTGRES").as_deref() != Ok("1") {
        let pg = std::env::var("ONESTEP_TEST_POSTGRES_URL").context(
            "ONESTEP_TEST_POSTGRES_URL is not set: run the tests through scripts/test.sh, or set ONESTEP_TEST_SKIP_POSTGRES=1",
        )?;
        out.push(("postgres", pg));
    }
    Ok(out)
}

/// A database created for one test and dropped by [`TestDb::drop_db`].
#[derive(Debug)]
pub struct TestDb {
    /// Server label (`mariadb`, `mysql` or `postgres`).
    pub server: &'static str,
    /// Database name.
    pub name: String,
    /// DSN of the database, root (superuser) user.
    pub dsn: String,
    admin: Admin,
}

/// The server-side handle of a [`TestDb`], per backend.
#[derive(Debug)]
enum Admin {
    Mysql(mysql_async::Pool),
    Postgres(ScratchDatabase),
}

/// Picks the SQL text of `db`'s backend: the two dialects of one statement side by side.
macro_rules! per_backend {
    ($db:expr, mysql: $my:expr, postgres: $pg:expr $(,)?) => {
        match $db.backend() {
            Backend::Mysql => $my,
            Backend::Postgres => $pg,
        }
    };
}

impl TestDb {
    /// Creates `onestep_e2e_<random>` on the server at `root_url`.
    pub async fn create(server: &'static str, root_url: &str) -> Result<TestDb> {
        if Backend::of(server) == Backend::Postgres {
            let scratch = ScratchDatabase::create(root_url, "onestep_e2e_")
                .await
                .context("cannot create the PostgreSQL test database")?;
            return Ok(TestDb {
                server,
                name: scratch.name().to_owned(),
                dsn: scratch.dsn().to_owned(),
                admin: Admin::Postgres(scratch),
            });
        }
        let name = format!(
            "onestep_e2e_{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        );
        let admin = mysql_async::Pool::from_url(root_url).context("bad test server URL")?;
        let mut conn = admin
            .get_conn()
            .await
            .context("cannot connect to the test server")?;
        conn.query_drop(format!("CREATE DATABASE `{name}` CHARACTER SET utf8mb4"))
            .await?;
        drop(conn);
        let base = root_url.trim_end_matches('/');
        Ok(TestDb {
            server,
            dsn: format!("{base}/{name}"),
            name,
            admin: Admin::Mysql(admin),
        })
    }

    /// The backend of this database's server.
    pub fn backend(&self) -> Backend {
        Backend::of(self.server)
    }

    /// A fresh PostgreSQL connection to this database (its driver task ends with the client).
    async fn pg(&self) -> Result<tokio_postgres::Client> {
        let (client, connection) = tokio_postgres::connect(&self.dsn, tokio_postgres::NoTls)
            .await
            .context("cannot connect to the PostgreSQL test database")?;
        tokio::spawn(connection);
        Ok(client)
    }

    /// Runs a query as root in this database and returns the first column of every row as text.
    /// The text is sent as is: where the dialects differ, use a helper that holds both.
    pub async fn query_strings(&self, sql: &str) -> Result<Vec<Option<String>>> {
        let pool = match &self.admin {
            Admin::Mysql(pool) => pool,
            Admin::Postgres(_) => {
                let client = self.pg().await?;
                let mut out = Vec::new();
                for msg in client.simple_query(sql).await? {
                    if let tokio_postgres::SimpleQueryMessage::Row(row) = msg {
                        out.push(row.get(0).map(str::to_owned));
                    }
                }
                return Ok(out);
            }
        };
        let mut conn = pool.get_conn().await?;
        conn.query_drop(format!("USE `{}`", self.name)).await?;
        let rows: Vec<mysql_async::Row> = conn.query(sql).await?;
        Ok(rows
            .into_iter()
            .map(|mut r| {
                r.take_opt::<Option<String>, _>(0)
                    .and_then(|v| v.ok())
                    .flatten()
            })
            .collect())
    }

    /// The attempt rows of one execution, by attempt number.
    pub async fn attempts(&self, execution_id: Uuid) -> Result<Vec<Attempt>> {
        let pool = match &self.admin {
            Admin::Mysql(pool) => pool,
            Admin::Postgres(_) => return self.pg_attempts(execution_id).await,
        };
        let mut conn = pool.get_conn().await?;
        conn.query_drop(format!("USE `{}`", self.name)).await?;
        type Row = (
            u32,
            String,
            String,
            Option<String>,
            Option<String>,
            NaiveDateTime,
            NaiveDateTime,
            Option<NaiveDateTime>,
        );
        let rows: Vec<Row> = conn
            .exec(
                "SELECT attempt_no, status, worker_id, \
                   JSON_UNQUOTE(JSON_EXTRACT(error, '$.kind')), \
                   JSON_UNQUOTE(JSON_EXTRACT(error, '$.exception_type')), \
                   started_at, heartbeat_at, finished_at \
                 FROM onestep_execution_attempts WHERE execution_id = ? ORDER BY attempt_no",
                (execution_id.simple().to_string(),),
            )
            .await?;
        Ok(rows
            .into_iter()
            .map(|r| Attempt {
                attempt_no: r.0,
                status: r.1,
                worker_id: r.2,
                error_kind: r.3.filter(|k| k != "null"),
                exception_type: r.4.filter(|k| k != "null"),
                started_at: r.5,
                heartbeat_at: r.6,
                finished_at: r.7,
            })
            .collect())
    }

    /// [`attempts`](Self::attempts) on PostgreSQL (native uuid, jsonb, timestamptz).
    async fn pg_attempts(&self, execution_id: Uuid) -> Result<Vec<Attempt>> {
        use chrono::{DateTime, Utc};
        let client = self.pg().await?;
        let rows = client
            .query(
                "SELECT attempt_no, status, worker_id, error->>'kind', \
                   error->>'exception_type', started_at, heartbeat_at, finished_at \
                 FROM onestep_execution_attempts WHERE execution_id = $1 ORDER BY attempt_no",
                &[&execution_id],
            )
            .await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let no: i32 = r.try_get(0)?;
            let started: DateTime<Utc> = r.try_get(5)?;
            let heartbeat: DateTime<Utc> = r.try_get(6)?;
            let finished: Option<DateTime<Utc>> = r.try_get(7)?;
            out.push(Attempt {
                attempt_no: u32::try_from(no).context("negative attempt_no")?,
                status: r.try_get(1)?,
                worker_id: r.try_get(2)?,
                error_kind: r.try_get(3)?,
                exception_type: r.try_get(4)?,
                started_at: started.naive_utc(),
                heartbeat_at: heartbeat.naive_utc(),
                finished_at: finished.map(|f| f.naive_utc()),
            });
        }
        Ok(out)
    }

    /// How many rows of `table` (`executions` or `execution_attempts`) have `status`.
    pub async fn count_status(&self, table: &str, status: &str) -> Result<u64> {
        let sql = per_backend!(self,
            mysql: format!("SELECT CAST(COUNT(*) AS CHAR) FROM onestep_{table} WHERE status = '{status}'"),
            postgres: format!("SELECT COUNT(*)::text FROM onestep_{table} WHERE status = '{status}'"),
        );
        let rows = self.query_strings(&sql).await?;
        let n = rows.first().cloned().flatten().unwrap_or_default();
        n.parse().context("COUNT(*) is not a number")
    }

    /// How many rows `table` (`executions`, `execution_attempts`, …) has.
    pub async fn count_rows(&self, table: &str) -> Result<u64> {
        let sql = per_backend!(self,
            mysql: format!("SELECT CAST(COUNT(*) AS CHAR) FROM onestep_{table}"),
            postgres: format!("SELECT COUNT(*)::text FROM onestep_{table}"),
        );
        let rows = self.query_strings(&sql).await?;
        let n = rows.first().cloned().flatten().unwrap_or_default();
        n.parse().context("COUNT(*) is not a number")
    }

    /// Steals the lease of execution `id`: its `lease_token` becomes `thief` (32 hex digits),
    /// as another worker's claim would (docs/lease-protocol.md).
    pub async fn steal_lease(&self, id: Uuid, thief: &str) -> Result<()> {
        let id = id.simple();
        // Both servers parse the unhyphenated text into their uuid column (PostgreSQL casts the
        // untyped literal; MariaDB's native uuid and MySQL's CHAR(32) take it as is).
        let sql =
            format!("UPDATE onestep_executions SET lease_token = '{thief}' WHERE id = '{id}'");
        self.query_strings(&sql).await?;
        Ok(())
    }

    /// `status|lease token (32 hex digits)|result (or NULL)` of execution `id`, one row.
    pub async fn lease_row(&self, id: Uuid) -> Result<Vec<Option<String>>> {
        let id = id.simple();
        let sql = per_backend!(self,
            // REPLACE: MariaDB's native uuid column reads back hyphenated.
            mysql: format!(
                "SELECT CONCAT(status, '|', REPLACE(lease_token, '-', ''), '|', \
                 COALESCE(result, 'NULL')) FROM onestep_executions WHERE id = '{id}'"
            ),
            postgres: format!(
                "SELECT CONCAT(status, '|', REPLACE(lease_token::text, '-', ''), '|', \
                 COALESCE(result::text, 'NULL')) FROM onestep_executions WHERE id = '{id}'"
            ),
        );
        self.query_strings(&sql).await
    }

    /// Drops the database.
    pub async fn drop_db(self) -> Result<()> {
        match self.admin {
            Admin::Mysql(admin) => {
                let mut conn = admin.get_conn().await?;
                conn.query_drop(format!("DROP DATABASE IF EXISTS `{}`", self.name))
                    .await?;
                drop(conn);
                admin.disconnect().await?;
            }
            Admin::Postgres(scratch) => scratch
                .drop_database()
                .await
                .context("cannot drop the PostgreSQL test database")?,
        }
        Ok(())
    }
}
