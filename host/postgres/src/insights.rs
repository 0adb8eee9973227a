//! [`ExecutionInsights`] for the operator dashboard and the API's `onestep_executions` gauge
//! (docs/ui.md#overview-queries), the same statements as on MySQL: grouped counts over the
//! `(namespace, task_name, status, …)` index and the newest rows of the last hour over the list
//! index.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use onestep_core::ExecutionError;
use onestep_core::ports::{ExecutionInsights, RecentActivity, StatusCount};

use crate::backend::PgBackend;
use crate::schema::q;

#[async_trait]
impl ExecutionInsights for PgBackend {
    async fn counts_by_task_status(
        &self,
        namespace: &str,
    ) -> Result<Vec<StatusCount>, ExecutionError> {
        let sql = format!(
            "SELECT task_name, status, COUNT(*) FROM {} WHERE namespace = $1 \
             GROUP BY task_name, status ORDER BY task_name, status",
            q(&self.tables().executions)
        );
        let rows = self
            .run("stats", || async {
                let conn = self.conn().await?;
                Ok(conn.query(&sql, &[&namespace]).await?)
            })
            .await?;
        rows.iter()
            .map(|r| {
                let task: String = r.try_get(0).map_err(enc)?;
                let status: String = r.try_get(1).map_err(enc)?;
                let count: i64 = r.try_get(2).map_err(enc)?;
                StatusCount::from_row(task, &status, count)
            })
            .collect()
    }

    async fn counts_by_namespace(
        &self,
        namespaces: &[String],
    ) -> Result<Vec<(String, StatusCount)>, ExecutionError> {
        if namespaces.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT namespace, task_name, status, COUNT(*) FROM {} \
             WHERE namespace = ANY($1::text[]) \
             GROUP BY namespace, task_name, status ORDER BY namespace, task_name, status",
            q(&self.tables().executions)
        );
        let rows = self
            .run("stats", || async {
                let conn = self.conn().await?;
                Ok(conn.query(&sql, &[&namespaces]).await?)
            })
            .await?;
        rows.iter()
            .map(|r| {
                let ns: String = r.try_get(0).map_err(enc)?;
                let task: String = r.try_get(1).map_err(enc)?;
                let status: String = r.try_get(2).map_err(enc)?;
                let count: i64 = r.try_get(3).map_err(enc)?;
                Ok((ns, StatusCount::from_row(task, &status, count)?))
            })
            .collect()
    }

    async fn recent_activity(
        &self,
        namespace: &str,
        since: DateTime<Utc>,
        max_rows: u32,
    ) -> Result<RecentActivity, ExecutionError> {
        let sql = format!(
            "SELECT status, (EXTRACT(EPOCH FROM (started_at - available_at)) * 1000000)::BIGINT \
             FROM {} WHERE namespace = $1 AND created_at >= $2 \
             ORDER BY created_at DESC, id DESC LIMIT $3",
            q(&self.tables().executions)
        );
        let limit = i64::from(max_rows) + 1;
        let rows = self
            .run("stats", || async {
                let conn = self.conn().await?;
                Ok(conn.query(&sql, &[&namespace, &since, &limit]).await?)
            })
            .await?;
        let mut sample = Vec::with_capacity(rows.len());
        for r in &rows {
            let status: String = r.try_get(0).map_err(enc)?;
            let wait: Option<i64> = r.try_get(1).map_err(enc)?;
            sample.push((status, wait));
        }
        Ok(RecentActivity::from_rows(sample, max_rows))
    }
}

fn enc(e: tokio_postgres::Error) -> ExecutionError {
    ExecutionError::Undecodable(format!("an overview row could not be decoded: {e}"))
}
