//! Table DDL and schema readiness (docs/postgres.md#schema): the reference's PostgreSQL tables
//! (native `uuid`, `jsonb`, `timestamptz`, partial claim/lease/idempotency indexes), plus one
//! compatible addition, and `auto_create` serialised with `pg_advisory_xact_lock` on the same
//! key the reference takes, so that our creators and the reference's wait for each other.
//!
//! The addition is `ix_<T>_expiry (expires_at, id) WHERE status IN ('queued','retrying') AND
//! expires_at IS NOT NULL`, the index of the expiry maintenance (T5). Tables created by the
//! reference lack it; T5 then reads the live rows of the partial claim index instead, which
//! still never walks finished history.

use onestep_core::names::{TableNames, derived_name, validate_identifier};
use onestep_core::store::{CommonFeatures, SchemaFeatureSet};
use sha2::{Digest, Sha256};

use crate::errors::{OpError, OpResult, backend_error};

/// PostgreSQL's identifier length limit (NAMEDATALEN - 1).
pub const PG_NAME_LIMIT: usize = 63;

onestep_core::schema_features! {
    /// Which optional schema additions the opened tables have (detected once at open): the
    /// [`CommonFeatures`] (filtered-list indexes — `ix_<T>_status` at its full width,
    /// `ix_<T>_status_list` and `ix_<T>_task_list`; the tables `<A>_diagnostics` and
    /// `<T>_traces`, docs/postgres.md#diagnostics-and-traces), reached through `Deref`, plus the
    /// expiry index.
    pub struct SchemaFeatures {
        /// The executions table has the `ix_<T>_expiry` partial index (created by this crate).
        pub expiry_index: bool,
        /// The executions table has `ix_<T>_claim_priority` (created by this crate or
        /// `onestep migrate --upgrade`).
        pub claim_priority_index: bool,
        /// The fairness-keys table `<T>_keys` and the executions table's `ix_<T>_fair` and
        /// `ix_<T>_fair_running` exist (docs/semantics.md#fair-claim): single-task claims are
        /// fair claims.
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
        /// The executions table has the notify trigger and `<T>_listeners` exists
        /// (docs/postgres.md#change-notifications): the API may `LISTEN`.
        pub notify_trigger: bool,
        /// The attempts table's status `CHECK` allows `parked` (docs/steps.md#sleep).
        pub parked_status: bool,
    }
    /// What readiness did: the tables created and the [`SchemaFeatures`] detected; without our
    /// indexes (reference-created tables), the exact `onestep migrate --upgrade` command that
    /// adds them (docs/postgres.md#upgrading-reference-tables).
    pub type SchemaReport;
}

impl SchemaFeatureSet for SchemaFeatures {
    // docs/observability.md#attempt-diagnostics
    const DIAGNOSTICS_ABSENT: &'static str = "the attempt-diagnostics table is absent: attempts' \
        messages, progress and log lines are not kept; `onestep migrate` creates it";

    // docs/postgres.md#upgrading-reference-tables
    fn upgrade_warning(&self) -> Option<&'static str> {
        if !(self.priority_columns && self.claim_priority_index && self.fair_keys) {
            return Some(
                "execution tables without the priority and fairness_key columns, their claim \
                 index or the fairness-keys table (created by the reference or an older \
                 onestep?): every execution runs at priority 5, submits that set either are \
                 refused, and claims are not fair; add them online with",
            );
        }
        if !self.buckets_table {
            return Some(
                "execution tables without the rate-limit buckets table (created by an older \
                 onestep?): tasks with a rate_limit claim nothing; add it online with",
            );
        }
        if !self.callbacks_tables {
            return Some(
                "execution tables without the completion-webhook tables (created by an older \
                 onestep?): submits with a callback are refused; add them online with",
            );
        }
        if !self.components_tables {
            return Some(
                "execution tables without the component store's tables (created by an older \
                 onestep?): components cannot be stored; add them online with",
            );
        }
        if !self.deployments_tables {
            return Some(
                "execution tables without the deployment tables (created by an older \
                 onestep?): tasks cannot be deployed; add them online with",
            );
        }
        if !self.steps_table {
            return Some(
                "execution tables without the durable steps table (created by an older \
                 onestep?): handlers' step saves fail; add it online with",
            );
        }
        if !self.notify_trigger {
            return Some(
                "execution tables without the notify trigger (created by the reference or an \
                 older onestep?): callers waiting through the API learn of completions at the \
                 next poll, not at once (docs/postgres.md#change-notifications); add it online \
                 with",
            );
        }
        if !self.parked_status {
            return Some(
                "an attempts table whose status CHECK predates 'parked' (created by the \
                 reference or an older onestep?): handlers that sleep cannot park and fail; \
                 allow it online with",
            );
        }
        (!(self.expiry_index && self.list_indexes)).then_some(
            "execution tables without onestep's expiry and status indexes (created by the \
             reference or an older onestep?): expiry reads every live row, and the dashboard's \
             counts and lists and purges by status read the namespace's history; add them \
             online with",
        )
    }

    fn diagnostics_table(names: &TableNames) -> String {
        diagnostics_table(names)
    }

    fn traces_table(names: &TableNames) -> String {
        traces_table(names)
    }
}

/// Validates both table names against PostgreSQL's 63-character limit (TableNames already
/// checked the identifier shape).
pub fn validate_names(names: &TableNames) -> Result<(), onestep_core::ExecutionError> {
    validate_identifier("executions_table", &names.executions, PG_NAME_LIMIT)?;
    validate_identifier("attempts_table", &names.attempts, PG_NAME_LIMIT)
}

fn derived(table: &str, prefix: &str, suffix: &str) -> String {
    derived_name(prefix, table, suffix, PG_NAME_LIMIT)
}

/// Index and constraint names, derived from the table names with PostgreSQL's limit.
pub fn ix_expiry(names: &TableNames) -> String {
    derived(&names.executions, "ix_", "expiry")
}

/// `ix_<T>_status`, hash-truncated to 63.
pub fn ix_status(names: &TableNames) -> String {
    derived(&names.executions, "ix_", "status")
}

