//! [`StepStore`] and purge ([`PurgeBatches`]) for [`MemoryStore`] (docs/steps.md): steps live
//! beside the rows under the store's one lock, so a save's fence (the row holds the attempt's
//! lease token, its status holds a lease and the lease is live) and its caps are checked and
//! written at once, and a purge removes an execution's steps with it.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use onestep_core::diagnostics::{PurgeReport, PurgeRequest};
use onestep_core::execution::LeaseRef;
use onestep_core::steps::{StepError, StepRecord, StepStore, validate};
use onestep_core::store::purge::PurgeBatches;
use onestep_core::{ExecutionError, ExecutionStatus};
use uuid::Uuid;

use super::MemoryStore;

#[async_trait]
impl StepStore for MemoryStore {
    async fn load(&self, execution_id: Uuid, key: &str) -> Result<Option<String>, ExecutionError> {
        Ok(self
            .state()
            .steps
            .get(&execution_id)
            .and_then(|s| s.load(key)))
    }

    async fn save(&self, lease: &LeaseRef, key: &str, value: &str) -> Result<(), StepError> {
        validate(key, value)?;
        let now = self.now();
        let mut state = self.state();
        let attempt_no = match state.rows.get(&lease.execution_id) {
            Some(row)
                if row.lease_live(lease.lease_token, now) && row.execution.status.holds_lease() =>
            {
                row.execution.attempts
            }
            _ => return Err(StepError::Fenced),
        };
        state.steps.entry(lease.execution_id).or_default().save(
            key,
            value,
            lease.attempt_id,
            attempt_no,
            now,
        )
    }

    async fn list(&self, execution_id: Uuid) -> Result<Vec<StepRecord>, ExecutionError> {
        Ok(self
            .state()
            .steps
            .get(&execution_id)
            .map(|s| s.list())
            .unwrap_or_default())
    }
}

#[async_trait]
impl PurgeBatches for MemoryStore {
    type Position = (DateTime<Utc>, Uuid);

    fn per_status_index(&self) -> bool {
        true
    }

    async fn namespaces(&self) -> Result<Vec<String>, ExecutionError> {
        let mut ns: Vec<String> = self
            .state()
            .rows
            .values()
            .map(|r| r.execution.namespace.clone())
            .collect();
        ns.sort();
        ns.dedup();
        Ok(ns)
    }

    /// Newest first from the cutoff down, as the SQL backends walk the list index.
    async fn batch(
        &self,
        namespace: &str,
        statuses: &[ExecutionStatus],
        request: &PurgeRequest,
        after: Option<&Self::Position>,
    ) -> Result<(Option<Self::Position>, PurgeReport), ExecutionError> {
        let cutoff = request.finished_before;
        let mut state = self.state();
        let mut picked: Vec<(DateTime<Utc>, Uuid)> = state
            .rows
            .values()
            .filter(|r| {
                let e = &r.execution;
                e.namespace == namespace
                    && e.created_at < cutoff
                    && statuses.contains(&e.status)
                    && e.finished_at.is_some_and(|f| f < cutoff)
                    && after.is_none_or(|a| (e.created_at, e.id) < *a)
            })
            .map(|r| (r.execution.created_at, r.execution.id))
            .collect();
        picked.sort_by(|a, b| b.cmp(a));
        picked.truncate(usize::try_from(request.batch_size).unwrap_or(usize::MAX));
        let last = picked.last().copied();
        let mut removed = PurgeReport::default();
        for (_, id) in &picked {
            let attempts = state.rows.get(id).map_or(0, |r| r.attempts.len()) as u64;
            let steps = state.steps.get(id).map_or(0, |s| s.entries().len()) as u64;
            removed.executions += 1;
            removed.attempts += attempts;
            removed.steps += steps;
            if !request.dry_run {
                state.rows.remove(id);
                state.steps.remove(id);
                state.callbacks.remove(id);
                state.keys.retain(|_, v| v != id);
            }
        }
        Ok((last, removed))
    }
}
