//! Completion webhooks on MySQL/MariaDB (docs/semantics.md#completion-webhooks): the outbox
//! `<T>_callbacks`, written in the submit's transaction, and the attempts `<T>_deliveries`.
//! Senders claim due rows whose execution is terminal with `FOR UPDATE SKIP LOCKED` (the
//! execution's status is read in a subquery, which takes no lock) and a short lease
//! (`claimed_until`), so concurrent senders never claim the same row and a killed sender's rows
//! are claimed again once its lease runs out.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use mysql_async::prelude::Queryable;
use mysql_async::{Params, Row, Transaction, Value as DbValue, from_value_opt};
use onestep_core::callback::{
    CallbackRecord, CallbackSpec, CallbackState, CallbackStore, DeliveryAttempt, DeliveryOutcome,
    DueCallback, PROGRESS_EVENT, PassedEvent, STARTED_EVENT,
};
use onestep_core::request::PreparedSubmission;
use onestep_core::store::DecodeError;
use onestep_core::{ExecutionError, ExecutionStatus};
use uuid::Uuid;

use crate::backend::{MySqlBackend, begin};
use crate::errors::{OpError, OpResult};
use crate::rows::{
    bind_opt_time, bind_time, bind_uuid, instant, opt_instant, opt_text, parse_uuid, placeholders,
    text,
};

/// Refusal of a callback when the tables lack the outbox.
const CALLBACKS_ABSENT: &str = "the completion-webhook tables are absent (or lack the \
     started/progress columns): submits with a callback are refused; `onestep migrate \
     --upgrade` adds them";

