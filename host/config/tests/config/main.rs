//! Integration tests of onestep-config (one binary; modules by topic).
// Test code: a helper that cannot set up its fixture panics, like an assertion (clippy.toml
// allows this inside #[test] functions; these helpers live outside them).
#![allow(clippy::expect_used, clippy::panic)]

mod build_rules;
mod common;
mod components;
mod deployments;
mod files;
mod interpolation;
mod pipeline;
mod strict_rules;
