//! Tenant deployments and the operator's policy ceilings (docs/deployment-policy.md).
//!
//! A deployment binds `(namespace, task)` to a component plus the settings a tenant may choose:
//! [`DeploymentSettings`] (plain data, serialised canonically to JSON by
//! [`DeploymentSettings::to_canonical_json`] for the deployments store). The operator declares,
//! per namespace or as a default, the most a deployment may ask: a [`PolicyCeiling`], gathered
//! with the names of the operator-held secrets in a [`DeploymentPolicy`]. [`check_within`]
//! compares one deployment with one ceiling and returns **every** violation, each naming the
//! limit, the asked value and the ceiling ([`PolicyViolation`]), so the API can answer 422 naming
//! each limit; [`DeploymentPolicy::check`] adds the namespace rules (a token of one namespace
//! cannot deploy into another; a namespace no policy covers cannot deploy at all) and tells an
//! unknown secret from one the namespace may not reference.
//!
//! A tenant's network allow-list must be within the operator's: [`origin_within`] holds when
//! every request an entry lets through is let through by some operator entry ([`origin_covers`]).
//!
//! Secrets: a tenant names an operator-held secret (`{secret: openai}`), never its value; the
//! value stays in the operator's configuration and is injected by the worker. Each secret may
//! be sent only to the origins the operator bound it to.
//!
//! Plain data and pure functions: no I/O, no YAML, no SQL.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::components::MAX_COMPONENT_BYTES;
use crate::network::{HostPattern, OriginPattern};
use crate::retry::RetryPolicy;
use crate::sandbox::SandboxSettings;
use crate::settings::DEFAULT_CONCURRENCY;

/// The manifest's `apiVersion`.
pub const MANIFEST_API_VERSION: &str = "onestep/v1alpha1";
/// The manifest's `kind`.
pub const MANIFEST_KIND: &str = "Deployment";

/// The value of a header the host injects on requests to one allowed origin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum HeaderValue {
    /// A plain value written in the manifest (stored and shown as written: never a credential).
    Literal(String),
    /// The name of an operator-held secret whose value the worker injects; the tenant never
    /// sees or supplies the value.
    Secret(String),
}

/// One header the host sets on every request to `origin` (replacing a guest-set one).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InjectedHeader {
    /// The allowed origin (one of the deployment's `sandbox.network.allow`).
    pub origin: OriginPattern,
    /// The header name (an RFC 9110 token).
    pub name: String,
    /// Its value: literal or a secret's name.
    pub value: HeaderValue,
}

/// What one deployment asks for: the task's settings a tenant may choose. Built from the
/// tenant's manifest with every unset value resolved to its built-in default, so what is
/// checked against the ceiling is exactly what runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeploymentSettings {
    /// The namespace deployed into.
    pub namespace: String,
    /// The task name.
    pub task: String,
    /// Free text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Sandbox limits and the outbound-HTTP allow-list. Never preopens, `env` (host variables),
    /// per-origin rate limits or inline header values: injected headers are in
    /// [`headers`](Self::headers).
    pub sandbox: SandboxSettings,
    /// Headers injected per allowed origin, in manifest order.
    #[serde(default)]
    pub headers: Vec<InjectedHeader>,
    /// `timeout_s`: wall-clock limit of one handler call; `None` = unlimited.
    #[serde(rename = "timeout_s", with = "opt_seconds", default)]
    pub timeout: Option<Duration>,
    /// The retry policy.
    #[serde(default)]
    pub retry: RetryPolicy,
    /// Concurrent executions per worker process (≥ 1).
    pub concurrency: u32,
    /// Free mapping passed to the handler.
    #[serde(default)]
    pub params: serde_json::Map<String, serde_json::Value>,
}

impl DeploymentSettings {
    /// The canonical JSON text (docs/semantics.md#canonical-json): the stored form.
    pub fn to_canonical_json(&self) -> Result<String, serde_json::Error> {
        serde_json::to_value(self).map(|v| crate::canonical::to_canonical_string(&v))
    }

    /// Reads back what [`to_canonical_json`](Self::to_canonical_json) wrote.
    pub fn from_json(text: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(text)
    }

