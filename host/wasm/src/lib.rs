//! `onestep-wasm`: runs onestep task handlers as sandboxed WebAssembly
//! components. This is the only crate of the workspace that touches
//! wasmtime; it does not depend on any other onestep crate.
//!
//! # What it owns
//! - The wasmtime [`Engine`](wasmtime::Engine) configuration (async,
//!   component model, epoch interruption, fuel metering, pooling allocator
//!   with fallback to on-demand) and the epoch ticker thread.
//! - Loading components implementing `onestep:handler/handler@0.1.0`
//!   (`wit/handler.wit` at the repository root) or `@0.2.0`
//!   (`wit/v0.2/handler.wit`: the task's params in the context, outbound HTTP
//!   in world `handler`, none in world `compute`) or `@0.3.0`
//!   (`wit/v0.3/handler.wit`: `0.2.0` plus durable steps, [`DurableSteps`]): refused with a specific
//!   error when they are not components, of another world or of an unserved
//!   version, compiled once, cached on disk keyed by the component's SHA-256
//!   and the engine settings, linked into an `InstancePre`
//!   ([`Runtime::load`] → [`Handler`], [`Handler::world_version`]).
//! - Invoking them ([`Handler::invoke`]) in a per-task sandbox described by
//!   [`SandboxSettings`], returning a typed [`Outcome`].
//!
//! The worker owns claims, leases, heartbeats and retries; the guest only
//! computes.
//!
//! # Invariants
//! - Every invocation gets a fresh `Store` and WASI context; a store is
//!   dropped when the invocation ends, whatever happened (never reused after
//!   a trap, a timeout or a cancel).
//! - A task cannot take what another task needs: the pooling allocator holds
//!   every task's `concurrency` times its per-attempt limits ([`PoolSize`]),
//!   the resource limiter enforces those limits per attempt (table elements
//!   count against the memory limit), and a component that declares more
//!   than its sandbox allows is refused when loaded
//!   ([`Handler::check_sandbox`]).
//! - A guest cannot take the host down: traps, panics, memory-limit denials,
//!   fuel exhaustion, timeouts and cancellation all come back as
//!   [`Outcome::Trapped`]; the host's own memory stays bounded (memory
//!   ceiling via a resource limiter, bounded stdout/stderr capture, one log
//!   budget per attempt and a log rate per task over time), and
//!   so do its open files: an attempt holds at most
//!   [`SandboxSettings::max_open_handles`] files, directories, listings and
//!   file streams, and one more open is an error value in the guest.
//! - A guest cannot outrun its deadline or a cancel: the call future is
//!   raced against the [`CancelHandle`] and a wall-clock timer and dropped
//!   when they win (this also stops guests blocked in host calls), and guest
//!   code checks both at every epoch tick (`epoch_tick_ms`, default 10 ms),
//!   where it also yields to tokio so it cannot starve other tasks.
//! - A guest sees only what its sandbox grants: the preopened directories
//!   (read-only unless `mode: rw`), allow-listed environment variables, no
//!   arguments, no stdin, no sockets, no name lookup. Clocks and random are
//!   available. Outbound HTTP (`wasi:http`) reaches only the origins of the
//!   task's [`NetworkSettings`], checked by the host (`docs/security.md#network`).
//!
//! # Example
//! ```no_run
//! # async fn demo() -> Result<(), onestep_wasm::Error> {
//! use onestep_wasm::*;
//! let runtime = Runtime::new(RuntimeSettings {
//!     cache_dir: Some("/var/cache/onestep/wasm".into()),
//!     ..RuntimeSettings::default()
//! })?;
//! let handler = runtime.load("guest-examples/out/echo.wasm")?;
//! let outcome = handler
//!     .invoke(
//!         &SandboxSettings::default(),
//!         InvocationContext::default(),
//!         r#"{"hello": "world"}"#,
//!         CancelHandle::new(),
//!         Some(std::time::Duration::from_secs(30)),
//!     )
//!     .await;
//! assert_eq!(outcome, Outcome::Succeeded(r#"{"hello": "world"}"#.into()));
//! # Ok(()) }
//! ```

mod bindings;
mod cancel;
mod capture;
mod context;
mod durable;
mod engine;
mod error;
mod guest_log;
mod handles;
mod http;
mod invoke;
mod log_budget;
mod needs;
mod outcome;
mod runtime;
mod sandbox;
mod settings;
mod state;
mod world;

pub use cancel::CancelHandle;
pub use context::InvocationContext;
pub use durable::{DurableSteps, StepCounts};
pub use error::Error;
pub use http::{
    AllowedOrigin, HttpTotals, NetworkSettings, OriginLimitTotals, Resolver, Resolving, Secret,
};
pub use invoke::Report;
pub use log_budget::LogTotals;
pub use needs::{Needs, OverLimits, TABLE_ELEMENT_BYTES};
pub use onestep_core::network::OriginPattern;
pub use outcome::{InvokeError, Outcome, TrapKind};
pub use runtime::{CacheStats, Handler, PoolStats, Runtime};
pub use settings::{PoolSize, PoolingMode, Preopen, PreopenMode, RuntimeSettings, SandboxSettings};

/// The first version of the WIT package this runtime serves (`wit/handler.wit`).
pub const WIT_PACKAGE: &str = "onestep:handler@0.1.0";

/// Every version of the WIT package this runtime serves, oldest first
/// (`wit/handler.wit`, `wit/v0.2/handler.wit`, `wit/v0.3/handler.wit`; see `wit/README.md`).
pub const WIT_PACKAGES: [&str; 3] = [
    "onestep:handler@0.1.0",
    "onestep:handler@0.2.0",
    "onestep:handler@0.3.0",
];
