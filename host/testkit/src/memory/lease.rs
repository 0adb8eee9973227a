//! [`LeaseStore`] for [`MemoryStore`]: claim with its bounded maintenance (expiry, dead cancel
//! requests, reclaim of expired leases), heartbeat (one lease or a set), the cancel poll, complete / complete_many (cancel wins over
//! success, identical terminal replays accepted) and release — every write fenced by the lease
//! token and checked in full before anything changes.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use onestep_core::execution::{Completion, HeartbeatResult, LeaseRef};
use std::collections::{BTreeMap, BTreeSet, HashMap};

use onestep_core::plan::CompletionPlan;
use onestep_core::ports::LeaseStore;
use onestep_core::request::{ClaimRequest, validate_lease_duration};
use onestep_core::schedule::entry_pass;
use onestep_core::status::attempt_status_for;
use onestep_core::store::fair::{FairPlan, KeyOutcome, LockedKey, RUNNING_STATUSES};
use onestep_core::time::add_seconds;
use onestep_core::{
    AttemptStatus, Execution, ExecutionError, ExecutionLease, ExecutionStatus, StaleReason,
};
use uuid::Uuid;

use super::{MemoryStore, Op, Row, State, decoded};
use crate::suite::AttemptRow;

fn stale<T>(reason: StaleReason) -> Result<T, ExecutionError> {
    Err(ExecutionError::StaleLease(reason))
}

/// Claim-time maintenance, each step bounded by `batch` rows in its index order: expire overdue
/// claimable rows (T5; never a lease-lost retry), finish cancel requests whose lease ran out
/// (T6), and turn expired leases into `retrying` (T7).
fn maintain(state: &mut State, now: DateTime<Utc>, batch: usize) {
    let mut expire: Vec<(DateTime<Utc>, Uuid)> = state
        .rows
        .values()
        .filter(|r| r.execution.status.is_claimable() && !r.is_lease_lost_retry())
        .filter_map(|r| {
            r.execution
                .expires_at
                .filter(|x| *x <= now)
                .map(|x| (x, r.execution.id))
        })
        .collect();
    expire.sort();
    let leased = |from: ExecutionStatus| {
        let mut v: Vec<(DateTime<Utc>, Uuid)> = state
            .rows
            .values()
            .filter(|r| r.execution.status == from)
            .filter_map(|r| {
                r.lease_expires_at
                    .filter(|x| *x <= now)
                    .map(|x| (x, r.execution.id))
            })
            .collect();
        v.sort();
        v.truncate(batch);
        v
    };
    let dead_cancel = leased(ExecutionStatus::CancelRequested);
    let reclaim = leased(ExecutionStatus::Running);
    for (_, id) in expire.into_iter().take(batch) {
        if let Some(row) = state.rows.get_mut(&id) {
            let e = &mut row.execution;
            e.status = ExecutionStatus::Expired;
            e.finished_at = Some(now);
            e.version += 1;
            row.updated_at = now;
        }
    }
    for (ids, to, attempt_to) in [
        (
            dead_cancel,
            ExecutionStatus::Cancelled,
            AttemptStatus::Cancelled,
        ),
        (reclaim, ExecutionStatus::Retrying, AttemptStatus::LeaseLost),
    ] {
        for (_, id) in ids {
            let Some(row) = state.rows.get_mut(&id) else {
                continue;
            };
            let token = row.lease_token;
            let e = &mut row.execution;
            e.status = to;
            if to == ExecutionStatus::Cancelled {
                e.finished_at = Some(now);
            } else {
                e.available_at = now;
            }
            e.version += 1;
            row.updated_at = now;
            row.clear_lease();
            for a in row.attempts.iter_mut() {
                if a.status == AttemptStatus::Running && Some(a.lease_token) == token {
                    a.status = attempt_to;
                    a.finished_at = Some(now);
                }
            }
        }
    }
}

/// Whether `r` may be claimed now (available, not expired or a lease-lost retry).
fn claimable_now(r: &Row, now: DateTime<Utc>) -> bool {
    let e = &r.execution;
    e.status.is_claimable()
        && e.available_at <= now
        && (e.expires_at.is_none_or(|x| x > now) || r.is_lease_lost_retry())
}

