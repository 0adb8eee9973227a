//! The router's shared state: the store, its readiness probe, the tenants, the task allow-list
//! and the limits.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use onestep_core::ports::{
    ExecutionInsights, ExecutionStore, Readiness, RecentActivity, StatusCount,
};
use onestep_core::{ApiSettings, ExecutionClient, ExecutionError};

use crate::auth::{Role, Tenancy, bearer_token};
use crate::error::ApiError;

/// Cheap-to-clone state handed to [`router`](crate::router).
#[derive(Clone)]
pub struct ApiState {
    inner: Arc<Inner>,
}

/// The dashboard overview's figures for one namespace, kept a few seconds (docs/ui.md#overview-queries).
#[derive(Debug, Clone)]
pub struct OverviewSnapshot {
    /// When the figures were read (for the cache).
    pub taken: Instant,
    /// The same instant as shown on the page.
    pub as_of: DateTime<Utc>,
    /// Counts by task and status.
    pub counts: Vec<StatusCount>,
    /// The last hour.
    pub recent: RecentActivity,
    /// The busiest fairness keys (docs/ui.md#keys).
    pub keys: onestep_core::ports::KeyLoads,
    /// The fleet-wide rate-limit buckets (docs/ui.md#rate-limits).
    pub rate_limits: onestep_core::rate::BucketStates,
}

#[derive(Clone)]
struct Inner {
    readiness: Arc<dyn Readiness>,
    insights: Option<Arc<dyn ExecutionInsights>>,
    overview_cache: Arc<Mutex<HashMap<String, OverviewSnapshot>>>,
    /// Namespaces whose overview is being re-read in the background (one read at a time each).
    overview_refreshing: Arc<Mutex<std::collections::HashSet<String>>>,
    tenancy: Tenancy,
    /// One client per namespace, indexed like `TokenTable::namespaces()` (or one for `Single`).
    clients: Vec<ExecutionClient>,
    /// The task allow-list, the limits and `/metrics` exposure.
    settings: ApiSettings,
    /// `settings.max_body_bytes` as the body-limit layer takes it.
    max_body_bytes: usize,
    /// The bounded waits of `?wait=S` (docs/http-api.md#waiting).
    waits: crate::wait::WaitHub,
    /// The event streams (docs/http-api.md#stream).
    streams: crate::stream::StreamHub,
    /// The completion-webhook outbox (docs/semantics.md#completion-webhooks), when the store
    /// keeps one.
    callbacks: Option<Arc<dyn onestep_core::callback::CallbackStore>>,
    /// The webhook sender's delivery metrics (shown at `/metrics`).
    webhook_metrics: Arc<crate::callbacks::metrics::WebhookMetrics>,
    /// The deployments API's stores, load check and policy (docs/deployments.md), when wired.
    deploy: Option<Arc<crate::deploy::DeployApi>>,
    /// The durable steps (docs/steps.md), when wired.
    steps: Option<Arc<dyn onestep_core::steps::StepStore>>,
    /// The bounds of the component uploads and deploys in progress (docs/http-api.md#deployments).
    transfers: Arc<crate::transfers::TransferGate>,
}

impl std::fmt::Debug for ApiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiState")
            .field("tenancy", &self.inner.tenancy)
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

