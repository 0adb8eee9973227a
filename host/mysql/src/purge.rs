//! `onestep purge` (docs/cli.md#purge): [`Retention`] for [`MySqlBackend`], bounded batches
//! through the list index, each its own transaction, the attempts, diagnostics, trace
//! contexts and steps deleted with their execution.

use async_trait::async_trait;
use chrono::NaiveDateTime;
use mysql_async::prelude::Queryable;
use mysql_async::{Params, Value as DbValue};
use onestep_core::diagnostics::{PurgeReport, PurgeRequest};
use onestep_core::store::purge::PurgeBatches;
use onestep_core::{ExecutionError, ExecutionStatus};

use crate::backend::{MySqlBackend, begin, commit};
use crate::errors::OpError;
use crate::rows::{bind_time, bind_uuid, parse_uuid, placeholders};

/// The list position a purge walk goes on from: `created_at` and the id as read.
type Position = (NaiveDateTime, String);

#[async_trait]
impl PurgeBatches for MySqlBackend {
    type Position = Position;

    fn per_status_index(&self) -> bool {
        self.inner.features.list_indexes
    }

    async fn namespaces(&self) -> Result<Vec<String>, ExecutionError> {
        self.run("purge", || async {
            let mut conn = self.conn().await?;
            let ns: Vec<String> = conn
                .query(format!("SELECT DISTINCT namespace FROM `{}`", self.t()))
                .await?;
            Ok(ns)
        })
        .await
    }

    /// One batch of `namespace`'s executions created before the cutoff (a finished one was
    /// created before it finished) through the list index, newest first from the cutoff down,
    /// in keyset order. Newest first is the list index's own order (`namespace, created_at
    /// DESC, id DESC`): both servers read it as a forward range that stops at the LIMIT,
    /// whereas MySQL 9 reads an oldest-first walk as a backward scan of the whole index,
    /// namespaces sorting after this one first (docs/schema.md#evidence). An interrupted purge
    /// leaves the oldest rows; the next run removes them.
    async fn batch(
        &self,
        namespace: &str,
        statuses: &[ExecutionStatus],
        request: &PurgeRequest,
        after: Option<&Position>,
    ) -> Result<(Option<Position>, PurgeReport), ExecutionError> {
        let cutoff = request.finished_before;
        let status_sql = placeholders(statuses.len());
        // One named status: its range of the status-list index, forced (both servers prefer
        // the list index for its order and walk it past every other status).
        let hint = if statuses.len() == 1 && self.inner.features.list_indexes {
            format!(
                " FORCE INDEX (`{}`)",
                crate::schema::ix_status_list(&self.inner.names)
            )
        } else {
            String::new()
        };
        let hint = hint.as_str();
        let status_sql = status_sql.as_str();
        self.run("purge", || async move {
            let mut conn = self.conn().await?;
            let mut tx = begin(&mut conn).await?;
            let mut params: Vec<DbValue> = vec![DbValue::from(namespace), bind_time(cutoff)];
            let keyset = match after {
                Some((c, id)) => {
                    params.extend([
                        DbValue::from(*c),
                        DbValue::from(*c),
                        DbValue::from(id.as_str()),
                    ]);
                    " AND (created_at < ? OR (created_at = ? AND id < ?))"
                }
                None => "",
            };
            params.extend(statuses.iter().map(|s| DbValue::from(s.as_str())));
            params.push(bind_time(cutoff));
            params.push(DbValue::from(request.batch_size));
            let lock = if request.dry_run {
                ""
            } else {
                " FOR UPDATE SKIP LOCKED"
            };
            let rows: Vec<(String, NaiveDateTime)> = tx
                .exec(
                    format!(
                        "SELECT id, created_at FROM `{}`{hint} \
                                     WHERE namespace = ? AND created_at < ?{keyset} \
                                     AND status IN ({status_sql}) AND finished_at < ? \
                                     ORDER BY created_at DESC, id DESC LIMIT ?{lock}",
                        self.t()
                    ),
                    Params::Positional(params),
                )
                .await?;
            let last = rows.last().map(|(id, c)| (*c, id.clone()));
            // Bound as 32-hex like every other write: the text read back is
            // hyphenated from MariaDB's native `uuid` columns, and the diagnostics
            // table's `CHAR(32)` ids would not match that form.
            let ids: Vec<DbValue> = rows
                .iter()
                .map(|(id, _)| {
                    parse_uuid(&DbValue::from(id.as_str()))
                        .map(bind_uuid)
                        .map_err(|e| {
                            OpError::Domain(ExecutionError::Undecodable(format!(
                                "purge: undecodable execution id {id:?}: {e}"
                            )))
                        })
                })
                .collect::<Result<_, _>>()?;
            let mut removed = PurgeReport::default();
            if ids.is_empty() {
                tx.rollback().await?;
                return Ok((last, removed));
            }
            let list = placeholders(ids.len());
            if request.dry_run {
                removed.executions = ids.len() as u64;
                let n: Option<u64> = tx
                    .exec_first(
                        format!(
                            "SELECT COUNT(*) FROM `{}` WHERE execution_id IN ({list})",
                            self.a()
                        ),
                        Params::Positional(ids.clone()),
                    )
                    .await?;
                removed.attempts = n.unwrap_or(0);
                if let Some(d) = self.d() {
                    let n: Option<u64> = tx
                        .exec_first(
                            format!("SELECT COUNT(*) FROM `{d}` WHERE execution_id IN ({list})"),
                            Params::Positional(ids.clone()),
                        )
                        .await?;
                    removed.diagnostics = n.unwrap_or(0);
                }
                if let Some(st) = self.steps_existing() {
                    let n: Option<u64> = tx
                        .exec_first(
                            format!("SELECT COUNT(*) FROM `{st}` WHERE execution_id IN ({list})"),
                            Params::Positional(ids.clone()),
                        )
                        .await?;
                    removed.steps = n.unwrap_or(0);
                }
                tx.rollback().await?;
                return Ok((last, removed));
            }
            if let Some(d) = self.d() {
                tx.exec_drop(
                    format!("DELETE FROM `{d}` WHERE execution_id IN ({list})"),
                    Params::Positional(ids.clone()),
                )
                .await?;
                removed.diagnostics = tx.affected_rows();
            }
            if let Some(tr) = self.tr_existing() {
                tx.exec_drop(
                    format!("DELETE FROM `{tr}` WHERE execution_id IN ({list})"),
                    Params::Positional(ids.clone()),
                )
                .await?;
            }
            if let Some(st) = self.steps_existing() {
                tx.exec_drop(
                    format!("DELETE FROM `{st}` WHERE execution_id IN ({list})"),
                    Params::Positional(ids.clone()),
                )
                .await?;
                removed.steps = tx.affected_rows();
            }
            if let Some((cb, dl)) = self.callback_tables_existing() {
                for table in [cb, dl] {
                    tx.exec_drop(
                        format!("DELETE FROM `{table}` WHERE execution_id IN ({list})"),
                        Params::Positional(ids.clone()),
                    )
                    .await?;
                }
            }
            tx.exec_drop(
                format!("DELETE FROM `{}` WHERE execution_id IN ({list})", self.a()),
                Params::Positional(ids.clone()),
            )
            .await?;
            removed.attempts = tx.affected_rows();
            tx.exec_drop(
                format!("DELETE FROM `{}` WHERE id IN ({list})", self.t()),
                Params::Positional(ids),
            )
            .await?;
            removed.executions = tx.affected_rows();
            commit(self, tx).await?;
            Ok((last, removed))
        })
        .await
    }
}
