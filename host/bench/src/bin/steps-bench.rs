//! `steps-bench`: what durable steps cost (docs/benchmarks.md#durable-steps, docs/steps.md).
//! Figures, not a test.
//!
//! ```text
//! steps-bench --onestep BIN [--guests guest-examples/out] [--executions 10] [--steps 100]
//!             [--recorded 1000] [--resumes 1] [--cycles 50] SERVER_URL...
//! ```
//!
//! For each SERVER_URL (`mysql://…` for MySQL/MariaDB, `postgres://…`, or `sqlite://` for a file
//! in a new temporary directory): a scratch database whose tables `onestep migrate --dsn`
//! creates, and for each phase one real worker, an `onestep run` child process of BIN serving
//! one task of the real `steps.wasm` or `flaky.wasm` component from one source
//! (`poll_interval_s: 0.05`). On a server it connects through a loopback proxy that counts every
//! statement it sends ([`onestep_bench::wire`]). Around each phase the bench takes the proxy's
//! counts, the worker process's CPU time and the database server's (`/proc`); it submits and
//! watches the executions through its own connection (not counted on the wire, but in the
//! server's CPU).
//!
//! 1. **Step**: `--executions` executions of `{"n": --steps, "step_ms": 0}` (one slot: one at a
//!    time), minus the same number of `{"n": 0}`: per step, the guest's `step-load` (a miss) and
//!    `step-save`. Wall: the executions' claim → completion (`started_at` → `finished_at`).
//! 2. **Resume**: `--resumes` executions whose `--recorded` steps (default 1,000, the cap) the
//!    bench records first through the store port (`StepStore::save` under its own lease, taken
//!    before the worker starts), then releases (T14): the worker's attempt 2 loads every step
//!    and works none. Claim → completion of that attempt, and per load (minus a `{"n": 0}`
//!    execution's cost).
//! 3. **Park/wake against a plain retry**: `--cycles` executions of the `steps` guest sleeping
//!    10 ms once (`{"n": 1, "sleep_ms": 10, "sleep_after": 0}`: a park, then a wake) minus the
//!    same without the sleep; then `--cycles` executions of `flaky` failing once retryably (it
//!    asks a 10 ms retry delay) and then succeeding, minus `flaky` succeeding at once; each set
//!    submitted together to a task of `--cycles` slots. Per cycle: statements, worker and server
//!    CPU, the added claim → completion time, and the time from the end of attempt 1 to the
//!    start of attempt 2.
//!
//! Each worker's idle rate (its claim polls with nothing to claim) is printed: a phase includes
//! the polls made while it waits for a claim, which weigh in the cycles' figures (the wait for
//! the wake or the retry is polled). CPU times come from `/proc` in 10 ms ticks.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use clap::Parser;
use onestep_bench::cpu;
use onestep_bench::wire::{self, Counts, Protocol, WireCounter};
use onestep_core::backend::Backend;
use onestep_core::execution::LeaseRef;
use onestep_core::request::{ClaimRequest, NamespaceScope, SubmitRequest, prepare_submission};
use onestep_core::{Limits, StoreOptions};
use serde_json::{Value, json};
use uuid::Uuid;

const NAMESPACE: &str = "bench";
/// The source's `poll_interval_s`: how soon a woken or retried execution is claimed again.
const POLL_S: f64 = 0.05;

