//! Durable steps (docs/steps.md): [`StepStore`] over `<T>_steps`. A save is **one statement**
//! on the writer, an upsert whose `SELECT` carries the fence (the execution row holds this
//! attempt's lease token, a status holding a lease, the lease live at the backend's clock) and
//! the caps:
//!
//! ```sql
//! INSERT INTO <T>_steps (…) SELECT ?1, ?2, t.max_seq + 1, …, t.attempt_no, ?6
//! FROM (SELECT (SELECT attempts FROM <T> WHERE <fence>) AS attempt_no, count(*) AS n_steps, …
//!       FROM <T>_steps WHERE execution_id = ?1) t
//! WHERE t.attempt_no IS NOT NULL AND <caps over t> ON CONFLICT … DO UPDATE SET …
//! ```
//!
//! The database's write lock serialises it with every claim, heartbeat, completion and other
//! save, so fence and caps are exact, concurrent saves included. A save that wrote no row is
//! explained by a read on the same connection, still under the write lock (fence, then caps:
//! [`explain_unwritten`]).

use async_trait::async_trait;
use onestep_core::execution::LeaseRef;
use onestep_core::steps::{
    MAX_STEP_BYTES_PER_EXECUTION, MAX_STEPS_PER_EXECUTION, STEPS_TABLE_ABSENT, StepError,
    StepRecord, StepStore, StepTotals, explain_unwritten, unexplained_save, validate,
};
use onestep_core::{ExecutionError, ExecutionStatus};
use rusqlite::{OptionalExtension, params};
use uuid::Uuid;

use crate::backend::SqliteBackend;
use crate::errors::OpError;
use crate::rows::{int, text, time, ts, uid, uuid};
use crate::schema::{q, steps_table};

impl SqliteBackend {
    /// The quoted steps table, or the refusal naming the upgrade.
    fn steps(&self) -> Result<String, ExecutionError> {
        if self.schema_report().features.steps_table {
            Ok(q(&steps_table(self.tables())))
        } else {
            Err(ExecutionError::invalid(STEPS_TABLE_ABSENT))
        }
    }

    /// The steps table when it exists (purge deletes its rows).
    pub(crate) fn steps_existing(&self) -> Option<String> {
        self.steps().ok()
    }
}

fn decode(e: onestep_core::store::DecodeError) -> OpError {
    OpError::Domain(ExecutionError::from(e))
}

#[async_trait]
impl StepStore for SqliteBackend {
    async fn load(&self, execution_id: Uuid, key: &str) -> Result<Option<String>, ExecutionError> {
        let table = self.steps()?;
        let key = key.to_owned();
        self.run("step_load", || {
            let (table, key) = (table.clone(), key.clone());
            self.read(move |_, c| {
                Ok(c.prepare_cached(&format!(
                    "SELECT value FROM {table} WHERE execution_id = ?1 AND step_key = ?2"
                ))?
                .query_row(params![uid(execution_id), key], |r| r.get::<_, String>(0))
                .optional()?)
            })
        })
        .await
    }

