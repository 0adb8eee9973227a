//! [`impl_lease_store!`](crate::impl_lease_store): the [`LeaseStore`](crate::ports::LeaseStore)
//! port of a storage backend, written once. Every backend answers the port the same way —
//! argument checks, the empty-slice shortcuts, then one whole-transaction attempt run with the
//! backend's retry policy under the operation's label (`fetch`, `heartbeat`, `cancel_poll`,
//! `ack`, `release`) — over its own per-attempt methods, which hold its SQL.

#[doc(hidden)]
pub use async_trait::async_trait as __async_trait;
#[doc(hidden)]
pub use uuid::Uuid as __Uuid;

/// Implements [`LeaseStore`](crate::ports::LeaseStore) for the backend type `$backend`, which
/// provides (crate-visible, inherent):
///
/// * `run(&self, operation: &'static str, attempt) -> Result<T, ExecutionError>`: runs a
///   whole-transaction attempt with the retry policy and maps the final error;
/// * `now(&self)`: the injected clock, read once per attempt;
/// * the per-attempt methods `claim_once(&ClaimRequest)` (given the validated request), `heartbeat_many_once(&[LeaseRef], LeaseWindow)`, `cancel_requested_once(&[LeaseRef])`,
///   `complete_once(&LeaseRef, &Completion)`, `complete_many_once(&[(LeaseRef, Completion)])`,
///   `park_once(&LeaseRef, &Park)` (from [`complete_once_methods!`](crate::complete_once_methods)),
///   `release_once(&LeaseRef)` and `parked_attempts_once(Uuid)`, each returning the backend's
///   per-attempt result;
/// * `heartbeat_one(&LeaseRef, f64)` (the single heartbeat, with its own checks) and
///   `write_live(&[(LeaseRef, LiveDiagnostics)])`, answering the port directly.
///
/// It also writes the inherent `heartbeat_leases`, the port's `heartbeat_many` (argument
/// check, empty shortcut, `heartbeat` run), for a backend's own single heartbeat to call.
///
/// `impl_lease_store!(Backend, single_heartbeat: batch)` also writes `heartbeat_one` as a
/// batch of one (for a backend whose single heartbeat has no statement of its own).
#[macro_export]
macro_rules! impl_lease_store {
    ($backend:ty, single_heartbeat: batch) => {
        impl $backend {
            /// The single heartbeat of the port: a batch of one lease.
            pub(crate) async fn heartbeat_one(
                &self,
                lease: &$crate::LeaseRef,
                lease_duration_s: f64,
            ) -> ::std::result::Result<$crate::HeartbeatResult, $crate::ExecutionError> {
                let mut out = self
                    .heartbeat_leases(::std::slice::from_ref(lease), lease_duration_s)
                    .await?;
                out.pop().unwrap_or(Err($crate::ExecutionError::StaleLease(
                    $crate::StaleReason::LeaseInvalid,
                )))
            }
        }

        $crate::impl_lease_store!($backend);
    };
    ($backend:ty) => {
        impl $backend {
            /// `heartbeat_many` of the port, callable without the port's boxed future.
            pub(crate) async fn heartbeat_leases(
                &self,
                leases: &[$crate::LeaseRef],
                lease_duration_s: f64,
            ) -> ::std::result::Result<
                ::std::vec::Vec<
                    ::std::result::Result<$crate::HeartbeatResult, $crate::ExecutionError>,
                >,
                $crate::ExecutionError,
            > {
                $crate::request::validate_lease_duration(lease_duration_s)?;
                if leases.is_empty() {
                    return Ok(::std::vec::Vec::new());
                }
                self.run("heartbeat", || async {
                    let window =
                        $crate::store::lease::LeaseWindow::new(self.now(), lease_duration_s)?;
                    self.heartbeat_many_once(leases, window).await
                })
                .await
            }
        }

        #[$crate::store::lease_port::__async_trait]
        impl $crate::ports::LeaseStore for $backend {
            async fn claim(
                &self,
                request: &$crate::request::ClaimRequest,
            ) -> ::std::result::Result<
                ::std::vec::Vec<$crate::ExecutionLease>,
                $crate::ExecutionError,
            > {
                let request = request.validate()?;
                self.run("fetch", || self.claim_once(&request)).await
            }

            async fn heartbeat(
                &self,
                lease: &$crate::LeaseRef,
                lease_duration_s: f64,
            ) -> ::std::result::Result<$crate::HeartbeatResult, $crate::ExecutionError> {
                self.heartbeat_one(lease, lease_duration_s).await
            }

            async fn heartbeat_many(
                &self,
                leases: &[$crate::LeaseRef],
                lease_duration_s: f64,
            ) -> ::std::result::Result<
                ::std::vec::Vec<
                    ::std::result::Result<$crate::HeartbeatResult, $crate::ExecutionError>,
                >,
                $crate::ExecutionError,
            > {
                self.heartbeat_leases(leases, lease_duration_s).await
            }

            async fn cancel_requested(
                &self,
                leases: &[$crate::LeaseRef],
            ) -> ::std::result::Result<
                ::std::vec::Vec<$crate::store::lease_port::__Uuid>,
                $crate::ExecutionError,
            > {
                if leases.is_empty() {
                    return Ok(::std::vec::Vec::new());
                }
                self.run("cancel_poll", || self.cancel_requested_once(leases))
                    .await
            }

            async fn complete(
                &self,
                lease: &$crate::LeaseRef,
                completion: &$crate::Completion,
            ) -> ::std::result::Result<$crate::Execution, $crate::ExecutionError> {
                completion.validate()?;
                self.run("ack", || self.complete_once(lease, completion))
                    .await
            }

            async fn complete_many(
                &self,
                items: &[($crate::LeaseRef, $crate::Completion)],
            ) -> ::std::result::Result<
                ::std::vec::Vec<::std::result::Result<$crate::Execution, $crate::ExecutionError>>,
                $crate::ExecutionError,
            > {
                if items.is_empty() {
                    return Ok(::std::vec::Vec::new());
                }
                self.run("ack", || self.complete_many_once(items)).await
            }

            async fn release(
                &self,
                lease: &$crate::LeaseRef,
            ) -> ::std::result::Result<$crate::Execution, $crate::ExecutionError> {
                self.run("release", || self.release_once(lease)).await
            }

            async fn park(
                &self,
                lease: &$crate::LeaseRef,
                park: &$crate::park::Park,
            ) -> ::std::result::Result<$crate::Execution, $crate::ExecutionError> {
                park.validate()?;
                self.run("park", || self.park_once(lease, park)).await
            }

            async fn parked_attempts(
                &self,
                execution_id: $crate::store::lease_port::__Uuid,
            ) -> ::std::result::Result<u32, $crate::ExecutionError> {
                self.run("attempts", || self.parked_attempts_once(execution_id))
                    .await
            }

            async fn record_live(
                &self,
                items: &[($crate::LeaseRef, $crate::diagnostics::LiveDiagnostics)],
            ) -> ::std::result::Result<bool, $crate::ExecutionError> {
                self.write_live(items).await
            }
        }
    };
}
