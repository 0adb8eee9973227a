//! The settings vocabulary shared by the configuration file (`onestep-config`), the worker
//! (`onestep-worker`) and the handler runtime (`onestep-wasm`).
//!
//! It owns each worker setting's one default (the config crate fills a file's gaps with these
//! constants, and the worker's and runtime's programmatic defaults are the same constants), the
//! one check of the rule that ties the heartbeat to the lease (and the cancel poll to the
//! heartbeat), and the plain types that
//! both the configuration and the runtime speak: a preopened directory ([`Preopen`]) and a
//! secret value ([`Secret`]: DSNs, API tokens, injected HTTP headers). The sandbox settings
//! built from these defaults are [`crate::sandbox::SandboxSettings`].
//!
//! Plain data and pure functions only: no I/O, no YAML, no wasmtime. The configuration crate
//! applies these rules at load time (with file locations in its errors), so `onestep check` and
//! `onestep run` reject the same files; the worker re-applies [`heartbeat_fits_lease`] to
//! settings built in code.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Worker id recorded on leases and attempts when a source sets none (`worker_id`).
pub const DEFAULT_WORKER_ID: &str = "onestep-worker";
/// Largest number of executions claimed at once (`batch_size`).
pub const DEFAULT_BATCH_SIZE: u32 = 100;
/// Wait between claims that found nothing (`poll_interval_s`).
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Length of a lease (`lease_duration_s`).
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(90);
/// Period of the heartbeat that extends a lease (`heartbeat_interval_s`); a third of
/// [`DEFAULT_LEASE_DURATION`], the largest value [`heartbeat_fits_lease`] accepts.
pub const DEFAULT_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(30);
/// Period of each source's poll of the cancel flags of its in-flight executions
/// (`cancel_poll_interval_s`), when the heartbeat is not shorter
/// ([`default_cancel_poll_interval`]).
pub const DEFAULT_CANCEL_POLL_INTERVAL: Duration = Duration::from_secs(1);
/// Executions of one task in flight per worker process (`concurrency`).
pub const DEFAULT_CONCURRENCY: u32 = 1;
/// How long in-flight executions may run after a shutdown signal (`app.shutdown_timeout_s`).
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

/// Largest request body the HTTP API accepts (`api.max_body_bytes`): 2 MiB.
pub const DEFAULT_API_MAX_BODY_BYTES: u64 = 2 * 1024 * 1024;

