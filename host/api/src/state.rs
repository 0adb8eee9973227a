//! The router's shared state: the store, its readiness probe, the tenants, the task allow-list
//! and the limits.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use onestep_core::ports::{
    ExecutionInsights, ExecutionStore, Readiness, RecentActivity, StatusCount,
};
use onestep_core::{ExecutionClient, ExecutionError, Limits};

use crate::auth::{Role, Tenancy, bearer_token};
use crate::error::ApiError;

/// Default `max_body_bytes` (2 MiB): the one default of `api.max_body_bytes`,
/// [`DEFAULT_API_MAX_BODY_BYTES`](onestep_core::settings::DEFAULT_API_MAX_BODY_BYTES).
pub const DEFAULT_MAX_BODY_BYTES: usize =
    onestep_core::settings::DEFAULT_API_MAX_BODY_BYTES as usize;

/// Settings of the API that do not come from the store.
#[derive(Debug, Clone)]
pub struct ApiSettings {
    /// Single namespace or bearer-token tenants.
    pub tenancy: Tenancy,
    /// Task names accepted by `POST /v1/executions`; `None` accepts every task (local use).
    pub allowed_tasks: Option<BTreeSet<String>>,
    /// Largest request body in bytes (413 above).
    pub max_body_bytes: usize,
    /// Value size limits (docs/semantics.md#size-limits).
    pub limits: Limits,
}

impl ApiSettings {
    /// Settings for one namespace, every task allowed, default limits.
    pub fn single(namespace: &str) -> Self {
        ApiSettings {
            tenancy: Tenancy::Single(namespace.to_owned()),
            allowed_tasks: None,
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            limits: Limits::default(),
        }
    }
}

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
    allowed_tasks: Option<BTreeSet<String>>,
    max_body_bytes: usize,
    /// `api.metrics.public`: `/metrics` shows every namespace's figures without a token.
    metrics_public: bool,
}

impl std::fmt::Debug for ApiState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiState")
            .field("tenancy", &self.inner.tenancy)
            .field("allowed_tasks", &self.inner.allowed_tasks)
            .field("max_body_bytes", &self.inner.max_body_bytes)
            .finish_non_exhaustive()
    }
}

impl ApiState {
    /// Builds the state: one namespace-bound [`ExecutionClient`] per tenant over `store`.
    ///
    /// Errors: an invalid namespace or limit, a `max_body_bytes` of 0, an empty allow-list.
    pub fn new(
        store: Arc<dyn ExecutionStore>,
        readiness: Arc<dyn Readiness>,
        settings: ApiSettings,
    ) -> Result<Self, ExecutionError> {
        if settings.max_body_bytes == 0 {
            return Err(ExecutionError::invalid(
                "max_body_bytes must be a positive integer",
            ));
        }
        if settings
            .allowed_tasks
            .as_ref()
            .is_some_and(|t| t.is_empty())
        {
            return Err(ExecutionError::invalid("allowed_tasks must not be empty"));
        }
        let namespaces: Vec<String> = match &settings.tenancy {
            Tenancy::Single(ns) => vec![ns.clone()],
            Tenancy::Tokens(t) => t.namespaces().to_vec(),
        };
        let clients = namespaces
            .iter()
            .map(|ns| ExecutionClient::new(Arc::clone(&store), ns, settings.limits))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ApiState {
            inner: Arc::new(Inner {
                readiness,
                insights: None,
                overview_cache: Arc::default(),
                overview_refreshing: Arc::default(),
                tenancy: settings.tenancy,
                clients,
                allowed_tasks: settings.allowed_tasks,
                max_body_bytes: settings.max_body_bytes,
                metrics_public: false,
            }),
        })
    }

    /// The same state with the dashboard's overview figures read from `insights`.
    pub fn with_insights(self, insights: Arc<dyn ExecutionInsights>) -> Self {
        let mut inner = (*self.inner).clone();
        inner.insights = Some(insights);
        ApiState {
            inner: Arc::new(inner),
        }
    }

    /// The same state with `/metrics` showing every namespace's figures to anyone
    /// (`api.metrics.public`, docs/observability.md#api-metrics).
    pub fn with_public_metrics(self, public: bool) -> Self {
        let mut inner = (*self.inner).clone();
        inner.metrics_public = public;
        ApiState {
            inner: Arc::new(inner),
        }
    }

    /// Whether `/metrics` shows every namespace's figures without a token.
    pub fn metrics_public(&self) -> bool {
        self.inner.metrics_public
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

    /// Whether `task` may be submitted.
    pub fn task_allowed(&self, task: &str) -> bool {
        self.inner
            .allowed_tasks
            .as_ref()
            .is_none_or(|set| set.contains(task.trim()))
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
