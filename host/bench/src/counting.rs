//! A [`LeaseStore`] that counts the worker's storage calls and delegates each to the real
//! backend: how many heartbeat ticks reached the store, with how many leases, and how many
//! claims, completion batches, cancel polls and live-diagnostics writes the drain made. These
//! are counts of calls (each one transaction), not of SQL statements; docs/benchmarks.md says
//! how many statements each call is.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use onestep_core::diagnostics::LiveDiagnostics;
use onestep_core::ports::LeaseStore;
use onestep_core::request::ClaimRequest;
use onestep_core::{
    Completion, Execution, ExecutionError, ExecutionLease, HeartbeatResult, LeaseRef,
};
use serde::Serialize;
use uuid::Uuid;

/// The counters (all monotonic).
#[derive(Debug, Default)]
pub struct StoreCalls {
    claims: AtomicU64,
    claimed: AtomicU64,
    heartbeat_calls: AtomicU64,
    heartbeat_leases: AtomicU64,
    heartbeat_max_leases: AtomicU64,
    single_heartbeats: AtomicU64,
    cancel_polls: AtomicU64,
    complete_batches: AtomicU64,
    live_writes: AtomicU64,
}

/// A snapshot of [`StoreCalls`].
#[derive(Debug, Default, Clone, Copy, Serialize)]
pub struct CallCounts {
    pub claims: u64,
    pub claimed: u64,
    /// `heartbeat_many` calls: one per heartbeat tick with leases in flight (plus retries of
    /// failed heartbeats, none in a healthy run).
    pub heartbeat_calls: u64,
    /// Leases carried by those calls, summed.
    pub heartbeat_leases: u64,
    /// Most leases carried by one call.
    pub heartbeat_max_leases: u64,
    /// Single-lease `heartbeat` calls (the worker does not make them; kept to show it).
    pub single_heartbeats: u64,
    pub cancel_polls: u64,
    pub complete_batches: u64,
    pub live_writes: u64,
}

impl StoreCalls {
    /// The counts now.
    pub fn snapshot(&self) -> CallCounts {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        CallCounts {
            claims: l(&self.claims),
            claimed: l(&self.claimed),
            heartbeat_calls: l(&self.heartbeat_calls),
            heartbeat_leases: l(&self.heartbeat_leases),
            heartbeat_max_leases: l(&self.heartbeat_max_leases),
            single_heartbeats: l(&self.single_heartbeats),
            cancel_polls: l(&self.cancel_polls),
            complete_batches: l(&self.complete_batches),
            live_writes: l(&self.live_writes),
        }
    }
}

/// The counting wrapper.
pub struct Counting {
    inner: Arc<dyn LeaseStore>,
    calls: Arc<StoreCalls>,
}

impl Counting {
    /// Wraps `inner`; the counters are shared with the returned handle.
    pub fn new(inner: Arc<dyn LeaseStore>) -> (Self, Arc<StoreCalls>) {
        let calls = Arc::new(StoreCalls::default());
        (
            Counting {
                inner,
                calls: Arc::clone(&calls),
            },
            calls,
        )
    }
}

fn bump(a: &AtomicU64, by: usize) {
    a.fetch_add(u64::try_from(by).unwrap_or(u64::MAX), Ordering::Relaxed);
}

#[async_trait]
impl LeaseStore for Counting {
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<ExecutionLease>, ExecutionError> {
        bump(&self.calls.claims, 1);
        let leases = self.inner.claim(request).await?;
        bump(&self.calls.claimed, leases.len());
        Ok(leases)
    }

    async fn heartbeat(
        &self,
        lease: &LeaseRef,
        lease_duration_s: f64,
    ) -> Result<HeartbeatResult, ExecutionError> {
        bump(&self.calls.single_heartbeats, 1);
        self.inner.heartbeat(lease, lease_duration_s).await
    }

    async fn heartbeat_many(
        &self,
        leases: &[LeaseRef],
        lease_duration_s: f64,
    ) -> Result<Vec<Result<HeartbeatResult, ExecutionError>>, ExecutionError> {
        bump(&self.calls.heartbeat_calls, 1);
        bump(&self.calls.heartbeat_leases, leases.len());
        self.calls.heartbeat_max_leases.fetch_max(
            u64::try_from(leases.len()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        self.inner.heartbeat_many(leases, lease_duration_s).await
    }

    async fn cancel_requested(&self, leases: &[LeaseRef]) -> Result<Vec<Uuid>, ExecutionError> {
        bump(&self.calls.cancel_polls, 1);
        self.inner.cancel_requested(leases).await
    }

    async fn complete(
        &self,
        lease: &LeaseRef,
        completion: &Completion,
    ) -> Result<Execution, ExecutionError> {
        bump(&self.calls.complete_batches, 1);
        self.inner.complete(lease, completion).await
    }

    async fn complete_many(
        &self,
        items: &[(LeaseRef, Completion)],
    ) -> Result<Vec<Result<Execution, ExecutionError>>, ExecutionError> {
        bump(&self.calls.complete_batches, 1);
        self.inner.complete_many(items).await
    }

    async fn release(&self, lease: &LeaseRef) -> Result<Execution, ExecutionError> {
        self.inner.release(lease).await
    }

    async fn park(
        &self,
        lease: &LeaseRef,
        park: &onestep_core::park::Park,
    ) -> Result<Execution, ExecutionError> {
        self.inner.park(lease, park).await
    }

    async fn parked_attempts(&self, execution_id: Uuid) -> Result<u32, ExecutionError> {
        self.inner.parked_attempts(execution_id).await
    }

    async fn record_live(
        &self,
        items: &[(LeaseRef, LiveDiagnostics)],
    ) -> Result<bool, ExecutionError> {
        bump(&self.calls.live_writes, 1);
        self.inner.record_live(items).await
    }
}

impl CallCounts {
    /// `self - earlier`, field by field (the maximum is kept as is).
    pub fn minus(&self, earlier: &CallCounts) -> CallCounts {
        CallCounts {
            claims: self.claims.saturating_sub(earlier.claims),
            claimed: self.claimed.saturating_sub(earlier.claimed),
            heartbeat_calls: self.heartbeat_calls.saturating_sub(earlier.heartbeat_calls),
            heartbeat_leases: self
                .heartbeat_leases
                .saturating_sub(earlier.heartbeat_leases),
            heartbeat_max_leases: self.heartbeat_max_leases,
            single_heartbeats: self
                .single_heartbeats
                .saturating_sub(earlier.single_heartbeats),
            cancel_polls: self.cancel_polls.saturating_sub(earlier.cancel_polls),
            complete_batches: self
                .complete_batches
                .saturating_sub(earlier.complete_batches),
            live_writes: self.live_writes.saturating_sub(earlier.live_writes),
        }
    }
}
