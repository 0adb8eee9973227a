//! [`Runtime`] (engine, linker, compile cache, epoch ticker) and loading
//! components into [`Handler`]s, with what each component declares it needs
//! per instantiation ([`Handler::needs`], checked against a task's sandbox by
//! [`Handler::check_sandbox`]).

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use wasmtime::component::{Component, HasSelf, Linker};
use wasmtime::{Cache, Engine};

use crate::bindings;
use crate::engine::{self, Ticker};
use crate::error::Error;
use crate::log_budget::LogRate;
use crate::needs::Needs;
use crate::settings::{RuntimeSettings, SandboxSettings};
use crate::state::State;
use crate::world::{self, Pre};

/// Counters of the component cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStats {
    /// Components compiled by Cranelift in this process.
    pub compiles: u64,
    /// Loads served from the on-disk cache (no compilation).
    pub disk_hits: u64,
    /// Loads served from this runtime's in-memory table (same digest loaded
    /// before in this process).
    pub memory_hits: u64,
}

/// Live slots of the pooling allocator (all zero when idle).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PoolStats {
    /// Component instances alive.
    pub component_instances: u64,
    /// Core instances alive.
    pub core_instances: u64,
    /// Linear memories alive.
    pub memories: usize,
    /// Tables alive.
    pub tables: usize,
    /// Async stacks in use.
    pub stacks: usize,
}

pub(crate) struct RuntimeInner {
    pub(crate) engine: Engine,
    pub(crate) linker: Linker<State>,
    pub(crate) settings: RuntimeSettings,
    pooling: bool,
    cache: Option<Cache>,
    /// Components compiled by Cranelift (not served by any cache).
    compiles: AtomicU64,
    memory_hits: AtomicU64,
    /// Components by SHA-256, so loading the same bytes twice is free.
    components: Mutex<HashMap<[u8; 32], Component>>,
    /// The process's shared outbound HTTP pools.
    pub(crate) clients: crate::http::client::Clients,
    /// The buckets of outbound rate limits of handlers given no store
    /// ([`Handler::with_outbound_rate_limits`]): one per process.
    pub(crate) memory_buckets: Arc<dyn onestep_core::rate::RateLimitStore>,
    _ticker: Ticker,
}

/// The wasm runtime of a worker process: one engine (async, component model,
/// epoch interruption, pooling allocator when possible), one linker with WASI
/// p2 + the `onestep:handler/host` imports, a compile cache and the epoch
/// ticker. Cheap to clone; clones share everything.
#[derive(Clone)]
pub struct Runtime {
    pub(crate) inner: Arc<RuntimeInner>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("pooling", &self.inner.pooling)
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

/// A loaded, linked component ready to be instantiated: compiled once
/// (`InstancePre`), instantiated afresh in a new store for every invocation.
/// Cheap to clone.
#[derive(Clone)]
pub struct Handler {
    pub(crate) runtime: Arc<RuntimeInner>,
    /// The prepared `handle` export (of `0.1.0` or `0.2.0`).
    pub(crate) pre: Pre,
    pub(crate) digest: [u8; 32],
    pub(crate) name: Arc<str>,
    pub(crate) needs: Needs,
    /// The task's log rate over time, shared by every clone (one task's
    /// attempts); see docs/security.md#logs.
    pub(crate) log_rate: LogRate,
    /// The first `wasi:http` interface the component imports, if any.
    pub(crate) http_import: Option<String>,
    /// The fleet-wide buckets of `sandbox.network.rate_limits`
    /// (docs/semantics.md#outbound-rate-limits); the runtime's in-process buckets unless
    /// [`Handler::with_outbound_rate_limits`] gave a shared store.
    pub(crate) buckets: Arc<dyn onestep_core::rate::RateLimitStore>,
}

impl std::fmt::Debug for Handler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handler")
            .field("name", &self.name)
            .field("digest", &self.digest_hex())
            .finish_non_exhaustive()
    }
}

impl Handler {
    /// This handler drawing on `previous`'s log rate over time (docs/security.md#logs): a
    /// redeployed build of a task's component keeps the task's rate budget instead of starting
    /// a fresh one.
    pub fn keeping_log_rate_of(mut self, previous: &Handler) -> Handler {
        self.log_rate = previous.log_rate.clone();
        self
    }

    /// This handler drawing the tokens of its sandbox's outbound rate limits
    /// (`sandbox.network.rate_limits`, docs/semantics.md#outbound-rate-limits) from `store`:
    /// the database of the task's source, so every worker of the fleet shares one bucket per
    /// origin. Without it the buckets are the runtime's own (one process).
    pub fn with_outbound_rate_limits(
        mut self,
        store: Arc<dyn onestep_core::rate::RateLimitStore>,
    ) -> Handler {
        self.buckets = store;
        self
    }

    /// SHA-256 of the component's bytes, lower-case hex.
    pub fn digest_hex(&self) -> String {
        hex::encode(self.digest)
    }

