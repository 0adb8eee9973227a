//! Durable steps (docs/steps.md): [`StepStore`] over `<T>_steps`. A save is **one statement**
//! (autocommit), so no lock it takes outlives the server's run of it — a worker frozen between
//! two calls holds no lock that keeps a claim from taking its expired lease over:
//!
//! ```sql
//! INSERT INTO <T>_steps (…) SELECT ?, ?, t.max_seq + 1, ?, ?, ?, t.attempt_no, ?
//! FROM (SELECT MAX(e.attempts) AS attempt_no, COUNT(s.step_key) AS n_steps, … FROM <T> e
//!       LEFT JOIN <T>_steps s ON s.execution_id = ?
//!       WHERE e.id = ? AND e.lease_token = ? AND e.status IN ('running','cancel_requested')
//!         AND e.lease_expires_at > ? FOR UPDATE) t
//! WHERE t.attempt_no IS NOT NULL AND <caps over t> ON DUPLICATE KEY UPDATE …
//! ```
//!
//! The derived table (MySQL refuses no `INSERT … SELECT` from its own target, but the read of
//! the target must be a derived table so that the `ON DUPLICATE KEY UPDATE` clause sees no
//! `GROUP BY`) is a locking read: the execution row (a const table, read first) is locked
//! under the fence — a reclaim or completion waits for the statement or came first, and then
//! the fence finds no lease — and the execution's step rows are read as the latest committed
//! versions under their locks. Two saves of one execution therefore run one after the other,
//! and the second sees the first's row: the caps are exact under concurrent saves too. A save
//! that wrote no row is explained by one plain read after it (fence, then caps:
//! [`explain_unwritten`]).

use async_trait::async_trait;
use mysql_async::prelude::Queryable;
use mysql_async::{Params, Value as DbValue};
use onestep_core::execution::LeaseRef;
use onestep_core::steps::{
    MAX_STEP_BYTES_PER_EXECUTION, MAX_STEPS_PER_EXECUTION, STEPS_TABLE_ABSENT, StepError,
    StepRecord, StepStore, StepTotals, UNEXPLAINED_SAVE_RETRIES, explain_unwritten,
    unexplained_save, validate,
};
use onestep_core::{ExecutionError, ExecutionStatus};
use uuid::Uuid;

use crate::backend::MySqlBackend;
use crate::errors::{OpError, OpResult};
use crate::fenced_writes::status_list;
use crate::rows::{bind_time, bind_uuid, instant, parse_uuid};
use crate::schema::steps_table;

fn domain(e: onestep_core::store::DecodeError) -> OpError {
    OpError::Domain(ExecutionError::from(e))
}

/// The statuses whose lease a save may write under.
const SAVE_STATUSES: [ExecutionStatus; 2] =
    [ExecutionStatus::Running, ExecutionStatus::CancelRequested];

/// What one run of the save statement came to.
enum Saved {
    /// Written (or the same value was there already, saved by this attempt at this instant).
    Done,
    /// Refused, for this reason.
    Refused(StepError),
    /// No row written and the read after it found no reason: run it again.
    Unexplained,
}

impl MySqlBackend {
    /// The steps table, or the refusal naming the upgrade.
    fn steps(&self) -> Result<String, ExecutionError> {
        if self.schema_report().features.steps_table {
            Ok(steps_table(self.tables()))
        } else {
            Err(ExecutionError::invalid(STEPS_TABLE_ABSENT))
        }
    }

    /// The steps table when it exists (purge deletes its rows).
    pub(crate) fn steps_existing(&self) -> Option<String> {
        self.steps().ok()
    }

    /// The save statement (module docs).
    pub(crate) fn step_save_sql(&self, table: &str) -> String {
        format!(
            "INSERT INTO `{table}` (execution_id, step_key, seq, value, bytes, attempt_id, \
             attempt_no, saved_at) \
             SELECT ?, ?, t.max_seq + 1, ?, ?, ?, t.attempt_no, ? FROM (\
             SELECT MAX(e.attempts) AS attempt_no, COUNT(s.step_key) AS n_steps, \
             CAST(COALESCE(SUM(s.bytes), 0) AS SIGNED) AS n_bytes, \
             MAX(CASE WHEN s.step_key = ? THEN s.bytes END) AS old_bytes, \
             COALESCE(MAX(s.seq), 0) AS max_seq \
             FROM `{exec}` e LEFT JOIN `{table}` s ON s.execution_id = ? \
             WHERE e.id = ? AND e.lease_token = ? AND e.status IN ({statuses}) \
             AND e.lease_expires_at IS NOT NULL AND e.lease_expires_at > ? FOR UPDATE) t \
             WHERE t.attempt_no IS NOT NULL \
             AND (t.old_bytes IS NOT NULL OR t.n_steps < {max_steps}) \
             AND t.n_bytes - COALESCE(t.old_bytes, 0) + ? <= {max_bytes} \
             ON DUPLICATE KEY UPDATE value = VALUES(value), bytes = VALUES(bytes), \
             attempt_id = VALUES(attempt_id), attempt_no = VALUES(attempt_no), \
             saved_at = VALUES(saved_at)",
            exec = self.t(),
            statuses = status_list(&SAVE_STATUSES),
            max_steps = MAX_STEPS_PER_EXECUTION,
            max_bytes = MAX_STEP_BYTES_PER_EXECUTION,
        )
    }

