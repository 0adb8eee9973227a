//! The transaction runner every backend operation goes through, written once for every backend
//! (docs/semantics.md#error-classification): bounded retries of the failures that are safe to
//! repeat ([`TransientBackoff`]), the resolution of an ambiguous commit
//! ([`crate::store::ambiguity`]) and the mapping of the final failure to a redacted
//! [`BackendError`]. A backend keeps only what is its driver's: its operation error type, which
//! implements [`TxError`] (its classification of driver errors, by SQLSTATE or server code), its
//! COMMIT, and its runtime's timer. [`tx_methods!`](crate::tx_methods) gives a backend type the
//! `run`, `retry_raw`, `write_resolving_ambiguity` and `error` methods its operations call.

use std::fmt::{Debug, Display};
use std::future::Future;
use std::time::Duration;

use crate::error::{BackendError, ConnectorKind, ExecutionError};
use crate::store::ambiguity::{Attempt, write_resolving_ambiguity};
use crate::store::backoff::TransientBackoff;
use crate::store::redact::redact;

/// What the failure of one attempt at an operation is, as the runner maps it.
#[derive(Debug)]
pub enum Failure {
    /// A domain outcome (stale lease, conflict, encoding…), returned as is.
    Domain(ExecutionError),
    /// The driver, the server or the pool failed: the kind the backend classified and the
    /// driver's message (not yet redacted).
    Driver(ConnectorKind, String),
    /// The connection failed while COMMIT was in flight: the outcome is unknown (the driver's
    /// message).
    CommitUnknown(String),
}

/// A backend's error of one attempt at an operation (its `OpError`), as the runner reads it.
pub trait TxError: Debug + Sized {
    /// The backend label of every [`BackendError`] (docs/semantics.md#error-object `backend`):
    /// `mysql`, `postgres`.
    const BACKEND: &'static str;

    /// True for failures that leave nothing half-done and are worth repeating: deadlocks, lock
    /// waits, connection losses before COMMIT (docs/semantics.md#error-classification).
    fn is_retryable_before_commit(&self) -> bool;

    /// The driver's error when the connection failed during COMMIT (the outcome is unknown);
    /// `None` for every other failure.
    fn commit_unknown(&self) -> Option<&dyn Display>;

    /// An ambiguous commit with `message` (the error after repeated ambiguous commits).
    fn ambiguous(message: &str) -> Self;

    /// What the failure is.
    fn into_failure(self) -> Failure;

    /// The public error for `operation`, redacting `secrets`.
    fn into_execution_error(self, operation: &'static str, secrets: &[String]) -> ExecutionError {
        into_execution_error(self, operation, secrets)
    }
}

/// Builds the public error of `backend` for `operation`, redacting `secrets`.
pub fn backend_error(
    backend: &'static str,
    operation: &'static str,
    kind: ConnectorKind,
    message: &str,
    secrets: &[String],
) -> ExecutionError {
    ExecutionError::Backend(BackendError {
        backend,
        operation,
        kind,
        message: redact(message, secrets),
    })
}

/// Defines a backend's `backend_error(operation, kind, message, secrets)`: [`backend_error`]
/// with the backend label `$backend`.
#[macro_export]
macro_rules! backend_error_fn {
    ($backend:expr) => {
        /// Builds the public error for `operation`, redacting `secrets`.
        pub(crate) fn backend_error(
            operation: &'static str,
            kind: $crate::ConnectorKind,
            message: &str,
            secrets: &[::std::string::String],
        ) -> $crate::ExecutionError {
            $crate::store::tx::backend_error($backend, operation, kind, message, secrets)
        }
    };
}

/// Turns a backend's operation error into the public error for `operation`.
pub fn into_execution_error<E: TxError>(
    e: E,
    operation: &'static str,
    secrets: &[String],
) -> ExecutionError {
    let backend = E::BACKEND;
    match e.into_failure() {
        Failure::Domain(d) => d,
        Failure::Driver(kind, message) => {
            backend_error(backend, operation, kind, &message, secrets)
        }
        Failure::CommitUnknown(message) => backend_error(
            backend,
            operation,
            ConnectorKind::Uncertain,
            &format!("connection lost during COMMIT, outcome unknown: {message}"),
            secrets,
        ),
    }
}

/// The transaction plumbing of one opened backend: the secrets its messages must not carry,
/// and its backoff.
#[derive(Debug, Clone, Copy)]
pub struct Tx<'a> {
    /// The secrets of the DSN ([`crate::store::secrets_of`]).
    pub secrets: &'a [String],
    /// The retry policy of transient failures.
    pub backoff: TransientBackoff,
}

