//! `onestep purge` (docs/cli.md#purge) as every backend runs it: the request's statuses checked
//! first, then per namespace and status pass, bounded batches in keyset order, each its own
//! transaction, until a batch finds nothing. The backend implements [`PurgeBatches`] with its
//! own statements (which index, which order, how rows are locked and deleted).

use async_trait::async_trait;

use crate::diagnostics::{PurgeReport, PurgeRequest};
use crate::error::ExecutionError;
use crate::ports::Retention;
use crate::status::ExecutionStatus;

/// The reads and the batches of one purge.
#[async_trait]
pub trait PurgeBatches: Sync {
    /// Where a walk goes on from: the list position of the last row of a batch.
    type Position: Send + Sync;

    /// Whether the status-list index exists (one pass per named status then).
    fn per_status_index(&self) -> bool;

    /// Every namespace that has executions.
    async fn namespaces(&self) -> Result<Vec<String>, ExecutionError>;

    /// One batch (its own transaction) of `namespace`'s executions in `statuses` that finished
    /// before the cutoff, after `after`: the position of its last row (`None` when it found
    /// none) and what it removed (counted only, on a dry run).
    async fn batch(
        &self,
        namespace: &str,
        statuses: &[ExecutionStatus],
        request: &PurgeRequest,
        after: Option<&Self::Position>,
    ) -> Result<(Option<Self::Position>, PurgeReport), ExecutionError>;
}

/// Every backend that purges in batches serves the [`Retention`] port through [`purge`].
#[async_trait]
impl<T: PurgeBatches + Send> Retention for T {
    async fn purge(&self, request: &PurgeRequest) -> Result<PurgeReport, ExecutionError> {
        purge(self, request).await
    }
}

/// Runs `request` on `store`. Named statuses are purged one at a time, each through its range
/// of the status-list index where it exists; the passes are computed first, so a bad request
/// fails before any read. An interrupted purge leaves rows the next run removes.
pub async fn purge<P: PurgeBatches + ?Sized>(
    store: &P,
    request: &PurgeRequest,
) -> Result<PurgeReport, ExecutionError> {
    let groups = request.status_passes(store.per_status_index())?;
    let namespaces = match &request.namespace {
        Some(ns) => vec![ns.clone()],
        None => store.namespaces().await?,
    };
    let mut report = PurgeReport::default();
    for ns in &namespaces {
        for group in &groups {
            let mut after: Option<P::Position> = None;
            loop {
                let (last, removed) = store.batch(ns, group, request, after.as_ref()).await?;
                if last.is_none() {
                    break;
                }
                report.add_batch(&removed);
                after = last;
            }
        }
    }
    Ok(report)
}
