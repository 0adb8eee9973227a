//! Quotas enforced in the submit transaction (docs/semantics.md#quotas), the same way on
//! every backend: with the namespace's quota lock held (the backend's own), a submission whose
//! id or idempotency key is already held answers as without a quota (the execution, a replay or
//! a conflict); a new one is admitted only while the namespace's, and its fairness key's,
//! waiting executions (queued or retrying) stay within the limits. The counts are bounded:
//! a backend counts at most `limit` rows through its quota index, never the history.

use std::collections::{HashMap, HashSet};

use async_trait::async_trait;

use crate::error::ExecutionError;
use crate::quota::{QuotaKind, QuotaRefusal, SubmitQuota};
use crate::request::PreparedSubmission;
use crate::store::Lookup;
use crate::store::submit::{Resolved, SubmissionReads};

/// The bounded counts of waiting executions a quota needs, on the submit's transaction.
#[async_trait]
pub trait QuotaReads: SubmissionReads {
    /// How many executions of `namespace` are waiting (queued or retrying) — with `key`, only
    /// those whose fairness key (`fairness_key`, else the namespace) is `key` — counting at most
    /// `limit` rows.
    async fn waiting(
        &mut self,
        namespace: &str,
        key: Option<&str>,
        limit: u32,
    ) -> Result<u32, Self::Error>;

    /// Per submission of `fresh` (none of whose id or key is held), in order: `None` when it fits
    /// (the counts then include it), else the refusal. Two submissions with the same task name and
    /// idempotency key count once (the second replays or conflicts with the first).
    async fn admit(
        &mut self,
        quota: &SubmitQuota,
        fresh: &[&PreparedSubmission],
    ) -> Result<Vec<Option<QuotaRefusal>>, Self::Error> {
        let Some(first) = fresh.first() else {
            return Ok(Vec::new());
        };
        let namespace = first.namespace.clone();
        // The counts first (owned values only across the reads), then the admission in order.
        let in_namespace = match quota.max_queued {
            Some(limit) => Some((self.waiting(&namespace, None, limit).await?, limit)),
            None => None,
        };
        let mut per_key: HashMap<String, u32> = HashMap::new();
        if let Some(limit) = quota.max_queued_per_key {
            let mut keys: Vec<String> = fresh
                .iter()
                .map(|s| s.fairness_key.clone().unwrap_or_else(|| namespace.clone()))
                .collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                let count = self.waiting(&namespace, Some(key.as_str()), limit).await?;
                per_key.insert(key, count);
            }
        }
        Ok(decide(quota, &namespace, in_namespace, per_key, fresh))
    }

    /// Before one submission is inserted under `quota` (the namespace's quota lock held): the
    /// answer when its id or key is already held (the execution, a replay or a conflict, as
    /// without a quota), the refusal when it does not fit, `None` when it is to be inserted.
    async fn gate_one(
        &mut self,
        quota: &SubmitQuota,
        sub: &PreparedSubmission,
    ) -> Result<Option<Result<crate::Execution, ExecutionError>>, Self::Error> {
        let found = self.lookup(sub).await?;
        if !matches!(found, Lookup::Absent) {
            return Ok(found.outcome());
        }
        Ok(self
            .admit(quota, &[sub])
            .await?
            .pop()
            .flatten()
            .map(|r| Err(ExecutionError::QuotaExceeded(Box::new(r)))))
    }

    /// Before a batch is inserted under `quota` (the namespace's quota lock held): per
    /// submission, the answer when its id or key is already held or when it does not fit (its
    /// [`ExecutionError::QuotaExceeded`]), `None` when it is to be inserted. Refusals go in
    /// submission order: the items before an over-quota item are admitted first.
    async fn gate_batch(
        &mut self,
        quota: &SubmitQuota,
        subs: &[PreparedSubmission],
        chunk: usize,
    ) -> Result<Resolved, Self::Error> {
        let mut resolved = self.resolve_batch(subs, chunk).await?;
        let fresh: Vec<usize> = (0..subs.len()).filter(|i| resolved[*i].is_none()).collect();
        let picked: Vec<&PreparedSubmission> = fresh.iter().map(|i| &subs[*i]).collect();
        let refusals = self.admit(quota, &picked).await?;
        for (i, refusal) in fresh.into_iter().zip(refusals) {
            if let Some(r) = refusal {
                resolved[i] = Some(Err(ExecutionError::QuotaExceeded(Box::new(r))));
            }
        }
        Ok(resolved)
    }
}

/// The quota a batch of one client carries: that of its first submission (a client's
/// submissions share their namespace and quota); `None` without limits.
pub fn quota_of(subs: &[PreparedSubmission]) -> Option<SubmitQuota> {
    subs.first()
        .and_then(|s| s.quota)
        .filter(SubmitQuota::is_limited)
}

/// [`admit`]'s decisions from the counts read.
fn decide(
    quota: &SubmitQuota,
    namespace: &str,
    mut in_namespace: Option<(u32, u32)>,
    mut per_key: HashMap<String, u32>,
    fresh: &[&PreparedSubmission],
) -> Vec<Option<QuotaRefusal>> {
    let mut admitted: HashSet<(&str, &str)> = HashSet::new();
    let mut out = Vec::with_capacity(fresh.len());
    for sub in fresh {
        if let Some(k) = sub.idempotency_key.as_deref()
            && admitted.contains(&(sub.task_name.as_str(), k))
        {
            out.push(None);
            continue;
        }
        let key = sub.fairness_key.as_deref().unwrap_or(namespace);
        if let Some((count, limit)) = in_namespace
            && count >= limit
        {
            out.push(Some(QuotaRefusal {
                quota: QuotaKind::MaxQueued,
                namespace: namespace.to_owned(),
                key: None,
                limit,
            }));
            continue;
        }
        if let Some(limit) = quota.max_queued_per_key {
            let count = per_key.entry(key.to_owned()).or_insert(0);
            if *count >= limit {
                out.push(Some(QuotaRefusal {
                    quota: QuotaKind::MaxQueuedPerKey,
                    namespace: namespace.to_owned(),
                    key: Some(key.to_owned()),
                    limit,
                }));
                continue;
            }
            *count += 1;
        }
        if let Some((count, _)) = in_namespace.as_mut() {
            *count += 1;
        }
        if let Some(k) = sub.idempotency_key.as_deref() {
            admitted.insert((sub.task_name.as_str(), k));
        }
        out.push(None);
    }
    out
}

/// The submissions [`gate_batch`] left to insert (its `None`s), in submission order.
pub fn to_insert(subs: &[PreparedSubmission], gated: &Resolved) -> Vec<PreparedSubmission> {
    subs.iter()
        .zip(gated)
        .filter(|(_, g)| g.is_none())
        .map(|(s, _)| s.clone())
        .collect()
}

/// The batch's answers: [`gate_batch`]'s, with each of its `None`s filled, in order, from
/// `inserted` (what was read back of [`to_insert`]'s submissions).
pub fn merge(gated: Resolved, inserted: Resolved) -> Resolved {
    let mut inserted = inserted.into_iter();
    gated
        .into_iter()
        .map(|g| g.or_else(|| inserted.next().flatten()))
        .collect()
}