    /// The structural rules of settings that did not come through the manifest parser (the API
    /// also accepts them as JSON): names as the deployments store requires them, the lower
    /// bounds the manifest parser enforces (`concurrency >= 1`, `memory_limit_bytes >= 1 MiB`,
    /// at least one instance, table and memory), the retry policy's constructor rules, header
    /// names as HTTP tokens and a description of at most [`MAX_DESCRIPTION_CHARS`]. The first
    /// broken rule is the error; it names the field. Ceilings are [`DeploymentPolicy::check`]'s.
    pub fn validate(&self) -> Result<(), String> {
        crate::deployments::check_name("namespace", &self.namespace).map_err(|e| e.to_string())?;
        crate::deployments::check_name("task", &self.task).map_err(|e| e.to_string())?;
        // The submit API's task names (as the manifest's `task:`): a task no execution can name
        // would only be a claim loop on every worker.
        crate::text::task_name(&self.task)
            .map_err(|e| e.to_string().replacen("task_name", "task", 1))?;
        if let Some(d) = &self.description
            && d.chars().count() > MAX_DESCRIPTION_CHARS
        {
            return Err(format!(
                "description is {} characters; at most {MAX_DESCRIPTION_CHARS} are allowed",
                d.chars().count()
            ));
        }
        if self.concurrency == 0 {
            return Err("concurrency must be an integer >= 1".into());
        }
        let sb = &self.sandbox;
        if sb.memory_limit_bytes < crate::settings::MIN_MEMORY_LIMIT_BYTES {
            return Err(format!(
                "sandbox.memory_limit_bytes must be an integer >= {} (1 MiB)",
                crate::settings::MIN_MEMORY_LIMIT_BYTES
            ));
        }
        for (key, v) in [
            ("sandbox.max_instances", sb.max_instances),
            ("sandbox.max_tables", sb.max_tables),
            ("sandbox.max_memories", sb.max_memories),
        ] {
            if v == 0 {
                return Err(format!("{key} must be an integer >= 1"));
            }
        }
        validate_sandbox(sb)?;
        self.retry.validate().map_err(|e| format!("retry: {e}"))?;
        for h in &self.headers {
            let token = !h.name.is_empty()
                && h.name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
            if !token {
                return Err(format!(
                    "headers: {:?} is not an HTTP header name (an RFC 9110 token)",
                    crate::text::truncate_utf8(&h.name, 80)
                ));
            }
        }
        Ok(())
    }

    /// The names of the operator-held secrets the deployment references, sorted, unique.
    pub fn secret_names(&self) -> BTreeSet<&str> {
        self.headers
            .iter()
            .filter_map(|h| match &h.value {
                HeaderValue::Secret(name) => Some(name.as_str()),
                HeaderValue::Literal(_) => None,
            })
            .collect()
    }
}

/// The built-in `max_tasks` ceiling: tasks of one namespace with an active version at once.
pub const DEFAULT_MAX_TASKS: u32 = 20;

/// The largest `max_tasks` an operator may write.
pub const MAX_MAX_TASKS: u32 = 10_000;

