//! The ports that storage backends implement, split by role (architecture: client side and
//! worker side): [`ExecutionStore`] for clients and [`LeaseStore`] for workers, plus the four
//! around them: [`Retention`] (`onestep purge`), [`Readiness`] (the API's `/readyz`),
//! [`ExecutionInsights`] (the dashboard and the API's gauge) and [`StoreStats`] (the figures
//! `onestep bench` prints). One backend type implements all six and hands them out through
//! the [`Backend`](crate::backend::Backend) handle.
//!
//! Backends read "now" from their injected [`Clock`](crate::time::Clock) once per transaction
//! (docs/semantics.md#time) and never use the database clock. Every worker-side write is fenced by the lease
//! token (docs/semantics.md#lease-fencing); a fence that matches no row is [`ExecutionError::StaleLease`].

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::diagnostics::{AttemptRecord, LiveDiagnostics, LogTail, PurgeReport, PurgeRequest};
use crate::error::ExecutionError;
use crate::execution::{
    Completion, Execution, ExecutionLease, ExecutionPage, HeartbeatResult, LeaseRef,
};
use crate::request::{ClaimRequest, ListFilter, PreparedSubmission, validate_lease_duration};
use crate::status::ExecutionStatus;

/// Client-side storage operations (docs/semantics.md#client-operations). Inputs are already validated by
/// [`ExecutionClient`](crate::client::ExecutionClient); namespaces are trimmed.
#[async_trait]
pub trait ExecutionStore: Send + Sync {
    /// Inserts a submission (T1). With an idempotency key, a concurrent or earlier submission
    /// with the same key returns that execution (any status) when the digest matches, else
    /// [`ExecutionError::Conflict`]. An ambiguous commit is resolved by re-reading through the key.
    async fn submit(&self, submission: PreparedSubmission) -> Result<Execution, ExecutionError>;

    /// Inserts many submissions in one transaction with a multi-row insert. The outer error is
    /// for the whole batch (nothing written); each item is the execution (new or replayed) or
    /// that item's conflict.
    async fn submit_many(
        &self,
        submissions: Vec<PreparedSubmission>,
    ) -> Result<Vec<Result<Execution, ExecutionError>>, ExecutionError>;

    /// Reads one execution of `namespace`; `None` when absent or in another namespace.
    async fn get(&self, namespace: &str, id: Uuid) -> Result<Option<Execution>, ExecutionError>;

    /// The `version` of each of `ids` that exists, in any namespace and any order: one read by
    /// primary key for every caller waiting on these executions (docs/http-api.md#waiting); a
    /// waiter re-reads, through [`Self::get`], an execution whose version moved.
    async fn versions(&self, ids: &[Uuid]) -> Result<Vec<(Uuid, i64)>, ExecutionError>;

    /// One page, newest first (docs/semantics.md#listing-and-cursors).
    async fn list(
        &self,
        namespace: &str,
        filter: &ListFilter,
    ) -> Result<ExecutionPage, ExecutionError>;

    /// Cancels (T3/T4, or no change for `cancel_requested` and terminal rows); `None` when absent.
    async fn cancel(
        &self,
        namespace: &str,
        id: Uuid,
        reason: Option<String>,
    ) -> Result<Option<Execution>, ExecutionError>;

    /// The reason stored by the cancel of one execution of `namespace`
    /// (docs/semantics.md#cancellation): outer `None` when the execution is absent or in another
    /// namespace, inner `None` when it was never cancelled with a reason.
    async fn cancel_reason(
        &self,
        namespace: &str,
        id: Uuid,
    ) -> Result<Option<Option<String>>, ExecutionError>;

    /// The attempts of one execution of `namespace`, oldest first, each with its persisted
    /// diagnostics when the store keeps them (docs/observability.md#attempt-diagnostics);
    /// `None` when the execution is absent or in another namespace. The log tail is left out
    /// (see [`Self::attempt_log`]). The default knows no attempts.
    async fn attempts(
        &self,
        namespace: &str,
        id: Uuid,
    ) -> Result<Option<Vec<AttemptRecord>>, ExecutionError> {
        Ok(self.get(namespace, id).await?.map(|_| Vec::new()))
    }

    /// The persisted log tail of attempt `attempt_no` of one execution of `namespace`: outer
    /// `None` when the execution or the attempt is absent, inner `None` when the attempt has no
    /// stored lines. The default stores none.
    async fn attempt_log(
        &self,
        namespace: &str,
        id: Uuid,
        attempt_no: u32,
    ) -> Result<Option<Option<LogTail>>, ExecutionError> {
        let _ = (namespace, id, attempt_no);
        Ok(None)
    }
}

