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
}

/// The quota a batch of one client carries: that of its first submission (a client's
/// submissions share their namespace and quota); `None` without limits.
pub fn quota_of(subs: &[PreparedSubmission]) -> Option<SubmitQuota> {
    subs.first()
        .and_then(|s| s.quota)
        .filter(SubmitQuota::is_limited)
}

/// Per submission of `fresh` (none of whose id or key is held), in order: `None` when it fits
/// (the counts then include it), else the refusal. Two submissions with the same task name and
/// idempotency key count once (the second replays or conflicts with the first).
pub async fn admit<R: QuotaReads + ?Sized>(
    reads: &mut R,
    quota: &SubmitQuota,
    fresh: &[&PreparedSubmission],
) -> Result<Vec<Option<QuotaRefusal>>, R::Error> {
    let Some(first) = fresh.first() else {
        return Ok(Vec::new());
    };
    let namespace = first.namespace.as_str();
    let mut in_namespace = match quota.max_queued {
        Some(limit) => Some((reads.waiting(namespace, None, limit).await?, limit)),
        None => None,
    };
    let mut per_key: HashMap<String, u32> = HashMap::new();
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
            let count = match per_key.get(key) {
                Some(c) => *c,
                None => {
                    let c = reads.waiting(namespace, Some(key), limit).await?;
                    per_key.insert(key.to_owned(), c);
                    c
                }
            };
            if count >= limit {
                out.push(Some(QuotaRefusal {
                    quota: QuotaKind::MaxQueuedPerKey,
                    namespace: namespace.to_owned(),
                    key: Some(key.to_owned()),
                    limit,
                }));
                continue;
            }
            per_key.insert(key.to_owned(), count + 1);
        }
        if let Some((count, _)) = in_namespace.as_mut() {
            *count += 1;
        }
        if let Some(k) = sub.idempotency_key.as_deref() {
            admitted.insert((sub.task_name.as_str(), k));
        }
        out.push(None);
    }
    Ok(out)
}

/// Before one submission is inserted under `quota` (the namespace's quota lock held): the
/// answer when its id or key is already held (the execution, a replay or a conflict, as
/// without a quota), the refusal when it does not fit, `None` when it is to be inserted.
pub async fn gate_one<R: QuotaReads + ?Sized>(
    reads: &mut R,
    quota: &SubmitQuota,
    sub: &PreparedSubmission,
) -> Result<Option<Result<crate::Execution, ExecutionError>>, R::Error> {
    let found = reads.lookup(sub).await?;
    if !matches!(found, Lookup::Absent) {
        return Ok(found.outcome());
    }
    Ok(admit(reads, quota, &[sub])
        .await?
        .pop()
        .flatten()
        .map(|r| Err(ExecutionError::QuotaExceeded(Box::new(r)))))
}

/// Before a batch is inserted under `quota` (the namespace's quota lock held): per
/// submission, the answer when its id or key is already held or when it does not fit (its
/// [`ExecutionError::QuotaExceeded`]), `None` when it is to be inserted. Refusals go in
/// submission order: the items before an over-quota item are admitted first.
pub async fn gate_batch<R: QuotaReads + ?Sized>(
    reads: &mut R,
    quota: &SubmitQuota,
    subs: &[PreparedSubmission],
    chunk: usize,
) -> Result<Resolved, R::Error> {
    let mut resolved = reads.resolve_batch(subs, chunk).await?;
    let fresh: Vec<usize> = (0..subs.len()).filter(|i| resolved[*i].is_none()).collect();
    let picked: Vec<&PreparedSubmission> = fresh.iter().map(|i| &subs[*i]).collect();
    let refusals = admit(reads, quota, &picked).await?;
    for (i, refusal) in fresh.into_iter().zip(refusals) {
        if let Some(r) = refusal {
            resolved[i] = Some(Err(ExecutionError::QuotaExceeded(Box::new(r))));
        }
    }
    Ok(resolved)
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
