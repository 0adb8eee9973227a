//! Client and worker requests, validated in the documented order before any backend sees them
//! (docs/semantics.md#submit-and-idempotency, docs/semantics.md#listing-and-cursors, docs/semantics.md#claim-and-maintenance).

use chrono::{DateTime, Duration, FixedOffset, Utc};
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::canonical::to_canonical_string;
use crate::codec::{ValueField, encode_storable};
use crate::cursor::Cursor;
use crate::digest::{DigestFields, submission_digest};
use crate::error::ExecutionError;
use crate::limits::Limits;
use crate::status::ExecutionStatus;
use crate::storable::{check_instant, check_text};
use crate::text::{MAX_NAME_CHARS, optional_text, required_text};
use crate::time::seconds_to_duration;

/// The reserved metadata key that workers inject into the handler context (docs/semantics.md#reserved-metadata-key).
pub const RESERVED_METADATA_KEY: &str = "onestep.execution";

/// The reserved metadata key linking a retry to the execution it retries
/// (docs/semantics.md#retrying-an-execution): set only by [`crate::rerun`], refused in submissions.
pub const RETRY_OF_METADATA_KEY: &str = "onestep.retry_of";

/// Every reserved top-level metadata key (docs/semantics.md#reserved-metadata-key).
pub const RESERVED_METADATA_KEYS: [&str; 2] = [RESERVED_METADATA_KEY, RETRY_OF_METADATA_KEY];

/// What a caller submits (docs/semantics.md#submit-and-idempotency). `expires_at` carries its offset, so a naive datetime
/// cannot be expressed; the caller's offset is kept for the digest (docs/semantics.md#submission-digest) and the instant is
/// stored as UTC.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct SubmitRequest {
    /// Routing key; trimmed, 1–255 characters.
    pub task_name: String,
    /// Any JSON value.
    pub payload: Value,
    /// Optional idempotency key; trimmed, 1–255 characters when given.
    pub idempotency_key: Option<String>,
    /// Optional metadata; must be a JSON object (default `{}`).
    pub metadata: Option<Value>,
    /// Optional delay in seconds before the first claim (finite, ≥ 0).
    pub delay_s: Option<f64>,
    /// Optional latest claim instant.
    pub expires_at: Option<DateTime<FixedOffset>>,
    /// Optional claim priority, 0 (most urgent) ..= 9; absent means 5
    /// (docs/semantics.md#priority-and-fairness-key).
    pub priority: Option<i64>,
    /// Optional fairness key (task-name characters, 1–255); absent means the namespace.
    pub fairness_key: Option<String>,
}

/// A validated, encoded submission ready to be written (docs/semantics.md#submit-and-idempotency). Produced only by
/// [`prepare_submission`].
#[derive(Debug, Clone, PartialEq)]
pub struct PreparedSubmission {
    /// New execution id (UUID v4).
    pub id: Uuid,
    /// Trimmed namespace.
    pub namespace: String,
    /// Trimmed task name.
    pub task_name: String,
    /// Trimmed idempotency key.
    pub idempotency_key: Option<String>,
    /// Submission digest (always computed; stored only with a key).
    pub digest: String,
    /// Encoded payload (docs/semantics.md#value-encoding).
    pub payload: Value,
    /// Encoded metadata object.
    pub metadata: Value,
    /// `available_at = now + delay`.
    pub delay: Duration,
    /// `expires_at` converted to UTC.
    pub expires_at: Option<DateTime<Utc>>,
    /// Checked priority (5 when not given).
    pub priority: u8,
    /// Checked fairness key (`None`: the namespace).
    pub fairness_key: Option<String>,
    /// The W3C `traceparent` of the submit, when traces are on (docs/observability.md#traces).
    /// Not part of [`Self::digest`]: a retried submit with another traceparent is a replay. A
    /// store keeps it only when this submission creates the execution, and never in metadata.
    pub trace_parent: Option<String>,
    /// The quota the store holds this submission to (docs/semantics.md#quotas); `None`: none.
    /// Set by the [`ExecutionClient`](crate::client::ExecutionClient) that carries it; not part
    /// of [`Self::digest`].
    pub quota: Option<crate::quota::SubmitQuota>,
    /// The completion webhook written with a newly created execution, in the submit's
    /// transaction (docs/semantics.md#completion-webhooks); not part of [`Self::digest`].
    pub callback: Option<crate::callback::CallbackSpec>,
}

