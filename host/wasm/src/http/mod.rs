//! Outbound HTTP for handlers (`wasi:http/outgoing-handler`, world
//! `onestep:handler@0.2.0`): the per-task capability ([`NetworkSettings`]),
//! the address policy ([`policy`]), the process's shared pools ([`client`])
//! and our `send_request` ([`send`]). What it allows and refuses is written
//! down in `docs/security.md#network`.
//!
//! `wasi:http` is linked into the one linker of the runtime for every task;
//! a component that imports it is refused at load for a task without
//! `network.allow` (`Runtime::load_for`, `Handler::check_sandbox`), and at run time a request of a task
//! without an allow-list matches nothing and is denied.

pub(crate) mod client;
pub(crate) mod outbound;
pub(crate) mod policy;
pub(crate) mod resources;
pub(crate) mod send;

use std::sync::Arc;
use std::time::Instant;

use tokio::sync::Semaphore;
use wasmtime::component::{Component, Linker};
use wasmtime_wasi_http::{WasiHttpCtx, WasiHttpCtxView, WasiHttpView};

use crate::bindings::v2;
use crate::context::LogIds;
use crate::error::Error;
use crate::state::State;
use client::Clients;
pub use client::{Resolver, Resolving};
pub use onestep_core::sandbox::{AllowedOrigin, NetworkSettings};
pub use onestep_core::settings::Secret;
pub use outbound::OriginLimitTotals;
use send::Hooks;
pub use send::HttpTotals;

/// The `wasi:http` part of one attempt's store data.
pub(crate) struct HttpState {
    ctx: WasiHttpCtx,
    hooks: Hooks,
}

impl HttpState {
    pub(crate) fn new(
        policy: &NetworkSettings,
        clients: &Clients,
        deadline: Option<Instant>,
        ids: Arc<LogIds>,
        log: crate::log_budget::LogBudget,
        buckets: Arc<dyn onestep_core::rate::RateLimitStore>,
        cancel: crate::cancel::CancelHandle,
    ) -> Self {
        let permits = usize::try_from(policy.max_concurrent_requests).unwrap_or(usize::MAX);
        HttpState {
            ctx: WasiHttpCtx::new(),
            hooks: Hooks {
                policy: Arc::new(policy.clone()),
                clients: clients.for_attempt(policy.max_connections),
                deadline,
                ids,
                permits: Arc::new(Semaphore::new(permits.min(Semaphore::MAX_PERMITS))),
                drains: Default::default(),
                counters: Default::default(),
                log,
                buckets,
                cancel,
                limits: Default::default(),
            },
        }
    }

    /// What the attempt's requests did so far.
    pub(crate) fn totals(&self) -> send::HttpTotals {
        self.hooks.counters.totals()
    }

    /// What the attempt's requests did with the fleet-wide buckets of rate-limited origins.
    pub(crate) fn limit_totals(&self) -> Vec<OriginLimitTotals> {
        self.hooks.limits.totals()
    }
}

impl WasiHttpView for State {
    fn http(&mut self) -> WasiHttpCtxView<'_> {
        WasiHttpCtxView {
            ctx: &mut self.http.ctx,
            table: &mut self.table,
            hooks: &mut self.http.hooks,
        }
    }
}

/// Adds `wasi:http` (types and outgoing-handler) and the `0.2.0` versions
/// of the `onestep:handler` interfaces to the runtime's linker.
pub(crate) fn add_to_linker(linker: &mut Linker<State>) -> Result<(), Error> {
    wasmtime_wasi_http::p2::add_only_http_to_linker_async(linker)
        .map_err(|e| Error::Engine(format!("wasi:http linker: {e:#}")))?;
    resources::add_to_linker(linker)?;
    v2::onestep::handler::types::add_to_linker::<State, wasmtime::component::HasSelf<State>>(
        linker,
        |s| s,
    )
    .map_err(|e| Error::Engine(format!("host linker (0.2.0 types): {e:#}")))?;
    v2::onestep::handler::host::add_to_linker::<State, wasmtime::component::HasSelf<State>>(
        linker,
        |s| s,
    )
    .map_err(|e| Error::Engine(format!("host linker (0.2.0 host): {e:#}")))?;
    Ok(())
}

/// The `wasi:http` interface `component` imports, if any: its
/// `outgoing-handler` when it imports that, otherwise the first one.
pub(crate) fn http_import(component: &Component) -> Option<String> {
    let engine = component.engine();
    let imports: Vec<String> = component
        .component_type()
        .imports(engine)
        .map(|(name, _)| name.to_string())
        .filter(|name| name.starts_with("wasi:http/"))
        .collect();
    imports
        .iter()
        .find(|n| n.starts_with("wasi:http/outgoing-handler"))
        .or(imports.first())
        .cloned()
}

/// Why a component importing `wasi:http` cannot run for a task whose
/// sandbox allows no origin (what `onestep check` and `onestep run` print).
pub(crate) fn no_network_message(import: &str) -> String {
    format!(
        "it imports {import} (outbound HTTP) but the task's sandbox grants no network: \
         list the origins it may reach under sandbox.network.allow"
    )
}

impl v2::onestep::handler::types::Host for State {}

impl v2::onestep::handler::host::Host for State {
    fn log(&mut self, level: v2::Level, message: String) {
        use crate::bindings::Level;
        let level = match level {
            v2::Level::Trace => Level::Trace,
            v2::Level::Debug => Level::Debug,
            v2::Level::Info => Level::Info,
            v2::Level::Warn => Level::Warn,
            v2::Level::Error => Level::Error,
        };
        crate::bindings::onestep::handler::host::Host::log(self, level, message)
    }

    fn cancel_requested(&mut self) -> bool {
        crate::bindings::onestep::handler::host::Host::cancel_requested(self)
    }

    fn progress(&mut self, done: u64, total: u64, note: String) {
        crate::bindings::onestep::handler::host::Host::progress(self, done, total, note)
    }
}
