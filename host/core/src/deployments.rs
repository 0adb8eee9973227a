//! Task deployments (docs/deployments.md#data-model): a deployment binds a (namespace, task) to a
//! stored component ([`crate::components`]) and the task settings a tenant chose, under a version
//! number; the one **active** version of a task is the one that serves new claims. Every change
//! (deploy, activate — a rollback is the activation of an older version —, deactivate) writes one
//! audit event and moves the store's **revision**, the change marker that workers following
//! deployments poll.
//!
//! The rules live here, once ([`plan_deploy`], [`plan_activate`], [`plan_deactivate`]); backends
//! only lock, read and move rows:
//!
//! * every change runs in one transaction that first takes the store's revision lock (one row),
//!   so changes are serialised, each gets the next revision, and revisions commit in order: a
//!   reader that saw revision `r` has seen every change up to `r`;
//! * versions are allocated under that lock as `max(version) + 1` per (namespace, task), starting
//!   at 1, and `(namespace, task, version)` is the table's primary key;
//! * at most one version of a task is active: the database enforces it with a unique index over
//!   the active rows (PostgreSQL and SQLite: a partial index; MySQL/MariaDB: a unique index over
//!   a generated column that is NULL for every other state);
//! * a deploy names a component that must be stored, checked under the same lock the garbage
//!   collection takes ([`DeploymentStore::collect_garbage`]), so a deploy never references a
//!   component a concurrent collection deletes.

use std::fmt;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::ExecutionError;
use crate::components::ComponentDigest;

/// The refusal of every deployment call on tables without the deployment tables (created by an
/// older onestep), naming the upgrade.
pub const DEPLOYMENTS_TABLE_ABSENT: &str = "the deployment tables are absent (tables created by \
    an older onestep); add them online with `onestep migrate --upgrade`";

/// Longest namespace, task name or actor (characters).
pub const MAX_NAME_CHARS: usize = 255;

/// Longest note on a change (characters).
pub const MAX_NOTE_CHARS: usize = 1000;

/// Largest settings document, as canonical JSON (bytes).
pub const MAX_SETTINGS_BYTES: usize = 64 * 1024;

/// Largest page of [`DeploymentStore::list`] and [`DeploymentStore::audit`].
pub const MAX_PAGE: u32 = 200;

/// The default age below which [`DeploymentStore::collect_garbage`] keeps an unreferenced
/// component (one hour): a deploy may be about to reference it.
pub const GC_DEFAULT_GRACE: std::time::Duration = std::time::Duration::from_secs(3600);

/// Why a deployment call was refused.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DeploymentError {
    /// An argument breaks a rule; the message names the field and the rule (HTTP 422).
    #[error("{0}")]
    Invalid(String),
    /// The deploy names a component the component store does not hold (HTTP 422); nothing was
    /// written.
    #[error(
        "component {digest} is not stored; store it first (the component store keeps components \
         by digest), then deploy"
    )]
    UnknownComponent {
        /// The digest asked for.
        digest: ComponentDigest,
    },
    /// No such version of the task (HTTP 404).
    #[error("task {task:?} of namespace {namespace:?} has no deployment version {version}")]
    VersionNotFound {
        /// Namespace asked for.
        namespace: String,
        /// Task asked for.
        task: String,
        /// Version asked for.
        version: i64,
    },
    /// Deactivating a task that has no active version (HTTP 409).
    #[error("task {task:?} of namespace {namespace:?} has no active deployment")]
    NoActiveVersion {
        /// Namespace asked for.
        namespace: String,
        /// Task asked for.
        task: String,
    },
    /// The change would make one more task of the namespace active than its policy's
    /// `max_tasks` allows (HTTP 422, a policy violation); nothing was written.
    #[error(
        "tasks: asked {asked} tasks with an active version, the ceiling for namespace \
         {namespace:?} is {limit} (deactivate a task first)"
    )]
    TooManyTasks {
        /// The namespace.
        namespace: String,
        /// Its tasks with an active version after the change.
        asked: u64,
        /// The ceiling.
        limit: u32,
    },
    /// The store failed (or its tables are absent); see [`ExecutionError`].
    #[error("{0}")]
    Store(ExecutionError),
}

impl DeploymentError {
    /// A stable machine code for APIs and CLIs.
    pub fn code(&self) -> &'static str {
        match self {
            DeploymentError::Invalid(_) => "invalid_argument",
            DeploymentError::UnknownComponent { .. } => "unknown_component",
            DeploymentError::VersionNotFound { .. } => "deployment_not_found",
            DeploymentError::NoActiveVersion { .. } => "no_active_deployment",
            DeploymentError::TooManyTasks { .. } => "policy_violation",
            DeploymentError::Store(e) => e.code(),
        }
    }

    fn invalid(msg: impl Into<String>) -> DeploymentError {
        DeploymentError::Invalid(msg.into())
    }
}

impl From<ExecutionError> for DeploymentError {
    fn from(e: ExecutionError) -> Self {
        match e {
            ExecutionError::InvalidArgument(m) => DeploymentError::Invalid(m),
            other => DeploymentError::Store(other),
        }
    }
}

