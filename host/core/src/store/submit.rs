//! The decisions of the client operations that every backend makes alike
//! (docs/semantics.md#client-operations), around its own statements: how a submission relates
//! to the row holding its id or key ([`SubmissionReads::lookup`],
//! [`SubmissionReads::resolve_batch`]), the insert order and the
//! per-item outcomes of `submit_many`, what `cancel` does to each status, and the list
//! search's pattern and bounds. A backend implements [`SubmissionReads`] over one connection.

use std::collections::HashMap;

use async_trait::async_trait;
use uuid::Uuid;

use crate::error::ExecutionError;
use crate::execution::Execution;
use crate::request::{ListSearch, PreparedSubmission};
use crate::status::ExecutionStatus;
use crate::store::Lookup;

/// Most task names a key search without a task name lists (with more, it filters the
/// namespace's rows instead).
pub const MAX_LISTED_TASKS: usize = 500;

/// The per-item outcomes of `submit_many`: each submission's execution (new or replayed) or
/// its own error.
pub type BatchOutcomes = Vec<Result<Execution, ExecutionError>>;

/// Per submission of a batch, what a read found ([`SubmissionReads::resolve_batch`]): `None`
/// when neither its id nor its key is held.
pub type Resolved = Vec<Option<Result<Execution, ExecutionError>>>;

/// The execution a `cancel` names, and its reason.
#[derive(Debug, Clone, Copy)]
pub struct CancelTarget<'a> {
    /// The namespace the execution must be in.
    pub namespace: &'a str,
    /// The execution's id.
    pub id: Uuid,
    /// The reason stored with the cancellation.
    pub reason: Option<&'a str>,
}

/// The reads of a submission's outcome, on one connection or transaction.
#[async_trait]
pub trait SubmissionReads: Send {
    /// The backend's operation error (its driver's failures and [`ExecutionError`]s).
    type Error: From<ExecutionError> + Send;

    /// The execution with `id` in `namespace`.
    async fn by_id(&mut self, id: Uuid, namespace: &str) -> Result<Option<Execution>, Self::Error>;

    /// The row holding `sub`'s namespace, task name and idempotency `key`, with its stored
    /// submission digest.
    async fn key_holder(
        &mut self,
        sub: &PreparedSubmission,
        key: &str,
    ) -> Result<Option<(Execution, Option<String>)>, Self::Error>;

    /// The executions among `ids` (at most one statement's worth).
    async fn by_ids(&mut self, ids: &[Uuid]) -> Result<Vec<Execution>, Self::Error>;

    /// Reads the row holding `sub`'s id, else its idempotency key, and classifies it against
    /// `sub`.
    async fn lookup(&mut self, sub: &PreparedSubmission) -> Result<Lookup, Self::Error> {
        if let Some(e) = self.by_id(sub.id, &sub.namespace).await? {
            return Ok(Lookup::Inserted(e));
        }
        let Some(key) = &sub.idempotency_key else {
            return Ok(Lookup::Absent);
        };
        let Some((existing, digest)) = self.key_holder(sub, key).await? else {
            return Ok(Lookup::Absent);
        };
        if digest.as_deref() == Some(sub.digest.as_str()) {
            Ok(Lookup::Replay(existing))
        } else {
            Ok(Lookup::Conflict(existing.id))
        }
    }

    /// Per submission: the row by id, else the key holder (replay or conflict), else `None`;
    /// the ids are read `chunk` at a time.
    async fn resolve_batch(
        &mut self,
        subs: &[PreparedSubmission],
        chunk: usize,
    ) -> Result<Resolved, Self::Error> {
        let mut by_id: HashMap<Uuid, Execution> = HashMap::new();
        for part in subs.chunks(chunk.max(1)) {
            let ids: Vec<Uuid> = part.iter().map(|s| s.id).collect();
            for e in self.by_ids(&ids).await? {
                by_id.insert(e.id, e);
            }
        }
        let mut out = Vec::with_capacity(subs.len());
        for s in subs {
            if let Some(e) = by_id.get(&s.id) {
                out.push(Some(Ok(e.clone())));
                continue;
            }
            out.push(self.lookup(s).await?.outcome());
        }
        Ok(out)
    }
}

/// The order in which `submit_many` inserts: by task name and key, so that concurrent batches
/// take unique-index entries in the same order (fewer deadlocks); results are matched back by id.
pub fn insert_order(subs: &[PreparedSubmission]) -> Vec<&PreparedSubmission> {
    let mut order: Vec<&PreparedSubmission> = subs.iter().collect();
    order.sort_by(|a, b| {
        (&a.task_name, &a.idempotency_key).cmp(&(&b.task_name, &b.idempotency_key))
    });
    order
}

/// The per-item outcomes of a batch just written ([`SubmissionReads::resolve_batch`] in its
/// transaction): a
/// submission found nowhere is an encoding error.
pub fn batch_outcomes(resolved: Resolved, subs: &[PreparedSubmission]) -> BatchOutcomes {
    resolved
        .into_iter()
        .zip(subs)
        .map(|(r, s)| {
            r.ok_or_else(|| {
                ExecutionError::Encoding(format!("submitted execution {} not found", s.id))
            })
            .and_then(|x| x)
        })
        .collect()
}

/// Whether a batch whose commit was ambiguous landed: the batch is all or nothing, so one item
/// missing means nothing was committed (`None`: write it again).
pub fn batch_landed(resolved: Resolved) -> Option<Result<BatchOutcomes, ExecutionError>> {
    resolved
        .iter()
        .all(Option::is_some)
        .then(|| Ok(resolved.into_iter().flatten().collect()))
}

/// What `cancel` does to an execution in each status (docs/semantics.md#cancellation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CancelStep {
    /// Not yet running: cancelled at once (and finished).
    Cancel,
    /// Running: its worker is asked to stop.
    Request,
    /// Already terminal or asked: returned unchanged.
    Unchanged,
}

impl CancelStep {
    /// The step for an execution in `status`.
    pub fn of(status: ExecutionStatus) -> CancelStep {
        match status {
            ExecutionStatus::Queued | ExecutionStatus::Retrying => CancelStep::Cancel,
            ExecutionStatus::Running => CancelStep::Request,
            _ => CancelStep::Unchanged,
        }
    }
}

/// The pattern of the exception-type search (docs/semantics.md#listing-and-cursors): any case,
/// contained anywhere, with the text's own `%`, `_` and `\` escaped by `\`.
pub fn exception_type_pattern(search: &ListSearch) -> Option<String> {
    search.exception_type.as_ref().map(|t| {
        let escaped = t
            .to_lowercase()
            .replace('\\', "\\\\")
            .replace('%', "\\%")
            .replace('_', "\\_");
        format!("%{escaped}%")
    })
}
