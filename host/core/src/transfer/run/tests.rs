use std::sync::Mutex;

use async_trait::async_trait;
use chrono::TimeDelta;

use super::*;
use crate::store::StoredExecution;
use crate::store::test_support::block_on;
use crate::transfer::{AttemptRow, ExecutionRow, ImportCounts, TraceRow};

#[derive(Debug)]
struct Fixed(DateTime<Utc>);

impl Clock for Fixed {
    fn now(&self) -> DateTime<Utc> {
        self.0
    }
}

/// A store of records in id order.
struct Memory {
    name: &'static str,
    rows: Mutex<BTreeMap<Uuid, ExecutionRecord>>,
}

impl Memory {
    fn new(name: &'static str, records: Vec<ExecutionRecord>) -> Self {
        Memory {
            name,
            rows: Mutex::new(records.into_iter().map(|r| (r.id(), r)).collect()),
        }
    }

    fn all(&self) -> Vec<ExecutionRecord> {
        self.rows.lock().expect("lock").values().cloned().collect()
    }
}

#[async_trait]
impl Transfer for Memory {
    async fn location(&self) -> Result<String, ExecutionError> {
        Ok(self.name.into())
    }

    async fn export_page(
        &self,
        after: Option<Uuid>,
        limit: u32,
    ) -> Result<Vec<ExecutionRecord>, ExecutionError> {
        let rows = self.rows.lock().expect("lock");
        Ok(rows
            .values()
            .filter(|r| after.is_none_or(|a| r.id() > a))
            .take(limit as usize)
            .cloned()
            .collect())
    }

    async fn import(&self, records: &[ExecutionRecord]) -> Result<ImportCounts, ExecutionError> {
        let mut rows = self.rows.lock().expect("lock");
        let mut out = ImportCounts::default();
        for r in records {
            match rows.entry(r.id()) {
                std::collections::btree_map::Entry::Occupied(_) => out.skipped.add(r.counts()),
                std::collections::btree_map::Entry::Vacant(v) => {
                    out.copied.add(r.counts());
                    v.insert(r.clone());
                }
            }
        }
        Ok(out)
    }

    async fn live_leases(
        &self,
        now: DateTime<Utc>,
    ) -> Result<BTreeMap<String, u64>, ExecutionError> {
        let mut out = BTreeMap::new();
        for r in self.rows.lock().expect("lock").values() {
            if r.execution.lease_expires_at.is_some_and(|at| at > now) {
                *out.entry(r.execution.stored.status.clone()).or_insert(0) += 1;
            }
        }
        Ok(out)
    }

    async fn counts(&self) -> Result<TableCounts, ExecutionError> {
        let mut out = TableCounts::default();
        for r in self.rows.lock().expect("lock").values() {
            out.add(r.counts());
        }
        Ok(out)
    }
}

fn now() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).expect("instant")
}

fn record(n: u128, status: &str, lease: Option<i64>) -> ExecutionRecord {
    ExecutionRecord {
        execution: ExecutionRow {
            stored: StoredExecution {
                id: Uuid::from_u128(n),
                namespace: "ns".into(),
                task_name: "t".into(),
                status: status.into(),
                payload: Some(serde_json::json!({"n": n as u64})),
                metadata: None,
                result: None,
                error: None,
                attempts: 0,
                available_at: now(),
                started_at: None,
                finished_at: None,
                cancel_requested_at: None,
                expires_at: None,
                created_at: now(),
                version: 1,
                priority: 5,
                fairness_key: None,
            },
            idempotency_key: None,
            submission_digest: None,
            lease_token: lease.map(|_| Uuid::from_u128(n + 1000)),
            lease_expires_at: lease.map(|s| now() + TimeDelta::seconds(s)),
            worker_id: None,
            cancel_reason: None,
            updated_at: now(),
        },
        attempts: Vec::new(),
        diagnostics: Vec::new(),
        trace: Some(TraceRow {
            execution_id: Uuid::from_u128(n),
            traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into(),
            created_at: now(),
        }),
    }
}

fn opts(release_leases: bool) -> CopyOptions {
    CopyOptions {
        page_size: 2,
        release_leases,
        dry_run: false,
    }
}

#[test]
fn every_record_is_copied_page_by_page_and_a_rerun_skips_them_all() {
    let source = Memory::new("a", (1..=5).map(|n| record(n, "succeeded", None)).collect());
    let target = Memory::new("b", Vec::new());
    let mut pages = Vec::new();
    let report = block_on(copy(&source, &target, &Fixed(now()), opts(false), |p| {
        pages.push(p.executions)
    }))
    .expect("copies");
    assert_eq!(pages, [2, 2, 1]);
    assert_eq!(target.all(), source.all());
    assert_eq!((report.copied.executions, report.copied.traces), (5, 5));
    assert_eq!(report.target, Some(report.source));

    let again =
        block_on(copy(&source, &target, &Fixed(now()), opts(false), |_| {})).expect("copies again");
    assert_eq!(again.copied, TableCounts::default());
    assert_eq!(again.skipped.executions, 5);
}

