//! Resources (docs/configuration.md#document-shape, docs/configuration.md#resources, docs/semantics.md#worker-settings, docs/configuration.md#checks-in-both-modes): collection over the four sections, type
//! normalisation, `mysql`/`postgres` connectors and `mysql_execution_source`/
//! `postgres_execution_source` sources.

use onestep_core::store::options as store_defaults;
use std::collections::BTreeMap;
use std::time::Duration;

use onestep_core::request::NamespaceScope;
use onestep_core::schedule::FairShare;
use onestep_core::settings::{
    DEFAULT_BATCH_SIZE, DEFAULT_HEARTBEAT_INTERVAL, DEFAULT_LEASE_DURATION, DEFAULT_POLL_INTERVAL,
    DEFAULT_WORKER_ID, cancel_poll_fits_heartbeat, default_cancel_poll_interval,
    heartbeat_fits_lease,
};
use onestep_core::text::MAX_NAME_CHARS;

use crate::error::ConfigError;
use crate::fields::{
    BadSeconds, integer, join, non_empty_str, number, positive_seconds, scalar_text,
};
use crate::model::{
    DatabaseKind, DeployedConfig, EngineOptions, ExecutionSourceConfig, MysqlConnectorConfig,
    Secret,
};
use crate::node::Node;

pub use super::source_values::{auto_create, limits, positive, table_name};

/// The sections that hold resources; they share one name space.
pub const RESOURCE_SECTIONS: [&str; 4] = ["resources", "connectors", "sources", "sinks"];

/// Default executions table.
pub const DEFAULT_TABLE: &str = "onestep_executions";
/// Default attempts table.
pub const DEFAULT_ATTEMPTS_TABLE: &str = "onestep_execution_attempts";

/// A recognised resource type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceKind {
    /// `mysql` connector.
    Mysql,
    /// `mysql_execution_source`.
    MysqlSource,
    /// `postgres` connector.
    Postgres,
    /// `postgres_execution_source`.
    PostgresSource,
    /// `sqlite` connector (docs/sqlite.md).
    Sqlite,
    /// `sqlite_execution_source`.
    SqliteSource,
}

impl ResourceKind {
    /// Parses a normalised type name.
    pub fn from_type(t: &str) -> Option<Self> {
        match normalise_type(t).as_str() {
            "mysql" => Some(ResourceKind::Mysql),
            "mysql_execution_source" => Some(ResourceKind::MysqlSource),
            "postgres" => Some(ResourceKind::Postgres),
            "postgres_execution_source" => Some(ResourceKind::PostgresSource),
            "sqlite" => Some(ResourceKind::Sqlite),
            "sqlite_execution_source" => Some(ResourceKind::SqliteSource),
            _ => None,
        }
    }

    /// The display type used in summaries (`MySQLConnector`, `MySQLExecutionSource`, …).
    pub fn display(self) -> &'static str {
        if self.is_connector() {
            self.database().connector_display()
        } else {
            self.database().source_display()
        }
    }

    /// The strict allow-list of the type (docs/configuration.md#resources).
    pub fn allowed_fields(self) -> &'static [&'static str] {
        match self {
            ResourceKind::Mysql | ResourceKind::Postgres | ResourceKind::Sqlite => {
                &["type", "dsn", "engine_options"]
            }
            ResourceKind::MysqlSource
            | ResourceKind::PostgresSource
            | ResourceKind::SqliteSource => &SOURCE_FIELDS,
        }
    }

    /// The database the resource talks to.
    pub fn database(self) -> DatabaseKind {
        match self {
            ResourceKind::Mysql | ResourceKind::MysqlSource => DatabaseKind::Mysql,
            ResourceKind::Postgres | ResourceKind::PostgresSource => DatabaseKind::Postgres,
            ResourceKind::Sqlite | ResourceKind::SqliteSource => DatabaseKind::Sqlite,
        }
    }

    /// True for the connector types.
    pub fn is_connector(self) -> bool {
        matches!(
            self,
            ResourceKind::Mysql | ResourceKind::Postgres | ResourceKind::Sqlite
        )
    }

    /// True for the source types.
    pub fn is_source(self) -> bool {
        matches!(
            self,
            ResourceKind::MysqlSource | ResourceKind::PostgresSource | ResourceKind::SqliteSource
        )
    }
}

