//! End-to-end test support for onestep: per-test databases on the real test servers, the
//! `onestep` binary as a child process, the example guest components, and polling helpers.
//!
//! Environment (set by `scripts/test.sh`): `ONESTEP_TEST_MARIADB_URL` and
//! `ONESTEP_TEST_MYSQL_URL` (root URLs of the two servers; a missing one fails the test unless
//! `ONESTEP_TEST_SKIP_MYSQL=1`), `ONESTEP_BIN` (path of the built `onestep` binary; defaults to
//! `target/debug/onestep`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use mysql_async::prelude::Queryable;

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The servers the suite runs against: `(label, root URL)`. MariaDB is always required; MySQL
/// unless `ONESTEP_TEST_SKIP_MYSQL=1`.
pub fn servers() -> Result<Vec<(&'static str, String)>> {
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
    Ok(out)
}

/// A database created for one test and dropped by [`TestDb::drop_db`].
#[derive(Debug)]
pub struct TestDb {
    /// Server label (`mariadb` or `mysql`).
    pub server: &'static str,
    /// Database name.
    pub name: String,
    /// DSN of the database, root user.
    pub dsn: String,
    admin: mysql_async::Pool,
}

impl TestDb {
    /// Creates `onestep_e2e_<random>` on the server at `root_url`.
    pub async fn create(server: &'static str, root_url: &str) -> Result<TestDb> {
        let name = format!("onestep_e2e_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let admin = mysql_async::Pool::from_url(root_url).context("bad test server URL")?;
        let mut conn = admin.get_conn().await.context("cannot connect to the test server")?;
        conn.query_drop(format!("CREATE DATABASE `{name}` CHARACTER SET utf8mb4"))
            .await?;
        drop(conn);
        let base = root_url.trim_end_matches('/');
        Ok(TestDb {
            server,
            dsn: format!("{base}/{name}"),
            name,
            admin,
        })
    }

    /// Runs a query as root in this database and returns the first column of every row as text.
    pub async fn query_strings(&self, sql: &str) -> Result<Vec<Option<String>>> {
        let mut conn = self.admin.get_conn().await?;
        conn.query_drop(format!("USE `{}`", self.name)).await?;
        let rows: Vec<mysql_async::Row> = conn.query(sql).await?;
        Ok(rows
            .into_iter()
            .map(|mut r| r.take_opt::<Option<String>, _>(0).and_then(|v| v.ok()).flatten())
            .collect())
    }

    /// Drops the database.
    pub async fn drop_db(self) -> Result<()> {
        let mut conn = self.admin.get_conn().await?;
        conn.query_drop(format!("DROP DATABASE IF EXISTS `{}`", self.name))
            .await?;
        drop(conn);
        self.admin.disconnect().await?;
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
        let status = Command::new("bash")
            .arg(repo_root().join("scripts").join("build-guests.sh"))
            .env("SKIP_PYTHON", "1")
            .status()
            .context("cannot run scripts/build-guests.sh")?;
        if !status.success() || !path.is_file() {
            bail!("building the guest components did not produce {}", path.display());
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
        let log_path = log_dir.join(format!("worker-{}.log", uuid::Uuid::new_v4().simple()));
        let log = std::fs::File::create(&log_path)?;
        let child = Command::new(onestep_bin()?)
            .arg("run")
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
