//! The versions of executions named by id, for callers waiting on them
//! (docs/http-api.md#waiting): one primary-key read per batch of ids.

use mysql_async::prelude::Queryable;
use mysql_async::{Params, Row, Value as DbValue};
use uuid::Uuid;

use crate::backend::MySqlBackend;
use crate::errors::{OpError, OpResult};
use crate::rows::{bind_uuid, parse_uuid, placeholders};

/// Ids per statement.
const IDS_PER_READ: usize = 1_000;

impl MySqlBackend {
    /// `(id, version)` of each of `ids` that exists.
    pub(crate) async fn versions_once(&self, ids: &[Uuid]) -> OpResult<Vec<(Uuid, i64)>> {
        let mut conn = self.conn().await?;
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(IDS_PER_READ) {
            let rows: Vec<Row> = conn
                .exec(
                    format!(
                        "SELECT id, version FROM `{}` WHERE id IN ({})",
                        self.t(),
                        placeholders(chunk.len())
                    ),
                    Params::Positional(chunk.iter().map(|id| bind_uuid(*id)).collect()),
                )
                .await?;
            for row in rows {
                let mut values = row.unwrap_raw().into_iter();
                let id = values.next().flatten().unwrap_or(DbValue::NULL);
                let version = values.next().flatten().unwrap_or(DbValue::NULL);
                let id = parse_uuid(&id).map_err(|e| undecodable("id", &e.0))?;
                let version = mysql_async::from_value_opt::<i64>(version)
                    .map_err(|e| undecodable("version", &e.to_string()))?;
                out.push((id, version));
            }
        }
        Ok(out)
    }
}

fn undecodable(column: &str, reason: &str) -> OpError {
    OpError::Domain(onestep_core::ExecutionError::Undecodable(format!(
        "versions: cannot decode {column}: {reason}"
    )))
}
