//! Table DDL and schema readiness (docs/sqlite.md#schema): the same two tables as on MySQL and
//! PostgreSQL (same columns, same meaning; SQLite types: `TEXT` for UUIDs, instants and JSON),
//! the same partial indexes, plus `<A>_diagnostics` and `<T>_traces`. Creation runs in one
//! `BEGIN IMMEDIATE` transaction, so two processes opening one new file create the tables once.

use onestep_core::names::{TableNames, derived_name, validate_identifier};
use onestep_core::store::{CommonFeatures, SchemaFeatureSet};
use rusqlite::{Connection, OptionalExtension};

use crate::errors::{OpError, OpResult, backend_error};

/// The longest table name accepted (the other backends' limit, so a pair moves between them).
pub const NAME_LIMIT: usize = 63;

onestep_core::schema_features! {
    /// Which schema parts the opened tables have (detected once at open): the
    /// [`CommonFeatures`] plus the expiry index and the fair claim's keys table.
    pub struct SchemaFeatures {
        /// The executions table has the `ix_<T>_expiry` partial index.
        pub expiry_index: bool,
        /// The fairness-keys table `<T>_keys` with its pass index, and the executions table's
        /// fair and running indexes (docs/semantics.md#fair-claim): single-task claims are
        /// fair claims; without them a claim is the plain claim of one namespace.
        pub fair_keys: bool,
        /// The rate-limit buckets table `<T>_buckets` exists (docs/semantics.md#rate-limits).
        pub buckets_table: bool,
        /// The completion-webhook tables `<T>_callbacks` and `<T>_deliveries` exist
        /// (docs/semantics.md#completion-webhooks).
        pub callbacks_tables: bool,
        /// The component store's tables `<T>_components`, `<T>_component_chunks` and
        /// `<T>_component_holders` exist (docs/semantics.md#component-store).
        pub components_tables: bool,
        /// The deployment tables `<T>_deployments`, `<T>_deployment_events` and
        /// `<T>_deployment_revision` exist (docs/deployments.md#data-model).
        pub deployments_tables: bool,
        /// The durable steps table `<T>_steps` exists (docs/steps.md).
        pub steps_table: bool,
        /// The attempts table's status `CHECK` allows `parked` (docs/steps.md#sleep).
        pub parked_status: bool,
    }
    /// What readiness did: the tables created and the [`SchemaFeatures`] detected.
    pub type SchemaReport;
}

impl SchemaFeatureSet for SchemaFeatures {
    const DIAGNOSTICS_ABSENT: &'static str = "the attempt-diagnostics table is absent: attempts' \
        messages, progress and log lines are not kept; `onestep migrate` creates it";

    fn upgrade_warning(&self) -> Option<&'static str> {
        if !self.priority_columns {
            return Some(
                "execution tables without the priority and fairness_key columns (created by an \
                 older onestep): every execution runs at priority 5 and submits that set either \
                 are refused; add them with",
            );
        }
        if !(self.expiry_index && self.list_indexes) {
            return Some(
                "execution tables without onestep's expiry and status indexes: expiry reads \
                 every live row, and the dashboard's counts and lists read the namespace's \
                 history; add them with",
            );
        }
        if !self.fair_keys {
            return Some(
                "execution tables without the fairness-keys table and the fair claim's indexes: \
                 claims serve one namespace in plain priority order, and claims of several \
                 namespaces, with weights or with max_running_per_key are refused; add them with",
            );
        }
        if !self.callbacks_tables {
            return Some(
                "execution tables without the completion-webhook tables (created by an older \
                 onestep): submits with a callback are refused; add them with",
            );
        }
        if !self.buckets_table {
            return Some(
                "execution tables without the rate-limit buckets table (created by an older \
                 onestep): tasks with a rate_limit claim nothing; add it with",
            );
        }
        if !self.components_tables {
            return Some(
                "execution tables without the component store's tables (created by an older \
                 onestep): components cannot be stored; add them with",
            );
        }
        if !self.deployments_tables {
            return Some(
                "execution tables without the deployment tables (created by an older onestep): \
                 tasks cannot be deployed; add them with",
            );
        }
        if !self.steps_table {
            return Some(
                "execution tables without the durable steps table (created by an older \
                 onestep): handlers' step saves fail; add it with",
            );
        }
        (!self.parked_status).then_some(
            "an attempts table whose status CHECK predates 'parked' (created by an older \
             onestep): handlers that sleep cannot park and fail; allow it with",
        )
    }

    fn diagnostics_table(names: &TableNames) -> String {
        diagnostics_table(names)
    }

    fn traces_table(names: &TableNames) -> String {
        traces_table(names)
    }
}