fn terminal_list() -> String {
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

fn col(row: &mut Row, i: usize) -> DbValue {
    row.take::<DbValue, _>(i).unwrap_or(DbValue::NULL)
}

fn int(v: DbValue, name: &str) -> Result<i64, DecodeError> {
    from_value_opt::<i64>(v).map_err(|e| DecodeError(format!("{name}: {e}")))
}

fn opt_int(v: DbValue, name: &str) -> Result<Option<i64>, DecodeError> {
    match v {
        DbValue::NULL => Ok(None),
        v => int(v, name).map(Some),
    }
}

fn u32_of(v: i64) -> u32 {
    u32::try_from(v).unwrap_or(0)
}

fn domain(e: DecodeError) -> OpError {
    OpError::Domain(ExecutionError::from(e))
}

impl MySqlBackend {
    /// The outbox and attempts tables, or the refusal naming the upgrade.
    fn callback_tables(&self) -> Result<(String, String), ExecutionError> {
        if self.schema_report().features.callbacks_tables {
            let names = self.tables();
            Ok((
                crate::schema::callbacks_table(names),
                crate::schema::deliveries_table(names),
            ))
        } else {
            Err(ExecutionError::invalid(CALLBACKS_ABSENT))
        }
    }

    /// The outbox tables when they exist (purge deletes their rows).
    pub(crate) fn callback_tables_existing(&self) -> Option<(String, String)> {
        self.callback_tables().ok()
    }

    /// Writes the callback of a newly created execution in the submit's transaction; nothing
    /// without one.
    pub(crate) async fn store_callback(
        &self,
        tx: &mut Transaction<'_>,
        sub: &PreparedSubmission,
        now: DateTime<Utc>,
    ) -> OpResult<()> {
        let Some(cb) = &sub.callback else {
            return Ok(());
        };
        let (table, _) = self.callback_tables()?;
        tx.exec_drop(
            format!(
                "INSERT IGNORE INTO `{table}` (execution_id, namespace, url, events, state, \
                 attempts, round_start, next_at, created_at, updated_at) \
                 VALUES (?, ?, ?, ?, 'pending', 0, 0, ?, ?, ?)"
            ),
            Params::Positional(vec![
                bind_uuid(sub.id),
                DbValue::from(sub.namespace.as_str()),
                DbValue::from(cb.url.as_str()),
                DbValue::from(cb.events_text()),
                bind_time(now),
                bind_time(now),
                bind_time(now),
            ]),
        )
        .await?;
        Ok(())
    }

    async fn cb_claim_once(&self, limit: u32, lease: Duration) -> OpResult<Vec<DueCallback>> {
        let (cb, _) = self.callback_tables()?;
        let t = &self.tables().executions;
        let now = self.now();
        let until = now + chrono::Duration::from_std(lease).unwrap_or(chrono::Duration::minutes(1));
        let terminal = terminal_list();
        let mut params = vec![bind_time(now), bind_time(now)];
        // Progress newer than the last passed, once the throttle ran out (module docs).
        let progress = match self.d() {
            Some(d) => {
                params.push(bind_time(now));
                format!(
                    " OR (cb.events LIKE '%{PROGRESS_EVENT}%' \
                       AND (cb.progress_after IS NULL OR cb.progress_after <= ?) \
                       AND EXISTS (SELECT 1 FROM `{d}` dg WHERE dg.execution_id = cb.execution_id \
                         AND dg.progress_at IS NOT NULL \
                         AND (cb.progress_sent_at IS NULL OR dg.progress_at > cb.progress_sent_at)))"
                )
            }
            None => String::new(),
        };
        let mut conn = self.conn().await?;
        let mut tx = begin(&mut conn).await?;
        let out = async {
            let rows: Vec<Row> = tx
                .exec(
                    format!(
                        "SELECT cb.execution_id, cb.namespace, cb.url, cb.attempts, cb.round_start, \
                           cb.events, cb.started_done, cb.progress_seq, cb.progress_sent_at \
                         FROM `{cb}` cb \
                         WHERE cb.state = 'pending' AND cb.next_at <= ? \
                           AND (cb.claimed_until IS NULL OR cb.claimed_until <= ?) \
                           AND (EXISTS (SELECT 1 FROM `{t}` e WHERE e.id = cb.execution_id \
                                       AND (e.status IN ({terminal}) \
                                         OR (cb.events LIKE '%{STARTED_EVENT}%' \
                                             AND cb.started_done = 0 \
                                             AND e.started_at IS NOT NULL))){progress}) \
                         ORDER BY cb.next_at LIMIT {limit} \
                         FOR UPDATE SKIP LOCKED"
                    ),
                    Params::Positional(params),
                )
                .await?;
            let mut out = Vec::with_capacity(rows.len());
            for mut r in rows {
                out.push(DueCallback {
                    execution_id: parse_uuid(&col(&mut r, 0)).map_err(domain)?,
                    namespace: text(col(&mut r, 1), "namespace").map_err(domain)?,
                    url: text(col(&mut r, 2), "url").map_err(domain)?,
                    attempts: u32_of(int(col(&mut r, 3), "attempts").map_err(domain)?),
                    round_start: u32_of(int(col(&mut r, 4), "round_start").map_err(domain)?),
                    events: CallbackSpec::events_of(
                        &text(col(&mut r, 5), "events").map_err(domain)?,
                    ),
                    started_done: int(col(&mut r, 6), "started_done").map_err(domain)? != 0,
                    progress_seq: u32_of(int(col(&mut r, 7), "progress_seq").map_err(domain)?),
                    progress_sent_at: opt_instant(col(&mut r, 8), "progress_sent_at")
                        .map_err(domain)?,
                });
            }
            if !out.is_empty() {
                let mut params = vec![bind_time(until)];
                params.extend(out.iter().map(|d| bind_uuid(d.execution_id)));
                tx.exec_drop(
                    format!(
                        "UPDATE `{cb}` SET claimed_until = ? WHERE execution_id IN ({})",
                        placeholders(out.len())
                    ),
                    Params::Positional(params),
                )
                .await?;
            }
            Ok(out)
        }
        .await;
        self.finish(tx, out).await
    }

    async fn cb_record_once(&self, o: &DeliveryOutcome) -> OpResult<()> {
        let (cb, dl) = self.callback_tables()?;
        let now = self.now();
        let attempt = i64::from(o.attempt_no);
        let status = o
            .status
            .map_or(DbValue::NULL, |s| DbValue::from(i64::from(s)));
        let error = o.error.as_deref().map_or(DbValue::NULL, DbValue::from);
        let mut conn = self.conn().await?;
        let mut tx = begin(&mut conn).await?;
        let out = async {
            tx.exec_drop(
                format!(
                    "INSERT IGNORE INTO `{dl}` (execution_id, attempt_no, event, webhook_id, \
                     status, error, at) VALUES (?, ?, ?, ?, ?, ?, ?)"
                ),
                Params::Positional(vec![
                    bind_uuid(o.execution_id),
                    DbValue::from(attempt),
                    DbValue::from(o.event.as_str()),
                    DbValue::from(o.webhook_id.as_str()),
                    status.clone(),
                    error.clone(),
                    bind_time(o.at),
                ]),
            )
            .await?;
            // A stale sender (its claim ran out, another delivered) never reopens a callback.
            match &o.passed {
                None => {}
                Some(PassedEvent::Started) => {
                    tx.exec_drop(
                        format!(
                            "UPDATE `{cb}` SET started_done = 1, \
                             round_start = GREATEST(round_start, ?) \
                             WHERE execution_id = ? AND state = 'pending'"
                        ),
                        Params::Positional(vec![DbValue::from(attempt), bind_uuid(o.execution_id)]),
                    )
                    .await?;
                }
                Some(PassedEvent::Progress {
                    seq,
                    progress_at,
                    after,
                }) => {
                    tx.exec_drop(
                        format!(
                            "UPDATE `{cb}` SET progress_seq = GREATEST(progress_seq, ?), \
                             progress_sent_at = GREATEST(COALESCE(progress_sent_at, ?), ?), \
                             progress_after = GREATEST(COALESCE(progress_after, ?), ?), \
                             round_start = GREATEST(round_start, ?) \
                             WHERE execution_id = ? AND state = 'pending'"
                        ),
                        Params::Positional(vec![
                            DbValue::from(i64::from(*seq)),
                            bind_time(*progress_at),
                            bind_time(*progress_at),
                            bind_time(*after),
                            bind_time(*after),
                            DbValue::from(attempt),
                            bind_uuid(o.execution_id),
                        ]),
                    )
                    .await?;
                }
            }
            tx.exec_drop(
                format!(
                    "UPDATE `{cb}` SET state = ?, attempts = GREATEST(attempts, ?), \
                     next_at = COALESCE(?, next_at), claimed_until = NULL, last_status = ?, \
                     last_error = ?, updated_at = ? \
                     WHERE execution_id = ? AND state = 'pending'"
                ),
                Params::Positional(vec![
                    DbValue::from(o.state.as_str()),
                    DbValue::from(attempt),
                    bind_opt_time(o.next_at),
                    status,
                    error,
                    bind_time(now),
                    bind_uuid(o.execution_id),
                ]),
            )
            .await?;
            Ok(())
        }
        .await;
        self.finish(tx, out).await
    }

    async fn cb_deliveries_once(
        &self,
        namespace: &str,
        id: Uuid,
    ) -> OpResult<Option<CallbackRecord>> {
        let (cb, dl) = self.callback_tables()?;
        let mut conn = self.conn().await?;
        let head: Option<Row> = conn
            .exec_first(
                format!(
                    "SELECT url, events, state, attempts, next_at FROM `{cb}` \
                     WHERE execution_id = ? AND namespace = ?"
                ),
                (bind_uuid(id), namespace),
            )
            .await?;
        let Some(mut head) = head else {
            return Ok(None);
        };
        let url = text(col(&mut head, 0), "url").map_err(domain)?;
        let events = text(col(&mut head, 1), "events").map_err(domain)?;
        let state_text = text(col(&mut head, 2), "state").map_err(domain)?;
        let state = CallbackState::parse(&state_text)
            .ok_or_else(|| domain(DecodeError(format!("state: {state_text}"))))?;
        let attempts = u32_of(int(col(&mut head, 3), "attempts").map_err(domain)?);
        let next_at = instant(col(&mut head, 4), "next_at").map_err(domain)?;
        let rows: Vec<Row> = conn
            .exec(
                format!(
                    "SELECT attempt_no, event, webhook_id, status, error, at FROM `{dl}` \
                     WHERE execution_id = ? ORDER BY attempt_no"
                ),
                (bind_uuid(id),),
            )
            .await?;
        let mut deliveries = Vec::with_capacity(rows.len());
        for mut r in rows {
            deliveries.push(DeliveryAttempt {
                attempt_no: u32_of(int(col(&mut r, 0), "attempt_no").map_err(domain)?),
                event: text(col(&mut r, 1), "event").map_err(domain)?,
                webhook_id: text(col(&mut r, 2), "webhook_id").map_err(domain)?,
                status: opt_int(col(&mut r, 3), "status")
                    .map_err(domain)?
                    .and_then(|s| u16::try_from(s).ok()),
                error: opt_text(col(&mut r, 4), "error").map_err(domain)?,
                at: instant(col(&mut r, 5), "at").map_err(domain)?,
            });
        }
        Ok(Some(CallbackRecord {
            url,
            events: CallbackSpec::events_of(&events),
            state,
            attempts,
            next_at: (state == CallbackState::Pending).then_some(next_at),
            deliveries,
        }))
    }

    async fn cb_redeliver_once(&self, namespace: &str, id: Uuid) -> OpResult<bool> {
        let (cb, _) = self.callback_tables()?;
        let now = self.now();
        let mut conn = self.conn().await?;
        conn.exec_drop(
            format!(
                "UPDATE `{cb}` SET state = 'pending', next_at = ?, claimed_until = NULL, \
                 round_start = attempts, updated_at = ? \
                 WHERE execution_id = ? AND namespace = ?"
            ),
            (bind_time(now), bind_time(now), bind_uuid(id), namespace),
        )
        .await?;
        Ok(conn.affected_rows() > 0)
    }
}

#[async_trait]
impl CallbackStore for MySqlBackend {
    async fn claim_due(
        &self,
        limit: u32,
        lease: Duration,
    ) -> Result<Vec<DueCallback>, ExecutionError> {
        let limit = limit.max(1);
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

impl onestep_core::callback::CallbackPort for MySqlBackend {
    fn callback_port(&self) -> Option<std::sync::Arc<dyn CallbackStore>> {
        Some(std::sync::Arc::new(self.clone()))
    }
}
