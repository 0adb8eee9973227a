//! Every SQL statement of the backend, built once per table pair at open
//! (docs/postgres.md#statements). Set-based statements bind arrays (`unnest($n::uuid[], …)`,
//! `= ANY($n)`), so each statement's text is fixed and the driver's per-connection prepared
//! statement cache serves it.

use onestep_core::names::TableNames;

use crate::schema::q;

/// The statements of one table pair.
#[derive(Debug, Clone)]
pub(crate) struct Statements {
    pub(crate) t: String,
    pub(crate) insert_one: String,
    pub(crate) insert_many: String,
    pub(crate) by_id: String,
    pub(crate) by_id_ns: String,
    /// The stored cancel reason of one execution of a namespace.
    pub(crate) cancel_reason: String,
    pub(crate) by_id_lock: String,
    pub(crate) by_id_ns_lock: String,
    pub(crate) by_ids: String,
    pub(crate) by_key: String,
    pub(crate) cancel_queued: String,
    pub(crate) cancel_running: String,
    pub(crate) maintain: String,
    pub(crate) claim_select: String,
    /// [`Self::claim_select`] for one task name (`e.task_name = $2`): an equality the planner
    /// folds into the claim index's range, so the read is in index order and stops at the
    /// limit (with `= ANY($2)` PostgreSQL sorts every due live row of the namespace;
    /// docs/postgres.md#claim-order-with-priority).
    pub(crate) claim_select_one: String,
    pub(crate) claim_write: String,
    pub(crate) heartbeat_many: String,
    pub(crate) cancel_poll: String,
    pub(crate) complete_one: String,
    /// The read of `complete_many`'s set-based path: no row lock (docs/postgres.md#completion-without-a-locking-read).
    pub(crate) lock_many: String,
    pub(crate) complete_set: String,
    pub(crate) release: String,
    /// T15 (docs/steps.md#sleep): the execution back to `queued` until `$5`, its attempt
    /// `parked`, in one statement.
    pub(crate) park: String,
    /// The attempts of one execution that ended `parked`.
    pub(crate) parked_count: String,
    /// The tables have `priority` and `fairness_key` (docs/semantics.md#priority-and-fairness-key):
    /// the inserts bind them (`$11`, `$12`) and the claim orders by priority first.
    pub(crate) priority_columns: bool,
}

/// Columns written by a submission (T1).
const INSERT_COLUMNS: &str = "id, namespace, task_name, status, payload, metadata, \
    idempotency_key, submission_digest, attempts, available_at, created_at, updated_at, \
    expires_at, version";