/// A deployment's state. At most one version of a task is [`Active`](DeploymentState::Active).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeploymentState {
    /// Serves new claims of its task.
    Active,
    /// Was active (or never was) and another version was deployed or activated after it; it can
    /// be activated again (a rollback).
    Superseded,
    /// Was active and was deactivated: the task stopped serving. It can be activated again.
    Inactive,
}

impl DeploymentState {
    /// The stored text: `active`, `superseded`, `inactive`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeploymentState::Active => "active",
            DeploymentState::Superseded => "superseded",
            DeploymentState::Inactive => "inactive",
        }
    }

    /// Parses the stored text.
    pub fn parse(text: &str) -> Result<DeploymentState, ExecutionError> {
        match text {
            "active" => Ok(DeploymentState::Active),
            "superseded" => Ok(DeploymentState::Superseded),
            "inactive" => Ok(DeploymentState::Inactive),
            other => Err(ExecutionError::Undecodable(format!(
                "stored deployment state {:?} is none of active, superseded, inactive",
                crate::text::truncate_utf8(other, 40)
            ))),
        }
    }
}

impl fmt::Display for DeploymentState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What an audit event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeploymentAction {
    /// A new version was deployed (and became active).
    Deploy,
    /// An existing version was made active (a rollback when it is older than the one it
    /// replaced).
    Activate,
    /// The active version stopped serving; the task has no active version.
    Deactivate,
}

impl DeploymentAction {
    /// The stored text: `deploy`, `activate`, `deactivate`.
    pub fn as_str(self) -> &'static str {
        match self {
            DeploymentAction::Deploy => "deploy",
            DeploymentAction::Activate => "activate",
            DeploymentAction::Deactivate => "deactivate",
        }
    }

    /// Parses the stored text.
    pub fn parse(text: &str) -> Result<DeploymentAction, ExecutionError> {
        match text {
            "deploy" => Ok(DeploymentAction::Deploy),
            "activate" => Ok(DeploymentAction::Activate),
            "deactivate" => Ok(DeploymentAction::Deactivate),
            other => Err(ExecutionError::Undecodable(format!(
                "stored deployment action {:?} is none of deploy, activate, deactivate",
                crate::text::truncate_utf8(other, 40)
            ))),
        }
    }
}

impl fmt::Display for DeploymentAction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The task settings a deployment carries, as the store keeps them: a JSON object kept as
/// canonical JSON text ([`crate::canonical`]), so two equal documents are byte-equal. The store
/// does not interpret the keys. What the API deploys is always the typed
/// [`crate::deploy_policy::DeploymentSettings`] (sandbox grants, timeout, retry, concurrency,
/// params; built by the manifest parser, validated and checked against the tenant policy before
/// a deploy), stored with [`StoredSettings::of`] and read back with [`StoredSettings::typed`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSettings(String);

impl StoredSettings {
    /// The settings of `value`, which must be a JSON object of at most [`MAX_SETTINGS_BYTES`]
    /// bytes of canonical JSON.
    pub fn from_value(value: &Value) -> Result<StoredSettings, DeploymentError> {
        if !value.is_object() {
            return Err(DeploymentError::invalid(
                "deployment settings must be a JSON object",
            ));
        }
        let len = crate::canonical::canonical_len(value);
        if len > MAX_SETTINGS_BYTES {
            return Err(DeploymentError::invalid(format!(
                "deployment settings are {len} bytes of canonical JSON; at most \
                 {MAX_SETTINGS_BYTES} are allowed"
            )));
        }
        Ok(StoredSettings(crate::canonical::to_canonical_string(value)))
    }

    /// The stored form of typed settings: their canonical JSON
    /// ([`crate::deploy_policy::DeploymentSettings::to_canonical_json`]).
    pub fn of(
        typed: &crate::deploy_policy::DeploymentSettings,
    ) -> Result<StoredSettings, DeploymentError> {
        let value = serde_json::to_value(typed).map_err(|e| {
            DeploymentError::invalid(format!("deployment settings cannot be encoded: {e}"))
        })?;
        StoredSettings::from_value(&value)
    }

    /// The typed settings these are the stored form of; settings that are not (written by
    /// something else than [`StoredSettings::of`]) are [`ExecutionError::Undecodable`].
    pub fn typed(&self) -> Result<crate::deploy_policy::DeploymentSettings, ExecutionError> {
        crate::deploy_policy::DeploymentSettings::from_json(&self.0).map_err(|e| {
            ExecutionError::Undecodable(format!(
                "stored deployment settings are not typed deployment settings: {e}"
            ))
        })
    }

    /// An empty settings object, `{}`.
    pub fn empty() -> StoredSettings {
        StoredSettings("{}".to_owned())
    }

    /// Settings read back from a row (canonical JSON text of an object).
    pub fn from_stored(text: &str) -> Result<StoredSettings, ExecutionError> {
        let value: Value = serde_json::from_str(text).map_err(|e| {
            ExecutionError::Undecodable(format!("stored deployment settings are not JSON: {e}"))
        })?;
        if !value.is_object() {
            return Err(ExecutionError::Undecodable(
                "stored deployment settings are not a JSON object".to_owned(),
            ));
        }
        Ok(StoredSettings(crate::canonical::to_canonical_string(
            &value,
        )))
    }