impl ApiState {
    /// Builds the state: one namespace-bound [`ExecutionClient`] per tenant of `tenancy` over
    /// `store`, enforcing `settings`.
    ///
    /// Errors: an invalid namespace or limit, a `max_body_bytes` of 0.
    pub fn new(
        store: Arc<dyn ExecutionStore>,
        readiness: Arc<dyn Readiness>,
        tenancy: Tenancy,
        settings: ApiSettings,
    ) -> Result<Self, ExecutionError> {
        if settings.max_body_bytes == 0 {
            return Err(ExecutionError::invalid(
                "max_body_bytes must be a positive integer",
            ));
        }
        let max_body_bytes = usize::try_from(settings.max_body_bytes).unwrap_or(usize::MAX);
        let namespaces: Vec<String> = match &tenancy {
            Tenancy::Single(ns) => vec![ns.clone()],
            Tenancy::Tokens(t) => t.namespaces().to_vec(),
        };
        let clients = namespaces
            .iter()
            .map(|ns| {
                ExecutionClient::new(Arc::clone(&store), ns, settings.limits)
                    .map(|c| c.with_quota(settings.quota_for(ns)))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let poll = settings
            .poll_ms
            .map_or(crate::wait::DEFAULT_POLL_INTERVAL, |ms| {
                Duration::from_millis(u64::from(ms))
            });
        let waits = crate::wait::WaitHub::new(store, poll);
        let streams = crate::stream::StreamHub::new(
            usize::try_from(settings.max_streams).unwrap_or(usize::MAX),
            Duration::from_secs(u64::from(settings.max_stream_s.max(1))),
            crate::stream::LIVE_POLL,
        );
        Ok(ApiState {
            inner: Arc::new(Inner {
                readiness,
                insights: None,
                overview_cache: Arc::default(),
                overview_refreshing: Arc::default(),
                tenancy,
                clients,
                settings,
                max_body_bytes,
                waits,
                streams,
                callbacks: None,
                webhook_metrics: Arc::default(),
                deploy: None,
                steps: None,
                transfers: Arc::default(),
            }),
        })
    }

    /// The longest `?wait=` a request may ask for, in seconds (`api.max_wait_s`).
    pub fn max_wait_s(&self) -> u32 {
        self.inner.settings.max_wait_s
    }

    /// The bounded waits of this process (docs/http-api.md#waiting).
    pub fn waits(&self) -> &crate::wait::WaitHub {
        &self.inner.waits
    }

    /// The event streams of this process (docs/http-api.md#stream).
    pub fn streams(&self) -> &crate::stream::StreamHub {
        &self.inner.streams
    }

    /// The same state with its waits and streams woken by `listener`'s notifications
    /// (`api.notify: listen`, docs/http-api.md#waiting): the poll stays, every `api.poll_ms`
    /// (default 1 s) while the listening session is up and every 100 ms while it is not.
    /// Call it before the state serves anything.
    pub fn with_changes(self, listener: Arc<dyn onestep_core::changes::ChangeListener>) -> Self {
        let mut inner = (*self.inner).clone();
        let listening = inner
            .settings
            .poll_ms
            .map_or(crate::wait::DEFAULT_LISTENING_POLL_INTERVAL, |ms| {
                Duration::from_millis(u64::from(ms))
            });
        inner.waits = inner.waits.with_listener(listener, listening);
        ApiState {
            inner: Arc::new(inner),
        }
    }

    /// The same state with the dashboard's overview figures read from `insights`.
    pub fn with_insights(self, insights: Arc<dyn ExecutionInsights>) -> Self {
        let mut inner = (*self.inner).clone();
        inner.insights = Some(insights);
        ApiState {
            inner: Arc::new(inner),
        }
    }

    /// The same state with submits' callbacks written to, and deliveries read from, `store`.
    pub fn with_callbacks(self, store: Arc<dyn onestep_core::callback::CallbackStore>) -> Self {
        let mut inner = (*self.inner).clone();
        inner.callbacks = Some(store);
        ApiState {
            inner: Arc::new(inner),
        }
    }

    /// The same state with the deployments API (docs/deployments.md) served from `deploy`.
    pub fn with_deployments(self, deploy: crate::deploy::DeployApi) -> Self {
        let mut inner = (*self.inner).clone();
        inner.deploy = Some(Arc::new(deploy));
        ApiState {
            inner: Arc::new(inner),
        }
    }

    /// The same state with executions' durable steps (docs/steps.md) read from `steps`.
    pub fn with_steps(self, steps: Arc<dyn onestep_core::steps::StepStore>) -> Self {
        let mut inner = (*self.inner).clone();
        inner.steps = Some(steps);
        ApiState {
            inner: Arc::new(inner),
        }
    }

    /// The durable steps, when wired.
    pub fn step_store(&self) -> Option<&dyn onestep_core::steps::StepStore> {
        self.inner.steps.as_deref()
    }

    /// The same state with other bounds on the component uploads and deploys in progress
    /// ([`crate::transfers`]; the defaults otherwise).
    pub fn with_transfer_limits(self, limits: crate::transfers::TransferLimits) -> Self {
        let mut inner = (*self.inner).clone();
        inner.transfers = Arc::new(crate::transfers::TransferGate::new(limits));
        ApiState {
            inner: Arc::new(inner),
        }
    }

    /// The bounds of the component uploads and deploys in progress.
    pub fn transfers(&self) -> &crate::transfers::TransferGate {
        &self.inner.transfers
    }

    /// The deployments API, when wired.
    pub fn deploy_api(&self) -> Option<&crate::deploy::DeployApi> {
        self.inner.deploy.as_deref()
    }

    /// Whether tokens are off (one namespace, local use): the caller may do everything,
    /// deploying included.
    pub fn unauthenticated(&self) -> bool {
        matches!(self.inner.tenancy, Tenancy::Single(_))
    }

    /// The completion-webhook outbox, when the store keeps one.
    pub fn callback_store(&self) -> Option<&Arc<dyn onestep_core::callback::CallbackStore>> {
        self.inner.callbacks.as_ref()
    }

    /// The webhook delivery metrics of this process: give them to its
    /// [`crate::callbacks::CallbackSender`] so that `/metrics` shows its deliveries.
    pub fn webhook_metrics(&self) -> Arc<crate::callbacks::metrics::WebhookMetrics> {
        Arc::clone(&self.inner.webhook_metrics)
    }

    /// `api.callbacks`, when configured.
    pub fn callback_settings(&self) -> Option<&onestep_core::callback::CallbackSettings> {
        self.inner.settings.callbacks.as_ref()
    }

    /// Whether `/metrics` shows every namespace's figures without a token.
    pub fn metrics_public(&self) -> bool {
        self.inner.settings.metrics_public
    }

    /// `api.max_connections`: connections the server holds open at once.
    pub fn max_connections(&self) -> u32 {
        self.inner.settings.max_connections
    }

    /// The overview figures' source as a shared handle (for the metrics' gauge).
    pub fn insights_handle(&self) -> Option<Arc<dyn ExecutionInsights>> {
        self.inner.insights.clone()
    }

    /// The namespaces this API serves (one per client).
    pub fn namespaces(&self) -> Vec<String> {
        self.inner
            .clients
            .iter()
            .map(|c| c.namespace().to_owned())
            .collect()
    }

    /// The overview figures' source, when configured.
    pub fn insights(&self) -> Option<&dyn ExecutionInsights> {
        self.inner.insights.as_deref()
    }

    /// The cached overview of `namespace` when younger than `max_age`.
    pub fn cached_overview(&self, namespace: &str, max_age: Duration) -> Option<OverviewSnapshot> {
        let cache = self.inner.overview_cache.lock().ok()?;
        cache
            .get(namespace)
            .filter(|s| s.taken.elapsed() < max_age)
            .cloned()
    }

    /// Marks `namespace`'s overview as being re-read; false when a re-read is already running.
    pub fn begin_overview_refresh(&self, namespace: &str) -> bool {
        self.inner
            .overview_refreshing
            .lock()
            .map(|mut set| set.insert(namespace.to_owned()))
            .unwrap_or(false)
    }

    /// Ends the re-read [`begin_overview_refresh`](Self::begin_overview_refresh) started.
    pub fn end_overview_refresh(&self, namespace: &str) {
        if let Ok(mut set) = self.inner.overview_refreshing.lock() {
            set.remove(namespace);
        }
    }

    /// Keeps `snapshot` as the overview of `namespace`.
    pub fn store_overview(&self, namespace: &str, snapshot: OverviewSnapshot) {
        if let Ok(mut cache) = self.inner.overview_cache.lock() {
            cache.insert(namespace.to_owned(), snapshot);
        }
    }

    /// The tenancy mode.
    pub fn tenancy(&self) -> &Tenancy {
        &self.inner.tenancy
    }

    /// The body limit in bytes.
    pub fn max_body_bytes(&self) -> usize {
        self.inner.max_body_bytes
    }

    /// The `Retry-After` of a quota refusal (`api.quotas.retry_after_s`, docs/http-api.md#quotas).
    pub fn quota_retry_after_s(&self) -> u32 {
        self.inner
            .settings
            .quotas
            .as_ref()
            .map_or(onestep_core::quota::DEFAULT_RETRY_AFTER_S, |q| {
                q.retry_after_s
            })
    }

    /// Whether `task` may be submitted.
    pub fn task_allowed(&self, task: &str) -> bool {
        self.inner.settings.allows_task(task.trim())
    }

    /// The readiness probe of `GET /readyz`.
    pub fn readiness(&self) -> &dyn Readiness {
        self.inner.readiness.as_ref()
    }

    /// The client of the caller given its `Authorization` header value (401 when tokens are
    /// configured and the header is missing, malformed or unknown).
    pub fn client_for(&self, authorization: Option<&str>) -> Result<&ExecutionClient, ApiError> {
        self.caller_for(authorization).map(|(c, _)| c)
    }

    /// The client and role of the caller (docs/http-api.md#roles). Without tokens
    /// ([`Tenancy::Single`], local use) the caller may do everything ([`Role::Operate`]).
    pub fn caller_for(
        &self,
        authorization: Option<&str>,
    ) -> Result<(&ExecutionClient, Role), ApiError> {
        let found = match &self.inner.tenancy {
            Tenancy::Single(_) => Some((0, Role::Operate)),
            Tenancy::Tokens(table) => authorization
                .and_then(bearer_token)
                .and_then(|t| table.lookup_with_role(t)),
        };
        found
            .and_then(|(i, role)| self.inner.clients.get(i).map(|c| (c, role)))
            .ok_or_else(ApiError::unauthorized)
    }
}
