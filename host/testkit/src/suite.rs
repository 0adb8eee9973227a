//! The conformance-suite harness: fixtures, the probe port, and the runner.
//!
//! Every case gets a fresh fixture from the factory (for SQL backends: a new database with new
//! tables), runs inside its own task (a panic fails only that case), and the fixture is destroyed
//! afterwards whatever happened.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use futures::stream::{self, StreamExt};
use onestep_core::error_object::ErrorObject;
use onestep_core::ports::{ExecutionStore, LeaseStore};
use onestep_core::{AttemptStatus, Limits};
use uuid::Uuid;

use crate::clock::ManualClock;

/// One attempt row as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptRow {
    /// Attempt id.
    pub id: Uuid,
    /// 1-based number.
    pub attempt_no: u32,
    /// Status.
    pub status: AttemptStatus,
    /// The lease token issued with it.
    pub lease_token: Uuid,
    /// Worker id.
    pub worker_id: String,
    /// Error object (SQL NULL and JSON null both `None`).
    pub error: Option<ErrorObject>,
    /// Claim instant.
    pub started_at: DateTime<Utc>,
    /// Last heartbeat instant.
    pub heartbeat_at: DateTime<Utc>,
    /// End instant.
    pub finished_at: Option<DateTime<Utc>>,
}

/// The execution columns the domain object does not expose.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseColumns {
    /// Current lease token.
    pub lease_token: Option<Uuid>,
    /// Current lease expiry.
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// Worker holding the lease.
    pub worker_id: Option<String>,
    /// Last accepted cancel reason.
    pub cancel_reason: Option<String>,
    /// Last mutation instant.
    pub updated_at: DateTime<Utc>,
}

/// Backend-specific read access used by the suite to check what the domain API hides.
#[async_trait]
pub trait Probe: Send + Sync {
    /// All attempts of an execution, by attempt number.
    async fn attempts(&self, execution_id: Uuid) -> Vec<AttemptRow>;
    /// The hidden columns of one execution (`None` when absent).
    async fn lease_columns(&self, execution_id: Uuid) -> Option<LeaseColumns>;
    /// Number of execution rows.
    async fn count_executions(&self) -> u64;
}

/// A fresh, empty store plus its clock and probe.
#[derive(Clone)]
pub struct Fixture {
    /// Client-side port.
    pub store: Arc<dyn ExecutionStore>,
    /// Worker-side port.
    pub leases: Arc<dyn LeaseStore>,
    /// Hidden-column access.
    pub probe: Arc<dyn Probe>,
    /// The store's clock.
    pub clock: Arc<ManualClock>,
    /// The store's limits.
    pub limits: Limits,
    /// Opaque handle the factory uses to destroy the fixture (e.g. a database name).
    pub handle: String,
}

/// Creates and destroys fixtures.
#[async_trait]
pub trait FixtureFactory: Send + Sync {
    /// A fresh store with `limits` and a manual clock.
    async fn create(&self, limits: Limits) -> Result<Fixture, String>;
    /// Releases everything the fixture holds (drops its database).
    async fn destroy(&self, fixture: Fixture);
}

/// A conformance case.
pub type CaseFn = fn(Fixture) -> BoxFuture<'static, ()>;

/// A named case with the limits its fixture needs.
pub struct Case {
    /// Unique name.
    pub name: &'static str,
    /// Limits for the fixture (default limits unless the case tests them).
    pub limits: Limits,
    /// The body; panics on failure.
    pub run: CaseFn,
}

/// The outcome of a suite run.
#[derive(Debug, Default)]
pub struct SuiteReport {
    /// Names of passed cases.
    pub passed: Vec<String>,
    /// `(name, failure message)` of failed cases.
    pub failed: Vec<(String, String)>,
}

/// Every conformance case.
pub fn all_cases() -> Vec<Case> {
    crate::cases::all()
}

/// Runs the cases whose name contains `filter` (all when `None`), `parallelism` at a time.
pub async fn run_suite(
    factory: Arc<dyn FixtureFactory>,
    label: &str,
    filter: Option<&str>,
    parallelism: usize,
) -> SuiteReport {
    let cases: Vec<Case> = all_cases()
        .into_iter()
        .filter(|c| filter.is_none_or(|f| c.name.contains(f)))
        .collect();
    let results: Vec<(String, Result<(), String>)> = stream::iter(cases)
        .map(|case| {
            let factory = factory.clone();
            let label = label.to_owned();
            async move {
                let started = Instant::now();
                let outcome = match factory.create(case.limits).await {
                    Err(e) => Err(format!("fixture: {e}")),
                    Ok(fx) => {
                        let run = tokio::spawn((case.run)(fx.clone()));
                        let r = match run.await {
                            Ok(()) => Ok(()),
                            Err(e) => Err(panic_message(e)),
                        };
                        factory.destroy(fx).await;
                        r
                    }
                };
                let mark = if outcome.is_ok() { "ok" } else { "FAILED" };
                eprintln!(
                    "[{label}] {:<48} {mark} ({:.1}s)",
                    case.name,
                    started.elapsed().as_secs_f64()
                );
                (case.name.to_owned(), outcome)
            }
        })
        .buffer_unordered(parallelism.max(1))
        .collect()
        .await;
    let mut report = SuiteReport::default();
    for (name, r) in results {
        match r {
            Ok(()) => report.passed.push(name),
            Err(m) => report.failed.push((name, m)),
        }
    }
    report
}

fn panic_message(e: tokio::task::JoinError) -> String {
    match e.try_into_panic() {
        Ok(p) => p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| (*s).to_owned()))
            .unwrap_or_else(|| "panic".into()),
        Err(e) => e.to_string(),
    }
}
