//! `onestep bench`: submit N no-op executions, drain them with one in-process worker, and print
//! throughput, queue latency and CPU cost per execution. Figures, not a timed test:
//! build with `--release` before reading them.

mod counting;
mod cpu;
mod http;
mod retention;
mod rss;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use async_trait::async_trait;
use chrono::Utc;
use onestep_core::history::{HistoryIds, HistorySeed, MAX_HISTORY_ROWS};
use onestep_core::ports::ExecutionTiming;
use onestep_core::request::SubmitRequest;
use onestep_core::runner::{Invocation, RunOutcome, TaskRunner};
use onestep_core::{ExecutionClient, Limits};
use onestep_mysql::session::Flavor;
use onestep_mysql::{DdlStyle, MySqlBackend, ScratchDatabase};
use onestep_wasm::{NetworkSettings, PoolSize, Runtime, RuntimeSettings, SandboxSettings};
use onestep_worker::{TaskBinding, TaskSettings, Worker, WorkerSettings};
use serde::Serialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::wiring::store::{Store, StoreOptions, kind_of_dsn};
use crate::wiring::wasm_cache_dir;
use crate::wiring::wasm_runner::WasmTaskRunner;
use onestep_config::DatabaseKind;

/// Arguments of `onestep bench`.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Number of executions to submit and drain.
    #[arg(short = 'n', long = "count", default_value_t = 20_000)]
    pub count: usize,
    /// Use this database (tables are created if missing; nothing is dropped). Default: create
    /// `onestep_bench_<random>` on `--server-url` and drop it at the end.
    #[arg(long, env = "ONESTEP_BENCH_DSN")]
    pub dsn: Option<String>,
    /// Server on which the throw-away database is created (without a database name): a
    /// `mysql://` or a `postgres://` URL.
    #[arg(long, default_value = "mysql://root@127.0.0.1:3306/")]
    pub server_url: String,
    /// Keep the throw-away database instead of dropping it.
    #[arg(long)]
    pub keep: bool,
    /// `noop` (a trivial in-process runner returning the payload) or `component:PATH` (a wasm
    /// component, e.g. the echo guest, through the wasm runtime).
    #[arg(long, default_value = "noop")]
    pub handler: String,
    /// Worker concurrency (executions in flight).
    #[arg(long, default_value_t = 128)]
    pub concurrency: u32,
    /// Maximum leases per claim.
    #[arg(long, default_value_t = 100)]
    pub batch_size: u32,
    /// Maximum completions per `complete_many` transaction.
    #[arg(long, default_value_t = WorkerSettings::default().completion_batch)]
    pub completion_batch: usize,
    /// Submissions per `submit_many` call.
    #[arg(long, default_value_t = 1000)]
    pub submit_chunk: usize,
    /// Maximum pooled connections (default: concurrency + 4, as `onestep run` sizes it).
    #[arg(long)]
    pub pool_max: Option<usize>,
    /// Namespace of the benchmark's executions.
    #[arg(long, default_value = "bench")]
    pub namespace: String,
    /// Task name of the benchmark's executions.
    #[arg(long, default_value = "bench.noop")]
    pub task_name: String,
    /// Give up draining after this many seconds.
    #[arg(long, default_value_t = 600.0)]
    pub timeout_s: f64,
    /// Finished executions (one attempt each) seeded in the namespace and task before measuring
    /// (docs/benchmarks.md#history).
    #[arg(long, default_value_t = 0)]
    pub history: u64,
    /// Id version of the seeded history: `v7` (time-ordered, as written today) or `v4` (random,
    /// as written before).
    #[arg(long, default_value = "v7", value_parser = ["v7", "v4"])]
    pub history_ids: String,
    /// Id version of the executions and attempts the run itself writes: `v7` (time-ordered, as
    /// `onestep run` and `serve` write them) or `v4` (random), to compare the two layouts.
    #[arg(long, default_value = "v7", value_parser = ["v7", "v4"])]
    pub ids: String,
    /// Give every submission (and every seeded history row) an idempotency key, as callers
    /// that retry do, so the idempotency index is written and read
    /// (docs/benchmarks.md#the-idempotency-index): `random` (the default when the flag has no
    /// value: 32 random hex digits) or `ordered` (the run's keys are time-ordered, as keys
    /// derived from a UUIDv7 or a timestamp are; the history's stay random).
    #[arg(long, value_name = "ORDER", num_args = 0..=1, default_missing_value = "random",
          value_parser = ["random", "ordered"])]
    pub idempotency_keys: Option<String>,
    /// Submit and drain `-n` executions this many times on the same tables (the history is
    /// seeded once, before the first round); one report per round.
    #[arg(long, default_value_t = 1)]
    pub rounds: u32,
    /// After each round, purge the namespace's executions that finished longer ago than this
    /// (`30s`, `5min`), in batches of `--purge-batch`, and report what it removed and took
    /// (docs/benchmarks.md#steady-state-with-purge).
    #[arg(long, value_name = "DURATION")]
    pub purge_older_than: Option<String>,
    /// After this round, run `onestep migrate --upgrade` on the tables (with
    /// `--reference-tables`: the same run measures reference-created tables before and after
    /// the upgrade, docs/benchmarks.md#reference-created-tables).
    #[arg(long, value_name = "ROUND")]
    pub upgrade_after_round: Option<u32>,
    /// Executions removed per purge transaction.
    #[arg(long, default_value_t = 1000)]
    pub purge_batch: u32,
    /// Create missing tables with the reference's DDL (MySQL/MariaDB: no `claimable` column and
    /// indexes; PostgreSQL: no expiry and status indexes), to measure reference-created tables
    /// before and after `onestep migrate --upgrade`.
    #[arg(long)]
    pub reference_tables: bool,
    /// Do not persist attempt diagnostics (as when their table is absent), to measure what
    /// they cost (docs/observability.md#attempt-diagnostics).
    #[arg(long)]
    pub no_diagnostics: bool,
    /// Outbound HTTP mode (docs/benchmarks.md#outbound-http-1000-in-flight): start a loopback
    /// HTTP server answering `GET /slow` after this many milliseconds, allow the task's sandbox
    /// that origin, and give every execution the payload `{"url": "<origin>/slow"}`. Needs a
    /// `--handler component:PATH` that fetches its payload's `url` (the `fetch` guest).
    #[arg(long)]
    pub http_delay_ms: Option<u64>,
    /// Lease length in seconds (default: the worker's default, 90 s; 6 s with
    /// `--http-delay-ms`, so that heartbeats happen during the run).
    #[arg(long)]
    pub lease_s: Option<f64>,
    /// Heartbeat period in seconds (default: the worker's default, 30 s; 2 s with
    /// `--http-delay-ms`). At most a third of the lease.
    #[arg(long)]
    pub heartbeat_s: Option<f64>,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The figures of one run.