const SOURCE_FIELDS: [&str; 21] = [
    "type",
    "deployed",
    "connector",
    "namespace",
    "namespaces",
    "weights",
    "max_running_per_key",
    "task_names",
    "table",
    "attempts_table",
    "batch_size",
    "poll_interval_s",
    "lease_duration_s",
    "heartbeat_interval_s",
    "cancel_poll_interval_s",
    "worker_id",
    "auto_create",
    "max_payload_bytes",
    "max_metadata_bytes",
    "max_result_bytes",
    "reclaim_batch_size",
];

/// Type normalisation: trimmed, lower-cased, `-` and `.` become `_`.
pub fn normalise_type(t: &str) -> String {
    t.trim().to_ascii_lowercase().replace(['-', '.'], "_")
}

/// One resource entry found in a section.
#[derive(Debug, Clone)]
pub struct ResourceEntry<'a> {
    /// `resources`, `connectors`, `sources` or `sinks`.
    pub section: &'static str,
    /// The resource name.
    pub name: String,
    /// Its mapping.
    pub node: &'a Node,
    /// Its type.
    pub kind: ResourceKind,
}

impl ResourceEntry<'_> {
    /// `<section>.<name>`.
    pub fn path(&self) -> String {
        join(self.section, &self.name)
    }
}

/// Collects the resources of all sections (docs/configuration.md#document-shape): each section a mapping, each entry a
/// mapping with a non-empty string `type` of a known type; a name defined twice must have
/// identical specs.
pub fn collect(root: &Node) -> Result<BTreeMap<String, ResourceEntry<'_>>, ConfigError> {
    let mut out: BTreeMap<String, ResourceEntry<'_>> = BTreeMap::new();
    for section in RESOURCE_SECTIONS {
        let Some(sec) = root.get_set(section) else {
            continue;
        };
        let Some(entries) = sec.entries() else {
            return Err(ConfigError::bare(
                sec,
                format!("{section} must be a mapping"),
            ));
        };
        for (name, node) in entries {
            let path = join(section, name);
            if !node.is_map() {
                return Err(ConfigError::bare(node, format!("{path} must be a mapping")));
            }
            let Some(t) = node.get("type").and_then(non_empty_str) else {
                return Err(ConfigError::at(
                    node,
                    &path,
                    "'type' must be a non-empty string",
                ));
            };
            let Some(kind) = ResourceKind::from_type(t) else {
                return Err(ConfigError::bare(
                    node,
                    format!("unsupported resource type '{}' for {path}", t.trim()),
                ));
            };
            if let Some(prev) = out.get(name) {
                if prev.node != node {
                    return Err(ConfigError::bare(
                        node,
                        format!(
                            "resource '{name}' is defined multiple times with different configs"
                        ),
                    ));
                }
                continue;
            }
            out.insert(
                name.clone(),
                ResourceEntry {
                    section,
                    name: name.clone(),
                    node,
                    kind,
                },
            );
        }
    }
    Ok(out)
}