/// The fair claim (docs/semantics.md#fair-claim) over the rows in memory: the keys of the task
/// in scope with claimable rows, least pass first (then namespace, key), each entering at the
/// virtual time; slots split by `FairPlan`; per key its head rows in the order `(priority,
/// available_at, created_at, id)`. Keys without pending rows leave the rotation.
fn fair_pick(state: &mut State, req: &ClaimRequest, now: DateTime<Utc>) -> Vec<Uuid> {
    let Some(task) = req.task_names.first() else {
        return Vec::new();
    };
    type Head = (u8, DateTime<Utc>, DateTime<Utc>, Uuid);
    let mut pending: BTreeMap<(String, String), Vec<Head>> = BTreeMap::new();
    let mut waiting: BTreeSet<(String, String)> = BTreeSet::new();
    let mut running: HashMap<(String, String), u64> = HashMap::new();
    for r in state.rows.values() {
        let e = &r.execution;
        if &e.task_name != task || !req.namespaces.contains(&e.namespace) {
            continue;
        }
        let k = (e.namespace.clone(), e.effective_fairness_key().to_owned());
        if e.status.is_claimable() {
            waiting.insert(k.clone());
        }
        if RUNNING_STATUSES.contains(&e.status) {
            *running.entry(k.clone()).or_default() += 1;
        }
        if claimable_now(r, now) {
            pending
                .entry(k)
                .or_default()
                .push((e.priority, e.available_at, e.created_at, e.id));
        }
    }
    // Keys without pending rows leave; new ones enter at the virtual time.
    state
        .passes
        .retain(|(t, ns, k), _| t != task || waiting.contains(&(ns.clone(), k.clone())));
    let virtual_time = state
        .passes
        .iter()
        .filter(|((t, _, _), _)| t == task)
        .map(|(_, p)| *p)
        .min();
    for (ns, k) in &waiting {
        state
            .passes
            .entry((task.clone(), ns.clone(), k.clone()))
            .or_insert_with(|| entry_pass(None, virtual_time));
    }
    let mut ready: Vec<LockedKey> = pending
        .keys()
        .filter(|k| req.fair.room(running.get(*k).copied().unwrap_or(0)) > 0)
        .map(|(ns, k)| LockedKey {
            namespace: ns.clone(),
            key: k.clone(),
            pass: state
                .passes
                .get(&(task.clone(), ns.clone(), k.clone()))
                .copied()
                .unwrap_or(0),
        })
        .collect();
    ready.sort_by(|a, b| (a.pass, &a.namespace, &a.key).cmp(&(b.pass, &b.namespace, &b.key)));
    ready.truncate(req.limit as usize);
    ready.sort_by(|a, b| (&a.namespace, &a.key).cmp(&(&b.namespace, &b.key)));
    let plan = FairPlan::new(ready, &running, &req.fair, req.limit);
    let mut claimed = vec![0u32; plan.keys.len()];
    let mut picked: Vec<Head> = Vec::new();
    for (i, k, n) in plan.wanted() {
        if let Some(heads) = pending.get_mut(&(k.namespace.clone(), k.key.clone())) {
            heads.sort();
            for h in heads.iter().take(n as usize) {
                picked.push(*h);
                claimed[i] += 1;
            }
        }
    }
    // The leases of one claim in claim order (docs/semantics.md#fair-claim).
    picked.sort();
    for (i, outcome) in plan.outcomes(&claimed, now) {
        if let KeyOutcome::Advance(pass) | KeyOutcome::Drained(pass) = outcome {
            let k = &plan.keys[i];
            state
                .passes
                .insert((task.clone(), k.namespace.clone(), k.key.clone()), pass);
        }
    }
    picked.into_iter().map(|h| h.3).collect()
}

