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
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use onestep_core::settings::{
    DEFAULT_MAX_OPEN_HANDLES, DEFAULT_MEMORY_LIMIT_BYTES, DEFAULT_OUTPUT_LIMIT_BYTES,
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
    /// Pooling only: number of instances that may be alive at once (the
    /// worker's concurrency plus headroom). Memory and table slots are sized
    /// from it. Ignored by the on-demand allocator.
    pub pool_max_instances: u32,
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
            pool_max_instances: 128,
            max_memory_bytes: 4 << 30,
            fuel_metering: true,
            parallel_compilation: true,
        }
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
    /// Maximum number of core instances a component may create.
    pub max_instances: u32,
    /// Maximum number of tables.
    pub max_tables: u32,
    /// Maximum number of elements of any one table.
    pub max_table_elements: u64,
    /// Maximum number of linear memories.
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
    /// Total bytes of `log` messages accepted from the guest per attempt;
    /// further messages are dropped (one warning is emitted).
    pub log_limit_bytes: u64,
    /// Most files, directories, directory listings and file streams the
    /// guest may hold open at once (preopens and stdio not counted). One
    /// more `open-at`, `read-directory` or `*-via-stream` returns the WASI
    /// error code `quota`; dropping a handle frees its slot.
    pub max_open_handles: u32,
}

impl Default for SandboxSettings {
    fn default() -> Self {
        Self {
            cancel_grace: Duration::ZERO,
            memory_limit_bytes: DEFAULT_MEMORY_LIMIT_BYTES,
            fuel: None,
            max_instances: 64,
            max_tables: 64,
            max_table_elements: 1_000_000,
            max_memories: 16,
            preopens: Vec::new(),
            env_allow: Vec::new(),
            env: BTreeMap::new(),
            stdout_limit_bytes: DEFAULT_OUTPUT_LIMIT_BYTES,
            stderr_limit_bytes: DEFAULT_OUTPUT_LIMIT_BYTES,
            log_limit_bytes: 1 << 20,
            max_open_handles: DEFAULT_MAX_OPEN_HANDLES,
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
}