impl PreparedSubmission {
    /// The encoded payload as JSON text for storage.
    pub fn payload_json(&self) -> String {
        self.payload.to_string()
    }

    /// The encoded metadata as JSON text for storage.
    pub fn metadata_json(&self) -> String {
        self.metadata.to_string()
    }
}

/// Validates and encodes one submission in the order of docs/semantics.md#submit-and-idempotency; `namespace` must already
/// be validated (see [`validate_namespace`]). Nothing is written on failure.
///
/// Errors: `InvalidArgument` for text rules, `metadata must be a mapping`, delay rules and the
/// reserved key; `Encoding` for unencodable values and size limits.
pub fn prepare_submission(
    namespace: &str,
    req: &SubmitRequest,
    limits: &Limits,
) -> Result<PreparedSubmission, ExecutionError> {
    // Only a new submission is held to the task-name character set (docs/semantics.md#task-names);
    // a retry keeps the name of the execution it retries.
    crate::text::task_name(&req.task_name)?;
    prepare_with_link(namespace, req, limits, None)
}

/// [`prepare_submission`] that also writes the reserved retry link `onestep.retry_of = <id>`
/// into the metadata (after the reserved-key check, so only the domain can set it).
pub(crate) fn prepare_with_link(
    namespace: &str,
    req: &SubmitRequest,
    limits: &Limits,
    retry_of: Option<Uuid>,
) -> Result<PreparedSubmission, ExecutionError> {
    // 1. text rules, metadata shape, delay, expires_at (aware by type).
    let task_name = required_text("task_name", &req.task_name, MAX_NAME_CHARS)?;
    let idempotency_key = optional_text(
        "idempotency_key",
        req.idempotency_key.as_deref(),
        MAX_NAME_CHARS,
    )?;
    let mut metadata: Map<String, Value> = match &req.metadata {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(m)) => m.clone(),
        _ => return Err(ExecutionError::invalid("metadata must be a mapping")),
    };
    let delay = match req.delay_s {
        None => Duration::zero(),
        Some(d) => seconds_to_duration("delay_s", d)?,
    };
    if let Some(t) = &req.expires_at {
        check_instant("expires_at", &t.with_timezone(&Utc))?;
    }
    let priority = req
        .priority
        .map(crate::schedule::priority)
        .transpose()?
        .unwrap_or(crate::schedule::DEFAULT_PRIORITY);
    let fairness_key = req
        .fairness_key
        .as_deref()
        .map(crate::schedule::fairness_key)
        .transpose()?;
    // 2. reserved keys.
    if let Some(key) = RESERVED_METADATA_KEYS
        .iter()
        .find(|k| metadata.contains_key(**k))
    {
        return Err(ExecutionError::invalid(format!(
            "metadata key '{key}' is reserved"
        )));
    }
    if let Some(original) = retry_of {
        metadata.insert(
            RETRY_OF_METADATA_KEY.to_owned(),
            Value::String(original.to_string()),
        );
    }
    // 3. encode payload, then metadata.
    let payload = encode_storable(&req.payload, ValueField::Payload)?;
    let metadata = encode_storable(&Value::Object(metadata), ValueField::Metadata)?;
    // 4. size limits, payload then metadata.
    if to_canonical_string(&payload).len() > limits.max_payload_bytes {
        return Err(ExecutionError::Encoding(
            "execution payload exceeds the configured limit".into(),
        ));
    }
    if to_canonical_string(&metadata).len() > limits.max_metadata_bytes {
        return Err(ExecutionError::Encoding(
            "execution metadata exceeds the configured limit".into(),
        ));
    }
    // 5. digest.
    let digest = submission_digest(&DigestFields {
        namespace,
        task_name: &task_name,
        encoded_payload: &payload,
        encoded_metadata: &metadata,
        delay_s: req.delay_s,
        expires_at: req.expires_at.as_ref(),
        priority,
        fairness_key: fairness_key.as_deref(),
    });
    Ok(PreparedSubmission {
        // Time-ordered (docs/semantics.md#time-ordered-ids).
        id: crate::ids::new_row_id(),
        namespace: namespace.to_owned(),
        task_name,
        idempotency_key,
        digest,
        payload,
        metadata,
        delay,
        expires_at: req.expires_at.map(|t| t.with_timezone(&Utc)),
        priority,
        fairness_key,
        trace_parent: None,
        quota: None,
        callback: None,
    })
}

