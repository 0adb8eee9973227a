//! The set-based heartbeat of a worker's leases (docs/semantics.md#heartbeat,
//! docs/postgres.md#statements): one transaction with one injected "now", one statement per
//! chunk of up to 1000 distinct leases that renews the leases still held (token, status, live
//! lease, running attempt) and returns them; a lease it did not renew is stale on its own. Any
//! failure rolls the transaction back at once (docs/lease-protocol.md#refused-writes).

use std::collections::{HashMap, HashSet};

use chrono::{DateTime, Utc};
use deadpool_postgres::Transaction;
use onestep_core::execution::{HeartbeatResult, LeaseRef};
use onestep_core::store::lease::{LeaseWindow, heartbeat_answer};
use onestep_core::{ExecutionError, ExecutionStatus};
use uuid::Uuid;

use crate::backend::PgBackend;
use crate::errors::{OpError, OpResult};
use crate::worker_ops::{MAX_LEASES_PER_STATEMENT, count, finish};

impl PgBackend {
    async fn heartbeat_in(
        &self,
        tx: &Transaction<'_>,
        leases: &[LeaseRef],
        now: DateTime<Utc>,
        new_expiry: DateTime<Utc>,
    ) -> OpResult<Vec<Result<HeartbeatResult, ExecutionError>>> {
        let st = tx.prepare_cached(&self.sql().heartbeat_many).await?;
        let mut renewed: HashMap<LeaseRef, bool> = HashMap::with_capacity(leases.len());
        let distinct: Vec<LeaseRef> = {
            let mut seen = HashSet::with_capacity(leases.len());
            leases
                .iter()
                .filter(|l| seen.insert(**l))
                .copied()
                .collect()
        };
        for chunk in distinct.chunks(MAX_LEASES_PER_STATEMENT) {
            let ids: Vec<Uuid> = chunk.iter().map(|l| l.execution_id).collect();
            let tokens: Vec<Uuid> = chunk.iter().map(|l| l.lease_token).collect();
            let aids: Vec<Uuid> = chunk.iter().map(|l| l.attempt_id).collect();
            let rows = tx
                .query(&st, &[&ids, &tokens, &aids, &now, &new_expiry])
                .await?;
            for row in &rows {
                let decode = |idx: usize| {
                    row.try_get::<_, Uuid>(idx).map_err(|e| {
                        OpError::Domain(ExecutionError::Undecodable(format!(
                            "cannot decode heartbeat row: {e}"
                        )))
                    })
                };
                let lease = LeaseRef {
                    execution_id: decode(0)?,
                    lease_token: decode(1)?,
                    attempt_id: decode(2)?,
                };
                let status: String = row.try_get(3)?;
                let (ue, ua) = (count(row, 4)?, count(row, 5)?);
                if ue != rows.len() as i64 || ua != rows.len() as i64 {
                    // The rows are locked, so this cannot happen; refuse the batch if it does.
                    return Err(ExecutionError::Encoding(format!(
                        "heartbeat renewed {ue} executions and {ua} attempts for {} leases",
                        rows.len()
                    ))
                    .into());
                }
                renewed.insert(lease, status == ExecutionStatus::CancelRequested.as_str());
            }
        }
        Ok(leases
            .iter()
            .map(|l| heartbeat_answer(renewed.get(l).copied(), new_expiry))
            .collect())
    }

    pub(crate) async fn heartbeat_many_once(
        &self,
        leases: &[LeaseRef],
        window: LeaseWindow,
    ) -> OpResult<Vec<Result<HeartbeatResult, ExecutionError>>> {
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await?;
        // Any failure rolls back at once (docs/lease-protocol.md#refused-writes).
        let outcome = self
            .heartbeat_in(&tx, leases, window.now, window.expires_at)
            .await;
        finish(tx, outcome).await
    }
}
