//! Completion webhooks on SQLite (docs/semantics.md#completion-webhooks): the outbox
//! `<T>_callbacks`, written in the submit's transaction, and the attempts `<T>_deliveries`.
//! SQLite has one writer: a claim is one `BEGIN IMMEDIATE` transaction that picks due rows
//! whose execution is terminal and sets their lease (`claimed_until`), so no two senders claim
//! the same row and a killed sender's rows are claimed again once its lease runs out.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use onestep_core::callback::{
    CallbackRecord, CallbackSpec, CallbackState, CallbackStore, DeliveryAttempt, DeliveryOutcome,
    DueCallback, PROGRESS_EVENT, PassedEvent, STARTED_EVENT,
};
use onestep_core::request::PreparedSubmission;
use onestep_core::{ExecutionError, ExecutionStatus};
use rusqlite::{Connection, params};
use uuid::Uuid;

use crate::backend::SqliteBackend;
use crate::errors::{OpError, OpResult};
use crate::rows::{ots, parse_time, ts, uid};
use crate::schema::{callbacks_table, deliveries_table, q};

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

fn bad(what: &str, e: impl std::fmt::Display) -> OpError {
    OpError::Domain(ExecutionError::Encoding(format!("callback {what}: {e}")))
}

fn time_of(s: &str, col: &str) -> OpResult<DateTime<Utc>> {
    parse_time(s, col).map_err(|e| OpError::Domain(e.into()))
}

fn u32_of(v: i64) -> u32 {
    u32::try_from(v).unwrap_or(0)
}

impl SqliteBackend {
    /// The quoted outbox and attempts tables, or the refusal naming the upgrade.
    fn callback_tables(&self) -> Result<(String, String), ExecutionError> {
        if self.schema_report().features.callbacks_tables {
            let names = self.tables();
            Ok((q(&callbacks_table(names)), q(&deliveries_table(names))))
        } else {
            Err(ExecutionError::invalid(CALLBACKS_ABSENT))
        }
    }

    /// The quoted outbox tables when they exist (purge deletes their rows).
    pub(crate) fn callback_tables_existing(&self) -> Option<(String, String)> {
        self.callback_tables().ok()
    }

    /// Writes the callback of a newly created execution in the submit's transaction; nothing
    /// without one.
    pub(crate) fn store_callback(
        &self,
        c: &Connection,
        sub: &PreparedSubmission,
        now: DateTime<Utc>,
    ) -> OpResult<()> {
        let Some(cb) = &sub.callback else {
            return Ok(());
        };
        let (table, _) = self.callback_tables()?;
        c.prepare_cached(&format!(
            "INSERT INTO {table} (execution_id, namespace, url, events, state, attempts, \
             round_start, next_at, created_at, updated_at) \
             VALUES (?1, ?2, ?3, ?4, 'pending', 0, 0, ?5, ?5, ?5) \
             ON CONFLICT (execution_id) DO NOTHING"
        ))?
        .execute(params![
            uid(sub.id),
            sub.namespace,
            cb.url,
            cb.events_text(),
            ts(now)
        ])?;
        Ok(())
    }
}