    /// The canonical JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The settings as a JSON value.
    pub fn to_value(&self) -> Value {
        // Canonical text of an object, written by `from_value`/`from_stored`: always parses.
        serde_json::from_str(&self.0).unwrap_or(Value::Null)
    }
}

/// One version of a task's deployment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deployment {
    /// Namespace (tenant).
    pub namespace: String,
    /// Task name.
    pub task: String,
    /// Version, 1, 2, … per (namespace, task).
    pub version: i64,
    /// The component it runs.
    pub digest: ComponentDigest,
    /// The task settings it carries.
    pub settings: StoredSettings,
    /// Its state now.
    pub state: DeploymentState,
    /// Who deployed it (the token's or principal's name).
    pub deployed_by: String,
    /// When it was deployed (the backend's clock).
    pub deployed_at: DateTime<Utc>,
    /// The version that was active when it was deployed (the one it replaced), if any.
    pub previous_version: Option<i64>,
    /// That version's digest: the deploy went from `previous_digest` to `digest`.
    pub previous_digest: Option<ComponentDigest>,
    /// The deployer's note, if any.
    pub note: Option<String>,
    /// The store revision its deploy took: unique across all deployments, increasing; the
    /// history's order.
    pub revision: i64,
    /// When its state last changed (its deploy, an activation or a deactivation).
    pub updated_at: DateTime<Utc>,
}

/// One audit event: one per change, never updated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeploymentEvent {
    /// The store revision of the change (unique, increasing).
    pub revision: i64,
    /// Namespace.
    pub namespace: String,
    /// Task.
    pub task: String,
    /// What happened.
    pub action: DeploymentAction,
    /// The version deployed, activated or deactivated.
    pub version: i64,
    /// Its digest.
    pub digest: ComponentDigest,
    /// The version that served before the change (`None`: none was active).
    pub from_version: Option<i64>,
    /// Its digest.
    pub from_digest: Option<ComponentDigest>,
    /// Who made the change.
    pub actor: String,
    /// When (the backend's clock).
    pub at: DateTime<Utc>,
    /// The actor's note, if any.
    pub note: Option<String>,
}

/// A deploy as asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewDeployment {
    /// Namespace (tenant).
    pub namespace: String,
    /// Task name.
    pub task: String,
    /// A stored component.
    pub digest: ComponentDigest,
    /// The task settings.
    pub settings: StoredSettings,
    /// Who deploys.
    pub actor: String,
    /// An optional note (reason) kept with the deployment and its event.
    pub note: Option<String>,
    /// The namespace's `max_tasks` ceiling: when the task has no active version, the deploy is
    /// refused ([`DeploymentError::TooManyTasks`]) if the namespace already has this many
    /// tasks with an active version. `None`: no bound.
    pub max_tasks: Option<u32>,
}

/// What [`DeploymentStore::deploy`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deployed {
    /// The new version, or the active one the deploy repeated.
    pub deployment: Deployment,
    /// False when the task's active version already had the same digest and settings: nothing
    /// was written (no version, no event, the revision did not move).
    pub created: bool,
}

/// Filters of [`DeploymentStore::list`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeploymentFilter {
    /// Only this namespace.
    pub namespace: Option<String>,
    /// Only this task (of any namespace unless `namespace` is set).
    pub task: Option<String>,
}

/// A page, newest first; `next_before` is the `before` of the next page (`None`: the last page).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<T> {
    /// The items, newest (highest revision) first.
    pub items: Vec<T>,
    /// Pass as `before` for the next page; `None` when this page is the last.
    pub next_before: Option<i64>,
}

impl<T> Page<T> {
    /// The page of `rows` read with `limit + 1`: at most `limit` items and the cursor of the
    /// next page when there was one more.
    pub fn of(mut rows: Vec<T>, limit: u32, revision: impl Fn(&T) -> i64) -> Page<T> {
        let more = rows.len() > limit as usize;
        rows.truncate(limit as usize);
        let next_before = if more {
            rows.last().map(&revision)
        } else {
            None
        };
        Page {
            items: rows,
            next_before,
        }
    }
}

/// The active deployments at a revision (what a worker following deployments reads when the
/// revision moved).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ActiveSet {
    /// The store revision read before the rows: the rows are at least as new as it, so a
    /// follower that keeps this revision and later sees a higher one reads again.
    pub revision: i64,
    /// The active deployments, by (namespace, task).
    pub deployments: Vec<Deployment>,
}

/// What [`DeploymentStore::collect_garbage`] removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GcReport {
    /// Components removed (header and chunks).
    pub components: u64,
    /// Their bytes.
    pub bytes: u64,
}