/// T2 for every row the claim may take: the fair claim's picks (docs/semantics.md#fair-claim).
fn claim_in(
    state: &mut State,
    req: &ClaimRequest,
    now: DateTime<Utc>,
    lease_expires_at: DateTime<Utc>,
) -> Vec<ExecutionLease> {
    // docs/semantics.md#max-running: the store's mutex is the cap's lock.
    let capped;
    let req = match onestep_core::store::cap::capped_task(req) {
        None => req,
        Some(task) => {
            let running = state
                .rows
                .values()
                .filter(|r| {
                    r.execution.task_name == task && RUNNING_STATUSES.contains(&r.execution.status)
                })
                .count();
            let limit =
                onestep_core::store::cap::capped_limit(req, u64::try_from(running).unwrap_or(0));
            if limit == 0 {
                return Vec::new();
            }
            capped = ClaimRequest {
                limit,
                ..req.clone()
            };
            &capped
        }
    };
    let picked = if req.task_names.len() == 1 {
        fair_pick(state, req, now)
    } else {
        // A claim of several task names is a plain claim (docs/semantics.md#fair-claim): one
        // order over all of them, `(priority, available_at, created_at, id)`.
        let mut heads: Vec<(u8, DateTime<Utc>, DateTime<Utc>, Uuid)> = state
            .rows
            .values()
            .filter(|r| {
                req.namespaces.contains(&r.execution.namespace)
                    && req.task_names.contains(&r.execution.task_name)
                    && claimable_now(r, now)
            })
            .map(|r| {
                let e = &r.execution;
                (e.priority, e.available_at, e.created_at, e.id)
            })
            .collect();
        heads.sort();
        heads.truncate(req.limit as usize);
        heads.into_iter().map(|h| h.3).collect()
    };
    let mut leases = Vec::with_capacity(picked.len());
    for id in picked {
        let Some(row) = state.rows.get_mut(&id) else {
            continue;
        };
        let token = Uuid::new_v4();
        let attempt_id = onestep_core::ids::new_row_id(); // docs/semantics.md#time-ordered-ids
        let e = &mut row.execution;
        e.status = ExecutionStatus::Running;
        e.attempts = e.attempts.saturating_add(1);
        e.started_at = e.started_at.or(Some(now));
        e.version += 1;
        let attempt_no = e.attempts;
        row.lease_token = Some(token);
        row.lease_expires_at = Some(lease_expires_at);
        row.worker_id = Some(req.worker_id.clone());
        row.updated_at = now;
        row.attempts.push(AttemptRow {
            id: attempt_id,
            attempt_no,
            status: AttemptStatus::Running,
            lease_token: token,
            worker_id: req.worker_id.clone(),
            error: None,
            started_at: now,
            heartbeat_at: now,
            finished_at: None,
        });
        leases.push(ExecutionLease {
            execution: row.execution.clone(),
            attempt_id,
            attempt_no,
            lease_token: token,
            lease_expires_at,
            trace_parent: None,
        });
    }
    leases
}

/// T9–T13 on one row, atomically: nothing changes unless every fence holds.
fn complete_in(
    state: &mut State,
    lease: &LeaseRef,
    completion: &Completion,
    now: DateTime<Utc>,
    max_result_bytes: usize,
) -> Result<Execution, ExecutionError> {
    completion.validate()?;
    let Some(row) = state.rows.get_mut(&lease.execution_id) else {
        return stale(StaleReason::ExecutionMissing);
    };
    let plan = CompletionPlan::new(&row.execution, completion, now, max_result_bytes)?;
    let result = plan
        .encoded_result
        .as_ref()
        .map(|encoded| decoded(lease.execution_id, encoded))
        .transpose()?;
    let fenced = row.lease_live(lease.lease_token, now)
        && completion
            .status
            .allowed_sources()
            .contains(&row.execution.status);
    if !fenced {
        return if plan.is_replay_of(&row.execution) {
            Ok(row.execution.clone())
        } else {
            stale(StaleReason::LeaseInvalid)
        };
    }
    let Some(i) = row.running_attempt(lease.attempt_id, lease.lease_token) else {
        return stale(StaleReason::AttemptInvalid);
    };
    let attempt = &mut row.attempts[i];
    attempt.status = attempt_status_for(plan.effective);
    attempt.error = plan.error.clone();
    attempt.finished_at = Some(now);
    let e = &mut row.execution;
    e.status = plan.effective;
    e.result = result;
    e.error = plan.error;
    e.available_at = plan.available_at;
    e.finished_at = (plan.effective != ExecutionStatus::Retrying).then_some(now);
    e.version += 1;
    row.updated_at = now;
    row.clear_lease();
    Ok(row.execution.clone())
}

