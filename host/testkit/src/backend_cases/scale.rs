//! The scripted workload of the backends' `every_statement_*` scale tests (issue 15,
//! docs/schema.md#evidence): one sequence of real calls through the ports (submit with and
//! without key, replay, conflict, `submit_many`, claims running each maintenance step,
//! heartbeats, cancel poll, durable step saves (new key, overwrite, fenced) and loads and the
//! step list, completions, a retry, release, cancels, get, list pages with and without filters,
//! attempts, logs, live and final diagnostics, purge with steps) over a seeded history,
//! written once and run by each backend's test, which captures and judges the statements its
//! own way (the MySQL general log, PostgreSQL's `auto_explain`). A backend marks each step
//! through a [`StepMarker`] so a captured statement is attributed to the call that sent it.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use onestep_core::cursor::Cursor;
use onestep_core::diagnostics::{LiveDiagnostics, PurgeRequest};
use onestep_core::history::{HistoryIds, HistorySeed};
use onestep_core::names::TableNames;
use onestep_core::ports::{ExecutionStore, LeaseStore, Retention};
use onestep_core::request::{ClaimRequest, ListFilter, ListSearch, SubmitRequest};
use onestep_core::steps::{StepError, StepStore};
use onestep_core::{Completion, ExecutionError, ExecutionLease, ExecutionStatus, LeaseRef};
use serde_json::json;

use crate::ManualClock;
use crate::builders::{claim, keyed, prepare, prepared};

/// Namespace and task of the seeded history; the live work of the script shares them, so every
/// index range the live statements read has the history beside it.
pub const NS: &str = "scale";
/// The task of the history and of most live work.
pub const TASK: &str = "scale.task";
/// A second task with a few live rows and no history (the sparse task filter).
pub const OTHER: &str = "scale.other";
/// A second namespace with a tenth of the history and no live work, sorting after [`NS`]: a
/// read of [`NS`] that is not a range on its namespace prefix walks these rows too.
pub const OTHER_NS: &str = "zz.other";
/// A task with a few old rows deep in the history and none since (each backend's
/// `rare_history` moves them there).
pub const RARE: &str = "scale.rare";
/// Rows of the history `rare_history` rewrites (failed ones, then [`RARE`] ones).
pub const RARE_ROWS: u64 = 3;
/// The traceparent of the traced submission.
pub const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
/// Rows a statement may read beyond [`PER_RESULT`] per result row: the script's own live rows
/// (about 30), which a range over live rows may visit whatever its result, and a margin. It does
/// not depend on the history: a read that touches the history reads thousands (100k) or millions
/// (10M) of rows.
pub const SLACK: u64 = 100;
/// Index reads per result row a bounded statement may do: the row, the sub-query's lookup of
/// the latest attempt, the entry that ends the range, the joined attempt.
pub const PER_RESULT: u64 = 4;

/// Executions (each with one attempt) seeded before the script: `ONESTEP_SCALE_ROWS`, default
/// 100,000 (cheap enough for every `cargo test`).
pub fn scale_rows() -> u64 {
    match std::env::var("ONESTEP_SCALE_ROWS") {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .replace('_', "")
            .parse()
            .expect("ONESTEP_SCALE_ROWS is a row count"),
        _ => 100_000,
    }
}

/// `ONESTEP_SCALE_STRICT=1`: the reported namespace walks fail the test too.
pub fn strict() -> bool {
    std::env::var("ONESTEP_SCALE_STRICT").is_ok_and(|v| v == "1")
}

/// The two histories seeded before the script: `rows` in [`NS`] and a tenth as many (at least
/// 1,000) in [`OTHER_NS`], both of [`TASK`], finished before `before`, with idempotency keys.
pub fn history_seeds(rows: u64, before: DateTime<Utc>) -> [HistorySeed; 2] {
    [(NS, rows), (OTHER_NS, (rows / 10).max(1_000))].map(|(ns, count)| HistorySeed {
        namespace: ns.into(),
        task_name: TASK.into(),
        count,
        ids: HistoryIds::V7,
        before,
        idempotency_keys: true,
    })
}

/// The table names of one run, to tell its statements apart in a server-wide log and to print
/// them as `<T>`, `<A>`.
#[derive(Clone)]
pub struct Names {
    /// The prefix of both names, unique to the run.
    pub prefix: String,
    /// The executions table.
    pub t: String,
    /// The attempts table.
    pub a: String,
}

