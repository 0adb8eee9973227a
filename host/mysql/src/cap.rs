//! A task's fleet-wide running cap on MySQL/MariaDB (docs/semantics.md#max-running): inside the
//! claim's transaction, after maintenance, the task's cap-lock row of `<T>_buckets` is locked
//! (`SELECT … FOR UPDATE`; inserted first with `INSERT IGNORE` when missing, so concurrent
//! creators agree on one row; a deadlock between two creators is retried like any other), then
//! the task's `running`/`cancel_requested` rows are counted. Every capped claim of the task
//! queues on the row until the claimer before it commits, and under READ COMMITTED (every
//! pooled session, `session.rs`) the count, a statement after the lock, sees that claimer's
//! leases.

use chrono::{DateTime, Utc};
use mysql_async::Transaction;
use mysql_async::prelude::Queryable;
use onestep_core::ExecutionError;
use onestep_core::request::ClaimRequest;
use onestep_core::store::cap::{CAP_LOCK_TABLE_ABSENT, cap_lock_name, capped_limit, capped_task};

use crate::backend::MySqlBackend;
use crate::errors::OpResult;
use crate::rows::bind_time;
use crate::schema::buckets_table;

impl MySqlBackend {
    /// The statements of the cap: lock, create, count (binds: name; name, now; task), for
    /// EXPLAIN in tests. The count names `lease_expires_at IS NOT NULL` (every running row
    /// holds a lease) so that the server may read `ix_<T>_lease`'s leased range instead of
    /// every index entry of the task.
    pub fn cap_statements(&self) -> [(&'static str, String); 3] {
        let b = buckets_table(self.tables());
        let t = self.t();
        [
            (
                "cap_lock",
                format!("SELECT 1 FROM `{b}` WHERE bucket = ? FOR UPDATE"),
            ),
            (
                "cap_create",
                format!(
                    "INSERT IGNORE INTO `{b}` (bucket, tokens, refilled_at, paused_until) \
                     VALUES (?, 0, ?, NULL)"
                ),
            ),
            (
                "cap_running",
                format!(
                    "SELECT COUNT(*) FROM `{t}` WHERE task_name = ? \
                     AND status IN ('running','cancel_requested') \
                     AND lease_expires_at IS NOT NULL"
                ),
            ),
        ]
    }

    /// The claim limit under the request's `max_running` (docs/semantics.md#max-running): the
    /// request's own limit without a cap; with one, the task's cap lock is taken and held to the
    /// end of `tx`, and the limit is cut to the room left (0: claim nothing).
    pub(crate) async fn cap_limit(
        &self,
        tx: &mut Transaction<'_>,
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
        let got: Option<i64> = tx.exec_first(&lock, (name.as_bytes(),)).await?;
        if got.is_none() {
            tx.exec_drop(&create, (name.as_bytes(), bind_time(now)))
                .await?;
            let again: Option<i64> = tx.exec_first(&lock, (name.as_bytes(),)).await?;
            if again.is_none() {
                return Err(ExecutionError::Undecodable(format!(
                    "cap lock '{name}' is missing right after its insert"
                ))
                .into());
            }
        }
        let n: Option<i64> = tx.exec_first(&running, (task,)).await?;
        Ok(capped_limit(
            req,
            u64::try_from(n.unwrap_or(0)).unwrap_or(0),
        ))
    }
}
