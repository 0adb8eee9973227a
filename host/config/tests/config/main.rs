//! Integration tests of onestep-config (one binary; modules by topic).

mod build_rules;
mod common;
mod components;
mod files;
mod interpolation;
mod pipeline;
mod strict_rules;
