//! The worker's Prometheus metrics and health (docs/observability.md): [`Metrics`] observes the
//! worker ([`WorkerObserver`]) and the wasm runner (traps, fuel, memory, guest log losses) and
//! serves `GET /metrics` (OpenMetrics text from `prometheus-client`), `GET /healthz` and
//! `GET /readyz` on `--metrics-addr` / `app.metrics_addr`.
//!
//! Labels never carry execution ids or tenant data beyond the task: `app`, `task`, and small
//! fixed sets (`status`, `failure_kind`, `exception_type`, `result`, `operation`, `class`,
//! `kind`). Every label value is a [`LabelText`], written escaped (task names are free text).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use onestep_api::metrics::LabelText;
use onestep_core::ExecutionStatus;
use onestep_wasm::{Report, TrapKind};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::quarantine_board::QuarantineBoard;

/// Buckets of `onestep_task_duration_seconds` and `onestep_queue_wait_seconds`: the
/// reference's 5 ms … 10 s, then 30 s … 1 h for long-running tasks.
pub(crate) const DURATION_BUCKETS: [f64; 18] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0,
    1800.0, 3600.0,
];
/// Buckets of `onestep_claim_duration_seconds`: 1 ms … 10 s.
const CLAIM_BUCKETS: [f64; 10] = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1.0, 10.0];
/// Buckets of `onestep_wasm_peak_memory_bytes`: 64 KiB … 4 GiB, by powers of 4.
const MEMORY_BUCKETS: [f64; 9] = [
    65_536.0,
    262_144.0,
    1_048_576.0,
    4_194_304.0,
    16_777_216.0,
    67_108_864.0,
    268_435_456.0,
    1_073_741_824.0,
    4_294_967_296.0,
];

