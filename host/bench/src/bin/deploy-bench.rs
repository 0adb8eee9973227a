//! `deploy-bench`: workers following deployments (docs/benchmarks.md#deployments). Figures, not
//! a test.
//!
//! ```text
//! deploy-bench --onestep BIN [--postgres ROOT_URL] [--deploys 20] [--idle-window-s 30]
//!              [--big guest-examples/out/python-agent.wasm] [--skip-idle] [--skip-big]
//! ```
//!
//! On a scratch SQLite file (default) or a scratch PostgreSQL database (`--postgres`), with
//! `onestep run` child processes of BIN whose file has one source with `deployed:` (default
//! `poll_s: 2`) and no task:
//! 1. **deploy → first execution on the new version**: 3 workers; executions are submitted
//!    continuously (one every 25 ms); `--deploys` times, alternate `echo.wasm` and
//!    `countdown.wasm` (each deploy is a new version with another digest) and measure from the
//!    deploy call returning to the `started_at` of the first attempt whose diagnostics record
//!    the new digest (read through `ExecutionStore::attempts`); p50/p99/max;
//! 2. **cost of following when nothing changes** (PostgreSQL only: `pg_stat_database`): the
//!    database's committed transactions per minute over `--idle-window-s` with one idle worker
//!    following at `poll_s: 2`, minus the same with `poll_s: 100000` (it reads the revision once
//!    at start and never again): the follower's statements per minute;
//! 3. **fetch + compile of a large component once per worker**: one worker with a fresh compile
//!    cache (`ONESTEP_WASM_CACHE`); deploy `--big` and measure from the deploy returning to the
//!    worker's `deployment serving` log line (fetched, verified, compiled, linked, claiming);
//!    then a new worker process on the same, now warm, cache and the same component deployed
//!    under another task: fetch + cached load.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use chrono::{DateTime, Utc};
use clap::Parser;
use onestep_core::backend::Backend;
use onestep_core::components::ComponentDigest;
use onestep_core::deploy_policy::DeploymentSettings as Typed;
use onestep_core::deployments::{NewDeployment, StoredSettings};
use onestep_core::network::OriginPattern;
use onestep_core::ports::ExecutionStore;
use onestep_core::request::{SubmitRequest, prepare_submission};
use onestep_core::retry::RetryPolicy;
use onestep_core::sandbox::{AllowedOrigin, SandboxSettings};
use onestep_core::{Limits, StoreOptions};
use serde_json::json;
use uuid::Uuid;

const NAMESPACE: &str = "bench";
const TASK: &str = "dep";
/// PostgreSQL's `PGSTAT_IDLE_INTERVAL` (10 s) and a margin.
const STATS_FLUSH: Duration = Duration::from_secs(11);

