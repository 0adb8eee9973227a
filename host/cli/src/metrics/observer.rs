//! [`Metrics`] as the worker's [`WorkerObserver`]: claims, attempts, heartbeats, quarantine and
//! store errors become counters, gauges and histograms (docs/observability.md).

use std::time::Duration;

use onestep_core::ExecutionError;
use onestep_worker::{AttemptEnd, HeartbeatOutcome, QuarantineCause, WorkerObserver};

use super::*;

impl WorkerObserver for Metrics {
    fn claimed(&self, task: &str, leases: usize, elapsed: Duration) {
        self.store_answered(task);
        let labels = self.task(task);
        self.claim_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
        if leases > 0 {
            self.fetched.get_or_create(&labels).inc_by(leases as u64);
        }
    }

    fn rate_limited(&self, task: &str, _wait: Duration) {
        self.rate_limit_waits.get_or_create(&self.task(task)).inc();
    }

    fn attempt_started(&self, task: &str, queue_wait: Duration) {
        let labels = self.task(task);
        self.inflight.get_or_create(&labels).inc();
        self.queue_wait
            .get_or_create(&labels)
            .observe(queue_wait.as_secs_f64());
    }

    fn attempt_finished(&self, task: &str, end: &AttemptEnd) {
        let labels = self.task(task);
        self.inflight.get_or_create(&labels).dec();
        self.duration
            .get_or_create(&labels)
            .observe(end.duration.as_secs_f64());
        if end.lease_lost {
            self.lease_lost.get_or_create(&labels).inc();
        }
        let status = |s: &str| StatusLabels {
            app: self.app.clone(),
            task: task.into(),
            status: s.into(),
        };
        match end.status {
            Some(ExecutionStatus::Succeeded) => {
                self.processed.get_or_create(&status("succeeded")).inc();
            }
            Some(ExecutionStatus::Failed) => {
                self.processed.get_or_create(&status("failed")).inc();
            }
            Some(ExecutionStatus::Retrying) => {
                self.retried.get_or_create(&labels).inc();
            }
            Some(ExecutionStatus::Cancelled) => {
                self.cancelled.get_or_create(&labels).inc();
            }
            _ => {}
        }
        if let Some((kind, exception_type)) = &end.failure {
            self.failures
                .get_or_create(&FailureLabels {
                    app: self.app.clone(),
                    task: task.into(),
                    failure_kind: kind.as_str().into(),
                    exception_type: exception_type.as_str().into(),
                })
                .inc();
        }
    }

    fn parked(&self, task: &str, _sleep: Duration) {
        self.sleeps.parked(&self.task(task));
    }

    fn heartbeat(&self, task: &str, outcome: HeartbeatOutcome) {
        if outcome != HeartbeatOutcome::Error {
            self.store_answered(task);
        }
        self.heartbeats
            .get_or_create(&ResultLabels {
                app: self.app.clone(),
                task: task.into(),
                result: outcome.as_str().into(),
            })
            .inc();
    }

    fn quarantine(&self, task: &str, cause: Option<&QuarantineCause>) {
        self.quarantine.record(&self.app, task, cause);
    }

    fn store_error(&self, _task: &str, error: &ExecutionError) {
        let (operation, class) = match error {
            ExecutionError::Backend(b) => (b.operation, b.kind.as_str()),
            other => ("other", other.code()),
        };
        self.db_errors
            .get_or_create(&DbErrorLabels {
                app: self.app.clone(),
                operation: operation.into(),
                class: class.into(),
            })
            .inc();
    }
}
