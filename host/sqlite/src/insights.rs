//! The statements behind [`ExecutionInsights`](onestep_core::ports::ExecutionInsights)
//! (docs/ui.md#overview-queries): grouped counts over the `(namespace, task_name, status, …)`
//! index and the newest rows of the last hour over the list index ([`OverviewRows`]; core turns
//! the rows into counts).

use async_trait::async_trait;
use onestep_core::ExecutionError;
use onestep_core::rate::BucketRow;
use onestep_core::store::insights::{
    KeyRows, NamespaceRows, Newest, NewestRows, OverviewRows, TaskStatusRows,
};
use rusqlite::params;

use crate::backend::SqliteBackend;
use crate::rows::{parse_time, ts};

/// Microseconds between two stored instants (either may be NULL).
pub(crate) fn micros_between(from: Option<String>, to: Option<String>) -> Option<i64> {
    let from = parse_time(&from?, "from").ok()?;
    let to = parse_time(&to?, "to").ok()?;
    (to - from).num_microseconds()
}

#[async_trait]
impl OverviewRows for SqliteBackend {
    async fn task_status_rows(&self, namespace: &str) -> Result<TaskStatusRows, ExecutionError> {
        let ns = namespace.to_owned();
        self.run("stats", || {
            let ns = ns.clone();
            self.read(move |b, c| {
                let mut st = c.prepare_cached(&format!(
                    "SELECT task_name, status, COUNT(*) FROM {} WHERE namespace = ?1 \
                     GROUP BY task_name, status ORDER BY task_name, status",
                    b.t()
                ))?;
                let rows = st.query_map(params![ns], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))?;
                Ok(rows.collect::<Result<_, _>>()?)
            })
        })
        .await
    }

    async fn namespace_rows(&self, namespaces: &[String]) -> Result<NamespaceRows, ExecutionError> {
        let list = serde_json::to_string(namespaces).unwrap_or_default();
        self.run("stats", || {
            let list = list.clone();
            self.read(move |b, c| {
                let mut st = c.prepare_cached(&format!(
                    "SELECT namespace, task_name, status, COUNT(*) FROM {} \
                     WHERE namespace IN (SELECT value FROM json_each(?1)) \
                     GROUP BY namespace, task_name, status ORDER BY namespace, task_name, status",
                    b.t()
                ))?;
                let rows = st.query_map(params![list], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))
                })?;
                Ok(rows.collect::<Result<_, _>>()?)
            })
        })
        .await
    }

    async fn newest_rows(&self, newest: Newest<'_>) -> Result<NewestRows, ExecutionError> {
        let (ns, since) = (newest.namespace.to_owned(), ts(newest.since));
        let limit = i64::try_from(newest.limit).unwrap_or(i64::MAX);
        self.run("stats", || {
            let (ns, since) = (ns.clone(), since.clone());
            self.read(move |b, c| {
                let mut st = c.prepare_cached(&format!(
                    "SELECT status, available_at, started_at FROM {} \
                     WHERE namespace = ?1 AND created_at >= ?2 \
                     ORDER BY created_at DESC, id DESC LIMIT ?3",
                    b.t()
                ))?;
                let rows = st.query_map(params![ns, since, limit], |r| {
                    Ok((r.get::<_, String>(0)?, micros_between(r.get(1)?, r.get(2)?)))
                })?;
                Ok(rows.collect::<Result<_, _>>()?)
            })
        })
        .await
    }

    /// Reads the unfinished rows of the namespaces; a table without the `fairness_key` column
    /// has one key per namespace.
    async fn key_rows(&self, namespaces: &[String], limit: u64) -> Result<KeyRows, ExecutionError> {
        let list = serde_json::to_string(namespaces).unwrap_or_default();
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.run("stats", || {
            let list = list.clone();
            self.read(move |b, c| {
                let key = if b.schema_report().features.priority_columns {
                    "COALESCE(fairness_key, namespace)"
                } else {
                    "namespace"
                };
                let mut st = c.prepare_cached(&format!(
                    "SELECT namespace, task_name, {key} AS k, \
                     SUM(status IN ('queued', 'retrying')) AS w, \
                     SUM(status IN ('running', 'cancel_requested')) AS r \
                     FROM {} WHERE namespace IN (SELECT value FROM json_each(?1)) \
                     AND status IN ('queued', 'retrying', 'running', 'cancel_requested') \
                     GROUP BY namespace, task_name, k \
                     ORDER BY w DESC, r DESC, namespace, task_name, k LIMIT ?2",
                    b.t()
                ))?;
                let rows = st.query_map(params![list, limit], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
                })?;
                Ok(rows.collect::<Result<_, _>>()?)
            })
        })
        .await
    }

    /// The small buckets table, read whole up to `limit` (docs/ui.md#rate-limits).
    async fn bucket_rows(&self, limit: u64) -> Result<Option<Vec<BucketRow>>, ExecutionError> {
        if !self.schema_report().features.buckets_table {
            return Ok(None);
        }
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.run("stats", || {
            self.read(move |b, c| {
                let mut st = c.prepare_cached(&format!(
                    "SELECT bucket, tokens, refilled_at, paused_until FROM {} \
                     WHERE bucket LIKE 'task:%' OR bucket LIKE 'origin:%' \
                     ORDER BY paused_until DESC, tokens, bucket LIMIT ?1",
                    crate::schema::q(&crate::schema::buckets_table(b.tables()))
                ))?;
                let rows = st.query_map(params![limit], |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, f64>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, Option<String>>(3)?,
                    ))
                })?;
                let mut out = Vec::new();
                for row in rows {
                    let (bucket, tokens, refilled_at, paused_until) = row?;
                    let refilled_at = parse_time(&refilled_at, "refilled_at")
                        .map_err(|e| crate::errors::OpError::Domain(e.into()))?;
                    let paused_until = match paused_until {
                        Some(p) => Some(
                            parse_time(&p, "paused_until")
                                .map_err(|e| crate::errors::OpError::Domain(e.into()))?,
                        ),
                        None => None,
                    };
                    out.push((bucket, tokens, refilled_at, paused_until));
                }
                Ok(Some(out))
            })
        })
        .await
    }
}