    async fn save(&self, lease: &LeaseRef, key: &str, value: &str) -> Result<(), StepError> {
        validate(key, value)?;
        let table = self.steps()?;
        let (key, value, lease) = (key.to_owned(), value.to_owned(), *lease);
        let statuses = [ExecutionStatus::Running, ExecutionStatus::CancelRequested];
        self.run("step_save", || {
            let (table, key, value) = (table.clone(), key.clone(), value.clone());
            self.write(move |b, c| {
                let now = onestep_core::time::truncate_micros(b.now());
                let id = uid(lease.execution_id);
                let size = value.len() as u64;
                let bytes = i64::try_from(size).unwrap_or(i64::MAX);
                // The fence over parameters `?1` (id), `?{now}`, `?{token}`, `?{s}` and `?{s}+1`.
                let fence = |now: u8, token: u8, s: u8| {
                    format!(
                        "SELECT attempts FROM {} WHERE id = ?1 AND lease_token = ?{token} \
                         AND status IN (?{s}, ?{}) AND lease_expires_at IS NOT NULL \
                         AND lease_expires_at > ?{now}",
                        b.t(),
                        s + 1
                    )
                };
                let written = c
                    .prepare_cached(&format!(
                        "INSERT INTO {table} (execution_id, step_key, seq, value, bytes, \
                         attempt_id, attempt_no, saved_at) \
                         SELECT ?1, ?2, t.max_seq + 1, ?3, ?4, ?5, t.attempt_no, ?6 FROM (\
                         SELECT ({}) AS attempt_no, count(*) AS n_steps, \
                         COALESCE(sum(bytes), 0) AS n_bytes, \
                         max(CASE WHEN step_key = ?2 THEN bytes END) AS old_bytes, \
                         COALESCE(max(seq), 0) AS max_seq \
                         FROM {table} WHERE execution_id = ?1) t \
                         WHERE t.attempt_no IS NOT NULL \
                         AND (t.old_bytes IS NOT NULL OR t.n_steps < {MAX_STEPS_PER_EXECUTION}) \
                         AND t.n_bytes - COALESCE(t.old_bytes, 0) + ?4 \
                         <= {MAX_STEP_BYTES_PER_EXECUTION} \
                         ON CONFLICT (execution_id, step_key) DO UPDATE SET \
                         value = excluded.value, bytes = excluded.bytes, \
                         attempt_id = excluded.attempt_id, attempt_no = excluded.attempt_no, \
                         saved_at = excluded.saved_at",
                        fence(6, 7, 8)
                    ))?
                    .execute(params![
                        id,
                        key,
                        value,
                        bytes,
                        uid(lease.attempt_id),
                        ts(now),
                        uid(lease.lease_token),
                        statuses[0].as_str(),
                        statuses[1].as_str(),
                    ])?;
                if written > 0 {
                    return Ok(Ok(()));
                }
                // Still under the write lock: what the statement saw.
                let (holds, steps, total, existing): (bool, i64, i64, Option<i64>) = c
                    .prepare_cached(&format!(
                        "SELECT EXISTS ({}), count(*), COALESCE(sum(bytes), 0), \
                         max(CASE WHEN step_key = ?2 THEN bytes END) \
                         FROM {table} WHERE execution_id = ?1",
                        fence(3, 4, 5)
                    ))?
                    .query_row(
                        params![
                            id,
                            key,
                            ts(now),
                            uid(lease.lease_token),
                            statuses[0].as_str(),
                            statuses[1].as_str(),
                        ],
                        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
                    )?;
                let totals = StepTotals {
                    steps: u32::try_from(steps).unwrap_or(u32::MAX),
                    bytes: u64::try_from(total).unwrap_or(0),
                    existing: existing.map(|n| u64::try_from(n).unwrap_or(0)),
                };
                Ok(Err(explain_unwritten(holds, totals, size).unwrap_or_else(
                    || unexplained_save(crate::errors::BACKEND),
                )))
            })
        })
        .await?
    }

    async fn list(&self, execution_id: Uuid) -> Result<Vec<StepRecord>, ExecutionError> {
        let table = self.steps()?;
        self.run("step_list", || {
            let table = table.clone();
            self.read(move |_, c| {
                let mut st = c.prepare_cached(&format!(
                    "SELECT step_key, bytes, attempt_id, attempt_no, saved_at FROM {table} \
                     WHERE execution_id = ?1 ORDER BY seq"
                ))?;
                let rows = st.query_map(params![uid(execution_id)], |r| {
                    Ok((
                        text(r, 0, "step_key"),
                        int(r, 1, "bytes"),
                        uuid(r, 2, "attempt_id"),
                        int(r, 3, "attempt_no"),
                        time(r, 4, "saved_at"),
                    ))
                })?;
                let mut out = Vec::new();
                for row in rows {
                    let (key, bytes, attempt_id, attempt_no, saved_at) = row?;
                    out.push(StepRecord {
                        key: key.map_err(decode)?,
                        bytes: u64::try_from(bytes.map_err(decode)?).unwrap_or(0),
                        attempt_id: attempt_id.map_err(decode)?,
                        attempt_no: u32::try_from(attempt_no.map_err(decode)?).unwrap_or(0),
                        saved_at: saved_at.map_err(decode)?,
                    });
                }
                Ok(out)
            })
        })
        .await
    }
}