/// Builds a `mysql` or `postgres` connector (docs/configuration.md#resources,
/// docs/configuration.md#checks-in-both-modes). Without `require_dsn` a missing or empty `dsn`
/// is an empty one (`onestep task run` opens no database).
pub fn build_connector(
    e: &ResourceEntry<'_>,
    require_dsn: bool,
    base_dir: &std::path::Path,
) -> Result<MysqlConnectorConfig, ConfigError> {
    let path = e.path();
    let dsn = match e.node.get("dsn").and_then(non_empty_str) {
        Some(dsn) => dsn,
        None if !require_dsn && e.node.get("dsn").is_none_or(|n| n.as_str().is_some()) => "",
        None => {
            return Err(ConfigError::at(
                e.node,
                &path,
                "'dsn' must be a non-empty string",
            ));
        }
    };
    let mut engine_options = EngineOptions::default();
    if let Some(opts) = e.node.get_set("engine_options") {
        let opath = join(&path, "engine_options");
        if !opts.is_map() {
            return Err(ConfigError::at(
                opts,
                &path,
                "engine_options must be a mapping",
            ));
        }
        crate::fields::check_allowed(opts, &opath, &["max_connections", "min_connections"])?;
        let read = |key: &str, min: i64| -> Result<Option<u32>, ConfigError> {
            match opts.get_set(key) {
                None => Ok(None),
                Some(n) => match integer(n).and_then(|i| u32::try_from(i).ok()) {
                    Some(v) if i64::from(v) >= min => Ok(Some(v)),
                    _ => Err(ConfigError::at(
                        n,
                        &opath,
                        format!("{key} must be an integer >= {min}"),
                    )),
                },
            }
        };
        engine_options.max_connections = read("max_connections", 1)?;
        engine_options.min_connections = read("min_connections", 0)?;
        if let (Some(min), Some(max)) = (
            engine_options.min_connections,
            engine_options.max_connections,
        ) && min > max
        {
            return Err(ConfigError::at(
                opts,
                &opath,
                "min_connections must be <= max_connections",
            ));
        }
    }
    Ok(MysqlConnectorConfig {
        name: e.name.clone(),
        kind: e.kind.database(),
        dsn: Secret::new(sqlite_dsn_beside(e.kind.database(), dsn.trim(), base_dir)),
        engine_options,
    })
}

/// A `sqlite://` DSN whose path is relative is made relative to the configuration file's
/// directory, like every other relative path in the file (docs/sqlite.md#dsn); the directory is
/// percent-encoded, since the backend percent-decodes the path. Other DSNs are returned as given.
fn sqlite_dsn_beside(kind: DatabaseKind, dsn: &str, base_dir: &std::path::Path) -> String {
    const PATH: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS
        .add(b' ')
        .add(b'%')
        .add(b'?')
        .add(b'#');
    let Some(rest) = dsn.strip_prefix("sqlite://") else {
        return dsn.to_owned();
    };
    if kind != DatabaseKind::Sqlite || rest.starts_with('/') || base_dir.as_os_str().is_empty() {
        return dsn.to_owned();
    }
    let rest = rest.strip_prefix("./").unwrap_or(rest);
    let dir = base_dir.to_string_lossy();
    let dir = percent_encoding::utf8_percent_encode(dir.trim_end_matches('/'), PATH);
    format!("sqlite://{dir}/{rest}")
}

/// The source options (docs/semantics.md#worker-settings), validated in the reference's order.
#[derive(Debug, Clone, PartialEq)]
pub struct SourceOptions {
    /// Trimmed namespace (`namespace:`), or the label of `namespaces:` (`a,b` or `*`).
    pub namespace: String,
    /// The namespaces the source claims from (docs/semantics.md#fair-claim).
    pub scope: NamespaceScope,
    /// `weights:` and `max_running_per_key:` (docs/semantics.md#fair-claim).
    pub fair: FairShare,
    /// The one task name.
    pub task_name: String,
    /// `batch_size`.
    pub batch_size: u32,
    /// `poll_interval_s`.
    pub poll_interval: Duration,
    /// `lease_duration_s`.
    pub lease_duration: Duration,
    /// `heartbeat_interval_s`.
    pub heartbeat_interval: Duration,
    /// `cancel_poll_interval_s` (default: 1 s, or the heartbeat interval when shorter).
    pub cancel_poll_interval: Duration,
    /// Trimmed worker id.
    pub worker_id: String,
}

