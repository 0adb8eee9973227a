//! Engine construction (the one place wasmtime is configured) and the epoch
//! ticker.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;
use wasmtime::{
    Cache, CacheConfig, Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig,
};

use crate::error::Error;
use crate::settings::{PoolingMode, RuntimeSettings};

/// Soft bound of the disk cache's total size: past it, wasmtime's cache
/// worker (a background thread) deletes the least recently used artifacts
/// down to 70% of it. A CPython or SpiderMonkey component's artifact is ~12 MB
/// compressed, a Rust one well under 1 MB.
pub(crate) const CACHE_SIZE_SOFT_LIMIT_BYTES: u64 = 512 << 20;

/// Soft bound of the number of files in the disk cache (an artifact and its
/// usage-statistics file each), enforced the same way.
pub(crate) const CACHE_FILE_COUNT_SOFT_LIMIT: u64 = 10_000;

/// A configured engine plus what was decided while building it.
pub(crate) struct BuiltEngine {
    pub(crate) engine: Engine,
    pub(crate) pooling: bool,
    pub(crate) cache: Option<Cache>,
}

fn base_config(s: &RuntimeSettings, cache: Option<Cache>) -> Config {
    let mut cfg = Config::new();
    cfg.wasm_component_model(true)
        // Deadlines and cancellation of running guest code: the ticker bumps
        // the epoch, stores yield/check at every tick.
        .epoch_interruption(true)
        .consume_fuel(s.fuel_metering)
        .parallel_compilation(s.parallel_compilation)
        .cache(cache);
    cfg
}

fn pooling_config(s: &RuntimeSettings) -> PoolingAllocationConfig {
    let pool = &s.pool;
    let sandboxes = pool.sandboxes.max(1);
    let mut p = PoolingAllocationConfig::new();
    // Totals over all tasks (each task's concurrency times its per-attempt
    // limits, see `PoolSize::for_tasks`), and per sandbox the largest
    // per-attempt limits, so that the pool never refuses what a task's own
    // limits allow and one task cannot use up the slots of another.
    p.total_component_instances(sandboxes)
        .total_stacks(sandboxes)
        .total_core_instances(pool.core_instances.max(1))
        .total_memories(pool.memories.max(1))
        .total_tables(pool.tables.max(1))
        .max_core_instances_per_component(pool.max_instances_per_sandbox.max(1))
        .max_memories_per_component(pool.max_memories_per_sandbox.max(1))
        .max_tables_per_component(pool.max_tables_per_sandbox.max(1))
        // A module may define as many as a whole sandbox may (the limiter
        // enforces the per-attempt totals, as it does on demand).
        .max_memories_per_module(pool.max_memories_per_sandbox.max(1))
        .max_tables_per_module(pool.max_tables_per_sandbox.max(1))
        .table_elements(usize::try_from(pool.table_elements).unwrap_or(usize::MAX))
        .max_memory_size(usize::try_from(s.max_memory_bytes).unwrap_or(usize::MAX));
    p
}

/// Builds the engine; with [`PoolingMode::Auto`], falls back to on-demand
/// allocation when the pool's virtual memory cannot be reserved.
pub(crate) fn build(s: &RuntimeSettings) -> Result<BuiltEngine, Error> {
    let cache = match &s.cache_dir {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| Error::Cache {
                path: dir.clone(),
                message: e.to_string(),
            })?;
            // wasmtime wants an absolute cache directory.
            let dir = std::fs::canonicalize(dir).map_err(|e| Error::Cache {
                path: dir.clone(),
                message: e.to_string(),
            })?;
            let mut cc = CacheConfig::new();
            cc.with_directory(&dir)
                .with_files_total_size_soft_limit(CACHE_SIZE_SOFT_LIMIT_BYTES)
                .with_file_count_soft_limit(CACHE_FILE_COUNT_SOFT_LIMIT);
            Some(Cache::new(cc).map_err(|e| Error::Cache {
                path: dir,
                message: e.to_string(),
            })?)
        }
        None => None,
    };
    let on_demand = || -> Result<Engine, Error> {
        let cfg = base_config(s, cache.clone());
        Engine::new(&cfg).map_err(|e| Error::Engine(format!("{e:#}")))
    };
    let pooled = || -> Result<Engine, Error> {
        let mut cfg = base_config(s, cache.clone());
        cfg.allocation_strategy(InstanceAllocationStrategy::Pooling(pooling_config(s)));
        Engine::new(&cfg).map_err(|e| Error::Engine(format!("pooling allocator: {e:#}")))
    };
    let (engine, pooling) = match s.pooling {
        PoolingMode::Off => (on_demand()?, false),
        PoolingMode::On => (pooled()?, true),
        PoolingMode::Auto => match pooled() {
            Ok(engine) => (engine, true),
            Err(e) => {
                tracing::warn!(error = %e, "pooling allocator unavailable; using on-demand allocation");
                (on_demand()?, false)
            }
        },
    };
    Ok(BuiltEngine {
        engine,
        pooling,
        cache,
    })
}

/// A thread incrementing the engine's epoch every `tick`. Each increment is a
/// chance for every running store to yield to tokio and to notice a cancel
/// or a passed deadline. Stops when dropped.
pub(crate) struct Ticker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Ticker {
    pub(crate) fn start(engine: Engine, tick: Duration) -> Result<Self, Error> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("onestep-wasm-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(tick);
                    engine.increment_epoch();
                }
            })
            .map_err(|e| Error::Engine(format!("cannot start the epoch ticker: {e}")))?;
        Ok(Self {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
