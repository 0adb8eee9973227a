//! File-descriptor exhaustion, on MariaDB and MySQL: a worker started with a soft limit of 1024
//! open files (hard 4096) runs `config/e2e/isolation_fd.yaml`. It raises its soft limit to the
//! hard one at start (and logs both). Attackers (misbehave `open_files`, three at once) open a
//! file of their read-only preopen again and again without closing it and hold everything;
//! meanwhile victims (echo with a preopen, which needs a host descriptor on every attempt) are
//! submitted to the same worker. Each attacker gets exactly its cap (256), then an error value
//! inside the guest; every victim succeeds; the worker stays up; its descriptors stay under the
//! soft limit it was started with.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use onestep_core::ExecutionStatus as S;
use onestep_e2e::{Env, Schedule, e2e_config, on_each_server, onestep_bin};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(60);
/// `prlimit` of the worker: soft 1024 (a common default), hard 4096.
const NOFILE: &str = "--nofile=1024:4096";
const SOFT_AT_START: usize = 1024;
/// The default `sandbox.max_open_handles`.
const CAP: u64 = 256;
const ATTACKERS: usize = 6;
const VICTIMS: usize = 30;

/// `onestep run` under `prlimit`, killed when dropped.
struct LimitedWorker {
    child: Child,
    log_path: PathBuf,
}

impl LimitedWorker {
    fn spawn(env: &Env, config: &Path, log_dir: &Path) -> Result<Self> {
        let log_path = log_dir.join(format!("worker-{}.log", env.server()));
        let log = std::fs::File::create(&log_path)?;
        let child = Command::new("prlimit")
            .arg(NOFILE)
            .arg("--")
            .arg(onestep_bin()?)
            .arg("run")
            .arg(config)
            .envs(env.onestep_env())
            .env("ONESTEP_WORKER_ID", "fd-worker")
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log))
            .spawn()
            .context("cannot start prlimit … onestep run")?;
        Ok(Self { child, log_path })
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    fn proc(&self, file: &str) -> PathBuf {
        PathBuf::from(format!("/proc/{}/{file}", self.child.id()))
    }

    /// Descriptors the worker has open now.
    fn open_fds(&self) -> usize {
        std::fs::read_dir(self.proc("fd")).map_or(0, |d| d.count())
    }

    /// (soft, hard) of "Max open files" in /proc/<pid>/limits.
    fn nofile(&self) -> Result<(String, String)> {
        let limits = std::fs::read_to_string(self.proc("limits"))?;
        let line = limits
            .lines()
            .find(|l| l.starts_with("Max open files"))
            .context("no 'Max open files' line")?;
        let mut f = line["Max open files".len()..].split_whitespace();
        Ok((
            f.next().unwrap_or_default().to_owned(),
            f.next().unwrap_or_default().to_owned(),
        ))
    }

    fn status_kib(&self, field: &str) -> u64 {
        std::fs::read_to_string(self.proc("status"))
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with(field))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|v| v.parse().ok())
            })
            .unwrap_or(0)
    }

    fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }
}

impl Drop for LimitedWorker {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

async fn attack(env: &Env, worker: &mut LimitedWorker) -> Result<()> {
    let server = env.server();
    let deadline = Instant::now() + LIMIT;
    while !worker.log().contains("onestep worker running") {
        if !worker.running() {
            bail!("the worker exited: {}", worker.log());
        }
        if Instant::now() > deadline {
            bail!("the worker did not start: {}", worker.log());
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let log = worker.log();
    ensure!(
        log.contains("raised the open-files limit") && log.contains("old_soft=1024"),
        "no log line about raising RLIMIT_NOFILE: {log}"
    );
    let (soft, hard) = worker.nofile()?;
    ensure!(soft == "4096" && hard == "4096", "limits {soft}/{hard}");
    let idle_fds = worker.open_fds();

    let payload = json!({"mode": "open_files", "path": "/ro/isolation_fd.yaml", "hold_ms": 1500});
    let mut attackers = Vec::new();
    for _ in 0..ATTACKERS {
        attackers.push(env.submit("open_files", payload.clone()).await?.id);
    }
    env.wait_status(attackers[0], &[S::Running], LIMIT).await?;

    // Victims arrive while the attackers hold their files.
    let mut victims = Vec::new();
    let mut peak_fds = 0;
    let started = Instant::now();
    for i in 0..VICTIMS {
        victims.push((i, env.submit("victim", json!({"victim": i})).await?.id));
        peak_fds = peak_fds.max(worker.open_fds());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut pending = attackers.clone();
    while !pending.is_empty() && started.elapsed() < LIMIT {
        peak_fds = peak_fds.max(worker.open_fds());
        let mut still = Vec::new();
        for id in pending {
            if !env.get(id).await?.terminal() {
                still.push(id);
            }
        }
        pending = still;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    for (i, id) in &victims {
        let done = env.wait_status(*id, &[S::Succeeded], LIMIT).await?;
        ensure!(done.result == Some(json!({"victim": i})), "{done:?}");
    }
    let mut opened = Vec::new();
    for id in &attackers {
        let done = env.wait_status(*id, &[S::Succeeded], LIMIT).await?;
        let out = done.result.clone().context("attacker result")?;
        opened.push(out["opened"].as_u64().unwrap_or(0));
        ensure!(out["opened"] == CAP, "attacker got {out}, the cap is {CAP}");
        ensure!(
            out["error"]
                .as_str()
                .is_some_and(|e| e.contains("Quota exceeded")),
            "the guest's error value: {out}"
        );
        ensure!(
            out["reopened"] == true,
            "closing a file frees a slot: {out}"
        );
    }
    ensure!(worker.running(), "the worker exited: {}", worker.log());
    let log_bytes = worker.log().len();
    let warnings = worker.log().matches("open-handle cap").count();
    eprintln!(
        "[{server}] fd attack: attackers opened {opened:?}; {VICTIMS} victims all succeeded; \
         worker fds idle {idle_fds}, peak {peak_fds}; VmHWM {} KiB; log {log_bytes} B \
         ({warnings} cap warnings)",
        worker.status_kib("VmHWM:")
    );
    ensure!(
        peak_fds < SOFT_AT_START,
        "the worker held {peak_fds} descriptors"
    );
    ensure!(warnings <= ATTACKERS, "{warnings} cap warnings");
    ensure!(log_bytes < 256 * 1024, "worker log {log_bytes} bytes");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_cannot_exhaust_the_workers_file_descriptors() -> Result<()> {
    let config = e2e_config("isolation_fd.yaml");
    on_each_server(
        "fd exhaustion",
        &config,
        Schedule::Concurrent,
        |env| async move {
            let logs = tempfile::tempdir()?;
            let mut worker =
                LimitedWorker::spawn(&env, &e2e_config("isolation_fd.yaml"), logs.path())?;
            let outcome = attack(&env, &mut worker).await;
            if outcome.is_err() {
                eprintln!("[{}] worker log:\n{}", env.server(), worker.log());
            }
            outcome
        },
    )
    .await
}
