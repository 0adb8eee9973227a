//! Table DDL (the reference's, plus the additions documented in docs/schema.md#what-we-create) and schema
//! readiness: serialised `auto_create` under `GET_LOCK` (docs/semantics.md#opening-a-backend) or an existence check.
//!
//! Tables this crate creates differ from the reference's in two compatible ways:
//! * `namespace`, `task_name`, `status`, `idempotency_key` and `worker_id` use `utf8mb4_bin`, so
//!   they compare exactly (docs/semantics.md#text-fields);
//! * a stored generated column `claimable` (1 for `queued`/`retrying`, else NULL) with two indexes,
//!   `ix_<T>_claimable (namespace, task_name, claimable, available_at, created_at, id)` for the
//!   claim read and `ix_<T>_expiry (claimable, expires_at, id)` for the expiry maintenance, so that
//!   neither ever walks finished history.
//!
//! Tables created by the reference (no `claimable` column, case-insensitive collations, MariaDB
//! native `uuid` ids) are used as they are until `onestep migrate --upgrade` adds the column and
//! indexes ([`crate::upgrade`]); [`SchemaFeatures`] records which query shapes apply.

use mysql_async::Conn;
use mysql_async::prelude::Queryable;
use onestep_core::names::{GLOBAL_DDL_LOCK, TableNames};
use onestep_core::store::{CommonFeatures, SchemaFeatureSet};

use crate::errors::{OpError, OpResult};

/// Seconds to wait for each DDL lock (docs/semantics.md#opening-a-backend).
pub const DDL_LOCK_TIMEOUT_S: u32 = 10;

/// The generated column added by this crate's DDL.
pub const CLAIMABLE_COLUMN: &str = "claimable";

/// Index over the claimable rows of one (namespace, task name), in claim order.
pub fn ix_claimable(names: &TableNames) -> String {
    names.derived("ix_", "claimable")
}

/// Index over the claimable rows of one (namespace, task name) in claim order with priority:
/// `(namespace, task_name, claimable, priority, available_at, created_at, id)`
/// (docs/semantics.md#priority-and-fairness-key). Tables this crate creates have it in place of
/// [`ix_claimable`]; `onestep migrate --upgrade` adds it.
pub fn ix_claim_priority(names: &TableNames) -> String {
    names.derived("ix_", "claim_priority")
}

/// The columns of [`ix_claim_priority`].
pub const IX_CLAIM_PRIORITY_COLUMNS: &str =
    "namespace, task_name, claimable, priority, available_at, created_at, id";

/// The CHECK constraint keeping `priority` in 0..=9 on tables this crate creates.
pub fn ck_priority(names: &TableNames) -> String {
    names.derived("ck_", "priority")
}

/// The fair claim's keys table `<T>_keys` (docs/semantics.md#fair-claim): one row per
/// `(task_name, namespace, fairness_key)` that may have pending work, with its pass and
/// `ready_at`.
pub fn keys_table(names: &TableNames) -> String {
    names.derived("", "keys")
}

/// Index of the keys table in candidate order: `(task_name, pass, namespace, fairness_key)`.
pub fn ix_keys_pass(names: &TableNames) -> String {
    names.derived("ix_", "keys_pass")
}

/// The generated column naming a row's fairness key inside its namespace: `NULL` when the
/// key is the namespace (`fairness_key` NULL or equal to it), else the key, as bytes. The key of
/// a row stays `COALESCE(fairness_key, namespace)`; this shorter form (at most 255 bytes: keys
/// are ASCII, docs/semantics.md#priority-and-fairness-key) is what lets the fair index fit
/// InnoDB's 3072-byte key limit beside `task_name` and `namespace` (1020 bytes each).
pub const FAIR_KEY_COLUMN: &str = "fair_key";

/// Its definition (after `ADD COLUMN` or inside `CREATE TABLE`): `VIRTUAL`, which both servers
/// index and add in place (`ALGORITHM=INSTANT`).
pub const FAIR_KEY_DEF: &str =
    "fair_key VARBINARY(255) AS (NULLIF(fairness_key, namespace)) VIRTUAL";

/// Index over the pending rows of a task by fairness key, in claim order within each key:
/// the fair claim's sweep (distinct keys) and head reads (docs/semantics.md#fair-claim).
pub fn ix_fair(names: &TableNames) -> String {
    names.derived("ix_", "fair")
}

/// The columns of [`ix_fair`]: `claimable` right after `task_name`, so the pending rows of a
/// task are one range and finished history is never walked.
pub const IX_FAIR_COLUMNS: &str =
    "task_name, claimable, namespace, fair_key, priority, available_at, created_at, id";

/// Index counting a key's running rows for `max_running_per_key`.
pub fn ix_fair_running(names: &TableNames) -> String {
    names.derived("ix_", "fair_running")
}

/// The columns of [`ix_fair_running`].
pub const IX_FAIR_RUNNING_COLUMNS: &str = "task_name, namespace, fair_key, status";

/// The rate-limit buckets table `<T>_buckets` (docs/semantics.md#rate-limits).
pub fn buckets_table(names: &TableNames) -> String {
    names.derived("", "buckets")
}

/// `CREATE TABLE` for the buckets table (docs/schema.md#rate-limit-buckets): the name is
/// `VARBINARY(2048)`, room for 512 characters of utf8mb4 within InnoDB's key limit, compared
/// byte for byte.
pub fn buckets_ddl(names: &TableNames) -> Vec<String> {
    vec![format!(
        "CREATE TABLE `{}` (\n\
  bucket VARBINARY(2048) NOT NULL,\n\
  tokens DOUBLE NOT NULL,\n\
  refilled_at DATETIME(6) NOT NULL,\n\
  paused_until DATETIME(6) NULL,\n\
  PRIMARY KEY (bucket)\n\
) ENGINE=InnoDB",
        buckets_table(names)
    )]
}

