//! The statements behind [`ExecutionInsights`](onestep_core::ports::ExecutionInsights) for the
//! operator dashboard and the API's `onestep_executions` gauge (docs/ui.md#overview-queries),
//! the same statements as on MySQL: grouped counts over the `(namespace, task_name, status, …)`
//! index and the newest rows of the last hour over the list index ([`OverviewRows`]; core turns
//! the rows into counts).

use async_trait::async_trait;
use onestep_core::ExecutionError;
use onestep_core::rate::BucketRow;
use onestep_core::store::insights::{
    KeyRows, NamespaceRows, Newest, NewestRows, OverviewRows, TaskStatusRows,
};
use tokio_postgres::Row;
use tokio_postgres::types::ToSql;

use crate::backend::PgBackend;
use crate::schema::q;

impl PgBackend {
    /// The rows of `sql` with `params` (an error is `stats`'s).
    async fn overview(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>, ExecutionError> {
        self.run("stats", || async {
            let conn = self.conn().await?;
            Ok(conn.query(sql, params).await?)
        })
        .await
    }
}

#[async_trait]
impl OverviewRows for PgBackend {
    async fn task_status_rows(&self, namespace: &str) -> Result<TaskStatusRows, ExecutionError> {
        let sql = format!(
            "SELECT task_name, status, COUNT(*) FROM {} WHERE namespace = $1 \
             GROUP BY task_name, status ORDER BY task_name, status",
            q(&self.tables().executions)
        );
        let rows = self.overview(&sql, &[&namespace]).await?;
        rows.iter()
            .map(|r| Ok((get(r, 0)?, get(r, 1)?, get(r, 2)?)))
            .collect()
    }

    async fn namespace_rows(&self, namespaces: &[String]) -> Result<NamespaceRows, ExecutionError> {
        let sql = format!(
            "SELECT namespace, task_name, status, COUNT(*) FROM {} \
             WHERE namespace = ANY($1::text[]) \
             GROUP BY namespace, task_name, status ORDER BY namespace, task_name, status",
            q(&self.tables().executions)
        );
        let rows = self.overview(&sql, &[&namespaces]).await?;
        rows.iter()
            .map(|r| Ok((get(r, 0)?, get(r, 1)?, get(r, 2)?, get(r, 3)?)))
            .collect()
    }

    async fn newest_rows(&self, newest: Newest<'_>) -> Result<NewestRows, ExecutionError> {
        let sql = format!(
            "SELECT status, (EXTRACT(EPOCH FROM (started_at - available_at)) * 1000000)::BIGINT \
             FROM {} WHERE namespace = $1 AND created_at >= $2 \
             ORDER BY created_at DESC, id DESC LIMIT $3",
            q(&self.tables().executions)
        );
        let limit = i64::try_from(newest.limit).unwrap_or(i64::MAX);
        let rows = self
            .overview(&sql, &[&newest.namespace, &newest.since, &limit])
            .await?;
        rows.iter().map(|r| Ok((get(r, 0)?, get(r, 1)?))).collect()
    }

    /// Reads the unfinished rows of the namespaces (the status index's ranges); a table without
    /// the `fairness_key` column has one key per namespace.
    async fn key_rows(&self, namespaces: &[String], limit: u64) -> Result<KeyRows, ExecutionError> {
        let key = if self.sql().priority_columns {
            crate::schema::KEY_EXPR
        } else {
            "namespace"
        };
        let sql = format!(
            "SELECT namespace, task_name, {key} AS k, \
             COUNT(*) FILTER (WHERE status IN ('queued', 'retrying')) AS w, \
             COUNT(*) FILTER (WHERE status IN ('running', 'cancel_requested')) AS r \
             FROM {} WHERE namespace = ANY($1::text[]) \
             AND status IN ('queued', 'retrying', 'running', 'cancel_requested') \
             GROUP BY namespace, task_name, k ORDER BY w DESC, r DESC, namespace, task_name, k \
             LIMIT $2",
            q(&self.tables().executions)
        );
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self.overview(&sql, &[&namespaces, &limit]).await?;
        rows.iter()
            .map(|r| Ok((get(r, 0)?, get(r, 1)?, get(r, 2)?, get(r, 3)?, get(r, 4)?)))
            .collect()
    }

    /// The small buckets table, read whole up to `limit` (docs/ui.md#rate-limits).
    async fn bucket_rows(&self, limit: u64) -> Result<Option<Vec<BucketRow>>, ExecutionError> {
        if !self.schema_report().features.buckets_table {
            return Ok(None);
        }
        let sql = format!(
            "SELECT bucket, tokens, refilled_at, paused_until FROM {} \
             WHERE bucket LIKE 'task:%' OR bucket LIKE 'origin:%' \
             ORDER BY paused_until DESC NULLS LAST, tokens, bucket LIMIT $1",
            q(&crate::schema::buckets_table(self.tables()))
        );
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let rows = self.overview(&sql, &[&limit]).await?;
        rows.iter()
            .map(|r| Ok((get(r, 0)?, get(r, 1)?, get(r, 2)?, get(r, 3)?)))
            .collect::<Result<_, ExecutionError>>()
            .map(Some)
    }
}

/// Column `i` of an overview row.
fn get<'a, T: tokio_postgres::types::FromSql<'a>>(
    r: &'a Row,
    i: usize,
) -> Result<T, ExecutionError> {
    r.try_get(i).map_err(|e| {
        ExecutionError::Undecodable(format!("an overview row could not be decoded: {e}"))
    })
}