/// Validates both table names against [`NAME_LIMIT`].
pub fn validate_names(names: &TableNames) -> Result<(), onestep_core::ExecutionError> {
    validate_identifier("executions_table", &names.executions, NAME_LIMIT)?;
    validate_identifier("attempts_table", &names.attempts, NAME_LIMIT)
}

fn derived(table: &str, prefix: &str, suffix: &str) -> String {
    derived_name(prefix, table, suffix, NAME_LIMIT)
}

/// The attempt-diagnostics table: `<A>_diagnostics`.
pub fn diagnostics_table(names: &TableNames) -> String {
    derived(&names.attempts, "", "diagnostics")
}

/// The trace-context table: `<T>_traces`.
pub fn traces_table(names: &TableNames) -> String {
    derived(&names.executions, "", "traces")
}

/// The fairness-keys table of the fair claim: `<T>_keys` (docs/semantics.md#fair-claim).
pub fn keys_table(names: &TableNames) -> String {
    derived(&names.executions, "", "keys")
}

/// The rate-limit buckets table: `<T>_buckets` (docs/semantics.md#rate-limits).
pub fn buckets_table(names: &TableNames) -> String {
    derived(&names.executions, "", "buckets")
}

/// The component store's header table: `<T>_components` (docs/semantics.md#component-store).
pub fn components_table(names: &TableNames) -> String {
    derived(&names.executions, "", "components")
}

/// The component store's chunks table: `<T>_component_chunks`.
pub fn component_chunks_table(names: &TableNames) -> String {
    derived(&names.executions, "", "component_chunks")
}

/// `CREATE TABLE` for the component headers: one row per stored component, written last in
/// its put's transaction.
pub fn components_ddl(names: &TableNames) -> String {
    format!(
        "CREATE TABLE {} (\n\
  digest TEXT NOT NULL PRIMARY KEY,\n\
  size INTEGER NOT NULL,\n\
  chunks INTEGER NOT NULL,\n\
  created_at TEXT NOT NULL\n\
)",
        q(&components_table(names))
    )
}

/// The component store's holders table: `<T>_component_holders`, which namespace stored which
/// component (docs/semantics.md#component-store); a tenant deploys only what it holds.
pub fn component_holders_table(names: &TableNames) -> String {
    derived(&names.executions, "", "component_holders")
}

/// `CREATE TABLE` + index for the component holders: one row per (namespace, digest) a
/// namespace stored, with when it last stored it; `ix_<T>_component_holders_digest` serves the
/// garbage collection.
pub fn component_holders_ddl(names: &TableNames) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {h} (\n\
  namespace TEXT NOT NULL,\n\
  digest TEXT NOT NULL,\n\
  stored_at TEXT NOT NULL,\n\
  PRIMARY KEY (namespace, digest)\n\
) WITHOUT ROWID;\n\
CREATE INDEX IF NOT EXISTS {ix} ON {h} (digest)",
        h = q(&component_holders_table(names)),
        ix = q(&derived(
            &names.executions,
            "ix_",
            "component_holders_digest"
        )),
    )
}

/// `CREATE TABLE` for the component chunks: up to 1 MiB per row.
pub fn component_chunks_ddl(names: &TableNames) -> String {
    format!(
        "CREATE TABLE {} (\n\
  digest TEXT NOT NULL,\n\
  seq INTEGER NOT NULL,\n\
  bytes BLOB NOT NULL,\n\
  PRIMARY KEY (digest, seq)\n\
)",
        q(&component_chunks_table(names))
    )
}

/// The deployments table: `<T>_deployments` (docs/deployments.md#data-model).
pub fn deployments_table(names: &TableNames) -> String {
    derived(&names.executions, "", "deployments")
}

/// The deployments' audit events: `<T>_deployment_events`.
pub fn deployment_events_table(names: &TableNames) -> String {
    derived(&names.executions, "", "deployment_events")
}

/// The deployments' revision (one row): `<T>_deployment_revision`.
pub fn deployment_revision_table(names: &TableNames) -> String {
    derived(&names.executions, "", "deployment_revision")
}