#[derive(Debug, Serialize)]
struct Report {
    count: usize,
    handler: String,
    server: String,
    build: &'static str,
    concurrency: u32,
    batch_size: u32,
    completion_batch: usize,
    submit_chunk: usize,
    pool_max: usize,
    /// Whether the tables have the `claimable` column and indexes (ours or upgraded).
    claimable_indexes: bool,
    /// Whether attempt diagnostics were persisted.
    diagnostics: bool,
    history: u64,
    history_ids: String,
    history_seed_s: f64,
    /// Id version of the rows this run wrote.
    ids: String,
    /// Whether submissions and history carried idempotency keys.
    idempotency_keys: bool,
    /// `random` or `ordered` (the run's keys) when they did.
    idempotency_key_order: Option<String>,
    /// 1-based round (`--rounds`).
    round: u32,
    /// The purge after this round (`--purge-older-than`).
    purge: Option<retention::PurgeFigures>,
    /// Rows and bytes of each table at the end of the round (after the purge).
    footprint: Vec<retention::Footprint>,
    /// The `migrate --upgrade` run before this round (`--upgrade-after-round`).
    upgrade_before: Option<retention::UpgradeFigures>,
    submit_s: f64,
    submit_per_s: f64,
    drain_s: f64,
    completed_per_s: f64,
    succeeded: u64,
    not_succeeded: u64,
    queued_to_started_ms: Percentiles,
    started_to_finished_ms: Percentiles,
    worker_cpu_ms_per_execution: Option<f64>,
    db_cpu_ms_per_execution: Option<f64>,
    db_process: Option<String>,
    /// Server counter deltas of the drain phase per execution (name kept for compatibility).
    db_statements_per_execution: BTreeMap<String, f64>,
    /// Server counter deltas of the submit phase per execution.
    db_submit_counters_per_execution: BTreeMap<String, f64>,
    /// `Innodb_buffer_pool_reads` and the sum of `Handler_read_*` per execution, per phase.
    submit_io: PhaseIo,
    drain_io: PhaseIo,
    lease_s: f64,
    heartbeat_s: f64,
    /// The worker's storage calls during the drain.
    store_calls: counting::CallCounts,
    /// Heartbeat calls (ticks that reached the store) per second of drain.
    heartbeat_calls_per_s: f64,
    /// Leases per heartbeat call, on average.
    heartbeat_leases_per_call: f64,
    /// Highest number of executions in flight seen by the sampler (claimed, not yet finished).
    peak_in_flight: u64,
    /// This process's memory around the drain (`/proc/self/status`).
    memory: Option<Memory>,
    /// The loopback server of `--http-delay-ms`.
    http: Option<HttpFigures>,
    /// For a component handler: whether wasm instances came from the pooling allocator (else
    /// on demand, after the pool's address space could not be reserved).
    wasm_pooling: Option<bool>,
}

