//! Integration tests of onestep-wasm against real guest components
//! (`guest-examples/out/*.wasm`, built by `scripts/build-guests.sh` when
//! missing). One test binary; modules by topic.
// Test code: a helper that cannot set up its fixture panics, like an assertion (clippy.toml
// allows this inside #[test] functions; these helpers live outside them).
#![allow(clippy::expect_used, clippy::panic)]
// The test-serialisation lock (`common::exclusive`/`shared`) is held across
// awaits on purpose: each test owns its runtime thread, and the lock only
// orders whole tests.
#![allow(clippy::await_holding_lock)]

mod common;

mod agent;
mod basics;
mod cache;
mod cancel;
mod chat_server;
mod handles;
mod http;
mod http_pool;
mod http_resources;
mod http_server;
mod limits;
mod logs;
mod needs;
mod outbound_limits;
mod python;
mod sandbox;
mod sleep;
mod soak;
mod steps;
mod table_hog;
mod tables;