#[async_trait]
impl CallbackStore for SqliteBackend {
    async fn claim_due(
        &self,
        limit: u32,
        lease: Duration,
    ) -> Result<Vec<DueCallback>, ExecutionError> {
        let (cb, _) = self.callback_tables()?;
        let limit = i64::from(limit.max(1));
        self.run("callbacks", || {
            let cb = cb.clone();
            self.write(move |b, c| {
                let now = b.now();
                let until =
                    now + chrono::Duration::from_std(lease).unwrap_or(chrono::Duration::minutes(1));
                let t = q(&b.tables().executions);
                let terminal = terminal_list();
                // Progress newer than the last passed, once the throttle ran out.
                let progress = match b.d() {
                    Some(d) => format!(
                        " OR (cb.events LIKE '%{PROGRESS_EVENT}%' \
                           AND (cb.progress_after IS NULL OR cb.progress_after <= ?1) \
                           AND EXISTS (SELECT 1 FROM {d} dg \
                             WHERE dg.execution_id = cb.execution_id \
                             AND dg.progress_at IS NOT NULL \
                             AND (cb.progress_sent_at IS NULL \
                               OR dg.progress_at > cb.progress_sent_at)))"
                    ),
                    None => String::new(),
                };
                let mut st = c.prepare_cached(&format!(
                    "SELECT cb.execution_id, cb.namespace, cb.url, cb.attempts, cb.round_start, \
                       cb.events, cb.started_done, cb.progress_seq, cb.progress_sent_at \
                     FROM {cb} cb JOIN {t} e ON e.id = cb.execution_id \
                     WHERE cb.state = 'pending' AND cb.next_at <= ?1 \
                       AND (cb.claimed_until IS NULL OR cb.claimed_until <= ?1) \
                       AND (e.status IN ({terminal}) \
                         OR (cb.events LIKE '%{STARTED_EVENT}%' AND cb.started_done = 0 \
                             AND e.started_at IS NOT NULL){progress}) \
                     ORDER BY cb.next_at LIMIT ?2"
                ))?;
                let rows = st
                    .query_map(params![ts(now), limit], |r| {
                        Ok((
                            (
                                r.get::<_, String>(0)?,
                                r.get::<_, String>(1)?,
                                r.get::<_, String>(2)?,
                                r.get::<_, i64>(3)?,
                                r.get::<_, i64>(4)?,
                            ),
                            (
                                r.get::<_, String>(5)?,
                                r.get::<_, i64>(6)?,
                                r.get::<_, i64>(7)?,
                                r.get::<_, Option<String>>(8)?,
                            ),
                        ))
                    })?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                drop(st);
                let mut out = Vec::with_capacity(rows.len());
                for ((id, namespace, url, attempts, round_start), (events, started, seq, sent)) in
                    rows
                {
                    c.prepare_cached(&format!(
                        "UPDATE {cb} SET claimed_until = ?2 WHERE execution_id = ?1"
                    ))?
                    .execute(params![id, ts(until)])?;
                    out.push(DueCallback {
                        execution_id: Uuid::parse_str(&id).map_err(|e| bad("execution_id", e))?,
                        namespace,
                        url,
                        attempts: u32_of(attempts),
                        round_start: u32_of(round_start),
                        events: CallbackSpec::events_of(&events),
                        started_done: started != 0,
                        progress_seq: u32_of(seq),
                        progress_sent_at: sent
                            .as_deref()
                            .map(|s| time_of(s, "progress_sent_at"))
                            .transpose()?,
                    });
                }
                Ok(out)
            })
        })
        .await
    }

    async fn record_delivery(&self, o: &DeliveryOutcome) -> Result<(), ExecutionError> {
        let (cb, dl) = self.callback_tables()?;
        self.run("callbacks", || {
            let (cb, dl, o) = (cb.clone(), dl.clone(), o.clone());
            self.write(move |b, c| {
                let now = b.now();
                let attempt = i64::from(o.attempt_no);
                let status = o.status.map(i64::from);
                c.prepare_cached(&format!(
                    "INSERT INTO {dl} (execution_id, attempt_no, event, webhook_id, status, \
                     error, at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
                     ON CONFLICT (execution_id, attempt_no) DO NOTHING"
                ))?
                .execute(params![
                    uid(o.execution_id),
                    attempt,
                    o.event,
                    o.webhook_id,
                    status,
                    o.error,
                    ts(o.at)
                ])?;
                // A stale sender (its claim ran out, another delivered) never reopens a callback.
                match &o.passed {
                    None => {}
                    Some(PassedEvent::Started) => {
                        c.prepare_cached(&format!(
                            "UPDATE {cb} SET started_done = 1, \
                             round_start = MAX(round_start, ?2) \
                             WHERE execution_id = ?1 AND state = 'pending'"
                        ))?
                        .execute(params![uid(o.execution_id), attempt])?;
                    }
                    Some(PassedEvent::Progress {
                        seq,
                        progress_at,
                        after,
                    }) => {
                        c.prepare_cached(&format!(
                            "UPDATE {cb} SET progress_seq = MAX(progress_seq, ?3), \
                             progress_sent_at = MAX(COALESCE(progress_sent_at, ?4), ?4), \
                             progress_after = MAX(COALESCE(progress_after, ?5), ?5), \
                             round_start = MAX(round_start, ?2) \
                             WHERE execution_id = ?1 AND state = 'pending'"
                        ))?
                        .execute(params![
                            uid(o.execution_id),
                            attempt,
                            i64::from(*seq),
                            ts(*progress_at),
                            ts(*after)
                        ])?;
                    }
                }
                c.prepare_cached(&format!(
                    "UPDATE {cb} SET state = ?2, attempts = MAX(attempts, ?3), \
                     next_at = COALESCE(?4, next_at), claimed_until = NULL, last_status = ?5, \
                     last_error = ?6, updated_at = ?7 \
                     WHERE execution_id = ?1 AND state = 'pending'"
                ))?
                .execute(params![
                    uid(o.execution_id),
                    o.state.as_str(),
                    attempt,
                    ots(o.next_at),
                    status,
                    o.error,
                    ts(now)
                ])?;
                Ok(())
            })
        })
        .await
    }

