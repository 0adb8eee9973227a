//! The port implementations: [`ExecutionStore`], [`Retention`] and [`LeaseStore`] for [`PgBackend`],
//! delegating to the operation modules.

use async_trait::async_trait;
use onestep_core::diagnostics::{
    AttemptRecord, LiveDiagnostics, LogTail, PurgeReport, PurgeRequest,
};
use onestep_core::execution::{Completion, HeartbeatResult, LeaseRef};
use onestep_core::ports::{ExecutionStore, LeaseStore, Retention};
use onestep_core::request::{ClaimRequest, ListFilter, PreparedSubmission};
use onestep_core::{Execution, ExecutionError, ExecutionLease, ExecutionPage};
use uuid::Uuid;

use crate::backend::PgBackend;

#[async_trait]
impl ExecutionStore for PgBackend {
    async fn submit(&self, submission: PreparedSubmission) -> Result<Execution, ExecutionError> {
        self.submit_impl(submission).await
    }

    async fn submit_many(
        &self,
        submissions: Vec<PreparedSubmission>,
    ) -> Result<Vec<Result<Execution, ExecutionError>>, ExecutionError> {
        self.submit_many_impl(submissions).await
    }

    async fn get(&self, namespace: &str, id: Uuid) -> Result<Option<Execution>, ExecutionError> {
        self.get_impl(namespace, id).await
    }

    async fn exists_in_any_namespace(&self, id: Uuid) -> Result<bool, ExecutionError> {
        self.exists_in_any_namespace_impl(id).await
    }

    async fn attempts(
        &self,
        namespace: &str,
        id: Uuid,
    ) -> Result<Option<Vec<AttemptRecord>>, ExecutionError> {
        self.attempts_impl(namespace, id).await
    }

    async fn attempt_log(
        &self,
        namespace: &str,
        id: Uuid,
        attempt_no: u32,
    ) -> Result<Option<Option<LogTail>>, ExecutionError> {
        self.attempt_log_impl(namespace, id, attempt_no).await
    }

    async fn list(
        &self,
        namespace: &str,
        filter: &ListFilter,
    ) -> Result<ExecutionPage, ExecutionError> {
        self.list_impl(namespace, filter).await
    }

    async fn cancel(
        &self,
        namespace: &str,
        id: Uuid,
        reason: Option<String>,
    ) -> Result<Option<Execution>, ExecutionError> {
        self.cancel_impl(namespace, id, reason).await
    }
}

#[async_trait]
impl Retention for PgBackend {
    async fn purge(&self, request: &PurgeRequest) -> Result<PurgeReport, ExecutionError> {
        self.purge_impl(request).await
    }
}

#[async_trait]
impl LeaseStore for PgBackend {
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<ExecutionLease>, ExecutionError> {
        self.claim_impl(request).await
    }

    async fn heartbeat(
        &self,
        lease: &LeaseRef,
        lease_duration_s: f64,
    ) -> Result<HeartbeatResult, ExecutionError> {
        self.heartbeat_impl(lease, lease_duration_s).await
    }

    async fn heartbeat_many(
        &self,
        leases: &[LeaseRef],
        lease_duration_s: f64,
    ) -> Result<Vec<Result<HeartbeatResult, ExecutionError>>, ExecutionError> {
        self.heartbeat_many_impl(leases, lease_duration_s).await
    }

    async fn cancel_requested(&self, leases: &[LeaseRef]) -> Result<Vec<Uuid>, ExecutionError> {
        self.cancel_requested_impl(leases).await
    }

    async fn complete(
        &self,
        lease: &LeaseRef,
        completion: &Completion,
    ) -> Result<Execution, ExecutionError> {
        self.complete_impl(lease, completion).await
    }

    async fn complete_many(
        &self,
        items: &[(LeaseRef, Completion)],
    ) -> Result<Vec<Result<Execution, ExecutionError>>, ExecutionError> {
        self.complete_many_impl(items).await
    }

    async fn release(&self, lease: &LeaseRef) -> Result<Execution, ExecutionError> {
        self.release_impl(lease).await
    }

    async fn record_live(
        &self,
        items: &[(LeaseRef, LiveDiagnostics)],
    ) -> Result<bool, ExecutionError> {
        self.record_live_impl(items).await
    }
}