/// `namespaces: "*"` or a non-empty sequence of unique namespaces (docs/semantics.md#fair-claim).
fn namespaces_scope(list: &Node, prefix: &str) -> Result<NamespaceScope, (Node, String)> {
    let bad = |n: &Node, what: &str| Err((n.clone(), format!("{prefix}namespaces {what}")));
    if let Some(text) = list.as_str() {
        if text.trim() == "*" {
            return Ok(NamespaceScope::All);
        }
        return bad(
            list,
            "must be \"*\" (every namespace) or a sequence of namespaces",
        );
    }
    let Some(items) = list.items() else {
        return bad(
            list,
            "must be \"*\" (every namespace) or a sequence of namespaces",
        );
    };
    let mut out: Vec<String> = Vec::with_capacity(items.len());
    for item in items {
        match item.as_str().map(str::trim) {
            Some(s) if !s.is_empty() && s.chars().count() <= MAX_NAME_CHARS => {
                if out.iter().any(|o| o == s) {
                    return bad(item, &format!("must be unique (`{s}` appears twice)"));
                }
                out.push(s.to_owned());
            }
            _ => return bad(item, "must be non-empty strings <= 255 characters"),
        }
    }
    if out.is_empty() {
        return bad(list, "must not be empty");
    }
    Ok(NamespaceScope::Many(out))
}

/// `weights: {key: 1..=1000}` and `max_running_per_key: >= 1` (docs/semantics.md#fair-claim).
fn fair_share(node: &Node, prefix: &str) -> Result<FairShare, (Node, String)> {
    let mut fair = FairShare::default();
    if let Some(w) = node.get_set("weights") {
        let Some(entries) = w.entries() else {
            return Err((
                w.clone(),
                format!("{prefix}weights must be a mapping of fairness key to weight"),
            ));
        };
        for (key, value) in entries {
            let key = onestep_core::schedule::fairness_key(key)
                .map_err(|e| (value.clone(), format!("{prefix}weights: {e}")))?;
            let max = onestep_core::schedule::MAX_WEIGHT;
            match integer(value).and_then(|i| u32::try_from(i).ok()) {
                Some(v) if (1..=max).contains(&v) => {
                    fair.weights.insert(key, v);
                }
                _ => {
                    return Err((
                        value.clone(),
                        format!(
                            "{prefix}weights.{key} must be an integer from 1 to {max} (got {})",
                            scalar_text(value)
                        ),
                    ));
                }
            }
        }
    }
    if let Some(n) = node.get_set("max_running_per_key") {
        match integer(n).and_then(|i| u32::try_from(i).ok()) {
            Some(v) if v >= 1 => fair.max_running_per_key = Some(v),
            _ => {
                return Err((
                    n.clone(),
                    format!(
                        "{prefix}max_running_per_key must be an integer >= 1 (got {})",
                        scalar_text(n)
                    ),
                ));
            }
        }
    }
    Ok(fair)
}

