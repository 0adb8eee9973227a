//! onestep-testkit (dev-only): what backend and worker tests share.
//!
//! * [`clock::ManualClock`]: an injectable clock that only moves when a test moves it, so lease
//!   expiry is tested by advancing time, never by sleeping.
//! * [`builders`]: short constructors for submissions, claims, error objects.
//! * [`suite`]: the backend **conformance suite** — every row of the transition tables, the
//!   idempotency races, claim concurrency, paging, fencing — run unchanged against any backend
//!   through a [`suite::FixtureFactory`] (a fresh, empty store per case) and a [`suite::Probe`]
//!   (backend-specific read access to attempt rows and lease columns).
//!   [`conformance_tests!`] stamps one `#[tokio::test]` per case for a backend.
//! * [`memory::MemoryStore`]: the in-memory reference implementation of both storage ports
//!   (passes the whole suite in milliseconds), with an operation log, injected failures and
//!   gates for worker tests.
//! * [`backend_cases`]: integration-test bodies the SQL backends share (the scale workload,
//!   undecodable rows, the history seeder, trace context, the Python reference client), each
//!   with a small hook for what only the backend can do (raw SQL, its seeder).
//! * [`runner::FakeRunner`]: a scripted task runner that records its calls and can block until
//!   released or cancelled.
//!
//! The kit depends only on `onestep-core`, so any host crate (the worker included) can use it as
//! a dev-dependency without a cycle.

// The conformance cases, the shared backend test bodies, the suite harness and the builders
// report a failed expectation by panicking, exactly like `assert!` (they run inside tests). The
// in-memory store and the fake runner are held to the production rule: no unwrap, expect or
// panic.
#[allow(clippy::expect_used, clippy::panic)]
pub mod backend_cases;
#[allow(clippy::expect_used, clippy::panic)]
pub mod builders;
#[allow(clippy::expect_used, clippy::panic)]
mod cases;
pub mod clock;
pub mod diagnostics;
pub mod insights;
pub mod memory;
pub mod runner;
#[allow(clippy::expect_used, clippy::panic)]
pub mod suite;

pub use clock::ManualClock;
pub use memory::{MemoryFactory, MemoryStore, Op, OpRecord};
pub use runner::{FakeRunner, Step};
pub use suite::{AttemptRow, Fixture, FixtureError, FixtureFactory, LeaseColumns, Probe};
