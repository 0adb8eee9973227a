//! `onestep task run FILE TASK --payload JSON` and `onestep replay ID --config FILE`: one attempt
//! of a task's component in exactly the sandbox its YAML declares, on this machine, with no
//! worker and (for `task run`) no database; nothing is written anywhere (docs/cli.md#onestep-task-run).
//! The guest's log lines, output lines and progress go to stderr as they happen; the outcome to
//! stdout. `task run --watch` runs again whenever the component file changes ([`super::watch`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use onestep_config::{AppConfig, TaskConfig};
use onestep_core::request::{RESERVED_METADATA_KEY, parse_execution_id};
use onestep_core::steps::{MemorySteps, STEPS_TABLE_ABSENT, StepStore};
use onestep_core::{Execution, ExecutionClient, ExecutionError};
use onestep_wasm::{CancelHandle, InvocationContext, Outcome, Report, SandboxSettings, TrapKind};
use serde_json::{Value, json};
use uuid::Uuid;

use super::common::{EnvArgs, load, load_local, read_json_arg};
use super::steps_file::Seed;
use crate::logging;
use crate::wiring::store::Store;
use crate::wiring::wasm_runner::load_task_handler;
use crate::wiring::{build_runtime, sandbox_settings, store_options};

/// Exit codes of `task run` and `replay` (docs/cli.md#onestep-task-run).
pub(crate) mod exit {
    /// The handler succeeded.
    pub(crate) const SUCCEEDED: u8 = 0;
    /// The host could not run the handler (instantiation, a missing preopen, …).
    pub(crate) const HOST_ERROR: u8 = 1;
    /// Bad arguments, an unloadable file or component, an unknown task or execution.
    pub(crate) const USAGE: u8 = 2;
    /// The handler returned a handler error, or output that is not accepted.
    pub(crate) const HANDLER_ERROR: u8 = 3;
    /// The guest trapped (panic, memory limit, fuel, any other trap).
    pub(crate) const TRAPPED: u8 = 4;
    /// The task's `timeout_s` passed.
    pub(crate) const TIMEOUT: u8 = 5;
    /// Stopped by `--cancel-after`.
    pub(crate) const CANCELLED: u8 = 6;
    /// The handler slept (docs/steps.md#sleep): a worker would park the attempt.
    pub(crate) const PARKED: u8 = 7;
}

/// `onestep task …`.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum TaskCommand {
    /// Run one attempt of a task's component locally, without a database.
    Run(TaskRunArgs),
}

/// Options of one local attempt.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct LocalRunArgs {
    /// Stop the guest after this many seconds, as a cancel would.
    #[arg(long, value_name = "SECONDS")]
    pub(crate) cancel_after: Option<f64>,
    /// Print the outcome as JSON.
    #[arg(long)]
    pub(crate) json: bool,
    /// Log level of the guest's lines and onestep's own (default DEBUG: progress included).
    #[arg(long, value_name = "LEVEL", default_value = "DEBUG")]
    pub(crate) log_level: String,
    #[command(flatten)]
    pub(crate) env: EnvArgs,
}

/// Arguments of `onestep task run`.
#[derive(Debug, clap::Args)]
pub(crate) struct TaskRunArgs {
    /// The YAML app file.
    pub(crate) file: PathBuf,
    /// The task to run.
    pub(crate) task: String,
    /// Payload: JSON text, or `@FILE` (`@-`: stdin).
    #[arg(long)]
    pub(crate) payload: String,
    /// Metadata: a JSON object, or `@FILE`.
    #[arg(long)]
    pub(crate) metadata: Option<String>,
    /// Attempt number the handler sees (1-based).
    #[arg(long, default_value_t = 1)]
    pub(crate) attempt: u32,
    /// After the run, run again each time the component file changes, until interrupted.
    #[arg(long)]
    pub(crate) watch: bool,
    /// Start with these durable steps in memory (docs/steps.md#local-runs): a JSON object of
    /// step key → recorded value, or the output of `onestep steps ID --values --json`; `-`
    /// reads stdin.
    #[arg(long, value_name = "FILE")]
    pub(crate) steps: Option<String>,
    #[command(flatten)]
    pub(crate) local: LocalRunArgs,
}