/// `CREATE TABLE` + indexes for the deployments: one row per version of a task; the partial
/// unique index `uq_<T>_deployments_active` keeps at most one active version per task,
/// `uq_<T>_deployments_revision` orders the history, `ix_<T>_deployments_digest` serves the
/// component garbage collection.
pub fn deployments_ddl(names: &TableNames) -> String {
    let t = &names.executions;
    format!(
        "CREATE TABLE IF NOT EXISTS {d} (\n\
  namespace TEXT NOT NULL,\n\
  task TEXT NOT NULL,\n\
  version INTEGER NOT NULL CHECK (version >= 1),\n\
  digest TEXT NOT NULL,\n\
  settings TEXT NOT NULL,\n\
  state TEXT NOT NULL CHECK (state IN ('active', 'superseded', 'inactive')),\n\
  deployed_by TEXT NOT NULL,\n\
  deployed_at TEXT NOT NULL,\n\
  previous_version INTEGER,\n\
  previous_digest TEXT,\n\
  note TEXT,\n\
  revision INTEGER NOT NULL,\n\
  updated_at TEXT NOT NULL,\n\
  PRIMARY KEY (namespace, task, version)\n\
) WITHOUT ROWID;\n\
CREATE UNIQUE INDEX IF NOT EXISTS {active} ON {d} (namespace, task) WHERE state = 'active';\n\
CREATE UNIQUE INDEX IF NOT EXISTS {rev} ON {d} (revision);\n\
CREATE INDEX IF NOT EXISTS {ns} ON {d} (namespace, revision);\n\
CREATE INDEX IF NOT EXISTS {digest} ON {d} (digest)",
        d = q(&deployments_table(names)),
        active = q(&derived(t, "uq_", "deployments_active")),
        rev = q(&derived(t, "uq_", "deployments_revision")),
        ns = q(&derived(t, "ix_", "deployments_namespace")),
        digest = q(&derived(t, "ix_", "deployments_digest")),
    )
}

/// `CREATE TABLE` + index for the audit events: one row per change, keyed by its revision.
pub fn deployment_events_ddl(names: &TableNames) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {e} (\n\
  revision INTEGER NOT NULL PRIMARY KEY,\n\
  namespace TEXT NOT NULL,\n\
  task TEXT NOT NULL,\n\
  action TEXT NOT NULL CHECK (action IN ('deploy', 'activate', 'deactivate')),\n\
  version INTEGER NOT NULL,\n\
  digest TEXT NOT NULL,\n\
  from_version INTEGER,\n\
  from_digest TEXT,\n\
  actor TEXT NOT NULL,\n\
  at TEXT NOT NULL,\n\
  note TEXT\n\
);\n\
CREATE INDEX IF NOT EXISTS {ix} ON {e} (namespace, task, revision)",
        e = q(&deployment_events_table(names)),
        ix = q(&derived(&names.executions, "ix_", "deployment_events_task")),
    )
}

/// `CREATE TABLE` for the revision: at most one row (`id = 1`), written by every change.
pub fn deployment_revision_ddl(names: &TableNames) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {} (\n\
  id INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),\n\
  revision INTEGER NOT NULL\n\
)",
        q(&deployment_revision_table(names))
    )
}

/// `CREATE TABLE` for the rate-limit buckets table: one row per bucket name.
pub fn buckets_ddl(names: &TableNames) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {} (\n\
  bucket TEXT NOT NULL PRIMARY KEY,\n\
  tokens REAL NOT NULL,\n\
  refilled_at TEXT NOT NULL,\n\
  paused_until TEXT\n\
) WITHOUT ROWID",
        q(&buckets_table(names))
    )
}

/// The completion-webhook outbox: `<T>_callbacks` (docs/semantics.md#completion-webhooks).
pub fn callbacks_table(names: &TableNames) -> String {
    derived(&names.executions, "", "callbacks")
}

/// The completion-webhook attempts: `<T>_deliveries`.
pub fn deliveries_table(names: &TableNames) -> String {
    derived(&names.executions, "", "deliveries")
}

/// `CREATE TABLE` + index for the outbox: one row per execution whose submit asked for a
/// callback; `ix_<T>_callbacks_due` holds the pending rows by due time.
pub fn callbacks_ddl(names: &TableNames) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {t} (\n\
  execution_id TEXT NOT NULL PRIMARY KEY,\n\
  namespace TEXT NOT NULL,\n\
  url TEXT NOT NULL,\n\
  events TEXT NOT NULL,\n\
  state TEXT NOT NULL,\n\
  attempts INTEGER NOT NULL DEFAULT 0,\n\
  round_start INTEGER NOT NULL DEFAULT 0,\n\
  next_at TEXT NOT NULL,\n\
  claimed_until TEXT,\n\
  last_status INTEGER,\n\
  last_error TEXT,\n\
  created_at TEXT NOT NULL,\n\
  updated_at TEXT NOT NULL,\n\
  started_done INTEGER NOT NULL DEFAULT 0,\n\
  progress_seq INTEGER NOT NULL DEFAULT 0,\n\
  progress_sent_at TEXT,\n\
  progress_after TEXT\n\
) WITHOUT ROWID;\n\
CREATE INDEX IF NOT EXISTS {ix} ON {t} (next_at) WHERE state = 'pending'",
        t = q(&callbacks_table(names)),
        ix = q(&derived(&names.executions, "ix_", "callbacks_due")),
    )
}

