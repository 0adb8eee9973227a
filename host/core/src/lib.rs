//! onestep-core: the domain of tracked execution, with no SQL, no async runtime and no wasmtime.
//!
//! It owns: statuses and the transition rules of the execution state machine (docs/semantics.md#statuses, docs/semantics.md#transitions), the
//! `Execution`/lease/completion objects, the structured error object (docs/semantics.md#error-object), value encoding and
//! canonical JSON (docs/semantics.md#value-encoding), the submission digest (docs/semantics.md#submission-digest), the list cursor (docs/semantics.md#listing-and-cursors), derived table and
//! index names (docs/semantics.md#tables-and-names), validation of client requests in the documented order (docs/semantics.md#submit-and-idempotency), retry
//! policies (docs/semantics.md#retry-policies), the injected [`Clock`](time::Clock) (docs/semantics.md#time), and the ports (traits) that storage
//! backends implement: [`ports::ExecutionStore`] for clients and [`ports::LeaseStore`] for workers.
//!
//! Invariants kept here: every instant is UTC with microsecond precision; a request that fails
//! validation never reaches a backend; the namespace is trimmed and validated once, when an
//! [`client::ExecutionClient`] is built.

pub mod api_settings;
pub mod backend;
pub mod callback;
pub mod canonical;
pub mod changes;
pub mod client;
pub mod codec;
pub mod components;
pub mod cursor;
pub mod deploy_policy;
pub mod deployments;
pub mod diagnostics;
pub mod digest;
pub mod error;
pub mod error_object;
pub mod execution;
pub mod history;
pub mod ids;
pub mod limits;
pub mod names;
pub mod network;
pub mod park;
pub mod plan;
pub mod ports;
pub mod quota;
pub mod rate;
pub mod request;
pub mod rerun;
pub mod retry;
pub mod runner;
pub mod sandbox;
pub mod schedule;
pub mod settings;
pub mod status;
pub mod steps;
pub mod storable;
pub mod store;
pub mod text;
pub mod time;
pub mod timefmt;
pub mod transfer;

pub use api_settings::ApiSettings;
pub use backend::{Backend, BackendCapabilities, SessionSummary, UpgradeReport, UpgradeStep};
pub use client::ExecutionClient;
pub use error::{BackendError, ConnectorKind, ExecutionError, StaleReason};
pub use error_object::ErrorObject;
pub use execution::{
    Completion, Execution, ExecutionLease, ExecutionPage, HeartbeatResult, LeaseRef,
};
pub use limits::Limits;
pub use status::{AttemptStatus, CompletionStatus, ExecutionStatus};
pub use store::StoreOptions;
pub use time::{Clock, SystemClock};