/// The completion-webhook outbox `<T>_callbacks` (docs/semantics.md#completion-webhooks).
pub fn callbacks_table(names: &TableNames) -> String {
    names.derived("", "callbacks")
}

/// The completion-webhook attempts `<T>_deliveries`.
pub fn deliveries_table(names: &TableNames) -> String {
    names.derived("", "deliveries")
}

/// `CREATE TABLE` for the outbox: one row per execution whose submit asked for a callback;
/// `ix_<T>_callbacks_due` holds the rows by state and due time.
pub fn callbacks_ddl(names: &TableNames) -> Vec<String> {
    vec![format!(
        "CREATE TABLE `{t}` (\n\
  execution_id {ASCII_ID} NOT NULL,\n\
  namespace VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,\n\
  url TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,\n\
  events VARCHAR(255) NOT NULL,\n\
  state VARCHAR(16) NOT NULL,\n\
  attempts INT NOT NULL DEFAULT 0,\n\
  round_start INT NOT NULL DEFAULT 0,\n\
  next_at DATETIME(6) NOT NULL,\n\
  claimed_until DATETIME(6) NULL,\n\
  last_status INT NULL,\n\
  last_error TEXT CHARACTER SET utf8mb4 NULL,\n\
  created_at DATETIME(6) NOT NULL,\n\
  updated_at DATETIME(6) NOT NULL,\n\
  started_done TINYINT NOT NULL DEFAULT 0,\n\
  progress_seq INT NOT NULL DEFAULT 0,\n\
  progress_sent_at DATETIME(6) NULL,\n\
  progress_after DATETIME(6) NULL,\n\
  PRIMARY KEY (execution_id),\n\
  INDEX `{ix}` (state, next_at)\n\
) ENGINE=InnoDB DEFAULT CHARSET=ascii COLLATE=ascii_bin",
        t = callbacks_table(names),
        ix = names.derived("ix_", "callbacks_due"),
    )]
}

/// The `ADD COLUMN` clauses of the `started` and `progress` events' columns
/// (docs/semantics.md#completion-webhooks), which `onestep migrate --upgrade` adds to an outbox
/// created before them.
pub fn callback_columns_def() -> &'static str {
    "ADD COLUMN started_done TINYINT NOT NULL DEFAULT 0, \
     ADD COLUMN progress_seq INT NOT NULL DEFAULT 0, \
     ADD COLUMN progress_sent_at DATETIME(6) NULL, \
     ADD COLUMN progress_after DATETIME(6) NULL"
}

/// `CREATE TABLE` for the delivery attempts: one row per attempt.
pub fn deliveries_ddl(names: &TableNames) -> Vec<String> {
    vec![format!(
        "CREATE TABLE `{}` (\n\
  execution_id {ASCII_ID} NOT NULL,\n\
  attempt_no INT NOT NULL,\n\
  event VARCHAR(64) NOT NULL,\n\
  webhook_id VARCHAR(255) NOT NULL,\n\
  status INT NULL,\n\
  error TEXT CHARACTER SET utf8mb4 NULL,\n\
  at DATETIME(6) NOT NULL,\n\
  PRIMARY KEY (execution_id, attempt_no)\n\
) ENGINE=InnoDB DEFAULT CHARSET=ascii COLLATE=ascii_bin",
        deliveries_table(names)
    )]
}

/// The durable steps table `<T>_steps` (docs/steps.md).
pub fn steps_table(names: &TableNames) -> String {
    names.derived("", "steps")
}

/// `CREATE TABLE` for the durable steps: one row per (execution, key), `seq` the key's place in
/// first-save order. The key is `VARBINARY(255)` (compared byte for byte, no trailing-space
/// padding; keys are at most 255 bytes of UTF-8), the value `MEDIUMTEXT` (up to 16 MiB; a step
/// holds at most 1 MiB). No foreign key, so it fits next to tables of either DDL (MariaDB's
/// native `uuid` ids included); `onestep purge` deletes its rows with their execution.
pub fn steps_ddl(names: &TableNames) -> Vec<String> {
    vec![format!(
        "CREATE TABLE `{}` (\n\
  execution_id {ASCII_ID} NOT NULL,\n\
  step_key VARBINARY(255) NOT NULL,\n\
  seq INT NOT NULL,\n\
  value MEDIUMTEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,\n\
  bytes INT NOT NULL,\n\
  attempt_id {ASCII_ID} NOT NULL,\n\
  attempt_no INT NOT NULL,\n\
  saved_at DATETIME(6) NOT NULL,\n\
  PRIMARY KEY (execution_id, step_key)\n\
) ENGINE=InnoDB",
        steps_table(names)
    )]
}

/// The deployments table `<T>_deployments` (docs/deployments.md#data-model).
pub fn deployments_table(names: &TableNames) -> String {
    names.derived("", "deployments")
}

/// The deployments' audit events `<T>_deployment_events`.
pub fn deployment_events_table(names: &TableNames) -> String {
    names.derived("", "deployment_events")
}

/// The deployments' revision (one row) `<T>_deployment_revision`.
pub fn deployment_revision_table(names: &TableNames) -> String {
    names.derived("", "deployment_revision")
}