impl Statements {
    pub(crate) fn new(names: &TableNames, batch: u32, priority_columns: bool) -> Self {
        let t = q(&names.executions);
        // Tables without the priority columns read their defaults.
        let (cols, cols_e) = crate::rows::columns(priority_columns);
        let (insert_extra, insert_values, many_select, many_types, many_names) = if priority_columns
        {
            (
                ", priority, fairness_key",
                ", $11, $12",
                ", u.priority, u.fairness_key",
                ", $11::int2[], $12::text[]",
                ", priority, fairness_key",
            )
        } else {
            ("", "", "", "", "")
        };
        let claim_order = if priority_columns {
            "e.priority, e.available_at, e.created_at, e.id"
        } else {
            "e.available_at, e.created_at, e.id"
        };
        let a = q(&names.attempts);
        // docs/semantics.md#lease-lost-retry, for alias `alias`. `OFFSET 0` keeps the EXISTS a
        // per-row probe of the attempts' (execution_id, attempt_no) index: without it the planner
        // may hash it, i.e. read every attempt row of the table once per statement that reaches
        // it (docs/postgres.md#claim-cost-at-scale).
        // A parked execution (`queued`, latest attempt `parked`, docs/steps.md#sleep) is
        // exempt from expiry the same way.
        let lost = |alias: &str| {
            format!(
                "(({alias}.status = 'retrying' AND EXISTS (SELECT 1 FROM {a} la \
                 WHERE la.execution_id = {alias}.id AND la.attempt_no = {alias}.attempts \
                 AND la.status = 'lease_lost' OFFSET 0)) \
                 OR ({alias}.status = 'queued' AND {alias}.attempts > 0 \
                 AND EXISTS (SELECT 1 FROM {a} lp \
                 WHERE lp.execution_id = {alias}.id AND lp.attempt_no = {alias}.attempts \
                 AND lp.status = 'parked' OFFSET 0)))"
            )
        };
        // T5's candidates: on our tables the partial expiry index serves this range; on the
        // reference's tables the partial claim index holds the same live rows.
        let expiry_guard = "c.status IN ('queued', 'retrying') AND c.expires_at IS NOT NULL";
        let maintain = format!(
            "WITH expired AS ( \
               UPDATE {t} e SET status = 'expired', finished_at = $1, updated_at = $1, \
                 version = e.version + 1 \
               WHERE e.id IN (SELECT c.id FROM {t} c WHERE {expiry_guard} \
                 AND c.expires_at <= $1 AND NOT {lost_c} \
                 ORDER BY c.expires_at, c.id LIMIT {batch} FOR UPDATE OF c SKIP LOCKED) \
               RETURNING e.id), \
             dead AS ( \
               SELECT id, lease_token FROM {t} WHERE status = 'cancel_requested' \
                 AND lease_expires_at IS NOT NULL AND lease_expires_at <= $1 \
                 ORDER BY lease_expires_at, id LIMIT {batch} FOR UPDATE SKIP LOCKED), \
             dead_u AS ( \
               UPDATE {t} e SET status = 'cancelled', finished_at = $1, updated_at = $1, \
                 lease_token = NULL, lease_expires_at = NULL, worker_id = NULL, \
                 version = e.version + 1 \
               FROM dead WHERE e.id = dead.id RETURNING e.id, dead.lease_token), \
             gone AS ( \
               SELECT id, lease_token FROM {t} WHERE status = 'running' \
                 AND lease_expires_at IS NOT NULL AND lease_expires_at <= $1 \
                 ORDER BY lease_expires_at, id LIMIT {batch} FOR UPDATE SKIP LOCKED), \
             gone_u AS ( \
               UPDATE {t} e SET status = 'retrying', available_at = $1, updated_at = $1, \
                 lease_token = NULL, lease_expires_at = NULL, worker_id = NULL, \
                 version = e.version + 1 \
               FROM gone WHERE e.id = gone.id RETURNING e.id, gone.lease_token), \
             dead_a AS ( \
               UPDATE {a} x SET status = 'cancelled', finished_at = $1 FROM dead_u \
               WHERE x.execution_id = dead_u.id AND x.lease_token = dead_u.lease_token \
                 AND x.status = 'running' RETURNING x.id), \
             gone_a AS ( \
               UPDATE {a} x SET status = 'lease_lost', finished_at = $1 FROM gone_u \
               WHERE x.execution_id = gone_u.id AND x.lease_token = gone_u.lease_token \
                 AND x.status = 'running' RETURNING x.id) \
             SELECT (SELECT count(*) FROM expired), (SELECT count(*) FROM dead_u), \
               (SELECT count(*) FROM gone_u), (SELECT count(*) FROM dead_a), \
               (SELECT count(*) FROM gone_a)",
            lost_c = lost("c"),
        );
        let claim_select = format!(
            "SELECT {cols_e} FROM {t} e \
             WHERE e.namespace = $1 AND e.task_name = ANY($2::text[]) \
             AND e.status IN ('queued', 'retrying') AND e.available_at <= $3 \
             AND (e.expires_at IS NULL OR e.expires_at > $3 OR {lost_e}) \
             ORDER BY {claim_order} LIMIT $4 \
             FOR UPDATE OF e SKIP LOCKED",
            lost_e = lost("e"),
        );
        let claim_select_one = format!(
            "SELECT {cols_e} FROM {t} e \
             WHERE e.namespace = $1 AND e.task_name = $2 \
             AND e.status IN ('queued', 'retrying') AND e.available_at <= $3 \
             AND (e.expires_at IS NULL OR e.expires_at > $3 OR {lost_e}) \
             ORDER BY {claim_order} LIMIT $4 \
             FOR UPDATE OF e SKIP LOCKED",
            lost_e = lost("e"),
        );
        let claim_write = format!(
            "WITH v AS (SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::uuid[], $4::int4[]) \
               AS v(id, token, aid, no)), \
             u AS ( \
               UPDATE {t} e SET status = 'running', attempts = e.attempts + 1, \
                 lease_token = v.token, lease_expires_at = $5, worker_id = $6, \
                 started_at = COALESCE(e.started_at, $7), updated_at = $7, \
                 version = e.version + 1 \
               FROM v WHERE e.id = v.id RETURNING e.id) \
             INSERT INTO {a} (id, execution_id, attempt_no, lease_token, worker_id, status, \
               started_at, heartbeat_at) \
             SELECT v.aid, v.id, v.no, v.token, $6, 'running', $7, $7 FROM v JOIN u ON u.id = v.id"
        );
        let heartbeat_many = format!(
            "WITH v AS (SELECT DISTINCT * FROM unnest($1::uuid[], $2::uuid[], $3::uuid[]) \
               AS v(id, token, aid)), \
             ok AS ( \
               SELECT e.id, v.token, x.id AS aid, e.status FROM v \
               JOIN {t} e ON e.id = v.id AND e.lease_token = v.token \
               JOIN {a} x ON x.id = v.aid AND x.execution_id = e.id \
                 AND x.lease_token = v.token AND x.status = 'running' \
               WHERE e.status IN ('running', 'cancel_requested') \
                 AND e.lease_expires_at IS NOT NULL AND e.lease_expires_at > $4 \
               ORDER BY e.id FOR UPDATE OF e, x), \
             ue AS (UPDATE {t} e SET lease_expires_at = $5, updated_at = $4 FROM ok \
               WHERE e.id = ok.id RETURNING e.id), \
             ua AS (UPDATE {a} x SET heartbeat_at = $4 FROM ok \
               WHERE x.id = ok.aid RETURNING x.id) \
             SELECT ok.id, ok.token, ok.aid, ok.status, (SELECT count(*) FROM ue), \
               (SELECT count(*) FROM ua) FROM ok"
        );
        let cancel_poll = format!(
            "SELECT e.id FROM {t} e \
             JOIN unnest($1::uuid[], $2::uuid[]) AS v(id, token) \
               ON e.id = v.id AND e.lease_token = v.token \
             WHERE e.status = 'cancel_requested' AND e.lease_expires_at > $3"
        );
        let complete_one = format!(
            "WITH u AS ( \
               UPDATE {t} SET status = $1, updated_at = $2, version = version + 1, \
                 lease_token = NULL, lease_expires_at = NULL, worker_id = NULL, \
                 result = $3::text::jsonb, error = $4::text::jsonb, available_at = $5, \
                 finished_at = $6 \
               WHERE id = $7 AND lease_token = $8 AND status = ANY($9::text[]) \
                 AND lease_expires_at IS NOT NULL AND lease_expires_at > $2 \
               RETURNING {cols}), \
             x AS ( \
               UPDATE {a} SET status = $10, error = $4::text::jsonb, finished_at = $2 \
               WHERE id = $11 AND execution_id = $7 AND lease_token = $8 \
                 AND status = 'running' AND EXISTS (SELECT 1 FROM u) RETURNING id) \
             SELECT {cols}, (SELECT count(*) FROM x) FROM u"
        );
        let complete_set = format!(
            "WITH v AS (SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::text[], \
               $5::text[], $6::text[], $7::timestamptz[], $8::timestamptz[], $9::uuid[], \
               $10::text[]) AS v(id, token, cur, st, res, err, avail, fin, aid, ast)), \
             u AS ( \
               UPDATE {t} e SET status = v.st, updated_at = $11, version = e.version + 1, \
                 lease_token = NULL, lease_expires_at = NULL, worker_id = NULL, \
                 result = v.res::jsonb, error = v.err::jsonb, available_at = v.avail, \
                 finished_at = v.fin \
               FROM v WHERE e.id = v.id AND e.lease_token = v.token AND e.status = v.cur \
                 AND e.lease_expires_at IS NOT NULL AND e.lease_expires_at > $11 \
               RETURNING {cols_e}), \
             x AS ( \
               UPDATE {a} x SET status = v.ast, error = v.err::jsonb, finished_at = $11 \
               FROM v JOIN u ON u.id = v.id \
               WHERE x.id = v.aid AND x.execution_id = v.id AND x.lease_token = v.token \
                 AND x.status = 'running' RETURNING x.id) \
             SELECT {cols}, (SELECT count(*) FROM x) FROM u"
        );
        let release = format!(
            "WITH u AS ( \
               UPDATE {t} SET status = 'queued', available_at = $1, updated_at = $1, \
                 lease_token = NULL, lease_expires_at = NULL, worker_id = NULL, \
                 version = version + 1 \
               WHERE id = $2 AND lease_token = $3 AND status = 'running' \
                 AND lease_expires_at IS NOT NULL AND lease_expires_at > $1 \
               RETURNING {cols}), \
             x AS ( \
               UPDATE {a} SET status = 'lease_lost', finished_at = $1 \
               WHERE id = $4 AND execution_id = $2 AND lease_token = $3 \
                 AND status = 'running' AND EXISTS (SELECT 1 FROM u) RETURNING id) \
             SELECT {cols}, (SELECT count(*) FROM x) FROM u"
        );
        let park = format!(
            "WITH u AS ( \
               UPDATE {t} SET status = 'queued', available_at = $5, updated_at = $1, \
                 lease_token = NULL, lease_expires_at = NULL, worker_id = NULL, \
                 version = version + 1 \
               WHERE id = $2 AND lease_token = $3 AND status = 'running' \
                 AND lease_expires_at IS NOT NULL AND lease_expires_at > $1 \
               RETURNING {cols}), \
             x AS ( \
               UPDATE {a} SET status = 'parked', finished_at = $1 \
               WHERE id = $4 AND execution_id = $2 AND lease_token = $3 \
                 AND status = 'running' AND EXISTS (SELECT 1 FROM u) RETURNING id) \
             SELECT {cols}, (SELECT count(*) FROM x) FROM u"
        );
        let parked_count =
            format!("SELECT count(*) FROM {a} WHERE execution_id = $1 AND status = 'parked'");
        Statements {
            insert_one: format!(
                "INSERT INTO {t} ({INSERT_COLUMNS}{insert_extra}) VALUES ($1, $2, $3, 'queued', \
                 $4::text::jsonb, $5::text::jsonb, $6, $7, 0, $8, $9, $9, $10, 0{insert_values}) \
                 ON CONFLICT DO NOTHING RETURNING {cols}"
            ),
            insert_many: format!(
                "INSERT INTO {t} ({INSERT_COLUMNS}{insert_extra}) \
                 SELECT u.id, u.ns, u.task, 'queued', u.payload::jsonb, u.meta::jsonb, u.key, \
                   u.digest, 0, u.avail, $10, $10, u.exp, 0{many_select} \
                 FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], \
                   $6::text[], $7::text[], $8::timestamptz[], $9::timestamptz[]{many_types}) \
                   AS u(id, ns, task, payload, meta, key, digest, avail, exp{many_names}) \
                 ON CONFLICT DO NOTHING"
            ),
            by_id: format!("SELECT {cols} FROM {t} WHERE id = $1"),
            by_id_ns: format!("SELECT {cols} FROM {t} WHERE id = $1 AND namespace = $2"),
            cancel_reason: format!(
                "SELECT cancel_reason FROM {t} WHERE id = $1 AND namespace = $2"
            ),
            by_id_lock: format!("SELECT {cols} FROM {t} WHERE id = $1 FOR UPDATE"),
            by_id_ns_lock: format!(
                "SELECT {cols} FROM {t} WHERE id = $1 AND namespace = $2 FOR UPDATE"
            ),
            by_ids: format!("SELECT {cols} FROM {t} WHERE id = ANY($1::uuid[])"),
            by_key: format!(
                "SELECT {cols}, submission_digest FROM {t} \
                 WHERE namespace = $1 AND task_name = $2 AND idempotency_key = $3"
            ),
            cancel_queued: format!(
                "UPDATE {t} SET status = 'cancelled', cancel_reason = $1, \
                 cancel_requested_at = $2, finished_at = $2, updated_at = $2, \
                 version = version + 1 WHERE id = $3 RETURNING {cols}"
            ),
            cancel_running: format!(
                "UPDATE {t} SET status = 'cancel_requested', cancel_reason = $1, \
                 cancel_requested_at = $2, updated_at = $2, version = version + 1 \
                 WHERE id = $3 RETURNING {cols}"
            ),
            lock_many: format!(
                "SELECT {cols}, lease_token, lease_expires_at FROM {t} \
                 WHERE id = ANY($1::uuid[])"
            ),
            maintain,
            claim_select,
            claim_select_one,
            claim_write,
            heartbeat_many,
            cancel_poll,
            complete_one,
            complete_set,
            release,
            park,
            parked_count,
            t,
            priority_columns,
        }
    }
}
