//! Plain, serde-deserializable settings: [`RuntimeSettings`] (one per worker
//! process) and [`SandboxSettings`] (one per task). The config crate embeds
//! these; every field has a default so a partial YAML block is enough.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::PathBuf;

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

/// A host directory made visible to the guest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preopen {
    /// Directory on the worker host. It must exist when the task runs.
    pub host_path: PathBuf,
    /// Absolute path under which the guest sees it, e.g. `/docs`.
    pub guest_path: String,
    /// `false` (default): read-only, the guest can neither create, modify nor
    /// delete anything in it. `true`: read-write.
    #[serde(default)]
    pub writable: bool,
}

/// Per-task sandbox. Everything not granted here is denied: no filesystem but
/// the preopens, no environment but the allow-listed variables, no arguments,
/// no sockets, no name lookup. Clocks and randomness are available.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SandboxSettings {
    /// Wall-clock limit of one attempt in seconds (fractions allowed). `None`:
    /// no limit besides the `timeout` given to `invoke`. Enforced by racing the
    /// call against a timer (host calls) and the epoch ticker (guest code).
    pub timeout_s: Option<f64>,
    /// After a cancel, how long (milliseconds) the guest may keep running to
    /// notice `cancel-requested()` and return by itself before it is
    /// stopped. 0 (default): stopped at once. The deadline still applies.
    pub cancel_grace_ms: u64,
    /// Ceiling on the guest's total linear memory, in bytes (all memories of
    /// the component together). Growth beyond it fails inside the guest (an
    /// allocation failure) and the attempt ends as `Trapped{MemoryLimit}`.
    pub memory_limit_bytes: u64,
    /// Optional fuel budget (≈ wasm instructions). Not a timer: use
    /// `timeout_s` for time. Exhaustion ends as `Trapped{OutOfFuel}`.
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
}

impl Default for SandboxSettings {
    fn default() -> Self {
        Self {
            timeout_s: None,
            cancel_grace_ms: 0,
            memory_limit_bytes: 256 << 20,
            fuel: None,
            max_instances: 64,
            max_tables: 64,
            max_table_elements: 1_000_000,
            max_memories: 16,
            preopens: Vec::new(),
            env_allow: Vec::new(),
            env: BTreeMap::new(),
            stdout_limit_bytes: 64 << 10,
            stderr_limit_bytes: 64 << 10,
            log_limit_bytes: 1 << 20,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partial_settings_deserialize_with_defaults() {
        let s: SandboxSettings = serde_json::from_str(
            r#"{"memory_limit_bytes": 1048576, "preopens": [{"host_path": "/srv/docs", "guest_path": "/docs"}],
                "env_allow": ["LANG"], "env": {"MODE": "fast"}, "timeout_s": 1.5}"#,
        )
        .expect("sandbox settings");
        assert_eq!(s.memory_limit_bytes, 1 << 20);
        assert!(!s.preopens[0].writable);
        assert_eq!(s.timeout_s, Some(1.5));
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
