//! What a benchmark's history seed writes (docs/benchmarks.md#history): the plain description
//! every backend's `seed_history` takes. No SQL here; each backend writes the rows its own way.

use chrono::{DateTime, Utc};

/// Most rows one seed may write (docs/benchmarks.md#history).
pub const MAX_HISTORY_ROWS: u64 = 100_000_000;

/// Which UUID version the seeded rows' ids have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HistoryIds {
    /// Time-ordered, like rows written since ids became UUIDv7 (docs/semantics.md#time-ordered-ids).
    V7,
    /// Random, like rows written before.
    V4,
}

/// What a backend's `seed_history` writes.
#[derive(Debug, Clone)]
pub struct HistorySeed {
    /// Namespace of the rows.
    pub namespace: String,
    /// Task name of the rows.
    pub task_name: String,
    /// Number of executions (each with one attempt), at most [`MAX_HISTORY_ROWS`].
    pub count: u64,
    /// Id version.
    pub ids: HistoryIds,
    /// The newest row is created one millisecond before this instant (and finishes at it).
    pub before: DateTime<Utc>,
    /// Give every row an idempotency key (32 random hex digits, as callers' keys are random)
    /// and a submission digest, so the idempotency index holds the history too.
    pub idempotency_keys: bool,
}
