//! Completion webhooks on PostgreSQL (docs/semantics.md#completion-webhooks): the outbox
//! `<T>_callbacks`, written in the submit's transaction, and the attempts `<T>_deliveries`.
//! Senders claim due rows whose execution is terminal with `FOR UPDATE SKIP LOCKED` and a short
//! lease (`claimed_until`), so concurrent senders never claim the same row and a killed
//! sender's rows are claimed again once its lease runs out.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use deadpool_postgres::GenericClient;
use onestep_core::callback::{
    CallbackRecord, CallbackSpec, CallbackState, CallbackStore, DeliveryAttempt, DeliveryOutcome,
    DueCallback, PROGRESS_EVENT, PassedEvent, STARTED_EVENT,
};
use onestep_core::request::PreparedSubmission;
use onestep_core::{ExecutionError, ExecutionStatus};
use uuid::Uuid;

use crate::backend::PgBackend;
use crate::errors::{OpError, OpResult};
use crate::schema::{callbacks_table, deliveries_table, q};

/// When a pending callback has an event to deliver (`$1`: now): its execution ended; or it
/// asks for `started`, has not passed it, and the first attempt started; or it asks for
/// `progress`, its throttle has run out, and an attempt reported progress newer than the last
/// passed (`diag`: the quoted diagnostics table; without it there is no progress).
pub(crate) fn has_event_sql(diag: Option<&str>) -> String {
    let terminal = terminal_list();
    let progress = match diag {
        Some(d) => format!(
            " OR (cb.events LIKE '%{PROGRESS_EVENT}%' \
               AND (cb.progress_after IS NULL OR cb.progress_after <= $1) \
               AND EXISTS (SELECT 1 FROM {d} dg WHERE dg.execution_id = cb.execution_id \
                 AND dg.progress_at IS NOT NULL \
                 AND (cb.progress_sent_at IS NULL OR dg.progress_at > cb.progress_sent_at)))"
        ),
        None => String::new(),
    };
    format!(
        "(e.status IN ({terminal}) \
          OR (cb.events LIKE '%{STARTED_EVENT}%' AND NOT cb.started_done \
              AND e.started_at IS NOT NULL){progress})"
    )
}
use crate::worker_ops::finish;

/// Refusal of a callback when the tables lack the outbox.
pub(crate) const CALLBACKS_ABSENT: &str = "the completion-webhook tables are absent (or lack \
     the started/progress columns): submits with a callback are refused; `onestep migrate \
     --upgrade` adds them";

/// The terminal statuses as a SQL list (`'succeeded', …`).
pub(crate) fn terminal_list() -> String {
    [
        ExecutionStatus::Succeeded,
        ExecutionStatus::Failed,
        ExecutionStatus::Cancelled,
        ExecutionStatus::Expired,
    ]
    .iter()
    .map(|s| format!("'{}'", s.as_str()))
    .collect::<Vec<_>>()
    .join(", ")
}

fn decode_err(what: &str, e: impl std::fmt::Display) -> OpError {
    OpError::Domain(ExecutionError::Encoding(format!("callback {what}: {e}")))
}

fn u32_of(v: i32) -> u32 {
    u32::try_from(v).unwrap_or(0)
}

impl PgBackend {
    /// The quoted outbox and attempts tables, or the refusal naming the upgrade.
    fn callback_tables(&self) -> Result<(String, String), ExecutionError> {
        if self.schema_report().features.callbacks_tables {
            let names = self.tables();
            Ok((q(&callbacks_table(names)), q(&deliveries_table(names))))
        } else {
            Err(ExecutionError::invalid(CALLBACKS_ABSENT))
        }
    }

    /// Writes the callback of a newly created execution in the submit's transaction; nothing
    /// without one.
    pub(crate) async fn store_callback<C: GenericClient>(
        &self,
        c: &C,
        sub: &PreparedSubmission,
        now: DateTime<Utc>,
    ) -> OpResult<()> {
        let Some(cb) = &sub.callback else {
            return Ok(());
        };
        let (table, _) = self.callback_tables()?;
        let events = cb.events_text();
        c.execute(
            &format!(
                "INSERT INTO {table} (execution_id, namespace, url, events, state, attempts, \
                 round_start, next_at, created_at, updated_at) \
                 VALUES ($1, $2, $3, $4, 'pending', 0, 0, $5, $5, $5) \
                 ON CONFLICT (execution_id) DO NOTHING"
            ),
            &[&sub.id, &sub.namespace, &cb.url, &events, &now],
        )
        .await?;
        Ok(())
    }

