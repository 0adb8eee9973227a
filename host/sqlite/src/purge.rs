//! `onestep purge` on SQLite (docs/cli.md#purge): [`Retention`] for [`SqliteBackend`], bounded
//! batches, each its own `BEGIN IMMEDIATE` transaction, the attempts, diagnostics and trace
//! contexts deleted with their execution.

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use onestep_core::diagnostics::{PurgeReport, PurgeRequest};
use onestep_core::store::purge::PurgeBatches;
use onestep_core::{ExecutionError, ExecutionStatus};
use rusqlite::params;
use rusqlite::types::Value as Sql;
use uuid::Uuid;

use crate::backend::SqliteBackend;
use crate::client_ops::id_array;
use crate::diagnostics::u64_of;
use crate::rows::{time, ts, uid, uuid};

#[async_trait]
impl PurgeBatches for SqliteBackend {
    /// `created_at` and id of a batch's last row.
    type Position = (DateTime<Utc>, Uuid);

    fn per_status_index(&self) -> bool {
        self.schema_report().features.list_indexes
    }

    async fn namespaces(&self) -> Result<Vec<String>, ExecutionError> {
        self.run("purge", || {
            self.read(|b, c| {
                let mut st =
                    c.prepare_cached(&format!("SELECT DISTINCT namespace FROM {}", b.t()))?;
                let rows = st.query_map([], |r| r.get::<_, String>(0))?;
                Ok(rows.collect::<Result<Vec<_>, _>>()?)
            })
        })
        .await
    }

    /// One batch of `namespace`'s executions created (and finished) before the cutoff, in
    /// keyset order.
    async fn batch(
        &self,
        namespace: &str,
        statuses: &[ExecutionStatus],
        request: &PurgeRequest,
        after: Option<&(DateTime<Utc>, Uuid)>,
    ) -> Result<(Option<(DateTime<Utc>, Uuid)>, PurgeReport), ExecutionError> {
        let statuses: Vec<&str> = statuses.iter().map(|s| s.as_str()).collect();
        let statuses = serde_json::to_string(&statuses).unwrap_or_default();
        let mut params: Vec<Sql> = vec![
            Sql::Text(namespace.to_owned()),
            Sql::Text(ts(request.finished_before)),
            Sql::Text(statuses),
            Sql::Integer(i64::from(request.batch_size)),
        ];
        let keyset = match after {
            Some((created, id)) => {
                params.push(Sql::Text(ts(*created)));
                params.push(Sql::Text(uid(*id)));
                " AND (created_at > ?5 OR (created_at = ?5 AND id > ?6))"
            }
            None => "",
        };
        let dry_run = request.dry_run;
        self.run("purge", || {
            let params = params.clone();
            self.write(move |b, c| {
                let sql = format!(
                    "SELECT id, created_at FROM {} WHERE namespace = ?1 AND created_at < ?2{keyset} \
                     AND status IN (SELECT value FROM json_each(?3)) AND finished_at < ?2 \
                     ORDER BY created_at, id LIMIT ?4",
                    b.t()
                );
                let picked: Vec<(Uuid, DateTime<Utc>)> = {
                    let mut st = c.prepare_cached(&sql)?;
                    let rows = st.query_map(rusqlite::params_from_iter(params), |r| {
                        Ok((uuid(r, 0, "id"), time(r, 1, "created_at")))
                    })?;
                    let mut out = Vec::new();
                    for r in rows {
                        let (id, created) = r?;
                        out.push((id?, created?));
                    }
                    out
                };
                let last = picked.last().map(|(id, created)| (*created, *id));
                let mut removed = PurgeReport::default();
                if picked.is_empty() {
                    return Ok((last, removed));
                }
                let ids = id_array(picked.iter().map(|(id, _)| *id));
                let among = "IN (SELECT value FROM json_each(?1))";
                let (a, d) = (b.a(), b.d());
                if dry_run {
                    removed.executions = picked.len() as u64;
                    let count = |table: &str| -> rusqlite::Result<i64> {
                        c.query_row(
                            &format!("SELECT count(*) FROM {table} WHERE execution_id {among}"),
                            params![ids],
                            |r| r.get(0),
                        )
                    };
                    removed.attempts = u64_of(count(a)?);
                    if let Some(d) = &d {
                        removed.diagnostics = u64_of(count(d)?);
                    }
                    if let Some(st) = b.steps_existing() {
                        removed.steps = u64_of(count(&st)?);
                    }
                    return Ok((last, removed));
                }
                let delete = |table: &str, col: &str| -> rusqlite::Result<usize> {
                    c.execute(
                        &format!("DELETE FROM {table} WHERE {col} {among}"),
                        params![ids],
                    )
                };
                if let Some(d) = &d {
                    removed.diagnostics = delete(d, "execution_id")? as u64;
                }
                if let Some(tr) = b.tr_existing() {
                    delete(&tr, "execution_id")?;
                }
                if let Some(st) = b.steps_existing() {
                    removed.steps = delete(&st, "execution_id")? as u64;
                }
                if let Some((cb, dl)) = b.callback_tables_existing() {
                    delete(&cb, "execution_id")?;
                    delete(&dl, "execution_id")?;
                }
                removed.attempts = delete(a, "execution_id")? as u64;
                removed.executions = delete(b.t(), "id")? as u64;
                Ok((last, removed))
            })
        })
        .await
    }
}