/// Applies the source option rules (docs/semantics.md#worker-settings) to a source mapping. `prefix` is `""` at build time and
/// `"<section>.<name>."` in strict mode (docs/configuration.md#strict-validation step 6), where it is also applied to
/// `lease_duration_s` inside the heartbeat message. Returns the failing node and message.
pub fn source_options(node: &Node, prefix: &str) -> Result<SourceOptions, (Node, String)> {
    let err = |n: &Node, msg: String| Err((n.clone(), msg));
    // namespace / namespaces (exactly one of the two)
    let scope = match node.get("namespaces") {
        Some(list) => {
            if node.get("namespace").is_some() {
                return err(
                    list,
                    format!(
                        "{prefix}namespace and namespaces are exclusive: give exactly one of them"
                    ),
                );
            }
            namespaces_scope(list, prefix)?
        }
        None => {
            let ns_node = node.get("namespace").unwrap_or(node);
            let namespace = ns_node.as_str().map(str::trim).unwrap_or("");
            if namespace.is_empty() || namespace.chars().count() > MAX_NAME_CHARS {
                return err(
                    ns_node,
                    format!("{prefix}namespace must be non-empty and <= 255 characters"),
                );
            }
            NamespaceScope::One(namespace.to_owned())
        }
    };
    let namespace = scope.label();
    let fair = fair_share(node, prefix)?;
    // task_names, or `deployed:` (the source serves the deployed tasks of its namespaces)
    if let Some(d) = node.get_set("deployed") {
        if let Some(tn) = node.get("task_names") {
            return err(
                tn,
                format!(
                    "{prefix}task_names and deployed are exclusive: a source serves the tasks \
                     it names or the deployed tasks of its namespaces"
                ),
            );
        }
        deployed_options(d, prefix)?;
    }
    let deployed = node.get_set("deployed").is_some();
    let tn_node = node.get("task_names").unwrap_or(node);
    let items = match tn_node.items() {
        Some(items) => items,
        None if deployed => &[],
        None => {
            return err(
                tn_node,
                format!("{prefix}task_names must be a sequence of strings"),
            );
        }
    };
    let mut names = Vec::new();
    for item in items {
        match item.as_str().map(str::trim) {
            Some(s) if !s.is_empty() && s.chars().count() <= MAX_NAME_CHARS => {
                names.push(s.to_owned())
            }
            _ => {
                return err(
                    item,
                    format!("{prefix}task_names must be non-empty strings <= 255 characters"),
                );
            }
        }
    }
    if deployed {
        names.push(String::new());
    } else if names.len() != 1 {
        return err(
            tn_node,
            format!("{prefix}task_names must contain exactly one task name"),
        );
    }
    // batch_size
    let batch_size = match node.get_set("batch_size") {
        None => DEFAULT_BATCH_SIZE,
        Some(n) => match integer(n).and_then(|i| u32::try_from(i).ok()) {
            Some(v) if v >= 1 => v,
            _ => return err(n, format!("{prefix}batch_size must be >= 1")),
        },
    };
    // the four finiteness checks; absent keys take the defaults
    let mut seconds = [None; 4];
    let keys = [
        "poll_interval_s",
        "lease_duration_s",
        "heartbeat_interval_s",
        "cancel_poll_interval_s",
    ];
    for (i, key) in keys.iter().enumerate() {
        if let Some(n) = node.get_set(key) {
            match number(n) {
                Some(v) if v.is_finite() => seconds[i] = Some(v),
                _ => return err(n, format!("{prefix}{key} must be a finite number")),
            }
        }
    }
    let at = |key: &str| node.get(key).unwrap_or(node);
    // Seconds become `Duration`s here, once; an absent key takes its default.
    let duration = |i: usize, default: Duration| seconds[i].map_or(Ok(default), positive_seconds);
    let poll = match duration(0, DEFAULT_POLL_INTERVAL) {
        Ok(d) => d,
        Err(BadSeconds::NotPositive) => {
            return err(
                at("poll_interval_s"),
                format!("{prefix}poll_interval_s must be > 0"),
            );
        }
        Err(BadSeconds::OutOfRange) => {
            return err(
                at("poll_interval_s"),
                format!("{prefix}poll_interval_s is out of range"),
            );
        }
    };
    let lease = match duration(1, DEFAULT_LEASE_DURATION) {
        Ok(d) => d,
        Err(BadSeconds::NotPositive) => {
            return err(
                at("lease_duration_s"),
                format!("{prefix}lease_duration_s must be > 0"),
            );
        }
        Err(BadSeconds::OutOfRange) => {
            return err(
                at("lease_duration_s"),
                format!("{prefix}lease_duration_s is too large"),
            );
        }
    };
    // The store's own bound on a lease (the same check a claim makes).
    if onestep_core::request::validate_lease_duration(lease.as_secs_f64()).is_err() {
        return err(
            at("lease_duration_s"),
            format!("{prefix}lease_duration_s is too large"),
        );
    }
    // A heartbeat too large for a `Duration` is far above a third of any lease.
    let heartbeat = duration(2, DEFAULT_HEARTBEAT_INTERVAL).unwrap_or(Duration::ZERO);
    if !heartbeat_fits_lease(heartbeat, lease) {
        return err(
            at("heartbeat_interval_s"),
            format!("{prefix}heartbeat_interval_s must be > 0 and <= {prefix}lease_duration_s / 3"),
        );
    }
    // The cancel poll (docs/semantics.md#cancel-poll): never slower than the heartbeat; one
    // too large for a `Duration` is far above any heartbeat.
    let cancel_poll =
        duration(3, default_cancel_poll_interval(heartbeat)).unwrap_or(Duration::ZERO);
    if !cancel_poll_fits_heartbeat(cancel_poll, heartbeat) {
        return err(
            at("cancel_poll_interval_s"),
            format!(
                "{prefix}cancel_poll_interval_s must be > 0 and <= {prefix}heartbeat_interval_s"
            ),
        );
    }
    // worker_id
    let worker_id = match node.get_set("worker_id") {
        None => DEFAULT_WORKER_ID.to_owned(),
        Some(n) => match n.as_str().map(str::trim) {
            Some(s) if !s.is_empty() && s.chars().count() <= MAX_NAME_CHARS => s.to_owned(),
            Some(_) => {
                return err(
                    n,
                    format!("{prefix}worker_id must be non-empty and <= 255 characters"),
                );
            }
            None => {
                return err(
                    n,
                    format!(
                        "{prefix}worker_id must be non-empty and <= 255 characters (got {} {})",
                        n.type_name(),
                        scalar_text(n)
                    ),
                );
            }
        },
    };
    Ok(SourceOptions {
        namespace,
        scope,
        fair,
        task_name: names.remove(0),
        batch_size,
        poll_interval: poll,
        lease_duration: lease,
        heartbeat_interval: heartbeat,
        cancel_poll_interval: cancel_poll,
        worker_id,
    })
}

