//! Plain, serde-deserializable settings of the runtime: [`RuntimeSettings`]
//! (one per worker process) and [`SandboxSettings`] (one per task). Every
//! field has a default, so a partial value is enough.
//!
//! The config crate does not know these types: it loads its own typed model,
//! and the CLI's wiring converts a task's sandbox into a [`SandboxSettings`]
//! in one function. What both sides share is defined once in
//! [`onestep_core::settings`]: the [`Preopen`] type and the defaults of the
//! memory and output limits. The call's time limit is not a sandbox setting:
//! it is the `timeout` argument of [`Handler::invoke`](crate::Handler::invoke).

use serde::{Deserialize, Serialize};

use crate::needs::TABLE_ELEMENT_BYTES;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use onestep_core::settings::{
    DEFAULT_HTTP_FIELDS_LIMIT_BYTES, DEFAULT_LOG_LIMIT_BYTES, DEFAULT_LOG_RATE_BYTES_PER_MINUTE,
    DEFAULT_MAX_HTTP_HANDLES, DEFAULT_MAX_INSTANCES, DEFAULT_MAX_LOG_LINES,
    DEFAULT_MAX_LOG_MESSAGE_BYTES, DEFAULT_MAX_MEMORIES, DEFAULT_MAX_OPEN_HANDLES,
    DEFAULT_MAX_TABLE_ELEMENTS, DEFAULT_MAX_TABLES, DEFAULT_MEMORY_LIMIT_BYTES,
    DEFAULT_OUTPUT_LIMIT_BYTES,
};
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

/// Per-task sandbox. Everything not granted here is denied: no filesystem but
/// the preopens, no environment but the allow-listed variables, no arguments,
/// no sockets, no name lookup. Clocks and randomness are available.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxSettings {
    /// After a cancel, how long the guest may keep running to notice
    /// `cancel-requested()` and return by itself before it is stopped. Zero
    /// (default): stopped at once. The deadline still applies.
    pub cancel_grace: Duration,
    /// Ceiling on the guest's total linear memory, in bytes (all memories of
    /// the component together). Growth beyond it fails inside the guest (an
    /// allocation failure) and the attempt ends as `Trapped{MemoryLimit}`.
    pub memory_limit_bytes: u64,
    /// Optional fuel budget (≈ wasm instructions). Not a timer: use the
    /// `timeout` of `invoke` for time. Exhaustion ends as `Trapped{OutOfFuel}`.
    pub fuel: Option<u64>,
    /// Per attempt: most core instances the component may create (a Rust
    /// guest needs 1–3, componentize-py's Python guest 14).
    pub max_instances: u32,
    /// Per attempt: most tables, over all its core instances.
    pub max_tables: u32,
    /// Per attempt: most elements of any one table. Elements also count
    /// against `memory_limit_bytes` ([`TABLE_ELEMENT_BYTES`] each).
    pub max_table_elements: u64,
    /// Per attempt: most linear memories, over all its core instances.
    pub max_memories: u32,
    /// Directories visible to the guest; nothing else of the filesystem is.
    pub preopens: Vec<Preopen>,
    /// Names of environment variables passed through with the *host's*
    /// values (skipped when unset on the host). Nothing else is inherited.
    pub env_allow: Vec<String>,
    /// Environment variables with explicit values (win over `env_allow`).
    pub env: BTreeMap<String, String>,
    /// Bytes of guest stdout kept and forwarded to `tracing`; the rest is
    /// dropped (the guest's writes still succeed).
    pub stdout_limit_bytes: u64,
    /// Same for stderr (also the source of a panic's message).
    pub stderr_limit_bytes: u64,
    /// Per attempt: bytes of guest log (`log` and `progress` calls, captured
    /// stdout/stderr lines, the error message), each line charged its
    /// escaped text plus [`LOG_LINE_OVERHEAD_BYTES`](onestep_core::settings::LOG_LINE_OVERHEAD_BYTES);
    /// further lines are dropped and counted (docs/security.md#logs).
    pub log_limit_bytes: u64,
    /// Per attempt: most guest log lines.
    pub max_log_lines: u64,
    /// Longest message, note, output line or error message logged; longer
    /// ones are cut.
    pub max_log_message_bytes: u64,
    /// Per task, over time: bytes of guest log all attempts of the task
    /// together may produce per minute (a token bucket with a minute's worth
    /// of burst, one per loaded [`Handler`](crate::Handler) and shared by its
    /// clones).
    pub log_rate_bytes_per_minute: u64,
    /// Longest output text accepted from `handle`, in bytes; a longer one is
    /// refused before it is parsed ([`Outcome::OutputTooLarge`](crate::Outcome::OutputTooLarge)).
    /// `None` (default): no limit.
    pub result_limit_bytes: Option<u64>,
    /// Most files, directories, directory listings and file streams the
    /// guest may hold open at once (preopens and stdio not counted). One
    /// more `open-at`, `read-directory` or `*-via-stream` returns the WASI
    /// error code `quota`; dropping a handle frees its slot.
    pub max_open_handles: u32,
    /// Most `wasi:http` resources (fields, requests, bodies, response
    /// futures, responses) the guest may hold at once; the store's resource
    /// table holds at most this plus `max_open_handles` plus 64 entries, and
    /// one more creation ends the attempt (docs/security.md#http-resources).
    pub max_http_handles: u32,
    /// Header bytes of the `wasi:http` fields, requests and responses the
    /// guest may hold at once (host memory outside `memory_limit_bytes`);
    /// one more byte ends the attempt.
    pub http_fields_limit_bytes: u64,
    /// Outbound HTTP (`sandbox.network`); the default allows no request.
    pub network: crate::http::NetworkSettings,
}

