//! `onestep copy` between two real stores (docs/cli.md#onestep-copy, docs/semantics.md#copying-a-store):
//! a source seeded through the ports with every shape a store holds (a keyed success with a
//! trace context and final diagnostics, a retry then a failure, a queued cancel, a queued row,
//! a running execution with a live lease and live diagnostics, a cancel request under a live
//! lease) is copied; a live lease is refused without releasing; every column of every row of the
//! four tables is compared (the lease expiry of the two live rows excepted: it becomes the copy's
//! instant); a second copy skips everything; and the target's first claim reclaims the released
//! rows (T7: the running one is retried, its first attempt `lease_lost`; T6: the cancel request
//! ends `cancelled`). The caller opens both backends (traces on, tables created) on empty
//! databases, of the same kind or not.

use chrono::{DateTime, TimeDelta, Utc};
use onestep_core::Backend;
use onestep_core::diagnostics::{
    AttemptDiagnostics, AttemptProgress, LiveDiagnostics, LogLine, LogTail, RunFacts,
};
use onestep_core::transfer::{CopyError, CopyOptions, ExecutionRecord, copy};
use onestep_core::{AttemptStatus, Completion, ExecutionStatus, SystemClock};
use serde_json::json;
use uuid::Uuid;

use crate::builders::{claim, handler_error, keyed, prepared};

const NS: &str = "copy-ns";
const TASK: &str = "t";
const TRACE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

/// The ids of the seeded executions whose lease is live.
#[derive(Debug, Clone, Copy)]
pub struct Seeded {
    /// `running`, lease valid for five minutes.
    pub running: Uuid,
    /// `cancel_requested`, lease valid for five minutes.
    pub cancel_requested: Uuid,
}

fn diagnostics(message: Option<&str>) -> Box<AttemptDiagnostics> {
    let at = Utc::now();
    Box::new(AttemptDiagnostics {
        message: message.map(str::to_owned),
        progress: Some(AttemptProgress {
            done: 3,
            total: 7,
            note: "three of seven".into(),
            at,
        }),
        log: Some(LogTail {
            total_lines: 2,
            lines: vec![
                LogLine {
                    seq: 1,
                    at,
                    level: "info".into(),
                    message: "starting".into(),
                },
                LogLine {
                    seq: 2,
                    at,
                    level: "stderr".into(),
                    message: "done — ünïcode".into(),
                },
            ],
        }),
        facts: RunFacts {
            trap_kind: message.map(|_| "trap".into()),
            component_digest: Some("ab".repeat(32)),
            fuel_consumed: Some(12_345),
            peak_memory_bytes: Some(1 << 20),
        },
    })
}

/// Seeds `store` with every shape (the module's list) and answers the two live ones.
pub async fn seed(store: &dyn Backend) -> Seeded {
    let (ex, leases) = (store.executions(), store.leases());
    let take = async |lease_s: f64| {
        let mut got = leases
            .claim(&claim(NS, TASK, 1, lease_s, "w-source"))
            .await
            .expect("claim");
        assert_eq!(got.len(), 1, "one claimable row");
        got.remove(0)
    };

    // A keyed success with metadata, a trace context and final diagnostics.
    let mut sub = keyed(NS, TASK, "key-a", json!({"n": 1, "f": 1.5, "s": "ä"}));
    sub.metadata = json!({"owner": "copy", "nested": {"k": [1, 2, 3]}});
    sub.trace_parent = Some(TRACE.into());
    sub.expires_at = Some(Utc::now() + TimeDelta::days(3));
    // Its priority and fairness key travel with it (docs/semantics.md#priority-and-fairness-key).
    sub.priority = 2;
    sub.fairness_key = Some("tenant-copy".into());
    ex.submit(sub).await.expect("submit a");
    let l = take(30.0).await;
    let mut done = Completion::succeeded(json!({"answer": 42, "list": [true, null]}));
    done.diagnostics = Some(diagnostics(None));
    leases
        .complete(&l.lease_ref(), &done)
        .await
        .expect("complete a");

    // A retry, then a failure with diagnostics.
    ex.submit(prepared(NS, TASK, json!({"n": 2})))
        .await
        .expect("submit b");
    let l = take(30.0).await;
    leases
        .complete(
            &l.lease_ref(),
            &Completion::retrying(handler_error("Flaky"), 0.0),
        )
        .await
        .expect("retry b");
    let l = take(30.0).await;
    assert_eq!(l.attempt_no, 2);
    let mut failed = Completion::failed(handler_error("Broken"));
    failed.diagnostics = Some(diagnostics(Some("it broke")));
    leases
        .complete(&l.lease_ref(), &failed)
        .await
        .expect("fail b");

    // Cancelled while queued.
    let c = ex
        .submit(keyed(NS, TASK, "key-c", json!({"n": 3})))
        .await
        .expect("submit c");
    ex.cancel(NS, c.id, Some("no longer needed".into()))
        .await
        .expect("cancel c");

    // Running under a live lease, with live diagnostics.
    ex.submit(prepared(NS, TASK, json!({"n": 4})))
        .await
        .expect("submit d");
    let running = take(300.0).await;
    let live = LiveDiagnostics {
        progress: Some(AttemptProgress {
            done: 1,
            total: 0,
            note: String::new(),
            at: Utc::now(),
        }),
        log: None,
    };
    leases
        .record_live(&[(running.lease_ref(), live)])
        .await
        .expect("live diagnostics");

    // A cancel requested under a live lease.
    ex.submit(prepared(NS, TASK, json!({"n": 5})))
        .await
        .expect("submit e");
    let cancelling = take(300.0).await;
    let e = ex
        .cancel(NS, cancelling.execution.id, Some("stop".into()))
        .await
        .expect("cancel e")
        .expect("present");
    assert_eq!(e.status, ExecutionStatus::CancelRequested);

    // Queued, never claimed.
    ex.submit(keyed(NS, TASK, "key-f", json!({"n": 6})))
        .await
        .expect("submit f");
    Seeded {
        running: running.execution.id,
        cancel_requested: cancelling.execution.id,
    }
}