/// The lower bounds and names the manifest's sandbox and network builders enforce (the same
/// messages, the JSON field names), for settings that did not come through the manifest.
fn validate_sandbox(sb: &SandboxSettings) -> Result<(), String> {
    if sb.fuel == Some(0) {
        return Err("sandbox.fuel must be null (unlimited) or an integer >= 1".into());
    }
    for (key, v, min) in [
        ("sandbox.output_limit_bytes", sb.output_limit_bytes, 1),
        ("sandbox.max_table_elements", sb.max_table_elements, 1),
        (
            "sandbox.log_limit_bytes",
            sb.log_limit_bytes,
            crate::settings::MIN_LOG_BYTES,
        ),
        ("sandbox.max_log_lines", sb.max_log_lines, 1),
        (
            "sandbox.network.max_response_bytes",
            sb.network.max_response_bytes,
            1,
        ),
        (
            "sandbox.network.max_request_bytes",
            sb.network.max_request_bytes,
            1,
        ),
        ("sandbox.network.max_requests", sb.network.max_requests, 1),
        (
            "sandbox.network.max_concurrent_requests",
            sb.network.max_concurrent_requests.into(),
            1,
        ),
    ] {
        if v < min {
            return Err(format!("{key} must be an integer >= {min}"));
        }
    }
    let max_conn = crate::network::MAX_CONNECTIONS_LIMIT;
    if !(1..=max_conn).contains(&sb.network.max_connections) {
        return Err(format!(
            "sandbox.network.max_connections must be an integer from 1 to {max_conn}"
        ));
    }
    for (key, d) in [
        (
            "sandbox.network.connect_timeout",
            sb.network.connect_timeout,
        ),
        (
            "sandbox.network.request_timeout",
            sb.network.request_timeout,
        ),
    ] {
        if d.is_zero() {
            return Err(format!("{key} must be a number of seconds > 0"));
        }
    }
    if let Some(k) = sb
        .env_values
        .keys()
        .find(|k| !crate::settings::is_env_name(k))
    {
        return Err(format!(
            "sandbox.env_values key {:?} must be an environment variable name \
             ([A-Za-z_][A-Za-z0-9_]*)",
            crate::text::truncate_utf8(k, 80)
        ));
    }
    let mut seen = BTreeSet::new();
    for (i, a) in sb.network.allow.iter().enumerate() {
        if !seen.insert(a.origin.to_string()) {
            return Err(format!(
                "sandbox.network.allow[{i}]: duplicate origin {}",
                a.origin
            ));
        }
    }
    Ok(())
}

/// Longest `description` of a deployment (characters).
pub const MAX_DESCRIPTION_CHARS: usize = 1000;

/// The most a deployment of one namespace may ask (`deployments.policy.default` or
/// `deployments.policy.namespaces.<ns>` in the operator's configuration). [`Default`] is the
/// built-in default of every setting: an operator who grants nothing lets tenants use only the
/// defaults (no network, no secrets, one at a time, no retries, components up to the store's
/// cap).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicyCeiling {
    /// Largest `sandbox.memory_limit_bytes`.
    pub memory_limit_bytes: u64,
    /// Largest `sandbox.fuel`; `None` = unlimited fuel may be asked.
    pub fuel: Option<u64>,
    /// Largest `sandbox.max_instances`.
    pub max_instances: u32,
    /// Largest `sandbox.max_tables`.
    pub max_tables: u32,
    /// Largest `sandbox.max_memories`.
    pub max_memories: u32,
    /// Largest `sandbox.max_table_elements`.
    pub max_table_elements: u64,
    /// Largest `sandbox.output_limit_bytes`.
    pub output_limit_bytes: u64,
    /// Largest `sandbox.log_limit_bytes`.
    pub log_limit_bytes: u64,
    /// Largest `sandbox.max_log_lines`.
    pub max_log_lines: u64,
    /// Largest `sandbox.network.max_response_bytes`.
    pub max_response_bytes: u64,
    /// Largest `sandbox.network.max_request_bytes`.
    pub max_request_bytes: u64,
    /// Largest `sandbox.network.max_requests`.
    pub max_requests: u64,
    /// Largest `sandbox.network.max_concurrent_requests`.
    pub max_concurrent_requests: u32,
    /// Largest `sandbox.network.max_connections`.
    pub max_connections: u32,
    /// Largest `timeout_s`; `None` = unlimited may be asked.
    #[serde(rename = "timeout_s", with = "opt_seconds")]
    pub timeout: Option<Duration>,
    /// Largest `concurrency`.
    pub concurrency: u32,
    /// Largest `max_attempts` of any branch of `retry` (1 = no retries).
    pub max_attempts: u32,
    /// Largest component, in bytes (at most [`MAX_COMPONENT_BYTES`]).
    pub max_component_bytes: u64,
    /// Most tasks of the namespace with an active version at once (every following worker runs
    /// a claim loop and keeps a build for each); a deploy or an activation that would make one
    /// more task active is refused by the store, under its lock
    /// ([`crate::deployments::DeploymentError::TooManyTasks`]).
    pub max_tasks: u32,
    /// Origins the deployment's allow-list must be within (empty: no network).
    pub allow: Vec<OriginPattern>,
    /// Operator-held secrets the namespace may reference, each with the origins it may be sent
    /// to.
    pub secrets: BTreeMap<String, Vec<OriginPattern>>,
}

