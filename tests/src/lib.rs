//! End-to-end test support for onestep: per-test databases on the real test servers, the
//! `onestep` binary as a child process, the example guest components, and polling helpers.
//!
//! The worker tests build on [`Env`]: one database per server and test, a client in the
//! `e2e` namespace, and worker processes on `config/e2e/worker.yaml`. [`on_each_server`] runs
//! one case against every server (concurrently, or exclusively for CPU-heavy cases), drops the
//! database afterwards, and prints the workers' logs when a case fails.
//!
//! Environment (set by `scripts/test.sh`): `ONESTEP_TEST_MARIADB_URL`, `ONESTEP_TEST_MYSQL_URL`
//! and `ONESTEP_TEST_POSTGRES_URL` (root URLs of the three servers; a missing one fails the
//! test unless `ONESTEP_TEST_SKIP_MYSQL=1` / `ONESTEP_TEST_SKIP_POSTGRES=1`), `ONESTEP_BIN`
//! (path of the built `onestep` binary; defaults to `target/debug/onestep`).
//!
//! The configs under `config/e2e/` name their connector and source kinds through
//! [`BACKEND_VAR`] (`type: "${ONESTEP_E2E_BACKEND:-mysql}"`, `type:
//! "${ONESTEP_E2E_BACKEND:-mysql}_execution_source"`), so one file serves every server and the
//! connector kind always matches the source kind; [`Env::onestep_env`] sets it with the DSN
//! (docs/test-databases.md#postgresql-in-the-e2e-suite).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use chrono::NaiveDateTime;
use mysql_async::prelude::Queryable;
use onestep_core::request::SubmitRequest;
use onestep_core::{Execution, ExecutionClient, ExecutionStatus, Limits};
use onestep_mysql::{MySqlBackend, StoreOptions};
use onestep_postgres::{PgBackend, ScratchDatabase};
use serde_json::Value;
use uuid::Uuid;

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

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

/// Path of the `onestep` binary (`ONESTEP_BIN`, else `target/debug/onestep`).
pub fn onestep_bin() -> Result<PathBuf> {
    let path = match std::env::var_os("ONESTEP_BIN") {
        Some(p) => PathBuf::from(p),
        None => {
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| repo_root().join("target"));
            target.join("debug").join("onestep")
        }
    };
    if !path.is_file() {
        bail!(
            "the onestep binary is missing at {}: build it first (`cargo build -p onestep-cli`, done by scripts/test.sh)",
            path.display()
        );
    }
    Ok(path)
}

/// Path of an example guest component, building the guests once if it is missing.
pub fn guest(name: &str) -> Result<PathBuf> {
    let path = repo_root()
        .join("guest-examples")
        .join("out")
        .join(format!("{name}.wasm"));
    if !path.is_file() {
        // Only the Python and JavaScript guests need their (slower) toolchains.
        let skip = |yes: bool| if yes { "1" } else { "0" };
        let status = Command::new("bash")
            .arg(repo_root().join("scripts").join("build-guests.sh"))
            .env("SKIP_PYTHON", skip(!name.starts_with("python")))
            .env("SKIP_JS", skip(!name.starts_with("js-")))
            .status()
            .context("cannot run scripts/build-guests.sh")?;
        if !status.success() || !path.is_file() {
            bail!(
                "building the guest components did not produce {}",
                path.display()
            );
        }
    }
    Ok(path)
}