/// Reads a source's `deployed:` mapping (docs/configuration.md#deployed-tasks): `poll_s` (> 0,
/// default [`DEFAULT_DEPLOYED_POLL`]) and `slots` (1–100000, default
/// [`DEFAULT_DEPLOYED_SLOTS`]); no other key, in both modes.
pub fn deployed_options(node: &Node, prefix: &str) -> Result<DeployedConfig, (Node, String)> {
    let err = |n: &Node, msg: String| Err((n.clone(), msg));
    if !node.is_map() {
        return err(
            node,
            format!("{prefix}deployed must be a mapping (e.g. {{poll_s: 2}})"),
        );
    }
    if let Some(entries) = node.entries() {
        for (key, n) in entries {
            if !DEPLOYED_KEYS.contains(&key.as_str()) {
                return err(
                    n,
                    format!(
                        "{prefix}deployed: unsupported field '{key}' (allowed: {})",
                        DEPLOYED_KEYS.join(", ")
                    ),
                );
            }
        }
    }
    let poll = match node.get_set("poll_s") {
        None => DEFAULT_DEPLOYED_POLL,
        Some(n) => match number(n).filter(|v| v.is_finite()).map(positive_seconds) {
            Some(Ok(d)) => d,
            _ => return err(n, format!("{prefix}deployed.poll_s must be a number > 0")),
        },
    };
    let slots = match node.get_set("slots") {
        None => DEFAULT_DEPLOYED_SLOTS,
        Some(n) => match integer(n).and_then(|i| u32::try_from(i).ok()) {
            Some(v) if (1..=100_000).contains(&v) => v,
            _ => {
                return err(
                    n,
                    format!("{prefix}deployed.slots must be an integer from 1 to 100000"),
                );
            }
        },
    };
    Ok(DeployedConfig { poll, slots })
}

/// Keys of a source's `deployed:`.
pub const DEPLOYED_KEYS: [&str; 2] = ["poll_s", "slots"];

/// The default `deployed.poll_s`: how often a worker reads the deployments' revision.
pub const DEFAULT_DEPLOYED_POLL: Duration = Duration::from_secs(2);

/// The default `deployed.slots`: attempts of deployed tasks the worker's instance pool holds.
pub const DEFAULT_DEPLOYED_SLOTS: u32 = 64;

