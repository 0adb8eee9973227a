//! One backend-agnostic check of attempt diagnostics and purge
//! (docs/observability.md#attempt-diagnostics, docs/cli.md#purge), run by each SQL backend's
//! tests on a real server: the final write rides in the completion's transaction (single and
//! batched), the heartbeat's live write shows progress and log lines of a running attempt and
//! never replaces a final row, the reads are scoped to the namespace, a refused (stale)
//! completion stores nothing, and `purge` removes finished executions with their attempts and
//! diagnostics in bounded batches (a dry run counts and removes nothing); and the same store
//! without its diagnostics table.
// Test support: a failed set-up step panics like an assertion.
#![allow(clippy::expect_used, clippy::panic)]

use chrono::Duration;
use onestep_core::cursor::Cursor;
use onestep_core::diagnostics::{
    AttemptDiagnostics, AttemptProgress, LiveDiagnostics, LogLine, LogTail, PurgeRequest, RunFacts,
};
use onestep_core::ports::{ExecutionStore, LeaseStore, Retention};
use onestep_core::request::{ListFilter, ListSearch, SEARCH_WINDOW_ROWS};
use onestep_core::{Completion, Execution, ExecutionLease, ExecutionStatus, LeaseRef, time::Clock};
use serde_json::json;

use crate::ManualClock;
use crate::builders::{claim, prepared};

/// The namespace of the checks.
pub const NS: &str = "ns";
/// The task of the checks.
pub const TASK: &str = "t";

/// `n` submissions of [`TASK`] in [`NS`], claimed by worker `w1` (30 s leases).
pub async fn seed<B: ExecutionStore + LeaseStore>(b: &B, n: usize) -> Vec<ExecutionLease> {
    for i in 0..n {
        b.submit(prepared(NS, TASK, json!({ "i": i })))
            .await
            .expect("submit");
    }
    b.claim(&claim(NS, TASK, n as u32, 30.0, "w1"))
        .await
        .expect("claim")
}

fn line(seq: u64, clock: &ManualClock, message: &str) -> LogLine {
    LogLine {
        seq,
        at: clock.now(),
        level: "info".into(),
        message: message.into(),
    }
}

/// A filter for every row of `NS` (fewer than 200 here), after `after` when given.
fn whole_list(after: Option<&Execution>) -> ListFilter {
    ListFilter {
        task_name: None,
        status: None,
        limit: 200,
        after: after.map(|e| Cursor {
            created_at: e.created_at,
            id: e.id,
        }),
        search: ListSearch::default(),
        window: SEARCH_WINDOW_ROWS,
    }
}

async fn list_ids<B: ExecutionStore>(b: &B) -> Vec<uuid::Uuid> {
    let page = b.list(NS, &whole_list(None)).await.expect("list");
    page.items.iter().map(|e| e.id).collect()
}

/// Final diagnostics with every field set (message, progress 3/10, a two-line tail of five
/// lines, run facts).
pub fn diagnostics(clock: &ManualClock, message: &str) -> AttemptDiagnostics {
    AttemptDiagnostics {
        message: Some(message.into()),
        progress: Some(AttemptProgress {
            done: 3,
            total: 10,
            note: "third".into(),
            at: clock.now(),
        }),
        log: Some(LogTail {
            total_lines: 5,
            lines: vec![line(4, clock, "four"), line(5, clock, "five\nwith newline")],
        }),
        facts: RunFacts {
            trap_kind: None,
            component_digest: Some("ab".repeat(32)),
            fuel_consumed: Some(1234),
            peak_memory_bytes: Some(1 << 20),
        },
    }
}

fn handler_error() -> onestep_core::ErrorObject {
    onestep_core::ErrorObject::new("error", "HandlerError", Some("handler"))
}