/// Resident memory of the bench process (worker, wasm runtime, HTTP client pool, loopback
/// server) around the drain, in MiB.
#[derive(Debug, Serialize)]
struct Memory {
    /// `VmRSS` just before the worker starts.
    rss_before_mib: f64,
    /// Highest `VmRSS` sampled (every 20 ms) during the drain.
    rss_peak_mib: f64,
    /// `VmHWM` at the end (the process's peak since it started).
    hwm_mib: f64,
    /// `(rss_peak - rss_before) / peak_in_flight`.
    per_in_flight_mib: f64,
}

#[derive(Debug, Serialize)]
struct HttpFigures {
    delay_ms: u64,
    origin: String,
    answered: u64,
}

/// Pages read from disk into the buffer pool, page reads asked of it and rows read by the
/// handler, per execution. On PostgreSQL (docs/benchmarks.md#history): `blks_read`,
/// `blks_read + blks_hit` and `tup_returned + tup_fetched` of `pg_stat_database`.
#[derive(Debug, Serialize, Default)]
struct PhaseIo {
    buffer_pool_reads: f64,
    buffer_pool_read_requests: f64,
    handler_reads: f64,
}

#[derive(Debug, Serialize, Default)]
struct Percentiles {
    p50: f64,
    p99: f64,
    max: f64,
}

/// A runner that returns its payload (the cheapest possible handler). It records the run
/// facts a component run records (digest, peak memory), so each attempt's diagnostics row is
/// written as it would be for a real handler.
struct NoopRunner;

#[async_trait]
impl TaskRunner for NoopRunner {
    async fn run(&self, invocation: Invocation, _cancel: CancellationToken) -> RunOutcome {
        if let Some(journal) = &invocation.journal {
            journal.record_facts(onestep_core::diagnostics::RunFacts {
                trap_kind: None,
                component_digest: Some(NOOP_DIGEST.to_owned()),
                fuel_consumed: None,
                peak_memory_bytes: Some(65_536),
            });
        }
        RunOutcome::Succeeded(invocation.payload)
    }
}

/// The digest the no-op runner reports: SHA-256 of the empty string.
const NOOP_DIGEST: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// Runs the command; returns the process exit code (0 ok, 1 failure, 2 bad arguments).
pub async fn run(args: BenchArgs) -> u8 {
    if args.count == 0 || args.submit_chunk == 0 || args.concurrency == 0 || args.batch_size == 0 {
        eprintln!("onestep bench: -n, --submit-chunk, --concurrency and --batch-size must be >= 1");
        return 2;
    }
    if args.http_delay_ms.is_some() && !args.handler.starts_with("component:") {
        eprintln!(
            "onestep bench: --http-delay-ms needs --handler component:PATH (e.g. the fetch guest)"
        );
        return 2;
    }
    if args
        .upgrade_after_round
        .is_some_and(|k| k == 0 || k >= args.rounds)
    {
        eprintln!("onestep bench: --upgrade-after-round must be between 1 and --rounds - 1");
        return 2;
    }
    if args.rounds == 0 {
        eprintln!("onestep bench: --rounds must be >= 1");
        return 2;
    }
    let purge_older_than = match args
        .purge_older_than
        .as_deref()
        .map(retention::parse_older_than)
    {
        Some(Err(e)) => {
            eprintln!("onestep bench: {e}");
            return 2;
        }
        Some(Ok(d)) => Some(d),
        None => None,
    };
    if args.history > MAX_HISTORY_ROWS {
        eprintln!(
            "onestep bench: --history {} is over the limit of {MAX_HISTORY_ROWS} rows",
            args.history
        );
        return 2;
    }
    onestep_core::ids::set_new_id_version(if args.ids == "v4" {
        onestep_core::ids::IdVersion::V4
    } else {
        onestep_core::ids::IdVersion::V7
    });
    match bench(&args, purge_older_than).await {
        Ok(reports) => {
            if args.json {
                let text = match reports.as_slice() {
                    [one] => serde_json::to_string_pretty(one),
                    many => serde_json::to_string_pretty(many),
                };
                match text {
                    Ok(s) => println!("{s}"),
                    Err(e) => {
                        eprintln!("onestep bench: {e}");
                        return 1;
                    }
                }
            } else {
                for report in &reports {
                    print_text(report);
                }
                if reports.len() > 1 {
                    retention::print_rounds(&reports);
                }
            }
            0
        }
        Err(e) => {
            eprintln!("onestep bench: {e:#}");
            1
        }
    }
}

/// A throw-away database on a MySQL/MariaDB or a PostgreSQL server.
enum Scratch {
    Mysql(ScratchDatabase),
    Postgres(onestep_postgres::ScratchDatabase),
}

/// The benchmark's backend as its concrete type (history seeding, reference DDL, the server
/// process), next to the handle every other step uses.
enum Concrete {
    Mysql(MySqlBackend),
    Postgres(onestep_postgres::PgBackend),
}

