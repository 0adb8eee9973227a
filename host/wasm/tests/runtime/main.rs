//! Integration tests of onestep-wasm against real guest components
//! (`guest-examples/out/*.wasm`, built by `scripts/build-guests.sh` when
//! missing). One test binary; modules by topic.

// The test-serialisation lock (`common::exclusive`/`shared`) is held across
// awaits on purpose: each test owns its runtime thread, and the lock only
// orders whole tests.
#![allow(clippy::await_holding_lock)]

mod common;

mod basics;
mod cache;
mod cancel;
mod handles;
mod limits;
mod python;
mod sandbox;
mod soak;