impl Default for PolicyCeiling {
    fn default() -> Self {
        let s = SandboxSettings::default();
        PolicyCeiling {
            memory_limit_bytes: s.memory_limit_bytes,
            fuel: s.fuel,
            max_instances: s.max_instances,
            max_tables: s.max_tables,
            max_memories: s.max_memories,
            max_table_elements: s.max_table_elements,
            output_limit_bytes: s.output_limit_bytes,
            log_limit_bytes: s.log_limit_bytes,
            max_log_lines: s.max_log_lines,
            max_response_bytes: s.network.max_response_bytes,
            max_request_bytes: s.network.max_request_bytes,
            max_requests: s.network.max_requests,
            max_concurrent_requests: s.network.max_concurrent_requests,
            max_connections: s.network.max_connections,
            timeout: None,
            concurrency: DEFAULT_CONCURRENCY,
            max_attempts: 1,
            max_component_bytes: MAX_COMPONENT_BYTES as u64,
            max_tasks: DEFAULT_MAX_TASKS,
            allow: Vec::new(),
            secrets: BTreeMap::new(),
        }
    }
}

/// The operator's whole deployment policy (`deployments:` of the configuration, without the
/// secret values).
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct DeploymentPolicy {
    /// `policy.default`: the ceiling of every namespace without its own entry; `None`: such
    /// namespaces cannot deploy.
    pub default: Option<PolicyCeiling>,
    /// `policy.namespaces`: per-namespace ceilings (each replaces the default entirely).
    pub namespaces: BTreeMap<String, PolicyCeiling>,
    /// The names of every operator-held secret (values stay in the configuration).
    pub secret_names: BTreeSet<String>,
}

impl DeploymentPolicy {
    /// The ceiling that applies to `namespace`: its own entry, else the default; `None` when
    /// neither exists (deployments into it are refused).
    pub fn ceiling_for(&self, namespace: &str) -> Option<&PolicyCeiling> {
        self.namespaces.get(namespace).or(self.default.as_ref())
    }

    /// Every check of a deploy by a token of `token_namespace`: the namespace matches, a policy
    /// covers it, and the settings are within its ceiling ([`check_within`]). A secret outside
    /// the namespace's list is refused the same way whether or not the operator holds it for
    /// another namespace, so a tenant cannot enumerate other tenants' secret names.
    pub fn check(
        &self,
        token_namespace: &str,
        settings: &DeploymentSettings,
        component_size: u64,
    ) -> Result<(), Vec<PolicyViolation>> {
        check_namespace(token_namespace, &settings.namespace).map_err(|v| vec![v])?;
        let Some(ceiling) = self.ceiling_for(&settings.namespace) else {
            return Err(vec![PolicyViolation {
                limit: "namespace".into(),
                kind: ViolationKind::NoPolicy,
                asked: format!("{:?}", settings.namespace),
                rule: "which no deployment policy covers (no entry in \
                       deployments.policy.namespaces and no deployments.policy.default): \
                       deployments into it are refused"
                    .into(),
            }]);
        };
        check(settings, ceiling, component_size)
    }
}

/// What kind of rule a [`PolicyViolation`] broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ViolationKind {
    /// A limit above the namespace's ceiling.
    AboveCeiling,
    /// An allow-list entry outside the operator's origins.
    OriginOutside,
    /// A secret the namespace may not reference (whether or not the operator holds it for
    /// another namespace: the two are not told apart, so secret names do not leak across
    /// namespaces).
    SecretNotAllowed,
    /// A secret sent to an origin it is not bound to.
    SecretOrigin,
    /// A setting only the operator may set (preopens, host environment, rate limits, …).
    NotSettable,
    /// A namespace no policy covers.
    NoPolicy,
    /// A token of one namespace deploying into another.
    NamespaceMismatch,
}