/// Arguments of `onestep replay`.
#[derive(Debug, clap::Args)]
pub(crate) struct ReplayArgs {
    /// Execution id.
    pub(crate) id: String,
    /// The YAML app file: the execution is read through its task's source (connector, tables,
    /// namespace), and run with that task's component and sandbox.
    #[arg(long, value_name = "FILE")]
    pub(crate) config: PathBuf,
    /// The task whose source holds the execution (default: every task's source is searched for
    /// the id; the execution then runs with the task named like its own task when the file has
    /// it, else with the task whose source holds it).
    #[arg(long)]
    pub(crate) task: Option<String>,
    /// Start with the execution's recorded durable steps in memory (read from its source,
    /// nothing written), so the replay loads them instead of doing their work again
    /// (docs/steps.md#local-runs). Without it the replay starts with no steps.
    #[arg(long)]
    pub(crate) with_steps: bool,
    #[command(flatten)]
    pub(crate) local: LocalRunArgs,
}

fn usage(message: impl std::fmt::Display) -> u8 {
    eprintln!("onestep: {message}");
    exit::USAGE
}

fn find_task<'a>(cfg: &'a AppConfig, name: &str) -> anyhow::Result<&'a TaskConfig> {
    cfg.task(name).ok_or_else(|| {
        let names: Vec<&str> = cfg.tasks.iter().map(|t| t.name.as_str()).collect();
        anyhow::anyhow!(
            "no task '{name}' in {} (tasks: {})",
            cfg.source_path.display(),
            names.join(", ")
        )
    })
}

/// What one local attempt runs.
struct Attempt<'a> {
    task: &'a TaskConfig,
    execution_id: Uuid,
    attempt: u32,
    payload: Value,
    metadata: serde_json::Map<String, Value>,
    /// The durable steps the attempt starts with, in memory (docs/steps.md#local-runs).
    steps: &'a Seed,
}

/// What one local attempt produced: the runtime's report, the SHA-256 of the component that
/// ran and how many steps it started with.
struct Ran {
    report: Report,
    digest: String,
    preloaded: usize,
}

/// Runs one attempt of `a.task` in its sandbox (or returns an exit code when the component
/// cannot be loaded).
async fn run_attempt(cfg: &AppConfig, a: Attempt<'_>, local: &LocalRunArgs) -> Result<Ran, u8> {
    let source = cfg
        .sources
        .get(&a.task.source)
        .ok_or_else(|| usage(format!("unknown resource '{}'", a.task.source)))?;
    let runtime = build_runtime(cfg).map_err(|e| usage(format!("{e:#}")))?;
    let sandbox = SandboxSettings {
        result_limit_bytes: Some(u64::try_from(source.limits.max_result_bytes).unwrap_or(u64::MAX)),
        ..sandbox_settings(&a.task.sandbox, &cfg.env)
    };
    let handler =
        load_task_handler(&runtime, a.task, &sandbox).map_err(|e| usage(format!("{e:#}")))?;
    let attempt_id = Uuid::new_v4();
    let clock: onestep_core::time::SharedClock = Arc::new(onestep_core::time::SystemClock);
    // Durable steps in memory, for this one attempt (docs/steps.md#local-runs): a `0.3.0`
    // component's saves and loads work, it finds the steps it starts with, and nothing
    // outlives the run.
    let memory = Arc::new(MemorySteps::new(clock.clone()));
    for (key, value) in a.steps {
        memory
            .seed(a.execution_id, key, value)
            .map_err(|e| usage(format!("step {key:?}: {e}")))?;
    }
    // The steps it starts with (a key given twice is one step).
    let preloaded = memory
        .list(a.execution_id)
        .await
        .map_or(0, |steps| steps.len());
    let mut metadata = a.metadata;
    metadata.insert(
        RESERVED_METADATA_KEY.to_owned(),
        json!({"id": a.execution_id.to_string(), "attempt_id": attempt_id.to_string()}),
    );
    let ctx = InvocationContext {
        execution_id: a.execution_id.to_string(),
        attempt_id: attempt_id.to_string(),
        attempt: a.attempt.max(1),
        task_name: source.task_name.clone(),
        namespace: source.namespace.clone(),
        worker_id: "onestep-task-run".to_owned(),
        metadata_json: Value::Object(metadata).to_string(),
        params_json: Value::Object(a.task.handler.params.clone()).to_string(),
        steps: Some(onestep_wasm::DurableSteps {
            store: memory,
            lease: onestep_core::execution::LeaseRef {
                execution_id: a.execution_id,
                attempt_id,
                lease_token: Uuid::new_v4(),
            },
            clock,
        }),
        ..Default::default()
    };
    let cancel = CancelHandle::new();
    if let Some(secs) = local.cancel_after {
        let cancel = cancel.clone();
        let wait = Duration::try_from_secs_f64(secs.max(0.0)).unwrap_or(Duration::MAX);
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            cancel.cancel();
        });
    }
    let payload = a.payload.to_string();
    let report = handler
        .invoke_report(&sandbox, ctx, &payload, cancel, a.task.timeout)
        .await;
    Ok(Ran {
        report,
        digest: handler.digest_hex(),
        preloaded,
    })
}