impl Default for SandboxSettings {
    fn default() -> Self {
        Self {
            cancel_grace: Duration::ZERO,
            memory_limit_bytes: DEFAULT_MEMORY_LIMIT_BYTES,
            fuel: None,
            max_instances: DEFAULT_MAX_INSTANCES,
            max_tables: DEFAULT_MAX_TABLES,
            max_table_elements: DEFAULT_MAX_TABLE_ELEMENTS,
            max_memories: DEFAULT_MAX_MEMORIES,
            preopens: Vec::new(),
            env_allow: Vec::new(),
            env: BTreeMap::new(),
            stdout_limit_bytes: DEFAULT_OUTPUT_LIMIT_BYTES,
            stderr_limit_bytes: DEFAULT_OUTPUT_LIMIT_BYTES,
            log_limit_bytes: DEFAULT_LOG_LIMIT_BYTES,
            max_log_lines: DEFAULT_MAX_LOG_LINES,
            max_log_message_bytes: DEFAULT_MAX_LOG_MESSAGE_BYTES,
            log_rate_bytes_per_minute: DEFAULT_LOG_RATE_BYTES_PER_MINUTE,
            result_limit_bytes: None,
            max_open_handles: DEFAULT_MAX_OPEN_HANDLES,
            max_http_handles: DEFAULT_MAX_HTTP_HANDLES,
            http_fields_limit_bytes: DEFAULT_HTTP_FIELDS_LIMIT_BYTES,
            network: crate::http::NetworkSettings::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_settings_deserialize_with_defaults() {
        let s: SandboxSettings = serde_json::from_str(
            r#"{"memory_limit_bytes": 1048576, "preopens": [{"host": "/srv/docs", "guest": "/docs"}],
                "env_allow": ["LANG"], "env": {"MODE": "fast"}, "fuel": 15}"#,
        )
        .expect("sandbox settings");
        assert_eq!(s.memory_limit_bytes, 1 << 20);
        assert!(!s.preopens[0].writable());
        assert_eq!(s.fuel, Some(15));
        assert_eq!(
            s.stdout_limit_bytes,
            SandboxSettings::default().stdout_limit_bytes
        );
        assert!(serde_json::from_str::<SandboxSettings>(r#"{"memory": 1}"#).is_err());

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
