//! Workers follow deployments (docs/deployments.md#workers-follow-deployments): for each source
//! with `deployed:` (docs/configuration.md#deployed-tasks), one loop reads the deployments'
//! revision every `poll_s` (one primary-key read) and, when it moved, every active deployment
//! of the source's namespaces; it then starts, changes or stops each deployed task's claim loop
//! on the running worker ([`TaskSet`]) without a restart:
//!
//! * a new deployment: its component is fetched from the component store once per digest
//!   (verified by SHA-256), loaded for the deployment's sandbox through the compile cache, and
//!   its task starts claiming with the deployment's settings;
//! * a new version whose settings are the same (a new digest, or a rollback): the task's runner
//!   takes the new build; attempts in flight finish on the build they started with;
//! * other changed settings (sandbox, headers, timeout, retry, concurrency, params): a new claim
//!   loop starts with them and the old one stops claiming; its attempts in flight finish on it;
//! * a deployment no longer active (deactivated, or outside the namespaces): its task stops
//!   claiming; attempts in flight finish.
//!
//! A deployment whose component cannot be fetched (absent, or a corrupt chunk) or loaded is
//! refused by this worker alone: the version that served before keeps serving (reported as
//! refused: log, `onestep_deployment_refused`, `/readyz`), or, for a task with no good version,
//! the task is quarantined (the same quarantine as a YAML task whose component cannot load).
//! A refused version is not tried again until the task's active deployment changes. Database
//! errors while polling are logged and retried at the next tick; the tasks keep serving.
//!
//! A task of the YAML file wins over a deployment of the same (namespace, task) on the same
//! tables: the deployment is reported as shadowed and not run.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow};
use onestep_config::{AppConfig, DeploymentsConfig, ExecutionSourceConfig};
use onestep_core::components::ComponentDigest;
use onestep_core::deploy_policy::{self, HeaderValue};
use onestep_core::deployments::Deployment;
use onestep_core::request::NamespaceScope;
use onestep_wasm::{Handler, Runtime, SandboxSettings};
use onestep_worker::{
    Quarantine, QuarantineCause, QuarantineKind, RunningTask, TaskBinding, TaskSet, TaskSettings,
};
use tokio_util::sync::CancellationToken;

use super::store::Store;
use super::wasm_runner::WasmTaskRunner;
use super::{BackendKey, backend_key};
use crate::metrics::{DeploymentReport, Metrics};

/// Largest total of component bytes kept in memory for reuse (a rollback to a version fetched
/// before needs no second fetch); components of serving versions are always kept.
const BYTES_CACHE_LIMIT: usize = 256 << 20;

/// One source with `deployed:` and what it needs to follow.
pub(crate) struct Followed {
    /// The source (its `deployed` is set).
    pub(crate) source: ExecutionSourceConfig,
    /// Its backend.
    pub(crate) backend: Store,
}

/// What every follower loop of a worker shares.
#[derive(Clone)]
pub(crate) struct FollowContext {
    /// The worker's runtime.
    pub(crate) runtime: Runtime,
    /// Starts and stops the deployed tasks.
    pub(crate) tasks: TaskSet,
    /// The operator's secrets (`deployments.secrets`), for the injected headers.
    pub(crate) secrets: Option<DeploymentsConfig>,
    /// The (backend, namespace scope, task) of every task of the YAML file: they shadow
    /// deployments of the same task.
    pub(crate) yaml_tasks: Arc<Vec<(BackendKey, NamespaceScope, String)>>,
    /// Metrics and `/readyz`.
    pub(crate) metrics: Option<Arc<Metrics>>,
}

impl FollowContext {
    /// The YAML tasks of `cfg`, as [`Self::yaml_tasks`] wants them.
    pub(crate) fn yaml_tasks_of(cfg: &AppConfig) -> Vec<(BackendKey, NamespaceScope, String)> {
        cfg.tasks
            .iter()
            .filter_map(|t| {
                let s = cfg.sources.get(&t.source)?;
                Some((backend_key(s), s.scope.clone(), s.task_name.clone()))
            })
            .collect()
    }
}

/// Spawns one follower loop per followed source; each runs until `stop` fires.
pub(crate) fn spawn(ctx: FollowContext, followed: Vec<Followed>, stop: CancellationToken) {
    for f in followed {
        let mut follower = Follower::new(ctx.clone(), f);
        let stop = stop.clone();
        tokio::spawn(async move { follower.run(stop).await });
    }
}