/// `CREATE TABLE` for the deployments: one row per version of a task. The stored generated
/// column `active_key` is 1 for the active version and NULL otherwise, so the unique key
/// `uq_<T>_deployments_active (namespace, task, active_key)` keeps at most one active version per
/// task; `uq_<T>_deployments_revision` orders the history, `ix_<T>_deployments_namespace` pages
/// a namespace's and `ix_<T>_deployments_digest` serves the component garbage collection.
pub fn deployments_ddl(names: &TableNames) -> Vec<String> {
    vec![format!(
        "CREATE TABLE `{t}` (\n\
  namespace VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,\n\
  task VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,\n\
  version BIGINT NOT NULL,\n\
  digest VARCHAR(71) NOT NULL,\n\
  settings MEDIUMTEXT NOT NULL,\n\
  state VARCHAR(16) NOT NULL,\n\
  active_key TINYINT AS (IF(state = 'active', 1, NULL)) STORED,\n\
  deployed_by VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,\n\
  deployed_at DATETIME(6) NOT NULL,\n\
  previous_version BIGINT NULL,\n\
  previous_digest VARCHAR(71) NULL,\n\
  note TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,\n\
  revision BIGINT NOT NULL,\n\
  updated_at DATETIME(6) NOT NULL,\n\
  PRIMARY KEY (namespace, task, version),\n\
  UNIQUE KEY `{active}` (namespace, task, active_key),\n\
  UNIQUE KEY `{rev}` (revision),\n\
  INDEX `{ns}` (namespace, revision),\n\
  INDEX `{digest}` (digest),\n\
  CONSTRAINT `{ck_version}` CHECK (version >= 1),\n\
  CONSTRAINT `{ck_state}` CHECK (state IN ('active', 'superseded', 'inactive'))\n\
) ENGINE=InnoDB DEFAULT CHARSET=ascii COLLATE=ascii_bin",
        t = deployments_table(names),
        active = names.derived("uq_", "deployments_active"),
        rev = names.derived("uq_", "deployments_revision"),
        ns = names.derived("ix_", "deployments_namespace"),
        digest = names.derived("ix_", "deployments_digest"),
        ck_version = names.derived("ck_", "deployments_version"),
        ck_state = names.derived("ck_", "deployments_state"),
    )]
}

/// `CREATE TABLE` for the audit events: one row per change, keyed by its revision;
/// `ix_<T>_deployment_events_task` pages a namespace's or a task's.
pub fn deployment_events_ddl(names: &TableNames) -> Vec<String> {
    vec![format!(
        "CREATE TABLE `{t}` (\n\
  revision BIGINT NOT NULL,\n\
  namespace VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,\n\
  task VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,\n\
  action VARCHAR(16) NOT NULL,\n\
  version BIGINT NOT NULL,\n\
  digest VARCHAR(71) NOT NULL,\n\
  from_version BIGINT NULL,\n\
  from_digest VARCHAR(71) NULL,\n\
  actor VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,\n\
  at DATETIME(6) NOT NULL,\n\
  note TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,\n\
  PRIMARY KEY (revision),\n\
  INDEX `{ix}` (namespace, task, revision),\n\
  CONSTRAINT `{ck}` CHECK (action IN ('deploy', 'activate', 'deactivate'))\n\
) ENGINE=InnoDB DEFAULT CHARSET=ascii COLLATE=ascii_bin",
        t = deployment_events_table(names),
        ix = names.derived("ix_", "deployment_events_task"),
        ck = names.derived("ck_", "deployment_events_action"),
    )]
}

/// `CREATE TABLE` for the revision: at most one row (`id = 1`), locked and written by every
/// change.
pub fn deployment_revision_ddl(names: &TableNames) -> Vec<String> {
    vec![format!(
        "CREATE TABLE `{}` (\n\
  id TINYINT NOT NULL,\n\
  revision BIGINT NOT NULL,\n\
  PRIMARY KEY (id),\n\
  CONSTRAINT `{}` CHECK (id = 1)\n\
) ENGINE=InnoDB DEFAULT CHARSET=ascii COLLATE=ascii_bin",
        deployment_revision_table(names),
        names.derived("ck_", "deployment_revision_one")
    )]
}

/// The component store's header table `<T>_components` (docs/semantics.md#component-store).
pub fn components_table(names: &TableNames) -> String {
    names.derived("", "components")
}

/// The component store's chunks table `<T>_component_chunks`.
pub fn component_chunks_table(names: &TableNames) -> String {
    names.derived("", "component_chunks")
}

/// `CREATE TABLE` for the component headers (docs/schema.md#component-store): one row per stored
/// component, written last in its put's transaction.
pub fn components_ddl(names: &TableNames) -> Vec<String> {
    vec![format!(
        "CREATE TABLE `{}` (\n\
  digest VARCHAR(71) NOT NULL,\n\
  size BIGINT NOT NULL,\n\
  chunks INT NOT NULL,\n\
  created_at DATETIME(6) NOT NULL,\n\
  PRIMARY KEY (digest)\n\
) ENGINE=InnoDB DEFAULT CHARSET=ascii COLLATE=ascii_bin",
        components_table(names)
    )]
}

/// The component store's holders table `<T>_component_holders`: which namespace stored which
/// component (docs/semantics.md#component-store); a tenant deploys only what it holds.
pub fn component_holders_table(names: &TableNames) -> String {
    names.derived("", "component_holders")
}

/// `CREATE TABLE` for the component holders: one row per (namespace, digest) a namespace stored,
/// with when it last stored it; `ix_<T>_component_holders_digest` serves the garbage collection.
pub fn component_holders_ddl(names: &TableNames) -> Vec<String> {
    vec![format!(
        "CREATE TABLE `{}` (\n\
  namespace VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,\n\
  digest VARCHAR(71) NOT NULL,\n\
  stored_at DATETIME(6) NOT NULL,\n\
  PRIMARY KEY (namespace, digest),\n\
  INDEX `{}` (digest)\n\
) ENGINE=InnoDB DEFAULT CHARSET=ascii COLLATE=ascii_bin",
        component_holders_table(names),
        names.derived("ix_", "component_holders_digest")
    )]
}

