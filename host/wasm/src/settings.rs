//! Plain, serde-deserializable settings of the runtime: [`RuntimeSettings`]
//! (one per worker process) and the pool it sizes ([`PoolSize`]). Every
//! field has a default, so a partial value is enough.
//!
//! The per-task sandbox is not defined here: [`SandboxSettings`] is
//! [`onestep_core::sandbox::SandboxSettings`], the one struct the config crate
//! builds from a task's `sandbox:` block and this crate enforces (re-exported
//! for callers). The call's time limit is not a sandbox setting: it is the
//! `timeout` argument of [`Handler::invoke`](crate::Handler::invoke).

use serde::{Deserialize, Serialize};

use crate::needs::TABLE_ELEMENT_BYTES;
use std::path::PathBuf;

pub use onestep_core::sandbox::SandboxSettings;
pub use onestep_core::settings::{Preopen, PreopenMode};

/// Whether the engine uses wasmtime's pooling instance allocator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PoolingMode {
    /// Try the pooling allocator; if the host cannot reserve its virtual
    /// memory (small `ulimit -v`, no overcommit), fall back to on-demand.
    #[default]
    Auto,
    /// Pooling allocator or an error.
    On,
    /// On-demand allocation (an mmap per instance).
    Off,
}

/// Process-wide settings of the [`Runtime`](crate::Runtime).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuntimeSettings {
    /// Directory of the on-disk cache of compiled components, keyed by the
    /// SHA-256 of the component and the engine's settings (wasmtime version,
    /// compiler flags, target). `None` disables the disk cache (every process
    /// compiles each component once).
    pub cache_dir: Option<PathBuf>,
    /// Instance allocation strategy.
    pub pooling: PoolingMode,
    /// Period of the epoch ticker in milliseconds (default 10). Running guests
    /// yield to tokio and check cancellation/deadline once per tick, so it
    /// bounds the latency of stopping a CPU-bound guest.
    pub epoch_tick_ms: u64,
    /// Pooling only: the slots the pool holds, sized from every task's
    /// concurrency and per-attempt limits ([`PoolSize::for_tasks`]). Ignored
    /// by the on-demand allocator.
    pub pool: PoolSize,
    /// Largest linear memory any instance may ever have, in bytes (a pool slot
    /// size). A sandbox's `memory_limit_bytes` above this is clamped to it.
    pub max_memory_bytes: u64,
    /// Instrument guests with fuel metering so sandboxes can set `fuel`.
    /// Costs some guest CPU; with `false` a sandbox asking for fuel fails.
    pub fuel_metering: bool,
    /// Compile with several threads (faster loads of big components).
    pub parallel_compilation: bool,
}

impl Default for RuntimeSettings {
    fn default() -> Self {
        Self {
            cache_dir: None,
            pooling: PoolingMode::Auto,
            epoch_tick_ms: 10,
            pool: PoolSize::for_tasks([(128, &SandboxSettings::default())]),
            max_memory_bytes: 4 << 30,
            fuel_metering: true,
            parallel_compilation: true,
        }
    }
}

/// The capacity of the pooling allocator: how many slots of each kind exist
/// for all tasks together. Sized by [`PoolSize::for_tasks`] so that every
/// task can run `concurrency` attempts at its own per-attempt limits at the
/// same time: an attempt can never take a slot another task's attempt needs,
/// and a task that reaches its own limits fails only its own attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoolSize {
    /// Sandboxes alive at once (component instances; also async stacks).
    pub sandboxes: u32,
    /// Core instances over all sandboxes.
    pub core_instances: u32,
    /// Linear memories over all sandboxes.
    pub memories: u32,
    /// Tables over all sandboxes.
    pub tables: u32,
    /// Elements of a table slot (the largest `max_table_elements`).
    pub table_elements: u64,
    /// Most core instances, memories and tables of one sandbox (the largest
    /// per-attempt limits): the pool refuses a component needing more.
    pub max_instances_per_sandbox: u32,
    /// See `max_instances_per_sandbox`.
    pub max_memories_per_sandbox: u32,
    /// See `max_instances_per_sandbox`.
    pub max_tables_per_sandbox: u32,
}