/// Removal of old finished executions (docs/cli.md#purge): bounded batches, each its own
/// transaction, attempts and diagnostics with their execution.
#[async_trait]
pub trait Retention: Send + Sync {
    /// Deletes (or, on a dry run, counts) what `request` selects and says how much.
    async fn purge(&self, request: &PurgeRequest) -> Result<PurgeReport, ExecutionError>;
}

/// Worker-side storage operations (docs/semantics.md#worker-operations).
#[async_trait]
pub trait LeaseStore: Send + Sync {
    /// Bounded maintenance (T5, T6, T7) then claims up to `limit` rows (T2) in claim-index order.
    async fn claim(&self, request: &ClaimRequest) -> Result<Vec<ExecutionLease>, ExecutionError>;

    /// Extends the lease (T8); reports `cancel_requested`. Stale token → `StaleLease`.
    async fn heartbeat(
        &self,
        lease: &LeaseRef,
        lease_duration_s: f64,
    ) -> Result<HeartbeatResult, ExecutionError>;

    /// The set-based heartbeat (docs/semantics.md#heartbeat): [`Self::heartbeat`] for every lease
    /// of `leases` with one "now", one result per input in input order, each exactly what
    /// `heartbeat` would answer for that lease alone (the new expiry and `cancel_requested`, or
    /// that lease's `StaleLease`), so a stale lease does not fail the others; a lease given twice
    /// gets the same answer twice. The outer error is for the whole batch (nothing written):
    /// an invalid `lease_duration_s` or a storage failure. An empty slice answers empty without
    /// touching the store.
    ///
    /// The default runs `heartbeat` once per lease (one transaction each) and reports every
    /// error per lease; backends override it with one fenced statement set per batch.
    async fn heartbeat_many(
        &self,
        leases: &[LeaseRef],
        lease_duration_s: f64,
    ) -> Result<Vec<Result<HeartbeatResult, ExecutionError>>, ExecutionError> {
        validate_lease_duration(lease_duration_s)?;
        let mut out = Vec::with_capacity(leases.len());
        for lease in leases {
            out.push(self.heartbeat(lease, lease_duration_s).await);
        }
        Ok(out)
    }

    /// The cancel poll (docs/semantics.md#cancel-poll): of `leases`, the execution ids whose row
    /// is `cancel_requested` under that lease's token while the lease is still valid, in no
    /// particular order. One set-based read for the whole slice; it writes nothing, so it
    /// neither extends a lease nor fences anything. An empty slice answers empty without
    /// touching the store.
    async fn cancel_requested(&self, leases: &[LeaseRef]) -> Result<Vec<Uuid>, ExecutionError>;

    /// Completes the attempt (T9–T13); cancel wins over success; an identical replay of a
    /// terminal completion is accepted.
    async fn complete(
        &self,
        lease: &LeaseRef,
        completion: &Completion,
    ) -> Result<Execution, ExecutionError>;

    /// Several completions in one transaction, each still fenced by its own token. The outer
    /// error is for the whole batch (nothing written); each item carries its own outcome (a
    /// stale item does not undo the others).
    async fn complete_many(
        &self,
        items: &[(LeaseRef, Completion)],
    ) -> Result<Vec<Result<Execution, ExecutionError>>, ExecutionError>;

    /// Puts a claimed-but-never-started execution back to `queued` (T14).
    async fn release(&self, lease: &LeaseRef) -> Result<Execution, ExecutionError>;

    /// Parks the attempt of a handler that sleeps (T15, docs/steps.md#sleep): in one
    /// transaction, where the execution holds `lease` (token, live lease, `running`), it goes
    /// back to `queued` with `available_at = park.wake_at`, its lease is cleared and `attempts`
    /// kept, and its attempt ends `parked`; the park's diagnostics are written with it. A cancel
    /// requested before the park wins: a `cancel_requested` row under `lease` becomes
    /// `cancelled` (T11 with the cancel error object), so nobody runs it again. Anything else
    /// is the completion's stale-lease error and writes nothing. The default parks nothing.
    async fn park(
        &self,
        lease: &LeaseRef,
        park: &crate::park::Park,
    ) -> Result<Execution, ExecutionError> {
        let _ = (lease, park);
        Err(ExecutionError::invalid("this store cannot park executions"))
    }