/// The columns of [`ix_status`]: the grouped counts read its prefix, a list filtered by task
/// and status its range in list order.
pub const IX_STATUS_COLUMNS: &str = "namespace, task_name, status, created_at DESC, id DESC";

/// How many columns [`IX_STATUS_COLUMNS`] has (an older onestep's index had the first three).
pub const IX_STATUS_WIDTH: i16 = 5;

/// `ix_<T>_status_list`, hash-truncated to 63: a list filtered by status alone and a purge by
/// named statuses read one range per status in list order.
pub fn ix_status_list(names: &TableNames) -> String {
    derived(&names.executions, "ix_", "status_list")
}

/// `ix_<T>_task_list`, hash-truncated to 63: a list filtered by task alone reads one range in
/// list order; its entries never change after the insert.
pub fn ix_task_list(names: &TableNames) -> String {
    derived(&names.executions, "ix_", "task_list")
}

/// `ix_<T>_status_wide`: the name [`ix_status`] is rebuilt under before it replaces an
/// older, narrower one (crate::upgrade).
pub fn ix_status_wide(names: &TableNames) -> String {
    derived(&names.executions, "ix_", "status_wide")
}

/// The attempt-diagnostics table: `<A>_diagnostics`, hash-truncated to 63.
pub fn diagnostics_table(names: &TableNames) -> String {
    derived(&names.attempts, "", "diagnostics")
}

/// The trace-context table: `<T>_traces`, hash-truncated to 63.
pub fn traces_table(names: &TableNames) -> String {
    derived(&names.executions, "", "traces")
}

