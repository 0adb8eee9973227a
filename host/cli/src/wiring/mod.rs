//! Wiring of concrete parts from a loaded [`AppConfig`]: execution stores, MySQL or PostgreSQL
//! ([`store`]; one per connector and table pair), the wasm runtime and its handler components, and the worker's task bindings.
//!
//! The configuration arrives typed and validated (every cross-field rule is the config crate's,
//! so `onestep check` rejects what `run` would): this module only converts, once per type —
//! [`task_settings`] for the worker, [`store_options`] for the backend. A task's sandbox needs no
//! conversion: the config crate builds the runtime's own `SandboxSettings`, and
//! [`sandbox_settings`] only resolves its environment names.

pub(crate) mod follow;
pub(crate) mod reload;
pub(crate) mod store;
pub(crate) mod vet;
pub(crate) mod wasm_runner;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};
use onestep_config::{AppConfig, EnvLookup, ExecutionSourceConfig, TaskConfig};
use onestep_core::names::TableNames;
use onestep_core::settings::DEFAULT_MEMORY_LIMIT_BYTES;
use onestep_wasm::{PoolSize, Runtime, RuntimeSettings, SandboxSettings};
use onestep_worker::{Quarantine, QuarantineCause, QuarantineKind, TaskBinding, TaskSettings};

use store::{Store, StoreOptions};
use wasm_runner::{WasmTaskRunner, load_task_handler};

/// Key of a distinct backend: connector, executions table, attempts table.
pub(crate) type BackendKey = (String, String, String);

/// Store options for `source` (its connector's kind, DSN and pool size, its tables and limits).
pub(crate) fn store_options(
    cfg: &AppConfig,
    source: &ExecutionSourceConfig,
) -> Result<StoreOptions> {
    let connector = cfg
        .connectors
        .get(&source.connector)
        .with_context(|| format!("unknown resource '{}'", source.connector))?;
    let mut opts = StoreOptions::new(connector.dsn.expose());
    opts.kind = connector.kind;
    opts.tables = TableNames::new(&source.table, &source.attempts_table)?;
    opts.auto_create = source.auto_create;
    opts.limits = source.limits;
    opts.reclaim_batch_size = source.reclaim_batch_size;
    opts.traces = onestep_telemetry::enabled();
    let wanted: u32 = cfg
        .tasks
        .iter()
        .filter(|t| {
            cfg.sources
                .get(&t.source)
                .is_some_and(|s| s.connector == source.connector)
        })
        .map(|t| t.concurrency)
        .sum::<u32>()
        .saturating_add(
            // Deployed tasks of sources on this connector: as many as their slots.
            cfg.deployed_sources()
                .filter(|s| s.connector == source.connector)
                .filter_map(|s| s.deployed.map(|d| d.slots))
                .sum::<u32>(),
        )
        .saturating_add(4);
    opts.pool_max = connector
        .engine_options
        .max_connections
        .unwrap_or(wanted)
        .max(2) as usize;
    opts.pool_min = connector.engine_options.min_connections.unwrap_or(0) as usize;
    Ok(opts)
}

/// Opens one backend per distinct (connector, table pair) used by the tasks' sources, with the
/// options of the first source that uses it (the config crate has checked that the sources
/// sharing a pair agree on them).
pub(crate) async fn open_backends(cfg: &AppConfig) -> Result<BTreeMap<BackendKey, Store>> {
    let mut out = BTreeMap::new();
    for task in &cfg.tasks {
        let source = cfg
            .sources
            .get(&task.source)
            .with_context(|| format!("unknown resource '{}'", task.source))?;
        let key = backend_key(source);
        if out.contains_key(&key) {
            continue;
        }
        let opts = store_options(cfg, source)?;
        let backend = Store::open(&opts)
            .await
            .with_context(|| format!("cannot open source '{}'", source.name))?;
        out.insert(key, backend);
    }
    Ok(out)
}

/// The key of the backend a source uses.
pub(crate) fn backend_key(source: &ExecutionSourceConfig) -> BackendKey {
    (
        source.connector.clone(),
        source.table.clone(),
        source.attempts_table.clone(),
    )
}

/// Where compiled components are cached: `ONESTEP_WASM_CACHE`, else `$XDG_CACHE_HOME/onestep/wasm`,
/// else `~/.cache/onestep/wasm`.
pub(crate) fn wasm_cache_dir() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("ONESTEP_WASM_CACHE") {
        return Some(PathBuf::from(p));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("onestep").join("wasm"))
}

