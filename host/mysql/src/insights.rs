//! The statements behind [`ExecutionInsights`](onestep_core::ports::ExecutionInsights) for the
//! operator dashboard (docs/ui.md#overview-queries): the grouped count by task and status, and
//! the newest executions of the last hour, each one statement ([`OverviewRows`]; core turns
//! the rows into counts).

use async_trait::async_trait;
use mysql_async::prelude::Queryable;
use mysql_async::{Params, Value as DbValue};
use onestep_core::ExecutionError;
use onestep_core::rate::BucketRow;
use onestep_core::store::insights::{
    KeyRows, NamespaceRows, Newest, NewestRows, OverviewRows, TaskStatusRows,
};

use crate::backend::MySqlBackend;
use crate::errors::OpError;
use crate::rows::{bind_time, placeholders};

impl MySqlBackend {
    /// The rows of `sql` with `params`, on a pooled connection (an error is `stats`'s).
    async fn overview<T: mysql_async::prelude::FromRow + Send + 'static>(
        &self,
        sql: String,
        params: Vec<DbValue>,
    ) -> Result<Vec<T>, ExecutionError> {
        async {
            let mut conn = self.conn().await?;
            let rows = conn.exec(sql, Params::Positional(params)).await?;
            Ok::<_, OpError>(rows)
        }
        .await
        .map_err(|e| self.error(e, "stats"))
    }
}

#[async_trait]
impl OverviewRows for MySqlBackend {
    /// `SELECT task_name, status, COUNT(*) … WHERE namespace = ? GROUP BY task_name, status`:
    /// reads the namespace's range of the `(namespace, task_name, …)` index plus each row's
    /// status (docs/ui.md#overview-queries has its cost).
    async fn task_status_rows(&self, namespace: &str) -> Result<TaskStatusRows, ExecutionError> {
        let sql = format!(
            "SELECT task_name, status, COUNT(*) FROM `{}` WHERE namespace = ? \
             GROUP BY task_name, status ORDER BY task_name, status",
            self.t()
        );
        self.overview(sql, vec![DbValue::from(namespace)]).await
    }

    /// `SELECT namespace, task_name, status, COUNT(*) … WHERE namespace IN (…) GROUP BY
    /// namespace, task_name, status`: one statement; with the `(namespace, task_name, status)`
    /// index it reads only that index's ranges of the namespaces (docs/ui.md#overview-queries).
    async fn namespace_rows(&self, namespaces: &[String]) -> Result<NamespaceRows, ExecutionError> {
        let sql = format!(
            "SELECT namespace, task_name, status, COUNT(*) FROM `{}` WHERE namespace IN ({}) \
             GROUP BY namespace, task_name, status ORDER BY namespace, task_name, status",
            self.t(),
            placeholders(namespaces.len())
        );
        let params = namespaces.iter().map(|n| DbValue::from(n.as_str()));
        self.overview(sql, params.collect()).await
    }

    /// The newest `limit` rows of `(namespace, created_at DESC, id DESC)` at or after `since`:
    /// status and queue wait of each.
    async fn newest_rows(&self, newest: Newest<'_>) -> Result<NewestRows, ExecutionError> {
        let sql = format!(
            "SELECT status, TIMESTAMPDIFF(MICROSECOND, available_at, started_at) FROM `{}` \
             WHERE namespace = ? AND created_at >= ? ORDER BY created_at DESC, id DESC LIMIT {}",
            self.t(),
            newest.limit
        );
        let params = vec![DbValue::from(newest.namespace), bind_time(newest.since)];
        self.overview(sql, params).await
    }

    /// Reads the unfinished rows of the namespaces; a table without the `fairness_key` column
    /// has one key per namespace.
    async fn key_rows(&self, namespaces: &[String], limit: u64) -> Result<KeyRows, ExecutionError> {
        let key = if self.priority_columns() {
            "COALESCE(fairness_key, namespace)"
        } else {
            "namespace"
        };
        let sql = format!(
            "SELECT namespace, task_name, {key} AS k, \
             CAST(SUM(CASE WHEN status IN ('queued', 'retrying') THEN 1 ELSE 0 END) AS SIGNED) AS w, \
             CAST(SUM(CASE WHEN status IN ('running', 'cancel_requested') THEN 1 ELSE 0 END) AS SIGNED) AS r \
             FROM `{}` WHERE namespace IN ({}) \
             AND status IN ('queued', 'retrying', 'running', 'cancel_requested') \
             GROUP BY namespace, task_name, k ORDER BY w DESC, r DESC, namespace, task_name, k \
             LIMIT {limit}",
            self.t(),
            placeholders(namespaces.len())
        );
        let params = namespaces.iter().map(|n| DbValue::from(n.as_str()));
        self.overview(sql, params.collect()).await
    }

    /// The small buckets table, read whole up to `limit` (docs/ui.md#rate-limits).
    async fn bucket_rows(&self, limit: u64) -> Result<Option<Vec<BucketRow>>, ExecutionError> {
        MySqlBackend::bucket_rows(self, limit).await
    }
}
