//! `complete` and `complete_many`: the single-completion path of `fenced_writes.rs` (with the
//! final diagnostics) and several completions in one transaction, each fenced by its own token. The
//! bookkeeping (validation, which items go set-based, the per-item path under a savepoint each,
//! one outcome per item) is `onestep_core::store::batch`; this file is its SQL on MySQL/MariaDB:
//! one locking read, one UPDATE per table with per-row values through `CASE` (each row still
//! fenced by its own token in the WHERE clause), one read-back, and the single-completion path
//! of `fenced_writes.rs`.
//!
//! Each of these statements lists one placeholder group per row, so its text depends on the
//! number of rows, and every distinct text is one more server-side prepare (mysql_async keeps
//! a small per-connection cache of prepared statements). The row lists are therefore padded to
//! the next power of two by repeating the last row (a repeated id in `IN`, `CASE` or the `OR`
//! of fences matches the same row with the same values, so the rows written and the counts
//! compared are unchanged): a batch of 2 to 64 completions uses 6 row counts per statement
//! instead of up to 63 (docs/benchmarks.md#where-the-database-time-goes-issue-35).

use chrono::{DateTime, NaiveDateTime, Utc};
use mysql_async::prelude::Queryable;
use mysql_async::{Params, Row, Transaction, Value as DbValue};
use onestep_core::Execution;
use onestep_core::execution::{Completion, LeaseRef};
use onestep_core::status::attempt_status_for;
use onestep_core::store::batch::{CompletionTx, LockedRow, LockedRows, SetItem, SetWrite};
use uuid::Uuid;

use crate::backend::{MySqlBackend, begin};
use crate::errors::{OpError, OpResult};
use crate::fenced_writes::{finished_at_param, result_param, status_list};
use crate::rows::{
    EXECUTION_COLUMN_COUNT, bind_error, bind_time, bind_uuid, decode_execution, padded, parse_uuid,
    placeholders,
};

onestep_core::impl_domain_outcome!(OpError);

/// One open transaction of this backend, as the shared completion bookkeeping drives it.
struct Completing<'a, 'c> {
    backend: &'a MySqlBackend,
    tx: &'a mut Transaction<'c>,
}

impl MySqlBackend {
    /// `tx`, for the completion bookkeeping of `onestep_core::store::batch`.
    fn completing<'a, 'c>(&'a self, tx: &'a mut Transaction<'c>) -> Completing<'a, 'c> {
        Completing { backend: self, tx }
    }

    // complete_once, complete_many_once
    onestep_core::complete_once_methods!(
        OpError,
        |conn| begin(&mut conn).await?,
        |b, tx| b.completing(&mut tx),
        |outcome| b.finish(tx, outcome).await
    );
}

impl CompletionTx for Completing<'_, '_> {
    // type Error, savepoint, complete_one, write_final_diagnostics
    onestep_core::completion_tx_common!(
        OpError,
        query_drop("SAVEPOINT", "RELEASE SAVEPOINT", "ROLLBACK TO SAVEPOINT")
    );

    /// One locking read of every row; an undecodable row is left out
    /// (docs/semantics.md#undecodable-rows).
    async fn lock_rows(&mut self, ids: &[Uuid]) -> OpResult<LockedRows> {
        let ids = padded(ids);
        let sql = format!(
            "SELECT {}, lease_token, lease_expires_at FROM `{}` WHERE id IN ({}) \
             FOR UPDATE",
            self.backend.cols(),
            self.backend.t(),
            placeholders(ids.len())
        );
        let params: Vec<DbValue> = ids.iter().map(|id| bind_uuid(**id)).collect();
        let rows: Vec<Row> = self.tx.exec(sql, Params::Positional(params)).await?;
        let mut locked = LockedRows::with_capacity(rows.len());
        for mut r in rows {
            let lease_token = match r.take::<DbValue, _>(EXECUTION_COLUMN_COUNT) {
                None | Some(DbValue::NULL) => None,
                Some(v) => match parse_uuid(&v) {
                    Ok(t) => Some(t),
                    Err(_) => continue,
                },
            };
            let lease_expires_at = r
                .take_opt::<Option<NaiveDateTime>, _>(EXECUTION_COLUMN_COUNT + 1)
                .and_then(Result::ok)
                .flatten()
                .map(|t| t.and_utc());
            let Ok(execution) = decode_execution(r) else {
                continue;
            };
            locked.insert(
                execution.id,
                LockedRow {
                    execution,
                    lease_token,
                    lease_expires_at,
                },
            );
        }
        Ok(locked)
    }

    /// The two set-based CAS writes (per-row values through `CASE`), then one read-back;
    /// `None` when a count differs from the items.
    async fn write_set(&mut self, write: SetWrite<'_>) -> OpResult<Option<Vec<Execution>>> {
        let SetWrite { items, set, now } = write;
        if !self.write_executions(items, set, now).await?
            || !self.write_attempts(items, set, now).await?
        {
            return Ok(None);
        }
        let rows = padded(set);
        let sql = format!(
            "SELECT {} FROM `{}` WHERE id IN ({})",
            self.backend.cols(),
            self.backend.t(),
            placeholders(rows.len())
        );
        let params: Vec<DbValue> = rows
            .iter()
            .map(|s| bind_uuid(items[s.index].0.execution_id))
            .collect();
        let rows: Vec<Row> = self.tx.exec(sql, Params::Positional(params)).await?;
        let mut written = Vec::with_capacity(rows.len());
        for r in rows {
            written.push(decode_execution(r)?);
        }
        Ok(Some(written))
    }
}