impl PoolSize {
    /// Extra sandboxes at the largest per-attempt limits on top of the sum,
    /// for stores that are still being dropped while the next attempt of the
    /// same slot starts, and for host-side uses outside the worker's slots.
    pub const HEADROOM_SANDBOXES: u32 = 2;

    /// The pool for tasks given as `(concurrency, sandbox)`: the sum over
    /// tasks of `concurrency ×` each per-attempt limit, plus
    /// [`HEADROOM_SANDBOXES`](Self::HEADROOM_SANDBOXES) sandboxes at the
    /// largest limits. Saturates instead of overflowing.
    pub fn for_tasks<'a>(tasks: impl IntoIterator<Item = (u32, &'a SandboxSettings)>) -> Self {
        let mut p = PoolSize {
            sandboxes: 0,
            core_instances: 0,
            memories: 0,
            tables: 0,
            table_elements: 0,
            max_instances_per_sandbox: 0,
            max_memories_per_sandbox: 0,
            max_tables_per_sandbox: 0,
        };
        for (concurrency, s) in tasks {
            p.sandboxes = p.sandboxes.saturating_add(concurrency);
            p.core_instances = p
                .core_instances
                .saturating_add(concurrency.saturating_mul(s.max_instances));
            p.memories = p
                .memories
                .saturating_add(concurrency.saturating_mul(s.max_memories));
            p.tables = p
                .tables
                .saturating_add(concurrency.saturating_mul(s.max_tables));
            p.table_elements = p.table_elements.max(s.max_table_elements);
            p.max_instances_per_sandbox = p.max_instances_per_sandbox.max(s.max_instances);
            p.max_memories_per_sandbox = p.max_memories_per_sandbox.max(s.max_memories);
            p.max_tables_per_sandbox = p.max_tables_per_sandbox.max(s.max_tables);
        }
        let h = Self::HEADROOM_SANDBOXES;
        p.sandboxes = p.sandboxes.saturating_add(h);
        p.core_instances = p
            .core_instances
            .saturating_add(h.saturating_mul(p.max_instances_per_sandbox));
        p.memories = p
            .memories
            .saturating_add(h.saturating_mul(p.max_memories_per_sandbox));
        p.tables = p
            .tables
            .saturating_add(h.saturating_mul(p.max_tables_per_sandbox));
        p
    }

    /// Host memory the table slots can take when full, in bytes.
    pub fn table_bytes(&self) -> u64 {
        u64::from(self.tables)
            .saturating_mul(self.table_elements)
            .saturating_mul(TABLE_ELEMENT_BYTES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_runtime_settings_deserialize_with_defaults() {
        // The sandbox half of this test moved with `SandboxSettings` to onestep-core.
        let r: RuntimeSettings =
            serde_json::from_str(r#"{"cache_dir": "/tmp/c", "pooling": "off"}"#).expect("runtime");
        assert_eq!(r.pooling, PoolingMode::Off);
        assert_eq!(r.epoch_tick_ms, 10);
    }

    #[test]
    fn the_pool_holds_every_task_at_its_own_limits_plus_headroom() {
        let small = SandboxSettings::default();
        let big = SandboxSettings {
            max_instances: 60,
            max_tables: 52,
            max_memories: 2,
            max_table_elements: 200_000,
            ..SandboxSettings::default()
        };
        let p = PoolSize::for_tasks([(3, &small), (2, &big)]);
        let h = PoolSize::HEADROOM_SANDBOXES;
        assert_eq!(p.sandboxes, 5 + h);
        assert_eq!(p.core_instances, 3 * small.max_instances + 2 * 60 + h * 60);
        assert_eq!(p.tables, 3 * small.max_tables + 2 * 52 + h * 52);
        assert_eq!(
            p.memories,
            3 * small.max_memories + 2 * 2 + h * small.max_memories.max(2)
        );
        assert_eq!(p.table_elements, 200_000);
        assert_eq!(p.max_tables_per_sandbox, 52);
        // Saturates rather than overflowing.
        let huge = SandboxSettings {
            max_instances: u32::MAX,
            ..SandboxSettings::default()
        };
        assert_eq!(
            PoolSize::for_tasks([(u32::MAX, &huge)]).core_instances,
            u32::MAX
        );
    }
}