#[derive(Parser)]
#[command(about = "What durable steps cost: figures, not a test")]
struct Args {
    /// The `onestep` binary the worker runs (and `onestep migrate`).
    #[arg(long)]
    onestep: PathBuf,
    /// The directory of steps.wasm and flaky.wasm.
    #[arg(long, default_value = "guest-examples/out")]
    guests: PathBuf,
    /// Executions of phase 1 (and of its zero-step baseline).
    #[arg(long, default_value_t = 10)]
    executions: u32,
    /// Steps of each execution of phase 1 (at most 1,000, the cap per execution).
    #[arg(long, default_value_t = 100)]
    steps: u32,
    /// Steps recorded before each resume of phase 2 (at most 1,000).
    #[arg(long, default_value_t = 1000)]
    recorded: u32,
    /// Executions resumed in phase 2.
    #[arg(long, default_value_t = 1)]
    resumes: u32,
    /// Executions of each kind in phase 3 (also their task's concurrency).
    #[arg(long, default_value_t = 50)]
    cycles: u32,
    /// Seconds of the idle measurement before the phases.
    #[arg(long, default_value_t = 2.0)]
    idle_s: f64,
    /// Server URLs (no database): `mysql://…`, `postgres://…` or `sqlite://`.
    #[arg(required = true)]
    servers: Vec<String>,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    ensure!(
        args.executions > 0 && args.resumes > 0 && args.cycles > 0,
        "--executions, --resumes and --cycles must be >= 1"
    );
    ensure!(
        (1..=1000).contains(&args.steps) && (1..=1000).contains(&args.recorded),
        "--steps and --recorded must be between 1 and 1000 (the steps per execution cap)"
    );
    let build = if cfg!(debug_assertions) {
        "debug"
    } else {
        "release"
    };
    println!(
        "steps-bench ({build} build of the bench; worker: `{} run`)",
        args.onestep.display()
    );
    let mut failed = 0;
    for server in &args.servers {
        if let Err(e) = on_server(&args, server.trim()).await {
            // One server's failure does not hide the others' figures; the exit code tells.
            eprintln!("steps-bench: {}: {e:#}", scheme(server));
            failed += 1;
        }
    }
    ensure!(
        failed == 0,
        "{failed} of {} servers failed",
        args.servers.len()
    );
    Ok(())
}

fn scheme(url: &str) -> &str {
    url.split("://").next().unwrap_or_default()
}

/// A scratch database.
enum Scratch {
    Mysql(onestep_mysql::ScratchDatabase),
    Postgres(onestep_postgres::ScratchDatabase),
    /// The file's directory (removed when dropped) and the DSN.
    Sqlite {
        _dir: tempfile::TempDir,
        dsn: String,
    },
}

impl Scratch {
    fn dsn(&self) -> &str {
        match self {
            Scratch::Mysql(d) => d.dsn(),
            Scratch::Postgres(d) => d.dsn(),
            Scratch::Sqlite { dsn, .. } => dsn,
        }
    }

    async fn drop_database(self) {
        let dropped = match self {
            Scratch::Mysql(d) => d.drop_database().await,
            Scratch::Postgres(d) => d.drop_database().await,
            Scratch::Sqlite { .. } => Ok(()),
        };
        if let Err(e) = dropped {
            eprintln!("steps-bench: cannot drop the scratch database: {e}");
        }
    }
}

async fn on_server(args: &Args, url: &str) -> Result<()> {
    let (kind, scratch) = if url.starts_with("sqlite://") {
        let dir = tempfile::Builder::new()
            .prefix("onestep_steps_")
            .tempdir()?;
        let dsn = format!("sqlite://{}", dir.path().join("steps.db").display());
        ("sqlite", Scratch::Sqlite { _dir: dir, dsn })
    } else if onestep_postgres::dsn::is_postgres_scheme(scheme(url)) {
        let db = onestep_postgres::ScratchDatabase::create(url, "onestep_steps_")
            .await
            .context("scratch database")?;
        ("postgres", Scratch::Postgres(db))
    } else if url.starts_with("mysql") || url.starts_with("mariadb") {
        let db = onestep_mysql::ScratchDatabase::create(url, "onestep_steps_")
            .await
            .context("scratch database")?;
        ("mysql", Scratch::Mysql(db))
    } else {
        bail!("not a mysql://, postgres:// or sqlite:// URL");
    };
    let outcome = run_on(args, kind, scratch.dsn()).await;
    scratch.drop_database().await;
    outcome
}

/// Figures read around a phase.
#[derive(Debug, Clone, Default)]
struct Sample {
    wire: Counts,
    worker_cpu_ms: Option<f64>,
    db_cpu_ms: Option<f64>,
    at: Option<Instant>,
}