#[test]
fn live_leases_are_refused_unless_released_and_then_written_expired() {
    let source = Memory::new(
        "a",
        vec![
            record(1, "running", Some(30)),
            record(2, "cancel_requested", Some(30)),
            record(3, "running", Some(-30)),
        ],
    );
    let target = Memory::new("b", Vec::new());
    let err =
        block_on(copy(&source, &target, &Fixed(now()), opts(false), |_| {})).expect_err("refused");
    assert_eq!(
        err.to_string(),
        "the source has 2 execution(s) with a live lease (cancel_requested: 1, running: 1): \
         workers are still running them"
    );
    assert!(target.all().is_empty());

    let report =
        block_on(copy(&source, &target, &Fixed(now()), opts(true), |_| {})).expect("copies");
    assert_eq!(report.released.values().sum::<u64>(), 2);
    let copied = target.all();
    assert_eq!(copied[0].execution.lease_expires_at, Some(now()));
    assert_eq!(copied[1].execution.lease_expires_at, Some(now()));
    // An already expired lease is copied as it is; nothing else changes.
    assert_eq!(copied[2], source.all()[2]);
    assert_eq!(
        copied[0].execution.lease_token,
        source.all()[0].execution.lease_token
    );
}

#[test]
fn a_store_is_not_copied_onto_itself_and_a_dry_run_writes_nothing() {
    let source = Memory::new("same", vec![record(1, "queued", None)]);
    let target = Memory::new("same", Vec::new());
    let err =
        block_on(copy(&source, &target, &Fixed(now()), opts(false), |_| {})).expect_err("refused");
    assert!(
        matches!(err, CopyError::SameStore(ref s) if s == "same"),
        "{err}"
    );

    let target = Memory::new("other", Vec::new());
    let dry = CopyOptions {
        dry_run: true,
        ..opts(false)
    };
    let report = block_on(copy(&source, &target, &Fixed(now()), dry, |_| {})).expect("dry run");
    assert_eq!(report.copied.executions, 1);
    assert_eq!(report.target, None);
    assert!(target.all().is_empty());

    let bad = CopyOptions {
        page_size: 0,
        ..opts(false)
    };
    let err = block_on(copy(&source, &target, &Fixed(now()), bad, |_| {})).expect_err("bad");
    assert!(matches!(err, CopyError::Invalid(_)), "{err}");
}

fn attempt(execution: u128, no: i64) -> AttemptRow {
    AttemptRow {
        id: Uuid::from_u128(execution * 100 + no as u128),
        execution_id: Uuid::from_u128(execution),
        attempt_no: no,
        lease_token: Uuid::from_u128(7),
        worker_id: "w".into(),
        status: "failed".into(),
        error: None,
        started_at: now(),
        heartbeat_at: now(),
        finished_at: None,
    }
}

#[test]
fn assemble_gathers_child_rows_by_execution_and_orders_attempts() {
    let (one, two) = (record(1, "succeeded", None), record(2, "succeeded", None));
    let traces = vec![
        two.trace.clone().expect("trace"),
        record(9, "x", None).trace.expect("trace"),
    ];
    let attempts = vec![attempt(2, 2), attempt(1, 1), attempt(2, 1), attempt(9, 1)];
    let records = crate::transfer::assemble(
        vec![one.execution.clone(), two.execution.clone()],
        attempts,
        Vec::new(),
        traces,
    );
    assert_eq!(records.len(), 2);
    assert_eq!(records[0].id(), Uuid::from_u128(1));
    assert_eq!(records[0].attempts, vec![attempt(1, 1)]);
    assert_eq!(records[0].trace, None);
    assert_eq!(records[1].attempts, vec![attempt(2, 1), attempt(2, 2)]);
    assert_eq!(records[1].trace, two.trace);
}

#[test]
fn an_import_plan_skips_known_and_repeated_ids_and_rows_of_missing_tables() {
    let mut one = record(1, "succeeded", None);
    one.attempts = vec![attempt(1, 1), attempt(1, 2)];
    let page = vec![
        one.clone(),
        record(2, "queued", None),
        one,
        record(3, "queued", None),
    ];
    let existing: std::collections::HashSet<Uuid> = [Uuid::from_u128(2)].into();
    let all = crate::transfer::ChildTables {
        diagnostics: true,
        traces: true,
    };
    let plan = crate::transfer::plan_import(&page, &existing, all);
    let fresh: Vec<Uuid> = plan.fresh.iter().map(|r| r.id()).collect();
    assert_eq!(fresh, [Uuid::from_u128(1), Uuid::from_u128(3)]);
    assert_eq!(plan.counts.copied.executions, 2);
    assert_eq!(plan.counts.copied.attempts, 2);
    assert_eq!(plan.counts.copied.traces, 2);
    assert_eq!(plan.counts.skipped.executions, 2);
    assert_eq!(plan.counts.skipped.attempts, 2);
    assert_eq!(plan.attempts().count(), 2);
    assert_eq!(plan.traces().count(), 2);

    let no_traces = crate::transfer::ChildTables {
        diagnostics: true,
        traces: false,
    };
    let plan = crate::transfer::plan_import(&page, &existing, no_traces);
    assert_eq!(plan.traces().count(), 0);
    assert_eq!(plan.counts.copied.traces, 0);
    assert_eq!(plan.counts.skipped.traces, 4);
    assert_eq!(plan.executions().count(), 2);
}