/// Trims and checks a namespace (docs/semantics.md#client-operations): 1–255 characters.
pub fn validate_namespace(namespace: &str) -> Result<String, ExecutionError> {
    required_text("namespace", namespace, MAX_NAME_CHARS)
}

/// Parses an execution id given as text (hyphenated or 32 hex digits).
///
/// Errors: `execution id must be a UUID`.
pub fn parse_execution_id(text: &str) -> Result<Uuid, ExecutionError> {
    Uuid::parse_str(text.trim()).map_err(|_| ExecutionError::invalid("execution id must be a UUID"))
}

/// List parameters as a caller gives them (docs/semantics.md#listing-and-cursors).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListQuery {
    /// Optional task-name filter.
    pub task_name: Option<String>,
    /// Optional status filter.
    pub status: Option<ExecutionStatus>,
    /// Page size, 1..=200 (default 50).
    pub limit: u32,
    /// Cursor from a previous page.
    pub cursor: Option<String>,
}

impl Default for ListQuery {
    fn default() -> Self {
        ListQuery {
            task_name: None,
            status: None,
            limit: 50,
            cursor: None,
        }
    }
}

/// Validated list parameters handed to a backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListFilter {
    /// Trimmed task-name filter.
    pub task_name: Option<String>,
    /// Status filter.
    pub status: Option<ExecutionStatus>,
    /// Page size, 1..=200.
    pub limit: u32,
    /// Position after which to continue.
    pub after: Option<Cursor>,
    /// The dashboard's extra filters (docs/semantics.md#listing-and-cursors); empty by default.
    pub search: ListSearch,
    /// Most rows a page examines when `search` has a filter no index holds
    /// ([`ListSearch::windowed`], docs/semantics.md#search-window); [`SEARCH_WINDOW_ROWS`] unless
    /// a test narrows it (read as at least 1).
    pub window: u32,
}

impl ListFilter {
    /// The rows this page may examine when it is a windowed search
    /// (docs/semantics.md#search-window), `None` for an ordinary page.
    pub fn window_rows(&self) -> Option<u32> {
        self.search.windowed().then_some(self.window.max(1))
    }
}

/// Rows a windowed search page examines (docs/semantics.md#search-window): enough for a
/// dashboard page of common values, small enough that a page costs the same at any history.
pub const SEARCH_WINDOW_ROWS: u32 = 1000;

/// Extra list filters (docs/semantics.md#listing-and-cursors): created-at range, idempotency key, one metadata
/// key with a string value, and a case-insensitive substring of the error's `exception_type`.
/// Every given filter must hold. Validated by [`ListSearch::validate`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListSearch {
    /// Only executions created at or after this instant.
    pub created_from: Option<DateTime<Utc>>,
    /// Only executions created before this instant.
    pub created_before: Option<DateTime<Utc>>,
    /// Only the execution holding this idempotency key (exact).
    pub idempotency_key: Option<String>,
    /// Only executions whose top-level metadata key (first) is the string (second).
    pub metadata: Option<(String, String)>,
    /// Only executions whose error's `exception_type` contains this text (any case).
    pub exception_type: Option<String>,
}

impl ListSearch {
    /// Whether no filter is set.
    pub fn is_empty(&self) -> bool {
        *self == ListSearch::default()
    }

    /// Whether a page with these filters is read through a search window
    /// (docs/semantics.md#search-window): a metadata or exception-type filter, which no index
    /// holds, without an idempotency key (a key is looked up, at most one row per task).
    pub fn windowed(&self) -> bool {
        (self.metadata.is_some() || self.exception_type.is_some()) && self.idempotency_key.is_none()
    }

    /// Trims and checks: every text 1–255 characters (the metadata value may be empty), and
    /// `created_from` before `created_before` (`created_from must be before created_before`).
    pub fn validate(&self) -> Result<ListSearch, ExecutionError> {
        for (name, t) in [
            ("created_from", &self.created_from),
            ("created_before", &self.created_before),
        ] {
            if let Some(t) = t {
                check_instant(name, t)?;
            }
        }
        if let (Some(a), Some(b)) = (self.created_from, self.created_before)
            && a >= b
        {
            return Err(ExecutionError::invalid(
                "created_from must be before created_before",
            ));
        }
        let metadata = match &self.metadata {
            None => None,
            Some((k, v)) => {
                let key = required_text("metadata key", k, MAX_NAME_CHARS)?;
                if v.chars().count() > MAX_NAME_CHARS {
                    return Err(ExecutionError::invalid(
                        "metadata value must be at most 255 characters",
                    ));
                }
                check_text("metadata value", v)?;
                Some((key, v.clone()))
            }
        };
        Ok(ListSearch {
            created_from: self.created_from,
            created_before: self.created_before,
            idempotency_key: optional_text(
                "idempotency_key",
                self.idempotency_key.as_deref(),
                MAX_NAME_CHARS,
            )?,
            metadata,
            exception_type: optional_text(
                "exception_type",
                self.exception_type.as_deref(),
                MAX_NAME_CHARS,
            )?,
        })
    }