impl Names {
    /// Fresh names (`scl<10 hex>_exec`, `scl<10 hex>_att`).
    pub fn new() -> Self {
        let prefix = format!("scl{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
        Names {
            t: format!("{prefix}_exec"),
            a: format!("{prefix}_att"),
            prefix,
        }
    }

    /// The pair as the backends' options take it.
    pub fn tables(&self) -> TableNames {
        TableNames::new(self.t.clone(), self.a.clone()).expect("names")
    }

    /// `s` with this run's names replaced by `<T>` (executions) and `<A>` (attempts).
    pub fn short(&self, s: &str) -> String {
        s.replace(&self.a, "<A>").replace(&self.t, "<T>")
    }

    /// The statement a [`StepMarker`] sends to mark `step`: it names no table but carries the
    /// run's prefix, so the capture keeps it.
    pub fn marker_sql(&self, step: &str) -> String {
        format!(
            "SELECT '{}:step', '{}'",
            self.prefix,
            step.replace('\'', "''")
        )
    }

    /// The step a captured [`Self::marker_sql`] statement marks; `None` for any other statement.
    pub fn marked_step(&self, sql: &str) -> Option<String> {
        let marker = format!("'{}:step', '", self.prefix);
        let i = sql.find(&marker)?;
        let rest = &sql[i + marker.len()..];
        Some(rest.trim_end().trim_end_matches('\'').replace("''", "'"))
    }
}

impl Default for Names {
    fn default() -> Self {
        Names::new()
    }
}

/// The step of the statements captured before the first marker.
pub const BEFORE_THE_SCRIPT: &str = "(before the script)";

/// Marks the start of a script step in the backend's capture (a statement that names no table
/// but carries the run's prefix, e.g. `SELECT '<prefix>:step', '<step>'`).
#[async_trait]
pub trait StepMarker: Send {
    /// Marks `step`.
    async fn step(&mut self, step: &str);
}

/// A list filter of [`NS`] without search.
pub fn filter(task: Option<&str>, status: Option<ExecutionStatus>, limit: u32) -> ListFilter {
    ListFilter {
        task_name: task.map(str::to_owned),
        status,
        limit,
        after: None,
        search: ListSearch::default(),
        window: onestep_core::request::SEARCH_WINDOW_ROWS,
    }
}

/// One list call and, when there is a next page, the call for it.
async fn two_pages<B: ExecutionStore, M: StepMarker>(
    b: &B,
    m: &mut M,
    label: &str,
    filter: ListFilter,
) {
    let call = if label.is_empty() {
        "list".to_owned()
    } else {
        format!("list {label}")
    };
    m.step(&format!("{call}: first page")).await;
    let first = b.list(NS, &filter).await.expect("list");
    assert!(!first.items.is_empty(), "{label}: empty first page");
    if let Some(c) = first.next_cursor {
        m.step(&format!("{call}: next page")).await;
        let after = Some(Cursor::decode(&c).expect("cursor"));
        b.list(NS, &ListFilter { after, ..filter })
            .await
            .expect("next page");
    }
}

/// The scripted sequence of real backend calls whose statements are captured: every client,
/// worker, maintenance, diagnostics and purge path, each at least once. `history_first` is the
/// creation instant of the oldest seeded row (the purge cutoffs are counted from it).
pub async fn script<B, M>(b: B, clock: Arc<ManualClock>, mut m: M, history_first: DateTime<Utc>)
where
    B: ExecutionStore + LeaseStore + Retention + StepStore,
    M: StepMarker,
{
    let err = || crate::builders::handler_error("HandlerError");
    let diag = |msg: &str| crate::diagnostics::diagnostics(&clock, msg);
    let t0 = clock.now_value();
    clock.advance(1.0);
    let mut task_ids = Vec::new();
    m.step("submit").await;
    for i in 0..8 {
        let e = b.submit(prepared(NS, TASK, json!({ "i": i }))).await;
        task_ids.push(e.expect("submit").id);
    }
    m.step("submit with traceparent").await;
    let mut traced = prepared(NS, TASK, json!({ "traced": true }));
    traced.trace_parent = Some(TRACEPARENT.into());
    task_ids.push(b.submit(traced).await.expect("traced").id);
    m.step("submit with metadata").await;
    let tagged = prepare(
        NS,
        &SubmitRequest {
            task_name: TASK.into(),
            payload: json!({ "m": 1 }),
            metadata: Some(json!({ "tenant": "acme" })),
            ..SubmitRequest::default()
        },
    );
    task_ids.push(b.submit(tagged).await.expect("tagged").id);
    m.step("submit (other task)").await;
    for i in 0..3 {
        let e = b.submit(prepared(NS, OTHER, json!({ "o": i }))).await;
        e.expect("other");
    }
    m.step("submit with key").await;
    let key1 = || keyed(NS, TASK, "scale-key-1", json!({ "k": 1 }));
    let first = b.submit(key1()).await.expect("keyed");
    task_ids.push(first.id);
    m.step("submit with key: replay").await;
    assert_eq!(b.submit(key1()).await.expect("replay").id, first.id);
    m.step("submit with key: conflict").await;
    let conflict = b
        .submit(keyed(NS, TASK, "scale-key-1", json!({ "k": 2 })))
        .await;
    assert!(
        matches!(conflict, Err(ExecutionError::Conflict { .. })),
        "{conflict:?}"
    );
    m.step("submit_many (two new, one replay)").await;
    let many = b
        .submit_many(vec![
            keyed(NS, TASK, "scale-key-2", json!({ "k": 2 })),
            keyed(NS, TASK, "scale-key-3", json!({ "k": 3 })),
            key1(),
        ])
        .await
        .expect("submit_many");
    for e in many {
        task_ids.push(e.expect("item").id);
    }
    m.step("submit expiring").await;
    let expiring = prepare(
        NS,
        &SubmitRequest {
            task_name: TASK.into(),
            payload: json!({ "x": 1 }),
            expires_at: Some((clock.now_value() + chrono::Duration::seconds(5)).fixed_offset()),
            ..SubmitRequest::default()
        },
    );
    let expiring = b.submit(expiring).await.expect("expiring").id;

    // Claim: the maintenance expires the overdue submission (T5), then 10 leases.
    clock.advance(10.0);
    m.step("claim (maintenance: expire)").await;
    let leases = b
        .claim(&claim(NS, TASK, 10, 30.0, "w1"))
        .await
        .expect("claim");
    assert_eq!(leases.len(), 10);
    m.step("get").await;
    let e = b.get(NS, expiring).await.expect("get").expect("expiring");
    assert_eq!(e.status, ExecutionStatus::Expired);
    let r: Vec<LeaseRef> = leases.iter().map(ExecutionLease::lease_ref).collect();
    m.step("heartbeat").await;
    b.heartbeat(&r[0], 30.0).await.expect("heartbeat");
    m.step("heartbeat_many").await;
    let beats = b.heartbeat_many(&r[0..5], 30.0).await.expect("many");
    assert!(beats.iter().all(Result::is_ok), "{beats:?}");
    m.step("cancel poll").await;
    assert!(b.cancel_requested(&r).await.expect("poll").is_empty());
    // A durable step of r[2] (docs/steps.md), which fails below and is purged with it.
    m.step("step save").await;
    StepStore::save(&b, &r[2], "fetch", "[1,2,3]")
        .await
        .expect("step save");
    m.step("record_live (diagnostics)").await;
    let live = LiveDiagnostics {
        progress: diag("live").progress,
        log: diag("live").log,
    };
    assert!(b.record_live(&[(r[0], live)]).await.expect("live"));
    m.step("complete: success").await;
    let done = Completion::succeeded(json!({ "ok": true })).with_diagnostics(diag("done"));
    b.complete(&r[0], &done).await.expect("success");
    m.step("complete: retry").await;
    let retry = Completion::retrying(err(), 0.0).with_diagnostics(diag("retry"));
    b.complete(&r[1], &retry).await.expect("retry");
    m.step("complete: failed").await;
    let failed = Completion::failed(err()).with_diagnostics(diag("failed"));
    b.complete(&r[2], &failed).await.expect("failed");
    m.step("complete_many").await;
    let out = b
        .complete_many(&[
            (
                r[3],
                Completion::succeeded(json!(3)).with_diagnostics(diag("3")),
            ),
            (r[4], Completion::failed(err()).with_diagnostics(diag("4"))),
            (r[5], Completion::retrying(err(), 0.0)),
        ])
        .await
        .expect("complete_many");
    assert!(out.iter().all(Result::is_ok), "{out:?}");
    m.step("release").await;
    b.release(&r[6]).await.expect("release");
    m.step("cancel: running").await;
    let c = b.cancel(NS, r[7].execution_id, Some("scale".into())).await;
    let c = c.expect("cancel").expect("row");
    assert_eq!(c.status, ExecutionStatus::CancelRequested);
    m.step("cancel poll").await;
    let polled = b.cancel_requested(&r[7..]).await.expect("poll");
    assert_eq!(polled, vec![r[7].execution_id]);
    m.step("heartbeat").await;
    assert!(b.heartbeat(&r[7], 30.0).await.expect("hb").cancel_requested);
    let claimed: Vec<uuid::Uuid> = r.iter().map(|l| l.execution_id).collect();
    let queued = *task_ids
        .iter()
        .find(|id| !claimed.contains(id))
        .expect("an unclaimed submission");
    m.step("cancel: queued").await;
    let c = b
        .cancel(NS, queued, None)
        .await
        .expect("cancel")
        .expect("row");
    assert_eq!(c.status, ExecutionStatus::Cancelled);
    m.step("cancel: finished").await;
    b.cancel(NS, r[0].execution_id, None).await.expect("cancel");
    m.step("cancel: absent").await;
    let absent = uuid::Uuid::new_v4();
    assert!(b.cancel(NS, absent, None).await.expect("cancel").is_none());

    // Leases of r[7] (cancel requested), r[8] and r[9] run out: dead cancel (T6), reclaim (T7),
    // and the claim takes the retrying (r[1], r[5], and the reclaimed, lease-lost r[8], r[9])
    // and queued (r[6] released, the two unclaimed submissions left) rows.
    clock.advance(60.0);
    m.step("claim (maintenance: dead cancel, reclaim)").await;
    let second = b
        .claim(&claim(NS, TASK, 10, 30.0, "w2"))
        .await
        .expect("claim");
    assert_eq!(second.len(), 7, "four retrying, three queued rows");
    m.step("get").await;
    let e = b
        .get(NS, r[7].execution_id)
        .await
        .expect("get")
        .expect("row");
    assert_eq!(e.status, ExecutionStatus::Cancelled);
    m.step("complete_many").await;
    let items: Vec<(LeaseRef, Completion)> = second
        .iter()
        .map(|l| (l.lease_ref(), Completion::succeeded(json!(1))))
        .collect();
    let out = b.complete_many(&items).await.expect("complete_many");
    assert!(out.iter().all(Result::is_ok), "{out:?}");
    m.step("claim (two task names)").await;
    let both = ClaimRequest {
        namespaces: onestep_core::request::NamespaceScope::One(NS.into()),
        fair: Default::default(),
        task_names: vec![TASK.into(), OTHER.into()],
        limit: 5,
        lease_duration_s: 30.0,
        worker_id: "w3".into(),
        max_running: None,
    };
    let running = b.claim(&both).await.expect("claim");
    assert_eq!(running.len(), 3);

    // Durable steps (docs/steps.md) of a lease still running when the captured statements are
    // measured, so that their re-runs find the execution row and its steps.
    let l = running[0].lease_ref();
    m.step("step save").await;
    StepStore::save(&b, &l, "fetch", "[1,2,3]")
        .await
        .expect("step save");
    StepStore::save(&b, &l, "parse", r#"{"n":3}"#)
        .await
        .expect("step save");
    m.step("step save: overwrite").await;
    StepStore::save(&b, &l, "fetch", "[1,2,3,4]")
        .await
        .expect("step overwrite");
    m.step("step save: fenced").await;
    let stale = LeaseRef {
        lease_token: uuid::Uuid::new_v4(),
        ..l
    };
    assert_eq!(
        StepStore::save(&b, &stale, "fetch", "0").await,
        Err(StepError::Fenced)
    );
    m.step("step load").await;
    let loaded = StepStore::load(&b, l.execution_id, "fetch").await;
    assert_eq!(loaded.expect("load").as_deref(), Some("[1,2,3,4]"));
    m.step("step load: absent").await;
    let loaded = StepStore::load(&b, l.execution_id, "absent").await;
    assert_eq!(loaded.expect("load"), None);
    m.step("step list").await;
    let listed = StepStore::list(&b, l.execution_id).await.expect("list");
    let keys: Vec<&str> = listed.iter().map(|s| s.key.as_str()).collect();
    assert_eq!(keys, ["fetch", "parse"]);
    m.step("claim (nothing to do)").await;
    let none = b.claim(&claim(NS, TASK, 10, 30.0, "w3")).await;
    assert!(none.expect("claim").is_empty());

    // Client reads.
    m.step("get").await;
    assert!(b.get(NS, r[0].execution_id).await.expect("get").is_some());
    m.step("get: absent").await;
    assert!(b.get(NS, absent).await.expect("get").is_none());
    m.step("get: other namespace").await;
    assert!(
        b.get("elsewhere", r[0].execution_id)
            .await
            .expect("get")
            .is_none()
    );
    two_pages(&b, &mut m, "", filter(None, None, 5)).await;
    two_pages(&b, &mut m, "task", filter(Some(TASK), None, 5)).await;
    let sparse_task = filter(Some(OTHER), None, 2);
    two_pages(&b, &mut m, "task (no history)", sparse_task).await;
    let rare = filter(Some(RARE), None, 2);
    two_pages(&b, &mut m, "task (old rows only)", rare).await;
    let failed = filter(None, Some(ExecutionStatus::Failed), 2);
    two_pages(&b, &mut m, "status=failed (old matches)", failed).await;
    let running = filter(None, Some(ExecutionStatus::Running), 2);
    two_pages(&b, &mut m, "status=running", running).await;
    let succeeded = filter(None, Some(ExecutionStatus::Succeeded), 5);
    two_pages(&b, &mut m, "status=succeeded", succeeded).await;
    let task_failed = filter(Some(TASK), Some(ExecutionStatus::Failed), 1);
    two_pages(&b, &mut m, "task+status=failed", task_failed).await;
    let task_ok = filter(Some(TASK), Some(ExecutionStatus::Succeeded), 5);
    two_pages(&b, &mut m, "task+status=succeeded", task_ok).await;
    let searches = [
        (
            "created range",
            ListSearch {
                created_from: Some(t0),
                created_before: Some(clock.now_value()),
                ..ListSearch::default()
            },
        ),
        (
            "idempotency key",
            ListSearch {
                idempotency_key: Some("scale-key-1".into()),
                ..ListSearch::default()
            },
        ),
        (
            "metadata",
            ListSearch {
                metadata: Some(("tenant".into(), "acme".into())),
                ..ListSearch::default()
            },
        ),
        (
            "exception type",
            ListSearch {
                exception_type: Some("handler".into()),
                ..ListSearch::default()
            },
        ),
    ];
    for (label, search) in searches {
        let f = ListFilter {
            search,
            ..filter(None, None, 1)
        };
        two_pages(&b, &mut m, label, f).await;
    }
    m.step("attempts (diagnostics)").await;
    let attempts = b.attempts(NS, r[1].execution_id).await.expect("attempts");
    assert_eq!(attempts.expect("execution").len(), 2);
    m.step("attempt log (diagnostics)").await;
    let tail = b.attempt_log(NS, r[0].execution_id, 1).await.expect("log");
    assert!(tail.expect("attempt").is_some());
    m.step("attempt log: absent attempt").await;
    let tail = b.attempt_log(NS, r[0].execution_id, 9).await.expect("log");
    assert!(tail.is_none());

    // Purge: the oldest end of the history (rows 0..=248 finished before the cutoff), dry run
    // then for real, in batches of 100; then across namespaces; then by status, the whole
    // namespace before the cutoff.
    let oldest = PurgeRequest {
        namespace: Some(NS.into()),
        finished_before: history_first + chrono::Duration::milliseconds(250),
        statuses: vec![],
        batch_size: 100,
        dry_run: true,
    };
    m.step("purge: dry run").await;
    assert_eq!(b.purge(&oldest).await.expect("dry run").executions, 249);
    m.step("purge").await;
    let wet = PurgeRequest {
        dry_run: false,
        ..oldest.clone()
    };
    let report = b.purge(&wet).await.expect("purge");
    assert_eq!((report.executions, report.attempts), (249, 249));
    m.step("purge: every namespace").await;
    let every = PurgeRequest {
        namespace: None,
        finished_before: history_first + chrono::Duration::milliseconds(500),
        ..wet.clone()
    };
    assert_eq!(b.purge(&every).await.expect("purge").executions, 250);
    m.step("purge: by status").await;
    let by_status = PurgeRequest {
        statuses: vec![
            ExecutionStatus::Failed,
            ExecutionStatus::Cancelled,
            ExecutionStatus::Expired,
        ],
        finished_before: clock.now_value() + chrono::Duration::seconds(1),
        ..wet
    };
    let report = b.purge(&by_status).await.expect("purge");
    // r[2], r[4] failed; r[7], the queued one cancelled; the expiring one expired; the old
    // failed history rows.
    assert_eq!(report.executions, 5 + RARE_ROWS, "{report:?}");
    // r[2]'s step went with it (and whatever steps the backend seeded for the history).
    assert!(report.steps >= 1, "{report:?}");
    m.step("step list: purged").await;
    let listed = StepStore::list(&b, r[2].execution_id).await.expect("list");
    assert!(listed.is_empty(), "{listed:?}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_round_trip() {
        let names = Names::new();
        let sql = names.marker_sql("cancel: it's queued");
        assert_eq!(
            names.marked_step(&sql).as_deref(),
            Some("cancel: it's queued")
        );
        assert_eq!(names.marked_step("SELECT 1"), None);
    }
}