/// The whole round trip on `b`, whose namespace `ns` must be empty and whose clock is `clock`.
pub async fn round_trip<B>(b: &B, clock: &ManualClock)
where
    B: ExecutionStore + LeaseStore + Retention,
{
    let leases = seed(b, 3).await;
    let refs: Vec<LeaseRef> = leases.iter().map(ExecutionLease::lease_ref).collect();

    // Live write of a running attempt: progress and lines, visible through attempts/logs.
    let live = LiveDiagnostics {
        progress: Some(AttemptProgress {
            done: 1,
            total: 10,
            note: "first".into(),
            at: clock.now(),
        }),
        log: Some(LogTail {
            total_lines: 1,
            lines: vec![line(1, clock, "one")],
        }),
    };
    assert!(
        b.record_live(&[(refs[0], live.clone())])
            .await
            .expect("live")
    );
    let a = b
        .attempts(NS, refs[0].execution_id)
        .await
        .expect("attempts")
        .expect("execution");
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].status, "running");
    let d = a[0].diagnostics.as_ref().expect("live diagnostics");
    assert_eq!(d.progress.as_ref().map(|p| p.done), Some(1));
    assert_eq!(d.message, None);
    let tail = b
        .attempt_log(NS, refs[0].execution_id, 1)
        .await
        .expect("log")
        .expect("attempt")
        .expect("tail");
    assert_eq!(tail.lines, live.log.as_ref().expect("tail").lines);

    // Final writes: one single completion, two batched.
    let done = b
        .complete(
            &refs[0],
            &Completion::failed(handler_error()).with_diagnostics(diagnostics(clock, "boom 0")),
        )
        .await
        .expect("complete");
    assert_eq!(done.status, ExecutionStatus::Failed);
    let out = b
        .complete_many(&[
            (
                refs[1],
                Completion::succeeded(json!(1)).with_diagnostics(diagnostics(clock, "m1")),
            ),
            (
                refs[2],
                Completion::retrying(handler_error(), 0.0)
                    .with_diagnostics(diagnostics(clock, "m2")),
            ),
        ])
        .await
        .expect("complete_many");
    assert!(out.iter().all(Result::is_ok), "{out:?}");

    // A late live write does not replace the final row.
    b.record_live(&[(refs[0], live)]).await.expect("late live");
    for (r, message) in refs.iter().zip(["boom 0", "m1", "m2"]) {
        let a = b
            .attempts(NS, r.execution_id)
            .await
            .expect("attempts")
            .expect("execution");
        let d = a[0].diagnostics.as_ref().expect("final diagnostics");
        assert_eq!(d.message.as_deref(), Some(message));
        assert_eq!(
            d.progress.as_ref().map(|p| (p.done, p.total)),
            Some((3, 10))
        );
        assert_eq!(
            d.facts.component_digest.as_deref(),
            Some("ab".repeat(32).as_str())
        );
        assert_eq!(d.facts.fuel_consumed, Some(1234));
        assert_eq!(d.log.as_ref().map(|t| t.total_lines), Some(5));
        let tail = b
            .attempt_log(NS, r.execution_id, 1)
            .await
            .expect("log")
            .expect("attempt")
            .expect("tail");
        assert_eq!(tail.total_lines, 5);
        assert_eq!(tail.dropped_lines(), 3);
        assert_eq!(tail.lines[1].message, "five\nwith newline");
    }

    // Namespace scoping and absent attempts.
    assert_eq!(
        b.attempts("other", refs[0].execution_id)
            .await
            .expect("other"),
        None
    );
    assert_eq!(
        b.attempt_log("other", refs[0].execution_id, 1)
            .await
            .expect("other"),
        None
    );
    assert_eq!(
        b.attempt_log(NS, refs[0].execution_id, 2)
            .await
            .expect("n=2"),
        None
    );

    // A refused completion (stale token) stores nothing.
    let more = seed(b, 1).await;
    let mut stale = more[0].lease_ref();
    stale.lease_token = uuid::Uuid::new_v4();
    let refused = b
        .complete(
            &stale,
            &Completion::succeeded(json!(0)).with_diagnostics(diagnostics(clock, "stale")),
        )
        .await;
    assert!(refused.is_err());
    let a = b
        .attempts(NS, stale.execution_id)
        .await
        .expect("attempts")
        .expect("execution");
    let last = a.last().expect("the claimed attempt");
    assert_eq!(last.attempt_no, more[0].attempt_no);
    assert_eq!(last.diagnostics, None, "nothing stored for a refused write");

    let listed_before_purge = list_ids(b).await;
    // Purge: only finished executions older than the cutoff; dry run first.
    clock.advance(2.0 * 86_400.0);
    let request = PurgeRequest {
        namespace: Some(NS.into()),
        finished_before: clock.now() - Duration::days(1),
        statuses: vec![],
        batch_size: 1,
        dry_run: true,
    };
    let dry = b.purge(&request).await.expect("dry run");
    // Two finished (failed, succeeded); the retrying and the running one stay.
    assert_eq!((dry.executions, dry.attempts, dry.diagnostics), (2, 2, 2));
    let wet = b
        .purge(&PurgeRequest {
            dry_run: false,
            ..request.clone()
        })
        .await
        .expect("purge");
    assert_eq!((wet.executions, wet.attempts, wet.diagnostics), (2, 2, 2));
    assert_eq!(wet.batches, 2, "batch size 1");
    assert_eq!(b.get(NS, refs[0].execution_id).await.expect("get"), None);
    // A list cursor at a purged execution is still a position (docs/semantics.md#listing-and-cursors):
    // its row is gone, and the list goes on with the rows created before it.
    let purged = &leases[0].execution;
    assert_eq!(b.get(NS, purged.id).await.expect("get"), None);
    let after_purged = b
        .list(NS, &whole_list(Some(purged)))
        .await
        .expect("list after a purged execution");
    // Exactly the rows that followed it in the list before the purge and are still there.
    let now: Vec<_> = list_ids(b).await;
    let followed: Vec<_> = listed_before_purge
        .iter()
        .skip_while(|id| **id != purged.id)
        .skip(1)
        .filter(|id| now.contains(id))
        .copied()
        .collect();
    assert!(listed_before_purge.contains(&purged.id));
    let got: Vec<_> = after_purged.items.iter().map(|e| e.id).collect();
    assert_eq!(got, followed);
    assert!(
        b.get(NS, refs[2].execution_id)
            .await
            .expect("get")
            .is_some()
    );
    let again = b
        .purge(&PurgeRequest {
            dry_run: false,
            ..request
        })
        .await
        .expect("again");
    assert_eq!(again.executions, 0);
    let bad = b
        .purge(&PurgeRequest {
            namespace: None,
            finished_before: clock.now(),
            statuses: vec![ExecutionStatus::Running],
            batch_size: 10,
            dry_run: true,
        })
        .await;
    assert!(
        bad.as_ref()
            .is_err_and(|e| e.to_string().contains("'running' is not a terminal status")),
        "{bad:?}"
    );
}

/// On a store without the diagnostics table: completions carrying diagnostics still complete,
/// the live write reports "not kept", and attempts are listed without diagnostics.
pub async fn without_the_table<B>(b: &B, clock: &ManualClock)
where
    B: ExecutionStore + LeaseStore,
{
    let leases = seed(b, 1).await;
    let r = leases[0].lease_ref();
    let live = LiveDiagnostics {
        progress: None,
        log: None,
    };
    assert!(!b.record_live(&[(r, live)]).await.expect("live"));
    b.complete(
        &r,
        &Completion::succeeded(json!(1)).with_diagnostics(diagnostics(clock, "m")),
    )
    .await
    .expect("complete");
    let a = b
        .attempts(NS, r.execution_id)
        .await
        .expect("attempts")
        .expect("execution");
    assert_eq!(a.len(), 1);
    assert_eq!(a[0].status, "succeeded");
    assert_eq!(a[0].diagnostics, None);
    assert_eq!(
        b.attempt_log(NS, r.execution_id, 1).await.expect("log"),
        Some(None)
    );
}
