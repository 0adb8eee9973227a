//! Seeding finished history for benchmarks (docs/benchmarks.md#history), the PostgreSQL twin of
//! `onestep_mysql::history`: N `succeeded` executions with one `succeeded` attempt each, written
//! server-side by one statement per [`HISTORY_CHUNK`] rows — a writable CTE that inserts the
//! executions `SELECT … FROM generate_series(…)` and, from their `RETURNING`, their attempts —
//! so seeding costs `⌈N / HISTORY_CHUNK⌉` statements, not N round trips; then `VACUUM (ANALYZE)`.
//!
//! The rows look like what the worker leaves behind and like the MySQL seed's: `attempts = 1`,
//! `version = 2`, lease cleared, `payload = result = {"i": n}`. Row `n` (0-based) was created
//! `count - n` milliseconds before `before` and finished one millisecond later. Ids are UUIDv4
//! from `gen_random_uuid()`, or UUIDv7 built in SQL from the row's Unix millisecond (48 bits, hex)
//! and the random bits of a `gen_random_uuid()` with the version nibble `7` and variant `8`.

use onestep_core::ExecutionError;
pub use onestep_core::history::{HistoryIds, HistorySeed, MAX_HISTORY_ROWS};
use onestep_core::store::history::history_span;

use crate::backend::PgBackend;
use crate::errors::OpError;
use crate::schema::q;

/// Rows written per statement.
pub const HISTORY_CHUNK: u64 = 100_000;

/// The id expression of one row: `r` is the 32 hex digits of a random UUID, `ms` the row's
/// Unix millisecond.
fn uuid_expr(ids: HistoryIds, r: &str, ms: &str) -> String {
    match ids {
        HistoryIds::V7 => format!(
            "(lpad(to_hex({ms}), 12, '0') || '7' || substr({r}, 14, 3) || '8' \
             || substr({r}, 18, 15))::uuid"
        ),
        HistoryIds::V4 => "gen_random_uuid()".to_owned(),
    }
}

onestep_core::impl_history_seed!(PgBackend);

impl PgBackend {
    /// The statements of `seed_history`.
    async fn write_history(&self, seed: &HistorySeed) -> Result<u64, ExecutionError> {
        let (count, first) = history_span(seed)?;
        let first_ms = first.timestamp_millis();
        let exec_id = uuid_expr(seed.ids, "s.r", &format!("({first_ms} + s.n)"));
        let t = q(&self.tables().executions);
        let a = q(&self.tables().attempts);
        // $1 namespace, $2 task name, $3 first instant, $4 first n, $5 last n (inclusive).
        let sql = format!(
            "WITH s AS (\
               SELECT n, replace(gen_random_uuid()::text, '-', '') AS r, \
                      $3::timestamptz + n * interval '1 millisecond' AS created \
               FROM generate_series($4::bigint, $5::bigint) AS n), \
             e AS (\
               INSERT INTO {t} (id, namespace, task_name, status, payload, metadata, result, \
                 attempts, available_at, created_at, updated_at, started_at, finished_at, version, \
                 idempotency_key, submission_digest) \
               SELECT {exec_id}, $1, $2, 'succeeded', jsonb_build_object('i', s.n), '{{}}'::jsonb, \
                 jsonb_build_object('i', s.n), 1, s.created, s.created, \
                 s.created + interval '1 millisecond', s.created, \
                 s.created + interval '1 millisecond', 2, {key}, {digest} \
               FROM s ORDER BY s.n \
               RETURNING id, created_at, finished_at) \
             INSERT INTO {a} (id, execution_id, attempt_no, lease_token, worker_id, status, \
               started_at, heartbeat_at, finished_at) \
             SELECT {attempt_id}, e.id, 1, gen_random_uuid(), 'onestep-bench-history', \
               'succeeded', e.created_at, e.created_at, e.finished_at FROM e",
            key = if seed.idempotency_keys {
                "md5(s.r || 'k')"
            } else {
                "NULL"
            },
            digest = if seed.idempotency_keys {
                "encode(sha256(convert_to(s.r || 'd', 'UTF8')), 'hex')"
            } else {
                "NULL"
            },
            attempt_id = match seed.ids {
                HistoryIds::V7 => uuid_expr(
                    HistoryIds::V7,
                    "replace(gen_random_uuid()::text, '-', '')",
                    "(extract(epoch FROM e.created_at) * 1000)::bigint",
                ),
                HistoryIds::V4 => uuid_expr(HistoryIds::V4, "", ""),
            },
        );
        let step = async {
            let conn = self.conn().await?;
            let st = conn.prepare(&sql).await?;
            let mut written = 0u64;
            let mut offset = 0i64;
            while offset < count {
                let last = offset
                    .saturating_add(HISTORY_CHUNK as i64)
                    .min(count)
                    .saturating_sub(1);
                written += conn
                    .execute(
                        &st,
                        &[&seed.namespace, &seed.task_name, &first, &offset, &last],
                    )
                    .await?;
                offset = last.saturating_add(1);
            }
            // Vacuumed and analysed, as a long-lived table is: without the VACUUM, autovacuum
            // scans the just-written history during the measured run (docs/benchmarks.md#history).
            // One statement per call: VACUUM cannot run in the implicit transaction of a
            // multi-statement query.
            for table in [t, a] {
                conn.batch_execute(&format!("VACUUM (ANALYZE) {table}"))
                    .await?;
            }
            // This session's I/O counters reach `pg_stat_database` only when it next reports
            // (about a second later): publish them now, so that the seed's reads are not
            // counted in the benchmark's first measured phase (PostgreSQL 15+; older servers
            // skip it).
            conn.batch_execute(
                "DO $$ BEGIN IF current_setting('server_version_num')::int >= 150000 THEN \
                 PERFORM pg_stat_force_next_flush(); END IF; END $$",
            )
            .await?;
            Ok::<_, OpError>(written)
        };
        step.await.map_err(|e| self.error(e, "seed"))
    }
}