/// The outcome as (label, exit code, detail).
fn describe(outcome: &Outcome) -> (&'static str, u8, Value) {
    match outcome {
        Outcome::Succeeded(text) => (
            "succeeded",
            exit::SUCCEEDED,
            serde_json::from_str(text).unwrap_or(Value::String(text.clone())),
        ),
        Outcome::HandlerError {
            retryable,
            message,
            retry_after,
        } => (
            "handler_error",
            exit::HANDLER_ERROR,
            json!({
                "retryable": retryable,
                "message": message,
                "retry_after_ms": retry_after.map(|d| d.as_millis() as u64),
            }),
        ),
        Outcome::OutputTooLarge { bytes, limit } => (
            "output_too_large",
            exit::HANDLER_ERROR,
            json!({"bytes": bytes, "limit": limit}),
        ),
        Outcome::Trapped {
            kind: TrapKind::Timeout,
        } => ("timeout", exit::TIMEOUT, Value::Null),
        Outcome::Trapped {
            kind: TrapKind::Cancelled,
        } => ("cancelled", exit::CANCELLED, Value::Null),
        Outcome::Trapped { kind } => ("trapped", exit::TRAPPED, Value::String(format!("{kind:?}"))),
        Outcome::HostError(e) => ("host_error", exit::HOST_ERROR, Value::String(e.to_string())),
        // docs/steps.md#sleep: a worker would park the attempt until then; this one local
        // attempt ends here.
        Outcome::Parked { wake_at } => (
            "parked",
            exit::PARKED,
            json!({"wake_at": onestep_core::park::rfc3339(*wake_at)}),
        ),
    }
}

/// The report as JSON (`--json`).
fn report_json(task: &str, ran: &Ran) -> Value {
    let report = &ran.report;
    let (label, _, detail) = describe(&report.outcome);
    let key = if label == "succeeded" {
        "result"
    } else {
        "error"
    };
    json!({
        "task": task,
        "component_sha256": ran.digest,
        "outcome": label,
        key: detail,
        "duration_ms": report.elapsed.as_secs_f64() * 1000.0,
        "fuel_consumed": report.fuel_consumed,
        "peak_memory_bytes": report.peak_memory_bytes,
        "log": report.log,
        "output_dropped_bytes": report.output_dropped_bytes,
        "steps": steps_json(ran),
    })
}

/// The attempt's durable steps (docs/steps.md#local-runs): how many it started with
/// (`preloaded`), how many of its `step-load`s found a value (`loaded`) or none (`missed`), and
/// how many steps it saved, in memory only (`saved`).
fn steps_json(ran: &Ran) -> Value {
    let s = &ran.report.steps;
    json!({
        "preloaded": ran.preloaded,
        "loaded": s.loaded,
        "missed": s.missed,
        "saved": s.saved,
    })
}

/// The steps line of the text report: `preloaded` names where the steps came from.
fn steps_line(ran: &Ran, preloaded: &str) -> String {
    let s = &ran.report.steps;
    format!(
        "{} {preloaded}, {} loaded by the handler ({} missed), {} saved (in memory only)",
        ran.preloaded, s.loaded, s.missed, s.saved
    )
}

/// Prints the report; its last line tells the steps (`steps_from`: where the preloaded ones came
/// from) when the attempt started with steps or made step calls, or always with `steps_always`.
fn print_report(task: &str, ran: &Ran, json_out: bool, steps_from: &str, steps_always: bool) -> u8 {
    let report = &ran.report;
    let (label, code, detail) = describe(&report.outcome);
    if json_out {
        println!("{}", report_json(task, ran));
        return code;
    }
    println!("task:     {task}");
    println!("component sha256: {}", ran.digest);
    println!("outcome:  {label}");
    match label {
        "succeeded" => println!("result:   {detail}"),
        _ if !detail.is_null() => println!("error:    {detail}"),
        _ => {}
    }
    let fuel = report
        .fuel_consumed
        .map_or_else(|| "not metered".to_owned(), |f| f.to_string());
    println!(
        "duration: {:.1} ms, fuel: {fuel}, peak memory: {} bytes, log lines: {} ({} dropped)",
        report.elapsed.as_secs_f64() * 1000.0,
        report.peak_memory_bytes,
        report.log.lines,
        report.log.dropped_lines
    );
    if steps_always || ran.preloaded > 0 || !report.steps.is_empty() {
        println!("steps:    {}", steps_line(ran, steps_from));
    }
    code
}