/// `CREATE TABLE` for the component chunks: up to 1 MiB per row (`LONGBLOB`; a row is far below
/// `max_allowed_packet`).
pub fn component_chunks_ddl(names: &TableNames) -> Vec<String> {
    vec![format!(
        "CREATE TABLE `{}` (\n\
  digest VARCHAR(71) NOT NULL,\n\
  seq INT NOT NULL,\n\
  bytes LONGBLOB NOT NULL,\n\
  PRIMARY KEY (digest, seq)\n\
) ENGINE=InnoDB DEFAULT CHARSET=ascii COLLATE=ascii_bin",
        component_chunks_table(names)
    )]
}

/// `CREATE TABLE` for the keys table (docs/schema.md#fair-claim-keys).
pub fn keys_ddl(names: &TableNames) -> Vec<String> {
    vec![format!(
        "CREATE TABLE `{k}` (\n\
  task_name VARCHAR(255) COLLATE utf8mb4_bin NOT NULL,\n\
  namespace VARCHAR(255) COLLATE utf8mb4_bin NOT NULL,\n\
  fairness_key VARCHAR(255) COLLATE utf8mb4_bin NOT NULL,\n\
  pass BIGINT NOT NULL DEFAULT 0,\n\
  ready_at DATETIME(6) NOT NULL,\n\
  PRIMARY KEY (task_name, namespace, fairness_key),\n\
  INDEX `{ix}` (task_name, pass, namespace, fairness_key)\n\
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
        k = keys_table(names),
        ix = ix_keys_pass(names),
    )]
}

/// The submit quotas' lock table `<T>_quotas` (docs/semantics.md#quotas): one row per
/// namespace that has had a quota-checked submit, locked (`INSERT … ON DUPLICATE KEY UPDATE`)
/// by every new submit of that namespace under a quota until its transaction ends.
pub fn quotas_table(names: &TableNames) -> String {
    names.derived("", "quotas")
}

/// `CREATE TABLE` for the quotas lock table.
pub fn quotas_ddl(names: &TableNames) -> Vec<String> {
    vec![format!(
        "CREATE TABLE `{}` (\n\
  namespace VARCHAR(255) COLLATE utf8mb4_bin NOT NULL,\n\
  PRIMARY KEY (namespace)\n\
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
        quotas_table(names)
    )]
}

/// Index over a namespace's rows by status and fairness key: the bounded counts of the submit
/// quotas (docs/semantics.md#quotas), `queued` and `retrying` each one range, one key's rows
/// within them one range. Needs the `fair_key` column.
pub fn ix_quota(names: &TableNames) -> String {
    names.derived("ix_", "quota")
}

/// The columns of [`ix_quota`].
pub const IX_QUOTA_COLUMNS: &str = "namespace, status, fair_key";

/// Index over claimable rows by `expires_at` (expiry maintenance, T5).
pub fn ix_expiry(names: &TableNames) -> String {
    names.derived("ix_", "expiry")
}

/// Index over (namespace, task name, status, created_at, id): the dashboard's counts by task ×
/// status and the API's sampled `onestep_executions` gauge read its prefix alone, and a list
/// filtered by task and status reads its range in list order (docs/schema.md#what-we-create).
pub fn ix_status(names: &TableNames) -> String {
    names.derived("ix_", "status")
}

/// The columns of [`ix_status`].
pub const IX_STATUS_COLUMNS: &str = "namespace, task_name, status, created_at DESC, id DESC";

/// Index over (namespace, status, created_at, id): a list filtered by status alone and a purge
/// that names its statuses read one range per status in list order
/// (docs/schema.md#what-we-create).
pub fn ix_status_list(names: &TableNames) -> String {
    names.derived("ix_", "status_list")
}

/// The columns of [`ix_status_list`].
pub const IX_STATUS_LIST_COLUMNS: &str = "namespace, status, created_at DESC, id DESC";

/// Index over (namespace, task name, created_at, id): a list filtered by task alone reads one
/// range in list order. Its entries never change after the insert (docs/schema.md#what-we-create).
pub fn ix_task_list(names: &TableNames) -> String {
    names.derived("ix_", "task_list")
}

/// The columns of [`ix_task_list`].
pub const IX_TASK_LIST_COLUMNS: &str = "namespace, task_name, created_at DESC, id DESC";

onestep_core::schema_features! {
    /// Which optional schema additions the opened tables have (detected once at open): the
    /// [`CommonFeatures`] (filtered-list indexes — [`ix_status`] at its full width,
    /// [`ix_status_list`] and [`ix_task_list`] —, diagnostics and trace tables), reached
    /// through `Deref`, plus the `claimable` column.
    pub struct SchemaFeatures {
        /// The executions table has the `claimable` column, a claim index over it
        /// ([`ix_claimable`] or [`ix_claim_priority`]) and the expiry index (created by this
        /// crate, or reference tables after `onestep migrate --upgrade`).
        pub claimable_column: bool,
        /// The executions table has [`ix_claimable`] (tables upgraded by an older onestep).
        pub claimable_index: bool,
        /// The executions table has [`ix_claim_priority`].
        pub claim_priority_index: bool,
        /// The fair claim's schema (docs/semantics.md#fair-claim): the keys table
        /// ([`keys_table`]), the [`FAIR_KEY_COLUMN`] and the indexes [`ix_fair`] and
        /// [`ix_fair_running`]. Without it the claim stays the plain one and refuses requests
        /// that need the fair claim.
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
        /// The attempts table accepts the status `parked` (docs/steps.md#sleep): its status
        /// `CHECK` lists it, or it has none (upgraded tables).
        pub parked_status: bool,
    }
    /// What readiness did: the tables created and the [`SchemaFeatures`] detected; without the
    /// `claimable` column (reference-created tables), the exact `onestep migrate --upgrade`
    /// command that adds it (docs/schema.md#upgrading-reference-tables).
    pub type SchemaReport;
}