    /// The callbacks of the new executions of a batch (`created`: the submissions whose own
    /// id was inserted).
    pub(crate) async fn store_callbacks<C: GenericClient>(
        &self,
        c: &C,
        created: &[&PreparedSubmission],
        now: DateTime<Utc>,
    ) -> OpResult<()> {
        for sub in created {
            self.store_callback(c, sub, now).await?;
        }
        Ok(())
    }

    async fn cb_claim_once(&self, limit: i64, lease: Duration) -> OpResult<Vec<DueCallback>> {
        let (c, _) = self.callback_tables()?;
        let t = &self.sql().t;
        let now = self.now();
        let until = now + chrono::Duration::from_std(lease).unwrap_or(chrono::Duration::minutes(1));
        let diag = self.d();
        let has_event = has_event_sql(diag.as_deref());
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await?;
        let out = async {
            let rows = tx
                .query(
                    &format!(
                        "WITH due AS (\
                           SELECT cb.execution_id FROM {c} cb JOIN {t} e ON e.id = cb.execution_id \
                           WHERE cb.state = 'pending' AND cb.next_at <= $1 \
                             AND (cb.claimed_until IS NULL OR cb.claimed_until <= $1) \
                             AND {has_event} \
                           ORDER BY cb.next_at LIMIT $2 \
                           FOR UPDATE OF cb SKIP LOCKED) \
                         UPDATE {c} AS cb SET claimed_until = $3 FROM due \
                         WHERE cb.execution_id = due.execution_id \
                         RETURNING cb.execution_id, cb.namespace, cb.url, cb.attempts, \
                           cb.round_start, cb.events, cb.started_done, cb.progress_seq, \
                           cb.progress_sent_at"
                    ),
                    &[&now, &limit, &until],
                )
                .await?;
            rows.iter()
                .map(|r| {
                    let events: String = r.try_get(5)?;
                    Ok(DueCallback {
                        execution_id: r.try_get(0)?,
                        namespace: r.try_get(1)?,
                        url: r.try_get(2)?,
                        attempts: u32_of(r.try_get(3)?),
                        round_start: u32_of(r.try_get(4)?),
                        events: CallbackSpec::events_of(&events),
                        started_done: r.try_get(6)?,
                        progress_seq: u32_of(r.try_get(7)?),
                        progress_sent_at: r.try_get(8)?,
                    })
                })
                .collect::<OpResult<Vec<_>>>()
        }
        .await;
        finish(tx, out).await
    }

    async fn cb_record_once(&self, o: &DeliveryOutcome) -> OpResult<()> {
        let (c, d) = self.callback_tables()?;
        let now = self.now();
        let attempt = i32::try_from(o.attempt_no).unwrap_or(i32::MAX);
        let status = o.status.map(i32::from);
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await?;
        let out = async {
            tx.execute(
                &format!(
                    "INSERT INTO {d} (execution_id, attempt_no, event, webhook_id, status, error, at) \
                     VALUES ($1, $2, $3, $4, $5, $6, $7) \
                     ON CONFLICT (execution_id, attempt_no) DO NOTHING"
                ),
                &[
                    &o.execution_id,
                    &attempt,
                    &o.event,
                    &o.webhook_id,
                    &status,
                    &o.error,
                    &o.at,
                ],
            )
            .await?;
            // A stale sender (its claim ran out, another delivered) never reopens a callback.
            match &o.passed {
                None => {}
                Some(PassedEvent::Started) => {
                    tx.execute(
                        &format!(
                            "UPDATE {c} SET started_done = true, \
                             round_start = GREATEST(round_start, $2) \
                             WHERE execution_id = $1 AND state = 'pending'"
                        ),
                        &[&o.execution_id, &attempt],
                    )
                    .await?;
                }
                Some(PassedEvent::Progress {
                    seq,
                    progress_at,
                    after,
                }) => {
                    let seq = i32::try_from(*seq).unwrap_or(i32::MAX);
                    tx.execute(
                        &format!(
                            "UPDATE {c} SET progress_seq = GREATEST(progress_seq, $3), \
                             progress_sent_at = GREATEST(progress_sent_at, $4), \
                             progress_after = GREATEST(progress_after, $5), \
                             round_start = GREATEST(round_start, $2) \
                             WHERE execution_id = $1 AND state = 'pending'"
                        ),
                        &[&o.execution_id, &attempt, &seq, progress_at, after],
                    )
                    .await?;
                }
            }
            tx.execute(
                &format!(
                    "UPDATE {c} SET state = $2, attempts = GREATEST(attempts, $3), \
                     next_at = COALESCE($4, next_at), claimed_until = NULL, last_status = $5, \
                     last_error = $6, updated_at = $7 \
                     WHERE execution_id = $1 AND state = 'pending'"
                ),
                &[
                    &o.execution_id,
                    &o.state.as_str(),
                    &attempt,
                    &o.next_at,
                    &status,
                    &o.error,
                    &now,
                ],
            )
            .await?;
            Ok(())
        }
        .await;
        finish(tx, out).await
    }