impl Concrete {
    fn handle(&self) -> Store {
        match self {
            Concrete::Mysql(b) => {
                Store::from(Arc::new(b.clone()) as Arc<dyn onestep_core::Backend>)
            }
            Concrete::Postgres(b) => {
                Store::from(Arc::new(b.clone()) as Arc<dyn onestep_core::Backend>)
            }
        }
    }

    fn as_mysql(&self) -> Option<&MySqlBackend> {
        match self {
            Concrete::Mysql(b) => Some(b),
            Concrete::Postgres(_) => None,
        }
    }
}

impl Scratch {
    async fn create(server_url: &str) -> Result<Self> {
        let what = "cannot create the benchmark database on --server-url";
        Ok(match kind_of_dsn(server_url) {
            DatabaseKind::Mysql => Scratch::Mysql(
                ScratchDatabase::create(server_url, "onestep_bench_")
                    .await
                    .context(what)?,
            ),
            DatabaseKind::Postgres => Scratch::Postgres(
                onestep_postgres::ScratchDatabase::create(server_url, "onestep_bench_")
                    .await
                    .context(what)?,
            ),
        })
    }

    fn dsn(&self) -> &str {
        match self {
            Scratch::Mysql(d) => d.dsn(),
            Scratch::Postgres(d) => d.dsn(),
        }
    }

    fn name(&self) -> String {
        match self {
            Scratch::Mysql(d) => d.name().to_owned(),
            Scratch::Postgres(d) => d.name().to_owned(),
        }
    }

    async fn drop_database(self) -> Result<(), onestep_core::ExecutionError> {
        match self {
            Scratch::Mysql(d) => d.drop_database().await,
            Scratch::Postgres(d) => d.drop_database().await,
        }
    }
}

async fn bench(args: &BenchArgs, purge_older_than: Option<Duration>) -> Result<Vec<Report>> {
    let (scratch, dsn) = match &args.dsn {
        Some(d) => (None, d.clone()),
        None => {
            let db = Scratch::create(&args.server_url).await?;
            let dsn = db.dsn().to_owned();
            (Some(db), dsn)
        }
    };
    let mut reports = Vec::new();
    let mut outcome = Ok(());
    let mut upgraded = None;
    for round in 1..=args.rounds {
        match bench_on(args, &dsn, round, purge_older_than).await {
            Ok(mut r) => {
                if let Some(u) = upgraded.take() {
                    r.upgrade_before = Some(u);
                }
                reports.push(r);
                if args.upgrade_after_round == Some(round) {
                    match retention::upgrade(&dsn).await {
                        Ok(u) => upgraded = Some(u),
                        Err(e) => {
                            outcome = Err(e.context(format!("upgrade after round {round}")));
                            break;
                        }
                    }
                }
            }
            Err(e) => {
                outcome = Err(e.context(format!("round {round}")));
                break;
            }
        }
    }
    if let Some(db) = scratch {
        if args.keep {
            eprintln!("onestep bench: kept database {}", db.name());
        } else {
            let name = db.name();
            if let Err(e) = db.drop_database().await {
                eprintln!("onestep bench: could not drop database {name}: {e}");
            }
        }
    }
    outcome.map(|()| reports)
}

/// The runner of `--handler`, and for a component whether the wasm runtime got its pooling
/// allocator (`None` for `noop`).
fn runner_for(
    handler: &str,
    concurrency: u32,
    sandbox: SandboxSettings,
) -> Result<(Arc<dyn TaskRunner>, Option<bool>)> {
    if handler == "noop" {
        return Ok((Arc::new(NoopRunner), None));
    }
    let Some(path) = handler.strip_prefix("component:") else {
        bail!("--handler must be 'noop' or 'component:PATH', got '{handler}'");
    };
    let settings = RuntimeSettings {
        cache_dir: wasm_cache_dir(),
        pool: PoolSize::for_tasks([(concurrency, &sandbox)]),
        max_memory_bytes: (64u64 << 20).next_power_of_two(),
        fuel_metering: false,
        ..RuntimeSettings::default()
    };
    let runtime = Runtime::new(settings).context("cannot start the WebAssembly runtime")?;
    let loaded = runtime
        .load_for(PathBuf::from(path), &sandbox)
        .with_context(|| format!("cannot load {path}"))?;
    let runner = WasmTaskRunner::new(loaded, sandbox, Limits::default().max_result_bytes);
    Ok((Arc::new(runner), Some(runtime.pooling_enabled())))
}