impl SchemaFeatureSet for SchemaFeatures {
    // docs/observability.md#attempt-diagnostics
    const DIAGNOSTICS_ABSENT: &'static str = "the attempt-diagnostics table is absent: attempts' \
        messages, progress and log tails are not persisted; `onestep migrate` creates it (the \
        execution tables are not changed)";

    // docs/schema.md#upgrading-reference-tables
    fn upgrade_warning(&self) -> Option<&'static str> {
        if !self.claimable_column {
            Some(
                "execution tables without the claimable column and indexes (created by the \
                 reference?): claims and expiry walk the finished history; upgrade them online \
                 with",
            )
        } else if !(self.priority_columns && self.claim_priority_index) {
            Some(
                "execution tables without the priority and fairness_key columns or their claim \
                 index (created by the reference or an older onestep?): every execution runs at \
                 priority 5 and submits that set either are refused; add them online with",
            )
        } else if !self.fair_keys {
            Some(
                "execution tables without the fair claim's keys table, fair_key column or \
                 indexes (created by the reference or an older onestep?): claims of several \
                 namespaces, with weights or with max_running_per_key are refused and keys are \
                 not served round-robin; add them online with",
            )
        } else if !self.list_indexes {
            Some(
                "execution tables without onestep's filtered-list indexes (created by an older \
                 onestep?): lists filtered by task or status and purges by status walk the \
                 namespace's history; add them online with",
            )
        } else if !self.buckets_table {
            Some(
                "execution tables without the rate-limit buckets table (created by an older \
                 onestep?): tasks with a rate_limit claim nothing; add it online with",
            )
        } else if !self.callbacks_tables {
            Some(
                "execution tables without the completion-webhook tables (created by an older \
                 onestep?): submits with a callback are refused; add them online with",
            )
        } else if !self.components_tables {
            Some(
                "execution tables without the component store's tables (created by an older \
                 onestep?): components cannot be stored; add them online with",
            )
        } else if !self.deployments_tables {
            Some(
                "execution tables without the deployment tables (created by an older \
                 onestep?): tasks cannot be deployed; add them online with",
            )
        } else if !self.steps_table {
            Some(
                "execution tables without the durable steps table (created by an older \
                 onestep?): handlers' step saves fail; add it online with",
            )
        } else if !self.parked_status {
            Some(
                "an attempts table whose status CHECK predates 'parked' (created by the \
                 reference or an older onestep?): handlers that sleep cannot park and fail; \
                 allow it online with",
            )
        } else {
            None
        }
    }

    fn diagnostics_table(names: &TableNames) -> String {
        names.diagnostics()
    }

    fn traces_table(names: &TableNames) -> String {
        names.traces()
    }
}

/// Which DDL to emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DdlStyle {
    /// This crate's DDL (binary collations, `claimable` column and indexes).
    Onestep,
    /// The reference's own DDL (server-default collations, no additions). Used by
    /// tests to exercise the fallback query shapes.
    Reference,
}

/// The column type of the UUID columns (`id`, `lease_token`, the attempts' `execution_id`), as
/// the reference picks it (docs/schema.md#uuid-columns): MariaDB 10.7+ has a native `UUID` type,
/// which the reference uses there and into which its client binds hyphenated text; MySQL has
/// none, and `CHAR(32)` plain hex is used. We bind 32-hex text, which both accept, and read both
/// forms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdColumn {
    /// `CHAR(32)`: MySQL, MariaDB before 10.7.
    Char32,
    /// `UUID`: MariaDB 10.7 and later.
    NativeUuid,
}

impl IdColumn {
    /// What the reference uses on `server`.
    pub fn for_server(server: &crate::session::ServerInfo) -> Self {
        match server.flavor {
            crate::session::Flavor::MariaDb if server.version >= (10, 7, 0) => IdColumn::NativeUuid,
            _ => IdColumn::Char32,
        }
    }

    /// The column type in `style`'s DDL. Our `CHAR(32)` ids are `ascii_bin`: hex digits need
    /// one byte each and compare bytewise, where the table's default `utf8mb4` collation
    /// (`utf8mb4_0900_ai_ci` on MySQL 9) made every key comparison of time-ordered ids, which
    /// share their leading digits, cost more (docs/schema.md#uuid-columns). The reference's
    /// DDL keeps the server default.
    fn sql(self, style: DdlStyle) -> &'static str {
        match (self, style) {
            (IdColumn::Char32, DdlStyle::Onestep) => ASCII_ID,
            (IdColumn::Char32, DdlStyle::Reference) => "CHAR(32)",
            (IdColumn::NativeUuid, _) => "UUID",
        }
    }
}

/// The type of every 32-hex id column of the tables this crate creates (executions and
/// attempts on servers without a native `UUID`, the diagnostics and trace-context tables
/// everywhere).
pub const ASCII_ID: &str = "CHAR(32) CHARACTER SET ascii COLLATE ascii_bin";