/// The load check of a component before it is deployed (docs/deployments.md#load-check): the
/// same checks a worker makes when it loads a task's component (`onestep check --strict`):
/// compile, link against the host's imports for the settings' sandbox, the handler export,
/// the component's declared needs within the sandbox's limits. Implemented by the CLI with the
/// WebAssembly runtime; core and the API know only this port.
#[async_trait]
pub trait ComponentVetter: Send + Sync {
    /// `Ok` when a worker could load `bytes` for `settings`; otherwise the reason, as the
    /// worker would report it.
    async fn vet(
        &self,
        bytes: &[u8],
        settings: &crate::deploy_policy::DeploymentSettings,
    ) -> Result<(), String>;
}

/// The task deployments port (docs/deployments.md#data-model).
#[async_trait]
pub trait DeploymentStore: Send + Sync {
    /// Deploys a new version of `new.task` and makes it the active one (the version that was
    /// active becomes [`DeploymentState::Superseded`]). The version is the task's highest plus
    /// one (1 for the first). Refused with [`DeploymentError::UnknownComponent`], writing
    /// nothing, when the component is not stored. Idempotent against the active version: when
    /// it has the same digest and settings, nothing is written and it is returned with
    /// `created: false` (a retried deploy makes no second version). A deploy of a task with no
    /// active version is refused with [`DeploymentError::TooManyTasks`] when the namespace
    /// already has `new.max_tasks` tasks with an active version (counted under the store's
    /// lock, so concurrent deploys of new tasks never exceed it). Writes one
    /// [`DeploymentAction::Deploy`] event and moves the revision.
    async fn deploy(&self, new: &NewDeployment) -> Result<Deployed, DeploymentError>;

    /// One version, or `None`.
    async fn get(
        &self,
        namespace: &str,
        task: &str,
        version: i64,
    ) -> Result<Option<Deployment>, DeploymentError>;

    /// The active version of a task, or `None` (never deployed, or deactivated).
    async fn active(
        &self,
        namespace: &str,
        task: &str,
    ) -> Result<Option<Deployment>, DeploymentError>;

