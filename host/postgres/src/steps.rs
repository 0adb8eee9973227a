//! Durable steps (docs/steps.md): [`StepStore`] over `<T>_steps`. A save is **one statement**
//! (autocommit), so no lock it takes outlives the server's run of it — a worker frozen between
//! two calls holds no lock that keeps a claim from taking its expired lease over:
//!
//! ```sql
//! WITH fence AS (SELECT attempts FROM <T> WHERE id = $1 AND lease_token = $2
//!                  AND status = ANY($3) AND lease_expires_at > $4 FOR NO KEY UPDATE),
//!      totals AS (SELECT count(*) …, sum(bytes) …, the key's bytes, max(seq) FROM <T>_steps
//!                  WHERE execution_id = $1),
//!      saved AS (INSERT INTO <T>_steps (…) SELECT … FROM fence, totals WHERE <caps>
//!                  ON CONFLICT (execution_id, step_key) DO UPDATE SET … RETURNING 1)
//! SELECT EXISTS (SELECT 1 FROM fence), <totals>, EXISTS (SELECT 1 FROM saved) FROM totals
//! ```
//!
//! The fence locks the execution row for the statement: a reclaim or completion in flight is
//! waited for and the row checked again at its newest version (READ COMMITTED's re-check), so a
//! stale attempt writes nothing once another attempt holds the lease; one that comes later
//! waits for the save. The statement answers why it wrote nothing itself (fence, then caps:
//! [`explain_unwritten`]).
//!
//! The totals come from the statement's snapshot, taken before the fence's lock is granted:
//! two saves *of the same lease* running at once may each miss the other's row, so the caps
//! can be passed by up to one step (and one step's bytes) per save running at the same time
//! ([`StepStore::caps_exact_under_concurrent_saves`] is `false`). A worker never runs two saves
//! of one attempt at once (a guest's calls are sequential), and only the lease holder passes
//! the fence, so in use the caps are exact.

use async_trait::async_trait;
use onestep_core::execution::LeaseRef;
use onestep_core::steps::{
    MAX_STEP_BYTES_PER_EXECUTION, MAX_STEPS_PER_EXECUTION, STEPS_TABLE_ABSENT, StepError,
    StepRecord, StepStore, StepTotals, explain_unwritten, unexplained_save, validate,
};
use onestep_core::{ExecutionError, ExecutionStatus};
use uuid::Uuid;

use crate::backend::PgBackend;
use crate::errors::OpResult;
use crate::schema::{q, steps_table};

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

    /// The save statement (module docs). `$1` execution id, `$2` lease token, `$3` statuses,
    /// `$4` now, `$5` key, `$6` value, `$7` bytes, `$8` attempt id.
    pub(crate) fn step_save_sql(&self, table: &str) -> String {
        format!(
            "WITH fence AS (SELECT attempts FROM {exec} WHERE id = $1 AND lease_token = $2 \
             AND status = ANY($3) AND lease_expires_at IS NOT NULL AND lease_expires_at > $4 \
             FOR NO KEY UPDATE), \
             totals AS (SELECT count(*) AS n_steps, COALESCE(sum(bytes), 0)::BIGINT AS n_bytes, \
             max(bytes) FILTER (WHERE step_key = $5) AS old_bytes, \
             COALESCE(max(seq), 0) AS max_seq FROM {table} WHERE execution_id = $1), \
             saved AS (INSERT INTO {table} (execution_id, step_key, seq, value, bytes, \
             attempt_id, attempt_no, saved_at) \
             SELECT $1, $5, totals.max_seq + 1, $6, $7::INT, $8, fence.attempts, $4 \
             FROM fence, totals WHERE (totals.old_bytes IS NOT NULL \
             OR totals.n_steps < {max_steps}) \
             AND totals.n_bytes - COALESCE(totals.old_bytes, 0) + $7::INT <= {max_bytes} \
             ON CONFLICT (execution_id, step_key) DO UPDATE SET value = EXCLUDED.value, \
             bytes = EXCLUDED.bytes, attempt_id = EXCLUDED.attempt_id, \
             attempt_no = EXCLUDED.attempt_no, saved_at = EXCLUDED.saved_at RETURNING 1) \
             SELECT EXISTS (SELECT 1 FROM fence), totals.n_steps, totals.n_bytes, \
             totals.old_bytes, EXISTS (SELECT 1 FROM saved) FROM totals",
            exec = q(&self.tables().executions),
            max_steps = MAX_STEPS_PER_EXECUTION,
            max_bytes = MAX_STEP_BYTES_PER_EXECUTION,
        )
    }

    async fn save_once(
        &self,
        table: &str,
        lease: &LeaseRef,
        key: &str,
        value: &str,
    ) -> OpResult<Result<(), StepError>> {
        let now = onestep_core::time::truncate_micros(self.now());
        let statuses = vec![
            ExecutionStatus::Running.as_str(),
            ExecutionStatus::CancelRequested.as_str(),
        ];
        let size = value.len() as u64;
        // validate() bounds a value to 1 MiB, far inside INT.
        let bytes = i32::try_from(size).unwrap_or(i32::MAX);
        let conn = self.conn().await?;
        // Prepared once per pooled connection: one round trip per save instead of three
        // (parse/describe, bind/execute, close: docs/benchmarks.md#durable-steps).
        let st = conn.prepare_cached(&self.step_save_sql(table)).await?;
        let row = conn
            .query_one(
                &st,
                &[
                    &lease.execution_id,
                    &lease.lease_token,
                    &statuses,
                    &now,
                    &key,
                    &value,
                    &bytes,
                    &lease.attempt_id,
                ],
            )
            .await?;
        let fence: bool = row.try_get(0)?;
        let steps: i64 = row.try_get(1)?;
        let total: i64 = row.try_get(2)?;
        let existing: Option<i32> = row.try_get(3)?;
        let saved: bool = row.try_get(4)?;
        if saved {
            return Ok(Ok(()));
        }
        let totals = StepTotals {
            steps: u32::try_from(steps).unwrap_or(u32::MAX),
            bytes: u64::try_from(total).unwrap_or(0),
            existing: existing.map(|n| u64::try_from(n).unwrap_or(0)),
        };
        // The statement's own figures explain it; the upsert writes whenever fence and caps
        // let it, so nothing else can leave it unwritten.
        Ok(Err(explain_unwritten(fence, totals, size).unwrap_or_else(
            || unexplained_save(crate::errors::BACKEND),
        )))
    }
}

#[async_trait]
impl StepStore for PgBackend {
    async fn load(&self, execution_id: Uuid, key: &str) -> Result<Option<String>, ExecutionError> {
        let table = self.steps()?;
        self.run("step_load", || async {
            let conn = self.conn().await?;
            let st = conn
                .prepare_cached(&format!(
                    "SELECT value FROM {table} WHERE execution_id = $1 AND step_key = $2"
                ))
                .await?;
            let row = conn.query_opt(&st, &[&execution_id, &key]).await?;
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

    /// `false`: the totals come from the statement's snapshot (module docs).
    fn caps_exact_under_concurrent_saves(&self) -> bool {
        false
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