/// Linear-memory ceiling of one handler instance (`sandbox.memory_limit_bytes`): 64 MiB.
pub const DEFAULT_MEMORY_LIMIT_BYTES: u64 = 64 * 1024 * 1024;
/// Smallest accepted `sandbox.memory_limit_bytes`: 1 MiB.
pub const MIN_MEMORY_LIMIT_BYTES: u64 = 1024 * 1024;
/// Bytes of captured guest stdout, and separately of stderr, kept per attempt
/// (`sandbox.output_limit_bytes`): 64 KiB.
pub const DEFAULT_OUTPUT_LIMIT_BYTES: u64 = 64 * 1024;
// Per-attempt counts of the sandbox (`sandbox.max_instances`, `max_tables`, `max_memories`,
// `max_table_elements`): small, so that the worker's instance pool, sized from every task's
// `concurrency` times these, stays small; the example guests need at most 14 core instances
// (componentize-py's Python), 1 memory, 2 tables and 5,674 elements in their largest table.
/// Core instances one attempt may create (`sandbox.max_instances`).
pub const DEFAULT_MAX_INSTANCES: u32 = 32;
/// Tables one attempt may create (`sandbox.max_tables`).
pub const DEFAULT_MAX_TABLES: u32 = 8;
/// Linear memories one attempt may create (`sandbox.max_memories`).
pub const DEFAULT_MAX_MEMORIES: u32 = 4;
/// Elements of any one table of an attempt (`sandbox.max_table_elements`); the elements also
/// count against `memory_limit_bytes`.
pub const DEFAULT_MAX_TABLE_ELEMENTS: u64 = 100_000;
/// Files, directories and streams one handler attempt may hold open at once
/// (`sandbox.max_open_handles`).
pub const DEFAULT_MAX_OPEN_HANDLES: u32 = 256;
/// `wasi:http` resources (header fields, requests, bodies, response futures, responses) one
/// handler attempt may hold at once (docs/security.md#http-resources).
pub const DEFAULT_MAX_HTTP_HANDLES: u32 = 256;
/// Header bytes (as wasmtime-wasi-http counts them) of the `wasi:http` fields, requests and
/// responses one handler attempt may hold at once: 1 MiB.
pub const DEFAULT_HTTP_FIELDS_LIMIT_BYTES: u64 = 1024 * 1024;
/// Largest accepted `sandbox.max_open_handles`.
pub const MAX_OPEN_HANDLES_LIMIT: u32 = 65_536;
/// After a cancel, how long a guest may run on to notice it and return by itself before the
/// runtime stops it (`sandbox.cancel_grace_ms`, 0–60,000 ms in the file).
pub const DEFAULT_CANCEL_GRACE: Duration = Duration::from_millis(50);
/// After a shutdown has cancelled the executions still running, how long their `retrying`
/// completions (or releases) may take to reach the database before the worker returns
/// (docs/semantics.md#shutdown-and-drain). Not a sandbox setting and not settable from the file.
pub const DEFAULT_SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
// What a handler may put in the worker's log (docs/security.md#logs): one budget per attempt
// over everything it says (log and progress calls, stdout/stderr lines, its error message), a
// cap on each message and on the number of lines, and a rate per task over time.
/// Bytes of guest log one attempt may produce (`sandbox.log_limit_bytes`): 1 MiB, each line
/// charged what it costs in the JSON log format (its JSON-escaped text, its ids and
/// [`LOG_LINE_OVERHEAD_BYTES`]).
pub const DEFAULT_LOG_LIMIT_BYTES: u64 = 1024 * 1024;
/// Guest log lines one attempt may produce (`sandbox.max_log_lines`).
pub const DEFAULT_MAX_LOG_LINES: u64 = 5_000;
/// Longest single guest message, progress note, output line or error message written to the
/// log (`sandbox.max_log_message_bytes`): 16 KiB; longer ones are cut.
pub const DEFAULT_MAX_LOG_MESSAGE_BYTES: u64 = 16 * 1024;
/// Smallest accepted `sandbox.max_log_message_bytes`.
pub const MIN_LOG_MESSAGE_BYTES: u64 = 256;
/// Smallest accepted `sandbox.log_limit_bytes` and `sandbox.log_rate_bytes_per_minute`.
pub const MIN_LOG_BYTES: u64 = 1024;

/// True for a portable environment variable name: `[A-Za-z_][A-Za-z0-9_]*` (the rule of
/// `sandbox.env` names and `sandbox.env_values` keys).
pub fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}
/// Bytes of guest log all attempts of one task together may produce per minute in one worker
/// (`sandbox.log_rate_bytes_per_minute`): 8 MiB; the burst is one minute's worth.
pub const DEFAULT_LOG_RATE_BYTES_PER_MINUTE: u64 = 8 * 1024 * 1024;
/// What each guest line is charged on top of its text and the ids it carries: a bound on the
/// rest of what the worker writes with it in its largest format, JSON (timestamp, level, target,
/// field names and punctuation, the delivery span listed twice with a 20-digit attempt number;
/// 437 bytes measured for a progress line), so that empty lines are not free. The ids (execution,
/// attempt, task, namespace) are charged on top, as often as the JSON line repeats them
/// (docs/security.md#logs).
pub const LOG_LINE_OVERHEAD_BYTES: u64 = 512;

/// The lease/heartbeat rule: `0 < heartbeat <= lease / 3`, so that two heartbeats in a row may
/// fail before the lease runs out.
///
/// A relative tolerance of 1e-9 absorbs the rounding of decimal seconds (`lease_duration_s:
/// 1.0` with `heartbeat_interval_s: 0.3333333333` is accepted).
pub fn heartbeat_fits_lease(heartbeat: Duration, lease: Duration) -> bool {
    let hb = heartbeat.as_secs_f64();
    let limit = lease.as_secs_f64() / 3.0;
    hb > 0.0 && (hb <= limit || hb - limit <= 1e-9 * limit)
}