/// T8 on one row: where the lease is live, the status holds a lease and the attempt is running
/// under the token, extend the lease to `new_expiry` and stamp the attempt; otherwise nothing
/// changes. The verdict of one lease never depends on another lease of the same batch (an
/// extension only happens to a lease that was already live).
fn heartbeat_in(
    state: &mut State,
    lease: &LeaseRef,
    now: DateTime<Utc>,
    new_expiry: DateTime<Utc>,
) -> Result<HeartbeatResult, ExecutionError> {
    let row = state
        .rows
        .get_mut(&lease.execution_id)
        .filter(|r| r.lease_live(lease.lease_token, now) && r.execution.status.holds_lease());
    let Some((row, i)) = row.and_then(|r| {
        r.running_attempt(lease.attempt_id, lease.lease_token)
            .map(|i| (r, i))
    }) else {
        return stale(StaleReason::LeaseInvalid);
    };
    row.attempts[i].heartbeat_at = now;
    row.lease_expires_at = Some(new_expiry);
    row.updated_at = now;
    Ok(HeartbeatResult {
        lease_expires_at: new_expiry,
        cancel_requested: row.execution.status == ExecutionStatus::CancelRequested,
    })
}

/// T14 on one row: a running (not cancel-requested) live lease goes back to `queued`.
fn release_in(
    row: Option<&mut Row>,
    lease: &LeaseRef,
    now: DateTime<Utc>,
) -> Result<Execution, ExecutionError> {
    let Some(row) = row else {
        return stale(StaleReason::ExecutionMissing);
    };
    if !(row.lease_live(lease.lease_token, now) && row.execution.status == ExecutionStatus::Running)
    {
        return stale(StaleReason::LeaseInvalid);
    }
    let Some(i) = row.running_attempt(lease.attempt_id, lease.lease_token) else {
        return stale(StaleReason::AttemptInvalid);
    };
    let attempt = &mut row.attempts[i];
    attempt.status = AttemptStatus::LeaseLost;
    attempt.finished_at = Some(now);
    let e = &mut row.execution;
    e.status = ExecutionStatus::Queued;
    e.available_at = now;
    e.version += 1;
    row.updated_at = now;
    row.clear_lease();
    Ok(row.execution.clone())
}

/// T15 on one row (docs/steps.md#sleep): a running live lease goes back to `queued` until
/// `wake_at`, its attempt `parked`; on a `cancel_requested` row under the lease the cancel wins
/// (T11 with the cancel error); otherwise what the completion answers (stale).
fn park_in(
    state: &mut State,
    lease: &LeaseRef,
    wake_at: DateTime<Utc>,
    now: DateTime<Utc>,
    max_result_bytes: usize,
) -> Result<Execution, ExecutionError> {
    let parkable = state.rows.get(&lease.execution_id).is_some_and(|r| {
        r.lease_live(lease.lease_token, now) && r.execution.status == ExecutionStatus::Running
    });
    if !parkable {
        let cancel = Completion::cancelled(Some(onestep_core::park::cancel_error()));
        return complete_in(state, lease, &cancel, now, max_result_bytes);
    }
    let Some(row) = state.rows.get_mut(&lease.execution_id) else {
        return stale(StaleReason::ExecutionMissing);
    };
    let Some(i) = row.running_attempt(lease.attempt_id, lease.lease_token) else {
        return stale(StaleReason::AttemptInvalid);
    };
    let attempt = &mut row.attempts[i];
    attempt.status = AttemptStatus::Parked;
    attempt.finished_at = Some(now);
    let e = &mut row.execution;
    e.status = ExecutionStatus::Queued;
    e.available_at = wake_at;
    e.version += 1;
    row.updated_at = now;
    row.clear_lease();
    Ok(row.execution.clone())
}

#[async_trait]
impl LeaseStore for MemoryStore {
    async fn park(
        &self,
        lease: &LeaseRef,
        park: &onestep_core::park::Park,
    ) -> Result<Execution, ExecutionError> {
        park.validate()?;
        self.enter(Op::Park).await?;
        let now = self.now();
        let max = self.limits().max_result_bytes;
        let out = park_in(&mut self.state(), lease, park.wake_at, now, max);
        self.record(Op::Park, 1, out.is_ok());
        out
    }