    /// Whether `e` passes every filter (the reference semantics backends must match).
    pub fn matches(&self, e: &crate::execution::Execution, idempotency_key: Option<&str>) -> bool {
        self.created_from.is_none_or(|t| e.created_at >= t)
            && self.created_before.is_none_or(|t| e.created_at < t)
            && self
                .idempotency_key
                .as_deref()
                .is_none_or(|k| idempotency_key == Some(k))
            && self
                .metadata
                .as_ref()
                .is_none_or(|(k, v)| e.metadata.get(k).and_then(Value::as_str) == Some(v.as_str()))
            && self.exception_type.as_deref().is_none_or(|t| {
                e.error
                    .as_ref()
                    .is_some_and(|o| o.exception_type.to_lowercase().contains(&t.to_lowercase()))
            })
    }
}

impl ListQuery {
    /// Validates the query: `limit must be between 1 and 200`, `cursor must not be empty`,
    /// `invalid execution cursor`, `unknown cursor version`, task-name text rules.
    pub fn validate(&self) -> Result<ListFilter, ExecutionError> {
        let task_name = optional_text("task_name", self.task_name.as_deref(), MAX_NAME_CHARS)?;
        if !(1..=200).contains(&self.limit) {
            return Err(ExecutionError::invalid("limit must be between 1 and 200"));
        }
        let after = match &self.cursor {
            None => None,
            Some(c) if c.is_empty() => {
                return Err(ExecutionError::invalid("cursor must not be empty"));
            }
            Some(c) => Some(Cursor::decode(c)?),
        };
        Ok(ListFilter {
            task_name,
            status: self.status,
            limit: self.limit,
            after,
            search: ListSearch::default(),
            window: SEARCH_WINDOW_ROWS,
        })
    }
}

/// The namespaces a claim serves (docs/semantics.md#fair-claim): one, a list, or every
/// namespace of the task's table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NamespaceScope {
    /// Exactly one namespace (a source's `namespace:`).
    One(String),
    /// These namespaces (a source's `namespaces: [..]`; non-empty, unique).
    Many(Vec<String>),
    /// Every namespace (a source's `namespaces: "*"`).
    All,
}

impl NamespaceScope {
    /// Whether `namespace` is in the scope.
    pub fn contains(&self, namespace: &str) -> bool {
        match self {
            NamespaceScope::One(n) => n == namespace,
            NamespaceScope::Many(list) => list.iter().any(|n| n == namespace),
            NamespaceScope::All => true,
        }
    }

    /// The one namespace of a [`NamespaceScope::One`] scope.
    pub fn single(&self) -> Option<&str> {
        match self {
            NamespaceScope::One(n) => Some(n),
            _ => None,
        }
    }

    /// The listed namespaces (`None` for [`NamespaceScope::All`]).
    pub fn listed(&self) -> Option<Vec<&str>> {
        match self {
            NamespaceScope::One(n) => Some(vec![n.as_str()]),
            NamespaceScope::Many(list) => Some(list.iter().map(String::as_str).collect()),
            NamespaceScope::All => None,
        }
    }

    /// A short label for logs and metrics: the namespace, `a,b,c`, or `*`.
    pub fn label(&self) -> String {
        match self {
            NamespaceScope::One(n) => n.clone(),
            NamespaceScope::Many(list) => list.join(","),
            NamespaceScope::All => "*".to_owned(),
        }
    }

