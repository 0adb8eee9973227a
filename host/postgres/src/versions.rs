//! The versions of executions named by id, for callers waiting on them
//! (docs/http-api.md#waiting): one primary-key read per call.

use uuid::Uuid;

use crate::backend::PgBackend;
use crate::errors::OpResult;

impl PgBackend {
    /// `(id, version)` of each of `ids` that exists.
    pub(crate) async fn versions_once(&self, ids: &[Uuid]) -> OpResult<Vec<(Uuid, i64)>> {
        let conn = self.conn().await?;
        // Prepared once per pooled connection: the poller runs it ten times a second.
        let st = conn
            .prepare_cached(&format!(
                "SELECT id, version::bigint FROM {} WHERE id = ANY($1)",
                self.sql().t
            ))
            .await?;
        let rows = conn.query(&st, &[&ids]).await?;
        let mut out = Vec::with_capacity(rows.len());
        for row in &rows {
            out.push((row.try_get::<_, Uuid>(0)?, row.try_get::<_, i64>(1)?));
        }
        Ok(out)
    }
}
