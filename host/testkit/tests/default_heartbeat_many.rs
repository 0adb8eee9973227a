//! The default `LeaseStore::heartbeat_many` (one `heartbeat` per lease) against the whole
//! conformance suite: a store that implements only the single heartbeat keeps the batch
//! contract (docs/semantics.md#heartbeat). The store is the in-memory reference behind a
//! wrapper that forwards every worker operation except `heartbeat_many`.

use std::sync::Arc;

use async_trait::async_trait;
use onestep_core::execution::{Completion, HeartbeatResult, LeaseRef};
use onestep_core::ports::LeaseStore;
use onestep_core::request::ClaimRequest;
use onestep_core::{Execution, ExecutionError, ExecutionLease, Limits};
use onestep_testkit::suite::{Fixture, FixtureError, FixtureFactory};
use onestep_testkit::{MemoryFactory, MemoryStore};
use uuid::Uuid;

/// Forwards to the memory store; `heartbeat_many` is the trait's default.
struct PerLease(Arc<MemoryStore>);

#[async_trait]
impl LeaseStore for PerLease {
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<ExecutionLease>, ExecutionError> {
        self.0.claim(request).await
    }
    async fn heartbeat(
        &self,
        lease: &LeaseRef,
        lease_duration_s: f64,
    ) -> Result<HeartbeatResult, ExecutionError> {
        self.0.heartbeat(lease, lease_duration_s).await
    }
    async fn cancel_requested(&self, leases: &[LeaseRef]) -> Result<Vec<Uuid>, ExecutionError> {
        self.0.cancel_requested(leases).await
    }
    async fn complete(
        &self,
        lease: &LeaseRef,
        completion: &Completion,
    ) -> Result<Execution, ExecutionError> {
        self.0.complete(lease, completion).await
    }
    async fn complete_many(
        &self,
        items: &[(LeaseRef, Completion)],
    ) -> Result<Vec<Result<Execution, ExecutionError>>, ExecutionError> {
        self.0.complete_many(items).await
    }
    async fn release(&self, lease: &LeaseRef) -> Result<Execution, ExecutionError> {
        self.0.release(lease).await
    }
    async fn park(
        &self,
        lease: &LeaseRef,
        park: &onestep_core::park::Park,
    ) -> Result<Execution, ExecutionError> {
        self.0.park(lease, park).await
    }
    async fn parked_attempts(&self, execution_id: Uuid) -> Result<u32, ExecutionError> {
        self.0.parked_attempts(execution_id).await
    }
}

struct PerLeaseFactory;

#[async_trait]
impl FixtureFactory for PerLeaseFactory {
    async fn create(&self, limits: Limits) -> Result<Fixture, FixtureError> {
        let clock = Arc::new(onestep_testkit::ManualClock::default());
        let store = Arc::new(MemoryStore::new(clock.clone(), limits));
        Ok(Fixture {
            buckets: Arc::new(onestep_core::rate::MemoryBuckets::new(clock.clone())),
            components: store.components(),
            deployments: store.deployments(),
            steps: store.clone(),
            retention: store.clone(),
            store: store.clone(),
            callbacks: Some(store.clone()),
            leases: Arc::new(PerLease(store.clone())),
            probe: store,
            clock,
            limits,
            handle: "memory (per-lease heartbeat)".into(),
        })
    }

    async fn destroy(&self, fixture: Fixture) {
        MemoryFactory.destroy(fixture).await;
    }
}

mod per_lease {
    onestep_testkit::conformance_tests!(Some(super::PerLeaseFactory));
}
