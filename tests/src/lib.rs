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
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use chrono::NaiveDateTime;
use onestep_core::request::SubmitRequest;
use onestep_core::{Execution, ExecutionClient, ExecutionStatus, Limits};
use onestep_mysql::{MySqlBackend, StoreOptions};
use onestep_postgres::PgBackend;
use serde_json::Value;
use uuid::Uuid;

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

mod db;
mod process;

pub use db::{BACKEND_VAR, Backend, Servers, TestDb, servers, servers_of};
pub use process::{WorkerProcess, guest, onestep_bin, run_cli, wait_for};

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

    /// The component store of this case's tables (docs/semantics.md#component-store).
    pub fn components(&self) -> Arc<dyn onestep_core::components::ComponentStore> {
        self.store.backend().components()
    }

    /// The deployments of this case's tables (docs/deployments.md#data-model).
    pub fn deployments(&self) -> Arc<dyn onestep_core::deployments::DeploymentStore> {
        self.store.backend().deployments()
    }

    /// The worker-side port of this case's tables (claims and completions made by the test).
    pub fn leases(&self) -> Arc<dyn onestep_core::ports::LeaseStore> {
        self.store.backend().leases()
    }

    /// The durable steps of this case's tables (docs/steps.md).
    pub fn steps(&self) -> Arc<dyn onestep_core::steps::StepStore> {
        self.store.backend().steps()
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

    fn backend(&self) -> &dyn onestep_core::backend::Backend {
        match self {
            Store::Mysql(b) => b,
            Store::Postgres(b) => b,
        }
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