/// `CREATE TABLE` for the delivery attempts: one row per attempt.
pub fn deliveries_ddl(names: &TableNames) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {} (\n\
  execution_id TEXT NOT NULL,\n\
  attempt_no INTEGER NOT NULL,\n\
  event TEXT NOT NULL,\n\
  webhook_id TEXT NOT NULL,\n\
  status INTEGER,\n\
  error TEXT,\n\
  at TEXT NOT NULL,\n\
  PRIMARY KEY (execution_id, attempt_no)\n\
) WITHOUT ROWID",
        q(&deliveries_table(names))
    )
}

/// The fair claim's index of the executions table's pending rows: `ix_<T>_fair`.
pub fn fair_index(names: &TableNames) -> String {
    derived(&names.executions, "ix_", "fair")
}

/// The fair claim's index of the executions table's running rows (the cap's count):
/// `ix_<T>_fair_running`.
pub fn fair_running_index(names: &TableNames) -> String {
    derived(&names.executions, "ix_", "fair_running")
}

/// `"name"`: a validated identifier, quoted.
pub fn q(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The indexes of the executions table beyond the primary key: `(name, definition)`.
pub fn execution_indexes(names: &TableNames) -> Vec<(String, String)> {
    let t = &names.executions;
    let qt = q(t);
    let ix = |suffix: &str| derived(t, "ix_", suffix);
    vec![
        (
            derived(t, "uq_", "idempotency"),
            format!(
                "CREATE UNIQUE INDEX IF NOT EXISTS {{}} ON {qt} (namespace, task_name, \
                 idempotency_key) WHERE idempotency_key IS NOT NULL"
            ),
        ),
        (
            ix("claim_priority"),
            format!(
                "CREATE INDEX IF NOT EXISTS {{}} ON {qt} (namespace, task_name, priority, \
                 available_at, created_at, id) WHERE status IN ('queued', 'retrying')"
            ),
        ),
        (
            ix("lease"),
            format!(
                "CREATE INDEX IF NOT EXISTS {{}} ON {qt} (lease_expires_at, id) \
                 WHERE status IN ('running', 'cancel_requested')"
            ),
        ),
        (
            ix("list"),
            format!(
                "CREATE INDEX IF NOT EXISTS {{}} ON {qt} (namespace, created_at DESC, id DESC)"
            ),
        ),
        (
            ix("expiry"),
            format!(
                "CREATE INDEX IF NOT EXISTS {{}} ON {qt} (expires_at, id) \
                 WHERE status IN ('queued', 'retrying') AND expires_at IS NOT NULL"
            ),
        ),
        (
            fair_index(names),
            format!(
                "CREATE INDEX IF NOT EXISTS {{}} ON {qt} (task_name, \
                 COALESCE(fairness_key, namespace), namespace, priority, available_at, \
                 created_at, id) WHERE status IN ('queued', 'retrying')"
            ),
        ),
        (
            fair_running_index(names),
            format!(
                "CREATE INDEX IF NOT EXISTS {{}} ON {qt} (task_name, \
                 COALESCE(fairness_key, namespace), namespace, status) \
                 WHERE status IN ('running', 'cancel_requested')"
            ),
        ),
        (
            // The bounded counts of the submit quotas (docs/semantics.md#quotas).
            ix("quota"),
            format!(
                "CREATE INDEX IF NOT EXISTS {{}} ON {qt} (namespace, \
                 COALESCE(fairness_key, namespace)) WHERE status IN ('queued', 'retrying')"
            ),
        ),
        (
            ix("status"),
            format!(
                "CREATE INDEX IF NOT EXISTS {{}} ON {qt} (namespace, task_name, status, \
                 created_at DESC, id DESC)"
            ),
        ),
        (
            ix("status_list"),
            format!(
                "CREATE INDEX IF NOT EXISTS {{}} ON {qt} (namespace, status, created_at DESC, \
                 id DESC)"
            ),
        ),
        (
            ix("task_list"),
            format!(
                "CREATE INDEX IF NOT EXISTS {{}} ON {qt} (namespace, task_name, created_at DESC, \
                 id DESC)"
            ),
        ),
    ]
}

/// The statement creating index `name` from its [`execution_indexes`] definition.
pub fn index_sql(name: &str, definition: &str) -> String {
    definition.replacen("{}", &q(name), 1)
}

/// `CREATE TABLE` for the executions table (its indexes: [`execution_indexes`]).
pub fn executions_ddl(names: &TableNames) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {} (\n\
  id TEXT NOT NULL PRIMARY KEY,\n\
  namespace TEXT NOT NULL,\n\
  task_name TEXT NOT NULL,\n\
  status TEXT NOT NULL,\n\
  payload TEXT NOT NULL,\n\
  metadata TEXT DEFAULT '{{}}' NOT NULL,\n\
  result TEXT,\n\
  error TEXT,\n\
  idempotency_key TEXT,\n\
  submission_digest TEXT,\n\
  attempts INTEGER DEFAULT 0 NOT NULL,\n\
  available_at TEXT NOT NULL,\n\
  lease_token TEXT,\n\
  lease_expires_at TEXT,\n\
  worker_id TEXT,\n\
  cancel_reason TEXT,\n\
  cancel_requested_at TEXT,\n\
  expires_at TEXT,\n\
  created_at TEXT NOT NULL,\n\
  updated_at TEXT NOT NULL,\n\
  started_at TEXT,\n\
  finished_at TEXT,\n\
  version INTEGER DEFAULT 0 NOT NULL,\n\
  priority INTEGER DEFAULT 5 NOT NULL CONSTRAINT ck_onestep_execution_priority CHECK (priority BETWEEN 0 AND 9),\n\
  fairness_key TEXT,\n\
  CONSTRAINT ck_onestep_execution_status CHECK (status IN ('queued', 'running', 'retrying', 'succeeded', 'failed', 'cancel_requested', 'cancelled', 'expired')),\n\
  CONSTRAINT ck_onestep_execution_idempotency CHECK ((idempotency_key IS NULL AND submission_digest IS NULL) OR (idempotency_key IS NOT NULL AND submission_digest IS NOT NULL))\n\
)",
        q(&names.executions)
    )
}