#[derive(Parser)]
#[command(about = "Workers following deployments: figures, not a test")]
struct Args {
    /// The `onestep` binary the workers run.
    #[arg(long)]
    onestep: PathBuf,
    /// A PostgreSQL server URL: a scratch database on it instead of a scratch SQLite file.
    #[arg(long)]
    postgres: Option<String>,
    /// Deploys measured in part 1.
    #[arg(long, default_value_t = 20)]
    deploys: usize,
    /// `deployed.poll_s` of the workers of parts 1 and 3.
    #[arg(long, default_value_t = 2.0)]
    poll_s: f64,
    /// The window of part 2 (PostgreSQL only), per phase.
    #[arg(long, default_value_t = 30)]
    idle_window_s: u64,
    /// The large component of part 3.
    #[arg(long, default_value = "guest-examples/out/python-agent.wasm")]
    big: PathBuf,
    /// The directory of echo.wasm and countdown.wasm.
    #[arg(long, default_value = "guest-examples/out")]
    guests: PathBuf,
    /// Skips part 2.
    #[arg(long)]
    skip_idle: bool,
    /// Skips part 3.
    #[arg(long)]
    skip_big: bool,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    ensure!(
        args.poll_s > 0.0 && args.deploys > 0,
        "--poll-s and --deploys must be positive"
    );
    let dir = tempfile::tempdir()?;
    match &args.postgres {
        Some(root) if !root.trim().is_empty() => {
            let db = onestep_postgres::ScratchDatabase::create(root.trim(), "onestep_deploy_")
                .await
                .context("scratch database")?;
            let outcome = async {
                let mut opts = StoreOptions::new(db.dsn());
                opts.auto_create = true;
                opts.pool_max = 4;
                let backend = onestep_postgres::PgBackend::open(opts)
                    .await
                    .context("open the backend")?;
                let bench = Bench::new(&args, "postgres", db.dsn(), &backend, dir.path());
                bench.run(Some(db.name())).await
            }
            .await;
            let dropped = db.drop_database().await;
            outcome?;
            dropped.context("drop the scratch database")?;
        }
        _ => {
            let dsn = format!("sqlite://{}", dir.path().join("deploy.db").display());
            let mut opts = StoreOptions::new(&dsn);
            opts.auto_create = true;
            let backend = onestep_sqlite::SqliteBackend::open(opts)
                .await
                .context("open the backend")?;
            let bench = Bench::new(&args, "sqlite", &dsn, &backend, dir.path());
            bench.run(None).await?;
        }
    }
    Ok(())
}

struct Bench<'a> {
    args: &'a Args,
    kind: &'static str,
    dsn: &'a str,
    backend: &'a dyn Backend,
    dir: &'a Path,
}

impl<'a> Bench<'a> {
    fn new(
        args: &'a Args,
        kind: &'static str,
        dsn: &'a str,
        backend: &'a dyn Backend,
        dir: &'a Path,
    ) -> Self {
        Bench {
            args,
            kind,
            dsn,
            backend,
            dir,
        }
    }

    async fn run(&self, pg_database: Option<&str>) -> Result<()> {
        println!(
            "workers following deployments ({}, `onestep run` processes of {})",
            self.kind,
            self.args.onestep.display()
        );
        self.deploy_to_first_execution().await?;
        match (pg_database, self.args.skip_idle) {
            (_, true) => {}
            (Some(db), false) => self.idle_cost(db).await?,
            (None, false) => {
                println!("idle follower: statements/min need PostgreSQL (--postgres); skipped")
            }
        }
        if !self.args.skip_big {
            if self.args.big.is_file() {
                self.big_component().await?;
            } else {
                println!(
                    "large component: {} is absent; skipped",
                    self.args.big.display()
                );
            }
        }
        Ok(())
    }

    /// The worker file: one `deployed:` source of `NAMESPACE`, no task.
    fn config(&self, name: &str, poll_s: f64) -> Result<PathBuf> {
        let path = self.dir.join(format!("{name}.yaml"));
        let kind = self.kind;
        std::fs::write(
            &path,
            format!(
                "apiVersion: onestep/v1alpha1\nkind: App\n\
                 app: {{name: deploy-bench, shutdown_timeout_s: 5.0, logging: {{level: INFO, format: text}}}}\n\
                 resources:\n  db: {{type: {kind}, dsn: \"${{ONESTEP_DSN}}\"}}\n  deployed:\n    \
                 type: {kind}_execution_source\n    connector: db\n    namespaces: [{NAMESPACE}]\n    \
                 deployed: {{poll_s: {poll_s}}}\n    batch_size: 8\n    poll_interval_s: 0.1\n    \
                 worker_id: \"${{ONESTEP_WORKER_ID:-bench}}\"\n    auto_create: true\n"
            ),
        )?;
        Ok(path)
    }

    fn spawn(&self, config: &Path, id: &str, cache: Option<&Path>) -> Result<Worker> {
        let log = self.dir.join(format!("{id}.log"));
        let file = std::fs::File::create(&log)?;
        let mut cmd = Command::new(&self.args.onestep);
        cmd.arg("run")
            .arg(config)
            .env("ONESTEP_DSN", self.dsn)
            .env("ONESTEP_WORKER_ID", id)
            .stdout(Stdio::null())
            .stderr(file);
        if let Some(c) = cache {
            cmd.env("ONESTEP_WASM_CACHE", c);
        }
        let child = cmd
            .spawn()
            .with_context(|| format!("spawn {} run", self.args.onestep.display()))?;
        Ok(Worker { child, log })
    }