impl Tx<'_> {
    /// The public error for `operation`.
    pub fn error<E: TxError>(&self, e: E, operation: &'static str) -> ExecutionError {
        into_execution_error(e, operation, self.secrets)
    }

    /// Runs a whole-transaction `attempt` with bounded, jittered retries of the failures that
    /// are safe to repeat ([`TxError::is_retryable_before_commit`]; `sleep` is the backend's
    /// timer). An ambiguous commit is never retried here: only the caller can resolve it.
    pub async fn retry_raw<T, E, F, Fut, S, SFut>(&self, attempt: F, sleep: S) -> Result<T, E>
    where
        E: TxError,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        S: Fn(Duration) -> SFut,
        SFut: Future<Output = ()>,
    {
        let backend = E::BACKEND;
        let transient = |e: &E| {
            let retry = e.is_retryable_before_commit();
            if retry {
                tracing::debug!(error = ?e, "retrying a {backend} transaction");
            }
            retry
        };
        self.backoff.run(attempt, transient, sleep).await
    }

    /// [`Self::retry_raw`], then maps the final error for `operation`.
    pub async fn run<T, E, F, Fut, S, SFut>(
        &self,
        operation: &'static str,
        attempt: F,
        sleep: S,
    ) -> Result<T, ExecutionError>
    where
        E: TxError,
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        S: Fn(Duration) -> SFut,
        SFut: Future<Output = ()>,
    {
        self.retry_raw(attempt, sleep)
            .await
            .map_err(|e| self.error(e, operation))
    }

    /// Runs `write` (one whole transaction) with the retry policy; after an ambiguous commit,
    /// `landed` decides ([`write_resolving_ambiguity`]). Errors are labelled `operation`.
    pub async fn write_resolving_ambiguity<T, E, W, WFut, R, RFut, S, SFut>(
        &self,
        operation: &'static str,
        write: W,
        landed: R,
        sleep: S,
    ) -> Result<T, ExecutionError>
    where
        E: TxError,
        W: Fn() -> WFut,
        WFut: Future<Output = Result<T, E>>,
        R: Fn() -> RFut,
        RFut: Future<Output = Result<Option<Result<T, ExecutionError>>, ExecutionError>>,
        S: Fn(Duration) -> SFut,
        SFut: Future<Output = ()>,
    {
        let attempt = || async {
            let e = match self.retry_raw(&write, &sleep).await {
                Ok(v) => return Attempt::Known(Ok(v)),
                Err(e) => e,
            };
            if let Some(cause) = e.commit_unknown() {
                tracing::warn!(error = %cause, "{operation} commit outcome unknown; re-reading");
                return Attempt::Unknown;
            }
            Attempt::Known(Err(self.error(e, operation)))
        };
        let exhausted = || self.error(E::ambiguous("repeated ambiguous commits"), operation);
        write_resolving_ambiguity(attempt, landed, exhausted).await
    }
}