/// The attempt statuses the attempts table allows (docs/steps.md#sleep adds `parked`).
pub const ATTEMPT_STATUSES: &str =
    "'running', 'succeeded', 'retrying', 'failed', 'cancelled', 'lease_lost', 'parked'";

/// The status list of attempts tables created before `parked`, as their stored DDL spells it.
const OLD_ATTEMPT_STATUSES: &str =
    "'running', 'succeeded', 'retrying', 'failed', 'cancelled', 'lease_lost'";

/// The stored `CREATE TABLE` of the attempts table when its status `CHECK` predates `parked`.
fn stale_attempts_sql(c: &Connection, attempts: &str) -> OpResult<Option<String>> {
    let sql: Option<String> = c
        .query_row(
            "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = ?1",
            rusqlite::params![attempts],
            |r| r.get(0),
        )
        .optional()?;
    Ok(sql.filter(|s| s.contains(OLD_ATTEMPT_STATUSES) && !s.contains("'parked'")))
}

/// `onestep migrate --upgrade`: lets the attempts table hold `parked` (docs/sqlite.md#schema) by
/// widening its status `CHECK` in the stored schema, SQLite's documented procedure for a change
/// that leaves the stored rows as they are (every row already satisfies the wider list):
/// `writable_schema`, the `CREATE TABLE` text rewritten, `schema_version` bumped, all in the
/// caller's `BEGIN IMMEDIATE` transaction. `true` when it changed something.
pub(crate) fn allow_parked(c: &Connection, names: &TableNames) -> OpResult<bool> {
    let Some(sql) = stale_attempts_sql(c, &names.attempts)? else {
        return Ok(false);
    };
    let widened = sql.replacen(OLD_ATTEMPT_STATUSES, ATTEMPT_STATUSES, 1);
    let version: i64 = c.query_row("PRAGMA schema_version", [], |r| r.get(0))?;
    c.execute_batch("PRAGMA writable_schema = ON")?;
    let written = c.execute(
        "UPDATE sqlite_schema SET sql = ?1 WHERE type = 'table' AND name = ?2",
        rusqlite::params![widened, names.attempts],
    );
    let bumped = c.execute_batch(&format!("PRAGMA schema_version = {}", version + 1));
    c.execute_batch("PRAGMA writable_schema = OFF")?;
    written?;
    bumped?;
    Ok(true)
}