/// `CREATE TABLE` + `CREATE INDEX` statements for the executions table.
pub fn executions_ddl(names: &TableNames, style: DdlStyle, id: IdColumn) -> Vec<String> {
    let t = &names.executions;
    let uuid = id.sql(style);
    let bin = match style {
        DdlStyle::Onestep => " COLLATE utf8mb4_bin",
        DdlStyle::Reference => "",
    };
    let (schedule, ck_schedule) = match style {
        DdlStyle::Onestep => (
            format!(
                "  priority TINYINT NOT NULL DEFAULT '5',\n  fairness_key VARCHAR(255){bin},\n"
            ),
            format!(
                ",\n  CONSTRAINT `{}` CHECK (priority BETWEEN 0 AND 9)",
                ck_priority(names)
            ),
        ),
        DdlStyle::Reference => (String::new(), String::new()),
    };
    let generated = match style {
        DdlStyle::Onestep => {
            "  claimable TINYINT AS (IF(status IN ('queued','retrying'), 1, NULL)) STORED,\n  \
             fair_key VARBINARY(255) AS (NULLIF(fairness_key, namespace)) VIRTUAL,\n"
        }
        DdlStyle::Reference => "",
    };
    let mut out = vec![format!(
        "CREATE TABLE `{t}` (\n\
  id {uuid} NOT NULL,\n\
  namespace VARCHAR(255){bin} NOT NULL,\n\
  task_name VARCHAR(255){bin} NOT NULL,\n\
  status VARCHAR(32){bin} NOT NULL,\n\
  payload JSON NOT NULL,\n\
  metadata JSON NOT NULL DEFAULT (JSON_OBJECT()),\n\
  result JSON,\n\
  error JSON,\n\
  idempotency_key VARCHAR(255){bin},\n\
  submission_digest VARCHAR(64),\n\
  attempts INTEGER NOT NULL DEFAULT '0',\n\
  available_at DATETIME(6) NOT NULL,\n\
  lease_token {uuid},\n\
  lease_expires_at DATETIME(6),\n\
  worker_id VARCHAR(255){bin},\n\
  cancel_reason VARCHAR(500),\n\
  cancel_requested_at DATETIME(6),\n\
  expires_at DATETIME(6),\n\
  created_at DATETIME(6) NOT NULL,\n\
  updated_at DATETIME(6) NOT NULL,\n\
  started_at DATETIME(6),\n\
  finished_at DATETIME(6),\n\
  version BIGINT NOT NULL DEFAULT '0',\n\
{schedule}\
{generated}\
  PRIMARY KEY (id),\n\
  CONSTRAINT `{ck_status}` CHECK (status IN ('queued','running','retrying','succeeded','failed','cancel_requested','cancelled','expired')),\n\
  CONSTRAINT `{ck_idem}` CHECK ((idempotency_key IS NULL AND submission_digest IS NULL) OR (idempotency_key IS NOT NULL AND submission_digest IS NOT NULL)){ck_schedule}\n\
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
        ck_status = names.ck_status(),
        ck_idem = names.ck_idempotency(),
    )];
    out.push(format!(
        "CREATE INDEX `{}` ON `{t}` (namespace, task_name, available_at, created_at, id)",
        names.ix_claim()
    ));
    out.push(format!(
        "CREATE INDEX `{}` ON `{t}` (lease_expires_at, id)",
        names.ix_lease()
    ));
    out.push(format!(
        "CREATE UNIQUE INDEX `{}` ON `{t}` (namespace, task_name, idempotency_key)",
        names.uq_idempotency()
    ));
    out.push(format!(
        "CREATE INDEX `{}` ON `{t}` (namespace, created_at DESC, id DESC)",
        names.ix_list()
    ));
    if style == DdlStyle::Onestep {
        out.push(format!(
            "CREATE INDEX `{}` ON `{t}` ({IX_CLAIM_PRIORITY_COLUMNS})",
            ix_claim_priority(names)
        ));
        out.push(format!(
            "CREATE INDEX `{}` ON `{t}` (claimable, expires_at, id)",
            ix_expiry(names)
        ));
        out.push(format!(
            "CREATE INDEX `{}` ON `{t}` ({IX_STATUS_COLUMNS})",
            ix_status(names)
        ));
        out.push(format!(
            "CREATE INDEX `{}` ON `{t}` ({IX_STATUS_LIST_COLUMNS})",
            ix_status_list(names)
        ));
        out.push(format!(
            "CREATE INDEX `{}` ON `{t}` ({IX_TASK_LIST_COLUMNS})",
            ix_task_list(names)
        ));
        out.push(format!(
            "CREATE INDEX `{}` ON `{t}` ({IX_FAIR_COLUMNS})",
            ix_fair(names)
        ));
        out.push(format!(
            "CREATE INDEX `{}` ON `{t}` ({IX_FAIR_RUNNING_COLUMNS})",
            ix_fair_running(names)
        ));
        out.push(format!(
            "CREATE INDEX `{}` ON `{t}` ({IX_QUOTA_COLUMNS})",
            ix_quota(names)
        ));
    }
    out
}

/// The attempt statuses our attempts table allows (its `CHECK`): the reference's and `parked`
/// (docs/steps.md#sleep).
pub const ATTEMPT_STATUSES: &str =
    "'running','succeeded','retrying','failed','cancelled','lease_lost','parked'";

/// The attempt statuses the reference's attempts table allows.
pub const REFERENCE_ATTEMPT_STATUSES: &str =
    "'running','succeeded','retrying','failed','cancelled','lease_lost'";