    async fn deliveries(
        &self,
        namespace: &str,
        id: Uuid,
    ) -> Result<Option<CallbackRecord>, ExecutionError> {
        let (cb, dl) = self.callback_tables()?;
        let namespace = namespace.to_owned();
        self.run("callbacks", || {
            let (cb, dl, namespace) = (cb.clone(), dl.clone(), namespace.clone());
            self.read(move |_, c| {
                let head = c
                    .prepare_cached(&format!(
                        "SELECT url, events, state, attempts, next_at FROM {cb} \
                         WHERE execution_id = ?1 AND namespace = ?2"
                    ))?
                    .query_map(params![uid(id), namespace], |r| {
                        Ok((
                            r.get::<_, String>(0)?,
                            r.get::<_, String>(1)?,
                            r.get::<_, String>(2)?,
                            r.get::<_, i64>(3)?,
                            r.get::<_, String>(4)?,
                        ))
                    })?
                    .next()
                    .transpose()?;
                let Some((url, events, state, attempts, next_at)) = head else {
                    return Ok(None);
                };
                let state = CallbackState::parse(&state).ok_or_else(|| bad("state", &state))?;
                let rows = c
                    .prepare_cached(&format!(
                        "SELECT attempt_no, event, webhook_id, status, error, at FROM {dl} \
                         WHERE execution_id = ?1 ORDER BY attempt_no"
                    ))?
                    .query_map(params![uid(id)], |r| {
                        Ok((
                            r.get::<_, i64>(0)?,
                            r.get::<_, String>(1)?,
                            r.get::<_, String>(2)?,
                            r.get::<_, Option<i64>>(3)?,
                            r.get::<_, Option<String>>(4)?,
                            r.get::<_, String>(5)?,
                        ))
                    })?
                    .collect::<rusqlite::Result<Vec<_>>>()?;
                let mut deliveries = Vec::with_capacity(rows.len());
                for (n, event, webhook_id, status, error, at) in rows {
                    deliveries.push(DeliveryAttempt {
                        attempt_no: u32_of(n),
                        event,
                        webhook_id,
                        status: status.and_then(|s| u16::try_from(s).ok()),
                        error,
                        at: time_of(&at, "at")?,
                    });
                }
                Ok(Some(CallbackRecord {
                    url,
                    events: CallbackSpec::events_of(&events),
                    state,
                    attempts: u32_of(attempts),
                    next_at: if state == CallbackState::Pending {
                        Some(time_of(&next_at, "next_at")?)
                    } else {
                        None
                    },
                    deliveries,
                }))
            })
        })
        .await
    }

    async fn redeliver(&self, namespace: &str, id: Uuid) -> Result<bool, ExecutionError> {
        let (cb, _) = self.callback_tables()?;
        let namespace = namespace.to_owned();
        self.run("callbacks", || {
            let (cb, namespace) = (cb.clone(), namespace.clone());
            self.write(move |b, c| {
                let now = ts(b.now());
                let n = c
                    .prepare_cached(&format!(
                        "UPDATE {cb} SET state = 'pending', next_at = ?3, claimed_until = NULL, \
                         round_start = attempts, updated_at = ?3 \
                         WHERE execution_id = ?1 AND namespace = ?2"
                    ))?
                    .execute(params![uid(id), namespace, now])?;
                Ok(n > 0)
            })
        })
        .await
    }
}

impl onestep_core::callback::CallbackPort for SqliteBackend {
    fn callback_port(&self) -> Option<std::sync::Arc<dyn CallbackStore>> {
        Some(std::sync::Arc::new(self.clone()))
    }
}