/// `CREATE TABLE` + `CREATE INDEX` for the attempts table.
pub fn attempts_ddl(names: &TableNames) -> Vec<String> {
    let a = &names.attempts;
    vec![
        format!(
            "CREATE TABLE IF NOT EXISTS {qa} (\n\
  id TEXT NOT NULL PRIMARY KEY,\n\
  execution_id TEXT NOT NULL REFERENCES {qt} (id) ON DELETE CASCADE,\n\
  attempt_no INTEGER NOT NULL,\n\
  lease_token TEXT NOT NULL,\n\
  worker_id TEXT NOT NULL,\n\
  status TEXT NOT NULL,\n\
  error TEXT,\n\
  started_at TEXT NOT NULL,\n\
  heartbeat_at TEXT NOT NULL,\n\
  finished_at TEXT,\n\
  CONSTRAINT {uq} UNIQUE (execution_id, attempt_no),\n\
  CONSTRAINT ck_onestep_attempt_status CHECK (status IN ({ATTEMPT_STATUSES}))\n\
)",
            qa = q(a),
            qt = q(&names.executions),
            uq = q(&derived(a, "uq_", "execution_attempt")),
        ),
        format!(
            "CREATE INDEX IF NOT EXISTS {} ON {} (execution_id, attempt_no DESC)",
            q(&derived(a, "ix_", "execution")),
            q(a)
        ),
    ]
}

/// `CREATE TABLE` + `CREATE INDEX` for the attempt-diagnostics table (one row per attempt that
/// wrote diagnostics; `purge` deletes its rows with their execution).
pub fn diagnostics_ddl(names: &TableNames) -> Vec<String> {
    let d = diagnostics_table(names);
    vec![
        format!(
            "CREATE TABLE IF NOT EXISTS {} (\n\
  attempt_id TEXT NOT NULL PRIMARY KEY,\n\
  execution_id TEXT NOT NULL,\n\
  is_final INTEGER DEFAULT 0 NOT NULL,\n\
  message TEXT,\n\
  progress_done INTEGER,\n\
  progress_total INTEGER,\n\
  progress_note TEXT,\n\
  progress_at TEXT,\n\
  log_lines INTEGER DEFAULT 0 NOT NULL,\n\
  log_tail TEXT,\n\
  trap_kind TEXT,\n\
  component_digest TEXT,\n\
  fuel_consumed INTEGER,\n\
  peak_memory_bytes INTEGER,\n\
  updated_at TEXT NOT NULL\n\
)",
            q(&d)
        ),
        format!(
            "CREATE INDEX IF NOT EXISTS {} ON {} (execution_id)",
            q(&derived(&names.attempts, "ix_", "diagnostics_execution")),
            q(&d)
        ),
    ]
}

/// `CREATE TABLE` for the fairness-keys table: one row per `(task_name, namespace,
/// fairness_key)` that may have pending work, its stride `pass` and `ready_at`
/// (docs/semantics.md#fair-claim). Its pass index: [`keys_indexes`].
pub fn keys_ddl(names: &TableNames) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {} (\n\
  task_name TEXT NOT NULL,\n\
  namespace TEXT NOT NULL,\n\
  fairness_key TEXT NOT NULL,\n\
  pass INTEGER DEFAULT 0 NOT NULL,\n\
  ready_at TEXT NOT NULL,\n\
  PRIMARY KEY (task_name, namespace, fairness_key)\n\
) WITHOUT ROWID",
        q(&keys_table(names))
    )
}

/// The index of the fairness-keys table beyond its primary key: `(name, definition)`, the
/// candidates' order (least pass first).
pub fn keys_indexes(names: &TableNames) -> Vec<(String, String)> {
    vec![(
        derived(&names.executions, "ix_", "keys_pass"),
        format!(
            "CREATE INDEX IF NOT EXISTS {{}} ON {} (task_name, pass, namespace, fairness_key)",
            q(&keys_table(names))
        ),
    )]
}

/// `CREATE TABLE` for the trace-context table (the submit's W3C `traceparent`, one row per
/// execution, written only while traces are on).
pub fn traces_ddl(names: &TableNames) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {} (\n\
  execution_id TEXT NOT NULL PRIMARY KEY,\n\
  traceparent TEXT NOT NULL,\n\
  created_at TEXT NOT NULL\n\
)",
        q(&traces_table(names))
    )
}

/// The durable steps table: `<T>_steps` (docs/steps.md).
pub fn steps_table(names: &TableNames) -> String {
    derived(&names.executions, "", "steps")
}