    async fn cb_deliveries_once(
        &self,
        namespace: &str,
        id: Uuid,
    ) -> OpResult<Option<CallbackRecord>> {
        let (c, d) = self.callback_tables()?;
        let conn = self.conn().await?;
        let Some(row) = conn
            .query_opt(
                &format!(
                    "SELECT url, events, state, attempts, next_at FROM {c} \
                     WHERE execution_id = $1 AND namespace = $2"
                ),
                &[&id, &namespace],
            )
            .await?
        else {
            return Ok(None);
        };
        let state: String = row.try_get(2)?;
        let state = CallbackState::parse(&state).ok_or_else(|| decode_err("state", &state))?;
        let events: String = row.try_get(1)?;
        let rows = conn
            .query(
                &format!(
                    "SELECT attempt_no, event, webhook_id, status, error, at FROM {d} \
                     WHERE execution_id = $1 ORDER BY attempt_no"
                ),
                &[&id],
            )
            .await?;
        let deliveries = rows
            .iter()
            .map(|r| {
                let status: Option<i32> = r.try_get(3)?;
                Ok(DeliveryAttempt {
                    attempt_no: u32_of(r.try_get(0)?),
                    event: r.try_get(1)?,
                    webhook_id: r.try_get(2)?,
                    status: status.and_then(|s| u16::try_from(s).ok()),
                    error: r.try_get(4)?,
                    at: r.try_get(5)?,
                })
            })
            .collect::<OpResult<Vec<_>>>()?;
        Ok(Some(CallbackRecord {
            url: row.try_get(0)?,
            events: CallbackSpec::events_of(&events),
            state,
            attempts: u32_of(row.try_get(3)?),
            next_at: (state == CallbackState::Pending)
                .then(|| row.try_get(4))
                .transpose()?,
            deliveries,
        }))
    }

    async fn cb_redeliver_once(&self, namespace: &str, id: Uuid) -> OpResult<bool> {
        let (c, _) = self.callback_tables()?;
        let now = self.now();
        let conn = self.conn().await?;
        let n = conn
            .execute(
                &format!(
                    "UPDATE {c} SET state = 'pending', next_at = $3, claimed_until = NULL, \
                     round_start = attempts, updated_at = $3 \
                     WHERE execution_id = $1 AND namespace = $2"
                ),
                &[&id, &namespace, &now],
            )
            .await?;
        Ok(n > 0)
    }

    /// The quoted outbox tables when they exist (purge deletes their rows).
    pub(crate) fn callback_tables_existing(&self) -> Option<(String, String)> {
        self.callback_tables().ok()
    }
}

#[async_trait]
impl CallbackStore for PgBackend {
    async fn claim_due(
        &self,
        limit: u32,
        lease: Duration,
    ) -> Result<Vec<DueCallback>, ExecutionError> {
        let limit = i64::from(limit.max(1));
        self.run("callbacks", || self.cb_claim_once(limit, lease))
            .await
    }

    async fn record_delivery(&self, outcome: &DeliveryOutcome) -> Result<(), ExecutionError> {
        self.run("callbacks", || self.cb_record_once(outcome)).await
    }

    async fn deliveries(
        &self,
        namespace: &str,
        id: Uuid,
    ) -> Result<Option<CallbackRecord>, ExecutionError> {
        self.run("callbacks", || self.cb_deliveries_once(namespace, id))
            .await
    }

    async fn redeliver(&self, namespace: &str, id: Uuid) -> Result<bool, ExecutionError> {
        self.run("callbacks", || self.cb_redeliver_once(namespace, id))
            .await
    }
}

impl onestep_core::callback::CallbackPort for PgBackend {
    fn callback_port(&self) -> Option<std::sync::Arc<dyn CallbackStore>> {
        Some(std::sync::Arc::new(self.clone()))
    }
}