/// A deployed task the worker runs.
struct Serving {
    /// The deployment whose build serves new claims.
    deployment: Deployment,
    runner: Arc<WasmTaskRunner>,
    running: RunningTask,
    quarantine: Quarantine,
}

/// A version the worker could not fetch or load (not tried again while it stays active).
#[derive(Clone)]
struct Refusal {
    version: i64,
    digest: String,
    error: String,
}

/// The follower of one source.
pub(crate) struct Follower {
    ctx: FollowContext,
    source: ExecutionSourceConfig,
    backend: Store,
    key: BackendKey,
    /// The revision whose active set has been applied (`None`: none yet).
    applied: Option<i64>,
    serving: BTreeMap<(String, String), Serving>,
    refused: BTreeMap<(String, String), Refusal>,
    shadowed: BTreeSet<(String, String)>,
    bytes: BTreeMap<ComponentDigest, Arc<Vec<u8>>>,
    /// Old claim loops stopping: kept until their attempts have ended.
    retiring: Vec<RunningTask>,
}

impl Follower {
    pub(crate) fn new(ctx: FollowContext, f: Followed) -> Self {
        Follower {
            key: backend_key(&f.source),
            ctx,
            source: f.source,
            backend: f.backend,
            applied: None,
            serving: BTreeMap::new(),
            refused: BTreeMap::new(),
            shadowed: BTreeSet::new(),
            bytes: BTreeMap::new(),
            retiring: Vec::new(),
        }
    }

    fn poll(&self) -> Duration {
        self.source.deployed.map_or(
            onestep_config::build::resources::DEFAULT_DEPLOYED_POLL,
            |d| d.poll,
        )
    }