    /// The file name or label the handler was loaded from.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What one instantiation of the component allocates (read from its
    /// binary at load).
    pub fn needs(&self) -> Needs {
        self.needs
    }

    /// Refuses a component whose declared needs exceed `sandbox`'s
    /// per-attempt limits (every attempt of it would fail): call it once per
    /// task when the worker loads the task's component. The error names the
    /// component, each need, and the `sandbox:` limit it exceeds.
    pub fn check_sandbox(&self, sandbox: &SandboxSettings) -> Result<(), Error> {
        self.needs
            .check(sandbox)
            .map_err(|over| Error::OverLimits {
                name: self.name.to_string(),
                message: over.to_string(),
            })?;
        self.check_network(sandbox)
    }

    /// The version of the handler world the component implements
    /// (`onestep:handler@0.1.0` or `onestep:handler@0.2.0`): what its
    /// `handle` export's context is. Only `0.2.0` components receive the
    /// task's `params`.
    pub fn world_version(&self) -> &'static str {
        self.pre.version()
    }

    /// Whether the component imports `wasi:http` (world `0.2.0` with
    /// outbound HTTP in use).
    pub fn imports_http(&self) -> bool {
        self.http_import.is_some()
    }

    /// Refuses a component importing `wasi:http` for a sandbox without
    /// `network.allow` ([`Error::Sandbox`]).
    fn check_network(&self, sandbox: &SandboxSettings) -> Result<(), Error> {
        match &self.http_import {
            Some(import) if !sandbox.network.enabled() => Err(Error::Sandbox {
                name: self.name.to_string(),
                message: crate::http::no_network_message(import),
            }),
            _ => Ok(()),
        }
    }
}

/// The file name of `path` (its whole text when it has none): how errors and
/// logs name a component.
fn file_label(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string())
}

impl Runtime {
    /// Builds the engine (falling back from pooling to on-demand allocation
    /// per [`RuntimeSettings::pooling`]), the linker, and starts the epoch
    /// ticker (a thread incrementing the epoch every `epoch_tick_ms`).
    pub fn new(settings: RuntimeSettings) -> Result<Self, Error> {
        Self::with_resolver(settings, crate::http::Resolver::system())
    }

    /// [`new`](Self::new) with the DNS resolver outbound HTTP uses (the
    /// host resolves every request's host itself and connects to the checked
    /// address; tests point names at loopback with it).
    pub fn with_resolver(
        settings: RuntimeSettings,
        resolver: crate::http::Resolver,
    ) -> Result<Self, Error> {
        let built = engine::build(&settings)?;
        let mut linker = Linker::<State>::new(&built.engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)
            .map_err(|e| Error::Engine(format!("WASI linker: {e:#}")))?;
        crate::handles::add_to_linker(&mut linker)?;
        crate::http::add_to_linker(&mut linker)?;
        crate::durable::add_to_linker(&mut linker)?;
        bindings::Handler::add_to_linker::<State, HasSelf<State>>(&mut linker, |s| s)
            .map_err(|e| Error::Engine(format!("host linker: {e:#}")))?;
        let clients = crate::http::client::Clients::new(resolver)
            .map_err(|e| Error::Engine(format!("TLS client configuration: {e}")))?;
        let tick = Duration::from_millis(settings.epoch_tick_ms.max(1));
        let ticker = Ticker::start(built.engine.clone(), tick)?;
        Ok(Self {
            inner: Arc::new(RuntimeInner {
                engine: built.engine,
                linker,
                settings,
                pooling: built.pooling,
                cache: built.cache,
                compiles: AtomicU64::new(0),
                memory_hits: AtomicU64::new(0),
                components: Mutex::new(HashMap::new()),
                clients,
                memory_buckets: Arc::new(onestep_core::rate::MemoryBuckets::new(Arc::new(
                    onestep_core::time::SystemClock,
                ))),
                _ticker: ticker,
            }),
        })
    }

    /// Whether the pooling allocator is in use (false after a fallback).
    pub fn pooling_enabled(&self) -> bool {
        self.inner.pooling
    }