/// `onestep task run`.
pub(crate) async fn task_run(args: TaskRunArgs) -> u8 {
    logging::init(&args.local.log_level, false);
    let cfg = match load_local(&args.file, &args.local.env) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let task = match find_task(&cfg, &args.task) {
        Ok(t) => t,
        Err(e) => return usage(e),
    };
    if args.steps.as_deref() == Some("-")
        && (args.payload == "@-" || args.metadata.as_deref() == Some("@-"))
    {
        return usage("--steps - and --payload/--metadata @- cannot both read stdin");
    }
    let payload = match read_json_arg("payload", &args.payload) {
        Ok(p) => p,
        Err(e) => return usage(e),
    };
    let metadata = match args
        .metadata
        .as_deref()
        .map(|m| read_json_arg("metadata", m))
        .transpose()
    {
        Ok(None) => serde_json::Map::new(),
        Ok(Some(Value::Object(m))) => m,
        Ok(Some(_)) => return usage("--metadata must be a JSON object"),
        Err(e) => return usage(e),
    };
    let steps = match args
        .steps
        .as_deref()
        .map(super::steps_file::read)
        .transpose()
    {
        Ok(s) => s.unwrap_or_default(),
        Err(e) => return usage(e),
    };
    let attempt = || Attempt {
        task,
        execution_id: Uuid::new_v4(),
        attempt: args.attempt,
        payload: payload.clone(),
        metadata: metadata.clone(),
        steps: &steps,
    };
    let once = |code: Result<Ran, u8>| match code {
        Ok(ran) => print_report(&task.name, &ran, args.local.json, "preloaded", false),
        Err(code) => code,
    };
    let mut code = once(run_attempt(&cfg, attempt(), &args.local).await);
    if !args.watch {
        return code;
    }
    let component = &task.handler.component;
    let mut watch = match super::watch::FileWatch::new(component) {
        Ok(w) => w,
        Err(e) => return usage(e),
    };
    eprintln!("onestep: watching {} (Ctrl-C stops)", component.display());
    loop {
        tokio::select! {
            changed = watch.changed() => {
                if changed.is_none() {
                    return usage(format!("the watch on {} stopped", component.display()));
                }
                eprintln!("onestep: {} changed: running again", component.display());
                code = once(run_attempt(&cfg, attempt(), &args.local).await);
            }
            _ = tokio::signal::ctrl_c() => return code,
        }
    }
}

/// An execution as replay reads it: its row and, with `--with-steps`, its recorded steps.
struct Recorded {
    execution: Execution,
    /// The recorded steps in first-save order, as (key, value); `None` without `--with-steps`.
    steps: Option<Seed>,
    /// False when the tables keep no steps (created before the steps table).
    steps_kept: bool,
}

/// Reads execution `id` through `task`'s source, on its connector's backend (MySQL,
/// PostgreSQL or SQLite), and with `with_steps` its recorded steps through the same source's
/// step store (the port `onestep steps` and `GET /v1/executions/{id}/steps` read). Reads only.
async fn fetch_execution(
    cfg: &AppConfig,
    task: &TaskConfig,
    id: Uuid,
    with_steps: bool,
) -> anyhow::Result<Option<Recorded>> {
    let source = cfg
        .sources
        .get(&task.source)
        .ok_or_else(|| anyhow::anyhow!("unknown resource '{}'", task.source))?;
    let mut opts = store_options(cfg, source).map_err(|e| anyhow::anyhow!("{e:#}"))?;
    opts.auto_create = false;
    opts.pool_max = 2;
    let store = Store::open(&opts)
        .await
        .map_err(|e| anyhow::anyhow!("cannot open the source '{}': {e}", source.name))?;
    let found = read_recorded(&store, source, id, with_steps).await;
    let _ = store.close().await;
    found
}

