//! The parts of a backend's completion path that are the same on every backend, as macros over
//! the backend's own types: the domain outcome of its error ([`impl_domain_outcome!`]), the
//! shared methods of its [`CompletionTx`](crate::store::batch::CompletionTx) implementation
//! ([`completion_tx_common!`]) and its `complete_once`/`complete_many_once`
//! ([`complete_once_methods!`]). What stays in the backend is its SQL: the savepoint verbs, the
//! locking read, the set-based writes, BEGIN and COMMIT.
//!
//! [`impl_domain_outcome!`]: crate::impl_domain_outcome
//! [`completion_tx_common!`]: crate::completion_tx_common
//! [`complete_once_methods!`]: crate::complete_once_methods

/// Implements [`DomainOutcome`](crate::store::batch::DomainOutcome) for a backend's error enum
/// `$err`, whose variant `Domain(ExecutionError)` is the domain outcome.
#[macro_export]
macro_rules! impl_domain_outcome {
    ($err:ident) => {
        impl $crate::store::batch::DomainOutcome for $err {
            fn into_domain(self) -> ::std::result::Result<$crate::ExecutionError, Self> {
                match self {
                    $err::Domain(e) => Ok(e),
                    e => Err(e),
                }
            }
        }
    };
}

/// Inside `impl CompletionTx for Completing` (a struct with fields `backend` and `tx`): the
/// error type `$err`, `savepoint` and the delegations `complete_one` (to the backend's
/// `complete_in_tx(tx, lease, completion, now)`) and `write_final_diagnostics` (to the backend's
/// `write_final_diagnostics(tx, written, now)`).
///
/// `savepoint` runs, through the transaction's method `$exec`, the backend's statement verb
/// (`$set`, `$release`, `$rollback_to`) joined at compile time with the savepoint's name
/// (`onestep_item`, `onestep_batch`): a static text, no allocation per item.
#[macro_export]
macro_rules! completion_tx_common {
    ($err:ty, $exec:ident($set:literal, $release:literal, $rollback_to:literal)) => {
        type Error = $err;

        async fn savepoint(
            &mut self,
            step: $crate::store::batch::SavepointStep,
            savepoint: $crate::store::batch::Savepoint,
        ) -> ::std::result::Result<(), $err> {
            use $crate::store::batch::{Savepoint as S, SavepointStep as P};
            let statement = match (savepoint, step) {
                (S::Item, P::Set) => concat!($set, " onestep_item"),
                (S::Item, P::Release) => concat!($release, " onestep_item"),
                (S::Item, P::RollbackTo) => concat!($rollback_to, " onestep_item"),
                (S::Batch, P::Set) => concat!($set, " onestep_batch"),
                (S::Batch, P::Release) => concat!($release, " onestep_batch"),
                (S::Batch, P::RollbackTo) => concat!($rollback_to, " onestep_batch"),
            };
            Ok(self.tx.$exec(statement).await?)
        }

        async fn complete_one(
            &mut self,
            lease: &$crate::execution::LeaseRef,
            completion: &$crate::execution::Completion,
            now: ::chrono::DateTime<::chrono::Utc>,
        ) -> ::std::result::Result<$crate::Execution, $err> {
            self.backend
                .complete_in_tx(self.tx, lease, completion, now)
                .await
        }

        async fn write_final_diagnostics(
            &mut self,
            written: &$crate::store::batch::FinalDiagnostics<'_>,
            now: ::chrono::DateTime<::chrono::Utc>,
        ) -> ::std::result::Result<(), $err> {
            self.backend
                .write_final_diagnostics(self.tx, written, now)
                .await
        }

        async fn park_write(
            &mut self,
            lease: &$crate::execution::LeaseRef,
            wake_at: ::chrono::DateTime<::chrono::Utc>,
            now: ::chrono::DateTime<::chrono::Utc>,
        ) -> ::std::result::Result<::std::option::Option<$crate::Execution>, $err> {
            self.backend.park_in_tx(self.tx, lease, wake_at, now).await
        }
    };
}

/// Inside `impl Backend`: `complete_once(lease, completion)` and `complete_many_once(items)`,
/// one attempt each at a transaction driven by the shared bookkeeping of
/// [`crate::store::batch`]. Each reads "now" once, takes a pooled connection `conn`
/// (`self.conn()`), begins the transaction `tx` with `$begin`, runs the bookkeeping over
/// `$completing` (`b` is the backend) and ends with `$finish`, which commits the `outcome` when
/// it is a success and otherwise rolls back at once, so that no row lock outlives the call
/// (docs/lease-protocol.md#refused-writes).
#[macro_export]
macro_rules! complete_once_methods {
    (
        $err:ty, |$conn:ident| $begin:expr, |$b:ident, $tx:ident| $completing:expr,
        |$outcome:ident| $finish:expr $(,)?
    ) => {
        pub(crate) async fn complete_once(
            &self,
            lease: &$crate::execution::LeaseRef,
            completion: &$crate::execution::Completion,
        ) -> ::std::result::Result<$crate::Execution, $err> {
            let now = self.now();
            let $b = self;
            let mut $conn = $b.conn().await?;
            #[allow(unused_mut)]
            let mut $tx = $begin;
            let $outcome =
                $crate::store::batch::complete_one(&mut $completing, lease, completion, now).await;
            $finish
        }

        pub(crate) async fn complete_many_once(
            &self,
            items: &[($crate::execution::LeaseRef, $crate::execution::Completion)],
        ) -> ::std::result::Result<
            ::std::vec::Vec<::std::result::Result<$crate::Execution, $crate::ExecutionError>>,
            $err,
        > {
            let now = self.now();
            let $b = self;
            let mut $conn = $b.conn().await?;
            #[allow(unused_mut)]
            let mut $tx = $begin;
            let limit = $b.inner.limits.max_result_bytes;
            let $outcome =
                $crate::store::batch::complete_many(&mut $completing, items, now, limit).await;
            $finish
        }

        pub(crate) async fn park_once(
            &self,
            lease: &$crate::execution::LeaseRef,
            park: &$crate::park::Park,
        ) -> ::std::result::Result<$crate::Execution, $err> {
            let now = self.now();
            let $b = self;
            let mut $conn = $b.conn().await?;
            #[allow(unused_mut)]
            let mut $tx = $begin;
            let $outcome = $crate::store::batch::park_one(&mut $completing, lease, park, now).await;
            $finish
        }
    };
}