impl Completing<'_, '_> {
    /// The set-based UPDATE of the executions: `true` when it matched one row per item.
    ///
    /// `FORCE INDEX (PRIMARY)`: the rows are found by `id IN (…)` either way, but without the hint
    /// MariaDB's range optimizer analyses the `OR` of per-row fences against every index that
    /// holds `id`, `status` or `lease_token` on each execution — about 38 ms for 64 rows with our
    /// twelve indexes, against 0.4 ms with the hint (docs/benchmarks.md#the-completions-range-analysis).
    async fn write_executions(
        &mut self,
        items: &[(LeaseRef, Completion)],
        set: &[SetItem],
        now: DateTime<Utc>,
    ) -> OpResult<bool> {
        let n = set.len();
        let set = padded(set);
        let case: String = set.iter().map(|_| " WHEN ? THEN ?").collect();
        let fences: Vec<String> = set
            .iter()
            .map(|s| {
                format!(
                    "(id = ? AND lease_token = ? AND status IN ({}))",
                    status_list(items[s.index].1.status.allowed_sources())
                )
            })
            .collect();
        let sql = format!(
            "UPDATE `{t}` FORCE INDEX (PRIMARY) SET status = CASE id{case} END, updated_at = ?, \
             version = version + 1, \
             lease_token = NULL, lease_expires_at = NULL, worker_id = NULL, \
             result = CASE id{case} END, error = CASE id{case} END, \
             available_at = CASE id{case} END, finished_at = CASE id{case} END \
             WHERE id IN ({ids}) AND lease_expires_at IS NOT NULL AND lease_expires_at > ? \
             AND ({fences})",
            t = self.backend.t(),
            ids = placeholders(set.len()),
            fences = fences.join(" OR "),
        );
        let id_of = |s: &SetItem| bind_uuid(items[s.index].0.execution_id);
        let mut params: Vec<DbValue> = Vec::with_capacity(set.len() * 14 + 2);
        for s in &set {
            params.push(id_of(s));
            params.push(s.plan.effective.as_str().into());
        }
        params.push(bind_time(now));
        for s in &set {
            params.push(id_of(s));
            params.push(result_param(&s.plan));
        }
        for s in &set {
            params.push(id_of(s));
            params.push(bind_error(s.plan.error.as_ref())?);
        }
        for s in &set {
            params.push(id_of(s));
            params.push(bind_time(s.plan.available_at));
        }
        for s in &set {
            params.push(id_of(s));
            params.push(finished_at_param(&s.plan, now));
        }
        params.extend(set.iter().map(|s| id_of(s)));
        params.push(bind_time(now));
        for s in &set {
            params.push(id_of(s));
            params.push(bind_uuid(items[s.index].0.lease_token));
        }
        self.tx.exec_drop(sql, Params::Positional(params)).await?;
        Ok(self.tx.affected_rows() == n as u64)
    }

    /// The set-based UPDATE of the running attempts: `true` when it matched one row per item.
    /// `FORCE INDEX (PRIMARY)` for the same reason as the executions' update.
    async fn write_attempts(
        &mut self,
        items: &[(LeaseRef, Completion)],
        set: &[SetItem],
        now: DateTime<Utc>,
    ) -> OpResult<bool> {
        let n = set.len();
        let set = padded(set);
        let case: String = set.iter().map(|_| " WHEN ? THEN ?").collect();
        let fences =
            vec!["(id = ? AND execution_id = ? AND lease_token = ?)"; set.len()].join(" OR ");
        let sql = format!(
            "UPDATE `{a}` FORCE INDEX (PRIMARY) SET status = CASE id{case} END, \
             error = CASE id{case} END, \
             finished_at = ? WHERE id IN ({ids}) AND status = 'running' AND ({fences})",
            a = self.backend.a(),
            ids = placeholders(set.len()),
        );
        let attempt_of = |s: &SetItem| bind_uuid(items[s.index].0.attempt_id);
        let mut params: Vec<DbValue> = Vec::with_capacity(set.len() * 8 + 1);
        for s in &set {
            params.push(attempt_of(s));
            params.push(attempt_status_for(s.plan.effective).as_str().into());
        }
        for s in &set {
            params.push(attempt_of(s));
            params.push(bind_error(s.plan.error.as_ref())?);
        }
        params.push(bind_time(now));
        params.extend(set.iter().map(|s| attempt_of(s)));
        for s in &set {
            let lease = &items[s.index].0;
            params.push(attempt_of(s));
            params.push(bind_uuid(lease.execution_id));
            params.push(bind_uuid(lease.lease_token));
        }
        self.tx.exec_drop(sql, Params::Positional(params)).await?;
        Ok(self.tx.affected_rows() == n as u64)
    }
}

#[cfg(test)]
mod tests {
    use crate::rows::padded;

    #[test]
    fn padded_repeats_the_last_row_up_to_a_power_of_two() {
        assert!(padded::<u8>(&[]).is_empty());
        assert_eq!(padded(&[1]), vec![&1]);
        assert_eq!(padded(&[1, 2, 3]), vec![&1, &2, &3, &3]);
        let many: Vec<u32> = (0..33).collect();
        let p = padded(&many);
        assert_eq!(p.len(), 64);
        assert!(p[33..].iter().all(|x| **x == 32));
        assert_eq!(padded(&many[..32]).len(), 32);
    }
}