    /// The history, newest first (by revision), filtered; `before` is the previous page's
    /// `next_before`; `limit` 1..=[`MAX_PAGE`].
    async fn list(
        &self,
        filter: &DeploymentFilter,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Page<Deployment>, DeploymentError>;

    /// Makes `version` the task's active version (a rollback when it is older): the version
    /// active before becomes superseded. Writes one [`DeploymentAction::Activate`] event and
    /// moves the revision; activating the version that is already active changes nothing and
    /// returns it. Concurrent activations are serialised: the last one wins, each is audited.
    /// Activating a version of a task with no active version makes one more task active: it is
    /// refused with [`DeploymentError::TooManyTasks`] when the namespace already has
    /// `max_tasks` (when given) tasks with an active version.
    async fn activate(
        &self,
        namespace: &str,
        task: &str,
        version: i64,
        actor: &str,
        note: Option<&str>,
        max_tasks: Option<u32>,
    ) -> Result<Deployment, DeploymentError>;

    /// Stops the task's active version ([`DeploymentState::Inactive`]): the task then has no
    /// active version and serves no new claims. Refused with
    /// [`DeploymentError::NoActiveVersion`] when none is active. Writes one
    /// [`DeploymentAction::Deactivate`] event and moves the revision; returns the version that
    /// stopped.
    async fn deactivate(
        &self,
        namespace: &str,
        task: &str,
        actor: &str,
        note: Option<&str>,
    ) -> Result<Deployment, DeploymentError>;

    /// The store revision: 0 before the first change, then moved by every change (and by
    /// nothing else). One primary-key read of one row: what a follower polls.
    async fn revision(&self) -> Result<i64, DeploymentError>;

    /// Every active deployment, of `namespaces` only when given, by (namespace, task), with the
    /// revision read before them.
    async fn active_all(&self, namespaces: Option<&[String]>)
    -> Result<ActiveSet, DeploymentError>;

    /// The audit events of a namespace (of one task when given), newest first; `before` and
    /// `limit` as in [`Self::list`].
    async fn audit(
        &self,
        namespace: &str,
        task: Option<&str>,
        before: Option<i64>,
        limit: u32,
    ) -> Result<Page<DeploymentEvent>, DeploymentError>;

    /// Deletes every stored component that no deployment row references (of any version or
    /// state: every version stays restorable) and that was stored more than `grace` ago by the
    /// backend's clock (a deploy may be about to reference a younger one). Runs under the
    /// deployments' lock, so a concurrent deploy either commits first (and its component is
    /// kept) or finds its component gone (and is refused with
    /// [`DeploymentError::UnknownComponent`]; storing it again and deploying succeeds).
    async fn collect_garbage(
        &self,
        grace: std::time::Duration,
    ) -> Result<GcReport, DeploymentError>;
}

/// The deployment columns every backend selects, in [`DeploymentRow`]'s order.
pub const DEPLOYMENT_COLUMNS: &str = "namespace, task, version, digest, settings, state, \
    deployed_by, deployed_at, previous_version, previous_digest, note, revision, updated_at";

/// The event columns every backend selects, in [`EventRow`]'s order.
pub const EVENT_COLUMNS: &str = "revision, namespace, task, action, version, digest, from_version, from_digest, actor, at, note";

fn stored_digest(text: &str, col: &str) -> Result<ComponentDigest, ExecutionError> {
    ComponentDigest::parse(text)
        .map_err(|e| ExecutionError::Undecodable(format!("stored deployment {col}: {e}")))
}

/// A deployment row as read, before decoding ([`DEPLOYMENT_COLUMNS`]).
#[derive(Debug, Clone)]
#[allow(missing_docs)]
pub struct DeploymentRow {
    pub namespace: String,
    pub task: String,
    pub version: i64,
    pub digest: String,
    pub settings: String,
    pub state: String,
    pub deployed_by: String,
    pub deployed_at: DateTime<Utc>,
    pub previous_version: Option<i64>,
    pub previous_digest: Option<String>,
    pub note: Option<String>,
    pub revision: i64,
    pub updated_at: DateTime<Utc>,
}

impl DeploymentRow {
    /// The deployment; a bad digest, settings document or state is
    /// [`ExecutionError::Undecodable`].
    pub fn decode(self) -> Result<Deployment, ExecutionError> {
        Ok(Deployment {
            digest: stored_digest(&self.digest, "digest")?,
            settings: StoredSettings::from_stored(&self.settings)?,
            state: DeploymentState::parse(&self.state)?,
            previous_digest: self
                .previous_digest
                .as_deref()
                .map(|d| stored_digest(d, "previous_digest"))
                .transpose()?,
            namespace: self.namespace,
            task: self.task,
            version: self.version,
            deployed_by: self.deployed_by,
            deployed_at: self.deployed_at,
            previous_version: self.previous_version,
            note: self.note,
            revision: self.revision,
            updated_at: self.updated_at,
        })
    }
}

/// An event row as read, before decoding ([`EVENT_COLUMNS`]).
#[derive(Debug, Clone)]
#[allow(missing_docs)]
pub struct EventRow {
    pub revision: i64,
    pub namespace: String,
    pub task: String,
    pub action: String,
    pub version: i64,
    pub digest: String,
    pub from_version: Option<i64>,
    pub from_digest: Option<String>,
    pub actor: String,
    pub at: DateTime<Utc>,
    pub note: Option<String>,
}

impl EventRow {
    /// The event; a bad digest or action is [`ExecutionError::Undecodable`].
    pub fn decode(self) -> Result<DeploymentEvent, ExecutionError> {
        Ok(DeploymentEvent {
            action: DeploymentAction::parse(&self.action)?,
            digest: stored_digest(&self.digest, "digest")?,
            from_digest: self
                .from_digest
                .as_deref()
                .map(|d| stored_digest(d, "from_digest"))
                .transpose()?,
            revision: self.revision,
            namespace: self.namespace,
            task: self.task,
            version: self.version,
            from_version: self.from_version,
            actor: self.actor,
            at: self.at,
            note: self.note,
        })
    }
}

/// Checks a namespace, task name or actor: 1..=[`MAX_NAME_CHARS`] characters, no control
/// characters, no surrounding white space.
pub fn check_name(field: &str, text: &str) -> Result<(), DeploymentError> {
    if text.is_empty() {
        return Err(DeploymentError::invalid(format!(
            "{field} must not be empty"
        )));
    }
    let chars = text.chars().count();
    if chars > MAX_NAME_CHARS {
        return Err(DeploymentError::invalid(format!(
            "{field} is {chars} characters; at most {MAX_NAME_CHARS} are allowed"
        )));
    }
    if text.chars().any(char::is_control) {
        return Err(DeploymentError::invalid(format!(
            "{field} must not contain control characters"
        )));
    }
    if text.trim() != text {
        return Err(DeploymentError::invalid(format!(
            "{field} must not begin or end with white space"
        )));
    }
    Ok(())
}

/// Checks an optional note: at most [`MAX_NOTE_CHARS`] characters, no control characters but
/// newlines and tabs.
pub fn check_note(note: Option<&str>) -> Result<(), DeploymentError> {
    let Some(note) = note else {
        return Ok(());
    };
    let chars = note.chars().count();
    if chars > MAX_NOTE_CHARS {
        return Err(DeploymentError::invalid(format!(
            "note is {chars} characters; at most {MAX_NOTE_CHARS} are allowed"
        )));
    }
    if note
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        return Err(DeploymentError::invalid(
            "note must not contain control characters other than newline and tab",
        ));
    }
    Ok(())
}

/// Checks a version number (1 or more).
pub fn check_version(version: i64) -> Result<(), DeploymentError> {
    if version < 1 {
        return Err(DeploymentError::invalid(format!(
            "version must be 1 or more (got {version})"
        )));
    }
    Ok(())
}

/// Checks a page size (1..=[`MAX_PAGE`]) and a `before` cursor (1 or more).
pub fn check_page(before: Option<i64>, limit: u32) -> Result<(), DeploymentError> {
    if limit == 0 || limit > MAX_PAGE {
        return Err(DeploymentError::invalid(format!(
            "limit must be between 1 and {MAX_PAGE} (got {limit})"
        )));
    }
    if let Some(b) = before
        && b < 1
    {
        return Err(DeploymentError::invalid(format!(
            "before must be a revision of 1 or more (got {b})"
        )));
    }
    Ok(())
}