fn duration_histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}
fn claim_histogram() -> Histogram {
    Histogram::new(CLAIM_BUCKETS)
}
fn memory_histogram() -> Histogram {
    Histogram::new(MEMORY_BUCKETS)
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TaskLabels {
    app: LabelText,
    task: LabelText,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabels {
    app: LabelText,
    task: LabelText,
    status: LabelText,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailureLabels {
    app: LabelText,
    task: LabelText,
    failure_kind: LabelText,
    exception_type: LabelText,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    app: LabelText,
    task: LabelText,
    result: LabelText,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DbErrorLabels {
    app: LabelText,
    operation: LabelText,
    class: LabelText,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TrapLabels {
    app: LabelText,
    task: LabelText,
    kind: LabelText,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DirectionLabels {
    app: LabelText,
    task: LabelText,
    direction: LabelText,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OriginLabels {
    app: LabelText,
    task: LabelText,
    origin: LabelText,
}

/// The per-origin counters of `sandbox.network.rate_limits` (docs/semantics.md#outbound-rate-limits).
#[derive(Debug, Default)]
struct OutboundLimitMetrics {
    tokens: Family<OriginLabels, Counter>,
    waits: Family<OriginLabels, Counter>,
    wait_seconds: Family<OriginLabels, Counter<f64, std::sync::atomic::AtomicU64>>,
    pauses: Family<OriginLabels, Counter>,
    errors: Family<OriginLabels, Counter>,
}

impl OutboundLimitMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "onestep_outbound_rate_limit_tokens",
            "Tokens handlers' outbound requests took from an origin's fleet-wide rate limit (requests let through)",
            self.tokens.clone(),
        );
        registry.register(
            "onestep_outbound_rate_limit_waits",
            "Outbound requests that waited for a token of their origin's fleet-wide rate limit",
            self.waits.clone(),
        );
        registry.register(
            "onestep_outbound_rate_limit_wait_seconds",
            "Time outbound requests waited for a token of their origin's fleet-wide rate limit",
            self.wait_seconds.clone(),
        );
        registry.register(
            "onestep_outbound_rate_limit_pauses",
            "429 responses with Retry-After that paused an origin for the fleet",
            self.pauses.clone(),
        );
        registry.register(
            "onestep_outbound_rate_limit_errors",
            "Outbound requests failed because their origin's rate-limit bucket could not be read or paused",
            self.errors.clone(),
        );
    }

    fn record(&self, app: &LabelText, task: &str, limits: &[onestep_wasm::OriginLimitTotals]) {
        for l in limits {
            let labels = OriginLabels {
                app: app.clone(),
                task: task.into(),
                origin: l.origin.as_str().into(),
            };
            self.tokens.get_or_create(&labels).inc_by(l.tokens);
            if l.waits > 0 {
                self.waits.get_or_create(&labels).inc_by(l.waits);
                self.wait_seconds
                    .get_or_create(&labels)
                    .inc_by(l.waited.as_secs_f64());
            }
            if l.pauses > 0 {
                self.pauses.get_or_create(&labels).inc_by(l.pauses);
            }
            if l.errors > 0 {
                self.errors.get_or_create(&labels).inc_by(l.errors);
            }
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabels {
    version: LabelText,
}

type Hist = Family<TaskLabels, Histogram, fn() -> Histogram>;

/// Liveness of one task's source, for `/healthz`.
#[derive(Debug)]
struct SourceHealth {
    /// The task's lease: the store may stay silent this long before the source counts as down.
    lease: Duration,
    /// When the store last answered a claim or a heartbeat of this task.
    last_answer: Instant,
}

/// The durable step counters (docs/steps.md, docs/observability.md#worker-metrics): saves by
/// `result` (`saved`, `fenced`, `refused`, `error`), loads by `result` (`hit`, `miss`,
/// `refused`, `error`) and the bytes saved.
#[derive(Debug, Default)]
struct StepMetrics {
    saves: Family<ResultLabels, Counter>,
    loads: Family<ResultLabels, Counter>,
    saved_bytes: Family<TaskLabels, Counter>,
}

impl StepMetrics {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "onestep_step_saves",
            "Durable step saves of handlers: saved, fenced (the attempt had lost its lease), refused (a cap or an invalid key or value), error (store unavailable)",
            self.saves.clone(),
        );
        registry.register(
            "onestep_step_loads",
            "Durable step loads of handlers: hit (a recorded value), miss (none), refused (an invalid key), error (store unavailable)",
            self.loads.clone(),
        );
        registry.register(
            "onestep_step_saved_bytes",
            "Bytes of the durable step values handlers saved",
            self.saved_bytes.clone(),
        );
    }

    fn record(&self, app: &LabelText, task: &str, c: &onestep_wasm::StepCounts) {
        if c.is_empty() {
            return;
        }
        let count = |family: &Family<ResultLabels, Counter>, result: &str, n: u64| {
            if n > 0 {
                family
                    .get_or_create(&ResultLabels {
                        app: app.clone(),
                        task: task.into(),
                        result: result.into(),
                    })
                    .inc_by(n);
            }
        };
        count(&self.saves, "saved", c.saved);
        count(&self.saves, "fenced", c.fenced);
        count(&self.saves, "refused", c.save_refused);
        count(&self.saves, "error", c.save_errors);
        count(&self.loads, "hit", c.loaded);
        count(&self.loads, "miss", c.missed);
        count(&self.loads, "refused", c.load_refused);
        count(&self.loads, "error", c.load_errors);
        if c.saved_bytes > 0 {
            self.saved_bytes
                .get_or_create(&TaskLabels {
                    app: app.clone(),
                    task: task.into(),
                })
                .inc_by(c.saved_bytes);
        }
    }
}

/// Every metric family of a worker process, and its health state.
#[derive(Debug)]
pub(crate) struct Metrics {
    app: LabelText,
    registry: Registry,
    processed: Family<StatusLabels, Counter>,
    duration: Hist,
    inflight: Family<TaskLabels, Gauge>,
    retried: Family<TaskLabels, Counter>,
    cancelled: Family<TaskLabels, Counter>,
    fetched: Family<TaskLabels, Counter>,
    /// Waits of a task's fetch loop for a rate-limit token (docs/semantics.md#rate-limits).
    rate_limit_waits: Family<TaskLabels, Counter>,
    failures: Family<FailureLabels, Counter>,
    queue_wait: Hist,
    lease_lost: Family<TaskLabels, Counter>,
    heartbeats: Family<ResultLabels, Counter>,
    claim_duration: Hist,
    db_errors: Family<DbErrorLabels, Counter>,
    wasm_traps: Family<TrapLabels, Counter>,
    wasm_fuel: Family<TaskLabels, Counter>,
    wasm_peak_memory: Hist,
    guest_log_dropped: Family<TaskLabels, Counter>,
    http_requests: Family<ResultLabels, Counter>,
    http_bytes: Family<DirectionLabels, Counter>,
    /// Outbound rate limits per origin.
    outbound: OutboundLimitMetrics,
    /// Durable step saves and loads of handlers (docs/steps.md).
    steps: StepMetrics,
    /// Parks and wakes of sleeping handlers (docs/steps.md#sleep).
    sleeps: sleep::SleepMetrics,
    started: Instant,
    ready: AtomicBool,
    stopping: CancellationToken,
    sources: Mutex<BTreeMap<String, SourceHealth>>,
    /// Quarantined tasks (docs/security.md#one-tenants-bad-deploy).
    quarantine: QuarantineBoard,
    /// What the worker does with each deployment it follows
    /// (docs/deployments.md#workers-follow-deployments).
    deployments: DeploymentBoard,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct DeploymentLabels {
    app: LabelText,
    namespace: LabelText,
    task: LabelText,
}

/// What a worker following deployments does with one deployed task: the version it serves and
/// the last version it refused (with why), for `/readyz` and `onestep_deployment_refused`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct DeploymentReport {
    /// The version that serves new claims (`None`: none, e.g. its first version was refused).
    pub(crate) serving: Option<(i64, String)>,
    /// The active version the worker could not fetch or load, and the error; the `serving`
    /// version (if any) keeps serving.
    pub(crate) refused: Option<(i64, String, String)>,
    /// A task of the YAML file serves the same (namespace, task): the deployment is not run.
    pub(crate) shadowed: bool,
}

#[derive(Debug, Default)]
struct DeploymentBoard {
    refused: Family<DeploymentLabels, Gauge>,
    revision: Gauge,
    tasks: Mutex<BTreeMap<(String, String), DeploymentReport>>,
}

impl Metrics {
    /// The metrics of app `app` whose tasks are `tasks` (name, lease duration); `stopping` fires
    /// when the worker starts draining.
    pub(crate) fn new(
        app: &str,
        tasks: impl IntoIterator<Item = (String, Duration)>,
        stopping: CancellationToken,
    ) -> Self {
        let mut registry = Registry::default();
        let processed = Family::<StatusLabels, Counter>::default();
        let duration: Hist = Family::new_with_constructor(duration_histogram);
        let inflight = Family::<TaskLabels, Gauge>::default();
        let retried = Family::<TaskLabels, Counter>::default();
        let cancelled = Family::<TaskLabels, Counter>::default();
        let fetched = Family::<TaskLabels, Counter>::default();
        let rate_limit_waits = Family::<TaskLabels, Counter>::default();
        let failures = Family::<FailureLabels, Counter>::default();
        let build_info = Family::<VersionLabels, Gauge>::default();
        let queue_wait: Hist = Family::new_with_constructor(duration_histogram);
        let lease_lost = Family::<TaskLabels, Counter>::default();
        let heartbeats = Family::<ResultLabels, Counter>::default();
        let claim_duration: Hist = Family::new_with_constructor(claim_histogram);
        let db_errors = Family::<DbErrorLabels, Counter>::default();
        let wasm_traps = Family::<TrapLabels, Counter>::default();
        let wasm_fuel = Family::<TaskLabels, Counter>::default();
        let wasm_peak_memory: Hist = Family::new_with_constructor(memory_histogram);
        let guest_log_dropped = Family::<TaskLabels, Counter>::default();
        let http_requests = Family::<ResultLabels, Counter>::default();
        let http_bytes = Family::<DirectionLabels, Counter>::default();
        // Counters get their `_total` suffix from the encoder.
        registry.register(
            "onestep_deliveries_fetched",
            "Deliveries fetched from sources",
            fetched.clone(),
        );
        registry.register(
            "onestep_rate_limit_waits",
            "Waits of a task's fetch loop for a token of its fleet-wide rate limit",
            rate_limit_waits.clone(),
        );
        registry.register(
            "onestep_tasks_processed",
            "Terminal task outcomes",
            processed.clone(),
        );
        registry.register(
            "onestep_task_duration_seconds",
            "Task attempt duration in seconds",
            duration.clone(),
        );
        registry.register(
            "onestep_inflight_tasks",
            "Task attempts currently in flight",
            inflight.clone(),
        );
        registry.register(
            "onestep_tasks_retried",
            "Task attempts scheduled for retry",
            retried.clone(),
        );
        registry.register(
            "onestep_tasks_cancelled",
            "Task attempts cancelled",
            cancelled.clone(),
        );
        registry.register(
            "onestep_task_failures",
            "Task failures by failure kind and exception type",
            failures.clone(),
        );
        registry.register("onestep_build_info", "Build metadata", build_info.clone());
        registry.register(
            "onestep_queue_wait_seconds",
            "Time from an execution becoming available to its attempt starting",
            queue_wait.clone(),
        );
        registry.register(
            "onestep_lease_lost",
            "Attempts that lost their lease and wrote nothing",
            lease_lost.clone(),
        );
        registry.register(
            "onestep_heartbeats",
            "Heartbeat answers per lease, by result",
            heartbeats.clone(),
        );
        registry.register(
            "onestep_claim_duration_seconds",
            "Duration of claim calls",
            claim_duration.clone(),
        );
        registry.register(
            "onestep_db_errors",
            "Storage errors by operation and class",
            db_errors.clone(),
        );
        registry.register(
            "onestep_wasm_traps",
            "Handler attempts that trapped, by kind",
            wasm_traps.clone(),
        );
        registry.register(
            "onestep_wasm_fuel_consumed",
            "Fuel consumed by handlers (when metering is on)",
            wasm_fuel.clone(),
        );
        registry.register(
            "onestep_wasm_peak_memory_bytes",
            "Peak linear memory of each handler attempt",
            wasm_peak_memory.clone(),
        );
        registry.register(
            "onestep_guest_log_dropped_bytes",
            "Guest log bytes dropped or cut by the log limits",
            guest_log_dropped.clone(),
        );
        registry.register(
            "onestep_http_requests",
            "Outbound HTTP requests of handlers: sent, denied (origin not allowed), refused (a limit), failed (no response)",
            http_requests.clone(),
        );
        registry.register(
            "onestep_http_bytes",
            "Outbound HTTP body bytes of handlers, by direction (out: request bodies, in: response bodies)",
            http_bytes.clone(),
        );
        let outbound = OutboundLimitMetrics::default();
        outbound.register(&mut registry);
        let steps = StepMetrics::default();
        steps.register(&mut registry);
        let sleeps = sleep::SleepMetrics::default();
        sleeps.register(&mut registry);
        let quarantine = QuarantineBoard::default();
        quarantine.register(&mut registry);
        let deployments = DeploymentBoard::default();
        registry.register(
            "onestep_deployment_refused",
            "1 while the active deployment of a task cannot be fetched or loaded by this worker (its previous version, if any, keeps serving)",
            deployments.refused.clone(),
        );
        registry.register(
            "onestep_deployments_revision",
            "The deployments revision this worker last applied",
            deployments.revision.clone(),
        );
        build_info
            .get_or_create(&VersionLabels {
                version: env!("CARGO_PKG_VERSION").into(),
            })
            .set(1);
        let now = Instant::now();
        let sources = tasks
            .into_iter()
            .map(|(task, lease)| {
                let health = SourceHealth {
                    lease,
                    last_answer: now,
                };
                (task, health)
            })
            .collect();
        Metrics {
            app: app.into(),
            registry,
            processed,
            duration,
            inflight,
            retried,
            cancelled,
            fetched,
            rate_limit_waits,
            failures,
            queue_wait,
            lease_lost,
            heartbeats,
            claim_duration,
            db_errors,
            wasm_traps,
            wasm_fuel,
            wasm_peak_memory,
            guest_log_dropped,
            http_requests,
            http_bytes,
            outbound,
            steps,
            sleeps,
            started: now,
            ready: AtomicBool::new(false),
            stopping,
            sources: Mutex::new(sources),
            quarantine,
            deployments,
        }
    }

    /// Watches the store liveness of a task started while the worker runs (a deployed task),
    /// for `/healthz`; `None` forgets it.
    pub(crate) fn watch_source(&self, task: &str, lease: Option<Duration>) {
        let mut sources = self.sources();
        match lease {
            Some(lease) => {
                sources.insert(
                    task.to_owned(),
                    SourceHealth {
                        lease,
                        last_answer: Instant::now(),
                    },
                );
            }
            None => {
                sources.remove(task);
            }
        }
    }

    /// Records what the worker does with the deployment of (`namespace`, `task`); `None`
    /// forgets it (no longer active).
    pub(crate) fn deployment(&self, namespace: &str, task: &str, report: Option<DeploymentReport>) {
        let labels = DeploymentLabels {
            app: self.app.clone(),
            namespace: namespace.into(),
            task: task.into(),
        };
        let refused = report.as_ref().is_some_and(|r| r.refused.is_some());
        if refused || self.deployments.refused.get(&labels).is_some() {
            self.deployments
                .refused
                .get_or_create(&labels)
                .set(i64::from(refused));
        }
        let mut tasks = self
            .deployments
            .tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let key = (namespace.to_owned(), task.to_owned());
        match report {
            Some(r) => tasks.insert(key, r),
            None => tasks.remove(&key),
        };
    }

    /// The deployments revision the worker last applied.
    pub(crate) fn deployments_revision(&self, revision: i64) {
        self.deployments.revision.set(revision);
    }

    fn deployments_json(&self) -> serde_json::Value {
        let tasks = self
            .deployments
            .tasks
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        tasks
            .iter()
            .map(|((ns, task), r)| {
                json!({
                    "namespace": ns,
                    "task": task,
                    "serving": r.serving.as_ref().map(|(v, d)| json!({"version": v, "digest": d})),
                    "refused": r.refused.as_ref().map(|(v, d, e)| json!({"version": v, "digest": d, "error": e})),
                    "shadowed": r.shadowed,
                })
            })
            .collect()
    }

    fn task(&self, task: &str) -> TaskLabels {
        TaskLabels {
            app: self.app.clone(),
            task: task.into(),
        }
    }

    fn sources(&self) -> MutexGuard<'_, BTreeMap<String, SourceHealth>> {
        self.sources.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn store_answered(&self, task: &str) {
        if let Some(s) = self.sources().get_mut(task) {
            s.last_answer = Instant::now();
        }
    }

    /// Every source has opened: `/readyz` answers 200 from now on.
    pub(crate) fn set_ready(&self) {
        self.ready.store(true, Ordering::Relaxed);
    }

    /// Records what one wasm attempt of `task` reported: its trap, fuel, peak memory and the
    /// guest log bytes the limits dropped or cut.
    pub(crate) fn record_wasm(&self, task: &str, report: &Report) {
        let labels = self.task(task);
        if let onestep_wasm::Outcome::Trapped { kind } = &report.outcome {
            let kind = match kind {
                TrapKind::Cancelled => "cancelled",
                TrapKind::Timeout => "timeout",
                TrapKind::OutOfFuel => "out_of_fuel",
                TrapKind::MemoryLimit => "memory_limit",
                TrapKind::GuestPanic(_) => "panic",
                TrapKind::Other(_) => "other",
            };
            self.wasm_traps
                .get_or_create(&TrapLabels {
                    app: self.app.clone(),
                    task: task.into(),
                    kind: kind.into(),
                })
                .inc();
        }
        if let Some(fuel) = report.fuel_consumed {
            self.wasm_fuel.get_or_create(&labels).inc_by(fuel);
        }
        self.wasm_peak_memory
            .get_or_create(&labels)
            .observe(report.peak_memory_bytes as f64);
        let h = &report.http;
        for (result, n) in [
            ("sent", h.requests),
            ("denied", h.denied),
            ("refused", h.refused),
            ("failed", h.failed),
        ] {
            if n > 0 {
                self.http_requests
                    .get_or_create(&ResultLabels {
                        app: self.app.clone(),
                        task: task.into(),
                        result: result.into(),
                    })
                    .inc_by(n);
            }
        }
        for (direction, n) in [("out", h.bytes_out), ("in", h.bytes_in)] {
            if n > 0 {
                self.http_bytes
                    .get_or_create(&DirectionLabels {
                        app: self.app.clone(),
                        task: task.into(),
                        direction: direction.into(),
                    })
                    .inc_by(n);
            }
        }
        self.outbound.record(&self.app, task, &report.rate_limits);
        self.steps.record(&self.app, task, &report.steps);
        self.sleeps.woke(&labels, report.wakes);
        let dropped = report.log.dropped_bytes + report.output_dropped_bytes;
        if dropped > 0 {
            self.guest_log_dropped
                .get_or_create(&labels)
                .inc_by(dropped);
        }
    }

    /// The `/metrics` text (OpenMetrics).
    pub(crate) fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    /// The `/readyz` document and whether the worker is ready (docs/observability.md#readiness):
    /// not while the sources open, nor while it drains, nor when every task is quarantined;
    /// `quarantined` lists each quarantined task with its reason and error either way.
    pub(crate) fn readiness(&self) -> (bool, serde_json::Value) {
        let mut reasons = Vec::new();
        if !self.ready.load(Ordering::Relaxed) {
            reasons.push("starting: the sources are opening".to_owned());
        }
        if self.stopping.is_cancelled() {
            reasons.push("stopping: the worker is draining".to_owned());
        }
        let tasks = self.sources().len();
        let quarantined = self.quarantine.count();
        if tasks > 0 && quarantined >= tasks {
            reasons.push(format!("every task ({tasks}) is quarantined"));
        }
        let ready = reasons.is_empty();
        let doc = json!({
            "status": if ready { "ready" } else { "not_ready" },
            "reasons": reasons,
            "quarantined": self.quarantine.json(),
            "deployments": self.deployments_json(),
        });
        (ready, doc)
    }

    /// The `/healthz` document and whether it is healthy: `status` is `degraded` while the
    /// worker drains or when a task's store has not answered for longer than its lease.
    pub(crate) fn health(&self) -> (bool, serde_json::Value) {
        let stopping = self.stopping.is_cancelled();
        let now = Instant::now();
        let mut all_alive = true;
        let tasks: Vec<serde_json::Value> = self
            .sources()
            .iter()
            .map(|(task, s)| {
                let silent = now.saturating_duration_since(s.last_answer);
                let alive = silent <= s.lease;
                all_alive &= alive;
                let inflight = self.inflight.get_or_create(&self.task(task)).get();
                json!({
                    "task": task,
                    "source": {"alive": alive, "last_answer_s": round3(silent.as_secs_f64())},
                    "inflight": inflight,
                })
            })
            .collect();
        let healthy = all_alive && !stopping;
        let doc = json!({
            "status": if healthy { "ok" } else { "degraded" },
            "app": self.app.as_str(),
            "version": env!("CARGO_PKG_VERSION"),
            "uptime_s": round3(now.saturating_duration_since(self.started).as_secs_f64()),
            "stopping": stopping,
            "tasks": tasks,
        });
        (healthy, doc)
    }
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

mod http;
mod observer;
mod sleep;

pub(crate) use http::serve;

#[cfg(test)]
#[path = "metrics_tests.rs"]
mod tests;
