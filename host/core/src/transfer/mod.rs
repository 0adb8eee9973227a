//! Moving a whole store between backends (`onestep copy`, docs/cli.md#onestep-copy): the
//! [`Transfer`] port every backend serves, the raw rows it moves ([`ExecutionRecord`]), and the
//! copy loop written once for every pair of backends ([`copy`]).
//!
//! A record is one execution's stored row with every column (lease token and expiry,
//! idempotency key and digest, timestamps, counters), its attempts, their diagnostics rows and
//! its trace-context row, as the source's driver read them. A backend exports pages of records
//! in its own id order (keyset, stable) and imports a page in one transaction, skipping a record
//! whose execution id the target already holds, so an interrupted copy can be run again.

mod page;
mod run;

pub use page::{ChildTables, ImportPlan, assemble, plan_import};
pub use run::{CopyError, CopyOptions, CopyReport, PageProgress, copy};

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use crate::error::ExecutionError;
use crate::store::StoredExecution;

/// One executions row with every stored column: the columns every read selects
/// ([`StoredExecution`]) plus those only the worker side and the submit path use.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecutionRow {
    /// The columns of [`crate::execution_columns!`] (`priority` and `fairness_key` read as their
    /// defaults from tables without them).
    pub stored: StoredExecution,
    /// `idempotency_key`.
    pub idempotency_key: Option<String>,
    /// `submission_digest`.
    pub submission_digest: Option<String>,
    /// `lease_token`.
    pub lease_token: Option<Uuid>,
    /// `lease_expires_at`.
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// `worker_id`.
    pub worker_id: Option<String>,
    /// `cancel_reason`.
    pub cancel_reason: Option<String>,
    /// `updated_at`.
    pub updated_at: DateTime<Utc>,
}

/// One attempts row.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptRow {
    /// `id`.
    pub id: Uuid,
    /// `execution_id`.
    pub execution_id: Uuid,
    /// `attempt_no`.
    pub attempt_no: i64,
    /// `lease_token`.
    pub lease_token: Uuid,
    /// `worker_id`.
    pub worker_id: String,
    /// `status`, as stored.
    pub status: String,
    /// `error`, parsed JSON.
    pub error: Option<Value>,
    /// `started_at`.
    pub started_at: DateTime<Utc>,
    /// `heartbeat_at`.
    pub heartbeat_at: DateTime<Utc>,
    /// `finished_at`.
    pub finished_at: Option<DateTime<Utc>>,
}

/// One attempt-diagnostics row (docs/schema.md#attempt-diagnostics), the log tail as its stored
/// JSON text.
#[derive(Debug, Clone, PartialEq)]
pub struct DiagnosticsRow {
    /// `attempt_id`.
    pub attempt_id: Uuid,
    /// `execution_id`.
    pub execution_id: Uuid,
    /// `is_final`.
    pub is_final: bool,
    /// `message`.
    pub message: Option<String>,
    /// `progress_done`.
    pub progress_done: Option<i64>,
    /// `progress_total`.
    pub progress_total: Option<i64>,
    /// `progress_note`.
    pub progress_note: Option<String>,
    /// `progress_at`.
    pub progress_at: Option<DateTime<Utc>>,
    /// `log_lines`.
    pub log_lines: i64,
    /// `log_tail`, as stored (JSON text).
    pub log_tail: Option<String>,
    /// `trap_kind`.
    pub trap_kind: Option<String>,
    /// `component_digest`.
    pub component_digest: Option<String>,
    /// `fuel_consumed`.
    pub fuel_consumed: Option<i64>,
    /// `peak_memory_bytes`.
    pub peak_memory_bytes: Option<i64>,
    /// `updated_at`.
    pub updated_at: DateTime<Utc>,
}

/// One trace-context row (docs/schema.md#trace-context).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceRow {
    /// `execution_id`.
    pub execution_id: Uuid,
    /// `traceparent`.
    pub traceparent: String,
    /// `created_at`.
    pub created_at: DateTime<Utc>,
}

