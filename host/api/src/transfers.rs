//! How many component bytes the API holds in memory at once (docs/http-api.md#deployments): an
//! upload (`POST /v1/components`) reads the whole component before it stores it, and a deploy
//! (`POST /v1/deployments`) reads the stored component back for the load check. Without a bound,
//! one tenant opening hundreds of uploads that stop before their last byte would make the API
//! hold hundreds of times the component size ceiling.
//!
//! Two bounds, both answered with 429 `deploy_busy` (and `Retry-After`) **before** a body is read
//! or a component fetched, never by waiting:
//!
//! * **per namespace**: at most [`TransferLimits::per_namespace`] uploads and deploys of one
//!   namespace at once, so one tenant cannot take the whole budget;
//! * **per server**: a byte budget ([`TransferLimits::budget_bytes`]); each transfer reserves
//!   twice its size (an upload's declared `Content-Length`, or the namespace's ceiling when the
//!   body is chunked; a deploy's stored size): the bytes and one copy of them (the body joined
//!   into one buffer, the component handed to the load check).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use axum::http::StatusCode;
use onestep_core::components::MAX_COMPONENT_BYTES;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::error::{ApiError, code};

/// Default [`TransferLimits::per_namespace`].
pub const DEFAULT_TRANSFERS_PER_NAMESPACE: usize = 2;

/// Default [`TransferLimits::budget_bytes`]: 512 MiB, four transfers of the largest component
/// the store accepts (64 MiB, reserved twice) at once.
pub const DEFAULT_TRANSFER_BUDGET_BYTES: usize = 8 * MAX_COMPONENT_BYTES;

/// The seconds `Retry-After` suggests on a refusal.
pub const RETRY_AFTER_S: u64 = 1;

/// The budget counts in KiB (a semaphore's permits are `u32`).
const UNIT: usize = 1024;

/// The bounds of the component transfers of one API process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransferLimits {
    /// Uploads and deploys of one namespace at once.
    pub per_namespace: usize,
    /// Bytes all transfers together may reserve.
    pub budget_bytes: usize,
}

impl Default for TransferLimits {
    fn default() -> Self {
        TransferLimits {
            per_namespace: DEFAULT_TRANSFERS_PER_NAMESPACE,
            budget_bytes: DEFAULT_TRANSFER_BUDGET_BYTES,
        }
    }
}

/// The transfers in progress of one API process.
#[derive(Debug)]
pub struct TransferGate {
    limits: TransferLimits,
    budget: Arc<Semaphore>,
    running: Arc<Mutex<HashMap<String, usize>>>,
}

/// One transfer's place: its namespace's count and its bytes are given back when it drops.
#[derive(Debug)]
pub struct TransferPermit {
    running: Arc<Mutex<HashMap<String, usize>>>,
    namespace: String,
    _bytes: OwnedSemaphorePermit,
}

impl Drop for TransferPermit {
    fn drop(&mut self) {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = running.get_mut(&self.namespace) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                running.remove(&self.namespace);
            }
        }
    }
}

fn busy(message: String) -> ApiError {
    ApiError::new(StatusCode::TOO_MANY_REQUESTS, code::DEPLOY_BUSY, message)
        .with_retry_after_header(RETRY_AFTER_S)
}

impl TransferGate {
    /// A gate with `limits`.
    pub fn new(limits: TransferLimits) -> Self {
        let units = (limits.budget_bytes / UNIT).min(Semaphore::MAX_PERMITS);
        TransferGate {
            limits,
            budget: Arc::new(Semaphore::new(units)),
            running: Arc::default(),
        }
    }

    /// The limits.
    pub fn limits(&self) -> TransferLimits {
        self.limits
    }

    /// A place for one transfer of `namespace` holding `bytes` (reserved twice), or 429
    /// `deploy_busy` naming the bound that refused it.
    pub fn acquire(&self, namespace: &str, bytes: u64) -> Result<TransferPermit, ApiError> {
        let mut running = self.running.lock().unwrap_or_else(PoisonError::into_inner);
        let now = running.get(namespace).copied().unwrap_or(0);
        if now >= self.limits.per_namespace {
            return Err(busy(format!(
                "namespace {namespace:?} already has {} component uploads or deploys in progress \
                 on this server (at most {} at once); retry when one has finished",
                now, self.limits.per_namespace
            )));
        }
        let reserved = bytes.saturating_mul(2);
        let units = usize::try_from(reserved.div_ceil(UNIT as u64))
            .ok()
            .and_then(|u| u32::try_from(u.max(1)).ok());
        let permit = units.and_then(|u| Arc::clone(&self.budget).try_acquire_many_owned(u).ok());
        let Some(permit) = permit else {
            return Err(busy(format!(
                "this server is holding as many component bytes as it may (a transfer of {bytes} \
                 bytes reserves {reserved}; the component uploads and deploys in progress may \
                 reserve {} bytes together); retry shortly",
                self.limits.budget_bytes
            )));
        };
        running.insert(namespace.to_owned(), now + 1);
        Ok(TransferPermit {
            running: Arc::clone(&self.running),
            namespace: namespace.to_owned(),
            _bytes: permit,
        })
    }
}

impl Default for TransferGate {
    fn default() -> Self {
        TransferGate::new(TransferLimits::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_namespace_and_budget_bounds_refuse_and_give_back() {
        let gate = TransferGate::new(TransferLimits {
            per_namespace: 2,
            budget_bytes: 10 * 1024,
        });
        let a1 = gate.acquire("a", 1024).expect("a1");
        let a2 = gate.acquire("a", 1024).expect("a2");
        let e = gate.acquire("a", 1).expect_err("third of a");
        assert_eq!(e.status(), StatusCode::TOO_MANY_REQUESTS);
        assert!(
            e.body().message.contains("at most 2 at once"),
            "{}",
            e.body().message
        );
        // 4 KiB of 10 reserved: 3 KiB (6 reserved) fits, then nothing more than 0.
        let b = gate.acquire("b", 3 * 1024).expect("b");
        let e = gate.acquire("c", 1).expect_err("budget");
        assert!(e.body().message.contains("10240"), "{}", e.body().message);
        drop(a1);
        drop(b);
        let _c = gate.acquire("c", 1024).expect("c after b");
        let _a3 = gate.acquire("a", 1024).expect("a after a1");
        drop(a2);
        assert!(gate.running.lock().expect("lock").get("a") == Some(&1));
    }
}
