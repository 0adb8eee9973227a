//! Completion webhooks of the in-memory store (docs/semantics.md#completion-webhooks): the
//! outbox row written with a new execution, claims with a lease on the store's clock, attempts
//! recorded once per number, and redelivery rounds — the rules the SQL backends follow.

use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use onestep_core::ExecutionError;
use onestep_core::callback::{
    CallbackRecord, CallbackSpec, CallbackState, CallbackStore, DeliveryAttempt, DeliveryOutcome,
    DueCallback, PassedEvent, STARTED_EVENT,
};
use onestep_core::request::PreparedSubmission;
use uuid::Uuid;

use super::MemoryStore;

/// One outbox row with its attempts.
#[derive(Debug, Clone)]
pub(crate) struct MemCallback {
    namespace: String,
    url: String,
    events: Vec<String>,
    state: CallbackState,
    attempts: u32,
    round_start: u32,
    next_at: DateTime<Utc>,
    claimed_until: Option<DateTime<Utc>>,
    deliveries: Vec<DeliveryAttempt>,
    started_done: bool,
    progress_seq: u32,
    progress_sent_at: Option<DateTime<Utc>>,
}

impl MemCallback {
    pub(crate) fn new(sub: &PreparedSubmission, cb: &CallbackSpec, now: DateTime<Utc>) -> Self {
        MemCallback {
            namespace: sub.namespace.clone(),
            url: cb.url.clone(),
            events: cb.events.clone(),
            state: CallbackState::Pending,
            attempts: 0,
            round_start: 0,
            next_at: now,
            claimed_until: None,
            deliveries: Vec::new(),
            started_done: false,
            progress_seq: 0,
            progress_sent_at: None,
        }
    }
}

#[async_trait]
impl CallbackStore for MemoryStore {
    async fn claim_due(
        &self,
        limit: u32,
        lease: Duration,
    ) -> Result<Vec<DueCallback>, ExecutionError> {
        let now = self.now();
        let until = now + chrono::Duration::from_std(lease).unwrap_or(chrono::Duration::minutes(1));
        let mut state = self.state();
        let state = &mut *state;
        let mut due: Vec<(DateTime<Utc>, Uuid)> = state
            .callbacks
            .iter()
            .filter(|(id, c)| {
                c.state == CallbackState::Pending
                    && c.next_at <= now
                    && c.claimed_until.is_none_or(|t| t <= now)
                    && state.rows.get(id).is_some_and(|r| {
                        // This store keeps no progress reports: terminal and started only.
                        r.execution.status.is_terminal()
                            || (c.events.iter().any(|e| e == STARTED_EVENT)
                                && !c.started_done
                                && r.execution.started_at.is_some())
                    })
            })
            .map(|(id, c)| (c.next_at, *id))
            .collect();
        due.sort();
        due.truncate(usize::try_from(limit.max(1)).unwrap_or(usize::MAX));
        let mut out = Vec::with_capacity(due.len());
        for (_, id) in due {
            if let Some(c) = state.callbacks.get_mut(&id) {
                c.claimed_until = Some(until);
                out.push(DueCallback {
                    execution_id: id,
                    namespace: c.namespace.clone(),
                    url: c.url.clone(),
                    attempts: c.attempts,
                    round_start: c.round_start,
                    events: c.events.clone(),
                    started_done: c.started_done,
                    progress_seq: c.progress_seq,
                    progress_sent_at: c.progress_sent_at,
                });
            }
        }
        Ok(out)
    }

    async fn record_delivery(&self, o: &DeliveryOutcome) -> Result<(), ExecutionError> {
        let mut state = self.state();
        let Some(c) = state.callbacks.get_mut(&o.execution_id) else {
            return Ok(());
        };
        if !c.deliveries.iter().any(|d| d.attempt_no == o.attempt_no) {
            c.deliveries.push(DeliveryAttempt {
                attempt_no: o.attempt_no,
                event: o.event.clone(),
                webhook_id: o.webhook_id.clone(),
                at: o.at,
                status: o.status,
                error: o.error.clone(),
            });
            c.deliveries.sort_by_key(|d| d.attempt_no);
        }
        if c.state == CallbackState::Pending {
            match &o.passed {
                None => {}
                Some(PassedEvent::Started) => {
                    c.started_done = true;
                    c.round_start = c.round_start.max(o.attempt_no);
                }
                Some(PassedEvent::Progress {
                    seq, progress_at, ..
                }) => {
                    c.progress_seq = c.progress_seq.max(*seq);
                    c.progress_sent_at = c.progress_sent_at.max(Some(*progress_at));
                    c.round_start = c.round_start.max(o.attempt_no);
                }
            }
            c.state = o.state;
            c.attempts = c.attempts.max(o.attempt_no);
            if let Some(next) = o.next_at {
                c.next_at = next;
            }
            c.claimed_until = None;
        }
        Ok(())
    }

    async fn deliveries(
        &self,
        namespace: &str,
        id: Uuid,
    ) -> Result<Option<CallbackRecord>, ExecutionError> {
        let state = self.state();
        Ok(state
            .callbacks
            .get(&id)
            .filter(|c| c.namespace == namespace)
            .map(|c| CallbackRecord {
                url: c.url.clone(),
                events: c.events.clone(),
                state: c.state,
                attempts: c.attempts,
                next_at: (c.state == CallbackState::Pending).then_some(c.next_at),
                deliveries: c.deliveries.clone(),
            }))
    }

    async fn redeliver(&self, namespace: &str, id: Uuid) -> Result<bool, ExecutionError> {
        let now = self.now();
        let mut state = self.state();
        let Some(c) = state
            .callbacks
            .get_mut(&id)
            .filter(|c| c.namespace == namespace)
        else {
            return Ok(false);
        };
        c.state = CallbackState::Pending;
        c.next_at = now;
        c.claimed_until = None;
        c.round_start = c.attempts;
        Ok(true)
    }
}