/// The `run`, `retry_raw`, `write_resolving_ambiguity` and `error` methods of a backend type
/// over its [`Tx`]: use inside `impl T { … }` of a type with a method `fn tx(&self) -> Tx<'_>`,
/// naming its operation error type and its runtime's timer (`tokio::time::sleep`).
#[macro_export]
macro_rules! tx_methods {
    ($error:ty, $sleep:path) => {
        /// Runs a whole-transaction `attempt` with the retry policy and maps the final error
        /// (`onestep_core::store::Tx::run`).
        pub(crate) async fn run<T, F, Fut>(
            &self,
            operation: &'static str,
            attempt: F,
        ) -> ::std::result::Result<T, $crate::ExecutionError>
        where
            F: FnMut() -> Fut,
            Fut: ::std::future::Future<Output = ::std::result::Result<T, $error>>,
        {
            self.tx().run(operation, attempt, $sleep).await
        }

        /// Runs a whole-transaction `attempt` with bounded, jittered retries of the failures
        /// that are safe to repeat (`onestep_core::store::Tx::retry_raw`).
        pub(crate) async fn retry_raw<T, F, Fut>(
            &self,
            attempt: F,
        ) -> ::std::result::Result<T, $error>
        where
            F: FnMut() -> Fut,
            Fut: ::std::future::Future<Output = ::std::result::Result<T, $error>>,
        {
            self.tx().retry_raw(attempt, $sleep).await
        }

        /// Runs `write` (one whole transaction) with the retry policy; after an ambiguous
        /// commit, `landed` decides; errors are labelled `operation`
        /// (`onestep_core::store::Tx::write_resolving_ambiguity`).
        pub(crate) async fn write_resolving_ambiguity<T, W, WFut, R, RFut>(
            &self,
            operation: &'static str,
            write: W,
            landed: R,
        ) -> ::std::result::Result<T, $crate::ExecutionError>
        where
            W: Fn() -> WFut,
            WFut: ::std::future::Future<Output = ::std::result::Result<T, $error>>,
            R: Fn() -> RFut,
            RFut: ::std::future::Future<
                    Output = ::std::result::Result<
                        ::std::option::Option<::std::result::Result<T, $crate::ExecutionError>>,
                        $crate::ExecutionError,
                    >,
                >,
        {
            self.tx()
                .write_resolving_ambiguity(operation, write, landed, $sleep)
                .await
        }

        /// The public error of `e` for `operation`, redacted.
        pub(crate) fn error(&self, e: $error, operation: &'static str) -> $crate::ExecutionError {
            self.tx().error(e, operation)
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::test_support::block_on;
    use std::cell::Cell;

    #[derive(Debug)]
    enum Fake {
        Deadlock,
        Syntax(String),
        CommitLost(String),
    }

    impl TxError for Fake {
        const BACKEND: &'static str = "fake";

        fn is_retryable_before_commit(&self) -> bool {
            matches!(self, Fake::Deadlock)
        }
        fn commit_unknown(&self) -> Option<&dyn Display> {
            match self {
                Fake::CommitLost(m) => Some(m),
                _ => None,
            }
        }
        fn ambiguous(message: &str) -> Self {
            Fake::CommitLost(message.to_owned())
        }
        fn into_failure(self) -> Failure {
            match self {
                Fake::Deadlock => Failure::Driver(ConnectorKind::Transient, "deadlock".into()),
                Fake::Syntax(m) => Failure::Driver(ConnectorKind::Permanent, m),
                Fake::CommitLost(m) => Failure::CommitUnknown(m),
            }
        }
    }

    fn tx(secrets: &[String]) -> Tx<'_> {
        Tx {
            secrets,
            backoff: TransientBackoff::default(),
        }
    }

    #[test]
    fn errors_are_labelled_classified_and_redacted() {
        let secrets = vec!["hunter2".to_owned()];
        let e = tx(&secrets).error(Fake::Syntax("bad hunter2".into()), "get");
        let ExecutionError::Backend(b) = e else {
            panic!("{e:?}")
        };
        assert_eq!((b.backend, b.operation), ("fake", "get"));
        assert_eq!(
            (b.kind, b.message.as_str()),
            (ConnectorKind::Permanent, "bad <redacted>")
        );
        let e = tx(&[]).error(Fake::CommitLost("reset".into()), "submit");
        let ExecutionError::Backend(b) = e else {
            panic!("{e:?}")
        };
        assert_eq!(b.kind, ConnectorKind::Uncertain);
        assert_eq!(
            b.message,
            "connection lost during COMMIT, outcome unknown: reset"
        );
    }

    #[test]
    fn retryable_failures_are_retried_and_others_returned() {
        let tries = Cell::new(0u32);
        let r: Result<u8, ExecutionError> = block_on(tx(&[]).run(
            "claim",
            || {
                tries.set(tries.get() + 1);
                let n = tries.get();
                async move { if n < 3 { Err(Fake::Deadlock) } else { Ok(7) } }
            },
            |_| async {},
        ));
        assert_eq!((r.ok(), tries.get()), (Some(7), 3));
        let tries = Cell::new(0u32);
        let r: Result<u8, Fake> = block_on(tx(&[]).retry_raw(
            || {
                tries.set(tries.get() + 1);
                async { Err(Fake::CommitLost("x".into())) }
            },
            |_| async {},
        ));
        assert!(matches!(r, Err(Fake::CommitLost(_))));
        assert_eq!(tries.get(), 1);
    }

    #[test]
    fn repeated_ambiguous_commits_fail_with_the_callers_operation() {
        let writes = Cell::new(0usize);
        let r: Result<u8, ExecutionError> = block_on(tx(&[]).write_resolving_ambiguity(
            "submit_many",
            || {
                writes.set(writes.get() + 1);
                async { Err(Fake::CommitLost("reset".into())) }
            },
            || async { Ok(None) },
            |_| async {},
        ));
        assert_eq!(writes.get(), crate::store::AMBIGUOUS_ROUNDS);
        match r {
            Err(ExecutionError::Backend(b)) => {
                assert_eq!(
                    (b.operation, b.kind),
                    ("submit_many", ConnectorKind::Uncertain)
                );
                assert!(b.message.ends_with("repeated ambiguous commits"), "{b:?}");
            }
            other => panic!("{other:?}"),
        }
        let r: Result<u8, ExecutionError> = block_on(tx(&[]).write_resolving_ambiguity(
            "submit",
            || async { Err(Fake::CommitLost("reset".into())) },
            || async { Ok(Some(Ok(5))) },
            |_| async {},
        ));
        assert_eq!(r.ok(), Some(5));
    }
}