/// The difference of two samples, net of the worker's idle rate over its duration.
#[derive(Debug, Clone, Copy, Default)]
struct Cost {
    statements: Option<f64>,
    round_trips: Option<f64>,
    worker_cpu_ms: Option<f64>,
    db_cpu_ms: Option<f64>,
    secs: f64,
}

impl Cost {
    fn minus(&self, base: &Cost) -> Cost {
        let d = |a: Option<f64>, b: Option<f64>| Some(a? - b?);
        Cost {
            statements: d(self.statements, base.statements),
            round_trips: d(self.round_trips, base.round_trips),
            worker_cpu_ms: d(self.worker_cpu_ms, base.worker_cpu_ms),
            db_cpu_ms: d(self.db_cpu_ms, base.db_cpu_ms),
            secs: self.secs - base.secs,
        }
    }

    fn per(&self, n: f64) -> Cost {
        let p = |a: Option<f64>| a.map(|v| v / n);
        Cost {
            statements: p(self.statements),
            round_trips: p(self.round_trips),
            worker_cpu_ms: p(self.worker_cpu_ms),
            db_cpu_ms: p(self.db_cpu_ms),
            secs: self.secs / n,
        }
    }

    /// `12.0 statements, 12.0 round trips, worker CPU 850 µs, DB CPU 400 µs`.
    fn text(&self) -> String {
        let num = |v: Option<f64>| v.map_or("n/a".to_owned(), |v| format!("{v:.2}"));
        let us = |v: Option<f64>| v.map_or("n/a".to_owned(), |v| format!("{:.0} µs", v * 1000.0));
        format!(
            "{} statements, {} round trips, worker CPU {}, DB CPU {}",
            num(self.statements),
            num(self.round_trips),
            us(self.worker_cpu_ms),
            us(self.db_cpu_ms)
        )
    }
}

struct Bench<'a> {
    args: &'a Args,
    backend: Arc<dyn Backend>,
    proxy: Option<(Protocol, WireCounter)>,
    /// The worker of the current phase.
    worker: Option<Worker>,
    worker_dsn: String,
    kind: &'static str,
    dir: PathBuf,
    db_process: Option<cpu::ServerProcess>,
    postgres: bool,
}

async fn run_on(args: &Args, kind: &'static str, dsn: &str) -> Result<()> {
    let dir = tempfile::tempdir()?;
    // Tables by the normal path: `onestep migrate --dsn`.
    let migrate = Command::new(&args.onestep)
        .args(["migrate", "--dsn", dsn])
        .output()
        .with_context(|| format!("spawn {} migrate", args.onestep.display()))?;
    ensure!(
        migrate.status.success(),
        "onestep migrate failed: {}",
        String::from_utf8_lossy(&migrate.stderr)
    );
    let backend: Arc<dyn Backend> = match kind {
        "postgres" => Arc::new(onestep_postgres::PgBackend::open(StoreOptions::new(dsn)).await?),
        "mysql" => Arc::new(onestep_mysql::MySqlBackend::open(StoreOptions::new(dsn)).await?),
        _ => Arc::new(onestep_sqlite::SqliteBackend::open(StoreOptions::new(dsn)).await?),
    };
    let version = backend.server_version();
    let (proxy, worker_dsn, db_process) = match kind {
        "sqlite" => (None, dsn.to_owned(), None),
        _ => {
            let protocol = if kind == "postgres" {
                Protocol::Postgres
            } else {
                Protocol::Mysql
            };
            let unused: std::net::SocketAddr = ([127, 0, 0, 1], 1).into();
            let upstream = wire::via_proxy(dsn, protocol, unused).await?.1;
            let counter = WireCounter::start(protocol, upstream).await?;
            let (via, _) = wire::via_proxy(dsn, protocol, counter.addr()).await?;
            let process = if kind == "postgres" {
                cpu::postgres_processes()
            } else {
                cpu::find_server(upstream.port(), version.to_lowercase().contains("mariadb"))
            };
            (Some((protocol, counter)), via, process)
        }
    };

    // Phase 2's executions are recorded and leased before the worker starts, so that it
    // cannot claim them first.
    let resumes = preload(args, &*backend).await?;

    let mut bench = Bench {
        args,
        backend,
        proxy,
        worker: None,
        worker_dsn,
        kind,
        dir: dir.path().to_owned(),
        db_process,
        postgres: kind == "postgres",
    };
    println!(
        "== {kind} ({version}){}; DB CPU: {}",
        if bench.proxy.is_some() {
            ", statements counted on the wire"
        } else {
            " (embedded: no wire, its CPU is the worker's)"
        },
        bench
            .db_process
            .as_ref()
            .map_or("n/a".to_owned(), |p| format!("{} (pid {})", p.name, p.pid))
    );
    bench.start_worker("steps").await?;
    bench.step_cost().await?;
    bench.resume(&resumes).await?;
    bench.start_worker("sleepy").await?;
    bench.park_wake().await?;
    bench.start_worker("flaky").await?;
    bench.retry().await?;
    bench.worker = None;
    bench.backend.close().await.ok();
    Ok(())
}