/// Runs `onestep ARGS…` to completion and returns (exit code, stdout, stderr).
pub fn run_cli(args: &[&str], envs: &[(&str, &str)]) -> Result<(i32, String, String)> {
    let out = Command::new(onestep_bin()?)
        .args(args)
        .envs(envs.iter().copied())
        .output()
        .context("cannot run onestep")?;
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// A running `onestep run CONFIG` process; its stderr goes to a log file kept for diagnosis.
#[derive(Debug)]
pub struct WorkerProcess {
    child: Child,
    /// Where the worker's output goes.
    pub log_path: PathBuf,
}

impl WorkerProcess {
    /// Starts `onestep run <config>` with extra environment variables.
    pub fn spawn(config: &Path, envs: &[(&str, &str)], log_dir: &Path) -> Result<Self> {
        Self::spawn_with_args(config, envs, &[], log_dir)
    }

    /// [`spawn`](Self::spawn) with extra `onestep run` arguments (before the file).
    pub fn spawn_with_args(
        config: &Path,
        envs: &[(&str, &str)],
        args: &[&str],
        log_dir: &Path,
    ) -> Result<Self> {
        let log_path = log_dir.join(format!("worker-{}.log", uuid::Uuid::new_v4().simple()));
        let log = std::fs::File::create(&log_path)?;
        let child = Command::new(onestep_bin()?)
            .arg("run")
            .args(args)
            .arg(config)
            .envs(envs.iter().copied())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .spawn()
            .context("cannot start the worker")?;
        Ok(WorkerProcess { child, log_path })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal (`TERM`, `KILL`, `INT`) with the `kill` command.
    pub fn signal(&self, sig: &str) -> Result<()> {
        let status = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()?;
        if !status.success() {
            bail!("kill -{sig} failed");
        }
        Ok(())
    }

    /// Waits up to `limit` for the process to exit; returns its exit code (None if killed by
    /// a signal). Errors when it is still running after `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> Result<Option<i32>> {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait()? {
                return Ok(status.code());
            }
            if Instant::now() >= deadline {
                bail!("worker still running after {limit:?}; log: {}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The worker's output so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Polls `probe` every 25 ms until it returns `Some`, or fails after `limit` with `what`.
pub async fn wait_for<T, F, Fut>(what: &str, limit: Duration, mut probe: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = probe().await? {
            return Ok(v);
        }
        if Instant::now() >= deadline {
            bail!("timed out after {limit:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// One row of `onestep_execution_attempts` (instants are naive UTC, as stored).
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    /// 1-based attempt number.
    pub attempt_no: u32,
    /// `running`, `succeeded`, `retrying`, `failed`, `cancelled` or `lease_lost`.
    pub status: String,
    /// The worker that claimed it.
    pub worker_id: String,
    /// `error.kind` (`error`, `timeout`, `cancelled`), if an error object was written.
    pub error_kind: Option<String>,
    /// `error.exception_type`, if an error object was written.
    pub exception_type: Option<String>,
    /// Claim instant.
    pub started_at: NaiveDateTime,
    /// Claim instant, then every successful heartbeat.
    pub heartbeat_at: NaiveDateTime,
    /// When the attempt ended.
    pub finished_at: Option<NaiveDateTime>,
}

/// The statuses of `attempts`, in order.
pub fn statuses(attempts: &[Attempt]) -> Vec<&str> {
    attempts.iter().map(|a| a.status.as_str()).collect()
}

/// Seconds from `a` to `b` (negative when `b` is earlier).
pub fn secs_between(a: NaiveDateTime, b: NaiveDateTime) -> f64 {
    (b - a).num_microseconds().unwrap_or(i64::MAX) as f64 / 1e6
}

/// A YAML file under `config/e2e/`.
pub fn e2e_config(name: &str) -> PathBuf {
    repo_root().join("config").join("e2e").join(name)
}

/// The namespace of every execution source in `config/e2e/worker.yaml`.
pub const NAMESPACE: &str = "e2e";

/// One test case's world on one server: its own database (tables created), a client in
/// [`NAMESPACE`], and the worker processes it started (killed when dropped).
pub struct Env {
    /// The database of this case.
    pub db: TestDb,
    /// A client bound to [`NAMESPACE`], on this server's backend.
    pub client: ExecutionClient,
    store: Store,
    logs: tempfile::TempDir,
    config: PathBuf,
    worker_logs: Mutex<Vec<PathBuf>>,
}

impl std::fmt::Debug for Env {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Env")
            .field("db", &self.db)
            .finish_non_exhaustive()
    }
}

impl Env {
    /// Creates the database on `root_url`, opens a backend on it (creating the tables) and a
    /// client; workers will run `config`.
    pub async fn new(server: &'static str, root_url: &str, config: &Path) -> Result<Env> {
        let db = TestDb::create(server, root_url).await?;
        let store = match Store::open(&db).await {
            Ok(store) => store,
            Err(e) => {
                let _ = db.drop_db().await;
                return Err(e);
            }
        };
        let client = ExecutionClient::new(store.executions(), NAMESPACE, Limits::default())?;
        Ok(Env {
            db,
            client,
            store,
            logs: tempfile::tempdir()?,
            config: config.to_path_buf(),
            worker_logs: Mutex::new(Vec::new()),
        })
    }

    /// The server label.
    pub fn server(&self) -> &'static str {
        self.db.server
    }

    /// The backend of this case's server.
    pub fn backend(&self) -> Backend {
        self.db.backend()
    }

    /// The environment every `onestep` process of this case needs with a `config/e2e/` file:
    /// `ONESTEP_DSN` (this database) and [`BACKEND_VAR`] (the connector and source kinds).
    pub fn onestep_env(&self) -> [(&'static str, &str); 2] {
        [
            ("ONESTEP_DSN", self.db.dsn.as_str()),
            (BACKEND_VAR, self.backend().kind()),
        ]
    }

    /// Starts `onestep run <config>` on this database with `worker_id`.
    pub fn spawn_worker(&self, worker_id: &str) -> Result<WorkerProcess> {
        self.spawn_worker_with(worker_id, &[])
    }

    /// [`spawn_worker`](Self::spawn_worker) with extra `onestep run` arguments.
    pub fn spawn_worker_with(&self, worker_id: &str, args: &[&str]) -> Result<WorkerProcess> {
        self.spawn_worker_env(worker_id, &[], args)
    }

    /// [`spawn_worker_with`](Self::spawn_worker_with) with extra environment variables (e.g.
    /// a secret the config interpolates).
    pub fn spawn_worker_env(
        &self,
        worker_id: &str,
        envs: &[(&str, &str)],
        args: &[&str],
    ) -> Result<WorkerProcess> {
        let mut all = self.onestep_env().to_vec();
        all.push(("ONESTEP_WORKER_ID", worker_id));
        all.extend_from_slice(envs);
        let worker = WorkerProcess::spawn_with_args(&self.config, &all, args, self.logs.path())?;
        if let Ok(mut logs) = self.worker_logs.lock() {
            logs.push(worker.log_path.clone());
        }
        Ok(worker)
    }

    /// Submits `payload` to `task` (no idempotency key).
    pub async fn submit(&self, task: &str, payload: Value) -> Result<Execution> {
        let request = SubmitRequest {
            task_name: task.to_owned(),
            payload,
            ..SubmitRequest::default()
        };
        Ok(self.client.submit(&request).await?)
    }

    /// The current snapshot of `id` (an error when it is missing).
    pub async fn get(&self, id: Uuid) -> Result<Execution> {
        self.client
            .get(id)
            .await?
            .ok_or_else(|| anyhow!("execution {id} not found"))
    }

    /// Waits up to `limit` until `id` has one of `wanted`; fails early when it reaches another
    /// terminal status.
    pub async fn wait_status(
        &self,
        id: Uuid,
        wanted: &[ExecutionStatus],
        limit: Duration,
    ) -> Result<Execution> {
        let what = format!("[{}] execution {id} to be {wanted:?}", self.server());
        wait_for(&what, limit, || async {
            let e = self.get(id).await?;
            if wanted.contains(&e.status) {
                return Ok(Some(e));
            }
            if e.terminal() {
                bail!("{what}: it ended {} (error {:?})", e.status, e.error);
            }
            Ok(None)
        })
        .await
    }

    /// Waits up to `limit` until `id` has an attempt row matching `pred`; returns all rows.
    pub async fn wait_attempts(
        &self,
        id: Uuid,
        what: &str,
        limit: Duration,
        pred: impl Fn(&[Attempt]) -> bool,
    ) -> Result<Vec<Attempt>> {
        let what = format!("[{}] {what}", self.server());
        wait_for(&what, limit, || async {
            let rows = self.db.attempts(id).await?;
            Ok(pred(&rows).then_some(rows))
        })
        .await
    }

    /// Everything the workers of this case logged, for diagnosis.
    pub fn worker_logs(&self) -> String {
        let paths = self
            .worker_logs
            .lock()
            .map(|l| l.clone())
            .unwrap_or_default();
        let mut out = String::new();
        for p in paths {
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            out.push_str(&format!("----- {}\n{text}", p.display()));
        }
        out
    }

    /// Closes the backend and drops the database.
    pub async fn finish(self) -> Result<()> {
        let _ = self.store.close().await;
        self.db.drop_db().await
    }
}

/// The open backend behind an [`Env`]'s client.
#[derive(Debug, Clone)]
enum Store {
    Mysql(MySqlBackend),
    Postgres(PgBackend),
}

impl Store {
    /// Opens the backend of `db`'s server on it (creating the tables).
    async fn open(db: &TestDb) -> Result<Store> {
        Ok(match db.backend() {
            Backend::Mysql => Store::Mysql(
                MySqlBackend::open(StoreOptions::new(db.dsn.clone()))
                    .await
                    .context("cannot open the MySQL backend")?,
            ),
            Backend::Postgres => Store::Postgres(
                PgBackend::open(StoreOptions::new(db.dsn.clone()))
                    .await
                    .context("cannot open the PostgreSQL backend")?,
            ),
        })
    }

    fn executions(&self) -> Arc<dyn onestep_core::ports::ExecutionStore> {
        match self {
            Store::Mysql(b) => Arc::new(b.clone()),
            Store::Postgres(b) => Arc::new(b.clone()),
        }
    }

    async fn close(&self) -> Result<()> {
        match self {
            Store::Mysql(b) => b.close().await?,
            Store::Postgres(b) => b.close().await?,
        }
        Ok(())
    }
}

/// How [`on_each_server`] schedules a case's servers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Schedule {
    /// Every server at once, alongside other tests.
    Concurrent,
    /// One server after the other, while no other case of this binary runs (for cases that
    /// measure behaviour under CPU load).
    Exclusive,
}

static CPU: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// Runs `case` against every server of [`servers`] (MariaDB, MySQL and PostgreSQL) with a
/// fresh [`Env`] on `config`, then drops the databases. Prints each server's duration; on
/// failure prints that server's worker logs and fails with every server's error.
pub async fn on_each_server<F, Fut>(
    name: &str,
    config: &Path,
    schedule: Schedule,
    case: F,
) -> Result<()>
where
    F: Fn(Arc<Env>) -> Fut,
    Fut: Future<Output = Result<()>> + Send + 'static,
{
    on_servers(Servers::All, name, config, schedule, case).await
}

/// [`on_each_server`] on the servers of `which` only; [`Servers::MysqlFamily`] is for cases
/// that need a feature the PostgreSQL backend lacks (name it at the call site).
pub async fn on_servers<F, Fut>(
    which: Servers,
    name: &str,
    config: &Path,
    schedule: Schedule,
    case: F,
) -> Result<()>
where
    F: Fn(Arc<Env>) -> Fut,
    Fut: Future<Output = Result<()>> + Send + 'static,
{
    let _shared = match schedule {
        Schedule::Concurrent => Some(CPU.read().await),
        Schedule::Exclusive => None,
    };
    let _exclusive = match schedule {
        Schedule::Concurrent => None,
        Schedule::Exclusive => Some(CPU.write().await),
    };
    let mut handles = Vec::new();
    let mut errors = Vec::new();
    for (server, url) in servers_of(which)? {
        let env = Arc::new(Env::new(server, &url, config).await?);
        let name = name.to_owned();
        let fut = case(Arc::clone(&env));
        let run = async move {
            let started = Instant::now();
            let outcome = fut.await;
            eprintln!("[{server}] {name}: {:.1}s", started.elapsed().as_secs_f64());
            if let Err(e) = &outcome {
                eprintln!("[{server}] {name} FAILED: {e:#}\n{}", env.worker_logs());
            }
            if let Ok(env) = Arc::try_unwrap(env) {
                env.finish().await?;
            }
            outcome.with_context(|| format!("[{server}] {name}"))
        };
        match schedule {
            Schedule::Concurrent => handles.push(tokio::spawn(run)),
            Schedule::Exclusive => {
                if let Err(e) = run.await {
                    errors.push(format!("{e:#}"));
                }
            }
        }
    }
    for handle in handles {
        match handle.await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => errors.push(format!("{e:#}")),
            Err(e) => errors.push(format!("a case panicked: {e}")),
        }
    }
    if !errors.is_empty() {
        bail!("{}", errors.join("\n"));
    }
    Ok(())
}