/// One runtime for every task: the pool holds every task's `concurrency` attempts at its own
/// per-attempt limits (plus headroom, see [`PoolSize::for_tasks`]), memory slots are sized from
/// the largest sandbox, fuel metering is on only when some task sets a fuel budget.
pub(crate) fn build_runtime(cfg: &AppConfig) -> Result<Runtime> {
    let mut sandboxes: Vec<(u32, SandboxSettings)> = cfg
        .tasks
        .iter()
        .map(|t| (t.concurrency, sandbox_settings(&t.sandbox, &cfg.env)))
        .collect();
    let mut max_memory = cfg
        .tasks
        .iter()
        .map(|t| t.sandbox.memory_limit_bytes)
        .max()
        .unwrap_or(DEFAULT_MEMORY_LIMIT_BYTES);
    // Deployed tasks (docs/deployments.md#workers-follow-deployments): their `slots` attempts at
    // the largest sandbox the policy ceilings allow; fuel metering on, as a deployment may set
    // a fuel budget.
    let deployed_slots: u32 = cfg
        .deployed_sources()
        .filter_map(|s| s.deployed.map(|d| d.slots))
        .sum();
    if deployed_slots > 0 {
        let ceiling = deployed_sandbox_ceiling(cfg);
        max_memory = max_memory.max(ceiling.memory_limit_bytes);
        sandboxes.push((deployed_slots, ceiling));
    }
    let settings = RuntimeSettings {
        cache_dir: wasm_cache_dir(),
        pool: PoolSize::for_tasks(sandboxes.iter().map(|(c, s)| (*c, s))),
        max_memory_bytes: max_memory.next_power_of_two(),
        fuel_metering: deployed_slots > 0 || cfg.tasks.iter().any(|t| t.sandbox.fuel.is_some()),
        ..RuntimeSettings::default()
    };
    Runtime::new(settings).context("cannot start the WebAssembly runtime")
}

/// The largest per-attempt limits a deployment may ask under this file's policy ceilings
/// (`deployments.policy`; the built-in defaults without one): what the pool sizes deployed
/// slots for.
pub(crate) fn deployed_sandbox_ceiling(cfg: &AppConfig) -> SandboxSettings {
    let mut s = SandboxSettings::default();
    let Some(d) = &cfg.deployments else {
        return s;
    };
    for c in d.policy.default.iter().chain(d.policy.namespaces.values()) {
        s.memory_limit_bytes = s.memory_limit_bytes.max(c.memory_limit_bytes);
        s.max_instances = s.max_instances.max(c.max_instances);
        s.max_tables = s.max_tables.max(c.max_tables);
        s.max_memories = s.max_memories.max(c.max_memories);
        s.max_table_elements = s.max_table_elements.max(c.max_table_elements);
    }
    s
}

/// The runtime's sandbox for a task's `sandbox:` block: the config crate built the runtime's own
/// [`SandboxSettings`], so the only step left is resolving the `env` names through `env`, the
/// environment the file was loaded with (dotenv included), into explicit values.
pub(crate) fn sandbox_settings(sandbox: &SandboxSettings, env: &EnvLookup) -> SandboxSettings {
    sandbox.with_env_resolved(|name| env.get(name))
}

/// The worker's settings for `task` fed by `source` (the one conversion: every value is already
/// typed and validated by the config crate).
pub(crate) fn task_settings(source: &ExecutionSourceConfig, task: &TaskConfig) -> TaskSettings {
    TaskSettings {
        task_name: source.task_name.clone(),
        namespace: source.namespace.clone(),
        scope: source.scope.clone(),
        fair: source.fair.clone(),
        worker_id: source.worker_id.clone(),
        batch_size: source.batch_size,
        poll_interval: source.poll_interval,
        lease_duration: source.lease_duration,
        heartbeat_interval: source.heartbeat_interval,
        cancel_poll_interval: source.cancel_poll_interval,
        concurrency: task.concurrency,
        retry: task.retry.clone(),
        timeout: task.timeout,
        max_duration: task.max_duration,
        max_result_bytes: source.limits.max_result_bytes,
        rate_limit: task.rate_limit,
        max_running: task.max_running,
    }
}

