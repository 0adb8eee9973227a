//! onestep-postgres: the PostgreSQL storage backend of tracked execution, on `tokio-postgres`
//! with a `deadpool-postgres` pool (docs/postgres.md).
//!
//! It owns every PostgreSQL statement of the product: the table DDL, compatible with the
//! reference's PostgreSQL tables, and schema readiness under `pg_advisory_xact_lock`
//! ([`schema`]), DSN handling and TLS modes ([`dsn`]; redaction: `onestep_core::store::redact`), error classification
//! by SQLSTATE ([`errors`]), the client operations (submit, submit_many, get, list, cancel) and
//! the worker operations (claim with bounded maintenance, heartbeat one lease or a set, the
//! cancel poll, complete, complete_many, release), attempt diagnostics, the submit's trace
//! context and purge (docs/postgres.md#diagnostics-and-traces), the readiness probe and the
//! benchmark figures ([`probes`]). One type, [`PgBackend`], implements every port of
//! [`onestep_core::ports`] in the operation modules and the [`onestep_core::Backend`] handle
//! (`handle.rs`).
//!
//! Invariants:
//! * "now" is the injected clock, read once per transaction; the database clock is never used.
//!   Instants are `timestamptz`, bound and read as UTC.
//! * Every worker write is fenced by the lease token (and status and lease validity); zero
//!   matched rows is [`onestep_core::ExecutionError::StaleLease`], and the transaction (or the
//!   item's savepoint) is rolled back at once.
//! * Every session runs with `TimeZone=UTC` and `default_transaction_isolation=read committed`
//!   (startup options, so they survive every reuse of a pooled connection).
//! * Serialization failures, deadlocks, lock timeouts, cancelled statements and connection
//!   losses before COMMIT are retried with bounded backoff; an ambiguous submit commit is
//!   resolved by re-reading through the id and the idempotency key.
//! * Error messages never carry the DSN or the password.

pub mod backend;
mod buckets;
mod callbacks;
mod cap;
pub mod changes;
mod client_ops;
mod components;
mod deployments;
mod diagnostics;
pub mod dsn;
pub mod errors;
mod fair;
mod handle;
mod heartbeat;
#[cfg(feature = "bench-support")]
pub mod history;
mod insights;
pub mod json_text;
pub mod probes;
mod purge;
pub mod rows;
pub mod schema;
#[cfg(feature = "bench-support")]
pub mod scratch;
mod sql;
mod steps;
mod transfer;
mod transfer_params;
pub mod upgrade;
mod versions;
mod worker_ops;

pub use backend::{PgBackend, ServerInfo, SessionState};
pub use onestep_core::store::StoreOptions;
pub use schema::{SchemaFeatures, SchemaReport};
#[cfg(feature = "bench-support")]
pub use scratch::ScratchDatabase;
pub use upgrade::{UpgradeReport, UpgradeStep};