/// The cancel-poll period of a source that sets none: [`DEFAULT_CANCEL_POLL_INTERVAL`], or the
/// heartbeat period when that is shorter (polling less often than the heartbeat would add
/// nothing: the heartbeat reports the cancel flag too).
pub fn default_cancel_poll_interval(heartbeat: Duration) -> Duration {
    DEFAULT_CANCEL_POLL_INTERVAL.min(heartbeat)
}

/// The cancel-poll rule: `0 < cancel_poll <= heartbeat` (the same relative tolerance as
/// [`heartbeat_fits_lease`]). A longer poll would never notice a cancel before the heartbeat
/// does, so it is refused rather than silently useless; with the heartbeat rule it also keeps
/// the poll within a third of the lease.
pub fn cancel_poll_fits_heartbeat(cancel_poll: Duration, heartbeat: Duration) -> bool {
    let poll = cancel_poll.as_secs_f64();
    let limit = heartbeat.as_secs_f64();
    poll > 0.0 && (poll <= limit || poll - limit <= 1e-9 * limit)
}

/// A host directory made visible to a handler at an absolute guest path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preopen {
    /// Directory on the worker host (absolute once configured). It must exist when the task
    /// runs.
    pub host: PathBuf,
    /// Absolute path under which the guest sees it, e.g. `/docs`.
    pub guest: String,
    /// Access mode (default read-only).
    #[serde(default)]
    pub mode: PreopenMode,
}

impl Preopen {
    /// True when the guest may create, modify and delete files in it.
    pub fn writable(&self) -> bool {
        self.mode == PreopenMode::Rw
    }
}

/// Access mode of a [`Preopen`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PreopenMode {
    /// Read-only (default): the guest can neither create, modify nor delete anything in it.
    #[default]
    Ro,
    /// Read-write.
    Rw,
}

/// A secret string (a DSN, an API token, a header value the host injects). `Debug`, `Display`
/// and `Serialize` print `<redacted>`; [`Secret::expose`] reads it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret value. Never log it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("<redacted>")
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Secret)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeat_rule_allows_a_third_of_the_lease() {
        let s = Duration::from_secs_f64;
        assert!(heartbeat_fits_lease(s(3.0), s(9.0)));
        assert!(heartbeat_fits_lease(s(0.333_333_333_3), s(1.0)));
        assert!(heartbeat_fits_lease(
            DEFAULT_HEARTBEAT_INTERVAL,
            DEFAULT_LEASE_DURATION
        ));
        assert!(!heartbeat_fits_lease(s(3.5), s(9.0)));
        assert!(!heartbeat_fits_lease(Duration::ZERO, s(9.0)));
        assert!(!heartbeat_fits_lease(s(1.0), Duration::ZERO));
    }

    #[test]
    fn cancel_poll_rule_and_default_follow_the_heartbeat() {
        let s = Duration::from_secs_f64;
        assert!(cancel_poll_fits_heartbeat(
            DEFAULT_CANCEL_POLL_INTERVAL,
            DEFAULT_HEARTBEAT_INTERVAL
        ));
        assert!(cancel_poll_fits_heartbeat(s(0.5), s(0.5)));
        assert!(!cancel_poll_fits_heartbeat(s(0.6), s(0.5)));
        assert!(!cancel_poll_fits_heartbeat(Duration::ZERO, s(0.5)));
        assert_eq!(
            default_cancel_poll_interval(DEFAULT_HEARTBEAT_INTERVAL),
            DEFAULT_CANCEL_POLL_INTERVAL
        );
        assert_eq!(default_cancel_poll_interval(s(0.5)), s(0.5));
        assert!(cancel_poll_fits_heartbeat(
            default_cancel_poll_interval(s(0.1)),
            s(0.1)
        ));
    }
}
