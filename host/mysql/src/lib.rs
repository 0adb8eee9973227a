//! onestep-mysql: the MySQL/MariaDB storage backend of tracked execution, on `mysql_async`.
//!
//! It owns every SQL statement of the product: the table DDL and schema readiness
//! ([`schema`], docs/schema.md), session pinning and the server gate ([`session`], docs/semantics.md#opening-a-backend, docs/semantics.md#sessions), DSN
//! handling ([`dsn`]; the redaction itself is `onestep_core::store::redact`), error classification ([`errors`], docs/semantics.md#error-classification), the client
//! operations (submit, submit_many, get, list, cancel; docs/semantics.md#client-operations) and the worker operations (claim with
//! bounded maintenance, heartbeat (one lease or a set), the cancel poll, complete, complete_many, release; docs/semantics.md#worker-operations), the readiness probe
//! and the benchmark figures ([`probes`]), the benchmarks' seeded history ([`history`]) and throw-away databases
//! ([`scratch`]). One type, [`MySqlBackend`], implements every port of
//! [`onestep_core::ports`] in the operation modules and the [`onestep_core::Backend`] handle
//! (`handle.rs`); its connection pool stays inside this crate.
//!
//! Invariants:
//! * "now" is the injected clock, read once per transaction; the database clock is never used.
//!   Instants are bound as naive UTC `DATETIME(6)` values.
//! * Every worker write is a compare-and-set fenced by the lease token (and status and lease
//!   validity); zero matched rows is [`onestep_core::ExecutionError::StaleLease`]. UPDATE row
//!   counts are *matched* rows (`CLIENT_FOUND_ROWS`).
//! * Every pooled connection is pinned to `time_zone = '+00:00'` and READ COMMITTED, also after
//!   the pool resets it.
//! * Maintenance and claim queries touch only candidate rows (index ranges that exclude finished
//!   history on tables this crate creates); see `docs/schema.md`.
//! * Deadlocks, lock wait timeouts and connection losses before COMMIT are retried with bounded
//!   backoff (`onestep_core::store::TransientBackoff`); an ambiguous submit commit is resolved by re-reading through the id and
//!   the idempotency key.
//! * Error messages never carry the DSN or the password.

pub mod backend;
mod buckets;
mod callbacks;
mod cancel_poll;
mod cap;
mod claim;
mod client_ops;
mod complete_batch;
mod components;
mod deployments;
mod diagnostics;
pub mod dsn;
pub mod errors;
mod fair;
mod faults;
mod fenced_writes;
mod heartbeat_batch;
#[cfg(feature = "bench-support")]
pub mod history;
mod insights;
mod maintenance;
pub mod probes;

mod handle;
mod purge;
pub mod rows;
pub mod schema;
#[cfg(feature = "bench-support")]
pub mod scratch;
pub mod session;
mod steps;
mod transfer;
pub mod upgrade;
mod versions;

pub use backend::MySqlBackend;
pub use onestep_core::store::StoreOptions;
pub use schema::{DdlStyle, SchemaFeatures, SchemaReport};
#[cfg(feature = "bench-support")]
pub use scratch::ScratchDatabase;
pub use session::{Flavor, ServerInfo, SessionState};