    /// How many attempts of the execution ended `parked`: the worker takes them out of the
    /// retry policy's `n` (docs/semantics.md#retry-policies). The default (a store that never
    /// parks) answers 0.
    async fn parked_attempts(&self, execution_id: Uuid) -> Result<u32, ExecutionError> {
        let _ = execution_id;
        Ok(0)
    }

    /// Persists the progress and log tail of running attempts (the heartbeat ticker's live
    /// write, docs/observability.md#attempt-diagnostics), one statement set for the slice. It
    /// never overwrites an attempt's final diagnostics and fences nothing: an attempt id is
    /// written only by the worker that holds it. Returns whether the store keeps diagnostics
    /// (the default keeps none and touches nothing).
    async fn record_live(
        &self,
        items: &[(LeaseRef, LiveDiagnostics)],
    ) -> Result<bool, ExecutionError> {
        let _ = items;
        Ok(false)
    }
}

/// Whether a store can serve requests now (the API's `GET /readyz`).
#[async_trait]
pub trait Readiness: Send + Sync {
    /// `Ok` when the store answers and its tables exist. Gives up after a bounded wait; the
    /// error ([`ExecutionError::Backend`], operation `ready`) is for logs, never for clients.
    async fn ready(&self) -> Result<(), ExecutionError>;
}

/// Queue and run timing of one execution, as the store recorded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExecutionTiming {
    /// Microseconds from `available_at` to `started_at` (`None` when never started).
    pub queued_us: Option<i64>,
    /// Microseconds from `started_at` to `finished_at` (`None` when not both are set).
    pub running_us: Option<i64>,
    /// Whether the execution is `succeeded`.
    pub succeeded: bool,
}

/// Read-only figures about a store for benchmarks and diagnostics; neither the API nor the
/// worker uses them.
#[async_trait]
pub trait StoreStats: Send + Sync {
    /// The timing of every execution of `namespace` created at or after `created_since` (all
    /// when `None`), in no particular order.
    async fn execution_timings(
        &self,
        namespace: &str,
        created_since: Option<DateTime<Utc>>,
    ) -> Result<Vec<ExecutionTiming>, ExecutionError>;

    /// Cumulative server-wide counters (statements, rows read/written) by lower-case name.
    /// They include other sessions' work; compare two readings. Empty when the server
    /// exposes none.
    async fn server_counters(&self) -> Result<BTreeMap<String, f64>, ExecutionError>;

    /// Rows and on-disk bytes (data and indexes) of each table the backend writes: executions,
    /// attempts and, where it exists, the diagnostics table. Exact row counts, so this reads
    /// every row: for benchmarks between phases, never on a hot path. Empty by default.
    async fn table_footprint(&self) -> Result<Vec<TableFootprint>, ExecutionError> {
        Ok(Vec::new())
    }
}

/// The size of one table, as [`StoreStats::table_footprint`] reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableFootprint {
    /// Table name.
    pub table: String,
    /// Rows (`COUNT(*)`).
    pub rows: u64,
    /// Data and index bytes as the server accounts them (pages allocated, so space freed by
    /// deletes shows up only once the server gives it back or reuses it).
    pub bytes: u64,
}

/// How many executions of one task are in one status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusCount {
    /// Task name.
    pub task_name: String,
    /// Status.
    pub status: ExecutionStatus,
    /// Number of executions.
    pub count: u64,
}

impl StatusCount {
    /// A grouped row as a backend reads it: `status` must be a stored status name.
    pub fn from_row(task_name: String, status: &str, count: i64) -> Result<Self, ExecutionError> {
        let status = status.parse::<ExecutionStatus>().map_err(|_| {
            ExecutionError::Undecodable(format!("unknown stored status {status:?}"))
        })?;
        Ok(StatusCount {
            task_name,
            status,
            count: u64::try_from(count).unwrap_or(0),
        })
    }
}

/// The work of one fairness key of one task (docs/semantics.md#fair-claim): what waits and what
/// runs, across the fleet.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct KeyLoad {
    /// Namespace.
    pub namespace: String,
    /// Task name.
    pub task_name: String,
    /// The effective fairness key (the namespace when the submit set none).
    pub fairness_key: String,
    /// Executions `queued` or `retrying`.
    pub waiting: u64,
    /// Executions `running` or `cancel_requested` (they hold a slot).
    pub running: u64,
}

/// The busiest fairness keys, most waiting first ([`ExecutionInsights::key_loads`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyLoads {
    /// At most the `limit` asked for.
    pub keys: Vec<KeyLoad>,
    /// More keys had work than `limit`.
    pub truncated: bool,
}