    /// Loads a component file: compiles it (or takes it from the disk cache,
    /// keyed by its SHA-256 and the engine settings), links it and checks it
    /// implements `onestep:handler/handler`. Blocking and CPU-heavy on a
    /// cache miss (seconds for big components): call it from
    /// `spawn_blocking` in async code.
    pub fn load(&self, path: impl AsRef<Path>) -> Result<Handler, Error> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        self.load_bytes(&file_label(path), &bytes)
    }

    /// Loads a component for a task that runs in `sandbox`: first reads what
    /// the component declares it needs per instantiation and refuses it,
    /// before compiling, when that exceeds `sandbox`'s per-attempt limits
    /// ([`Error::OverLimits`], see [`Handler::check_sandbox`]); then everything
    /// [`load`](Self::load) does (compile through the compile cache, link every
    /// import against this runtime's linker into an `InstancePre`, check the
    /// `onestep:handler/handler` export); then the checks that depend on the
    /// sandbox ([`Error::Sandbox`]). This is what a worker does at start and
    /// what `onestep check` does, so both report an unloadable component (an
    /// import the host does not provide, an over-limit component) with the same
    /// message.
    pub fn load_for(
        &self,
        path: impl AsRef<Path>,
        sandbox: &SandboxSettings,
    ) -> Result<Handler, Error> {
        let path = path.as_ref();
        let bytes = std::fs::read(path).map_err(|source| Error::Io {
            path: path.to_path_buf(),
            source,
        })?;
        self.load_bytes_for(&file_label(path), &bytes, sandbox)
    }

    /// [`load_for`](Self::load_for) for bytes in memory (a deployed component read from the
    /// component store); `name` labels errors and logs. The same checks, in the same order,
    /// with the same messages.
    pub fn load_bytes_for(
        &self,
        name: &str,
        bytes: &[u8],
        sandbox: &SandboxSettings,
    ) -> Result<Handler, Error> {
        Needs::of_component(bytes)
            .check(sandbox)
            .map_err(|over| Error::OverLimits {
                name: name.to_string(),
                message: over.to_string(),
            })?;
        let handler = self.load_bytes(name, bytes)?;
        handler.check_network(sandbox)?;
        if sandbox.fuel.is_some() && !self.inner.settings.fuel_metering {
            return Err(Error::Sandbox {
                name: name.to_string(),
                message: "the sandbox sets `fuel` but the runtime has fuel_metering off".into(),
            });
        }
        Ok(handler)
    }

    /// Same as [`load`](Self::load) for bytes in memory; `name` labels errors
    /// and logs.
    pub fn load_bytes(&self, name: &str, bytes: &[u8]) -> Result<Handler, Error> {
        world::check_binary(name, bytes)?;
        let digest: [u8; 32] = Sha256::digest(bytes).into();
        let component = self.component(name, digest, bytes)?;
        world::check_shape(name, &component)?;
        let needs = Needs::of_component(bytes);
        let http_import = crate::http::http_import(&component);
        let instance_pre =
            self.inner
                .linker
                .instantiate_pre(&component)
                .map_err(|e| Error::Link {
                    name: name.to_string(),
                    message: format!("{e:#}"),
                })?;
        let pre = Pre::new(name, &component, instance_pre)?;
        Ok(Handler {
            runtime: self.inner.clone(),
            pre,
            digest,
            name: Arc::from(name),
            needs,
            log_rate: LogRate::default(),
            http_import,
            buckets: self.inner.memory_buckets.clone(),
        })
    }

    fn component(&self, name: &str, digest: [u8; 32], bytes: &[u8]) -> Result<Component, Error> {
        // Loads are serialised (compilation itself is parallel): concurrent
        // loads of the same bytes compile once and the counters stay exact.
        let mut components = self
            .inner
            .components
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(c) = components.get(&digest) {
            self.inner.memory_hits.fetch_add(1, Ordering::Relaxed);
            return Ok(c.clone());
        }
        let started = std::time::Instant::now();
        let hits_before = self.disk_hits();
        // With a cache configured, wasmtime looks the artifact up by a hash
        // of the bytes and the engine's settings before compiling.
        let component =
            Component::from_binary(&self.inner.engine, bytes).map_err(|e| Error::Compile {
                name: name.to_string(),
                message: format!("{e:#}"),
            })?;
        let compiled = self.disk_hits() == hits_before;
        if compiled {
            self.inner.compiles.fetch_add(1, Ordering::Relaxed);
        }
        tracing::debug!(
            component = name,
            digest = %hex::encode(digest),
            compiled,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "component loaded"
        );
        components.insert(digest, component.clone());
        Ok(component)
    }

    fn disk_hits(&self) -> u64 {
        self.inner
            .cache
            .as_ref()
            .map_or(0, |c| c.cache_hits() as u64)
    }

    /// Number of components compiled by Cranelift in this process (cache
    /// misses). A load served by the disk or memory cache does not count.
    pub fn compile_count(&self) -> u64 {
        self.cache_stats().compiles
    }

    /// Cache counters.
    pub fn cache_stats(&self) -> CacheStats {
        CacheStats {
            compiles: self.inner.compiles.load(Ordering::Relaxed),
            disk_hits: self.disk_hits(),
            memory_hits: self.inner.memory_hits.load(Ordering::Relaxed),
        }
    }

    /// Live pool slots, or `None` without the pooling allocator.
    pub fn pool_stats(&self) -> Option<PoolStats> {
        let m = self.inner.engine.pooling_allocator_metrics()?;
        Some(PoolStats {
            component_instances: m.component_instances(),
            core_instances: m.core_instances(),
            memories: m.memories(),
            tables: m.tables(),
            stacks: m.stacks(),
        })
    }
}