    /// The plain read that explains a save that wrote no row (module docs).
    pub(crate) fn step_explain_sql(&self, table: &str) -> String {
        format!(
            "SELECT (SELECT COUNT(*) FROM `{exec}` WHERE id = ? AND lease_token = ? \
             AND status IN ({statuses}) AND lease_expires_at IS NOT NULL \
             AND lease_expires_at > ?), \
             COUNT(*), CAST(COALESCE(SUM(bytes), 0) AS SIGNED), \
             MAX(CASE WHEN step_key = ? THEN bytes END), \
             COALESCE(MAX(CASE WHEN step_key = ? AND attempt_id = ? AND saved_at = ? \
             AND value = ? THEN 1 END), 0) \
             FROM `{table}` WHERE execution_id = ?",
            exec = self.t(),
            statuses = status_list(&SAVE_STATUSES),
        )
    }

    async fn save_once(
        &self,
        table: &str,
        lease: &LeaseRef,
        key: &str,
        value: &str,
    ) -> OpResult<Saved> {
        let now = onestep_core::time::truncate_micros(self.now());
        let size = value.len() as u64;
        let id = bind_uuid(lease.execution_id);
        let mut conn = self.conn().await?;
        conn.exec_drop(
            self.step_save_sql(table),
            Params::Positional(vec![
                id.clone(),
                DbValue::from(key.as_bytes()),
                DbValue::from(value),
                DbValue::from(size),
                bind_uuid(lease.attempt_id),
                bind_time(now),
                DbValue::from(key.as_bytes()),
                id.clone(),
                id.clone(),
                bind_uuid(lease.lease_token),
                bind_time(now),
                DbValue::from(size),
            ]),
        )
        .await?;
        if conn.affected_rows() > 0 {
            return Ok(Saved::Done);
        }
        let row: Option<(i64, i64, i64, Option<i64>, i64)> = conn
            .exec_first(
                self.step_explain_sql(table),
                Params::Positional(vec![
                    id.clone(),
                    bind_uuid(lease.lease_token),
                    bind_time(now),
                    DbValue::from(key.as_bytes()),
                    DbValue::from(key.as_bytes()),
                    bind_uuid(lease.attempt_id),
                    bind_time(now),
                    DbValue::from(value),
                    id,
                ]),
            )
            .await?;
        let (fence, steps, bytes, existing, same) = row.unwrap_or((0, 0, 0, None, 0));
        if same > 0 {
            // `ON DUPLICATE KEY UPDATE` that changed nothing counts no row: the same value was
            // saved by this attempt at this very instant.
            return Ok(Saved::Done);
        }
        let totals = StepTotals {
            steps: u32::try_from(steps).unwrap_or(u32::MAX),
            bytes: u64::try_from(bytes).unwrap_or(0),
            existing: existing.map(|n| u64::try_from(n).unwrap_or(0)),
        };
        Ok(match explain_unwritten(fence > 0, totals, size) {
            Some(e) => Saved::Refused(e),
            None => Saved::Unexplained,
        })
    }
}

#[async_trait]
impl StepStore for MySqlBackend {
    async fn load(&self, execution_id: Uuid, key: &str) -> Result<Option<String>, ExecutionError> {
        let table = self.steps()?;
        self.run("step_load", || async {
            let mut conn = self.conn().await?;
            let value: Option<String> = conn
                .exec_first(
                    format!("SELECT value FROM `{table}` WHERE execution_id = ? AND step_key = ?"),
                    (bind_uuid(execution_id), key.as_bytes()),
                )
                .await?;
            Ok(value)
        })
        .await
    }

    async fn save(&self, lease: &LeaseRef, key: &str, value: &str) -> Result<(), StepError> {
        validate(key, value)?;
        let table = self.steps()?;
        for _ in 0..UNEXPLAINED_SAVE_RETRIES {
            match self
                .run("step_save", || self.save_once(&table, lease, key, value))
                .await?
            {
                Saved::Done => return Ok(()),
                Saved::Refused(e) => return Err(e),
                Saved::Unexplained => continue,
            }
        }
        Err(unexplained_save(crate::errors::BACKEND))
    }

    async fn list(&self, execution_id: Uuid) -> Result<Vec<StepRecord>, ExecutionError> {
        let table = self.steps()?;
        self.run("step_list", || async {
            let mut conn = self.conn().await?;
            let rows: Vec<(Vec<u8>, i64, DbValue, i64, DbValue)> = conn
                .exec(
                    format!(
                        "SELECT step_key, bytes, attempt_id, attempt_no, saved_at FROM `{table}` \
                         WHERE execution_id = ? ORDER BY seq"
                    ),
                    (bind_uuid(execution_id),),
                )
                .await?;
            let mut out = Vec::with_capacity(rows.len());
            for (key, bytes, attempt_id, attempt_no, saved_at) in rows {
                out.push(StepRecord {
                    key: String::from_utf8(key).map_err(|e| {
                        OpError::Domain(ExecutionError::Undecodable(format!(
                            "step_key is not UTF-8: {e}"
                        )))
                    })?,
                    bytes: u64::try_from(bytes).unwrap_or(0),
                    attempt_id: parse_uuid(&attempt_id).map_err(domain)?,
                    attempt_no: u32::try_from(attempt_no).unwrap_or(0),
                    saved_at: instant(saved_at, "saved_at").map_err(domain)?,
                });
            }
            Ok(out)
        })
        .await
    }
}
