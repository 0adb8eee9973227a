//! Durable steps (docs/steps.md): [`StepStore`] over `<T>_steps`. A save is one transaction:
//! the fence (`SELECT … FOR UPDATE` of the execution row under this attempt's lease token, in
//! a status holding a lease, its lease live at the backend's clock — a reclaim or completion
//! waits for the lock, and one that came first leaves no row to lock), the totals against the
//! caps, then the upsert. A refused save writes nothing.

use async_trait::async_trait;
use onestep_core::execution::LeaseRef;
use onestep_core::steps::{
    STEPS_TABLE_ABSENT, StepError, StepRecord, StepStore, StepTotals, validate,
};
use onestep_core::{ExecutionError, ExecutionStatus};
use uuid::Uuid;

use crate::backend::PgBackend;
use crate::errors::OpResult;
use crate::schema::{q, steps_table};
use crate::worker_ops::finish;

impl PgBackend {
    /// The quoted steps table, or the refusal naming the upgrade.
    fn steps(&self) -> Result<String, ExecutionError> {
        if self.schema_report().features.steps_table {
            Ok(q(&steps_table(self.tables())))
        } else {
            Err(ExecutionError::invalid(STEPS_TABLE_ABSENT))
        }
    }

    /// The steps table (quoted) when it exists (purge deletes its rows).
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
        let tx = conn.transaction().await?;
        let outcome = async {
            let statuses = vec![
                ExecutionStatus::Running.as_str(),
                ExecutionStatus::CancelRequested.as_str(),
            ];
            let fence = tx
                .query_opt(
                    &format!(
                        "SELECT attempts FROM {} WHERE id = $1 AND lease_token = $2 \
                         AND status = ANY($3) AND lease_expires_at > $4 FOR UPDATE",
                        q(&self.tables().executions)
                    ),
                    &[&lease.execution_id, &lease.lease_token, &statuses, &now],
                )
                .await?;
            let Some(fence) = fence else {
                return Ok(Err(StepError::Fenced));
            };
            let attempt_no: i32 = fence.try_get(0)?;
            let totals = tx
                .query_one(
                    &format!(
                        "SELECT count(*), COALESCE(sum(bytes), 0)::BIGINT, \
                         max(bytes) FILTER (WHERE step_key = $2), COALESCE(max(seq), 0) \
                         FROM {table} WHERE execution_id = $1"
                    ),
                    &[&lease.execution_id, &key],
                )
                .await?;
            let steps: i64 = totals.try_get(0)?;
            let bytes: i64 = totals.try_get(1)?;
            let existing: Option<i32> = totals.try_get(2)?;
            let seq: i32 = totals.try_get(3)?;
            let totals = StepTotals {
                steps: u32::try_from(steps).unwrap_or(u32::MAX),
                bytes: u64::try_from(bytes).unwrap_or(0),
                existing: existing.map(|n| u64::try_from(n).unwrap_or(0)),
            };
            let size = value.len() as u64;
            if let Err(e) = totals.admit(size) {
                return Ok(Err(e));
            }
            let size = i32::try_from(size).unwrap_or(i32::MAX);
            tx.execute(
                &format!(
                    "INSERT INTO {table} (execution_id, step_key, seq, value, bytes, attempt_id, \
                     attempt_no, saved_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
                     ON CONFLICT (execution_id, step_key) DO UPDATE SET value = EXCLUDED.value, \
                     bytes = EXCLUDED.bytes, attempt_id = EXCLUDED.attempt_id, \
                     attempt_no = EXCLUDED.attempt_no, saved_at = EXCLUDED.saved_at"
                ),
                &[
                    &lease.execution_id,
                    &key,
                    &(seq + 1),
                    &value,
                    &size,
                    &lease.attempt_id,
                    &attempt_no,
                    &now,
                ],
            )
            .await?;
            Ok(Ok(()))
        }
        .await;
        finish(tx, outcome).await
    }
}

#[async_trait]
impl StepStore for PgBackend {
    async fn load(&self, execution_id: Uuid, key: &str) -> Result<Option<String>, ExecutionError> {
        let table = self.steps()?;
        self.run("step_load", || async {
            let conn = self.conn().await?;
            let row = conn
                .query_opt(
                    &format!("SELECT value FROM {table} WHERE execution_id = $1 AND step_key = $2"),
                    &[&execution_id, &key],
                )
                .await?;
            Ok(match row {
                Some(r) => Some(r.try_get::<_, String>(0)?),
                None => None,
            })
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
            let conn = self.conn().await?;
            let rows = conn
                .query(
                    &format!(
                        "SELECT step_key, bytes, attempt_id, attempt_no, saved_at FROM {table} \
                         WHERE execution_id = $1 ORDER BY seq"
                    ),
                    &[&execution_id],
                )
                .await?;
            let mut out = Vec::with_capacity(rows.len());
            for r in &rows {
                out.push(StepRecord {
                    key: r.try_get(0)?,
                    bytes: u64::try_from(r.try_get::<_, i32>(1)?).unwrap_or(0),
                    attempt_id: r.try_get(2)?,
                    attempt_no: u32::try_from(r.try_get::<_, i32>(3)?).unwrap_or(0),
                    saved_at: r.try_get(4)?,
                });
            }
            Ok(out)
        })
        .await
    }
}