    async fn deploy(&self, task: &str, digest: &ComponentDigest, concurrency: u32) -> Result<i64> {
        self.deploy_in(task, digest, concurrency, SandboxSettings::default())
            .await
    }

    async fn deploy_in(
        &self,
        task: &str,
        digest: &ComponentDigest,
        concurrency: u32,
        sandbox: SandboxSettings,
    ) -> Result<i64> {
        let typed = Typed {
            namespace: NAMESPACE.to_owned(),
            task: task.to_owned(),
            description: None,
            sandbox,
            headers: Vec::new(),
            timeout: Some(Duration::from_secs(60)),
            retry: RetryPolicy::NoRetry,
            concurrency,
            params: serde_json::Map::new(),
        };
        let d = self
            .backend
            .deployments()
            .deploy(&NewDeployment {
                namespace: NAMESPACE.to_owned(),
                task: task.to_owned(),
                digest: digest.clone(),
                settings: StoredSettings::from_stored(&typed.to_canonical_json()?)?,
                actor: "deploy-bench".to_owned(),
                note: None,
                max_tasks: None,
            })
            .await?;
        ensure!(d.created, "deploy {task} {digest}: not a new version");
        Ok(d.deployment.version)
    }

    async fn put(&self, path: &Path) -> Result<ComponentDigest> {
        let bytes = std::fs::read(path).with_context(|| format!("read {}", path.display()))?;
        Ok(self.backend.components().put(&bytes).await?)
    }

    /// Part 1.
    async fn deploy_to_first_execution(&self) -> Result<()> {
        let versions = [
            self.put(&self.args.guests.join("echo.wasm")).await?,
            self.put(&self.args.guests.join("countdown.wasm")).await?,
        ];
        self.deploy(TASK, &versions[1], 4).await?;
        let config = self.config("follow", self.args.poll_s)?;
        let workers = [
            self.spawn(&config, "w1", None)?,
            self.spawn(&config, "w2", None)?,
            self.spawn(&config, "w3", None)?,
        ];
        let store = self.backend.executions();
        // Submitted ids, in order, by a background submitter.
        let ids: Arc<Mutex<Vec<Uuid>>> = Arc::default();
        let submitter = {
            let ids = Arc::clone(&ids);
            let store = Arc::clone(&store);
            tokio::spawn(async move {
                let limits = Limits::default();
                let mut tick = tokio::time::interval(Duration::from_millis(25));
                for i in 0u64.. {
                    tick.tick().await;
                    let req = SubmitRequest {
                        task_name: TASK.into(),
                        payload: json!({"steps": 1, "step_ms": 1, "i": i}),
                        ..SubmitRequest::default()
                    };
                    let sub = prepare_submission(NAMESPACE, &req, &limits)?;
                    let e = store.submit(sub).await?;
                    if let Ok(mut v) = ids.lock() {
                        v.push(e.id);
                    }
                }
                anyhow::Ok(())
            })
        };
        // The first version serves before the first measured deploy.
        let first = self
            .first_on(
                &store,
                &ids,
                0,
                &versions[1],
                Utc::now(),
                Duration::from_secs(120),
            )
            .await;
        let mut lags = Vec::new();
        let outcome = async {
            first.context("the first version never ran")?;
            for round in 0..self.args.deploys {
                // Spread the deploys over the poll period.
                let offset = (round as f64 * 0.37) % self.args.poll_s;
                tokio::time::sleep(Duration::from_secs_f64(0.5 + offset)).await;
                let from = ids.lock().map(|v| v.len()).unwrap_or(0).saturating_sub(40);
                let digest = &versions[round % 2];
                self.deploy(TASK, digest, 4).await?;
                let deployed = Utc::now();
                let started = self
                    .first_on(
                        &store,
                        &ids,
                        from,
                        digest,
                        deployed,
                        Duration::from_secs(60),
                    )
                    .await?;
                let lag = (started - deployed).num_milliseconds();
                lags.push(lag);
            }
            anyhow::Ok(())
        }
        .await;
        submitter.abort();
        drop(workers);
        outcome?;
        // The later parts start with no claim loop.
        self.backend
            .deployments()
            .deactivate(NAMESPACE, TASK, "deploy-bench", None)
            .await?;
        let submitted = ids.lock().map(|v| v.len()).unwrap_or(0);
        lags.sort_unstable();
        println!(
            "deploy -> first attempt on the new version, 3 workers, poll_s {}, {} deploys \
             ({submitted} executions submitted, one every 25 ms): p50 {} ms, p99 {} ms, min {} ms, max {} ms",
            self.args.poll_s,
            lags.len(),
            pct(&lags, 50),
            pct(&lags, 99),
            lags.first().copied().unwrap_or(0),
            lags.last().copied().unwrap_or(0),
        );
        Ok(())
    }

