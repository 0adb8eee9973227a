//! onestep-worker: the worker host. It owns the fetch loop (claim per task, bounded by
//! `concurrency` and `batch_size`), the per-task heartbeat ticker (one set-based call per tick
//! extends every in-flight lease; each delivery acts on its own answer: cooperative
//! cancellation, self-fencing on lease loss; docs/semantics.md#heartbeat), the per-task cancel poll (one set-based read of
//! the cancel flags of the in-flight leases, so a cancel does not wait for the heartbeat), the
//! quarantine of a task that cannot run (docs/security.md#one-tenants-bad-deploy: it claims nothing, the
//! other tasks run on), the mapping of a handler's outcome to a
//! completion through the retry policy (docs/semantics.md#failure-handling, docs/semantics.md#timeouts, docs/semantics.md#retry-policies), batched completion writes, and the
//! graceful drain on shutdown (docs/semantics.md#shutdown-and-drain, with the reference's quirk fixed: cancelled in-flight
//! attempts write their `retrying` completion before the worker returns).
//!
//! It sees only the core ports: a [`LeaseStore`](onestep_core::ports::LeaseStore) to talk to
//! storage and a [`TaskRunner`](onestep_core::runner::TaskRunner) to run handlers. It never
//! touches SQL or wasmtime.
//!
//! Invariants: a delivery writes at most one completion; after its lease is lost it writes
//! nothing; no heartbeat of a lease is sent or in flight once its completion starts; on shutdown every claimed lease
//! is either completed, released, or (only if the database is unreachable) left to expire.

mod cancel_poll;
mod completer;
mod delivery;
mod fetch;
mod heartbeat;
mod limiter;
mod observe;
mod outcome;
mod quarantine;
mod settings;
mod worker;

pub use observe::{AttemptEnd, HeartbeatOutcome, NoObserver, WorkerObserver};
pub use outcome::{MAX_GUEST_RETRY_DELAY_S, cancel_error, completion_for};
pub use quarantine::{CLAIM_QUARANTINE_PROBE, Quarantine, QuarantineCause, QuarantineKind};
pub use settings::{TaskBinding, TaskSettings, WorkerSettings};
pub use worker::{RunningTask, TaskSet, Worker, WorkerError, WorkerStats};