/// Checks every field of a deploy before anything is read.
pub fn check_new(new: &NewDeployment) -> Result<(), DeploymentError> {
    check_name("namespace", &new.namespace)?;
    check_name("task", &new.task)?;
    check_name("actor", &new.actor)?;
    check_note(new.note.as_deref())
}

/// The garbage collection's cutoff: components stored before it may go.
pub fn gc_cutoff(now: DateTime<Utc>, grace: std::time::Duration) -> DateTime<Utc> {
    let grace = chrono::TimeDelta::from_std(grace).unwrap_or(chrono::TimeDelta::MAX);
    now.checked_sub_signed(grace)
        .unwrap_or(DateTime::<Utc>::MIN_UTC)
}

/// A row state change a plan asks for: set version `version` of the task to `state`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateChange {
    /// The version.
    pub version: i64,
    /// Its new state.
    pub state: DeploymentState,
}

/// The writes of one change, decided by a plan: the state changes (in order: the old active row
/// leaves `active` before another enters it), the new row of a deploy, and the event. Every write
/// carries `revision` and `at`; the store's revision becomes `revision`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangePlan {
    /// The revision the change takes (the store's plus one).
    pub revision: i64,
    /// Existing rows whose state changes, in order.
    pub changes: Vec<StateChange>,
    /// The row a deploy inserts.
    pub insert: Option<Deployment>,
    /// The audit event.
    pub event: DeploymentEvent,
}

/// What a plan decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Nothing to write; the answer is this deployment.
    Unchanged(Deployment),
    /// Write this, then answer with the deployment (the row as it is after the change).
    Change(Box<ChangePlan>, Deployment),
}

/// Whether a change that makes one more task of `namespace` active stays within `max_tasks`,
/// given the namespace's tasks with an active version now (`active_tasks`, read under the
/// revision lock; `None` when it was not read because no bound applies).
pub fn check_task_count(
    namespace: &str,
    active_tasks: Option<u64>,
    max_tasks: Option<u32>,
) -> Result<(), DeploymentError> {
    match (active_tasks, max_tasks) {
        (Some(now), Some(limit)) if now >= u64::from(limit) => Err(DeploymentError::TooManyTasks {
            namespace: namespace.to_owned(),
            asked: now + 1,
            limit,
        }),
        _ => Ok(()),
    }
}

/// Plans a deploy, given (read under the revision lock) the store's revision, the task's active
/// version, its highest version, whether the component is stored and, when the task has no
/// active version and `new.max_tasks` is set, the namespace's tasks with an active version.
#[allow(clippy::too_many_arguments)]
pub fn plan_deploy(
    new: &NewDeployment,
    revision: i64,
    active: Option<&Deployment>,
    max_version: Option<i64>,
    component_stored: bool,
    active_tasks: Option<u64>,
    now: DateTime<Utc>,
) -> Result<Plan, DeploymentError> {
    if !component_stored {
        return Err(DeploymentError::UnknownComponent {
            digest: new.digest.clone(),
        });
    }
    if let Some(a) = active
        && a.digest == new.digest
        && a.settings == new.settings
    {
        return Ok(Plan::Unchanged(a.clone()));
    }
    if active.is_none() {
        check_task_count(&new.namespace, active_tasks, new.max_tasks)?;
    }
    let revision = revision + 1;
    let version = max_version.unwrap_or(0) + 1;
    let row = Deployment {
        namespace: new.namespace.clone(),
        task: new.task.clone(),
        version,
        digest: new.digest.clone(),
        settings: new.settings.clone(),
        state: DeploymentState::Active,
        deployed_by: new.actor.clone(),
        deployed_at: now,
        previous_version: active.map(|a| a.version),
        previous_digest: active.map(|a| a.digest.clone()),
        note: new.note.clone(),
        revision,
        updated_at: now,
    };
    let event = DeploymentEvent {
        revision,
        namespace: new.namespace.clone(),
        task: new.task.clone(),
        action: DeploymentAction::Deploy,
        version,
        digest: new.digest.clone(),
        from_version: row.previous_version,
        from_digest: row.previous_digest.clone(),
        actor: new.actor.clone(),
        at: now,
        note: new.note.clone(),
    };
    let changes = active
        .map(|a| StateChange {
            version: a.version,
            state: DeploymentState::Superseded,
        })
        .into_iter()
        .collect();
    Ok(Plan::Change(
        Box::new(ChangePlan {
            revision,
            changes,
            insert: Some(row.clone()),
            event,
        }),
        row,
    ))
}

/// The bound of an activation: the namespace's `max_tasks` and, when the task has no active
/// version, its tasks with an active version now (read under the revision lock).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TaskBound {
    /// The ceiling (`None`: no bound).
    pub max_tasks: Option<u32>,
    /// The namespace's tasks with an active version (`None`: not read).
    pub active_tasks: Option<u64>,
}

