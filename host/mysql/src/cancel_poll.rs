//! The cancel poll (docs/semantics.md#cancel-poll): one read of the cancel flags of a worker's
//! in-flight leases, `SELECT id, lease_token … WHERE id IN (…) AND status = 'cancel_requested'
//! AND lease_expires_at > now` on the primary key. It takes no locks and writes nothing; a row
//! counts only when its current token is the lease's token (checked on the rows returned, so
//! a row re-claimed by another worker never answers for an old lease).

use std::collections::HashMap;

use mysql_async::prelude::Queryable;
use mysql_async::{Params, Value as DbValue};
use onestep_core::{ExecutionError, LeaseRef};
use uuid::Uuid;

use crate::backend::MySqlBackend;
use crate::errors::{OpError, OpResult};
use crate::rows::{bind_time, bind_uuid, parse_uuid, placeholders};

/// Most ids bound in one statement; a worker with more leases in flight on one source issues
/// one statement per this many.
const MAX_IDS_PER_STATEMENT: usize = 1000;

impl MySqlBackend {
    pub(crate) async fn cancel_requested_once(&self, leases: &[LeaseRef]) -> OpResult<Vec<Uuid>> {
        let now = self.now();
        let tokens: HashMap<Uuid, Uuid> = leases
            .iter()
            .map(|l| (l.execution_id, l.lease_token))
            .collect();
        let ids: Vec<Uuid> = tokens.keys().copied().collect();
        let mut conn = self.conn().await?;
        let mut out = Vec::new();
        for chunk in ids.chunks(MAX_IDS_PER_STATEMENT) {
            let sql = format!(
                "SELECT id, lease_token FROM `{}` WHERE id IN ({}) \
                 AND status = 'cancel_requested' AND lease_expires_at > ?",
                self.t(),
                placeholders(chunk.len())
            );
            let mut values: Vec<DbValue> = chunk.iter().map(|id| bind_uuid(*id)).collect();
            values.push(bind_time(now));
            let rows: Vec<(DbValue, DbValue)> = conn.exec(sql, Params::Positional(values)).await?;
            for (id, token) in rows {
                let decode = |v: &DbValue, col: &str| {
                    parse_uuid(v).map_err(|e| {
                        OpError::Domain(ExecutionError::Undecodable(format!(
                            "cannot decode execution {col}: {e}"
                        )))
                    })
                };
                let id = decode(&id, "id")?;
                if matches!(token, DbValue::NULL) {
                    continue;
                }
                let token = decode(&token, "lease_token")?;
                if tokens.get(&id) == Some(&token) {
                    out.push(id);
                }
            }
        }
        Ok(out)
    }
}