/// The worker file of one phase: one source, one task (`steps`: one slot; `sleepy` and
/// `flaky`: `--cycles` slots).
fn write_config(dir: &Path, kind: &str, args: &Args, task: &str) -> Result<PathBuf> {
    let guests = std::fs::canonicalize(&args.guests)
        .with_context(|| format!("guests directory {}", args.guests.display()))?;
    let component = guests.join(if task == "flaky" {
        "flaky.wasm"
    } else {
        "steps.wasm"
    });
    ensure!(
        component.is_file(),
        "{} is absent (scripts/build-guests.sh)",
        component.display()
    );
    let path = dir.join(format!("{task}.yaml"));
    let cycles = args.cycles;
    let (concurrency, retry) = match task {
        "steps" => (1, ""),
        "flaky" => (cycles, ", retry: {type: max_attempts, max_attempts: 3}"),
        _ => (cycles, ""),
    };
    let text = format!(
        "apiVersion: onestep/v1alpha1\nkind: App\n\
         app: {{name: steps-bench, shutdown_timeout_s: 2.0, logging: {{level: INFO, format: text}}}}\n\
         resources:\n  db: {{type: {kind}, dsn: \"${{ONESTEP_DSN}}\"}}\n  jobs:\n    \
         type: {kind}_execution_source\n    connector: db\n    namespace: {NAMESPACE}\n    \
         task_names: [{task}]\n    batch_size: {batch}\n    poll_interval_s: {POLL_S}\n    \
         worker_id: steps-bench\n\
         tasks:\n  - {{name: {task}, source: jobs, handler: {{component: {component}}}, \
         concurrency: {concurrency}, timeout_s: 600.0{retry}}}\n",
        batch = cycles.clamp(8, 1000),
        component = component.display(),
    );
    std::fs::write(&path, text)?;
    Ok(path)
}