/// Plans an activation of `target` (`None`: no such version), given the task's active version.
#[allow(clippy::too_many_arguments)]
pub fn plan_activate(
    namespace: &str,
    task: &str,
    version: i64,
    target: Option<Deployment>,
    active: Option<&Deployment>,
    revision: i64,
    actor: &str,
    note: Option<&str>,
    bound: TaskBound,
    now: DateTime<Utc>,
) -> Result<Plan, DeploymentError> {
    let Some(target) = target else {
        return Err(DeploymentError::VersionNotFound {
            namespace: namespace.to_owned(),
            task: task.to_owned(),
            version,
        });
    };
    if target.state == DeploymentState::Active {
        return Ok(Plan::Unchanged(target));
    }
    if active.is_none() {
        check_task_count(namespace, bound.active_tasks, bound.max_tasks)?;
    }
    let revision = revision + 1;
    let mut changes = Vec::new();
    if let Some(a) = active {
        changes.push(StateChange {
            version: a.version,
            state: DeploymentState::Superseded,
        });
    }
    changes.push(StateChange {
        version: target.version,
        state: DeploymentState::Active,
    });
    let event = DeploymentEvent {
        revision,
        namespace: namespace.to_owned(),
        task: task.to_owned(),
        action: DeploymentAction::Activate,
        version: target.version,
        digest: target.digest.clone(),
        from_version: active.map(|a| a.version),
        from_digest: active.map(|a| a.digest.clone()),
        actor: actor.to_owned(),
        at: now,
        note: note.map(str::to_owned),
    };
    let after = Deployment {
        state: DeploymentState::Active,
        updated_at: now,
        ..target
    };
    Ok(Plan::Change(
        Box::new(ChangePlan {
            revision,
            changes,
            insert: None,
            event,
        }),
        after,
    ))
}