/// One broken rule: `<limit>: asked <asked>, <rule>`, e.g. `sandbox.memory_limit_bytes: asked
/// 536870912, the ceiling for namespace "team-a" is 268435456`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PolicyViolation {
    /// The setting's path in the manifest (`sandbox.memory_limit_bytes`,
    /// `sandbox.network.allow[1]`, …).
    pub limit: String,
    /// The kind of rule.
    pub kind: ViolationKind,
    /// What the deployment asked, as text.
    pub asked: String,
    /// The rule and the ceiling (`the ceiling for namespace "team-a" is 268435456`).
    pub rule: String,
}

impl fmt::Display for PolicyViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: asked {}, {}", self.limit, self.asked, self.rule)
    }
}

/// A token of `token_namespace` may deploy only into that namespace.
pub fn check_namespace(token_namespace: &str, asked: &str) -> Result<(), PolicyViolation> {
    if token_namespace == asked {
        return Ok(());
    }
    Err(PolicyViolation {
        limit: "namespace".into(),
        kind: ViolationKind::NamespaceMismatch,
        asked: format!("{asked:?}"),
        rule: format!("the token may deploy only into its own namespace {token_namespace:?}"),
    })
}

/// Whether `settings` stay within `ceiling` with a component of `component_size` bytes; every
/// violation otherwise. A secret outside `ceiling.secrets` is reported as one the namespace may
/// not reference.
pub fn check_within(
    settings: &DeploymentSettings,
    ceiling: &PolicyCeiling,
    component_size: u64,
) -> Result<(), Vec<PolicyViolation>> {
    check(settings, ceiling, component_size)
}

/// Whether operator entry `op` lets through every request `tenant` lets through: same scheme
/// and port, and `tenant`'s host set within `op`'s (a name within an equal name or a one-label
/// wildcard over it; a wildcard only within an equal wildcard; an IP only within the same IP).
pub fn origin_covers(op: &OriginPattern, tenant: &OriginPattern) -> bool {
    if op.scheme != tenant.scheme || op.port != tenant.port {
        return false;
    }
    match (&op.host, &tenant.host) {
        (HostPattern::Name(a), HostPattern::Name(b)) => a == b,
        (HostPattern::Wildcard(suffix), HostPattern::Name(name)) => name
            .strip_suffix(suffix.as_str())
            .and_then(|label| label.strip_suffix('.'))
            .is_some_and(|label| !label.is_empty() && !label.contains('.')),
        (HostPattern::Wildcard(a), HostPattern::Wildcard(b)) => a == b,
        (HostPattern::Ip(a), HostPattern::Ip(b)) => a == b,
        _ => false,
    }
}

/// Whether every request `tenant` lets through is let through by some entry of `operator`.
/// (A wildcard's hosts are infinitely many, so no set of names covers it: only a wildcard
/// does.)
pub fn origin_within(tenant: &OriginPattern, operator: &[OriginPattern]) -> bool {
    operator.iter().any(|op| origin_covers(op, tenant))
}

fn list(origins: &[OriginPattern]) -> String {
    if origins.is_empty() {
        return "none".into();
    }
    origins
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

fn names<'a>(names: impl Iterator<Item = &'a String>) -> String {
    let v: Vec<&str> = names.map(String::as_str).collect();
    if v.is_empty() {
        "none".into()
    } else {
        v.join(", ")
    }
}

/// The largest `max_attempts` over every branch of a retry policy (1 for `no_retry`).
pub fn max_attempts(retry: &RetryPolicy) -> u32 {
    match retry {
        RetryPolicy::NoRetry => 1,
        RetryPolicy::MaxAttempts { max_attempts, .. }
        | RetryPolicy::ExponentialBackoff { max_attempts, .. } => *max_attempts,
        RetryPolicy::ByFailureKind {
            default,
            error,
            timeout,
            cancelled,
        } => [default, error, timeout, cancelled]
            .into_iter()
            .flatten()
            .map(|p| max_attempts(p))
            .max()
            .unwrap_or(1),
    }
}

fn secs(d: Option<Duration>) -> String {
    match d {
        None => "unlimited".into(),
        Some(d) => format!("{}s", d.as_secs_f64()),
    }
}

