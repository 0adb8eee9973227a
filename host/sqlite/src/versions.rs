//! The versions of executions named by id, for callers waiting on them
//! (docs/http-api.md#waiting): one primary-key read per call, on a reader connection.

use rusqlite::params;
use uuid::Uuid;

use crate::backend::SqliteBackend;
use crate::client_ops::id_array;
use crate::errors::{OpError, OpResult};
use crate::rows::{int, uuid};

impl SqliteBackend {
    /// `(id, version)` of each of `ids` that exists.
    pub(crate) async fn versions_once(&self, ids: &[Uuid]) -> OpResult<Vec<(Uuid, i64)>> {
        let ids = id_array(ids.iter().copied());
        self.read(move |b, c| {
            let mut st = c.prepare_cached(&format!(
                "SELECT id, version FROM {} WHERE id IN (SELECT value FROM json_each(?1))",
                b.t()
            ))?;
            let mut rows = st.query(params![ids])?;
            let mut out = Vec::new();
            while let Some(row) = rows.next()? {
                let id = uuid(row, 0, "id").map_err(OpError::from)?;
                let version = int(row, 1, "version").map_err(OpError::from)?;
                out.push((id, version));
            }
            Ok(out)
        })
        .await
    }
}