    /// Reads the revision every `poll_s` and applies each change, until `stop` fires.
    pub(crate) async fn run(&mut self, stop: CancellationToken) {
        let mut ticks = tokio::time::interval(self.poll());
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tracing::info!(
            source = %self.source.name,
            namespaces = %self.source.namespace,
            poll_s = self.poll().as_secs_f64(),
            "following deployments"
        );
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = ticks.tick() => {}
            }
            self.retiring.retain(|r| !r.is_stopped());
            if let Err(e) = self.tick().await {
                tracing::warn!(
                    source = %self.source.name,
                    error = %format!("{e:#}"),
                    "reading the deployments failed; the deployed tasks keep serving, retrying at the next poll"
                );
            }
        }
    }

    /// One poll: the revision, and when it moved, the active set.
    pub(crate) async fn tick(&mut self) -> Result<()> {
        let deployments = self.backend.deployments();
        let revision = deployments.revision().await?;
        if self.applied == Some(revision) {
            return Ok(());
        }
        let names: Option<Vec<String>> = self
            .source
            .scope
            .listed()
            .map(|l| l.into_iter().map(str::to_owned).collect());
        let started = Instant::now();
        let set = deployments.active_all(names.as_deref()).await?;
        let complete = self.apply(set.deployments).await;
        if complete {
            self.applied = Some(set.revision);
            if let Some(m) = &self.ctx.metrics {
                m.deployments_revision(set.revision);
            }
            tracing::debug!(
                source = %self.source.name,
                revision = set.revision,
                elapsed_ms = started.elapsed().as_millis() as u64,
                "deployments applied"
            );
        }
        Ok(())
    }

    fn is_shadowed(&self, namespace: &str, task: &str) -> bool {
        self.ctx
            .yaml_tasks
            .iter()
            .any(|(k, scope, t)| *k == self.key && t == task && scope.contains(namespace))
    }

    fn report(&self, namespace: &str, task: &str) {
        let Some(m) = &self.ctx.metrics else {
            return;
        };
        let key = (namespace.to_owned(), task.to_owned());
        let report = DeploymentReport {
            serving: self.serving.get(&key).and_then(|s| {
                s.runner
                    .digest()
                    .map(|_| (s.deployment.version, s.deployment.digest.to_string()))
            }),
            refused: self
                .refused
                .get(&key)
                .map(|r| (r.version, r.digest.clone(), r.error.clone())),
            shadowed: self.shadowed.contains(&key),
        };
        m.deployment(namespace, task, Some(report));
    }

    /// Applies the active set read at `revision`; false when something must be tried again at
    /// the next tick (a transient error fetching a component).
    async fn apply(&mut self, active: Vec<Deployment>) -> bool {
        let mut complete = true;
        let wanted: BTreeMap<(String, String), Deployment> = active
            .into_iter()
            .map(|d| ((d.namespace.clone(), d.task.clone()), d))
            .collect();
        // Gone: stop claiming; attempts in flight finish.
        let gone: Vec<(String, String)> = self
            .serving
            .keys()
            .filter(|k| !wanted.contains_key(*k))
            .cloned()
            .collect();
        for key in gone {
            if let Some(s) = self.serving.remove(&key) {
                tracing::info!(
                    namespace = %key.0, task = %key.1, version = s.deployment.version,
                    "deployment no longer active: the task stops claiming; attempts in flight finish"
                );
                s.running.stop();
                self.retiring.push(s.running);
            }
            if let Some(m) = &self.ctx.metrics {
                m.deployment(&key.0, &key.1, None);
            }
        }
        self.refused.retain(|k, _| wanted.contains_key(k));
        let was_shadowed = std::mem::take(&mut self.shadowed);
        for (key, dep) in &wanted {
            if self.is_shadowed(&key.0, &key.1) {
                if !was_shadowed.contains(key) {
                    tracing::warn!(
                        namespace = %key.0, task = %key.1, version = dep.version,
                        "deployment shadowed: a task of the YAML file serves the same task on the same tables; the deployment is not run"
                    );
                }
                self.shadowed.insert(key.clone());
                self.report(&key.0, &key.1);
                continue;
            }
            if let Some(s) = self.serving.get_mut(key)
                && s.deployment.digest == dep.digest
                && s.deployment.settings == dep.settings
                && s.runner.digest().is_some()
            {
                // The same build and settings under another version number: nothing to do.
                s.deployment = dep.clone();
                self.refused.remove(key);
                self.report(&key.0, &key.1);
                continue;
            }
            if self
                .refused
                .get(key)
                .is_some_and(|r| r.version == dep.version)
            {
                // Refused before and still the active version: not tried again.
                continue;
            }
            match self.prepare(dep).await {
                Ok(prepared) => {
                    self.refused.remove(key);
                    self.install(dep, prepared);
                }
                Err(Prepare::Transient(e)) => {
                    tracing::warn!(
                        namespace = %key.0, task = %key.1, version = dep.version,
                        error = %format!("{e:#}"),
                        "cannot fetch the deployment's component now; trying again at the next poll"
                    );
                    complete = false;
                }
                Err(Prepare::Refused(e)) => {
                    let error = format!("{e:#}");
                    self.refuse(dep, error);
                }
            }
            self.report(&key.0, &key.1);
        }
        self.trim_bytes();
        complete
    }

    /// Refuses `dep`: the serving version (if any) keeps serving; a task with none is started
    /// quarantined, so the quarantine board and log report it.
    fn refuse(&mut self, dep: &Deployment, error: String) {
        let key = (dep.namespace.clone(), dep.task.clone());
        self.refused.insert(
            key.clone(),
            Refusal {
                version: dep.version,
                digest: dep.digest.to_string(),
                error: error.clone(),
            },
        );
        match self.serving.get(&key) {
            Some(s) if s.runner.digest().is_some() => tracing::error!(
                namespace = %key.0, task = %key.1,
                refused_version = dep.version, digest = %dep.digest,
                serving_version = s.deployment.version,
                error = %error,
                "deployment refused by this worker: its component cannot be fetched or loaded; the previous version keeps serving"
            ),
            Some(s) => {
                // Already quarantined without a build: now for this error.
                s.quarantine
                    .set(QuarantineCause::new(QuarantineKind::Load, error.clone()));
            }
            None => {
                tracing::error!(
                    namespace = %key.0, task = %key.1, version = dep.version, digest = %dep.digest,
                    error = %error,
                    "deployment refused by this worker: its component cannot be fetched or loaded; the task is quarantined"
                );
                let sandbox = SandboxSettings::default();
                let runner = Arc::new(self.runner(WasmTaskRunner::unloaded(
                    sandbox,
                    self.source.limits.max_result_bytes,
                )));
                let quarantine = Quarantine::new();
                quarantine.set(QuarantineCause::new(QuarantineKind::Load, error));
                let settings = self.task_settings(dep, None);
                self.start(dep, settings, runner, quarantine);
            }
        }
    }

    fn runner(&self, runner: WasmTaskRunner) -> WasmTaskRunner {
        match &self.ctx.metrics {
            Some(m) => runner.with_metrics(Arc::clone(m)),
            None => runner,
        }
    }

    /// The worker settings of `dep`'s task: the source's claim settings, the deployment's
    /// execution settings.
    fn task_settings(
        &self,
        dep: &Deployment,
        s: Option<&deploy_policy::DeploymentSettings>,
    ) -> TaskSettings {
        let src = &self.source;
        let mut t = TaskSettings::new(&dep.namespace, &dep.task);
        t.fair = src.fair.clone();
        t.worker_id = src.worker_id.clone();
        t.batch_size = src.batch_size;
        t.poll_interval = src.poll_interval;
        t.lease_duration = src.lease_duration;
        t.heartbeat_interval = src.heartbeat_interval;
        t.cancel_poll_interval = src.cancel_poll_interval;
        t.max_result_bytes = src.limits.max_result_bytes;
        if let Some(s) = s {
            t.concurrency = s.concurrency.max(1);
            t.retry = s.retry.clone();
            t.timeout = s.timeout;
        }
        t
    }

    /// Starts a claim loop for `dep` and makes it the serving one (the previous one, if any,
    /// stops claiming and its attempts finish).
    fn start(
        &mut self,
        dep: &Deployment,
        settings: TaskSettings,
        runner: Arc<WasmTaskRunner>,
        quarantine: Quarantine,
    ) {
        let key = (dep.namespace.clone(), dep.task.clone());
        let binding = TaskBinding {
            settings,
            store: self.backend.leases(),
            runner: Arc::clone(&runner) as Arc<dyn onestep_core::runner::TaskRunner>,
            quarantine: quarantine.clone(),
        };
        let running = match self.ctx.tasks.start(binding) {
            Ok(r) => r,
            Err(e) => {
                // Settings the worker refuses (cannot happen for a checked deployment).
                tracing::error!(namespace = %key.0, task = %key.1, error = %e, "cannot start the deployed task");
                self.refused.insert(
                    key,
                    Refusal {
                        version: dep.version,
                        digest: dep.digest.to_string(),
                        error: e.to_string(),
                    },
                );
                return;
            }
        };
        if let Some(m) = &self.ctx.metrics {
            m.watch_source(&dep.task, Some(self.source.lease_duration));
        }
        let new = Serving {
            deployment: dep.clone(),
            runner,
            running,
            quarantine,
        };
        if let Some(old) = self.serving.insert(key, new) {
            old.running.stop();
            self.retiring.push(old.running);
        }
    }

    /// Makes a loaded deployment serve: the same settings swap the build in the running loop;
    /// other settings start a new loop.
    fn install(&mut self, dep: &Deployment, p: Prepared) {
        let key = (dep.namespace.clone(), dep.task.clone());
        if let Some(s) = self.serving.get_mut(&key)
            && s.deployment.settings == dep.settings
            && s.runner.digest().is_some()
        {
            let old = s.runner.replace(p.handler);
            tracing::info!(
                namespace = %key.0, task = %key.1,
                old_version = s.deployment.version, new_version = dep.version,
                old_digest = old.as_deref().unwrap_or(""), new_digest = %dep.digest,
                "deployment changed: new attempts run the new version, attempts in flight finish on theirs"
            );
            s.deployment = dep.clone();
            return;
        }
        let previous = self.serving.get(&key).map(|s| s.deployment.version);
        let runner = WasmTaskRunner::new(p.handler, p.sandbox, self.source.limits.max_result_bytes)
            .with_params(&p.settings.params);
        let runner = Arc::new(self.runner(runner));
        let settings = self.task_settings(dep, Some(&p.settings));
        tracing::info!(
            namespace = %key.0, task = %key.1, version = dep.version, digest = %dep.digest,
            previous_version = previous,
            concurrency = settings.concurrency,
            "deployment serving: the task claims with this version (a previous claim loop stops; its attempts in flight finish)"
        );
        self.start(dep, settings, runner, Quarantine::new());
    }

    /// Fetches (once per digest) and loads `dep`'s component for its sandbox.
    async fn prepare(&mut self, dep: &Deployment) -> Result<Prepared, Prepare> {
        let settings = deploy_policy::DeploymentSettings::from_json(dep.settings.as_str())
            .map_err(|e| {
                Prepare::Refused(anyhow!(
                    "version {}: its settings are not valid deployment settings: {e}",
                    dep.version
                ))
            })?;
        let sandbox = sandbox_of(&settings, self.ctx.secrets.as_ref())
            .with_context(|| format!("version {}", dep.version))
            .map_err(Prepare::Refused)?;
        let bytes = match self.bytes.get(&dep.digest) {
            Some(b) => Arc::clone(b),
            None => {
                let fetched = self
                    .backend
                    .components()
                    .get(&dep.digest)
                    .await
                    .map_err(|e| {
                        let transient = e.is_transient();
                        let e = anyhow!(e).context(format!(
                            "version {}: cannot fetch {}",
                            dep.version, dep.digest
                        ));
                        if transient {
                            Prepare::Transient(e)
                        } else {
                            Prepare::Refused(e)
                        }
                    })?;
                let Some(bytes) = fetched else {
                    return Err(Prepare::Refused(anyhow!(
                        "version {}: component {} is not stored",
                        dep.version,
                        dep.digest
                    )));
                };
                let b = Arc::new(bytes);
                self.bytes.insert(dep.digest.clone(), Arc::clone(&b));
                b
            }
        };
        let (rt, sb) = (self.ctx.runtime.clone(), sandbox.clone());
        let name = format!("{}/{}@{}", dep.namespace, dep.task, dep.version);
        let loaded =
            tokio::task::spawn_blocking(move || rt.load_bytes_for(&name, &bytes, &sb)).await;
        let handler = match loaded {
            Ok(Ok(h)) => h,
            Ok(Err(e)) => {
                return Err(Prepare::Refused(anyhow!(e).context(format!(
                    "task '{}' of namespace '{}': version {} cannot be loaded",
                    dep.task, dep.namespace, dep.version
                ))));
            }
            Err(e) => return Err(Prepare::Transient(anyhow!("component load failed: {e}"))),
        };
        Ok(Prepared {
            handler,
            sandbox,
            settings,
        })
    }

    /// Drops cached component bytes no serving version uses once the cache is over its limit.
    fn trim_bytes(&mut self) {
        let total: usize = self.bytes.values().map(|b| b.len()).sum();
        if total <= BYTES_CACHE_LIMIT {
            return;
        }
        let serving: BTreeSet<&ComponentDigest> = self
            .serving
            .values()
            .map(|s| &s.deployment.digest)
            .collect();
        self.bytes.retain(|d, _| serving.contains(d));
    }
}

