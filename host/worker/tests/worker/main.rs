//! Worker tests without a database: the in-memory store and the scripted runner from
//! onestep-testkit, a manual clock for the store and the worker, and tokio's paused time for
//! the worker's timers (heartbeat, poll, drain). Tests wait on signals from the store and the
//! runner; a paused-time `sleep` only ever lets virtual time pass.
// Test code: a helper that cannot set up its fixture panics, like an assertion (clippy.toml
// allows this inside #[test] functions; these helpers live outside them).
#![allow(clippy::expect_used, clippy::panic)]

mod batching;
mod cancel;
mod drain;
mod harness;
mod heartbeat;
mod heartbeat_set;
mod lease;
mod observer;
mod park;
mod poison;
mod quarantine;
mod rate_limit;
mod retry;