impl KeyLoads {
    /// The rows `(namespace, task, key, waiting, running)` a backend read with `LIMIT limit + 1`,
    /// busiest first: the extra row only says that more keys had work.
    pub fn from_rows(
        rows: impl IntoIterator<Item = (String, String, String, i64, i64)>,
        limit: u32,
    ) -> Self {
        let mut out = KeyLoads::default();
        for (i, (namespace, task_name, fairness_key, waiting, running)) in
            rows.into_iter().enumerate()
        {
            if i >= limit as usize {
                out.truncated = true;
                break;
            }
            out.keys.push(KeyLoad {
                namespace,
                task_name,
                fairness_key,
                waiting: u64::try_from(waiting).unwrap_or(0),
                running: u64::try_from(running).unwrap_or(0),
            });
        }
        out
    }
}

/// The executions created in a recent window, as the dashboard's overview summarises them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecentActivity {
    /// Rows read (at most the `max_rows` asked for, newest first).
    pub sampled: u64,
    /// Whether more rows than `max_rows` were created in the window.
    pub truncated: bool,
    /// Of those, how many are `succeeded`.
    pub succeeded: u64,
    /// Of those, how many are `failed`.
    pub failed: u64,
    /// Of those, how many are terminal.
    pub finished: u64,
    /// Microseconds from `available_at` to `started_at` of each started one, ascending.
    pub queue_waits_us: Vec<i64>,
}

impl RecentActivity {
    /// Sums the newest-first rows `(status, queue wait in µs)` a backend read with `LIMIT
    /// max_rows + 1`: the extra row only says that the window held more. Unknown statuses count
    /// as sampled, neither succeeded nor failed; negative waits are left out.
    pub fn from_rows(rows: impl IntoIterator<Item = (String, Option<i64>)>, max_rows: u32) -> Self {
        let mut out = RecentActivity::default();
        for (i, (status, wait)) in rows.into_iter().enumerate() {
            if i >= max_rows as usize {
                out.truncated = true;
                break;
            }
            out.sampled += 1;
            let status = status.parse::<ExecutionStatus>().ok();
            match status {
                Some(ExecutionStatus::Succeeded) => out.succeeded += 1,
                Some(ExecutionStatus::Failed) => out.failed += 1,
                _ => {}
            }
            if status.is_some_and(ExecutionStatus::is_terminal) {
                out.finished += 1;
            }
            out.queue_waits_us.extend(wait.filter(|w| *w >= 0));
        }
        out.queue_waits_us.sort_unstable();
        out
    }
}

/// Read-only aggregates for the operator dashboard (docs/ui.md#overview-queries). Each is one
/// statement over an index whose first column is the namespace.
#[async_trait]
pub trait ExecutionInsights: Send + Sync {
    /// Executions of `namespace` grouped by task and status (one grouped query).
    async fn counts_by_task_status(
        &self,
        namespace: &str,
    ) -> Result<Vec<StatusCount>, ExecutionError>;

    /// Executions of each of `namespaces` grouped by namespace, task and status: the API's
    /// sampled `onestep_executions` gauge (docs/observability.md#api-metrics). The default
    /// asks [`counts_by_task_status`](Self::counts_by_task_status) once per namespace; a
    /// backend overrides it with one grouped statement.
    async fn counts_by_namespace(
        &self,
        namespaces: &[String],
    ) -> Result<Vec<(String, StatusCount)>, ExecutionError> {
        let mut out = Vec::new();
        for ns in namespaces {
            for c in self.counts_by_task_status(ns).await? {
                out.push((ns.clone(), c));
            }
        }
        Ok(out)
    }

    /// The newest at most `max_rows` executions of `namespace` created at or after `since`.
    async fn recent_activity(
        &self,
        namespace: &str,
        since: DateTime<Utc>,
        max_rows: u32,
    ) -> Result<RecentActivity, ExecutionError>;

    /// The at most `limit` fairness keys of `namespaces` with the most executions waiting
    /// (then running), each with its waiting and running counts: one grouped statement over the
    /// executions not yet finished (docs/ui.md#keys).
    async fn key_loads(
        &self,
        namespaces: &[String],
        limit: u32,
    ) -> Result<KeyLoads, ExecutionError>;
    /// The at most `limit` fleet-wide rate-limit buckets (task starts and outbound origins) as
    /// last written, paused first, then fewest tokens: who is being throttled and why
    /// (docs/ui.md#rate-limits). One statement over the small buckets table; a store without it
    /// answers [`BucketStates::default`] (`kept: false`).
    async fn rate_limits(&self, limit: u32) -> Result<crate::rate::BucketStates, ExecutionError>;
}
