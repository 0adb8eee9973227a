//! The suite's [`Probe`] over a [`MemoryStore`] and the [`MemoryFactory`] that hands out a fresh
//! store per conformance case.

use std::sync::Arc;

use async_trait::async_trait;
use onestep_core::Limits;
use onestep_core::components::ComponentDigest;
use uuid::Uuid;

use super::MemoryStore;
use crate::clock::ManualClock;
use crate::suite::{AttemptRow, Fixture, FixtureError, FixtureFactory, LeaseColumns, Probe};

#[async_trait]
impl Probe for MemoryStore {
    async fn attempts(&self, execution_id: Uuid) -> Vec<AttemptRow> {
        self.attempt_rows(execution_id)
    }

    async fn lease_columns(&self, execution_id: Uuid) -> Option<LeaseColumns> {
        self.lease_columns_of(execution_id)
    }

    async fn count_executions(&self) -> u64 {
        self.len() as u64
    }

    async fn corrupt_component_chunk(&self, digest: &ComponentDigest, seq: u32) -> bool {
        self.components().corrupt_chunk(digest, seq)
    }

    async fn component_rows(&self, digest: &ComponentDigest) -> (u64, u64) {
        self.components().rows(digest)
    }
}

/// Fresh, empty [`MemoryStore`]s on their own [`ManualClock`]; destroying one drops it.
#[derive(Debug, Default, Clone, Copy)]
pub struct MemoryFactory;

#[async_trait]
impl FixtureFactory for MemoryFactory {
    async fn create(&self, limits: Limits) -> Result<Fixture, FixtureError> {
        let clock = Arc::new(ManualClock::default());
        let store = Arc::new(MemoryStore::new(clock.clone(), limits));
        Ok(Fixture {
            buckets: Arc::new(onestep_core::rate::MemoryBuckets::new(clock.clone())),
            components: store.components(),
            deployments: store.deployments(),
            steps: store.clone(),
            retention: store.clone(),
            store: store.clone(),
            callbacks: Some(store.clone()),
            leases: store.clone(),
            probe: store,
            clock,
            limits,
            handle: "memory".into(),
        })
    }

    async fn destroy(&self, fixture: Fixture) {
        drop(fixture);
    }
}
