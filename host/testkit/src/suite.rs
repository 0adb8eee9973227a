//! The conformance-suite harness: fixtures, the probe port, and [`conformance_tests!`]
//! (crate::conformance_tests), which stamps one test per case for a backend.
//!
//! Every case gets a fresh fixture from the factory (for SQL backends: a new database with new
//! tables), runs inside its own task, and the fixture is destroyed afterwards whatever happened.

use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use futures::future::BoxFuture;
use onestep_core::components::{ComponentDigest, ComponentStore};
use onestep_core::error_object::ErrorObject;
use onestep_core::ports::{ExecutionStore, LeaseStore};
use onestep_core::rate::RateLimitStore;
use onestep_core::{AttemptStatus, Limits};
use uuid::Uuid;

use crate::clock::ManualClock;

/// One attempt row as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptRow {
    /// Attempt id.
    pub id: Uuid,
    /// 1-based number.
    pub attempt_no: u32,
    /// Status.
    pub status: AttemptStatus,
    /// The lease token issued with it.
    pub lease_token: Uuid,
    /// Worker id.
    pub worker_id: String,
    /// Error object (SQL NULL and JSON null both `None`).
    pub error: Option<ErrorObject>,
    /// Claim instant.
    pub started_at: DateTime<Utc>,
    /// Last heartbeat instant.
    pub heartbeat_at: DateTime<Utc>,
    /// End instant.
    pub finished_at: Option<DateTime<Utc>>,
}

/// The execution columns the domain object does not expose.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseColumns {
    /// Current lease token.
    pub lease_token: Option<Uuid>,
    /// Current lease expiry.
    pub lease_expires_at: Option<DateTime<Utc>>,
    /// Worker holding the lease.
    pub worker_id: Option<String>,
    /// Last accepted cancel reason.
    pub cancel_reason: Option<String>,
    /// Last mutation instant.
    pub updated_at: DateTime<Utc>,
}

/// Backend-specific read access used by the suite to check what the domain API hides.
#[async_trait]
pub trait Probe: Send + Sync {
    /// All attempts of an execution, by attempt number.
    async fn attempts(&self, execution_id: Uuid) -> Vec<AttemptRow>;
    /// The hidden columns of one execution (`None` when absent).
    async fn lease_columns(&self, execution_id: Uuid) -> Option<LeaseColumns>;
    /// Number of execution rows.
    async fn count_executions(&self) -> u64;
    /// Inserts one queued execution of `namespace`/`task` (payload and metadata `{}`, available
    /// and created at `now`) the way the reference does, naming none of the `priority` and
    /// `fairness_key` columns, and returns its id; `None` when the store has no such raw insert
    /// (the in-memory store).
    async fn insert_without_schedule(
        &self,
        namespace: &str,
        task: &str,
        now: DateTime<Utc>,
    ) -> Option<Uuid> {
        let _ = (namespace, task, now);
        None
    }
    /// Alters one byte of chunk `seq` of the stored component `digest` behind the store's back
    /// (docs/semantics.md#component-store); false when there is no such chunk.
    async fn corrupt_component_chunk(&self, digest: &ComponentDigest, seq: u32) -> bool;
    /// The header rows and chunk rows stored for `digest`.
    async fn component_rows(&self, digest: &ComponentDigest) -> (u64, u64);
    /// Inserts chunk `seq` of `digest` without its header, as a put cut short before its header
    /// would leave it if its transaction were not rolled back; false when the store has no such
    /// raw insert (the in-memory store).
    async fn insert_component_chunk(
        &self,
        digest: &ComponentDigest,
        seq: u32,
        bytes: &[u8],
    ) -> bool {
        let _ = (digest, seq, bytes);
        false
    }
}