    /// The earliest `started_at` of an attempt that ran `digest`, among the executions
    /// submitted from index `from` on, once one is found and 500 ms more have passed (an
    /// execution claimed out of order may have started earlier). Only attempts that started
    /// after `after` count.
    async fn first_on(
        &self,
        store: &Arc<dyn ExecutionStore>,
        ids: &Mutex<Vec<Uuid>>,
        from: usize,
        digest: &ComponentDigest,
        after: DateTime<Utc>,
        limit: Duration,
    ) -> Result<DateTime<Utc>> {
        let want = digest.as_str().trim_start_matches("sha256:").to_owned();
        let deadline = Instant::now() + limit;
        let mut next = from;
        let mut best: Option<DateTime<Utc>> = None;
        let mut found_at: Option<Instant> = None;
        // Executions not finished when last read.
        let mut pending: Vec<Uuid> = Vec::new();
        loop {
            ensure!(
                Instant::now() < deadline,
                "no attempt ran {digest} within {limit:?}"
            );
            let fresh: Vec<Uuid> = ids
                .lock()
                .map(|v| v.get(next..).map(<[Uuid]>::to_vec).unwrap_or_default())
                .unwrap_or_default();
            next += fresh.len();
            pending.extend(fresh);
            let mut still = Vec::new();
            for id in pending.drain(..) {
                let attempts = store
                    .attempts(NAMESPACE, id)
                    .await?
                    .with_context(|| format!("execution {id} is missing"))?;
                let done = attempts.iter().any(|a| a.finished_at.is_some());
                for a in &attempts {
                    let ran = a
                        .diagnostics
                        .as_ref()
                        .and_then(|d| d.facts.component_digest.as_deref());
                    if ran == Some(want.as_str()) && a.started_at >= after {
                        best = Some(best.map_or(a.started_at, |b| b.min(a.started_at)));
                    }
                }
                if !done {
                    still.push(id);
                }
            }
            pending = still;
            if best.is_some() && found_at.is_none() {
                found_at = Some(Instant::now());
            }
            if let (Some(b), Some(at)) = (best, found_at)
                && at.elapsed() >= Duration::from_millis(500)
            {
                return Ok(b);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Part 2 (PostgreSQL).
    async fn idle_cost(&self, database: &str) -> Result<()> {
        // No active deployment (part 1 deactivated its task): the worker runs no claim loop,
        // only the follower.
        let (stats, conn) = tokio_postgres::connect(self.dsn, tokio_postgres::NoTls)
            .await
            .context("statistics connection")?;
        tokio::spawn(conn);
        let window = Duration::from_secs(self.args.idle_window_s.max(1));
        let mut rates = Vec::new();
        for (name, poll_s) in [("follow-idle", 2.0), ("follow-never", 100_000.0)] {
            let config = self.config(name, poll_s)?;
            let worker = self.spawn(&config, name, None)?;
            worker.wait_log("following deployments", Duration::from_secs(60))?;
            tokio::time::sleep(STATS_FLUSH).await;
            let c0 = commits(&stats, database).await?;
            let t0 = Instant::now();
            tokio::time::sleep(window).await;
            let c1 = commits(&stats, database).await?;
            let per_min = (c1 - c0) as f64 * 60.0 / t0.elapsed().as_secs_f64();
            drop(worker);
            println!(
                "  idle worker, deployed.poll_s {poll_s}: {per_min:.1} commits/min over {} s \
                 (the database's, this bench's statistics reads included)",
                window.as_secs()
            );
            rates.push(per_min);
        }
        println!(
            "idle follower (poll_s 2, nothing deployed changes): {:.1} statements/min (the difference)",
            rates[0] - rates[1]
        );
        Ok(())
    }

    /// Part 3.
    async fn big_component(&self) -> Result<()> {
        let size = std::fs::metadata(&self.args.big)?.len();
        let digest = self.put(&self.args.big).await?;
        let cache = tempfile::tempdir()?;
        let config = self.config("big", self.args.poll_s)?;
        let mut figures = Vec::new();
        for (phase, task) in [("cold", "big-cold"), ("warm", "big-warm")] {
            let worker = self.spawn(&config, &format!("big-{phase}"), Some(cache.path()))?;
            worker.wait_log("following deployments", Duration::from_secs(60))?;
            tokio::time::sleep(Duration::from_secs(1)).await;
            // The agent imports wasi:http: a sandbox without an allowed origin is refused.
            let mut sandbox = SandboxSettings::default();
            sandbox.network.allow.push(AllowedOrigin {
                origin: OriginPattern::parse("http://127.0.0.1:9")?,
                headers: Vec::new(),
                rate_limit: None,
            });
            let version = self.deploy_in(task, &digest, 1, sandbox).await?;
            let t0 = Instant::now();
            worker.wait_serving(task, version, Duration::from_secs(600))?;
            figures.push((phase, t0.elapsed()));
            drop(worker);
            // The next worker must not find this task active at its start.
            self.backend
                .deployments()
                .deactivate(NAMESPACE, task, "deploy-bench", None)
                .await?;
        }
        for (phase, took) in figures {
            println!(
                "large component ({}, {:.1} MB): deploy -> worker serving it, {phase} compile cache: {} ms",
                self.args.big.display(),
                size as f64 / 1e6,
                took.as_millis()
            );
        }
        Ok(())
    }
}

/// A running `onestep run`, killed when dropped.
struct Worker {
    child: Child,
    log: PathBuf,
}

impl Worker {
    fn text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wait_log(&self, needle: &str, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        while !self.text().contains(needle) {
            if Instant::now() >= deadline {
                bail!(
                    "no {needle:?} in {} within {limit:?}:\n{}",
                    self.log.display(),
                    self.text()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// Waits for the `deployment serving` line of (`task`, `version`); fails on a refusal.
    fn wait_serving(&self, task: &str, version: i64, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        let task_field = format!("task={task}");
        loop {
            let text = self.text();
            for line in text.lines().filter(|l| l.contains(&task_field)) {
                if line.contains("deployment serving")
                    && line.contains(&format!(" version={version} "))
                {
                    return Ok(());
                }
                if line.contains("refused") {
                    bail!("the worker refused {task} v{version}: {line}");
                }
            }
            if Instant::now() >= deadline {
                bail!("{task} v{version} not served within {limit:?}:\n{text}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn pct(sorted: &[i64], p: usize) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let i = ((sorted.len() * p).div_ceil(100)).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// Committed transactions of the database so far.
async fn commits(stats: &tokio_postgres::Client, datname: &str) -> Result<i64> {
    stats
        .batch_execute("SELECT pg_stat_clear_snapshot()")
        .await?;
    let row = stats
        .query_one(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = $1",
            &[&datname],
        )
        .await?;
    Ok(row.get(0))
}