async fn bench_on(
    args: &BenchArgs,
    dsn: &str,
    round: u32,
    purge_older_than: Option<Duration>,
) -> Result<Report> {
    let history = if round == 1 { args.history } else { 0 };
    let pool_max = args
        .pool_max
        .unwrap_or(args.concurrency as usize + 4)
        .max(2);
    let mut store_opts = StoreOptions::new(dsn);
    store_opts.pool_max = pool_max;
    let mut opts = store_opts.store.clone();
    let concrete = match store_opts.kind {
        DatabaseKind::Mysql => {
            opts.diagnostics = !args.no_diagnostics;
            let style = if args.reference_tables {
                DdlStyle::Reference
            } else {
                DdlStyle::Onestep
            };
            Concrete::Mysql(
                MySqlBackend::open_with_ddl(opts, style)
                    .await
                    .context("cannot open the backend")?,
            )
        }
        DatabaseKind::Postgres => {
            if args.reference_tables && round == 1 {
                onestep_postgres::upgrade::create_reference_shaped(opts.clone())
                    .await
                    .context("cannot create reference-shaped tables")?;
            }
            opts.diagnostics = !args.no_diagnostics;
            Concrete::Postgres(
                onestep_postgres::PgBackend::open(opts)
                    .await
                    .context("cannot open the backend")?,
            )
        }
    };
    let backend = concrete.handle();
    let server = backend.server_version();
    // docs/postgres.md#schema: PostgreSQL's partial indexes already hold only live rows; there
    // this says whether our expiry and status indexes are present.
    let claimable_indexes = match &concrete {
        Concrete::Mysql(b) => b.schema_report().features.claimable_column,
        Concrete::Postgres(b) => b.schema_report().upgrade_command.is_none(),
    };
    let server_http = match args.http_delay_ms {
        Some(ms) => Some(http::SlowServer::start(Duration::from_millis(ms))?),
        None => None,
    };
    let mut sandbox = SandboxSettings::default();
    if let Some(srv) = &server_http {
        sandbox.network = NetworkSettings::allowing([srv.origin().as_str()])
            .map_err(|e| anyhow::anyhow!("loopback origin: {e}"))?;
        // Each attempt makes one request; the timeout leaves room for the delay.
        sandbox.network.max_concurrent_requests = 1;
    }
    let (runner, wasm_pooling) = runner_for(&args.handler, args.concurrency, sandbox)?;
    let payload_url = server_http
        .as_ref()
        .map(|srv| format!("{}/slow", srv.origin()));

    // History phase (not measured beyond its wall time).
    let seed_started = Instant::now();
    if history > 0 {
        let seed = HistorySeed {
            namespace: args.namespace.clone(),
            task_name: args.task_name.clone(),
            count: history,
            ids: if args.history_ids == "v4" {
                HistoryIds::V4
            } else {
                HistoryIds::V7
            },
            before: Utc::now(),
            idempotency_keys: args.idempotency_keys.is_some(),
        };
        let seeded = match &concrete {
            Concrete::Mysql(b) => b.seed_history(&seed).await,
            Concrete::Postgres(b) => b.seed_history(&seed).await,
        };
        seeded.context("cannot seed the history")?;
    }
    let history_seed_s = seed_started.elapsed().as_secs_f64();
    let measured_since = Utc::now();

    // Submit phase.
    let client = ExecutionClient::new(backend.executions(), &args.namespace, Limits::default())?;
    let status_submit = backend.stats().server_counters().await.unwrap_or_default();
    let started = Instant::now();
    let mut next = 0usize;
    while next < args.count {
        let end = (next + args.submit_chunk).min(args.count);
        let requests: Vec<SubmitRequest> = (next..end)
            .map(|i| SubmitRequest {
                task_name: args.task_name.clone(),
                payload: match &payload_url {
                    Some(url) => json!({ "url": url, "i": i }),
                    None => json!({ "i": i }),
                },
                idempotency_key: args.idempotency_keys.as_deref().map(|order| {
                    if order == "ordered" {
                        // A UUIDv7's hex: ascending with time (docs/benchmarks.md#the-idempotency-index).
                        uuid::Uuid::now_v7().simple().to_string()
                    } else {
                        uuid::Uuid::new_v4().simple().to_string()
                    }
                }),
                ..SubmitRequest::default()
            })
            .collect();
        let results = client.submit_many(&requests).await?;
        if let Some(Err(e)) = results.into_iter().find(Result::is_err) {
            bail!("submit failed: {e}");
        }
        next = end;
    }
    let submit_s = started.elapsed().as_secs_f64();

    // Drain phase.
    let mut settings = TaskSettings::new(&args.namespace, &args.task_name);
    settings.worker_id = "onestep-bench".into();
    settings.concurrency = args.concurrency;
    settings.batch_size = args.batch_size;
    let http_mode = server_http.is_some();
    if let Some(s) = args.lease_s.or(http_mode.then_some(6.0)) {
        settings.lease_duration = secs(s, "--lease-s")?;
    }
    if let Some(s) = args.heartbeat_s.or(http_mode.then_some(2.0)) {
        settings.heartbeat_interval = secs(s, "--heartbeat-s")?;
        settings.cancel_poll_interval = settings
            .cancel_poll_interval
            .min(settings.heartbeat_interval);
    }
    let lease_s = settings.lease_duration.as_secs_f64();
    let heartbeat_s = settings.heartbeat_interval.as_secs_f64();
    let (store, calls) = counting::Counting::new(backend.leases());
    let binding = TaskBinding {
        settings,
        store: Arc::new(store),
        runner,
        quarantine: onestep_worker::Quarantine::default(),
    };
    let worker = Worker::new(
        vec![binding],
        WorkerSettings {
            completion_batch: args.completion_batch.max(1),
            ..WorkerSettings::default()
        },
    )?;
    let stats = worker.stats();
    let db_proc = match concrete.as_mysql() {
        Some(b) => cpu::find_server(backend_port(dsn), b.server().flavor == Flavor::MariaDb),
        None => cpu::postgres_processes(),
    };
    let db_cpu = |p: &cpu::ServerProcess| match concrete.as_mysql() {
        Some(_) => cpu::process_cpu_ms(&p.pid),
        None => cpu::postgres_cpu_ms(),
    };
    let status_before = backend.stats().server_counters().await.unwrap_or_default();
    let self_cpu0 = cpu::process_cpu_ms("self");
    let db_cpu0 = db_proc.as_ref().and_then(db_cpu);
    let calls0 = calls.snapshot();
    let rss_before = rss::rss_bytes();
    let peak_in_flight = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sampler = {
        let (stats, peak) = (Arc::clone(&stats), Arc::clone(&peak_in_flight));
        rss::RssSampler::start(Duration::from_millis(20), move || {
            let done = stats.succeeded()
                + stats.failed()
                + stats.cancelled()
                + stats.retried()
                + stats.released()
                + stats.lease_lost();
            peak.fetch_max(
                stats.claimed().saturating_sub(done),
                std::sync::atomic::Ordering::Relaxed,
            );
        })
    };
    let shutdown = CancellationToken::new();
    let drain_started = Instant::now();
    let handle = tokio::spawn(worker.run(shutdown.clone()));
    let deadline = drain_started + Duration::from_secs_f64(args.timeout_s.max(0.1));
    let total = args.count as u64;
    loop {
        let done = stats.succeeded() + stats.failed() + stats.cancelled() + stats.retried();
        if done >= total {
            break;
        }
        if Instant::now() > deadline {
            sampler.finish();
            shutdown.cancel();
            let _ = handle.await;
            bail!(
                "drain timed out after {:.1} s with {done} of {total} completed",
                args.timeout_s
            );
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let drain_s = drain_started.elapsed().as_secs_f64();
    let rss_peak = sampler.finish();
    let calls1 = calls.snapshot();
    let self_cpu1 = cpu::process_cpu_ms("self");
    let db_cpu1 = db_proc.as_ref().and_then(db_cpu);
    let status_after = backend.stats().server_counters().await.unwrap_or_default();
    shutdown.cancel();
    handle.await.context("worker task panicked")??;
    let http = server_http.map(|srv| {
        let figures = HttpFigures {
            delay_ms: args.http_delay_ms.unwrap_or(0),
            origin: srv.origin(),
            answered: srv.answered(),
        };
        srv.stop();
        figures
    });
    let store_calls = calls1.minus(&calls0);
    let peak_in_flight = peak_in_flight.load(std::sync::atomic::Ordering::Relaxed);
    let memory = rss_before.map(|before| {
        let mib = |b: u64| round3(b as f64 / f64::from(1u32 << 20));
        let grown = rss_peak.saturating_sub(before);
        Memory {
            rss_before_mib: mib(before),
            rss_peak_mib: mib(rss_peak),
            hwm_mib: rss::hwm_bytes().map_or(0.0, mib),
            per_in_flight_mib: round3(
                grown as f64 / f64::from(1u32 << 20) / peak_in_flight.max(1) as f64,
            ),
        }
    });

    let n = args.count as f64;
    let per_exec = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => Some((b - a) / n),
        _ => None,
    };
    let statements = counter_deltas(&status_before, &status_after, n);
    let submit_counters = counter_deltas(&status_submit, &status_before, n);
    let (queued, running, succeeded) = latencies(
        &backend
            .stats()
            .execution_timings(&args.namespace, Some(measured_since))
            .await?,
    );
    let purge = match purge_older_than {
        Some(older_than) => {
            Some(retention::purge(&backend, &args.namespace, older_than, args.purge_batch).await?)
        }
        None => None,
    };
    let footprint = retention::footprint(&backend).await?;
    let diagnostics_on = backend.diagnostics_persisted();
    if let Err(e) = backend.close().await {
        eprintln!("onestep bench: closing the backend failed: {e}");
    }
    Ok(Report {
        count: args.count,
        handler: args.handler.clone(),
        server,
        build: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        diagnostics: diagnostics_on,
        concurrency: args.concurrency,
        batch_size: args.batch_size,
        completion_batch: args.completion_batch,
        submit_chunk: args.submit_chunk,
        pool_max,
        claimable_indexes,
        history,
        history_ids: args.history_ids.clone(),
        history_seed_s,
        ids: args.ids.clone(),
        idempotency_keys: args.idempotency_keys.is_some(),
        idempotency_key_order: args.idempotency_keys.clone(),
        round,
        purge,
        footprint,
        upgrade_before: None,
        submit_s,
        submit_per_s: n / submit_s,
        drain_s,
        completed_per_s: n / drain_s,
        succeeded,
        not_succeeded: total.saturating_sub(succeeded),
        queued_to_started_ms: queued,
        started_to_finished_ms: running,
        worker_cpu_ms_per_execution: per_exec(self_cpu0, self_cpu1),
        db_cpu_ms_per_execution: per_exec(db_cpu0, db_cpu1),
        db_process: db_proc.map(|p| format!("{} (pid {})", p.name, p.pid)),
        submit_io: PhaseIo::of(&submit_counters),
        drain_io: PhaseIo::of(&statements),
        db_statements_per_execution: statements,
        db_submit_counters_per_execution: submit_counters,
        lease_s,
        heartbeat_s,
        heartbeat_calls_per_s: round3(store_calls.heartbeat_calls as f64 / drain_s),
        heartbeat_leases_per_call: round3(
            store_calls.heartbeat_leases as f64 / store_calls.heartbeat_calls.max(1) as f64,
        ),
        store_calls,
        peak_in_flight,
        memory,
        http,
        wasm_pooling,
    })
}

/// A positive number of seconds as a `Duration`.
fn secs(s: f64, flag: &str) -> Result<Duration> {
    if !(s.is_finite() && s > 0.0) {
        bail!("{flag} must be a positive number of seconds, got {s}");
    }
    Ok(Duration::from_secs_f64(s))
}

/// `(after - before) / n` of every counter that grew, rounded to 3 decimals.
fn counter_deltas(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
    n: f64,
) -> BTreeMap<String, f64> {
    after
        .iter()
        .filter_map(|(k, v)| {
            let b = before.get(k).copied().unwrap_or(0.0);
            let d = (v - b) / n;
            (d > 0.0).then(|| (k.clone(), round3(d)))
        })
        .collect()
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

impl PhaseIo {
    fn of(per_exec: &BTreeMap<String, f64>) -> Self {
        let get = |k: &str| per_exec.get(k).copied().unwrap_or(0.0);
        let handler = per_exec
            .iter()
            .filter(|(k, _)| k.starts_with("handler_read_"))
            .fold(0.0, |sum, (_, v)| sum + v);
        if per_exec
            .keys()
            .any(|k| k.starts_with("blks_") || k.starts_with("tup_"))
        {
            // PostgreSQL's pg_stat_database equivalents.
            return PhaseIo {
                buffer_pool_reads: get("blks_read"),
                buffer_pool_read_requests: round3(get("blks_read") + get("blks_hit")),
                handler_reads: round3(get("tup_returned") + get("tup_fetched")),
            };
        }
        PhaseIo {
            buffer_pool_reads: get("innodb_buffer_pool_reads"),
            buffer_pool_read_requests: get("innodb_buffer_pool_read_requests"),
            handler_reads: round3(handler),
        }
    }
}

fn backend_port(dsn: &str) -> u16 {
    onestep_mysql::dsn::parse_dsn(dsn)
        .map(|p| p.tcp_port())
        .unwrap_or(3306)
}

/// Queue latency (`started_at - available_at`) and run latency (`finished_at - started_at`) of
/// the namespace's rows, plus the number that succeeded.
fn latencies(rows: &[ExecutionTiming]) -> (Percentiles, Percentiles, u64) {
    let mut queued: Vec<f64> = rows
        .iter()
        .filter_map(|r| r.queued_us)
        .map(us_to_ms)
        .collect();
    let mut running: Vec<f64> = rows
        .iter()
        .filter_map(|r| r.running_us)
        .map(us_to_ms)
        .collect();
    let succeeded = rows.iter().filter(|r| r.succeeded).count() as u64;
    (
        percentiles(&mut queued),
        percentiles(&mut running),
        succeeded,
    )
}

#[allow(clippy::cast_precision_loss)]
fn us_to_ms(us: i64) -> f64 {
    us as f64 / 1000.0
}

fn percentiles(v: &mut [f64]) -> Percentiles {
    if v.is_empty() {
        return Percentiles::default();
    }
    v.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let i = ((v.len() as f64 - 1.0) * q).round() as usize;
        v[i.min(v.len() - 1)]
    };
    Percentiles {
        p50: at(0.50),
        p99: at(0.99),
        max: v[v.len() - 1],
    }
}

fn opt_ms(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.3} ms"))
}

