//! Durable steps (docs/steps.md): [`StepStore`] over `<T>_steps`. A save is one transaction:
//! the fence (`SELECT … FOR UPDATE` of the execution row under this attempt's lease token, in
//! a status holding a lease, its lease live at the backend's clock — a reclaim or completion
//! waits for the row lock, and one that came first leaves no row to lock), the totals against
//! the caps, then the upsert. A refused save writes nothing.

use async_trait::async_trait;
use mysql_async::prelude::Queryable;
use mysql_async::{Params, Value as DbValue};
use onestep_core::execution::LeaseRef;
use onestep_core::steps::{
    STEPS_TABLE_ABSENT, StepError, StepRecord, StepStore, StepTotals, validate,
};
use onestep_core::{ExecutionError, ExecutionStatus};
use uuid::Uuid;

use crate::backend::{MySqlBackend, begin};
use crate::errors::{OpError, OpResult};
use crate::fenced_writes::status_list;
use crate::rows::{bind_time, bind_uuid, instant, parse_uuid};
use crate::schema::steps_table;

fn domain(e: onestep_core::store::DecodeError) -> OpError {
    OpError::Domain(ExecutionError::from(e))
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

    async fn save_once(
        &self,
        table: &str,
        lease: &LeaseRef,
        key: &str,
        value: &str,
    ) -> OpResult<Result<(), StepError>> {
        let now = onestep_core::time::truncate_micros(self.now());
        let mut conn = self.conn().await?;
        let mut tx = begin(&mut conn).await?;
        let outcome = async {
            let attempt_no: Option<i64> = tx
                .exec_first(
                    format!(
                        "SELECT attempts FROM `{}` WHERE id = ? AND lease_token = ? \
                         AND status IN ({}) AND lease_expires_at > ? FOR UPDATE",
                        self.t(),
                        status_list(&[ExecutionStatus::Running, ExecutionStatus::CancelRequested])
                    ),
                    (
                        bind_uuid(lease.execution_id),
                        bind_uuid(lease.lease_token),
                        bind_time(now),
                    ),
                )
                .await?;
            let Some(attempt_no) = attempt_no else {
                return Ok(Err(StepError::Fenced));
            };
            let id = bind_uuid(lease.execution_id);
            let totals: Option<(i64, i64, Option<i64>, i64)> = tx
                .exec_first(
                    format!(
                        "SELECT COUNT(*), CAST(COALESCE(SUM(bytes), 0) AS SIGNED), \
                         MAX(CASE WHEN step_key = ? THEN bytes END), COALESCE(MAX(seq), 0) \
                         FROM `{table}` WHERE execution_id = ?"
                    ),
                    (key.as_bytes(), id.clone()),
                )
                .await?;
            let (steps, bytes, existing, seq) = totals.unwrap_or((0, 0, None, 0));
            let totals = StepTotals {
                steps: u32::try_from(steps).unwrap_or(u32::MAX),
                bytes: u64::try_from(bytes).unwrap_or(0),
                existing: existing.map(|n| u64::try_from(n).unwrap_or(0)),
            };
            let size = value.len() as u64;
            if let Err(e) = totals.admit(size) {
                return Ok(Err(e));
            }
            tx.exec_drop(
                format!(
                    "INSERT INTO `{table}` (execution_id, step_key, seq, value, bytes, \
                     attempt_id, attempt_no, saved_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) \
                     ON DUPLICATE KEY UPDATE value = VALUES(value), bytes = VALUES(bytes), \
                     attempt_id = VALUES(attempt_id), attempt_no = VALUES(attempt_no), \
                     saved_at = VALUES(saved_at)"
                ),
                Params::Positional(vec![
                    id,
                    DbValue::from(key.as_bytes()),
                    DbValue::from(seq + 1),
                    DbValue::from(value),
                    DbValue::from(size),
                    bind_uuid(lease.attempt_id),
                    DbValue::from(attempt_no),
                    bind_time(now),
                ]),
            )
            .await?;
            Ok(Ok(()))
        }
        .await;
        self.finish(tx, outcome).await
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
        self.run("step_save", || self.save_once(&table, lease, key, value))
            .await?
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