/// A fresh, empty store plus its clock and probe.
#[derive(Clone)]
pub struct Fixture {
    /// Client-side port.
    pub store: Arc<dyn ExecutionStore>,
    /// Worker-side port.
    pub leases: Arc<dyn LeaseStore>,
    /// Hidden-column access.
    pub probe: Arc<dyn Probe>,
    /// The store's rate-limit buckets (docs/semantics.md#rate-limits), on the same clock.
    pub buckets: Arc<dyn RateLimitStore>,
    /// The store's completion-webhook outbox (docs/semantics.md#completion-webhooks), when it
    /// keeps one.
    pub callbacks: Option<Arc<dyn onestep_core::callback::CallbackStore>>,
    /// The store's component store (docs/semantics.md#component-store).
    pub components: Arc<dyn ComponentStore>,
    /// The store's deployments (docs/deployments.md#data-model), over the same components.
    pub deployments: Arc<dyn onestep_core::deployments::DeploymentStore>,
    /// The store's durable steps (docs/steps.md).
    pub steps: Arc<dyn onestep_core::steps::StepStore>,
    /// The store's purge (docs/cli.md#purge).
    pub retention: Arc<dyn onestep_core::ports::Retention>,
    /// The store's clock.
    pub clock: Arc<ManualClock>,
    /// The store's limits.
    pub limits: Limits,
    /// Opaque handle the factory uses to destroy the fixture (e.g. a database name).
    pub handle: String,
}

impl Fixture {
    /// The fixture of a backend value that serves both ports itself (a clone behind each).
    pub fn of<B>(
        backend: B,
        probe: Arc<dyn Probe>,
        clock: Arc<ManualClock>,
        limits: Limits,
        handle: String,
    ) -> Fixture
    where
        B: ExecutionStore
            + LeaseStore
            + RateLimitStore
            + onestep_core::callback::CallbackPort
            + ComponentStore
            + onestep_core::deployments::DeploymentStore
            + onestep_core::steps::StepStore
            + onestep_core::ports::Retention
            + Clone
            + 'static,
    {
        Fixture {
            callbacks: onestep_core::callback::CallbackPort::callback_port(&backend),
            buckets: Arc::new(backend.clone()),
            components: Arc::new(backend.clone()),
            deployments: Arc::new(backend.clone()),
            steps: Arc::new(backend.clone()),
            retention: Arc::new(backend.clone()),
            store: Arc::new(backend.clone()),
            leases: Arc::new(backend),
            probe,
            clock,
            limits,
            handle,
        }
    }
}

/// What a SQL factory keeps per live fixture (its backend, its database), by fixture handle,
/// until [`FixtureFactory::destroy`] takes it back to close and drop it.
pub struct LiveFixtures<T>(tokio::sync::Mutex<Vec<(String, T)>>);

impl<T> Default for LiveFixtures<T> {
    fn default() -> Self {
        LiveFixtures(tokio::sync::Mutex::new(Vec::new()))
    }
}

impl<T> LiveFixtures<T> {
    /// Keeps `value` for the fixture `handle`.
    pub async fn insert(&self, handle: String, value: T) {
        self.0.lock().await.push((handle, value));
    }

    /// Takes back what was kept for the fixture `handle` (`None` when nothing was).
    pub async fn take(&self, handle: &str) -> Option<T> {
        let mut all = self.0.lock().await;
        let i = all.iter().position(|(h, _)| h == handle)?;
        Some(all.remove(i).1)
    }
}

/// Why a factory could not make a fixture (e.g. the server refused the scratch database).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct FixtureError(#[from] pub Box<dyn std::error::Error + Send + Sync>);

/// Creates and destroys fixtures.
#[async_trait]
pub trait FixtureFactory: Send + Sync {
    /// A fresh store with `limits` and a manual clock.
    async fn create(&self, limits: Limits) -> Result<Fixture, FixtureError>;
    /// Releases everything the fixture holds (drops its database).
    async fn destroy(&self, fixture: Fixture);
}

/// A conformance case.
pub type CaseFn = fn(Fixture) -> BoxFuture<'static, ()>;

/// A named case with the limits its fixture needs.
pub struct Case {
    /// Unique name.
    pub name: &'static str,
    /// Limits for the fixture (default limits unless the case tests them).
    pub limits: Limits,
    /// The body; panics on failure.
    pub run: CaseFn,
}