    fn validate(&self) -> Result<NamespaceScope, ExecutionError> {
        match self {
            NamespaceScope::One(n) => Ok(NamespaceScope::One(validate_namespace(n)?)),
            NamespaceScope::Many(list) => {
                let mut out: Vec<String> = Vec::with_capacity(list.len());
                for n in list {
                    let n = validate_namespace(n)?;
                    if out.contains(&n) {
                        return Err(ExecutionError::invalid(format!(
                            "namespaces must be unique (`{n}` appears twice)"
                        )));
                    }
                    out.push(n);
                }
                if out.is_empty() {
                    return Err(ExecutionError::invalid("namespaces must not be empty"));
                }
                Ok(NamespaceScope::Many(out))
            }
            NamespaceScope::All => Ok(NamespaceScope::All),
        }
    }
}

/// A worker's claim (docs/semantics.md#claim-and-maintenance, docs/semantics.md#fair-claim).
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimRequest {
    /// Namespaces to claim from (trimmed).
    pub namespaces: NamespaceScope,
    /// Task names (non-empty, unique).
    pub task_names: Vec<String>,
    /// Maximum number of leases (≥ 1).
    pub limit: u32,
    /// Lease duration in seconds (> 0).
    pub lease_duration_s: f64,
    /// Worker id (trimmed, 1–255).
    pub worker_id: String,
    /// Weights and the per-key running cap of the fair claim.
    pub fair: crate::schedule::FairShare,
    /// The task's fleet-wide running cap (docs/semantics.md#max-running): the claim takes at
    /// most `max_running` minus the task's `running`/`cancel_requested` executions. Needs
    /// exactly one task name; `None` = no cap.
    pub max_running: Option<u32>,
}

impl ClaimRequest {
    /// Checks the argument rules of docs/semantics.md#claim-and-maintenance and returns a trimmed copy.
    pub fn validate(&self) -> Result<ClaimRequest, ExecutionError> {
        let namespaces = self.namespaces.validate()?;
        let mut names: Vec<String> = Vec::with_capacity(self.task_names.len());
        for t in &self.task_names {
            let t = t.trim();
            if t.is_empty() || t.chars().count() > MAX_NAME_CHARS || names.iter().any(|n| n == t) {
                return Err(ExecutionError::invalid(
                    "task_names must be non-empty and unique",
                ));
            }
            names.push(t.to_owned());
        }
        if names.is_empty() {
            return Err(ExecutionError::invalid(
                "task_names must be non-empty and unique",
            ));
        }
        if self.limit < 1 {
            return Err(ExecutionError::invalid("limit must be >= 1"));
        }
        validate_lease_duration(self.lease_duration_s)?;
        let w = self.worker_id.trim();
        if w.is_empty() || self.worker_id.chars().count() > MAX_NAME_CHARS {
            return Err(ExecutionError::invalid(
                "worker_id must be non-empty and <= 255 characters",
            ));
        }
        if let Some((k, v)) = self
            .fair
            .weights
            .iter()
            .find(|(_, v)| !(1..=crate::schedule::MAX_WEIGHT).contains(*v))
        {
            return Err(ExecutionError::invalid(format!(
                "weight of fairness key `{k}` must be from 1 to {} (got {v})",
                crate::schedule::MAX_WEIGHT
            )));
        }
        if self.fair.max_running_per_key == Some(0) {
            return Err(ExecutionError::invalid("max_running_per_key must be >= 1"));
        }
        if let Some(cap) = self.max_running {
            if cap < 1 {
                return Err(ExecutionError::invalid("max_running must be >= 1"));
            }
            if names.len() != 1 {
                return Err(ExecutionError::invalid(
                    "max_running needs a claim of exactly one task name",
                ));
            }
        }
        Ok(ClaimRequest {
            namespaces,
            task_names: names,
            limit: self.limit,
            lease_duration_s: self.lease_duration_s,
            worker_id: w.to_owned(),
            fair: self.fair.clone(),
            max_running: self.max_running,
        })
    }

    /// Whether the claim needs the fair claim's keys table: more than one namespace, weights,
    /// or a per-key cap (a plain one-namespace claim can run on tables without it).
    pub fn needs_fair_keys(&self) -> bool {
        !matches!(self.namespaces, NamespaceScope::One(_))
            || !self.fair.weights.is_empty()
            || self.fair.max_running_per_key.is_some()
    }
}

/// `lease_duration_s must be > 0` (finite).
pub fn validate_lease_duration(lease_duration_s: f64) -> Result<(), ExecutionError> {
    if !(lease_duration_s.is_finite() && lease_duration_s > 0.0) {
        return Err(ExecutionError::invalid("lease_duration_s must be > 0"));
    }
    seconds_to_duration("lease_duration_s", lease_duration_s).map(|_| ())
}