/// `CREATE TABLE` for the durable steps: one row per (execution, key), `seq` the key's place in
/// first-save order. No foreign key: `onestep purge` deletes the rows with their execution.
pub fn steps_ddl(names: &TableNames) -> String {
    format!(
        "CREATE TABLE IF NOT EXISTS {} (\n\
  execution_id TEXT NOT NULL,\n\
  step_key TEXT NOT NULL,\n\
  seq INTEGER NOT NULL,\n\
  value TEXT NOT NULL,\n\
  bytes INTEGER NOT NULL,\n\
  attempt_id TEXT NOT NULL,\n\
  attempt_no INTEGER NOT NULL,\n\
  saved_at TEXT NOT NULL,\n\
  PRIMARY KEY (execution_id, step_key)\n\
) WITHOUT ROWID",
        q(&steps_table(names))
    )
}

fn exists(c: &Connection, kind: &str, name: &str) -> OpResult<bool> {
    let n: i64 = c.query_row(
        "SELECT count(*) FROM sqlite_master WHERE type = ?1 AND name = ?2",
        rusqlite::params![kind, name],
        |r| r.get(0),
    )?;
    Ok(n > 0)
}

/// Readiness on the writer connection: with `auto_create`, one `BEGIN IMMEDIATE` transaction
/// creates each missing table (executions first) with its indexes; without it, fail with
/// `missing execution tables: a, b`. Then detect [`SchemaFeatures`].
pub(crate) fn ensure_schema(
    c: &mut Connection,
    names: &TableNames,
    auto_create: bool,
) -> OpResult<SchemaReport> {
    let mut created = Vec::new();
    if auto_create {
        let tx = c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        if !exists(&tx, "table", &names.executions)? {
            tx.execute_batch(&executions_ddl(names))?;
            for (name, def) in execution_indexes(names) {
                tx.execute_batch(&index_sql(&name, &def))?;
            }
            created.push(names.executions.clone());
        }
        if !exists(&tx, "table", &names.attempts)? {
            for stmt in attempts_ddl(names) {
                tx.execute_batch(&stmt)?;
            }
            created.push(names.attempts.clone());
        }
        let d = diagnostics_table(names);
        if !exists(&tx, "table", &d)? {
            for stmt in diagnostics_ddl(names) {
                tx.execute_batch(&stmt)?;
            }
            created.push(d);
        }
        let tr = traces_table(names);
        if !exists(&tx, "table", &tr)? {
            tx.execute_batch(&traces_ddl(names))?;
            created.push(tr);
        }
        let k = keys_table(names);
        if !exists(&tx, "table", &k)? {
            tx.execute_batch(&keys_ddl(names))?;
            for (name, def) in keys_indexes(names) {
                tx.execute_batch(&index_sql(&name, &def))?;
            }
            created.push(k);
        }
        let b = buckets_table(names);
        if !exists(&tx, "table", &b)? {
            tx.execute_batch(&buckets_ddl(names))?;
            created.push(b);
        }
        for (table, ddl) in [
            (callbacks_table(names), callbacks_ddl(names)),
            (deliveries_table(names), deliveries_ddl(names)),
            (component_chunks_table(names), component_chunks_ddl(names)),
            (components_table(names), components_ddl(names)),
            (component_holders_table(names), component_holders_ddl(names)),
            (deployments_table(names), deployments_ddl(names)),
            (deployment_events_table(names), deployment_events_ddl(names)),
            (
                deployment_revision_table(names),
                deployment_revision_ddl(names),
            ),
            (steps_table(names), steps_ddl(names)),
        ] {
            if !exists(&tx, "table", &table)? {
                tx.execute_batch(&ddl)?;
                created.push(table);
            }
        }
        tx.commit()?;
    } else {
        let mut missing = Vec::new();
        for table in [&names.executions, &names.attempts] {
            if !exists(c, "table", table)? {
                missing.push(table.clone());
            }
        }
        if !missing.is_empty() {
            return Err(OpError::Domain(backend_error(
                "open",
                onestep_core::ConnectorKind::Misconfigured,
                &format!("missing execution tables: {}", missing.join(", ")),
                &[],
            )));
        }
    }
    let t = &names.executions;
    let priority_columns = has_priority_columns(c, t)?;
    let mut fair_keys = priority_columns && exists(c, "table", &keys_table(names))?;
    for name in [fair_index(names), fair_running_index(names)]
        .into_iter()
        .chain(keys_indexes(names).into_iter().map(|(n, _)| n))
    {
        fair_keys = fair_keys && exists(c, "index", &name)?;
    }
    let features = SchemaFeatures {
        expiry_index: exists(c, "index", &derived(t, "ix_", "expiry"))?,
        fair_keys,
        buckets_table: exists(c, "table", &buckets_table(names))?,
        callbacks_tables: exists(c, "table", &callbacks_table(names))?
            && exists(c, "table", &deliveries_table(names))?
            && column_exists(c, &callbacks_table(names), "progress_after")?,
        components_tables: exists(c, "table", &components_table(names))?
            && exists(c, "table", &component_chunks_table(names))?
            && exists(c, "table", &component_holders_table(names))?,
        deployments_tables: exists(c, "table", &deployments_table(names))?
            && exists(c, "table", &deployment_events_table(names))?
            && exists(c, "table", &deployment_revision_table(names))?,
        steps_table: exists(c, "table", &steps_table(names))?,
        parked_status: stale_attempts_sql(c, &names.attempts)?.is_none(),
        common: CommonFeatures {
            list_indexes: exists(c, "index", &derived(t, "ix_", "status"))?
                && exists(c, "index", &derived(t, "ix_", "status_list"))?
                && exists(c, "index", &derived(t, "ix_", "task_list"))?,
            diagnostics_table: exists(c, "table", &diagnostics_table(names))?,
            traces_table: exists(c, "table", &traces_table(names))?,
            priority_columns,
        },
    };
    Ok(SchemaReport::new(created, features))
}