/// `CREATE TABLE` + `CREATE INDEX` statements for the attempts table.
pub fn attempts_ddl(names: &TableNames, style: DdlStyle, id: IdColumn) -> Vec<String> {
    let (t, a) = (&names.executions, &names.attempts);
    let uuid = id.sql(style);
    let bin = match style {
        DdlStyle::Onestep => " COLLATE utf8mb4_bin",
        DdlStyle::Reference => "",
    };
    vec![
        format!(
            "CREATE TABLE `{a}` (\n\
  id {uuid} NOT NULL,\n\
  execution_id {uuid} NOT NULL,\n\
  attempt_no INTEGER NOT NULL,\n\
  lease_token {uuid} NOT NULL,\n\
  worker_id VARCHAR(255){bin} NOT NULL,\n\
  status VARCHAR(32){bin} NOT NULL,\n\
  error JSON,\n\
  started_at DATETIME(6) NOT NULL,\n\
  heartbeat_at DATETIME(6) NOT NULL,\n\
  finished_at DATETIME(6),\n\
  PRIMARY KEY (id),\n\
  CONSTRAINT `{uq}` UNIQUE (execution_id, attempt_no),\n\
  CONSTRAINT `{ck}` CHECK (status IN ({statuses})),\n\
  CONSTRAINT `{fk}` FOREIGN KEY (execution_id) REFERENCES `{t}` (id) ON DELETE CASCADE\n\
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4",
            uq = names.uq_attempt(),
            ck = names.ck_attempt_status(),
            statuses = match style {
                DdlStyle::Onestep => ATTEMPT_STATUSES,
                DdlStyle::Reference => REFERENCE_ATTEMPT_STATUSES,
            },
            fk = names.fk_attempt_execution(),
        ),
        format!(
            "CREATE INDEX `{}` ON `{a}` (execution_id, attempt_no DESC)",
            names.ix_attempt_execution()
        ),
    ]
}

/// `CREATE TABLE` + `CREATE INDEX` for the attempt-diagnostics table (docs/schema.md#attempt-diagnostics).
/// It has no foreign key, so it fits next to tables of either DDL (MariaDB's native `uuid` ids
/// included); `onestep purge` deletes its rows with their execution.
pub fn diagnostics_ddl(names: &TableNames) -> Vec<String> {
    let d = names.diagnostics();
    vec![
        format!(
            "CREATE TABLE `{d}` (\n\
  attempt_id {ASCII_ID} NOT NULL,\n\
  execution_id {ASCII_ID} NOT NULL,\n\
  is_final TINYINT NOT NULL DEFAULT '0',\n\
  message TEXT,\n\
  progress_done BIGINT UNSIGNED,\n\
  progress_total BIGINT UNSIGNED,\n\
  progress_note TEXT,\n\
  progress_at DATETIME(6),\n\
  log_lines BIGINT UNSIGNED NOT NULL DEFAULT '0',\n\
  log_tail MEDIUMTEXT,\n\
  trap_kind VARCHAR(255),\n\
  component_digest VARCHAR(255),\n\
  fuel_consumed BIGINT UNSIGNED,\n\
  peak_memory_bytes BIGINT UNSIGNED,\n\
  updated_at DATETIME(6) NOT NULL,\n\
  PRIMARY KEY (attempt_id)\n\
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
        ),
        format!(
            "CREATE INDEX `{}` ON `{d}` (execution_id)",
            names.ix_diagnostics_execution()
        ),
    ]
}

/// `CREATE TABLE` for the trace-context table (docs/schema.md#trace-context): the W3C
/// `traceparent` of the submit that created an execution, one row per execution, written only
/// while traces are on. No foreign key (it fits next to tables of either DDL); `onestep purge`
/// deletes its rows with their execution.
pub fn traces_ddl(names: &TableNames) -> Vec<String> {
    vec![format!(
        "CREATE TABLE `{}` (\n\
  execution_id {ASCII_ID} NOT NULL,\n\
  traceparent VARCHAR(255) NOT NULL,\n\
  created_at DATETIME(6) NOT NULL,\n\
  PRIMARY KEY (execution_id)\n\
) ENGINE=InnoDB DEFAULT CHARSET=ascii COLLATE=ascii_bin",
        names.traces()
    )]
}

pub(crate) async fn table_exists(conn: &mut Conn, table: &str) -> OpResult<bool> {
    let n: Option<i64> = conn
        .exec_first(
            "SELECT COUNT(*) FROM information_schema.TABLES \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?",
            (table,),
        )
        .await?;
    Ok(n.unwrap_or(0) > 0)
}

async fn detect_features(conn: &mut Conn, names: &TableNames) -> OpResult<SchemaFeatures> {
    Ok(SchemaFeatures {
        claimable_column: crate::upgrade::is_upgraded(conn, names).await?,
        claimable_index: crate::upgrade::has_index(conn, names, &ix_claimable(names)).await?,
        claim_priority_index: crate::upgrade::has_index(conn, names, &ix_claim_priority(names))
            .await?,
        fair_keys: table_exists(conn, &keys_table(names)).await?
            && crate::upgrade::has_fair_schema(conn, names).await?,
        buckets_table: table_exists(conn, &buckets_table(names)).await?,
        callbacks_tables: table_exists(conn, &callbacks_table(names)).await?
            && table_exists(conn, &deliveries_table(names)).await?
            && crate::upgrade::column_exists(conn, &callbacks_table(names), "progress_after")
                .await?,
        components_tables: table_exists(conn, &components_table(names)).await?
            && table_exists(conn, &component_chunks_table(names)).await?
            && table_exists(conn, &component_holders_table(names)).await?,
        deployments_tables: table_exists(conn, &deployments_table(names)).await?
            && table_exists(conn, &deployment_events_table(names)).await?
            && table_exists(conn, &deployment_revision_table(names)).await?,
        steps_table: table_exists(conn, &steps_table(names)).await?,
        parked_status: crate::upgrade::stale_status_check(conn, &names.attempts)
            .await?
            .is_none(),
        common: CommonFeatures {
            priority_columns: crate::upgrade::has_priority_columns(conn, names).await?,
            list_indexes: crate::upgrade::has_list_indexes(conn, names).await?,
            diagnostics_table: table_exists(conn, &names.diagnostics()).await?,
            traces_table: table_exists(conn, &names.traces()).await?,
        },
    })
}

