//! A task's fleet-wide running cap on PostgreSQL (docs/semantics.md#max-running): inside the
//! claim's transaction, after maintenance, the task's cap-lock row of `<T>_buckets` is locked
//! (`SELECT … FOR UPDATE`; inserted first with `ON CONFLICT DO NOTHING` when missing, so
//! concurrent creators agree on one row), then the task's `running`/`cancel_requested` rows are
//! counted (`ix_<T>_fair_running` or `ix_<T>_lease`, both partial on those statuses). Every
//! capped claim of the task queues on the row until the claimer before it commits, and under
//! READ COMMITTED the count, a statement after the lock, sees that claimer's leases.

use chrono::{DateTime, Utc};
use deadpool_postgres::Transaction;
use onestep_core::ExecutionError;
use onestep_core::request::ClaimRequest;
use onestep_core::store::cap::{CAP_LOCK_TABLE_ABSENT, cap_lock_name, capped_limit, capped_task};

use crate::backend::PgBackend;
use crate::errors::OpResult;
use crate::schema::{buckets_table, q};

impl PgBackend {
    /// The statements of the cap: lock, create, count (for EXPLAIN in tests).
    pub fn cap_statements(&self) -> [(&'static str, String); 3] {
        let b = q(&buckets_table(self.tables()));
        let t = q(&self.tables().executions);
        [
            (
                "cap_lock",
                format!("SELECT 1 FROM {b} WHERE bucket = $1 FOR UPDATE"),
            ),
            (
                "cap_create",
                format!(
                    "INSERT INTO {b} (bucket, tokens, refilled_at, paused_until) \
                     VALUES ($1, 0, $2, NULL) ON CONFLICT DO NOTHING"
                ),
            ),
            (
                "cap_running",
                format!(
                    "SELECT count(*) FROM {t} WHERE task_name = $1 \
                     AND status IN ('running', 'cancel_requested')"
                ),
            ),
        ]
    }

    /// The claim limit under the request's `max_running` (docs/semantics.md#max-running): the
    /// request's own limit without a cap; with one, the task's cap lock is taken and held to the
    /// end of `tx`, and the limit is cut to the room left (0: claim nothing).
    pub(crate) async fn cap_limit(
        &self,
        tx: &Transaction<'_>,
        req: &ClaimRequest,
        now: DateTime<Utc>,
    ) -> OpResult<u32> {
        let Some(task) = capped_task(req) else {
            return Ok(req.limit);
        };
        if !self.schema_report().features.buckets_table {
            return Err(ExecutionError::invalid(CAP_LOCK_TABLE_ABSENT).into());
        }
        let [(_, lock), (_, create), (_, running)] = self.cap_statements();
        let name = cap_lock_name(task);
        let lock = tx.prepare_cached(&lock).await?;
        if tx.query_opt(&lock, &[&name]).await?.is_none() {
            let st = tx.prepare_cached(&create).await?;
            tx.execute(&st, &[&name, &now]).await?;
            if tx.query_opt(&lock, &[&name]).await?.is_none() {
                return Err(ExecutionError::Undecodable(format!(
                    "cap lock '{name}' is missing right after its insert"
                ))
                .into());
            }
        }
        let st = tx.prepare_cached(&running).await?;
        let n: i64 = tx.query_one(&st, &[&task]).await?.try_get(0)?;
        Ok(capped_limit(req, u64::try_from(n).unwrap_or(0)))
    }
}
