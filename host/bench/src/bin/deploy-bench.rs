//! `deploy-bench`: workers following deployments (docs/benchmarks.md#deployments). Figures, not
//! a test.
//!
//! ```text
//! deploy-bench --onestep BIN [--server-url URL] [--deploys 20] [--poll-s 2] [--idle-window-s 30]
//!              [--big guest-examples/out/js-echo.wasm] [--skip-deploys] [--skip-idle] [--skip-big]
//! ```
//!
//! On a scratch SQLite file (default) or a scratch database on the PostgreSQL or MySQL/MariaDB
//! server of `--server-url` (`postgres://…` or `mysql://…`, no database), with `onestep run`
//! child processes of BIN whose file has one source with `deployed:` (default `poll_s: 2`) and
//! no task:
//! 1. **deploy → first execution on the new version**: 3 workers; executions are submitted
//!    continuously (one every 25 ms); `--deploys` times, alternate `echo.wasm` and
//!    `countdown.wasm` (each deploy is a new version with another digest) and measure from the
//!    deploy call returning to the `started_at` of the first attempt whose diagnostics record
//!    the new digest (read through `ExecutionStore::attempts`); p50/p99/max;
//! 2. **cost of following when nothing changes** (a server backend): one idle worker following
//!    at `poll_s: 2` connects through a counting proxy ([`onestep_bench::wire`]), which counts
//!    every protocol message it sends over `--idle-window-s`, minus the same with
//!    `poll_s: 100000` (it reads the revision once at start and never again): the follower's
//!    statements and round trips per minute; on PostgreSQL also the database's
//!    `pg_stat_database.xact_commit` per minute (the server's own count of transactions);
//! 3. **fetch + compile of a large component once per worker** (`--big`, default the 12 MB
//!    `js-echo.wasm`): the bench's own fetch of it from the component store (read and verify,
//!    no compile); then one worker with a fresh compile cache (`ONESTEP_WASM_CACHE`): deploy it
//!    and measure from the deploy returning to the worker's `deployment serving` log line
//!    (fetched, verified, compiled, linked, claiming) — cold; then a new worker process on the
//!    same, now warm, cache and the same component deployed under another task: fetch + cached
//!    load — warm.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use chrono::{DateTime, Utc};
use clap::Parser;
use onestep_bench::wire::{self, Counts, Protocol, WireCounter};
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
    /// A PostgreSQL (`postgres://…`) or MySQL/MariaDB (`mysql://…`) server URL: a scratch
    /// database on it instead of a scratch SQLite file.
    #[arg(long, alias = "postgres")]
    server_url: Option<String>,
    /// Deploys measured in part 1.
    #[arg(long, default_value_t = 20)]
    deploys: usize,
    /// `deployed.poll_s` of the workers of parts 1 and 3.
    #[arg(long, default_value_t = 2.0)]
    poll_s: f64,
    /// The window of part 2 (server backends), per phase.
    #[arg(long, default_value_t = 30)]
    idle_window_s: u64,
    /// The large component of part 3 (a handler of any served world; it is deployed with one
    /// allowed origin, so one that imports `wasi:http`, e.g. `python-agent.wasm`, loads too).
    #[arg(long, default_value = "guest-examples/out/js-echo.wasm")]
    big: PathBuf,
    /// The directory of echo.wasm and countdown.wasm.
    #[arg(long, default_value = "guest-examples/out")]
    guests: PathBuf,
    /// Skips part 1.
    #[arg(long)]
    skip_deploys: bool,
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
    let server = args
        .server_url
        .as_deref()
        .map(str::trim)
        .filter(|u| !u.is_empty());
    match server {
        Some(root) if root.starts_with("postgres") => {
            let db = onestep_postgres::ScratchDatabase::create(root, "onestep_deploy_")
                .await
                .context("scratch database")?;
            let outcome = async {
                let mut opts = StoreOptions::new(db.dsn());
                opts.auto_create = true;
                opts.pool_max = 4;
                let backend = onestep_postgres::PgBackend::open(opts)
                    .await
                    .context("open the backend")?;
                let server = Server {
                    protocol: Protocol::Postgres,
                    database: db.name(),
                };
                let bench = Bench::new(&args, "postgres", db.dsn(), &backend, dir.path());
                bench.run(Some(server)).await
            }
            .await;
            let dropped = db.drop_database().await;
            outcome?;
            dropped.context("drop the scratch database")?;
        }
        Some(root) if root.starts_with("mysql") || root.starts_with("mariadb") => {
            let db = onestep_mysql::ScratchDatabase::create(root, "onestep_deploy_")
                .await
                .context("scratch database")?;
            let outcome = async {
                let mut opts = StoreOptions::new(db.dsn());
                opts.auto_create = true;
                opts.pool_max = 4;
                let backend = onestep_mysql::MySqlBackend::open(opts)
                    .await
                    .context("open the backend")?;
                let server = Server {
                    protocol: Protocol::Mysql,
                    database: db.name(),
                };
                let bench = Bench::new(&args, "mysql", db.dsn(), &backend, dir.path());
                bench.run(Some(server)).await
            }
            .await;
            let dropped = db.drop_database().await;
            outcome?;
            dropped.context("drop the scratch database")?;
        }
        Some(other) => bail!(
            "--server-url must be a postgres:// or mysql:// URL (or absent for SQLite), not {:?}",
            other.split("://").next().unwrap_or_default()
        ),
        None => {
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

/// The server of a scratch database.
struct Server<'a> {
    protocol: Protocol,
    database: &'a str,
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

    async fn run(&self, server: Option<Server<'_>>) -> Result<()> {
        println!(
            "workers following deployments ({}, `onestep run` processes of {})",
            self.kind,
            self.args.onestep.display()
        );
        if !self.args.skip_deploys {
            self.deploy_to_first_execution().await?;
        }
        match (server, self.args.skip_idle) {
            (_, true) => {}
            (Some(server), false) => self.idle_cost(&server).await?,
            (None, false) => println!(
                "idle follower: counted on the wire to a database server (--server-url); \
                 SQLite has none: one revision read of the local file per poll (by the code)"
            ),
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
        self.spawn_on(self.dsn, config, id, cache)
    }

    /// A worker on `dsn` (the bench's database, possibly through the counting proxy).
    fn spawn_on(&self, dsn: &str, config: &Path, id: &str, cache: Option<&Path>) -> Result<Worker> {
        let log = self.dir.join(format!("{id}.log"));
        let file = std::fs::File::create(&log)?;
        let mut cmd = Command::new(&self.args.onestep);
        cmd.arg("run")
            .arg(config)
            .env("ONESTEP_DSN", dsn)
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

    /// Part 2 (a server backend): one idle worker through the counting proxy, at `poll_s: 2`
    /// and then at `poll_s: 100000`; the difference is the follower's.
    async fn idle_cost(&self, server: &Server<'_>) -> Result<()> {
        // No active deployment (part 1 deactivated its task): the worker runs no claim loop,
        // only the follower.
        let stats = match server.protocol {
            Protocol::Postgres => {
                let (client, conn) = tokio_postgres::connect(self.dsn, tokio_postgres::NoTls)
                    .await
                    .context("statistics connection")?;
                tokio::spawn(conn);
                Some(client)
            }
            Protocol::Mysql => None,
        };
        let window = Duration::from_secs(self.args.idle_window_s.max(1));
        let mut phases = Vec::new();
        for (name, poll_s) in [("follow-idle", 2.0), ("follow-never", 100_000.0)] {
            let proxy =
                WireCounter::start(server.protocol, upstream(self.dsn, server).await?).await?;
            let (dsn, _) = wire::via_proxy(self.dsn, server.protocol, proxy.addr()).await?;
            let config = self.config(name, poll_s)?;
            let worker = self.spawn_on(&dsn, &config, name, None)?;
            worker.wait_log("following deployments", Duration::from_secs(60))?;
            // Past the start-up reads, and (PostgreSQL) the statistics of the start flushed.
            let settle = if stats.is_some() {
                STATS_FLUSH
            } else {
                Duration::from_secs(3)
            };
            tokio::time::sleep(settle).await;
            let c0 = match &stats {
                Some(s) => Some(commits(s, server.database).await?),
                None => None,
            };
            let w0 = proxy.snapshot();
            let t0 = Instant::now();
            tokio::time::sleep(window).await;
            let w1 = proxy.snapshot();
            let secs = t0.elapsed().as_secs_f64();
            let c1 = match &stats {
                Some(s) => Some(commits(s, server.database).await?),
                None => None,
            };
            drop(worker);
            let per_min = |n: u64| n as f64 * 60.0 / secs;
            let sent = wire::delta(&w0, &w1);
            let commits_min = c0.zip(c1).map(|(a, b)| (b - a) as f64 * 60.0 / secs);
            println!(
                "  idle worker, deployed.poll_s {poll_s}, {} s: sent {}{}",
                window.as_secs(),
                rates(&sent, secs),
                commits_min.map_or(String::new(), |c| format!(
                    "; database xact_commit {c:.1}/min (this bench's statistics reads included)"
                )),
            );
            phases.push((
                per_min(statements(server.protocol, &sent)),
                per_min(round_trips(server.protocol, &sent)),
                commits_min,
            ));
        }
        let (busy, never) = (phases[0], phases[1]);
        println!(
            "idle follower (poll_s 2, nothing deployed changes), per worker and followed source: \
             {:.1} statements/min, {:.1} round trips/min{} (the difference of the two runs)",
            busy.0 - never.0,
            busy.1 - never.1,
            busy.2.zip(never.2).map_or(String::new(), |(a, b)| format!(
                ", {:.1} server transactions/min",
                a - b
            )),
        );
        Ok(())
    }

    /// Part 3.
    async fn big_component(&self) -> Result<()> {
        let size = std::fs::metadata(&self.args.big)?.len();
        let digest = self.put(&self.args.big).await?;
        let mb = size as f64 / 1e6;
        // The fetch alone, as a worker does it (read every chunk, verify the SHA-256), from
        // this process.
        let components = self.backend.components();
        let mut fetches = Vec::new();
        for _ in 0..3 {
            let t0 = Instant::now();
            let got = components.get(&digest).await?;
            fetches.push(t0.elapsed().as_millis());
            ensure!(
                got.as_ref().map(Vec::len) == Some(size as usize),
                "the stored component reads back whole"
            );
        }
        fetches.sort_unstable();
        println!(
            "large component ({}, {mb:.1} MB): fetch + SHA-256 verify from the component store \
             (this process, 3 reads): median {} ms",
            self.args.big.display(),
            fetches[1]
        );
        let cache = tempfile::tempdir()?;
        let config = self.config("big", self.args.poll_s)?;
        for (phase, task, what) in [
            (
                "cold",
                "big-cold",
                "fresh compile cache: fetch + verify + compile + link",
            ),
            (
                "warm",
                "big-warm",
                "another worker process, compile cache warm: fetch + verify + cached load",
            ),
        ] {
            let worker = self.spawn(&config, &format!("big-{phase}"), Some(cache.path()))?;
            worker.wait_log("following deployments", Duration::from_secs(60))?;
            tokio::time::sleep(Duration::from_secs(1)).await;
            // A component that imports wasi:http (python-agent) is refused without an allowed
            // origin; one that does not is not affected by it.
            let mut sandbox = SandboxSettings::default();
            sandbox.network.allow.push(AllowedOrigin {
                origin: OriginPattern::parse("http://127.0.0.1:9")?,
                headers: Vec::new(),
                rate_limit: None,
            });
            let pid = worker.child.id().to_string();
            let cpu0 = onestep_bench::process_cpu_ms(&pid);
            let version = self.deploy_in(task, &digest, 1, sandbox).await?;
            let t0 = Instant::now();
            worker.wait_serving(task, version, Duration::from_secs(600))?;
            let took = t0.elapsed();
            let cpu = cpu0
                .zip(onestep_bench::process_cpu_ms(&pid))
                .map_or("?".to_owned(), |(a, b)| format!("{:.0}", b - a));
            drop(worker);
            // The next worker must not find this task active at its start.
            self.backend
                .deployments()
                .deactivate(NAMESPACE, task, "deploy-bench", None)
                .await?;
            println!(
                "large component ({mb:.1} MB) once per worker, {phase}: deploy -> the worker \
                 serving it {} ms wall, {cpu} ms of the worker's CPU ({what}; the wait for the \
                 next poll, up to poll_s {}, included)",
                took.as_millis(),
                self.args.poll_s
            );
        }
        Ok(())
    }
}

/// The server address of `dsn`.
async fn upstream(dsn: &str, server: &Server<'_>) -> Result<std::net::SocketAddr> {
    let unused: std::net::SocketAddr = ([127, 0, 0, 1], 1).into();
    Ok(wire::via_proxy(dsn, server.protocol, unused).await?.1)
}

/// `name rate/min` of every message counted, over `secs`.
fn rates(sent: &Counts, secs: f64) -> String {
    if sent.is_empty() {
        return "nothing".to_owned();
    }
    sent.iter()
        .map(|(k, v)| format!("{k} {:.1}/min", *v as f64 * 60.0 / secs))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Statements sent: PostgreSQL `Execute` (extended protocol) and `Query` (simple); MySQL
/// `COM_STMT_EXECUTE` and `COM_QUERY`.
fn statements(protocol: Protocol, sent: &Counts) -> u64 {
    let n = |k: &str| sent.get(k).copied().unwrap_or(0);
    match protocol {
        Protocol::Postgres => n("Execute") + n("Query"),
        Protocol::Mysql => n("COM_STMT_EXECUTE") + n("COM_QUERY"),
    }
}

/// Round trips: PostgreSQL `Sync` and `Query` (each waits for ReadyForQuery and, outside a
/// transaction block, ends an implicit transaction); MySQL every command.
fn round_trips(protocol: Protocol, sent: &Counts) -> u64 {
    let n = |k: &str| sent.get(k).copied().unwrap_or(0);
    match protocol {
        Protocol::Postgres => n("Sync") + n("Query"),
        Protocol::Mysql => sent
            .iter()
            .filter(|(k, _)| k.starts_with("COM_") && k.as_str() != "COM_QUIT")
            .map(|(_, v)| v)
            .sum(),
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
