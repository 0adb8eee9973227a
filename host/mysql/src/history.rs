//! Seeding finished history for benchmarks (docs/benchmarks.md#history): N `succeeded`
//! executions with one `succeeded` attempt each, written server-side by `INSERT … SELECT` over a
//! generated sequence (a cross join of a ten-row digits table), [`HISTORY_CHUNK`] rows per
//! statement, so seeding costs `2 × ⌈N / HISTORY_CHUNK⌉` statements, not N round trips.
//!
//! The rows look like what the worker leaves behind: `attempts = 1`, `version = 2`, lease
//! cleared, `result = {"i": n}`, `claimable` NULL (generated). Row `n` (0-based) was created
//! `count - n` milliseconds before `before` and finished one millisecond later; ids are UUIDv7
//! carrying that millisecond or random UUIDv4, as [`HistoryIds`] asks, computed from SHA-256 of a
//! per-seed salt so execution and attempt statements agree on them.

use mysql_async::prelude::Queryable;
use onestep_core::ExecutionError;
use onestep_core::store::history::history_span;

pub use onestep_core::history::{HistoryIds, HistorySeed, MAX_HISTORY_ROWS};

use crate::backend::MySqlBackend;
use crate::errors::OpError;

/// Rows written per `INSERT … SELECT` statement (10^5: five digits tables cross-joined).
pub const HISTORY_CHUNK: u64 = 100_000;
const CHUNK_DIGITS: u32 = 5;

/// 32 hex digits of a UUID of version `ids` from the SHA-256 hex `h` (MySQL 9 has no `MD5()`) and, for v7, the Unix
/// millisecond expression `ms`.
fn uuid_expr(ids: HistoryIds, h: &str, ms: &str) -> String {
    match ids {
        HistoryIds::V7 => format!(
            "CONCAT(LPAD(LOWER(HEX({ms})), 12, '0'), '7', SUBSTR({h}, 1, 3), '8', SUBSTR({h}, 4, 15))"
        ),
        HistoryIds::V4 => {
            format!("CONCAT(SUBSTR({h}, 1, 12), '4', SUBSTR({h}, 13, 3), '8', SUBSTR({h}, 16, 15))")
        }
    }
}

/// `SELECT n FROM …`: the sequence `offset .. offset + HISTORY_CHUNK` below `count`, as the
/// derived table `s(n)`; both servers accept it (no recursive CTE depth limit involved). The
/// cross join's order is the server's choice (MariaDB's nested loops give 0, 1, 2, …; MySQL 9's
/// hash join gives 7101, 7102, …, 7109, 7290, …), so the inserts say `ORDER BY s.n`: rows go in
/// in creation order, as a worker writes them, and the indexes come out as dense as a real
/// history's (in hash-join order MySQL 9 left its pages part empty: 4.6 GB for 1M executions
/// with their attempts, where MariaDB's seeded tables took 0.7 GB).
fn sequence_sql() -> String {
    let digits = "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 \
                  UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 \
                  UNION ALL SELECT 8 UNION ALL SELECT 9)";
    let from: Vec<String> = (0..CHUNK_DIGITS)
        .map(|i| format!("{digits} AS d{i}"))
        .collect();
    let sum: Vec<String> = (0..CHUNK_DIGITS)
        .map(|i| format!("d{i}.d * {}", 10u64.pow(i)))
        .collect();
    format!(
        "(SELECT n FROM (SELECT ? + {} AS n FROM {}) AS g WHERE n < ?) AS s",
        sum.join(" + "),
        from.join(" CROSS JOIN ")
    )
}

onestep_core::impl_history_seed!(MySqlBackend);

impl MySqlBackend {
    /// The statements of `seed_history`.
    async fn write_history(&self, seed: &HistorySeed) -> Result<u64, ExecutionError> {
        let (count, first) = history_span(seed)?;
        // Literals we made ourselves (hex digits, an integer, a formatted instant): inlined, so
        // each expression can repeat them; the caller's names stay bound parameters.
        let first_ms = first.timestamp_millis();
        let salt = uuid::Uuid::new_v4().simple().to_string();
        let t0 = first
            .naive_utc()
            .format("%Y-%m-%d %H:%M:%S%.6f")
            .to_string();
        let ms = format!("({first_ms} + s.n)");
        let exec_id = uuid_expr(seed.ids, &format!("SHA2(CONCAT('{salt}e', s.n), 256)"), &ms);
        let attempt_id = uuid_expr(seed.ids, &format!("SHA2(CONCAT('{salt}a', s.n), 256)"), &ms);
        let token = uuid_expr(
            HistoryIds::V4,
            &format!("SHA2(CONCAT('{salt}t', s.n), 256)"),
            &ms,
        );
        let created = format!("TIMESTAMPADD(MICROSECOND, s.n * 1000, '{t0}')");
        let finished = format!("TIMESTAMPADD(MICROSECOND, s.n * 1000 + 1000, '{t0}')");
        let seq = sequence_sql();
        let (key, digest) = if seed.idempotency_keys {
            (
                format!("SUBSTR(SHA2(CONCAT('{salt}k', s.n), 256), 1, 32)"),
                format!("SHA2(CONCAT('{salt}d', s.n), 256)"),
            )
        } else {
            ("NULL".to_owned(), "NULL".to_owned())
        };
        let exec_sql = format!(
            "INSERT INTO `{t}` (id, namespace, task_name, status, payload, metadata, result, \
             attempts, available_at, created_at, updated_at, started_at, finished_at, version, \
             idempotency_key, submission_digest) \
             SELECT {exec_id}, ?, ?, 'succeeded', JSON_OBJECT('i', s.n), JSON_OBJECT(), \
             JSON_OBJECT('i', s.n), 1, {created}, {created}, {finished}, {created}, {finished}, 2, \
             {key}, {digest} FROM {seq} ORDER BY s.n",
            t = self.t()
        );
        let attempt_sql = format!(
            "INSERT INTO `{a}` (id, execution_id, attempt_no, lease_token, worker_id, status, \
             started_at, heartbeat_at, finished_at) \
             SELECT {attempt_id}, {exec_id}, 1, {token}, 'onestep-bench-history', 'succeeded', \
             {created}, {created}, {finished} FROM {seq} ORDER BY s.n",
            a = self.a()
        );
        let mut written = 0u64;
        let mut conn = self.conn().await.map_err(|e| self.error(e, "seed"))?;
        let mut offset = 0i64;
        while offset < count {
            let names = (
                seed.namespace.as_str(),
                seed.task_name.as_str(),
                offset,
                count,
            );
            let step = async {
                conn.exec_drop(exec_sql.as_str(), names).await?;
                let rows = conn.affected_rows();
                conn.exec_drop(attempt_sql.as_str(), (offset, count))
                    .await?;
                Ok::<_, OpError>(rows)
            };
            written += step.await.map_err(|e| self.error(e, "seed"))?;
            offset = offset.saturating_add(HISTORY_CHUNK as i64);
        }
        // Fresh optimizer statistics, as a long-lived table has them.
        for table in [self.t(), self.a()] {
            let r: Result<Vec<mysql_async::Row>, _> =
                conn.query(format!("ANALYZE TABLE `{table}`")).await;
            r.map_err(|e| self.error(e.into(), "seed"))?;
        }
        Ok(written)
    }
}
