//! The copy loop of `onestep copy` (docs/cli.md#onestep-copy), once for every pair of backends: the
//! same-store check, the live-lease check, paging through the source in id order, the lease
//! release rule, the counts and the final verification.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::{ExecutionRecord, TableCounts, Transfer};
use crate::error::ExecutionError;
use crate::time::Clock;

/// Largest page of [`CopyOptions::page_size`].
pub const MAX_PAGE_SIZE: u32 = 10_000;

/// How to copy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyOptions {
    /// Executions per page (one export query set and one import transaction), 1–10000.
    pub page_size: u32,
    /// Copy executions whose lease is still valid, their lease expired in the target, instead
    /// of refusing.
    pub release_leases: bool,
    /// Read and count everything, write nothing.
    pub dry_run: bool,
}

/// One page done, with the totals so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageProgress {
    /// The page's number, from 1.
    pub page: u64,
    /// Executions in this page.
    pub executions: u64,
    /// Rows written so far.
    pub copied: TableCounts,
    /// Rows skipped so far (already in the target).
    pub skipped: TableCounts,
}

/// What a copy did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CopyReport {
    /// Pages read.
    pub pages: u64,
    /// Rows written (on a dry run: rows read).
    pub copied: TableCounts,
    /// Rows of executions the target already held.
    pub skipped: TableCounts,
    /// Executions written with their lease expired ([`release_lease`]), by status.
    pub released: BTreeMap<String, u64>,
    /// The source's rows counted before the first page.
    pub source: TableCounts,
    /// The target's rows counted after the last page (`None` on a dry run).
    pub target: Option<TableCounts>,
}

/// Why a copy stopped.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// Source and target are one store.
    #[error("source and target are the same store ({0}); nothing copied")]
    SameStore(String),
    /// The source has executions under a live lease and releasing was not asked for.
    #[error(
        "the source has {total} execution(s) with a live lease ({by_status}): workers are still \
         running them"
    )]
    LiveLeases {
        /// How many.
        total: u64,
        /// `status: n` pairs.
        by_status: String,
    },
    /// An option is out of range.
    #[error("{0}")]
    Invalid(String),
    /// A store failed.
    #[error("{0}")]
    Store(#[from] ExecutionError),
    /// The target holds fewer rows than the source after the copy.
    #[error("verification failed: the target holds {target}, fewer than the source's {held}")]
    Verification {
        /// The source's counts.
        held: TableCounts,
        /// The target's counts.
        target: TableCounts,
    },
}

/// The lease release rule (docs/semantics.md#copying-a-store): a lease still valid at `now`
/// is written with `lease_expires_at = now`, so the target's stale-lease reclaim takes the
/// execution on its first claim (running: retried or failed per its retry policy;
/// cancel_requested: cancelled); token, worker and every other column are kept. Answers whether
/// the lease was released.
pub fn release_lease(record: &mut ExecutionRecord, now: DateTime<Utc>) -> bool {
    match record.execution.lease_expires_at {
        Some(at) if at > now => {
            record.execution.lease_expires_at = Some(now);
            true
        }
        _ => false,
    }
}

fn live_error(by_status: &BTreeMap<String, u64>) -> CopyError {
    CopyError::LiveLeases {
        total: by_status.values().sum(),
        by_status: by_status
            .iter()
            .map(|(s, n)| format!("{s}: {n}"))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// Copies every record of `source` into `target` ([`CopyOptions`]), calling `progress` after
/// each page. Refuses a source that is the target ([`CopyError::SameStore`]) and, unless
/// `release_leases`, a source with live leases ([`CopyError::LiveLeases`], checked before the
/// first page and again on every page). Ends by checking that the target holds at least the
/// rows the source held when the copy began.
pub async fn copy(
    source: &dyn Transfer,
    target: &dyn Transfer,
    clock: &dyn Clock,
    opts: CopyOptions,
    mut progress: impl FnMut(&PageProgress),
) -> Result<CopyReport, CopyError> {
    if opts.page_size == 0 || opts.page_size > MAX_PAGE_SIZE {
        return Err(CopyError::Invalid(format!(
            "the page size must be 1–{MAX_PAGE_SIZE}, got {}",
            opts.page_size
        )));
    }
    let (from, to) = (source.location().await?, target.location().await?);
    if from == to {
        return Err(CopyError::SameStore(from));
    }
    let live = source.live_leases(clock.now()).await?;
    if !live.is_empty() && !opts.release_leases {
        return Err(live_error(&live));
    }
    let mut report = CopyReport {
        source: source.counts().await?,
        ..CopyReport::default()
    };
    let mut after: Option<Uuid> = None;
    loop {
        let mut page = source.export_page(after, opts.page_size).await?;
        let Some(last) = page.last() else { break };
        after = Some(last.id());
        let now = clock.now();
        let mut released = BTreeMap::new();
        for record in &mut page {
            if release_lease(record, now) {
                *released
                    .entry(record.execution.stored.status.clone())
                    .or_insert(0u64) += 1;
            }
        }
        if !released.is_empty() && !opts.release_leases {
            return Err(live_error(&released));
        }
        if opts.dry_run {
            for record in &page {
                report.copied.add(record.counts());
            }
        } else {
            let counts = target.import(&page).await?;
            report.copied.add(counts.copied);
            report.skipped.add(counts.skipped);
        }
        for (status, n) in released {
            *report.released.entry(status).or_insert(0) += n;
        }
        report.pages += 1;
        progress(&PageProgress {
            page: report.pages,
            executions: page.len() as u64,
            copied: report.copied,
            skipped: report.skipped,
        });
    }
    if !opts.dry_run {
        let held = target.counts().await?;
        report.target = Some(held);
        if !held.covers(&report.source) {
            return Err(CopyError::Verification {
                held: report.source,
                target: held,
            });
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests;