/// Every record of `store`, its diagnostics sorted by attempt id.
pub async fn everything(store: &dyn Backend) -> Vec<ExecutionRecord> {
    let mut all = store
        .transfer()
        .export_page(None, 10_000)
        .await
        .expect("export");
    for r in &mut all {
        r.diagnostics.sort_by_key(|d| d.attempt_id);
    }
    all.sort_by_key(ExecutionRecord::id);
    all
}

fn opts(release_leases: bool) -> CopyOptions {
    CopyOptions {
        page_size: 2,
        release_leases,
        dry_run: false,
    }
}

/// The whole case (the module's description) from `source` to `target`.
pub async fn round_trip(source: &dyn Backend, target: &dyn Backend) {
    let seeded = seed(source).await;
    let (from, to) = (source.transfer(), target.transfer());

    let same = copy(
        from.as_ref(),
        from.as_ref(),
        &SystemClock,
        opts(true),
        |_| {},
    )
    .await;
    assert!(matches!(same, Err(CopyError::SameStore(_))), "{same:?}");

    let refused = copy(
        from.as_ref(),
        to.as_ref(),
        &SystemClock,
        opts(false),
        |_| {},
    )
    .await;
    match refused {
        Err(CopyError::LiveLeases { total, by_status }) => {
            assert_eq!(
                (total, by_status.as_str()),
                (2, "cancel_requested: 1, running: 1")
            );
        }
        other => panic!("expected a live-lease refusal, got {other:?}"),
    }
    assert_eq!(
        to.counts().await.expect("counts").executions,
        0,
        "nothing written"
    );

    let before: DateTime<Utc> = Utc::now();
    let mut pages = 0;
    let report = copy(from.as_ref(), to.as_ref(), &SystemClock, opts(true), |_| {
        pages += 1
    })
    .await
    .expect("copy");
    let after = Utc::now();
    assert_eq!(pages, 3, "six executions in pages of two");
    assert_eq!(report.copied, report.source);
    assert_eq!(
        (
            report.copied.executions,
            report.copied.attempts,
            report.copied.traces
        ),
        (6, 5, 1)
    );
    assert_eq!(report.copied.diagnostics, 3);
    assert_eq!(report.released.values().sum::<u64>(), 2);
    assert_eq!(report.target, Some(report.source));

    // Every column of every row, the released leases' expiry excepted.
    let (src, dst) = (everything(source).await, everything(target).await);
    assert_eq!(src.len(), 6);
    assert_eq!(src.len(), dst.len());
    for records in [&src, &dst] {
        assert!(
            records.iter().any(|r| r.execution.stored.priority == 2
                && r.execution.stored.fairness_key.as_deref() == Some("tenant-copy")),
            "the scheduled row is read back with its priority and key"
        );
    }
    for (s, d) in src.iter().zip(&dst) {
        let mut expected = s.clone();
        if [seeded.running, seeded.cancel_requested].contains(&s.id()) {
            let at = d.execution.lease_expires_at.expect("lease kept, expired");
            assert!(before <= at && at <= after, "released at the copy: {at}");
            assert!(s.execution.lease_expires_at.is_some_and(|x| x > after));
            expected.execution.lease_expires_at = Some(at);
        }
        assert_eq!(d, &expected, "execution {}", s.id());
    }
    // And through the client port, as an API would show them.
    for s in &src {
        let id = s.id();
        let (a, b) = (source.executions(), target.executions());
        assert_eq!(
            b.get(NS, id).await.expect("get"),
            a.get(NS, id).await.expect("get")
        );
        assert_eq!(
            b.attempts(NS, id).await.expect("attempts"),
            a.attempts(NS, id).await.expect("attempts")
        );
    }
    let replay = target
        .executions()
        .submit(keyed(NS, TASK, "key-f", json!({"n": 6})))
        .await
        .expect("an idempotent replay on the target");
    assert!(src.iter().any(|r| r.id() == replay.id), "the copied key");

    // Again: everything is there already.
    let again = copy(from.as_ref(), to.as_ref(), &SystemClock, opts(true), |_| {})
        .await
        .expect("copy again");
    assert_eq!(again.copied, Default::default());
    assert_eq!(again.skipped, report.copied);

    // The target's first claim reclaims the released leases (T7, T6) and takes the work.
    let claimed = target
        .leases()
        .claim(&claim(NS, TASK, 10, 30.0, "w-target"))
        .await
        .expect("claim on the target");
    assert!(
        claimed
            .iter()
            .any(|l| l.execution.id == seeded.running && l.attempt_no == 2),
        "the running execution is retried: {claimed:?}"
    );
    let tx = target.executions();
    let attempts = tx
        .attempts(NS, seeded.running)
        .await
        .expect("attempts")
        .expect("present");
    assert_eq!(attempts[0].status, AttemptStatus::LeaseLost.as_str());
    let cancelled = tx
        .get(NS, seeded.cancel_requested)
        .await
        .expect("get")
        .expect("present");
    assert_eq!(cancelled.status, ExecutionStatus::Cancelled);
}