/// `"name"`: a validated identifier, quoted.
pub fn q(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// The advisory-lock key of a table pair: the first 8 bytes (big-endian, signed) of the
/// SHA-256 of `executions NUL attempts`, the key the reference's table creation takes.
pub fn pair_lock_key(names: &TableNames) -> i64 {
    let digest = Sha256::digest(format!("{}\0{}", names.executions, names.attempts).as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

/// `CREATE TABLE` + `CREATE INDEX` statements for the executions table.
pub fn executions_ddl(names: &TableNames) -> Vec<String> {
    let t = &names.executions;
    let qt = q(t);
    vec![
        format!(
            "CREATE TABLE {qt} (\n\
  id UUID NOT NULL,\n\
  namespace VARCHAR(255) NOT NULL,\n\
  task_name VARCHAR(255) NOT NULL,\n\
  status VARCHAR(32) NOT NULL,\n\
  payload JSONB NOT NULL,\n\
  metadata JSONB DEFAULT '{{}}' NOT NULL,\n\
  result JSONB,\n\
  error JSONB,\n\
  idempotency_key VARCHAR(255),\n\
  submission_digest VARCHAR(64),\n\
  attempts INTEGER DEFAULT '0' NOT NULL,\n\
  available_at TIMESTAMP WITH TIME ZONE NOT NULL,\n\
  lease_token UUID,\n\
  lease_expires_at TIMESTAMP WITH TIME ZONE,\n\
  worker_id VARCHAR(255),\n\
  cancel_reason VARCHAR(500),\n\
  cancel_requested_at TIMESTAMP WITH TIME ZONE,\n\
  expires_at TIMESTAMP WITH TIME ZONE,\n\
  created_at TIMESTAMP WITH TIME ZONE NOT NULL,\n\
  updated_at TIMESTAMP WITH TIME ZONE NOT NULL,\n\
  started_at TIMESTAMP WITH TIME ZONE,\n\
  finished_at TIMESTAMP WITH TIME ZONE,\n\
  version BIGINT DEFAULT '0' NOT NULL,\n\
  priority SMALLINT DEFAULT 5 NOT NULL,\n\
  fairness_key VARCHAR(255),\n\
  PRIMARY KEY (id),\n\
  CONSTRAINT {ck_priority} CHECK (priority BETWEEN 0 AND 9),\n\
  CONSTRAINT ck_onestep_execution_status CHECK (status IN ('queued', 'running', 'retrying', 'succeeded', 'failed', 'cancel_requested', 'cancelled', 'expired')),\n\
  CONSTRAINT ck_onestep_execution_idempotency CHECK ((idempotency_key IS NULL AND submission_digest IS NULL) OR (idempotency_key IS NOT NULL AND submission_digest IS NOT NULL))\n\
)",
            ck_priority = CK_PRIORITY,
        ),
        format!(
            "CREATE UNIQUE INDEX {} ON {qt} (namespace, task_name, idempotency_key) \
             WHERE idempotency_key IS NOT NULL",
            q(&derived(t, "uq_", "idempotency"))
        ),
        claim_priority_index_sql(names, false),
        fair_index_sql(names, false),
        fair_running_index_sql(names, false),
        quota_index_sql(names, false),
        format!(
            "CREATE INDEX {} ON {qt} (lease_expires_at, id) \
             WHERE status IN ('running', 'cancel_requested')",
            q(&derived(t, "ix_", "lease"))
        ),
        format!(
            "CREATE INDEX {} ON {qt} (namespace, created_at DESC, id DESC)",
            q(&derived(t, "ix_", "list"))
        ),
        expiry_index_sql(names, false),
        status_index_sql(names, false),
        status_list_index_sql(names, false),
        task_list_index_sql(names, false),
    ]
}

/// The CHECK constraint keeping `priority` in 0..=9 (a table's constraint names are its own).
pub const CK_PRIORITY: &str = "ck_onestep_execution_priority";

/// `ix_<T>_claim_priority`, hash-truncated to 63: the claim's index on tables with the
/// priority columns.
pub fn ix_claim_priority(names: &TableNames) -> String {
    derived(&names.executions, "ix_", "claim_priority")
}

/// The claim read in its order (docs/postgres.md#schema): the live rows of one (namespace,
/// task) by priority, then `available_at`, `created_at`, `id`. It takes the place of the
/// reference's `ix_<T>_claim` on tables we create; `onestep migrate --upgrade` adds it beside it.
pub fn claim_priority_index_sql(names: &TableNames, concurrently: bool) -> String {
    format!(
        "{} {} ON {} (namespace, task_name, priority, available_at, created_at, id) \
         WHERE status IN ('queued', 'retrying')",
        create_index(concurrently),
        q(&ix_claim_priority(names)),
        q(&names.executions)
    )
}

/// The fairness-keys table of the fair claim (docs/semantics.md#fair-claim): `<T>_keys`.
pub fn keys_table(names: &TableNames) -> String {
    derived(&names.executions, "", "keys")
}

/// `ix_<T>_fair`: the pending rows of one (task, key, namespace) in claim order.
pub fn ix_fair(names: &TableNames) -> String {
    derived(&names.executions, "ix_", "fair")
}

/// `ix_<T>_fair_running`: the running rows of one (task, key, namespace), for the cap.
pub fn ix_fair_running(names: &TableNames) -> String {
    derived(&names.executions, "ix_", "fair_running")
}

/// The key of a row (docs/semantics.md#fair-claim), as the fair indexes spell it.
pub const KEY_EXPR: &str = "COALESCE(fairness_key, namespace)";

/// The fair claim's head read and the sweep's skip scan (docs/postgres.md#fair-claim).
pub fn fair_index_sql(names: &TableNames, concurrently: bool) -> String {
    format!(
        "{} {} ON {} (task_name, ({KEY_EXPR}), namespace, priority, available_at, created_at, id) \
         WHERE status IN ('queued', 'retrying')",
        create_index(concurrently),
        q(&ix_fair(names)),
        q(&names.executions)
    )
}

/// The per-key running count of the cap (docs/postgres.md#fair-claim).
pub fn fair_running_index_sql(names: &TableNames, concurrently: bool) -> String {
    format!(
        "{} {} ON {} (task_name, ({KEY_EXPR}), namespace) \
         WHERE status IN ('running', 'cancel_requested')",
        create_index(concurrently),
        q(&ix_fair_running(names)),
        q(&names.executions)
    )
}

/// The rate-limit buckets table (docs/semantics.md#rate-limits): `<T>_buckets`.
pub fn buckets_table(names: &TableNames) -> String {
    derived(&names.executions, "", "buckets")
}

/// The rate-limit buckets table (`IF NOT EXISTS`: also the upgrade's).
pub fn buckets_ddl(names: &TableNames) -> Vec<String> {
    vec![format!(
        "CREATE TABLE IF NOT EXISTS {} (\n\
  bucket VARCHAR(512) NOT NULL,\n\
  tokens DOUBLE PRECISION NOT NULL,\n\
  refilled_at TIMESTAMP WITH TIME ZONE NOT NULL,\n\
  paused_until TIMESTAMP WITH TIME ZONE,\n\
  PRIMARY KEY (bucket)\n\
)",
        q(&buckets_table(names))
    )]
}

/// The completion-webhook outbox (docs/semantics.md#completion-webhooks): `<T>_callbacks`.
pub fn callbacks_table(names: &TableNames) -> String {
    derived(&names.executions, "", "callbacks")
}

/// The completion-webhook attempts: `<T>_deliveries`.
pub fn deliveries_table(names: &TableNames) -> String {
    derived(&names.executions, "", "deliveries")
}

/// The outbox table (`IF NOT EXISTS`: also the upgrade's): one row per execution whose submit
/// asked for a callback, written in the submit's transaction; `ix_<T>_callbacks_due` holds the
/// pending rows by due time.
pub fn callbacks_ddl(names: &TableNames) -> Vec<String> {
    vec![
        format!(
            "CREATE TABLE IF NOT EXISTS {} (\n\
  execution_id UUID NOT NULL,\n\
  namespace VARCHAR(255) NOT NULL,\n\
  url TEXT NOT NULL,\n\
  events VARCHAR(255) NOT NULL,\n\
  state VARCHAR(16) NOT NULL,\n\
  attempts INTEGER DEFAULT 0 NOT NULL,\n\
  round_start INTEGER DEFAULT 0 NOT NULL,\n\
  next_at TIMESTAMP WITH TIME ZONE NOT NULL,\n\
  claimed_until TIMESTAMP WITH TIME ZONE,\n\
  last_status INTEGER,\n\
  last_error TEXT,\n\
  created_at TIMESTAMP WITH TIME ZONE NOT NULL,\n\
  updated_at TIMESTAMP WITH TIME ZONE NOT NULL,\n\
  started_done BOOLEAN DEFAULT false NOT NULL,\n\
  progress_seq INTEGER DEFAULT 0 NOT NULL,\n\
  progress_sent_at TIMESTAMP WITH TIME ZONE,\n\
  progress_after TIMESTAMP WITH TIME ZONE,\n\
  PRIMARY KEY (execution_id)\n\
)",
            q(&callbacks_table(names))
        ),
        format!(
            "CREATE INDEX IF NOT EXISTS {} ON {} (next_at) WHERE state = 'pending'",
            q(&derived(&names.executions, "ix_", "callbacks_due")),
            q(&callbacks_table(names))
        ),
    ]
}

/// The columns of the `started` and `progress` events (docs/semantics.md#completion-webhooks)
/// that `onestep migrate --upgrade` adds to an outbox created before them (catalog only:
/// constant defaults).
pub const CALLBACK_EVENT_COLUMNS: [&str; 4] = [
    "started_done BOOLEAN DEFAULT false NOT NULL",
    "progress_seq INTEGER DEFAULT 0 NOT NULL",
    "progress_sent_at TIMESTAMP WITH TIME ZONE",
    "progress_after TIMESTAMP WITH TIME ZONE",
];

/// The `ALTER TABLE` adding [`CALLBACK_EVENT_COLUMNS`] (`IF NOT EXISTS`: a no-op on an outbox
/// that has them).
pub fn callback_columns_sql(names: &TableNames) -> String {
    let adds = CALLBACK_EVENT_COLUMNS
        .iter()
        .map(|c| format!("ADD COLUMN IF NOT EXISTS {c}"))
        .collect::<Vec<_>>()
        .join(", ");
    format!("ALTER TABLE {} {adds}", q(&callbacks_table(names)))
}

/// Whether the outbox has the event columns.
pub(crate) async fn has_callback_columns<C: tokio_postgres::GenericClient>(
    c: &C,
    names: &TableNames,
) -> OpResult<bool> {
    let row = c
        .query_one(
            "SELECT count(*) FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = $1 \
             AND column_name IN ('started_done', 'progress_seq', 'progress_sent_at', \
             'progress_after')",
            &[&callbacks_table(names)],
        )
        .await?;
    Ok(row.try_get::<_, i64>(0)? == 4)
}

/// The delivery attempts table (`IF NOT EXISTS`: also the upgrade's): one row per attempt.
pub fn deliveries_ddl(names: &TableNames) -> Vec<String> {
    vec![format!(
        "CREATE TABLE IF NOT EXISTS {} (\n\
  execution_id UUID NOT NULL,\n\
  attempt_no INTEGER NOT NULL,\n\
  event VARCHAR(64) NOT NULL,\n\
  webhook_id VARCHAR(255) NOT NULL,\n\
  status INTEGER,\n\
  error TEXT,\n\
  at TIMESTAMP WITH TIME ZONE NOT NULL,\n\
  PRIMARY KEY (execution_id, attempt_no)\n\
)",
        q(&deliveries_table(names))
    )]
}

/// The component store's header table (docs/semantics.md#component-store): `<T>_components`.
pub fn components_table(names: &TableNames) -> String {
    derived(&names.executions, "", "components")
}

/// The component store's chunks table: `<T>_component_chunks`.
pub fn component_chunks_table(names: &TableNames) -> String {
    derived(&names.executions, "", "component_chunks")
}

/// The component headers (`IF NOT EXISTS`: also the upgrade's): one row per stored component,
/// written last in its put's transaction.
pub fn components_ddl(names: &TableNames) -> Vec<String> {
    vec![format!(
        "CREATE TABLE IF NOT EXISTS {} (\n\
  digest VARCHAR(71) NOT NULL,\n\
  size BIGINT NOT NULL,\n\
  chunks INTEGER NOT NULL,\n\
  created_at TIMESTAMP WITH TIME ZONE NOT NULL,\n\
  PRIMARY KEY (digest)\n\
)",
        q(&components_table(names))
    )]
}

/// The component store's holders table: `<T>_component_holders`, which namespace stored which
/// component (docs/semantics.md#component-store); a tenant deploys only what it holds.
pub fn component_holders_table(names: &TableNames) -> String {
    derived(&names.executions, "", "component_holders")
}

/// The component holders (`IF NOT EXISTS`: also the upgrade's): one row per (namespace, digest)
/// a namespace stored, with when it last stored it; `ix_<T>_component_holders_digest` serves
/// the garbage collection.
pub fn component_holders_ddl(names: &TableNames) -> Vec<String> {
    let h = q(&component_holders_table(names));
    vec![
        format!(
            "CREATE TABLE IF NOT EXISTS {h} (\n\
  namespace VARCHAR(255) NOT NULL,\n\
  digest VARCHAR(71) NOT NULL,\n\
  stored_at TIMESTAMP WITH TIME ZONE NOT NULL,\n\
  PRIMARY KEY (namespace, digest)\n\
)"
        ),
        format!(
            "CREATE INDEX IF NOT EXISTS {} ON {h} (digest)",
            q(&derived(
                &names.executions,
                "ix_",
                "component_holders_digest"
            ))
        ),
    ]
}

/// The component chunks (`IF NOT EXISTS`: also the upgrade's): up to 1 MiB per row.
pub fn component_chunks_ddl(names: &TableNames) -> Vec<String> {
    vec![format!(
        "CREATE TABLE IF NOT EXISTS {} (\n\
  digest VARCHAR(71) NOT NULL,\n\
  seq INTEGER NOT NULL,\n\
  bytes BYTEA NOT NULL,\n\
  PRIMARY KEY (digest, seq)\n\
)",
        q(&component_chunks_table(names))
    )]
}

/// The deployments table (docs/deployments.md#data-model): `<T>_deployments`.
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

/// The deployments (`IF NOT EXISTS`: also the upgrade's): one row per version of a task; the
/// partial unique index `uq_<T>_deployments_active` keeps at most one active version per task,
/// `uq_<T>_deployments_revision` orders the history, `ix_<T>_deployments_namespace` pages a
/// namespace's and `ix_<T>_deployments_digest` serves the component garbage collection.
pub fn deployments_ddl(names: &TableNames) -> Vec<String> {
    let t = &names.executions;
    let d = q(&deployments_table(names));
    vec![
        format!(
            "CREATE TABLE IF NOT EXISTS {d} (\n\
  namespace VARCHAR(255) NOT NULL,\n\
  task VARCHAR(255) NOT NULL,\n\
  version BIGINT NOT NULL CHECK (version >= 1),\n\
  digest VARCHAR(71) NOT NULL,\n\
  settings TEXT NOT NULL,\n\
  state VARCHAR(16) NOT NULL CHECK (state IN ('active', 'superseded', 'inactive')),\n\
  deployed_by VARCHAR(255) NOT NULL,\n\
  deployed_at TIMESTAMP WITH TIME ZONE NOT NULL,\n\
  previous_version BIGINT,\n\
  previous_digest VARCHAR(71),\n\
  note TEXT,\n\
  revision BIGINT NOT NULL,\n\
  updated_at TIMESTAMP WITH TIME ZONE NOT NULL,\n\
  PRIMARY KEY (namespace, task, version)\n\
)"
        ),
        format!(
            "CREATE UNIQUE INDEX IF NOT EXISTS {} ON {d} (namespace, task) \
             WHERE state = 'active'",
            q(&derived(t, "uq_", "deployments_active"))
        ),
        format!(
            "CREATE UNIQUE INDEX IF NOT EXISTS {} ON {d} (revision)",
            q(&derived(t, "uq_", "deployments_revision"))
        ),
        format!(
            "CREATE INDEX IF NOT EXISTS {} ON {d} (namespace, revision)",
            q(&derived(t, "ix_", "deployments_namespace"))
        ),
        format!(
            "CREATE INDEX IF NOT EXISTS {} ON {d} (digest)",
            q(&derived(t, "ix_", "deployments_digest"))
        ),
    ]
}

/// The audit events (`IF NOT EXISTS`: also the upgrade's): one row per change, keyed by its
/// revision; `ix_<T>_deployment_events_task` pages a namespace's or a task's.
pub fn deployment_events_ddl(names: &TableNames) -> Vec<String> {
    let e = q(&deployment_events_table(names));
    vec![
        format!(
            "CREATE TABLE IF NOT EXISTS {e} (\n\
  revision BIGINT NOT NULL PRIMARY KEY,\n\
  namespace VARCHAR(255) NOT NULL,\n\
  task VARCHAR(255) NOT NULL,\n\
  action VARCHAR(16) NOT NULL CHECK (action IN ('deploy', 'activate', 'deactivate')),\n\
  version BIGINT NOT NULL,\n\
  digest VARCHAR(71) NOT NULL,\n\
  from_version BIGINT,\n\
  from_digest VARCHAR(71),\n\
  actor VARCHAR(255) NOT NULL,\n\
  at TIMESTAMP WITH TIME ZONE NOT NULL,\n\
  note TEXT\n\
)"
        ),
        format!(
            "CREATE INDEX IF NOT EXISTS {} ON {e} (namespace, task, revision)",
            q(&derived(&names.executions, "ix_", "deployment_events_task"))
        ),
    ]
}

/// The revision (`IF NOT EXISTS`: also the upgrade's): at most one row (`id = 1`), locked and
/// written by every change.
pub fn deployment_revision_ddl(names: &TableNames) -> Vec<String> {
    vec![format!(
        "CREATE TABLE IF NOT EXISTS {} (\n\
  id SMALLINT NOT NULL PRIMARY KEY CHECK (id = 1),\n\
  revision BIGINT NOT NULL\n\
)",
        q(&deployment_revision_table(names))
    )]
}

/// `ix_<T>_quota`: the waiting rows of one namespace by key, for the submit quotas.
pub fn ix_quota(names: &TableNames) -> String {
    derived(&names.executions, "ix_", "quota")
}

/// The bounded counts of the submit quotas (docs/semantics.md#quotas): a namespace's waiting
/// rows, and one key's among them, are each one range.
pub fn quota_index_sql(names: &TableNames, concurrently: bool) -> String {
    format!(
        "{} {} ON {} (namespace, ({KEY_EXPR})) WHERE status IN ('queued', 'retrying')",
        create_index(concurrently),
        q(&ix_quota(names)),
        q(&names.executions)
    )
}

/// The fairness-keys table and its pass index (`IF NOT EXISTS`: also the upgrade's).
pub fn keys_ddl(names: &TableNames) -> Vec<String> {
    let k = keys_table(names);
    vec![
        format!(
            "CREATE TABLE IF NOT EXISTS {} (\n\
  task_name VARCHAR(255) NOT NULL,\n\
  namespace VARCHAR(255) NOT NULL,\n\
  fairness_key VARCHAR(255) NOT NULL,\n\
  pass BIGINT DEFAULT 0 NOT NULL,\n\
  ready_at TIMESTAMP WITH TIME ZONE NOT NULL,\n\
  PRIMARY KEY (task_name, namespace, fairness_key)\n\
)",
            q(&k)
        ),
        format!(
            "CREATE INDEX IF NOT EXISTS {} ON {} (task_name, pass, namespace, fairness_key)",
            q(&derived(&k, "ix_", "pass")),
            q(&k)
        ),
    ]
}

/// Whether the executions table has both priority columns (docs/semantics.md#priority-and-fairness-key).
pub(crate) async fn has_priority_columns<C: tokio_postgres::GenericClient>(
    c: &C,
    table: &str,
) -> OpResult<bool> {
    let row = c
        .query_one(
            "SELECT count(*) FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = $1 \
             AND column_name IN ('priority', 'fairness_key')",
            &[&table],
        )
        .await?;
    Ok(row.try_get::<_, i64>(0)? == 2)
}

fn create_index(concurrently: bool) -> &'static str {
    if concurrently {
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS"
    } else {
        "CREATE INDEX"
    }
}

/// Our first addition: the range of the expiry maintenance (T5). `concurrently` for
/// `onestep migrate --upgrade` on existing tables.
pub fn expiry_index_sql(names: &TableNames, concurrently: bool) -> String {
    format!(
        "{} {} ON {} (expires_at, id) \
         WHERE status IN ('queued', 'retrying') AND expires_at IS NOT NULL",
        create_index(concurrently),
        q(&ix_expiry(names)),
        q(&names.executions)
    )
}

/// Our second addition: the dashboard's grouped counts and the API's gauge
/// (docs/ui.md#overview-queries), and lists filtered by task and status.
pub fn status_index_sql(names: &TableNames, concurrently: bool) -> String {
    status_index_named(names, &ix_status(names), concurrently)
}

/// [`status_index_sql`] under another name (the rebuild of an older, narrower index).
pub fn status_index_named(names: &TableNames, index: &str, concurrently: bool) -> String {
    format!(
        "{} {} ON {} ({IX_STATUS_COLUMNS})",
        create_index(concurrently),
        q(index),
        q(&names.executions)
    )
}

/// Our fourth addition: lists filtered by task alone.
pub fn task_list_index_sql(names: &TableNames, concurrently: bool) -> String {
    format!(
        "{} {} ON {} (namespace, task_name, created_at DESC, id DESC)",
        create_index(concurrently),
        q(&ix_task_list(names)),
        q(&names.executions)
    )
}

/// Our third addition: lists filtered by status alone and purges by named statuses.
pub fn status_list_index_sql(names: &TableNames, concurrently: bool) -> String {
    format!(
        "{} {} ON {} (namespace, status, created_at DESC, id DESC)",
        create_index(concurrently),
        q(&ix_status_list(names)),
        q(&names.executions)
    )
}

/// The attempts table's `fillfactor` (docs/postgres.md#attempts-fillfactor): each attempt row is
/// updated once or more after its insert (its completion, heartbeats), and none of those
/// updates changes an indexed column, so with room left on the row's page PostgreSQL writes
/// them as HOT updates (no new entry in the table's three indexes). The reference creates the
/// table at the default 100; `onestep migrate --upgrade` sets ours.
pub const ATTEMPTS_FILLFACTOR: u8 = 70;

/// The attempts table's status `CHECK` (the reference's name).
pub const CK_ATTEMPT_STATUS: &str = "ck_onestep_attempt_status";

/// The attempt statuses our attempts table allows: the reference's and `parked`
/// (docs/steps.md#sleep).
pub const ATTEMPT_STATUSES: &str =
    "'running', 'succeeded', 'retrying', 'failed', 'cancelled', 'lease_lost', 'parked'";

/// `CREATE TABLE` + `CREATE INDEX` statements for the attempts table.
pub fn attempts_ddl(names: &TableNames) -> Vec<String> {
    let a = &names.attempts;
    vec![
        format!(
            "CREATE TABLE {qa} (\n\
  id UUID NOT NULL,\n\
  execution_id UUID NOT NULL,\n\
  attempt_no INTEGER NOT NULL,\n\
  lease_token UUID NOT NULL,\n\
  worker_id VARCHAR(255) NOT NULL,\n\
  status VARCHAR(32) NOT NULL,\n\
  error JSONB,\n\
  started_at TIMESTAMP WITH TIME ZONE NOT NULL,\n\
  heartbeat_at TIMESTAMP WITH TIME ZONE NOT NULL,\n\
  finished_at TIMESTAMP WITH TIME ZONE,\n\
  PRIMARY KEY (id),\n\
  FOREIGN KEY(execution_id) REFERENCES {qt} (id) ON DELETE CASCADE,\n\
  CONSTRAINT {uq} UNIQUE (execution_id, attempt_no),\n\
  CONSTRAINT {CK_ATTEMPT_STATUS} CHECK (status IN ({ATTEMPT_STATUSES}))\n\
) WITH (fillfactor = {ATTEMPTS_FILLFACTOR})",
            qa = q(a),
            qt = q(&names.executions),
            uq = q(&derived(a, "uq_", "execution_attempt")),
        ),
        format!(
            "CREATE INDEX {} ON {} (execution_id, attempt_no DESC)",
            q(&derived(a, "ix_", "execution")),
            q(a)
        ),
    ]
}

/// `CREATE TABLE` + `CREATE INDEX` for the attempt-diagnostics table
/// (docs/postgres.md#diagnostics-and-traces): one row per attempt that wrote diagnostics. No
/// foreign key, so it fits next to the reference's tables; `purge` deletes its rows with their
/// execution.
pub fn diagnostics_ddl(names: &TableNames) -> Vec<String> {
    let d = diagnostics_table(names);
    vec![
        format!(
            "CREATE TABLE {qd} (\n\
  attempt_id UUID NOT NULL,\n\
  execution_id UUID NOT NULL,\n\
  is_final BOOLEAN DEFAULT false NOT NULL,\n\
  message TEXT,\n\
  progress_done BIGINT,\n\
  progress_total BIGINT,\n\
  progress_note TEXT,\n\
  progress_at TIMESTAMP WITH TIME ZONE,\n\
  log_lines BIGINT DEFAULT '0' NOT NULL,\n\
  log_tail TEXT,\n\
  trap_kind VARCHAR(255),\n\
  component_digest VARCHAR(255),\n\
  fuel_consumed BIGINT,\n\
  peak_memory_bytes BIGINT,\n\
  updated_at TIMESTAMP WITH TIME ZONE NOT NULL,\n\
  PRIMARY KEY (attempt_id)\n\
)",
            qd = q(&d)
        ),
        format!(
            "CREATE INDEX {} ON {} (execution_id)",
            q(&derived(&names.attempts, "ix_", "diagnostics_execution")),
            q(&d)
        ),
    ]
}

/// The durable steps table: `<T>_steps` (docs/steps.md).
pub fn steps_table(names: &TableNames) -> String {
    derived(&names.executions, "", "steps")
}

/// The durable steps (`IF NOT EXISTS`: also the upgrade's): one row per (execution, key),
/// `seq` the key's place in first-save order. No foreign key (it fits next to tables of either
/// creator); `onestep purge` deletes the rows with their execution.
pub fn steps_ddl(names: &TableNames) -> Vec<String> {
    vec![format!(
        "CREATE TABLE IF NOT EXISTS {} (\n\
  execution_id UUID NOT NULL,\n\
  step_key VARCHAR(255) NOT NULL,\n\
  seq INTEGER NOT NULL,\n\
  value TEXT NOT NULL,\n\
  bytes INTEGER NOT NULL,\n\
  attempt_id UUID NOT NULL,\n\
  attempt_no INTEGER NOT NULL,\n\
  saved_at TIMESTAMP WITH TIME ZONE NOT NULL,\n\
  PRIMARY KEY (execution_id, step_key)\n\
)",
        q(&steps_table(names))
    )]
}

/// The listeners table: `<T>_listeners` (docs/postgres.md#change-notifications). One row per
/// session listening for the executions' changes (its backend pid): while it has a row, the
/// notify trigger sends `NOTIFY`; while it is empty, the trigger costs one lookup per statement.
pub fn listeners_table(names: &TableNames) -> String {
    derived(&names.executions, "", "listeners")
}

/// The listeners (`IF NOT EXISTS`: also the upgrade's).
pub fn listeners_ddl(names: &TableNames) -> Vec<String> {
    vec![format!(
        "CREATE TABLE IF NOT EXISTS {} (\n\
  pid INTEGER NOT NULL,\n\
  PRIMARY KEY (pid)\n\
)",
        q(&listeners_table(names))
    )]
}

/// The notification channel of the executions table: `<T>_changes`, hash-truncated to 63 (a
/// channel name is an identifier; channels are per database).
pub fn notify_channel(names: &TableNames) -> String {
    derived(&names.executions, "", "changes")
}

/// The trigger function: `<T>_notify`, hash-truncated to 63.
pub fn notify_function(names: &TableNames) -> String {
    derived(&names.executions, "", "notify")
}

/// The notify trigger's name (trigger names are per table).
pub const NOTIFY_TRIGGER: &str = "onestep_notify";

/// The statuses whose arrival the trigger notifies: the terminal ones (what `?wait=` answers
/// and a stream ends on). A claim, a retry or a cancel request is seen at the waits' poll.
pub const NOTIFIED_STATUSES: &str = "'succeeded', 'failed', 'cancelled', 'expired'";

/// Executions named per notification: each is `<uuid> <version>` (at most ~57 bytes), so 100
/// stay far below the 8,000-byte payload limit.
pub const IDS_PER_NOTIFICATION: i32 = 100;

/// The notify trigger (docs/postgres.md#change-notifications): after every `UPDATE` statement
/// on the executions table — ours, the reference's, anyone's — one `pg_notify` per 100 rows the
/// statement left terminal, payload `id version,id version,…`, but only while a session is
/// registered in the listeners table and the notification queue is less than half full (a
/// listener that stopped reading must never make a commit fail). A statement-level trigger with
/// a transition table: one function call per statement, not per row. `SECURITY DEFINER` with
/// a fixed `search_path` and qualified names, so that it runs the same in every writer's
/// session whatever its user and `search_path`. `schema` is the tables' schema
/// (`current_schema()` of the creating session).
pub fn notify_ddl(names: &TableNames, schema: &str) -> Vec<String> {
    let listeners = format!("{}.{}", q(schema), q(&listeners_table(names)));
    let function = format!("{}.{}", q(schema), q(&notify_function(names)));
    let channel = notify_channel(names).replace('\'', "''");
    vec![
        format!(
            "CREATE OR REPLACE FUNCTION {function}() RETURNS trigger LANGUAGE plpgsql \
             SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $onestep$\n\
BEGIN\n\
  IF pg_notification_queue_usage() < 0.5 AND EXISTS (SELECT 1 FROM {listeners}) THEN\n\
    PERFORM pg_notify('{channel}', string_agg(c.id::text || ' ' || c.version::text, ','))\n\
    FROM (SELECT n.id, n.version, (row_number() OVER ()) / {IDS_PER_NOTIFICATION} AS chunk\n\
          FROM onestep_new n WHERE n.status IN ({NOTIFIED_STATUSES})) c\n\
    GROUP BY c.chunk;\n\
  END IF;\n\
  RETURN NULL;\n\
END\n\
$onestep$"
        ),
        format!(
            "CREATE TRIGGER {NOTIFY_TRIGGER} AFTER UPDATE ON {} \
             REFERENCING NEW TABLE AS onestep_new FOR EACH STATEMENT EXECUTE FUNCTION {function}()",
            q(&names.executions)
        ),
    ]
}

/// Whether the executions table has the notify trigger and the listeners table exists.
pub(crate) async fn has_notify_trigger<C: tokio_postgres::GenericClient>(
    c: &C,
    names: &TableNames,
) -> OpResult<bool> {
    let row = c
        .query_one(
            "SELECT count(*) FROM pg_catalog.pg_trigger g \
             JOIN pg_catalog.pg_class r ON r.oid = g.tgrelid \
             JOIN pg_catalog.pg_namespace n ON n.oid = r.relnamespace \
             WHERE n.nspname = current_schema() AND r.relname = $1 AND g.tgname = $2 \
             AND NOT g.tgisinternal",
            &[&names.executions, &NOTIFY_TRIGGER],
        )
        .await?;
    Ok(row.try_get::<_, i64>(0)? > 0 && table_exists(c, &listeners_table(names)).await?)
}

/// `current_schema()` of the session: the schema the tables and the trigger function live in.
pub(crate) async fn current_schema<C: tokio_postgres::GenericClient>(c: &C) -> OpResult<String> {
    let row = c.query_one("SELECT current_schema()::text", &[]).await?;
    row.try_get::<_, Option<String>>(0)?.ok_or_else(|| {
        misconfigured("no current schema (search_path names no existing schema)".into())
    })
}

/// `CREATE TABLE` for the trace-context table (docs/postgres.md#diagnostics-and-traces): the
/// W3C `traceparent` of the submit that created an execution, one row per execution, written
/// only while traces are on. No foreign key; `purge` deletes its rows with their execution.
pub fn traces_ddl(names: &TableNames) -> Vec<String> {
    vec![format!(
        "CREATE TABLE {} (\n\
  execution_id UUID NOT NULL,\n\
  traceparent VARCHAR(255) NOT NULL,\n\
  created_at TIMESTAMP WITH TIME ZONE NOT NULL,\n\
  PRIMARY KEY (execution_id)\n\
)",
        q(&traces_table(names))
    )]
}

fn misconfigured(message: String) -> OpError {
    OpError::Domain(backend_error(
        "open",
        onestep_core::ConnectorKind::Misconfigured,
        &message,
        &[],
    ))
}

async fn table_exists<C: tokio_postgres::GenericClient>(c: &C, table: &str) -> OpResult<bool> {
    let row = c
        .query_one(
            "SELECT count(*) FROM pg_catalog.pg_tables \
             WHERE schemaname = current_schema() AND tablename = $1",
            &[&table],
        )
        .await?;
    Ok(row.try_get::<_, i64>(0)? > 0)
}

async fn index_exists<C: tokio_postgres::GenericClient>(c: &C, index: &str) -> OpResult<bool> {
    let row = c
        .query_one(
            "SELECT count(*) FROM pg_catalog.pg_indexes \
             WHERE schemaname = current_schema() AND indexname = $1",
            &[&index],
        )
        .await?;
    Ok(row.try_get::<_, i64>(0)? > 0)
}

/// What the catalog says of one index of the current schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct IndexInfo {
    /// `pg_index.indisvalid`: false after an interrupted `CREATE INDEX CONCURRENTLY`.
    pub valid: bool,
    /// `pg_index.indnkeyatts`: its key columns.
    pub key_columns: i16,
}

/// The catalog entry of `index` in the current schema, if it exists.
pub(crate) async fn index_info<C: tokio_postgres::GenericClient>(
    c: &C,
    index: &str,
) -> OpResult<Option<IndexInfo>> {
    let row = c
        .query_opt(
            "SELECT i.indisvalid, i.indnkeyatts FROM pg_catalog.pg_index i \
             JOIN pg_catalog.pg_class c ON c.oid = i.indexrelid \
             JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = current_schema() AND c.relname = $1",
            &[&index],
        )
        .await?;
    Ok(match row {
        Some(r) => Some(IndexInfo {
            valid: r.try_get(0)?,
            key_columns: r.try_get(1)?,
        }),
        None => None,
    })
}

/// How many key columns `index` has in the current schema (0 when it does not exist).
pub(crate) async fn index_width<C: tokio_postgres::GenericClient>(
    c: &C,
    index: &str,
) -> OpResult<i16> {
    Ok(index_info(c, index).await?.map_or(0, |i| i.key_columns))
}

/// Readiness (docs/postgres.md#schema) on one session: with `auto_create`, one transaction
/// that takes the pair's advisory transaction lock and creates each missing table (executions
/// first) with its indexes; without it, fail with `missing execution tables: a, b`. Then detect
/// [`SchemaFeatures`].
pub(crate) async fn ensure_schema(
    client: &mut tokio_postgres::Client,
    names: &TableNames,
    auto_create: bool,
) -> OpResult<SchemaReport> {
    let mut created = Vec::new();
    if auto_create {
        let tx = client.transaction().await?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&pair_lock_key(names)])
            .await?;
        if !table_exists(&tx, &names.executions).await? {
            for stmt in executions_ddl(names) {
                tx.batch_execute(&stmt).await?;
            }
            let schema = current_schema(&tx).await?;
            for stmt in listeners_ddl(names)
                .into_iter()
                .chain(notify_ddl(names, &schema))
            {
                tx.batch_execute(&stmt).await?;
            }
            created.push(names.executions.clone());
        }
        if !table_exists(&tx, &names.attempts).await? {
            for stmt in attempts_ddl(names) {
                tx.batch_execute(&stmt).await?;
            }
            created.push(names.attempts.clone());
        }
        // Our additions, next to tables of either creator (docs/postgres.md#diagnostics-and-traces).
        for (table, ddl) in [
            (diagnostics_table(names), diagnostics_ddl(names)),
            (traces_table(names), traces_ddl(names)),
            (keys_table(names), keys_ddl(names)),
            (buckets_table(names), buckets_ddl(names)),
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
            if !table_exists(&tx, &table).await? {
                for stmt in ddl {
                    tx.batch_execute(&stmt).await?;
                }
                created.push(table);
            }
        }
        tx.commit().await?;
    } else {
        let mut missing = Vec::new();
        for table in [&names.executions, &names.attempts] {
            if !table_exists(&*client, table).await? {
                missing.push(table.clone());
            }
        }
        if !missing.is_empty() {
            return Err(misconfigured(format!(
                "missing execution tables: {}",
                missing.join(", ")
            )));
        }
    }
    let features = SchemaFeatures {
        expiry_index: index_exists(&*client, &ix_expiry(names)).await?,
        common: CommonFeatures {
            list_indexes: index_width(&*client, &ix_status(names)).await? >= IX_STATUS_WIDTH
                && index_exists(&*client, &ix_status_list(names)).await?
                && index_exists(&*client, &ix_task_list(names)).await?,
            diagnostics_table: table_exists(&*client, &diagnostics_table(names)).await?,
            traces_table: table_exists(&*client, &traces_table(names)).await?,
            priority_columns: has_priority_columns(&*client, &names.executions).await?,
        },
        claim_priority_index: index_exists(&*client, &ix_claim_priority(names)).await?,
        fair_keys: table_exists(&*client, &keys_table(names)).await?
            && index_exists(&*client, &ix_fair(names)).await?
            && index_exists(&*client, &ix_fair_running(names)).await?,
        buckets_table: table_exists(&*client, &buckets_table(names)).await?,
        callbacks_tables: table_exists(&*client, &callbacks_table(names)).await?
            && table_exists(&*client, &deliveries_table(names)).await?
            && has_callback_columns(&*client, names).await?,
        components_tables: table_exists(&*client, &components_table(names)).await?
            && table_exists(&*client, &component_chunks_table(names)).await?
            && table_exists(&*client, &component_holders_table(names)).await?,
        deployments_tables: table_exists(&*client, &deployments_table(names)).await?
            && table_exists(&*client, &deployment_events_table(names)).await?
            && table_exists(&*client, &deployment_revision_table(names)).await?,
        steps_table: table_exists(&*client, &steps_table(names)).await?,
        notify_trigger: has_notify_trigger(&*client, names).await?,
        parked_status: crate::upgrade::stale_status_check(&*client, &names.attempts)
            .await?
            .is_none(),
    };
    Ok(SchemaReport::new(created, features))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derived_names_use_the_postgres_limit() {
        let long = "e".repeat(63);
        let names = TableNames::new(long.clone(), "a").unwrap();
        let ix = ix_expiry(&names);
        assert_eq!(ix.len(), 63);
        assert!(ix.starts_with("ix_eeee"));
        assert!(validate_names(&names).is_ok());
        let long_a = TableNames::new("e", "a".repeat(63)).unwrap();
        assert_eq!(diagnostics_table(&long_a).len(), 63);
        assert_eq!(
            diagnostics_table(&TableNames::default()),
            "onestep_execution_attempts_diagnostics"
        );
        assert_eq!(
            traces_table(&TableNames::default()),
            "onestep_executions_traces"
        );
        let too_long = TableNames::new("e".repeat(64), "a").unwrap();
        let e = validate_names(&too_long).unwrap_err().to_string();
        assert!(
            e.contains("executions_table must be at most 63 characters"),
            "{e}"
        );
    }

    #[test]
    fn pair_lock_key_is_stable() {
        // The same bytes the reference hashes: "onestep_executions\0onestep_execution_attempts".
        let k = pair_lock_key(&TableNames::default());
        assert_eq!(k, -4001340406995615597);
        assert_ne!(
            k,
            pair_lock_key(&TableNames::new("x", "onestep_execution_attempts").unwrap())
        );
    }
}