    async fn parked_attempts(&self, execution_id: Uuid) -> Result<u32, ExecutionError> {
        let state = self.state();
        let n = state.rows.get(&execution_id).map_or(0, |r| {
            r.attempts
                .iter()
                .filter(|a| a.status == AttemptStatus::Parked)
                .count()
        });
        Ok(u32::try_from(n).unwrap_or(u32::MAX))
    }

    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<ExecutionLease>, ExecutionError> {
        let req = request.validate()?;
        self.enter(Op::Claim).await?;
        let now = self.now();
        let lease_expires_at = add_seconds(now, "lease_duration_s", req.lease_duration_s)?;
        let leases = {
            let mut state = self.state();
            maintain(&mut state, now, self.reclaim_batch_size());
            claim_in(&mut state, &req, now, lease_expires_at)
        };
        self.record(Op::Claim, leases.len(), true);
        Ok(leases)
    }

    async fn heartbeat(
        &self,
        lease: &LeaseRef,
        lease_duration_s: f64,
    ) -> Result<HeartbeatResult, ExecutionError> {
        validate_lease_duration(lease_duration_s)?;
        self.enter(Op::Heartbeat).await?;
        let now = self.now();
        let new_expiry = add_seconds(now, "lease_duration_s", lease_duration_s)?;
        let out = heartbeat_in(&mut self.state(), lease, now, new_expiry);
        self.record(Op::Heartbeat, 1, out.is_ok());
        out
    }

    async fn heartbeat_many(
        &self,
        leases: &[LeaseRef],
        lease_duration_s: f64,
    ) -> Result<Vec<Result<HeartbeatResult, ExecutionError>>, ExecutionError> {
        validate_lease_duration(lease_duration_s)?;
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        self.enter(Op::HeartbeatMany).await?;
        let now = self.now();
        let new_expiry = add_seconds(now, "lease_duration_s", lease_duration_s)?;
        let out: Vec<_> = {
            let mut state = self.state();
            leases
                .iter()
                .map(|lease| heartbeat_in(&mut state, lease, now, new_expiry))
                .collect()
        };
        self.record_batch(Op::HeartbeatMany, &out);
        Ok(out)
    }

    async fn cancel_requested(&self, leases: &[LeaseRef]) -> Result<Vec<Uuid>, ExecutionError> {
        if leases.is_empty() {
            return Ok(Vec::new());
        }
        self.enter(Op::CancelPoll).await?;
        let now = self.now();
        let out: Vec<Uuid> = {
            let state = self.state();
            let mut ids: Vec<Uuid> = leases
                .iter()
                .filter(|l| {
                    state.rows.get(&l.execution_id).is_some_and(|r| {
                        r.execution.status == ExecutionStatus::CancelRequested
                            && r.lease_live(l.lease_token, now)
                    })
                })
                .map(|l| l.execution_id)
                .collect();
            ids.sort();
            ids.dedup();
            ids
        };
        self.record(Op::CancelPoll, leases.len(), true);
        Ok(out)
    }

    async fn complete(
        &self,
        lease: &LeaseRef,
        completion: &Completion,
    ) -> Result<Execution, ExecutionError> {
        completion.validate()?;
        self.enter(Op::Complete).await?;
        let now = self.now();
        let max = self.limits().max_result_bytes;
        let out = complete_in(&mut self.state(), lease, completion, now, max);
        self.record(Op::Complete, 1, out.is_ok());
        out
    }

    async fn complete_many(
        &self,
        items: &[(LeaseRef, Completion)],
    ) -> Result<Vec<Result<Execution, ExecutionError>>, ExecutionError> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        self.enter(Op::CompleteMany).await?;
        let now = self.now();
        let max = self.limits().max_result_bytes;
        let out: Vec<_> = {
            let mut state = self.state();
            items
                .iter()
                .map(|(lease, completion)| complete_in(&mut state, lease, completion, now, max))
                .collect()
        };
        self.record_batch(Op::CompleteMany, &out);
        Ok(out)
    }

    async fn release(&self, lease: &LeaseRef) -> Result<Execution, ExecutionError> {
        self.enter(Op::Release).await?;
        let now = self.now();
        let out = release_in(self.state().rows.get_mut(&lease.execution_id), lease, now);
        self.record(Op::Release, 1, out.is_ok());
        out
    }
}
