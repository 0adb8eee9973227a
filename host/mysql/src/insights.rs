//! [`ExecutionInsights`] for the operator dashboard (docs/ui.md#overview-queries): the grouped
//! count by task and status, and the newest executions of the last hour, each one statement.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use mysql_async::prelude::Queryable;
use mysql_async::{Params, Value as DbValue};
use onestep_core::ExecutionError;
use onestep_core::ports::{ExecutionInsights, RecentActivity, StatusCount};

use crate::backend::MySqlBackend;
use crate::errors::OpError;
use crate::rows::bind_time;

#[async_trait]
impl ExecutionInsights for MySqlBackend {
    /// `SELECT task_name, status, COUNT(*) … WHERE namespace = ? GROUP BY task_name, status`:
    /// reads the namespace's range of the `(namespace, task_name, …)` index plus each row's
    /// status (docs/ui.md#overview-queries has its cost).
    async fn counts_by_task_status(
        &self,
        namespace: &str,
    ) -> Result<Vec<StatusCount>, ExecutionError> {
        let sql = format!(
            "SELECT task_name, status, COUNT(*) FROM `{}` WHERE namespace = ? \
             GROUP BY task_name, status ORDER BY task_name, status",
            self.t()
        );
        let rows: Vec<(String, String, i64)> = async {
            let mut conn = self.conn().await?;
            let rows = conn
                .exec(sql, Params::Positional(vec![DbValue::from(namespace)]))
                .await?;
            Ok::<_, OpError>(rows)
        }
        .await
        .map_err(|e| self.error(e, "stats"))?;
        rows.into_iter()
            .map(|(task_name, status, count)| StatusCount::from_row(task_name, &status, count))
            .collect()
    }

    /// `SELECT namespace, task_name, status, COUNT(*) … WHERE namespace IN (…) GROUP BY
    /// namespace, task_name, status`: one statement; with the `(namespace, task_name, status)`
    /// index it reads only that index's ranges of the namespaces (docs/ui.md#overview-queries).
    async fn counts_by_namespace(
        &self,
        namespaces: &[String],
    ) -> Result<Vec<(String, StatusCount)>, ExecutionError> {
        if namespaces.is_empty() {
            return Ok(Vec::new());
        }
        let marks = vec!["?"; namespaces.len()].join(", ");
        let sql = format!(
            "SELECT namespace, task_name, status, COUNT(*) FROM `{}` WHERE namespace IN ({marks}) \
             GROUP BY namespace, task_name, status ORDER BY namespace, task_name, status",
            self.t()
        );
        let params: Vec<DbValue> = namespaces
            .iter()
            .map(|n| DbValue::from(n.as_str()))
            .collect();
        let rows: Vec<(String, String, String, i64)> = async {
            let mut conn = self.conn().await?;
            let rows = conn.exec(sql, Params::Positional(params)).await?;
            Ok::<_, OpError>(rows)
        }
        .await
        .map_err(|e| self.error(e, "stats"))?;
        rows.into_iter()
            .map(|(namespace, task_name, status, count)| {
                Ok((namespace, StatusCount::from_row(task_name, &status, count)?))
            })
            .collect()
    }

    /// The newest `max_rows + 1` rows of `(namespace, created_at DESC, id DESC)` at or after
    /// `since`: status and queue wait of each.
    async fn recent_activity(
        &self,
        namespace: &str,
        since: DateTime<Utc>,
        max_rows: u32,
    ) -> Result<RecentActivity, ExecutionError> {
        let sql = format!(
            "SELECT status, TIMESTAMPDIFF(MICROSECOND, available_at, started_at) FROM `{}` \
             WHERE namespace = ? AND created_at >= ? ORDER BY created_at DESC, id DESC LIMIT {}",
            self.t(),
            u64::from(max_rows) + 1
        );
        let params = vec![DbValue::from(namespace), bind_time(since)];
        let rows: Vec<(String, Option<i64>)> = async {
            let mut conn = self.conn().await?;
            let rows = conn.exec(sql, Params::Positional(params)).await?;
            Ok::<_, OpError>(rows)
        }
        .await
        .map_err(|e| self.error(e, "stats"))?;
        Ok(RecentActivity::from_rows(rows, max_rows))
    }
}
