//! Router tests of onestep-api against a real MariaDB (one test binary): every endpoint and every
//! status of the documented mapping (docs/http-api.md#errors), tenants, idempotency under concurrency, a bad-input table, and
//! every response checked against the served OpenAPI document.
// Test code: a helper that cannot set up its fixture panics, like an assertion (clippy.toml
// allows this inside #[test] functions; these helpers live outside them).
#![allow(clippy::expect_used, clippy::panic)]

mod attempts;
mod bad_input;
mod batch;
mod callbacks;
mod concurrency;
mod deploy;
mod deploy_attacks;
mod endpoints;
mod hostile;
mod hostile_ui;
mod operate;
mod quotas;
mod results;
mod schema;
mod steps;
mod storable;
mod stream;
mod support;
mod tenants;
mod ui;