/// Every conformance case.
pub fn all_cases() -> Vec<Case> {
    crate::cases::all()
}

/// The names [`conformance_tests!`](crate::conformance_tests) stamps a test for (every case).
pub const CASE_NAMES: &[&str] = &crate::conformance_tests!(@names list ());

/// Runs the case `name` on a fresh fixture from `factory`: the body runs in its own task, the
/// fixture is destroyed afterwards whatever happened, and a failure of the body is re-raised
/// (so the calling test fails with the case's own panic message).
///
/// Panics when no case has that name or the factory cannot create a fixture.
pub async fn run_case<F: FixtureFactory + ?Sized>(factory: &F, name: &str) {
    let Some(case) = all_cases().into_iter().find(|c| c.name == name) else {
        panic!("no conformance case named {name}");
    };
    let fixture = match factory.create(case.limits).await {
        Ok(fx) => fx,
        Err(e) => panic!("{name}: fixture: {e}"),
    };
    let outcome = tokio::spawn((case.run)(fixture.clone())).await;
    factory.destroy(fixture).await;
    if let Err(e) = outcome {
        match e.try_into_panic() {
            Ok(payload) => std::panic::resume_unwind(payload),
            Err(e) => panic!("{name}: {e}"),
        }
    }
}

/// Stamps one `#[tokio::test]` per conformance case (named after the case, e.g. `t14_release`)
/// for a backend, like apalis' `sql_storage_tests!`: `cargo test t14_release` then runs that
/// case on every backend a test file stamps.
///
/// The argument is an expression evaluated inside each test (it may `.await`) that yields an
/// `Option` of a [`FixtureFactory`]: `None` skips the test (e.g. a server explicitly skipped by
/// its environment variable), a panic fails it. Stamp each backend in its own module:
///
/// ```ignore
/// mod memory {
///     onestep_testkit::conformance_tests!(Some(onestep_testkit::MemoryFactory));
/// }
/// ```
///
/// The calling crate needs `tokio` (multi-threaded runtime and macros).
#[macro_export]
macro_rules! conformance_tests {
    ($factory:expr) => {
        $crate::conformance_tests! {@names stamp ($factory)}
    };
    // The one list of case names; keep it equal to `cases::all()` (a unit test checks).
    (@names $mode:ident $args:tt) => {
        $crate::conformance_tests! {@$mode $args
            submit_t1_columns_and_get,
            submit_expires_at_offset_stored_as_utc,
            submit_delay_and_microseconds,
            get_other_namespace_is_absent,
            list_cursor_owner,
            idempotent_replay_and_conflict,
            submit_many_new_replay_conflict,
            list_paging_identical_created_at,
            list_paging_mixed_v4_v7_ids,
            new_ids_are_time_ordered_v7,
            list_search_filters,
            list_search_window_bounds_a_page,
            onestep_mapping_payload_round_trip,
            versions_by_id_move_with_each_change,
            t2_claim_queued_and_retrying,
            t3_t4_cancel_and_no_change_rows,
            t5_expiry_and_lease_lost_predicate,
            t6_dead_cancel_request,
            t7_reclaim_expired_lease,
            t8_heartbeat,
            t9_success_and_replay,
            t10_cancel_wins_over_success,
            t11_cancelled_completion,
            t12_retrying_with_delay,
            t13_failed_and_refusals,
            t14_release,
            claim_order_limit_and_task_list,
            result_over_limit_refused_nothing_changed,
            complete_many_with_one_stale_item,
            stale_token_fencing_after_reclaim,
            cancel_poll_reports_cancel_requested_leases,
            heartbeat_many_renews_every_lease_in_order,
            heartbeat_many_stale_leases_reported_alone,
            heartbeat_many_cancel_requested_per_lease,
            heartbeat_many_empty_duplicates_and_bad_duration,
            heartbeat_many_over_1000_leases,
            concurrent_identical_submits_16,
            concurrent_conflicting_submits_16,
            concurrent_claimers_8_over_1000,
            cancel_complete_race_100_rounds,
            storable_bounds_are_stored_everywhere,
            unstorable_inputs_are_refused_alike,
            unstorable_results_are_refused_before_the_write,
            storable_property_values_round_trip,
            priority_claim_order_then_fifo,
            priority_default_for_rows_without_the_columns,
            priority_kept_by_a_retrying_execution,
            fair_round_robin_across_keys,
            fair_weights_share_a_claim,
            fair_cap_per_key_across_claimers,
            fair_namespace_scopes,
            fair_priority_orders_within_a_key_only,
            buckets_burst_then_refill,
            buckets_pause_and_its_end,
            buckets_refund,
            buckets_concurrent_takers_never_overdraw,
            buckets_names_and_rates_are_checked,
            buckets_are_independent,
            components_round_trip_of_several_chunks,
            components_put_is_idempotent,
            components_over_the_cap_writes_nothing,
            components_corrupt_chunk_is_detected,
            components_missing_digest_is_none,
            components_concurrent_puts_store_one_copy,
            components_headerless_chunks_are_unreadable_then_completed,
            deployments_versions_per_task_and_idempotent_repeat,
            deployments_concurrent_deploys_get_consecutive_versions,
            deployments_rollback_and_deactivate,
            deployments_concurrent_activations_leave_one_active,
            deployments_unknown_component_writes_nothing,
            deployments_list_pages_newest_first,
            deployments_audit_trail_names_who_when_and_digests,
            deployments_revision_moves_on_every_change_only,
            deployments_gc_keeps_referenced_and_young_components,
            deployments_max_tasks_bounds_active_tasks_of_a_namespace,
            components_are_held_per_namespace,
            steps_save_then_load_and_list,
            steps_overwrite_by_the_same_attempt,
            steps_stale_attempt_is_fenced,
            steps_finished_execution_is_fenced,
            steps_caps_refused_and_nothing_written,
            steps_purged_with_their_execution,
            steps_concurrent_saves_keep_the_caps,
            t15_park_until_the_wake_time,
            t15_park_is_fenced_by_the_lease,
            t15_cancel_before_the_park_wins,
            t15_parked_execution_cancelled_at_once,
            t15_parked_execution_never_expires,
            quota_namespace_limit,
            quota_key_limit,
            quota_replay_over_quota_still_replays,
            quota_retrying_rows_count,
            quota_running_and_finished_rows_do_not_count,
            quota_batch_answers_per_item,
            quota_concurrent_submitters_stop_at_the_limit,
            callbacks_written_with_new_executions_only,
            callbacks_due_once_terminal_and_retried_after_backoff,
            callbacks_claim_lease_runs_out,
            callbacks_dead_then_redelivered,
            callbacks_started_before_terminal,
            callbacks_progress_throttled_never_after_terminal,
            max_running_sequential_claims,
            max_running_concurrent_claimers,
            max_running_slot_back_after_reclaim
        }
    };
    (@list () $($name:ident),*) => {
        [$(stringify!($name)),*]
    };
    (@stamp ($factory:expr) $($name:ident),*) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() {
                if let ::std::option::Option::Some(factory) = $factory {
                    $crate::suite::run_case(&factory, ::std::stringify!($name)).await;
                }
            }
        )*
    };
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    #[test]
    fn the_macro_stamps_every_case_once() {
        let cases: Vec<_> = super::all_cases().into_iter().map(|c| c.name).collect();
        let unique: BTreeSet<_> = cases.iter().copied().collect();
        assert_eq!(unique.len(), cases.len(), "case names are unique");
        let stamped: BTreeSet<_> = super::CASE_NAMES.iter().copied().collect();
        assert_eq!(stamped.len(), super::CASE_NAMES.len());
        assert_eq!(
            stamped, unique,
            "conformance_tests! lists exactly the cases"
        );
    }
}
