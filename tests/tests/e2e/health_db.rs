//! `/healthz` follows the database (docs/observability.md#health): a worker on a private MariaDB
//! instance that this test starts (`mariadb-install-db` into a temporary directory, then
//! `mariadbd` on a free loopback port) answers 200; once the server is stopped, and its source
//! has had no answer for longer than a lease, 503 `degraded`; after the server is started again
//! on the same data directory and port, 200 again, and the worker runs a new execution (as it
//! ran one before the stop).

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use onestep_core::ExecutionStatus as S;
use onestep_e2e::{Env, WorkerProcess, e2e_config, wait_for};
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(20);

/// A private `mariadbd` on `port` over `datadir`, killed when dropped.
struct PrivateServer {
    child: Option<Child>,
    datadir: PathBuf,
    port: u16,
}

impl PrivateServer {
    /// Initialises `datadir` (system tables only) and starts the server.
    fn install(dir: &Path) -> Result<PrivateServer> {
        let datadir = dir.join("data");
        let out = Command::new("mariadb-install-db")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", datadir.display()))
            .args([
                "--user=root",
                "--auth-root-authentication-method=normal",
                "--skip-test-db",
            ])
            .output()
            .context("cannot run mariadb-install-db (is MariaDB installed?)")?;
        ensure!(
            out.status.success(),
            "mariadb-install-db failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut server = PrivateServer {
            child: None,
            datadir,
            port,
        };
        server.start()?;
        Ok(server)
    }

    fn url(&self) -> String {
        format!("mysql://root@127.0.0.1:{}", self.port)
    }

    fn start(&mut self) -> Result<()> {
        let dir = self
            .datadir
            .parent()
            .context("the data directory has a parent")?;
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("server.log"))?;
        let child = Command::new("mariadbd")
            .arg("--no-defaults")
            .arg(format!("--datadir={}", self.datadir.display()))
            .arg(format!("--socket={}", dir.join("mysqld.sock").display()))
            .arg(format!("--pid-file={}", dir.join("mysqld.pid").display()))
            .arg(format!("--port={}", self.port))
            .args([
                "--bind-address=127.0.0.1",
                "--user=root",
                "--skip-grant-tables",
                "--skip-log-bin",
                "--innodb-buffer-pool-size=32M",
            ])
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .spawn()
            .context("cannot start mariadbd")?;
        self.child = Some(child);
        Ok(())
    }

    /// Waits until the server accepts a connection and answers a query.
    async fn wait_ready(&self) -> Result<()> {
        let url = self.url();
        wait_for("the private MariaDB to accept connections", LIMIT, || {
            let url = url.clone();
            async move {
                let pool = mysql_async::Pool::from_url(url.as_str())?;
                let ok = match pool.get_conn().await {
                    Ok(mut conn) => {
                        use mysql_async::prelude::Queryable;
                        conn.query_drop("SELECT 1").await.is_ok()
                    }
                    Err(_) => false,
                };
                let _ = pool.disconnect().await;
                Ok(ok.then_some(()))
            }
        })
        .await
    }

    /// Stops the server with SIGTERM (a clean shutdown) and waits for it to exit.
    fn stop(&mut self) -> Result<()> {
        let Some(mut child) = self.child.take() else {
            return Ok(());
        };
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status()?;
        ensure!(status.success(), "kill -TERM mariadbd failed");
        let deadline = Instant::now() + LIMIT;
        while child.try_wait()?.is_none() {
            if Instant::now() >= deadline {
                let _ = child.kill();
                bail!("mariadbd still running {LIMIT:?} after SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }
}

impl Drop for PrivateServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// `GET url` with curl: (status, body as JSON or `null`).
fn health(url: &str) -> Result<(u16, Value)> {
    let out = Command::new("curl")
        .args(["-sS", "-o", "-", "-w", "\n%{http_code}", url])
        .output()
        .context("cannot run curl")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", text.as_str()));
    Ok((
        code.trim().parse().unwrap_or(0),
        serde_json::from_str(body).unwrap_or(Value::Null),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_follows_a_stopped_and_restarted_database() -> Result<()> {
    let started = Instant::now();
    let dir = tempfile::tempdir()?;
    let mut server = PrivateServer::install(dir.path())?;
    server.wait_ready().await?;
    let config = e2e_config("traces.yaml");
    let env = Env::new("mariadb (private)", &server.url(), &config).await?;

    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let addr = format!("127.0.0.1:{port}");
    let url = format!("http://{addr}/healthz");
    let mut worker = WorkerProcess::spawn_with_args(
        &config,
        &[
            ("ONESTEP_DSN", &env.db.dsn),
            ("ONESTEP_WORKER_ID", "health"),
        ],
        &["--metrics-addr", &addr],
        dir.path(),
    )?;
    let outcome = async {
        // Ready (sources open, components loaded) and working before the database goes away.
        let ready = format!("http://{addr}/readyz");
        wait_for("/readyz to answer 200", LIMIT, || async {
            Ok((health(&ready)?.0 == 200).then_some(()))
        })
        .await?;
        let e = env
            .submit("flaky", json!({"succeed_on_attempt": 1}))
            .await?;
        env.wait_status(e.id, &[S::Succeeded], LIMIT).await?;
        let (code, body) = wait_for("/healthz to answer 200", LIMIT, || async {
            let (code, body) = health(&url)?;
            Ok((code == 200).then_some((code, body)))
        })
        .await?;
        ensure!(
            code == 200 && body["status"] == "ok" && body["tasks"][0]["source"]["alive"] == true,
            "{body}"
        );

        // The database goes away: after a lease (2 s) without an answer the source is not
        // alive and the worker is degraded.
        server.stop()?;
        let stopped = Instant::now();
        let body = wait_for("/healthz to answer 503", LIMIT, || async {
            let (code, body) = health(&url)?;
            Ok((code == 503).then_some(body))
        })
        .await?;
        let after = stopped.elapsed();
        ensure!(
            body["status"] == "degraded"
                && body["stopping"] == false
                && body["tasks"][0]["source"]["alive"] == false,
            "{body}"
        );
        ensure!(
            after >= Duration::from_millis(1500),
            "degraded only {after:?} after the stop: sooner than a lease"
        );

        // Back on the same data directory and port: healthy again, and working.
        server.start()?;
        server.wait_ready().await?;
        let body = wait_for("/healthz to answer 200 again", LIMIT, || async {
            let (code, body) = health(&url)?;
            Ok((code == 200).then_some(body))
        })
        .await?;
        ensure!(body["status"] == "ok", "{body}");
        let e = env
            .submit("flaky", json!({"succeed_on_attempt": 1}))
            .await?;
        env.wait_status(e.id, &[S::Succeeded], LIMIT).await?;

        worker.signal("TERM")?;
        let code = worker.wait_exit(LIMIT)?;
        ensure!(code == Some(0), "worker exit {code:?}: {}", worker.log());
        Ok(())
    }
    .await;
    if let Err(e) = &outcome {
        eprintln!("FAILED: {e:#}\n----- worker\n{}", worker.log());
    }
    drop(worker);
    let _ = env.finish().await;
    drop(server);
    eprintln!(
        "healthz with the database down: {:.1}s",
        started.elapsed().as_secs_f64()
    );
    outcome
}