/// Resolves a connector reference (`unknown resource '<n>'`, `resource '<n>' must be a
/// MySQLConnector` / `… a PostgresConnector` when `want` names one kind; any connector when
/// `want` is `None`, else `… must be a MySQLConnector or PostgresConnector`).
pub fn connector_ref(
    parent: &Node,
    path: &str,
    resources: &BTreeMap<String, ResourceEntry<'_>>,
    want: Option<DatabaseKind>,
) -> Result<String, ConfigError> {
    let Some(n) = parent
        .get("connector")
        .filter(|n| non_empty_str(n).is_some())
    else {
        return Err(ConfigError::at(
            parent,
            path,
            "'connector' must be a non-empty string",
        ));
    };
    let name = n.as_str().unwrap_or("").trim().to_owned();
    match resources.get(&name) {
        None => Err(ConfigError::at(
            n,
            path,
            format!("unknown resource '{name}'"),
        )),
        Some(r) if !r.kind.is_connector() => Err(ConfigError::at(
            n,
            path,
            match want {
                Some(k) => format!("resource '{name}' must be a {}", k.connector_display()),
                None => format!(
                    "resource '{name}' must be a MySQLConnector, PostgresConnector or \
                     SQLiteConnector"
                ),
            },
        )),
        Some(r) if want.is_some_and(|k| k != r.kind.database()) => Err(ConfigError::at(
            n,
            path,
            format!(
                "resource '{name}' must be a {} (it is a {}, which a {} cannot use)",
                want.map_or("", DatabaseKind::connector_display),
                r.kind.display(),
                match want {
                    Some(DatabaseKind::Postgres) => "postgres_execution_source",
                    Some(DatabaseKind::Sqlite) => "sqlite_execution_source",
                    _ => "mysql_execution_source",
                }
            ),
        )),
        Some(_) => Ok(name),
    }
}

/// Builds a `mysql_execution_source` (docs/semantics.md#worker-settings, docs/configuration.md#resources, docs/configuration.md#checks-in-both-modes).
pub fn build_source(
    e: &ResourceEntry<'_>,
    resources: &BTreeMap<String, ResourceEntry<'_>>,
) -> Result<ExecutionSourceConfig, ConfigError> {
    let path = e.path();
    let node = e.node;
    let connector = connector_ref(node, &path, resources, Some(e.kind.database()))?;
    if node.get("namespaces").is_none() && node.get("namespace").and_then(non_empty_str).is_none() {
        return Err(ConfigError::at(
            node,
            &path,
            "'namespace' must be a non-empty string",
        ));
    }
    let opts = source_options(node, "").map_err(|(n, msg)| ConfigError::at(&n, &path, msg))?;
    let deployed = node
        .get_set("deployed")
        .map(|d| deployed_options(d, ""))
        .transpose()
        .map_err(|(n, msg)| ConfigError::at(&n, &path, msg))?;
    // docs/semantics.md#fair-claim: `namespaces`, `weights` and `max_running_per_key` are
    // parsed and checked above; every database backend serves them (on tables with its keys
    // table).
    let table = table_name(node, "table", "executions_table", DEFAULT_TABLE, &path)?;
    let attempts_table = table_name(
        node,
        "attempts_table",
        "attempts_table",
        DEFAULT_ATTEMPTS_TABLE,
        &path,
    )?;
    let auto_create = auto_create(node, store_defaults::DEFAULT_AUTO_CREATE, &path)?;
    let limits = limits(node, &path)?;
    let reclaim = positive(
        node,
        "reclaim_batch_size",
        u64::from(store_defaults::DEFAULT_RECLAIM_BATCH_SIZE),
        &path,
    )?;
    let reclaim_batch_size = u32::try_from(reclaim).map_err(|_| {
        ConfigError::at(node, &path, "reclaim_batch_size must be a positive integer")
    })?;
    Ok(ExecutionSourceConfig {
        name: e.name.clone(),
        kind: e.kind.database(),
        connector,
        namespace: opts.namespace,
        scope: opts.scope,
        fair: opts.fair,
        task_name: opts.task_name,
        table,
        attempts_table,
        batch_size: opts.batch_size,
        poll_interval: opts.poll_interval,
        lease_duration: opts.lease_duration,
        heartbeat_interval: opts.heartbeat_interval,
        cancel_poll_interval: opts.cancel_poll_interval,
        worker_id: opts.worker_id,
        auto_create,
        limits,
        reclaim_batch_size,
        deployed,
    })
}