/// One execution with everything stored about it.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecutionRecord {
    /// The executions row.
    pub execution: ExecutionRow,
    /// Its attempts, oldest first.
    pub attempts: Vec<AttemptRow>,
    /// The diagnostics rows of its attempts.
    pub diagnostics: Vec<DiagnosticsRow>,
    /// Its trace context, when one was stored.
    pub trace: Option<TraceRow>,
}

/// Refuses to write `records` into an executions table without the `priority` and
/// `fairness_key` columns when one of them holds other than the defaults (a copy never drops
/// them silently; docs/cli.md#onestep-copy).
pub fn check_schedule_storable(
    records: &[ExecutionRecord],
    columns_present: bool,
) -> Result<(), ExecutionError> {
    if columns_present {
        return Ok(());
    }
    for r in records {
        let s = &r.execution.stored;
        let priority = u8::try_from(s.priority).unwrap_or(u8::MAX);
        if let Err(e) = crate::schedule::check_storable(priority, s.fairness_key.as_deref(), false)
        {
            return Err(ExecutionError::invalid(format!(
                "copy: execution {} has priority {} and fairness key {:?}: {e}",
                s.id, s.priority, s.fairness_key
            )));
        }
    }
    Ok(())
}

impl ExecutionRecord {
    /// The execution id.
    pub fn id(&self) -> Uuid {
        self.execution.stored.id
    }

    /// The rows of this record, per table.
    pub fn counts(&self) -> TableCounts {
        TableCounts {
            executions: 1,
            attempts: self.attempts.len() as u64,
            diagnostics: self.diagnostics.len() as u64,
            traces: u64::from(self.trace.is_some()),
        }
    }
}

/// Rows per table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TableCounts {
    /// Executions rows.
    pub executions: u64,
    /// Attempts rows.
    pub attempts: u64,
    /// Attempt-diagnostics rows.
    pub diagnostics: u64,
    /// Trace-context rows.
    pub traces: u64,
}

impl TableCounts {
    /// Adds `other` to these counts.
    pub fn add(&mut self, other: TableCounts) {
        self.executions += other.executions;
        self.attempts += other.attempts;
        self.diagnostics += other.diagnostics;
        self.traces += other.traces;
    }

    /// Whether every count is at least `other`'s.
    pub fn covers(&self, other: &TableCounts) -> bool {
        self.executions >= other.executions
            && self.attempts >= other.attempts
            && self.diagnostics >= other.diagnostics
            && self.traces >= other.traces
    }
}

impl std::fmt::Display for TableCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} executions, {} attempts, {} diagnostics, {} traces",
            self.executions, self.attempts, self.diagnostics, self.traces
        )
    }
}

/// What one [`Transfer::import`] wrote and left alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ImportCounts {
    /// Rows written.
    pub copied: TableCounts,
    /// Rows of records whose execution id the target already held (not written).
    pub skipped: TableCounts,
}

/// Moving stored rows in and out of one backend's tables, as they are (no decoding, no
/// validation beyond what the target's columns enforce).
#[async_trait]
pub trait Transfer: Send + Sync {
    /// What names this store for the same-store check, as the server reports it (so that two
    /// URLs naming one server, `localhost` and `127.0.0.1`, name one store): the backend kind,
    /// the server's identity, the database and the executions table.
    async fn location(&self) -> Result<String, ExecutionError>;

    /// Up to `limit` records with an execution id after `after` (all when `None`), in the
    /// backend's id order, each with its attempts, diagnostics and trace rows.
    async fn export_page(
        &self,
        after: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<ExecutionRecord>, ExecutionError>;

    /// Writes `records` in one transaction, every column as given; a record whose execution id
    /// already exists is skipped whole (its attempts, diagnostics and trace too).
    async fn import(&self, records: &[ExecutionRecord]) -> Result<ImportCounts, ExecutionError>;

    /// Executions whose lease is still valid at `now` (`lease_expires_at > now`), by status.
    async fn live_leases(
        &self,
        now: DateTime<Utc>,
    ) -> Result<BTreeMap<String, u64>, ExecutionError>;

    /// Rows in each of the four tables (0 for a table that does not exist).
    async fn counts(&self) -> Result<TableCounts, ExecutionError>;
}