fn print_text(r: &Report) {
    println!(
        "onestep bench: {} executions, handler {}, server {}, {} build",
        r.count, r.handler, r.server, r.build
    );
    println!(
        "  flags: concurrency {}, batch_size {}, completion_batch {}, submit_chunk {}, pool_max {}",
        r.concurrency, r.batch_size, r.completion_batch, r.submit_chunk, r.pool_max
    );
    if !r.claimable_indexes {
        println!("  tables: without the claimable column and indexes (reference DDL)");
    }
    println!(
        "  attempt diagnostics: {}",
        if r.diagnostics { "persisted" } else { "off" }
    );
    if r.round > 1 || r.purge.is_some() {
        println!("  round {} (ids of new rows: {})", r.round, r.ids);
    } else if r.ids != "v7" {
        println!("  ids of new rows: {}", r.ids);
    }
    if let Some(order) = &r.idempotency_key_order {
        println!(
            "  idempotency keys: on every submission ({order}) and every history row (random)"
        );
    }
    if r.history > 0 {
        println!(
            "  history:   {} finished executions ({} ids) seeded in {:.2} s",
            r.history, r.history_ids, r.history_seed_s
        );
    }
    println!(
        "  submit:    {:>10.0} /s  ({:.2} s)",
        r.submit_per_s, r.submit_s
    );
    println!(
        "  completed: {:>10.0} /s  ({:.2} s; {} succeeded, {} not)",
        r.completed_per_s, r.drain_s, r.succeeded, r.not_succeeded
    );
    println!(
        "  queued->started:   p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms  (includes the backlog wait)",
        r.queued_to_started_ms.p50, r.queued_to_started_ms.p99, r.queued_to_started_ms.max
    );
    println!(
        "  started->finished: p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms",
        r.started_to_finished_ms.p50, r.started_to_finished_ms.p99, r.started_to_finished_ms.max
    );
    println!(
        "  CPU per execution (drain): worker {}, database {}{}",
        opt_ms(r.worker_cpu_ms_per_execution),
        opt_ms(r.db_cpu_ms_per_execution),
        r.db_process
            .as_ref()
            .map(|p| format!(" [{p}]"))
            .unwrap_or_default()
    );
    let (reads, requests, rows) = if r.server.starts_with("PostgreSQL") {
        (
            "blks_read",
            "blks_read+blks_hit",
            "tup_returned+tup_fetched",
        )
    } else {
        (
            "buffer-pool reads",
            "buffer-pool read requests",
            "Handler_read_* rows",
        )
    };
    println!(
        "  per execution: {reads} submit {} / drain {}; {requests} submit {} / drain {}; {rows} submit {} / drain {}",
        r.submit_io.buffer_pool_reads,
        r.drain_io.buffer_pool_reads,
        r.submit_io.buffer_pool_read_requests,
        r.drain_io.buffer_pool_read_requests,
        r.submit_io.handler_reads,
        r.drain_io.handler_reads
    );
    if let Some(pooling) = r.wasm_pooling {
        println!(
            "  wasm instances: {}",
            if pooling {
                "pooling allocator"
            } else {
                "on demand (the pooling allocator was unavailable)"
            }
        );
    }
    if let Some(h) = &r.http {
        println!(
            "  outbound HTTP: {} answering after {} ms; {} requests answered",
            h.origin, h.delay_ms, h.answered
        );
    }
    println!(
        "  in flight: peak {} (concurrency {}); lease {} s, heartbeat {} s",
        r.peak_in_flight, r.concurrency, r.lease_s, r.heartbeat_s
    );
    let c = &r.store_calls;
    println!(
        "  heartbeats: {} heartbeat_many calls ({:.2} /s), {:.1} leases per call (max {}); \
         {} claims ({} leases), {} completion batches, {} cancel polls, {} live writes",
        c.heartbeat_calls,
        r.heartbeat_calls_per_s,
        r.heartbeat_leases_per_call,
        c.heartbeat_max_leases,
        c.claims,
        c.claimed,
        c.complete_batches,
        c.cancel_polls,
        c.live_writes
    );
    if let Some(m) = &r.memory {
        println!(
            "  memory: RSS before {:.1} MiB, peak {:.1} MiB (VmHWM {:.1} MiB); {:.3} MiB per in-flight execution",
            m.rss_before_mib, m.rss_peak_mib, m.hwm_mib, m.per_in_flight_mib
        );
    }
    retention::print_report_lines(r.purge.as_ref(), &r.footprint);
    if let Some(u) = &r.upgrade_before {
        println!(
            "  before this round: migrate --upgrade in {:.2} s: {}",
            u.seconds,
            if u.steps.is_empty() {
                "nothing to add".to_owned()
            } else {
                u.steps.join(", ")
            }
        );
    }
    for (phase, counters) in [
        ("submit", &r.db_submit_counters_per_execution),
        ("drain", &r.db_statements_per_execution),
    ] {
        if !counters.is_empty() {
            let s: Vec<String> = counters.iter().map(|(k, v)| format!("{k} {v}")).collect();
            println!(
                "  server counters per execution ({phase}, global): {}",
                s.join(", ")
            );
        }
    }
}