fn check(
    s: &DeploymentSettings,
    c: &PolicyCeiling,
    component_size: u64,
) -> Result<(), Vec<PolicyViolation>> {
    let ns = &s.namespace;
    let mut out = Vec::new();
    let mut above = |limit: &str, asked: String, ceiling: String| {
        out.push(PolicyViolation {
            limit: limit.into(),
            kind: ViolationKind::AboveCeiling,
            asked,
            rule: format!("the ceiling for namespace {ns:?} is {ceiling}"),
        });
    };
    let mut num = |limit: &str, asked: u64, ceiling: u64| {
        if asked > ceiling {
            above(limit, asked.to_string(), ceiling.to_string());
        }
    };
    let sb = &s.sandbox;
    let net = &sb.network;
    num("component", component_size, c.max_component_bytes);
    num(
        "sandbox.memory_limit_bytes",
        sb.memory_limit_bytes,
        c.memory_limit_bytes,
    );
    num(
        "sandbox.max_instances",
        sb.max_instances.into(),
        c.max_instances.into(),
    );
    num(
        "sandbox.max_tables",
        sb.max_tables.into(),
        c.max_tables.into(),
    );
    num(
        "sandbox.max_memories",
        sb.max_memories.into(),
        c.max_memories.into(),
    );
    num(
        "sandbox.max_table_elements",
        sb.max_table_elements,
        c.max_table_elements,
    );
    num(
        "sandbox.output_limit_bytes",
        sb.output_limit_bytes,
        c.output_limit_bytes,
    );
    num(
        "sandbox.log_limit_bytes",
        sb.log_limit_bytes,
        c.log_limit_bytes,
    );
    num("sandbox.max_log_lines", sb.max_log_lines, c.max_log_lines);
    num(
        "sandbox.network.max_response_bytes",
        net.max_response_bytes,
        c.max_response_bytes,
    );
    num(
        "sandbox.network.max_request_bytes",
        net.max_request_bytes,
        c.max_request_bytes,
    );
    num(
        "sandbox.network.max_requests",
        net.max_requests,
        c.max_requests,
    );
    num(
        "sandbox.network.max_concurrent_requests",
        net.max_concurrent_requests.into(),
        c.max_concurrent_requests.into(),
    );
    num(
        "sandbox.network.max_connections",
        net.max_connections.into(),
        c.max_connections.into(),
    );
    num("concurrency", s.concurrency.into(), c.concurrency.into());
    num(
        "retry.max_attempts",
        max_attempts(&s.retry).into(),
        c.max_attempts.into(),
    );
    match (sb.fuel, c.fuel) {
        (_, None) => {}
        (None, Some(max)) => above("sandbox.fuel", "unlimited".into(), max.to_string()),
        (Some(asked), Some(max)) if asked > max => {
            above("sandbox.fuel", asked.to_string(), max.to_string())
        }
        _ => {}
    }
    match (s.timeout, c.timeout) {
        (_, None) => {}
        (None, Some(max)) => above("timeout_s", secs(None), secs(Some(max))),
        (Some(asked), Some(max)) if asked > max => {
            above("timeout_s", secs(Some(asked)), secs(Some(max)))
        }
        _ => {}
    }

    // Settings only the operator may set (a manifest cannot express them; JSON could).
    let d = SandboxSettings::default();
    let mut not_settable = |limit: &str, asked: String, what: &str| {
        out.push(PolicyViolation {
            limit: limit.into(),
            kind: ViolationKind::NotSettable,
            asked,
            rule: format!("{what} is set only by the operator, never by a deployment"),
        });
    };
    if !sb.preopens.is_empty() {
        not_settable(
            "sandbox.preopens",
            format!("{} host directories", sb.preopens.len()),
            "a host directory",
        );
    }
    if !sb.env.is_empty() {
        not_settable(
            "sandbox.env",
            sb.env.join(", "),
            "passing the host's environment variables",
        );
    }
    for (key, asked, default) in [
        (
            "sandbox.max_open_handles",
            u64::from(sb.max_open_handles),
            u64::from(d.max_open_handles),
        ),
        (
            "sandbox.max_log_message_bytes",
            sb.max_log_message_bytes,
            d.max_log_message_bytes,
        ),
        (
            "sandbox.log_rate_bytes_per_minute",
            sb.log_rate_bytes_per_minute,
            d.log_rate_bytes_per_minute,
        ),
        (
            "sandbox.http_fields_limit_bytes",
            sb.http_fields_limit_bytes,
            d.http_fields_limit_bytes,
        ),
        (
            "sandbox.max_http_handles",
            u64::from(sb.max_http_handles),
            u64::from(d.max_http_handles),
        ),
        (
            "sandbox.cancel_grace_ms",
            u64::try_from(sb.cancel_grace.as_millis()).unwrap_or(u64::MAX),
            u64::try_from(d.cancel_grace.as_millis()).unwrap_or(u64::MAX),
        ),
    ] {
        if asked != default {
            not_settable(
                key,
                asked.to_string(),
                "this limit (other than its default)",
            );
        }
    }
    for (i, a) in net.allow.iter().enumerate() {
        if a.rate_limit.is_some() {
            not_settable(
                &format!("sandbox.network.rate_limits[{:?}]", a.origin.to_string()),
                "a rate limit".into(),
                "a fleet-wide outbound rate limit (its bucket is shared by every task)",
            );
        }
        if !a.headers.is_empty() {
            not_settable(
                &format!("sandbox.network.allow[{i}].headers"),
                "inline header values".into(),
                "a header outside `headers` (use literal or {secret: NAME} entries)",
            );
        }
    }

    // Origins.
    for (i, a) in net.allow.iter().enumerate() {
        if !origin_within(&a.origin, &c.allow) {
            out.push(PolicyViolation {
                limit: format!("sandbox.network.allow[{i}]"),
                kind: ViolationKind::OriginOutside,
                asked: a.origin.to_string(),
                rule: format!(
                    "which is outside the origins the operator allows namespace {ns:?} ({})",
                    list(&c.allow)
                ),
            });
        }
    }

    // Headers and secrets.
    for h in &s.headers {
        let limit = format!(
            "sandbox.network.headers[{:?}].{}",
            h.origin.to_string(),
            h.name
        );
        if !net.allow.iter().any(|a| a.origin == h.origin) {
            out.push(PolicyViolation {
                limit: limit.clone(),
                kind: ViolationKind::OriginOutside,
                asked: format!("a header for {}", h.origin),
                rule: "which is not one of the deployment's sandbox.network.allow".into(),
            });
        }
        let HeaderValue::Secret(name) = &h.value else {
            continue;
        };
        match c.secrets.get(name) {
            // Held for another namespace or not held at all: the same answer.
            None => out.push(PolicyViolation {
                limit,
                kind: ViolationKind::SecretNotAllowed,
                asked: format!("secret {name:?}"),
                rule: format!(
                    "which namespace {ns:?} may not reference (it may reference: {})",
                    names(c.secrets.keys())
                ),
            }),
            Some(bound) if !origin_within(&h.origin, bound) => out.push(PolicyViolation {
                limit,
                kind: ViolationKind::SecretOrigin,
                asked: format!("secret {name:?} for {}", h.origin),
                rule: format!(
                    "but the operator binds secret {name:?} to {} only",
                    list(bound)
                ),
            }),
            Some(_) => {}
        }
    }
    if out.is_empty() { Ok(()) } else { Err(out) }
}

/// An optional [`Duration`] as (fractional) seconds, `null` for `None`.
mod opt_seconds {
    use super::*;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            None => s.serialize_none(),
            Some(d) => s.serialize_f64(d.as_secs_f64()),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        match Option::<f64>::deserialize(d)? {
            None => Ok(None),
            Some(secs) if secs > 0.0 => Duration::try_from_secs_f64(secs)
                .map(Some)
                .map_err(serde::de::Error::custom),
            Some(_) => Err(serde::de::Error::custom("timeout_s must be > 0")),
        }
    }
}

#[cfg(test)]
#[path = "deploy_policy_tests.rs"]
mod tests;