/// Submits `payloads` for `task`; their ids.
async fn submit(backend: &dyn Backend, task: &str, payloads: Vec<Value>) -> Result<Vec<Uuid>> {
    let limits = Limits::default();
    let prepared = payloads
        .into_iter()
        .map(|payload| {
            prepare_submission(
                NAMESPACE,
                &SubmitRequest {
                    task_name: task.to_owned(),
                    payload,
                    ..SubmitRequest::default()
                },
                &limits,
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut ids = Vec::new();
    for r in backend.executions().submit_many(prepared).await? {
        ids.push(r?.id);
    }
    Ok(ids)
}

/// Phase 2's executions: submitted, claimed by the bench, `--recorded` steps saved through the
/// store port under that lease (values shaped as the guest's), the lease kept.
async fn preload(args: &Args, backend: &dyn Backend) -> Result<Vec<LeaseRef>> {
    let payload = json!({"n": args.recorded, "step_ms": 0});
    let ids = submit(backend, "steps", vec![payload; args.resumes as usize]).await?;
    let leases = backend
        .leases()
        .claim(&ClaimRequest {
            namespaces: NamespaceScope::One(NAMESPACE.to_owned()),
            task_names: vec!["steps".to_owned()],
            limit: args.resumes,
            lease_duration_s: 3600.0,
            worker_id: "steps-bench-preload".to_owned(),
            fair: Default::default(),
            max_running: None,
        })
        .await?;
    ensure!(
        leases.len() == ids.len(),
        "claimed {} of {} executions to preload",
        leases.len(),
        ids.len()
    );
    let steps = backend.steps();
    let mut refs = Vec::new();
    for l in leases {
        let lease = LeaseRef {
            execution_id: l.execution.id,
            attempt_id: l.attempt_id,
            lease_token: l.lease_token,
        };
        for i in 0..args.recorded {
            let value = json!({"i": i, "attempt": l.attempt_no}).to_string();
            steps
                .save(&lease, &format!("step-{i}"), &value)
                .await
                .map_err(|e| anyhow::anyhow!("preload save step-{i}: {e:?}"))?;
        }
        refs.push(lease);
    }
    Ok(refs)
}

impl Bench<'_> {
    async fn sample(&self) -> Sample {
        let db_cpu_ms = match &self.db_process {
            Some(_) if self.postgres => cpu::postgres_cpu_ms(),
            Some(p) => cpu::process_cpu_ms(&p.pid),
            None => None,
        };
        Sample {
            wire: self
                .proxy
                .as_ref()
                .map(|(_, c)| c.snapshot())
                .unwrap_or_default(),
            worker_cpu_ms: self
                .worker
                .as_ref()
                .and_then(|w| cpu::process_cpu_ms(&w.child.id().to_string())),
            db_cpu_ms,
            at: Some(Instant::now()),
        }
    }

    /// `b - a`.
    fn cost(&self, a: &Sample, b: &Sample) -> Cost {
        let secs = match (a.at, b.at) {
            (Some(a), Some(b)) => b.duration_since(a).as_secs_f64(),
            _ => 0.0,
        };
        let sent = wire::delta(&a.wire, &b.wire);
        let (statements, round_trips) = match &self.proxy {
            Some((p, _)) => (
                Some(statements(*p, &sent) as f64),
                Some(round_trips(*p, &sent) as f64),
            ),
            None => (None, None),
        };
        let d = |x: Option<f64>, y: Option<f64>| Some(y? - x?);
        Cost {
            statements,
            round_trips,
            worker_cpu_ms: d(a.worker_cpu_ms, b.worker_cpu_ms),
            db_cpu_ms: d(a.db_cpu_ms, b.db_cpu_ms),
            secs,
        }
    }

    /// Stops the previous phase's worker and starts one serving `task` alone; prints its idle
    /// rate (claim polls with nothing to claim), which every figure of its phase includes
    /// while the phase waits for a claim.
    async fn start_worker(&mut self, task: &str) -> Result<()> {
        self.worker = None;
        let config = write_config(&self.dir, self.kind, self.args, task)?;
        let mut worker = Worker::spawn(
            &self.args.onestep,
            &config,
            &self.worker_dsn,
            &self.dir,
            task,
        )?;
        worker.wait_log("onestep worker running", Duration::from_secs(120))?;
        self.worker = Some(worker);
        // Past the start-up reads.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let a = self.sample().await;
        tokio::time::sleep(Duration::from_secs_f64(self.args.idle_s.max(0.5))).await;
        let b = self.sample().await;
        let c = self.cost(&a, &b);
        println!(
            "  worker serving `{task}` alone, idle (a claim poll every {POLL_S} s), per second: {}",
            c.per(c.secs).text()
        );
        Ok(())
    }

    /// Waits until every one of `ids` is terminal; the executions.
    async fn wait_all(&self, ids: &[Uuid]) -> Result<Vec<onestep_core::Execution>> {
        let deadline = Instant::now() + Duration::from_secs(600);
        let executions = self.backend.executions();
        let mut done = Vec::with_capacity(ids.len());
        let mut next = 0;
        while next < ids.len() {
            match executions.get(NAMESPACE, ids[next]).await? {
                Some(e) if e.terminal() => {
                    done.push(e);
                    next += 1;
                    continue;
                }
                Some(_) => {}
                None => bail!("execution {} vanished", ids[next]),
            }
            if Instant::now() > deadline {
                bail!(
                    "{} of {} executions not finished after 600 s; worker log:\n{}",
                    ids.len() - next,
                    ids.len(),
                    self.worker.as_ref().map(Worker::text).unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for e in &done {
            ensure!(
                e.status == onestep_core::ExecutionStatus::Succeeded,
                "execution {} ended {:?}: {:?}",
                e.id,
                e.status,
                e.error
            );
        }
        Ok(done)
    }

    /// Submits, waits; the cost and the sum over executions of claim → completion (s).
    async fn phase(&self, task: &str, payloads: Vec<Value>) -> Result<(Cost, f64, Vec<Uuid>)> {
        let a = self.sample().await;
        let ids = submit(&*self.backend, task, payloads).await?;
        let done = self.wait_all(&ids).await?;
        let b = self.sample().await;
        let busy: f64 = done
            .iter()
            .filter_map(|e| Some((e.finished_at? - e.started_at?).as_seconds_f64()))
            .sum();
        Ok((self.cost(&a, &b), busy, ids))
    }

    /// Phase 1.
    async fn step_cost(&self) -> Result<()> {
        let (n, e) = (self.args.steps, self.args.executions);
        let (base, base_busy, _) = self
            .phase("steps", vec![json!({"n": 0, "step_ms": 0}); e as usize])
            .await?;
        let (with, busy, _) = self
            .phase("steps", vec![json!({"n": n, "step_ms": 0}); e as usize])
            .await?;
        let steps = f64::from(n) * f64::from(e);
        let per = with.minus(&base).per(steps);
        println!(
            "  step (a step-load that misses, then a step-save), {e} × {n} steps minus {e} × 0, \
             one at a time: per step {}, wall {:.0} µs (claim → completion; {:.1} ms per execution \
             with no step)",
            per.text(),
            (busy - base_busy) / steps * 1e6,
            base_busy / f64::from(e) * 1e3
        );
        Ok(())
    }

    /// Phase 2.
    async fn resume(&self, leases: &[LeaseRef]) -> Result<()> {
        let recorded = self.args.recorded;
        // One execution with no step: what a resume costs beyond its loads.
        let (base, base_busy, _) = self
            .phase("steps", vec![json!({"n": 0, "step_ms": 0}); leases.len()])
            .await?;
        let a = self.sample().await;
        for lease in leases {
            self.backend.leases().release(lease).await?;
        }
        let ids: Vec<Uuid> = leases.iter().map(|l| l.execution_id).collect();
        self.wait_all(&ids).await?;
        let b = self.sample().await;
        let mut attempt2 = Vec::new();
        for id in &ids {
            let attempts = self
                .backend
                .executions()
                .attempts(NAMESPACE, *id)
                .await?
                .unwrap_or_default();
            let last = attempts.last().context("no attempt")?;
            ensure!(
                last.attempt_no == 2,
                "resumed in attempt {}",
                last.attempt_no
            );
            let finished = last.finished_at.context("attempt 2 not finished")?;
            attempt2.push((finished - last.started_at).as_seconds_f64());
            let out = self.backend.executions().get(NAMESPACE, *id).await?;
            let ran_here = out
                .and_then(|e| e.result)
                .and_then(|r| r.get("ran_here").and_then(Value::as_u64));
            ensure!(
                ran_here == Some(0),
                "the resumed attempt worked {ran_here:?} steps (expected 0)"
            );
        }
        let r = f64::from(u32::try_from(leases.len()).unwrap_or(u32::MAX));
        let resume = self.cost(&a, &b).per(r);
        let mean = attempt2.iter().sum::<f64>() / r;
        let per_load = self.cost(&a, &b).minus(&base).per(r * f64::from(recorded));
        println!(
            "  resume with {recorded} recorded steps (attempt 2 loads them all, works none), \
             {} execution(s): claim → completion {:.1} ms; per resume {}",
            leases.len(),
            mean * 1e3,
            resume.text()
        );
        println!(
            "    per load (minus an execution with no step, {:.1} ms): {}, wall {:.0} µs",
            base_busy / r * 1e3,
            per_load.text(),
            (mean - base_busy / r) / f64::from(recorded) * 1e6
        );
        Ok(())
    }

    /// Phase 3, the park and wake.
    async fn park_wake(&self) -> Result<()> {
        let k = self.args.cycles as usize;
        let (base, base_busy, _) = self
            .phase("sleepy", vec![json!({"n": 1, "step_ms": 0}); k])
            .await?;
        let (with, busy, ids) = self
            .phase(
                "sleepy",
                vec![json!({"n": 1, "step_ms": 0, "sleep_ms": 10, "sleep_after": 0}); k],
            )
            .await?;
        self.print_cycle(
            "park/wake (steps guest sleeping 10 ms once, minus the same without the sleep)",
            (with, busy),
            (base, base_busy),
            &ids,
        )
        .await
    }

    /// Phase 3, the plain retry.
    async fn retry(&self) -> Result<()> {
        let k = self.args.cycles as usize;
        let (base, base_busy, _) = self
            .phase("flaky", vec![json!({"succeed_on_attempt": 1}); k])
            .await?;
        let (with, busy, ids) = self
            .phase("flaky", vec![json!({"succeed_on_attempt": 2}); k])
            .await?;
        self.print_cycle(
            "plain retry (flaky failing once retryably, 10 ms retry delay, minus succeeding at once)",
            (with, busy),
            (base, base_busy),
            &ids,
        )
        .await
    }

    async fn print_cycle(
        &self,
        what: &str,
        (cost, busy): (Cost, f64),
        (base, base_busy): (Cost, f64),
        ids: &[Uuid],
    ) -> Result<()> {
        let k = ids.len();
        let kf = k as f64;
        let per = cost.minus(&base).per(kf);
        let gaps = self.gaps(ids).await?;
        println!(
            "  {what}, {k} executions at once: per cycle {}, claim → completion +{:.1} ms \
             ({:.1} → {:.1} ms per execution); attempt 1 end → attempt 2 start p50 {:.1} ms, max {:.1} ms",
            per.text(),
            (busy - base_busy) / kf * 1e3,
            base_busy / kf * 1e3,
            busy / kf * 1e3,
            pct(&gaps, 50) * 1e3,
            gaps.last().copied().unwrap_or(0.0) * 1e3,
        );
        Ok(())
    }

    /// Sorted seconds from the end of attempt 1 to the start of attempt 2 of each of `ids`.
    async fn gaps(&self, ids: &[Uuid]) -> Result<Vec<f64>> {
        let mut gaps = Vec::with_capacity(ids.len());
        for id in ids {
            let attempts = self
                .backend
                .executions()
                .attempts(NAMESPACE, *id)
                .await?
                .unwrap_or_default();
            ensure!(
                attempts.len() == 2,
                "execution {id} has {} attempts, expected 2",
                attempts.len()
            );
            let end = attempts[0]
                .finished_at
                .context("attempt 1 has no finished_at")?;
            gaps.push((attempts[1].started_at - end).as_seconds_f64());
        }
        gaps.sort_by(f64::total_cmp);
        Ok(gaps)
    }
}

fn pct(sorted: &[f64], p: usize) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() * p).div_ceil(100)).clamp(1, sorted.len()) - 1;
    sorted[i]
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

/// Round trips: PostgreSQL `Sync` and `Query`; MySQL every command.
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
    fn spawn(onestep: &Path, config: &Path, dsn: &str, dir: &Path, task: &str) -> Result<Worker> {
        let log = dir.join(format!("worker-{task}.log"));
        let file = std::fs::File::create(&log)?;
        let child = Command::new(onestep)
            .arg("run")
            .arg(config)
            .env("ONESTEP_DSN", dsn)
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .with_context(|| format!("spawn {} run", onestep.display()))?;
        Ok(Worker { child, log })
    }

    fn text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wait_log(&mut self, needle: &str, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        while !self.text().contains(needle) {
            if let Some(status) = self.child.try_wait()? {
                bail!("the worker exited ({status}):\n{}", self.text());
            }
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
}

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
