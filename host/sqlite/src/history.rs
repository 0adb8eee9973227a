//! History seeding for `onestep bench --history N` (docs/benchmarks.md#history): finished
//! executions, one attempt each, written in chunks of one transaction each.

use chrono::Duration;
use onestep_core::ExecutionError;
pub use onestep_core::history::{HistoryIds, HistorySeed, MAX_HISTORY_ROWS};
use onestep_core::store::history::history_span;
use rusqlite::params;
use uuid::Uuid;

use crate::backend::SqliteBackend;
use crate::rows::{ts, uid};

/// Rows per transaction.
pub const HISTORY_CHUNK: i64 = 10_000;

onestep_core::impl_history_seed!(SqliteBackend);

fn id_at(ids: HistoryIds, at: chrono::DateTime<chrono::Utc>) -> Uuid {
    match ids {
        HistoryIds::V7 => {
            let secs = u64::try_from(at.timestamp()).unwrap_or(0);
            Uuid::new_v7(uuid::Timestamp::from_unix(
                uuid::NoContext,
                secs,
                at.timestamp_subsec_nanos(),
            ))
        }
        HistoryIds::V4 => Uuid::new_v4(),
    }
}

impl SqliteBackend {
    async fn write_history(&self, seed: &HistorySeed) -> Result<u64, ExecutionError> {
        let (count, first) = history_span(seed)?;
        let mut written = 0u64;
        let mut offset = 0i64;
        while offset < count {
            let end = (offset + HISTORY_CHUNK).min(count);
            let seed = seed.clone();
            written += self
                .write(move |b, c| {
                    let mut ins_e = c.prepare_cached(&format!(
                        "INSERT INTO {} (id, namespace, task_name, status, payload, metadata, \
                         result, attempts, available_at, created_at, updated_at, started_at, \
                         finished_at, version, idempotency_key, submission_digest) VALUES \
                         (?1, ?2, ?3, 'succeeded', ?4, '{{}}', ?4, 1, ?5, ?5, ?6, ?5, ?6, 2, ?7, ?8)",
                        b.t()
                    ))?;
                    let mut ins_a = c.prepare_cached(&format!(
                        "INSERT INTO {} (id, execution_id, attempt_no, lease_token, worker_id, \
                         status, started_at, heartbeat_at, finished_at) VALUES \
                         (?1, ?2, 1, ?3, 'onestep-bench-history', 'succeeded', ?4, ?4, ?5)",
                        b.a()
                    ))?;
                    let mut n = 0u64;
                    for i in offset..end {
                        let created = first + Duration::milliseconds(i);
                        let finished = created + Duration::milliseconds(1);
                        let id = id_at(seed.ids, created);
                        let (key, digest) = if seed.idempotency_keys {
                            (
                                Some(Uuid::new_v4().simple().to_string()),
                                Some(format!("{}{}", Uuid::new_v4().simple(), Uuid::new_v4().simple())),
                            )
                        } else {
                            (None, None)
                        };
                        ins_e.execute(params![
                            uid(id),
                            seed.namespace,
                            seed.task_name,
                            format!("{{\"i\":{i}}}"),
                            ts(created),
                            ts(finished),
                            key,
                            digest
                        ])?;
                        ins_a.execute(params![
                            uid(id_at(seed.ids, created)),
                            uid(id),
                            uid(Uuid::new_v4()),
                            ts(created),
                            ts(finished)
                        ])?;
                        n += 1;
                    }
                    Ok(n)
                })
                .await
                .map_err(|e| self.error(e, "seed"))?;
            offset = end;
        }
        self.write(|_, c| Ok(c.execute_batch("ANALYZE")?))
            .await
            .map_err(|e| self.error(e, "seed"))?;
        Ok(written)
    }
}
