//! `onestep purge` on PostgreSQL (docs/cli.md#purge, docs/postgres.md#diagnostics-and-traces):
//! [`Retention`] for [`PgBackend`], bounded batches, each its own transaction, the attempts,
//! diagnostics and trace contexts deleted with their execution.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use onestep_core::diagnostics::{PurgeReport, PurgeRequest};
use onestep_core::store::purge::PurgeBatches;
use onestep_core::{ExecutionError, ExecutionStatus};
use uuid::Uuid;

use crate::backend::{PgBackend, commit};
use crate::diagnostics::u64_of;
use crate::schema::q;

#[async_trait]
impl PurgeBatches for PgBackend {
    /// `created_at` and id of a batch's last row.
    type Position = (DateTime<Utc>, Uuid);

    fn per_status_index(&self) -> bool {
        self.schema_report().features.list_indexes
    }

    /// A loose index scan of the list index, one `min()` probe per namespace (a recursive CTE:
    /// PostgreSQL has no skip scan, and `SELECT DISTINCT` reads every row).
    async fn namespaces(&self) -> Result<Vec<String>, ExecutionError> {
        let t = &self.sql().t;
        let sql = format!(
            "WITH RECURSIVE ns(name) AS (\
               SELECT min(namespace) FROM {t} \
               UNION ALL \
               SELECT (SELECT min(namespace) FROM {t} WHERE namespace > ns.name) \
                 FROM ns WHERE ns.name IS NOT NULL) \
             SELECT name FROM ns WHERE name IS NOT NULL"
        );
        let rows = self
            .run("purge", || async {
                let conn = self.conn().await?;
                Ok(conn.query(&sql, &[]).await?)
            })
            .await?;
        rows.iter()
            .map(|r| r.try_get::<_, String>(0))
            .collect::<Result<_, _>>()
            .map_err(|e| ExecutionError::Encoding(format!("namespace: {e}")))
    }

    /// One batch of `namespace`'s executions created before the cutoff (a finished one was
    /// created before it finished) through the list index, in keyset order.
    async fn batch(
        &self,
        namespace: &str,
        statuses: &[ExecutionStatus],
        request: &PurgeRequest,
        after: Option<&(DateTime<Utc>, Uuid)>,
    ) -> Result<(Option<(DateTime<Utc>, Uuid)>, PurgeReport), ExecutionError> {
        let statuses: Vec<&str> = statuses.iter().map(|s| s.as_str()).collect();
        let cutoff = request.finished_before;
        let limit = i64::from(request.batch_size);
        let lock = if request.dry_run {
            ""
        } else {
            " FOR UPDATE SKIP LOCKED"
        };
        let select = |keyset: &str| {
            format!(
                "SELECT id, created_at FROM {} WHERE namespace = $1 AND created_at < $2{keyset} \
                 AND status = ANY($3) AND finished_at < $2 ORDER BY created_at, id LIMIT $4{lock}",
                self.sql().t
            )
        };
        let first = select("");
        let next = select(" AND (created_at > $5 OR (created_at = $5 AND id > $6))");
        let a = q(&self.tables().attempts);
        self.run("purge", || async {
            let mut conn = self.conn().await?;
            let tx = conn.transaction().await?;
            let rows = match after {
                Some((c, id)) => {
                    tx.query(&next, &[&namespace, &cutoff, &statuses, &limit, c, id])
                        .await?
                }
                None => {
                    tx.query(&first, &[&namespace, &cutoff, &statuses, &limit])
                        .await?
                }
            };
            let mut ids = Vec::with_capacity(rows.len());
            let mut last = None;
            for r in &rows {
                let id: Uuid = r.try_get(0)?;
                let created: DateTime<Utc> = r.try_get(1)?;
                ids.push(id);
                last = Some((created, id));
            }
            let mut removed = PurgeReport::default();
            if ids.is_empty() {
                tx.rollback().await?;
                return Ok((last, removed));
            }
            if request.dry_run {
                removed.executions = ids.len() as u64;
                let n: i64 = tx
                    .query_one(
                        &format!("SELECT count(*) FROM {a} WHERE execution_id = ANY($1)"),
                        &[&ids],
                    )
                    .await?
                    .try_get(0)?;
                removed.attempts = u64_of(n);
                if let Some(d) = self.d() {
                    let n: i64 = tx
                        .query_one(
                            &format!("SELECT count(*) FROM {d} WHERE execution_id = ANY($1)"),
                            &[&ids],
                        )
                        .await?
                        .try_get(0)?;
                    removed.diagnostics = u64_of(n);
                }
                if let Some(st) = self.steps_existing() {
                    let n: i64 = tx
                        .query_one(
                            &format!("SELECT count(*) FROM {st} WHERE execution_id = ANY($1)"),
                            &[&ids],
                        )
                        .await?
                        .try_get(0)?;
                    removed.steps = u64_of(n);
                }
                tx.rollback().await?;
                return Ok((last, removed));
            }
            if let Some(d) = self.d() {
                removed.diagnostics = tx
                    .execute(
                        &format!("DELETE FROM {d} WHERE execution_id = ANY($1)"),
                        &[&ids],
                    )
                    .await?;
            }
            if let Some((cb, dl)) = self.callback_tables_existing() {
                for table in [cb, dl] {
                    tx.execute(
                        &format!("DELETE FROM {table} WHERE execution_id = ANY($1)"),
                        &[&ids],
                    )
                    .await?;
                }
            }
            if let Some(tr) = self.tr_existing() {
                tx.execute(
                    &format!("DELETE FROM {tr} WHERE execution_id = ANY($1)"),
                    &[&ids],
                )
                .await?;
            }
            if let Some(st) = self.steps_existing() {
                removed.steps = tx
                    .execute(
                        &format!("DELETE FROM {st} WHERE execution_id = ANY($1)"),
                        &[&ids],
                    )
                    .await?;
            }
            removed.attempts = tx
                .execute(
                    &format!("DELETE FROM {a} WHERE execution_id = ANY($1)"),
                    &[&ids],
                )
                .await?;
            removed.executions = tx
                .execute(
                    &format!("DELETE FROM {} WHERE id = ANY($1)", self.sql().t),
                    &[&ids],
                )
                .await?;
            commit(tx).await?;
            Ok((last, removed))
        })
        .await
    }
}
