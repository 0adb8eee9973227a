//! [`ExecutionInsights`] for every backend (docs/ui.md#overview-queries): the backend's
//! statements return plain rows ([`OverviewRows`]); turning them into status counts and the
//! recent-activity sample, and the edge cases, are written once, here.

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::error::ExecutionError;
use crate::ports::{ExecutionInsights, KeyLoads, RecentActivity, StatusCount};
#[cfg(doc)]
use crate::rate::LISTED_BUCKET_PREFIXES;
use crate::rate::{BucketRow, BucketStates};

/// `(task_name, status, count)` rows: the executions of one task in one status.
pub type TaskStatusRows = Vec<(String, String, i64)>;

/// `(namespace, task_name, status, count)` rows: the executions of one task of one namespace
/// in one status.
pub type NamespaceRows = Vec<(String, String, String, i64)>;

/// `(namespace, task_name, fairness key, waiting, running)` rows, busiest first.
pub type KeyRows = Vec<(String, String, String, i64, i64)>;

/// `(status, queue wait in µs)` rows, one per execution.
pub type NewestRows = Vec<(String, Option<i64>)>;

/// The newest executions asked for: those of `namespace` created at or after `since`, newest
/// first, at most `limit`.
#[derive(Debug, Clone, Copy)]
pub struct Newest<'a> {
    /// The namespace.
    pub namespace: &'a str,
    /// The earliest creation instant.
    pub since: DateTime<Utc>,
    /// The most rows.
    pub limit: u64,
}

/// The grouped rows behind [`ExecutionInsights`], each one statement of the backend.
#[async_trait]
pub trait OverviewRows: Send + Sync {
    /// The [`TaskStatusRows`]s of `namespace`'s executions, by task and status.
    async fn task_status_rows(&self, namespace: &str) -> Result<TaskStatusRows, ExecutionError>;

    /// The [`NamespaceRows`]s of the executions of `namespaces` (never empty), by namespace,
    /// task and status.
    async fn namespace_rows(&self, namespaces: &[String]) -> Result<NamespaceRows, ExecutionError>;

    /// The [`NewestRows`]s of the executions `newest` asks for, newest first.
    async fn newest_rows(&self, newest: Newest<'_>) -> Result<NewestRows, ExecutionError>;

    /// The [`KeyRows`] of the executions of `namespaces` (never empty) that are waiting
    /// (`queued`, `retrying`) or hold a slot (`running`, `cancel_requested`), grouped by
    /// namespace, task and effective fairness key, most waiting first, then most running, then
    /// by namespace, task and key; at most `limit` rows.
    async fn key_rows(&self, namespaces: &[String], limit: u64) -> Result<KeyRows, ExecutionError>;
    /// The task and origin buckets ([`LISTED_BUCKET_PREFIXES`]) of the buckets table, the
    /// latest pause first (no pause last), then fewest tokens, then by name; at most `limit`
    /// rows. `None` when the tables lack the buckets table.
    async fn bucket_rows(&self, limit: u64) -> Result<Option<Vec<BucketRow>>, ExecutionError>;
}

#[async_trait]
impl<T: OverviewRows> ExecutionInsights for T {
    async fn counts_by_task_status(
        &self,
        namespace: &str,
    ) -> Result<Vec<StatusCount>, ExecutionError> {
        self.task_status_rows(namespace)
            .await?
            .into_iter()
            .map(|(task_name, status, count)| StatusCount::from_row(task_name, &status, count))
            .collect()
    }

    async fn counts_by_namespace(
        &self,
        namespaces: &[String],
    ) -> Result<Vec<(String, StatusCount)>, ExecutionError> {
        if namespaces.is_empty() {
            return Ok(Vec::new());
        }
        self.namespace_rows(namespaces)
            .await?
            .into_iter()
            .map(|(namespace, task_name, status, count)| {
                Ok((namespace, StatusCount::from_row(task_name, &status, count)?))
            })
            .collect()
    }

    /// One row more than `max_rows`, so that the sample knows whether it was cut.
    async fn recent_activity(
        &self,
        namespace: &str,
        since: DateTime<Utc>,
        max_rows: u32,
    ) -> Result<RecentActivity, ExecutionError> {
        let newest = Newest {
            namespace,
            since,
            limit: u64::from(max_rows) + 1,
        };
        let rows = self.newest_rows(newest).await?;
        Ok(RecentActivity::from_rows(rows, max_rows))
    }

    /// One row more than `limit`, so that the answer knows whether it was cut.
    async fn key_loads(
        &self,
        namespaces: &[String],
        limit: u32,
    ) -> Result<KeyLoads, ExecutionError> {
        if namespaces.is_empty() || limit == 0 {
            return Ok(KeyLoads::default());
        }
        let rows = self.key_rows(namespaces, u64::from(limit) + 1).await?;
        Ok(KeyLoads::from_rows(rows, limit))
    }

    /// One row more than `limit`, so that the answer knows whether it was cut.
    async fn rate_limits(&self, limit: u32) -> Result<BucketStates, ExecutionError> {
        if limit == 0 {
            return Ok(BucketStates::default());
        }
        let rows = self.bucket_rows(u64::from(limit) + 1).await?;
        Ok(BucketStates::from_rows(rows, limit))
    }
}