/// The columns `onestep migrate --upgrade` adds to tables created before them
/// (docs/sqlite.md#schema): (name, `ADD COLUMN` definition).
pub const PRIORITY_COLUMNS: [(&str, &str); 2] = [
    (
        "priority",
        "priority INTEGER DEFAULT 5 NOT NULL CONSTRAINT ck_onestep_execution_priority \
         CHECK (priority BETWEEN 0 AND 9)",
    ),
    ("fairness_key", "fairness_key TEXT"),
];

/// The columns of the `started` and `progress` events (docs/semantics.md#completion-webhooks)
/// that `onestep migrate --upgrade` adds to an outbox created before them: (name, definition).
pub const CALLBACK_EVENT_COLUMNS: [(&str, &str); 4] = [
    ("started_done", "started_done INTEGER NOT NULL DEFAULT 0"),
    ("progress_seq", "progress_seq INTEGER NOT NULL DEFAULT 0"),
    ("progress_sent_at", "progress_sent_at TEXT"),
    ("progress_after", "progress_after TEXT"),
];

fn column_exists(c: &Connection, table: &str, column: &str) -> OpResult<bool> {
    let n: i64 = c.query_row(
        "SELECT count(*) FROM pragma_table_info(?1) WHERE name = ?2",
        rusqlite::params![table, column],
        |r| r.get(0),
    )?;
    Ok(n > 0)
}

/// Whether the executions table has both priority columns.
fn has_priority_columns(c: &Connection, table: &str) -> OpResult<bool> {
    for (column, _) in PRIORITY_COLUMNS {
        if !column_exists(c, table, column)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// `onestep migrate --upgrade`: the [`PRIORITY_COLUMNS`] the executions table lacks, added in
/// the caller's `BEGIN IMMEDIATE` transaction (an `ADD COLUMN` changes the schema only); returns
/// the columns added. Runs before [`add_missing_indexes`], whose claim index needs `priority`.
pub(crate) fn add_missing_columns(c: &Connection, names: &TableNames) -> OpResult<Vec<String>> {
    let mut added = Vec::new();
    for (column, def) in PRIORITY_COLUMNS {
        if !column_exists(c, &names.executions, column)? {
            c.execute_batch(&format!(
                "ALTER TABLE {} ADD COLUMN {def}",
                q(&names.executions)
            ))?;
            added.push(column.to_owned());
        }
    }
    let cb = callbacks_table(names);
    if exists(c, "table", &cb)? {
        for (column, def) in CALLBACK_EVENT_COLUMNS {
            if !column_exists(c, &cb, column)? {
                c.execute_batch(&format!("ALTER TABLE {} ADD COLUMN {def}", q(&cb)))?;
                added.push(format!("{cb}.{column}"));
            }
        }
    }
    Ok(added)
}

/// `onestep migrate --upgrade`: the indexes of [`execution_indexes`] the executions table lacks
/// and those of [`keys_indexes`] (the keys table itself is created at open, with the other
/// missing tables), created in the caller's `BEGIN IMMEDIATE` transaction; returns the names
/// added.
pub(crate) fn add_missing_indexes(c: &Connection, names: &TableNames) -> OpResult<Vec<String>> {
    let mut added = Vec::new();
    for (name, def) in execution_indexes(names)
        .into_iter()
        .chain(keys_indexes(names))
    {
        if !exists(c, "index", &name)? {
            c.execute_batch(&index_sql(&name, &def))?;
            added.push(name);
        }
    }
    Ok(added)
}
