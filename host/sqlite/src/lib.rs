//! onestep-sqlite: the embedded SQLite storage backend of tracked execution, on `rusqlite` with
//! the bundled library (docs/sqlite.md): one database file, nothing to install.
//!
//! It owns every SQLite statement of the product: the table DDL and readiness ([`schema`]),
//! DSN handling ([`dsn`]), error classification ([`errors`]), the client operations (submit,
//! submit_many, get, list, cancel), the worker operations (claim with bounded maintenance,
//! heartbeat, the cancel poll, complete, complete_many, release), attempt diagnostics, the
//! submit's trace context, purge, the dashboard's figures and the probes. One type,
//! [`SqliteBackend`], implements every port of [`onestep_core::ports`] and the
//! [`onestep_core::Backend`] handle (`handle.rs`).
//!
//! Invariants:
//! * One writer connection per process, serialised by a mutex; every read-then-write runs in a
//!   `BEGIN IMMEDIATE` transaction, which takes the file's write lock first, so processes
//!   sharing the file serialise their writes and never see a half-done one (WAL, `busy_timeout`).
//! * "now" is the injected clock, read once per transaction, after the write lock is taken.
//!   Instants are stored in UTC as fixed-width text.
//! * Every worker write is fenced by the lease token (and status and lease validity); zero
//!   matched rows is [`onestep_core::ExecutionError::StaleLease`], and the transaction (or the
//!   item's savepoint) is rolled back at once.
//! * `SQLITE_BUSY`/`SQLITE_LOCKED` before COMMIT is retried with bounded backoff.

pub mod backend;
mod buckets;
mod callbacks;
mod client_ops;
mod components;
mod deployments;
mod diagnostics;
pub mod dsn;
pub mod errors;
mod fair;
mod handle;
#[cfg(feature = "bench-support")]
pub mod history;
mod insights;
mod probes;
mod purge;
pub mod rows;
pub mod schema;
mod steps;
mod transfer;
mod versions;
mod worker_ops;

pub use backend::{ServerInfo, SessionState, SqliteBackend};
pub use onestep_core::store::StoreOptions;
pub use schema::{SchemaFeatures, SchemaReport};