/// The bucket store of every task with a `rate_limit`: its source's backend, whose
/// `<T>_buckets` table every worker of the fleet shares (docs/semantics.md#rate-limits).
pub(crate) fn rate_limit_stores(
    cfg: &AppConfig,
    backends: &BTreeMap<BackendKey, Store>,
) -> Result<Vec<(String, Arc<dyn onestep_core::rate::RateLimitStore>)>> {
    let mut out = Vec::new();
    for task in cfg.tasks.iter().filter(|t| t.rate_limit.is_some()) {
        let source = cfg
            .sources
            .get(&task.source)
            .with_context(|| format!("unknown resource '{}'", task.source))?;
        let backend = backends
            .get(&backend_key(source))
            .with_context(|| format!("no backend opened for source '{}'", source.name))?;
        out.push((source.task_name.clone(), backend.rate_limits()));
    }
    Ok(out)
}

/// Builds the worker's task bindings: settings from the source and task, the backend, and the
/// task's handler component loaded into `runtime`; each runner records its wasm figures in
/// `metrics` when given. Also returns each task's runner, for [`reload`]. A task whose
/// component cannot be loaded (missing file, not a component, an import or a limit its sandbox
/// does not grant) is bound quarantined, without a build (docs/security.md#one-tenants-bad-deploy):
/// the worker starts, claims nothing for it and serves the other tasks, and the reload loads its
/// next build.
pub(crate) fn task_bindings(
    cfg: &AppConfig,
    backends: &BTreeMap<BackendKey, Store>,
    runtime: &Runtime,
    metrics: Option<&Arc<crate::metrics::Metrics>>,
) -> Result<(Vec<TaskBinding>, Vec<reload::ReloadTarget>)> {
    let mut out = Vec::new();
    let mut targets = Vec::new();
    for task in &cfg.tasks {
        let source = cfg
            .sources
            .get(&task.source)
            .with_context(|| format!("unknown resource '{}'", task.source))?;
        let backend = backends
            .get(&backend_key(source))
            .with_context(|| format!("no backend opened for source '{}'", source.name))?;
        let sandbox = sandbox_settings(&task.sandbox, &cfg.env);
        // A component that needs more than its sandbox allows could never run: refused here,
        // before it is compiled (and by `onestep check`, which loads the same way). The task is
        // quarantined; the fetch loop logs it once.
        let quarantine = Quarantine::new();
        let max_result = source.limits.max_result_bytes;
        let runner = match load_task_handler(runtime, task, &sandbox) {
            Ok(handler) => WasmTaskRunner::new(handler, sandbox, max_result),
            Err(e) => {
                quarantine.set(QuarantineCause::new(QuarantineKind::Load, format!("{e:#}")));
                WasmTaskRunner::unloaded(sandbox, max_result)
            }
        };
        // Durable steps of `0.3.0` components live in the source's database, fenced by each
        // attempt's lease (docs/steps.md).
        let mut runner = runner
            .with_params(&task.handler.params)
            .with_steps(backend.steps());
        if task
            .sandbox
            .network
            .allow
            .iter()
            .any(|a| a.rate_limit.is_some())
        {
            // Outbound rate limits are fleet-wide: the source's database keeps their buckets
            // (docs/semantics.md#outbound-rate-limits).
            runner = runner.with_outbound_rate_limits(backend.rate_limits());
        }
        if let Some(m) = metrics {
            runner = runner.with_metrics(Arc::clone(m));
        }
        let runner = Arc::new(runner);
        targets.push(reload::ReloadTarget {
            task: task.clone(),
            runner: Arc::clone(&runner),
            quarantine: quarantine.clone(),
        });
        out.push(TaskBinding {
            settings: task_settings(source, task),
            store: backend.leases(),
            runner,
            quarantine,
        });
    }
    Ok((out, targets))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sandbox_reaches_the_runtime_with_its_env_resolved() {
        let cfg = SandboxSettings {
            cancel_grace: std::time::Duration::from_millis(250),
            log_limit_bytes: 4096,
            max_open_handles: 9,
            env: vec!["VISIBLE".into(), "ABSENT".into()],
            env_values: BTreeMap::from([("N".to_owned(), "3".to_owned())]),
            network: onestep_wasm::NetworkSettings::allowing(["https://a.example.com"])
                .expect("origin"),
            ..SandboxSettings::default()
        };
        let env = EnvLookup::isolated([("VISIBLE", "yes")]);
        let s = sandbox_settings(&cfg, &env);
        assert!(s.env.is_empty());
        assert_eq!(
            s.env_values,
            BTreeMap::from([
                ("N".to_owned(), "3".to_owned()),
                ("VISIBLE".to_owned(), "yes".to_owned())
            ])
        );
        // Every limit and the network pass unchanged: one struct, no copy.
        assert_eq!(
            SandboxSettings {
                env: cfg.env.clone(),
                env_values: cfg.env_values.clone(),
                ..s
            },
            cfg
        );
    }
}
