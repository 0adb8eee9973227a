//! onestep-testkit (dev-only): what backend tests share.
//!
//! * [`clock::ManualClock`]: an injectable clock that only moves when a test moves it, so lease
//!   expiry is tested by advancing time, never by sleeping.
//! * [`builders`]: short constructors for submissions, claims, error objects.
//! * [`suite`]: the backend **conformance suite** — every row of the transition tables (docs/semantics.md#transitions),
//!   idempotency races, claim concurrency, paging, fencing — run unchanged against any backend
//!   through a [`suite::FixtureFactory`] (a fresh, empty store per case) and a [`suite::Probe`]
//!   (backend-specific read access to attempt rows and lease columns).

pub mod builders;
mod cases;
pub mod clock;
pub mod suite;

pub use clock::ManualClock;
pub use suite::{AttemptRow, Fixture, FixtureFactory, LeaseColumns, Probe, run_suite};