/// Plans a deactivation, given the task's active version.
pub fn plan_deactivate(
    namespace: &str,
    task: &str,
    active: Option<Deployment>,
    revision: i64,
    actor: &str,
    note: Option<&str>,
    now: DateTime<Utc>,
) -> Result<Plan, DeploymentError> {
    let Some(active) = active else {
        return Err(DeploymentError::NoActiveVersion {
            namespace: namespace.to_owned(),
            task: task.to_owned(),
        });
    };
    let revision = revision + 1;
    let event = DeploymentEvent {
        revision,
        namespace: namespace.to_owned(),
        task: task.to_owned(),
        action: DeploymentAction::Deactivate,
        version: active.version,
        digest: active.digest.clone(),
        from_version: Some(active.version),
        from_digest: Some(active.digest.clone()),
        actor: actor.to_owned(),
        at: now,
        note: note.map(str::to_owned),
    };
    let after = Deployment {
        state: DeploymentState::Inactive,
        updated_at: now,
        ..active
    };
    Ok(Plan::Change(
        Box::new(ChangePlan {
            revision,
            changes: vec![StateChange {
                version: after.version,
                state: DeploymentState::Inactive,
            }],
            insert: None,
            event,
        }),
        after,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn new(digest: &str, settings: Value) -> NewDeployment {
        NewDeployment {
            namespace: "ns".into(),
            task: "t".into(),
            digest: ComponentDigest::of(digest.as_bytes()),
            settings: StoredSettings::from_value(&settings).expect("settings"),
            actor: "alice".into(),
            note: None,
            max_tasks: None,
        }
    }

    fn changed(p: Plan) -> (ChangePlan, Deployment) {
        match p {
            Plan::Change(c, d) => (*c, d),
            Plan::Unchanged(d) => panic!("unexpectedly unchanged: {d:?}"),
        }
    }

    #[test]
    fn settings_are_canonical_objects() {
        let a =
            StoredSettings::from_value(&serde_json::json!({"b": 1, "a": [true]})).expect("object");
        assert_eq!(a.as_str(), r#"{"a":[true],"b":1}"#);
        assert_eq!(
            StoredSettings::from_stored(r#"{ "b":1,"a":[true] }"#).expect("stored"),
            a
        );
        let e = StoredSettings::from_value(&serde_json::json!([1])).expect_err("array");
        assert!(e.to_string().contains("must be a JSON object"), "{e}");
        let big = serde_json::json!({"x": "y".repeat(MAX_SETTINGS_BYTES)});
        let e = StoredSettings::from_value(&big).expect_err("big");
        assert!(e.to_string().contains("at most 65536"), "{e}");
    }

    #[test]
    fn typed_settings_round_trip_through_the_stored_form() {
        let typed: crate::deploy_policy::DeploymentSettings = serde_json::from_value(
            serde_json::json!({"namespace": "ns", "task": "t", "sandbox": {}, "concurrency": 2,
                "params": {"b": 1, "a": 2}}),
        )
        .expect("typed");
        typed.validate().expect("valid");
        let stored = StoredSettings::of(&typed).expect("stored");
        assert_eq!(
            stored.as_str(),
            typed.to_canonical_json().expect("canonical")
        );
        assert_eq!(stored.typed().expect("typed back"), typed);
        let e = StoredSettings::from_value(&serde_json::json!({"x": 1}))
            .expect("opaque")
            .typed()
            .expect_err("not typed");
        assert_eq!(e.code(), "undecodable_row");
        let bad = crate::deploy_policy::DeploymentSettings {
            concurrency: 0,
            ..typed.clone()
        };
        assert!(bad.validate().expect_err("0").contains("concurrency"));
        let mut bad = typed;
        bad.task = " t".into();
        assert!(bad.validate().expect_err("task").starts_with("task "));
    }

    #[test]
    fn names_and_pages_are_checked() {
        assert!(check_name("task", "t-1").is_ok());
        for (bad, why) in [
            ("", "must not be empty"),
            (" t", "white space"),
            ("a\u{0}b", "control characters"),
        ] {
            let e = check_name("task", bad).expect_err(bad);
            assert!(e.to_string().starts_with("task "), "{e}");
            assert!(e.to_string().contains(why), "{e}");
        }
        assert!(check_name("task", &"x".repeat(256)).is_err());
        assert!(check_page(None, 0).is_err());
        assert!(check_page(Some(0), 10).is_err());
        assert!(check_page(Some(5), 200).is_ok());
        assert!(check_version(0).is_err());
    }

    #[test]
    fn a_new_active_task_is_bounded_by_max_tasks() {
        let now = DateTime::<Utc>::UNIX_EPOCH;
        let mut n = new("v1", serde_json::json!({}));
        n.max_tasks = Some(2);
        // Two tasks active already: a third is refused, naming the count and the ceiling.
        let e = plan_deploy(&n, 5, None, None, true, Some(2), now).expect_err("third");
        assert_eq!(e.code(), "policy_violation");
        assert!(
            e.to_string().contains(
                "asked 3 tasks with an active version, the ceiling for namespace \"ns\" is 2"
            ),
            "{e}"
        );
        assert!(plan_deploy(&n, 5, None, None, true, Some(1), now).is_ok());
        // A new version of an active task adds no task.
        let (_, d1) = changed(plan_deploy(&n, 0, None, None, true, Some(0), now).expect("v1"));
        let n2 = NewDeployment {
            settings: StoredSettings::from_value(&serde_json::json!({"x": 1})).expect("s"),
            ..n.clone()
        };
        assert!(plan_deploy(&n2, 1, Some(&d1), Some(1), true, Some(2), now).is_ok());
        // Activating a version of a task with none active adds one.
        let old = Deployment {
            state: DeploymentState::Inactive,
            ..d1.clone()
        };
        let bound = TaskBound {
            max_tasks: Some(2),
            active_tasks: Some(2),
        };
        let e = plan_activate(
            "ns",
            "t",
            1,
            Some(old.clone()),
            None,
            3,
            "b",
            None,
            bound,
            now,
        )
        .expect_err("over");
        assert_eq!(e.code(), "policy_violation");
        assert!(
            plan_activate("ns", "t", 1, Some(old), Some(&d1), 3, "b", None, bound, now).is_ok(),
            "replacing the task's active version adds no task"
        );
    }

    #[test]
    fn a_deploy_supersedes_and_a_repeat_changes_nothing() {
        let now = DateTime::<Utc>::UNIX_EPOCH;
        let n1 = new("v1", serde_json::json!({}));
        let e = plan_deploy(&n1, 0, None, None, false, None, now).expect_err("unknown");
        assert_eq!(e.code(), "unknown_component");
        let (c1, d1) = changed(plan_deploy(&n1, 0, None, None, true, None, now).expect("plan"));
        assert_eq!((d1.version, d1.revision, c1.revision), (1, 1, 1));
        assert!(c1.changes.is_empty());
        assert_eq!(c1.event.from_version, None);
        match plan_deploy(&n1, 1, Some(&d1), Some(1), true, None, now).expect("repeat") {
            Plan::Unchanged(d) => assert_eq!(d, d1),
            Plan::Change(..) => panic!("a repeat writes nothing"),
        }
        let n2 = new("v1", serde_json::json!({"timeout": 5}));
        let (c2, d2) =
            changed(plan_deploy(&n2, 1, Some(&d1), Some(1), true, None, now).expect("v2"));
        assert_eq!((d2.version, d2.previous_version), (2, Some(1)));
        assert_eq!(
            c2.changes,
            [StateChange {
                version: 1,
                state: DeploymentState::Superseded
            }]
        );
        let (c3, d3) = changed(
            plan_activate(
                "ns",
                "t",
                1,
                Some(Deployment {
                    state: DeploymentState::Superseded,
                    ..d1.clone()
                }),
                Some(&d2),
                2,
                "bob",
                None,
                TaskBound::default(),
                now,
            )
            .expect("rollback"),
        );
        assert_eq!(d3.state, DeploymentState::Active);
        assert_eq!(c3.changes.len(), 2);
        assert_eq!(c3.event.from_version, Some(2));
        let e = plan_deactivate("ns", "t", None, 3, "bob", None, now).expect_err("none");
        assert_eq!(e.code(), "no_active_deployment");
        let e = plan_activate(
            "ns",
            "t",
            9,
            None,
            None,
            3,
            "bob",
            None,
            TaskBound::default(),
            now,
        )
        .expect_err("9");
        assert_eq!(e.code(), "deployment_not_found");
        assert!(e.to_string().contains("version 9"), "{e}");
    }
}