async fn read_recorded(
    store: &Store,
    source: &onestep_config::ExecutionSourceConfig,
    id: Uuid,
    with_steps: bool,
) -> anyhow::Result<Option<Recorded>> {
    let client = ExecutionClient::new(store.executions(), &source.namespace, source.limits)?;
    // The namespace check: the steps of an execution this source cannot see are not read.
    let Some(execution) = client.get(id).await? else {
        return Ok(None);
    };
    if !with_steps {
        return Ok(Some(Recorded {
            execution,
            steps: None,
            steps_kept: true,
        }));
    }
    let steps = store.steps();
    let records = match steps.list(id).await {
        Ok(r) => r,
        Err(ExecutionError::InvalidArgument(m)) if m.contains(STEPS_TABLE_ABSENT) => {
            return Ok(Some(Recorded {
                execution,
                steps: Some(Vec::new()),
                steps_kept: false,
            }));
        }
        Err(e) => {
            return Err(anyhow::anyhow!(
                "cannot read the steps of execution {id}: {e}"
            ));
        }
    };
    let mut seed = Vec::with_capacity(records.len());
    for record in records {
        // A step replaced since the list is read as it is now.
        let value = steps.load(id, &record.key).await.map_err(|e| {
            anyhow::anyhow!("cannot read step {:?} of execution {id}: {e}", record.key)
        })?;
        if let Some(value) = value {
            seed.push((record.key, value));
        }
    }
    Ok(Some(Recorded {
        execution,
        steps: Some(seed),
        steps_kept: true,
    }))
}

/// `onestep replay`.
pub(crate) async fn replay(args: ReplayArgs) -> u8 {
    logging::init(&args.local.log_level, false);
    let id = match parse_execution_id(&args.id) {
        Ok(id) => id,
        Err(e) => return usage(e),
    };
    let cfg = match load(&args.config, false, &args.local.env) {
        Ok(c) => c,
        Err(code) => return code,
    };
    // The sources to read the execution through: the named task's, or every task's source
    // once (an execution id is unique, so the first source that holds it is the one).
    let candidates: Vec<&TaskConfig> = match &args.task {
        Some(name) => match find_task(&cfg, name) {
            Ok(t) => vec![t],
            Err(e) => return usage(e),
        },
        None => {
            let mut seen = std::collections::BTreeSet::new();
            cfg.tasks
                .iter()
                .filter(|t| seen.insert(t.source.as_str()))
                .collect()
        }
    };
    let mut found = None;
    for task in &candidates {
        match fetch_execution(&cfg, task, id, args.with_steps).await {
            Ok(Some(r)) => {
                found = Some((*task, r));
                break;
            }
            Ok(None) => {}
            Err(e) => return usage(e),
        }
    }
    let Some((task, recorded_execution)) = found else {
        let names: Vec<&str> = candidates.iter().map(|t| t.name.as_str()).collect();
        return usage(format!(
            "no execution {id} in the namespace of task{} '{}'",
            if names.len() == 1 { "" } else { "s" },
            names.join("', '")
        ));
    };
    let Recorded {
        execution,
        steps,
        steps_kept,
    } = recorded_execution;
    if !steps_kept {
        eprintln!(
            "onestep: --with-steps: the tables of task '{}' keep no steps ({STEPS_TABLE_ABSENT}): \
             the replay starts with none",
            task.name
        );
    }
    let steps = steps.unwrap_or_default();
    // The execution's own task, when the file has it (a source may serve several names).
    let task = cfg.task(&execution.task_name).unwrap_or(task);
    let recorded = json!({
        "status": execution.status.as_str(),
        "attempts": execution.attempts,
        "error": execution.error,
        "result": execution.result,
    });
    let attempt = Attempt {
        task,
        execution_id: execution.id,
        attempt: execution.attempts.max(1),
        payload: execution.payload.clone(),
        metadata: execution.metadata.clone(),
        steps: &steps,
    };
    let ran = match run_attempt(&cfg, attempt, &args.local).await {
        Ok(r) => r,
        Err(code) => return code,
    };
    let (_, code, _) = describe(&ran.report.outcome);
    if args.local.json {
        println!(
            "{}",
            json!({"recorded": recorded, "replayed": report_json(&task.name, &ran)})
        );
    } else {
        println!("recorded: {recorded}");
        // Its last line: the steps loaded from the record, those the replay saved (in memory
        // only).
        let from = if args.with_steps {
            "loaded from the record"
        } else {
            "loaded from the record (no --with-steps)"
        };
        print_report(&task.name, &ran, false, from, args.with_steps);
    }
    code
}
