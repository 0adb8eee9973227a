//! The HTTP API's request settings (docs/http-api.md, docs/configuration.md#api-for-onestep-serve): which tasks clients
//! may submit, the largest request body, the value size limits and who may read `/metrics`.
//!
//! Defined once, here; the configuration crate builds it from the file's `api:` block and the API
//! crate (`onestep-api`) enforces it. How requests are authenticated (one namespace, or bearer
//! tokens mapped to namespaces) is the API crate's own `Tenancy`, not a setting of this struct.

use serde::Serialize;

use crate::limits::Limits;
use crate::quota::{QuotaSettings, SubmitQuota};
use crate::settings::DEFAULT_API_MAX_BODY_BYTES;

/// The API's request settings. `Default` is the file's defaults: every task accepted, a 2 MiB
/// body limit, the default value limits, `/metrics` private.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApiSettings {
    /// Task names clients may submit (`api.allowed_tasks`); empty accepts every task.
    pub allowed_tasks: Vec<String>,
    /// Largest accepted request body in bytes (`api.max_body_bytes`; 413 above).
    pub max_body_bytes: u64,
    /// Value size limits in bytes (`api.limits`, docs/semantics.md#size-limits).
    pub limits: Limits,
    /// `api.metrics.public`: `/metrics` shows every namespace's execution figures without a
    /// token (false: only to an `operate` token, and only its own namespace).
    pub metrics_public: bool,
    /// `api.max_wait_s`: the longest `?wait=` a request may ask for, in seconds (0 to
    /// [`MAX_API_WAIT_S`]; 0 turns waiting off: only `wait=0` is accepted).
    pub max_wait_s: u32,
    /// `api.max_streams`: event streams (`GET /v1/executions/{id}/events`) one API process
    /// serves at once (0 to [`MAX_API_STREAMS`]; 0 turns streaming off).
    pub max_streams: u32,
    /// `api.max_stream_s`: seconds after which the server closes an event stream (the client
    /// resumes it with `Last-Event-ID`), 1 to [`MAX_API_STREAM_S`].
    pub max_stream_s: u32,
    /// `api.quotas`: limits of waiting executions per namespace and fairness key, checked at
    /// submit (docs/semantics.md#quotas); `None`: no quota.
    pub quotas: Option<QuotaSettings>,
    /// `api.max_connections`: connections one API process holds open at once (1 to
    /// [`MAX_API_CONNECTIONS`]); one more waits in the listen backlog (docs/security.md#api-connections).
    pub max_connections: u32,
    /// `api.callbacks`: completion webhooks (docs/semantics.md#completion-webhooks); `None`:
    /// a submit's `callback` is refused.
    pub callbacks: Option<crate::callback::CallbackSettings>,
    /// `api.notify`: how the process learns that a waited or streamed execution changed
    /// (docs/http-api.md#waiting); `None`: the backend's default ([`ChangeNotify::default_for`]).
    pub notify: Option<ChangeNotify>,
    /// `api.poll_ms`: the period of the waits' poll, in milliseconds ([`MIN_API_POLL_MS`] to
    /// [`MAX_API_POLL_MS`]); `None`: 100 when polling alone, 1,000 while a listening session
    /// is up (the safety net).
    pub poll_ms: Option<u32>,
}

/// `api.notify` (docs/http-api.md#waiting).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChangeNotify {
    /// One statement per poll period reads the versions of every waited execution.
    Poll,
    /// PostgreSQL `LISTEN`/`NOTIFY`: a dedicated session is told of every execution that ends
    /// and wakes its waiters at once; the poll stays as the safety net, slower.
    Listen,
}

impl ChangeNotify {
    /// The word of the YAML.
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeNotify::Poll => "poll",
            ChangeNotify::Listen => "listen",
        }
    }

    /// The default of a backend that has pushed notifications (`pushes`: PostgreSQL with the
    /// notify trigger) or not (docs/benchmarks.md#waiting-callers measured the choice).
    pub fn default_for(pushes: bool) -> ChangeNotify {
        if pushes {
            ChangeNotify::Listen
        } else {
            ChangeNotify::Poll
        }
    }
}

/// The smallest `api.poll_ms`.
pub const MIN_API_POLL_MS: u32 = 10;
/// The largest `api.poll_ms` (a minute).
pub const MAX_API_POLL_MS: u32 = 60_000;

/// The default `api.max_connections` (docs/security.md#api-connections).
pub const DEFAULT_API_MAX_CONNECTIONS: u32 = 512;
/// The largest `api.max_connections` (each is a file descriptor of the process).
pub const MAX_API_CONNECTIONS: u32 = 65_536;

/// The largest `api.max_wait_s` (docs/http-api.md#waiting).
pub const MAX_API_WAIT_S: u32 = 60;

/// The default `api.max_streams` (docs/http-api.md#stream): half the API's default connection
/// cap, so that streams never hold every connection.
pub const DEFAULT_API_MAX_STREAMS: u32 = 256;
/// The largest `api.max_streams`.
pub const MAX_API_STREAMS: u32 = 65_536;
/// The default `api.max_stream_s` (docs/http-api.md#stream).
pub const DEFAULT_API_MAX_STREAM_S: u32 = 600;
/// The largest `api.max_stream_s` (a day).
pub const MAX_API_STREAM_S: u32 = 86_400;

impl Default for ApiSettings {
    fn default() -> Self {
        ApiSettings {
            allowed_tasks: Vec::new(),
            max_body_bytes: DEFAULT_API_MAX_BODY_BYTES,
            limits: Limits::default(),
            metrics_public: false,
            max_wait_s: MAX_API_WAIT_S,
            max_streams: DEFAULT_API_MAX_STREAMS,
            max_stream_s: DEFAULT_API_MAX_STREAM_S,
            quotas: None,
            max_connections: DEFAULT_API_MAX_CONNECTIONS,
            callbacks: None,
            notify: None,
            poll_ms: None,
        }
    }
}

impl ApiSettings {
    /// Whether clients may submit `task`.
    pub fn allows_task(&self, task: &str) -> bool {
        self.allowed_tasks.is_empty() || self.allowed_tasks.iter().any(|t| t == task)
    }

    /// The quota of `namespace`'s submits (`None`: no quota).
    pub fn quota_for(&self, namespace: &str) -> Option<SubmitQuota> {
        self.quotas
            .as_ref()
            .and_then(|q| q.for_namespace(namespace))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_allow_list_accepts_every_task_and_a_list_only_its_names() {
        let mut s = ApiSettings::default();
        assert!(s.allows_task("anything"));
        s.allowed_tasks.push("report".into());
        assert!(s.allows_task("report"));
        assert!(!s.allows_task("anything"));
    }

    #[test]
    fn defaults_are_the_files_defaults() {
        let s = ApiSettings::default();
        assert_eq!(s.max_body_bytes, 2 * 1024 * 1024);
        assert_eq!(s.limits, Limits::default());
        assert!(!s.metrics_public);
    }
}