pub(crate) async fn get_lock(conn: &mut Conn, name: &str) -> OpResult<()> {
    let got: Option<Option<i64>> = conn
        .exec_first("SELECT GET_LOCK(?, ?)", (name, DDL_LOCK_TIMEOUT_S))
        .await?;
    if got.flatten() == Some(1) {
        Ok(())
    } else {
        Err(OpError::Domain(misconfigured(format!(
            "could not acquire MySQL DDL lock '{name}' within {DDL_LOCK_TIMEOUT_S}s"
        ))))
    }
}

pub(crate) async fn release_lock(conn: &mut Conn, name: &str) {
    let released: Result<Option<Option<i64>>, _> =
        conn.exec_first("SELECT RELEASE_LOCK(?)", (name,)).await;
    if let Err(e) = released {
        // The lock is session scoped: it goes away with the connection anyway.
        tracing::warn!(lock = name, error = %e, "RELEASE_LOCK failed");
    }
}

fn misconfigured(message: String) -> onestep_core::ExecutionError {
    crate::errors::backend_error(
        "open",
        onestep_core::ConnectorKind::Misconfigured,
        &message,
        &[],
    )
}

/// Readiness step 2/3 (docs/semantics.md#opening-a-backend) on one session: with `auto_create`, take the global then the
/// pair `GET_LOCK`, create each missing table (executions first) and release the locks (pair
/// first) whatever happened; without it, fail with `missing execution tables: a, b`. Then detect
/// [`SchemaFeatures`].
pub(crate) async fn ensure_schema(
    conn: &mut Conn,
    names: &TableNames,
    auto_create: bool,
    style: DdlStyle,
    id: IdColumn,
) -> OpResult<SchemaReport> {
    let db: Option<Option<String>> = conn.query_first("SELECT DATABASE()").await?;
    if db.flatten().is_none() {
        return Err(OpError::Domain(misconfigured(
            "the dsn must name a database (mysql://user@host/<database>)".into(),
        )));
    }
    let mut created = Vec::new();
    if auto_create {
        get_lock(conn, GLOBAL_DDL_LOCK).await?;
        let pair = names.pair_lock();
        let outcome = match get_lock(conn, &pair).await {
            Ok(()) => {
                let r = create_missing(conn, names, style, id, &mut created).await;
                release_lock(conn, &pair).await;
                r
            }
            Err(e) => Err(e),
        };
        release_lock(conn, GLOBAL_DDL_LOCK).await;
        outcome?;
    } else {
        let mut missing = Vec::new();
        for table in [&names.executions, &names.attempts] {
            if !table_exists(conn, table).await? {
                missing.push(table.clone());
            }
        }
        if !missing.is_empty() {
            return Err(OpError::Domain(misconfigured(format!(
                "missing execution tables: {}",
                missing.join(", ")
            ))));
        }
    }
    let features = detect_features(conn, names).await?;
    Ok(SchemaReport::new(created, features))
}

async fn create_missing(
    conn: &mut Conn,
    names: &TableNames,
    style: DdlStyle,
    id: IdColumn,
    created: &mut Vec<String>,
) -> OpResult<()> {
    if !table_exists(conn, &names.executions).await? {
        for stmt in executions_ddl(names, style, id) {
            conn.query_drop(stmt).await?;
        }
        created.push(names.executions.clone());
    }
    if !table_exists(conn, &names.attempts).await? {
        for stmt in attempts_ddl(names, style, id) {
            conn.query_drop(stmt).await?;
        }
        created.push(names.attempts.clone());
    }
    let d = names.diagnostics();
    if !table_exists(conn, &d).await? {
        for stmt in diagnostics_ddl(names) {
            conn.query_drop(stmt).await?;
        }
        created.push(d);
    }
    let k = keys_table(names);
    if style == DdlStyle::Onestep && !table_exists(conn, &k).await? {
        for stmt in keys_ddl(names) {
            conn.query_drop(stmt).await?;
        }
        created.push(k);
    }
    let qt = quotas_table(names);
    if !table_exists(conn, &qt).await? {
        for stmt in quotas_ddl(names) {
            conn.query_drop(stmt).await?;
        }
        created.push(qt);
    }
    let tr = names.traces();
    if !table_exists(conn, &tr).await? {
        for stmt in traces_ddl(names) {
            conn.query_drop(stmt).await?;
        }
        created.push(tr);
    }
    // Its own table, beside tables of either DDL (docs/semantics.md#rate-limits).
    let b = buckets_table(names);
    if !table_exists(conn, &b).await? {
        for stmt in buckets_ddl(names) {
            conn.query_drop(stmt).await?;
        }
        created.push(b);
    }
    // docs/semantics.md#completion-webhooks: the outbox and its attempts.
    for (table, ddl) in [
        (callbacks_table(names), callbacks_ddl(names)),
        (deliveries_table(names), deliveries_ddl(names)),
        (component_chunks_table(names), component_chunks_ddl(names)),
        (components_table(names), components_ddl(names)),
        (component_holders_table(names), component_holders_ddl(names)),
        // docs/deployments.md#data-model: the deployments, their events and revision.
        (deployments_table(names), deployments_ddl(names)),
        (deployment_events_table(names), deployment_events_ddl(names)),
        (
            deployment_revision_table(names),
            deployment_revision_ddl(names),
        ),
        // docs/steps.md: the durable steps.
        (steps_table(names), steps_ddl(names)),
    ] {
        if !table_exists(conn, &table).await? {
            for stmt in ddl {
                conn.query_drop(stmt).await?;
            }
            created.push(table);
        }
    }
    Ok(())
}