/// A deployment loaded and ready to serve.
struct Prepared {
    handler: Handler,
    sandbox: SandboxSettings,
    settings: deploy_policy::DeploymentSettings,
}

enum Prepare {
    /// Try again at the next poll (a database error).
    Transient(anyhow::Error),
    /// This version cannot serve on this worker.
    Refused(anyhow::Error),
}

/// The sandbox a deployment runs in: its settings' sandbox with its injected headers resolved,
/// each `{secret: name}` to the operator's value, which must be bound to that origin.
pub(crate) fn sandbox_of(
    s: &deploy_policy::DeploymentSettings,
    operator: Option<&DeploymentsConfig>,
) -> Result<SandboxSettings> {
    let mut sandbox = s.sandbox.clone();
    for h in &s.headers {
        let value = match &h.value {
            HeaderValue::Literal(v) => v.clone(),
            HeaderValue::Secret(name) => {
                let Some(secret) = operator.and_then(|o| o.secrets.get(name)) else {
                    return Err(anyhow!(
                        "header {} for {} names secret {name:?}, which this worker's \
                         configuration does not hold (deployments.secrets)",
                        h.name,
                        h.origin
                    ));
                };
                if !deploy_policy::origin_within(&h.origin, &secret.origins) {
                    return Err(anyhow!(
                        "header {} names secret {name:?} for {}, but the operator binds it to \
                         other origins",
                        h.name,
                        h.origin
                    ));
                }
                secret.value.expose().to_owned()
            }
        };
        let Some(allow) = sandbox
            .network
            .allow
            .iter_mut()
            .find(|a| a.origin == h.origin)
        else {
            return Err(anyhow!(
                "header {} is for {}, which is not one of sandbox.network.allow",
                h.name,
                h.origin
            ));
        };
        allow
            .headers
            .push((h.name.clone(), onestep_config::Secret::new(value)));
    }
    Ok(sandbox)
}

/// Opens the backend of every source with `deployed:` (reusing one already opened for the
/// same tables).
pub(crate) async fn open_followed(
    cfg: &AppConfig,
    backends: &mut BTreeMap<BackendKey, Store>,
) -> Result<Vec<Followed>> {
    let mut out = Vec::new();
    for source in cfg.deployed_sources() {
        let key = backend_key(source);
        if !backends.contains_key(&key) {
            let opts = super::store_options(cfg, source)?;
            let backend = Store::open(&opts)
                .await
                .with_context(|| format!("cannot open source '{}'", source.name))?;
            backends.insert(key.clone(), backend);
        }
        let backend = backends
            .get(&key)
            .with_context(|| format!("no backend opened for source '{}'", source.name))?;
        out.push(Followed {
            source: source.clone(),
            backend: backend.clone(),
        });
    }
    Ok(out)
}
