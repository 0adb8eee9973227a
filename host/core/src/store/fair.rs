//! The fair claim's bookkeeping (docs/semantics.md#fair-claim): how the keys of a claim split
//! its slots and what each key's state becomes after it; and the refusal of a claim that needs
//! it where it cannot run ([`plain_claim_namespace`]). The statements are each backend's own.

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use crate::request::ClaimRequest;
#[cfg(test)]
use crate::request::NamespaceScope;
use crate::schedule::{FairShare, KeyTurn, advanced_pass, allocate};
use crate::{ExecutionError, ExecutionStatus};

/// How long a key at its running cap waits before a claim looks at it again.
pub const CAP_RECHECK_MS: i64 = 250;

/// The namespace of a plain claim (docs/semantics.md#fair-claim): a claim of several task
/// names, or any claim on tables without the fairness-keys table (`fair_keys` false), serves
/// one namespace without weights or cap. Anything else is `InvalidArgument` naming the reason:
/// on such tables the upgrade that adds the keys table, with the keys table the one task name a
/// fair claim serves.
pub fn plain_claim_namespace(req: &ClaimRequest, fair_keys: bool) -> Result<&str, ExecutionError> {
    match req.namespaces.single() {
        Some(ns) if !req.needs_fair_keys() => Ok(ns),
        _ if fair_keys => Err(ExecutionError::invalid(format!(
            "{FAIR_CLAIM_UNSUPPORTED}: a fair claim serves exactly one task name"
        ))),
        _ => Err(ExecutionError::invalid(format!(
            "{FAIR_CLAIM_UNSUPPORTED}: it needs the fairness-keys table and the fair indexes, \
             which these tables lack; add them with `onestep migrate --upgrade`"
        ))),
    }
}

/// The start of the refusal of [`plain_claim_namespace`].
pub const FAIR_CLAIM_UNSUPPORTED: &str = "a claim of several namespaces, with weights or with max_running_per_key (the fair claim) \
     cannot be served here";

/// How often one backend handle sweeps a task's keys while its claims keep finding work
/// (docs/semantics.md#fair-claim), at least: a sweep that took longer than a tenth of this
/// spaces the next by [`SWEEP_COST_FACTOR`] times its own duration, up to [`SWEEP_MAX_INTERVAL_MS`].
pub const SWEEP_INTERVAL_MS: i64 = 1000;

/// A periodic sweep waits at least this many times the last sweep's duration, so that the
/// sweep of a task with very many keys takes at most about a tenth of a busy handle's time.
pub const SWEEP_COST_FACTOR: i64 = 10;

/// The longest wait between two periodic sweeps of a busy task, however long they take.
pub const SWEEP_MAX_INTERVAL_MS: i64 = 10_000;

/// When a backend handle last swept each task's keys, on the backend's injected clock, and how
/// long the next periodic sweep waits (one entry per task, so a busy task's sweeps never
/// postpone another task's).
#[derive(Debug, Default)]
pub struct SweepGate(std::sync::Mutex<HashMap<String, (DateTime<Utc>, i64)>>);

impl SweepGate {
    /// Whether a sweep of `task` is due at `now`: `force` (the claim found nothing without
    /// one), none yet, the task's interval ([`SWEEP_INTERVAL_MS`], or longer after a slow
    /// sweep, [`SweepGate::swept`]) since the last, or the clock went back. Marks it done when
    /// due.
    pub fn due(&self, task: &str, now: DateTime<Utc>, force: bool) -> bool {
        let mut last = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let interval = last.get(task).map_or(SWEEP_INTERVAL_MS, |e| e.1);
        let due = force
            || last
                .get(task)
                .is_none_or(|(t, i)| now < *t || now - *t >= chrono::Duration::milliseconds(*i));
        if due {
            last.insert(task.to_owned(), (now, interval));
        }
        due
    }

    /// Records how long the sweep of `task` that [`SweepGate::due`] just allowed took: the
    /// next periodic sweep waits `max(SWEEP_INTERVAL_MS, SWEEP_COST_FACTOR × took)`, at most
    /// [`SWEEP_MAX_INTERVAL_MS`].
    pub fn swept(&self, task: &str, took: std::time::Duration) {
        let ms = i64::try_from(took.as_millis()).unwrap_or(i64::MAX);
        let interval = ms
            .saturating_mul(SWEEP_COST_FACTOR)
            .clamp(SWEEP_INTERVAL_MS, SWEEP_MAX_INTERVAL_MS);
        let mut last = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(e) = last.get_mut(task) {
            e.1 = interval;
        }
    }
}

/// Sorts the leases of one claim in claim order, `(priority, available_at, created_at, id)`.
pub fn sort_in_claim_order(leases: &mut [crate::ExecutionLease]) {
    leases.sort_by(|a, b| {
        let (x, y) = (&a.execution, &b.execution);
        (x.priority, x.available_at, x.created_at, x.id).cmp(&(
            y.priority,
            y.available_at,
            y.created_at,
            y.id,
        ))
    });
}

/// One locked key row: `(namespace, fairness key)` of the claimed task and its pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockedKey {
    /// The namespace.
    pub namespace: String,
    /// The effective fairness key (`COALESCE(fairness_key, namespace)`).
    pub key: String,
    /// The key's pass.
    pub pass: i64,
}

/// How a claim's slots split over its locked keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FairPlan {
    /// The locked keys, in lock order.
    pub keys: Vec<LockedKey>,
    /// Slots per key (same order).
    pub slots: Vec<u32>,
    /// Room under the cap per key (`u32::MAX` without one).
    pub rooms: Vec<u32>,
    weights: Vec<u32>,
}

/// What one key's row becomes after a claim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyOutcome {
    /// Served: its new pass.
    Advance(i64),
    /// At its cap: look again at this time.
    Full(DateTime<Utc>),
    /// Given slots but no claimable row: recompute `ready_at` from its pending rows (delete
    /// the row when it has none).
    Empty,
    /// Served, and its head read found no claimable row beyond the ones claimed: its new
    /// pass, and `ready_at` recomputed from its pending rows as for [`KeyOutcome::Empty`]
    /// (delete the row when it has none), so that no later claim spends a slot finding it
    /// empty.
    Drained(i64),
}

impl FairPlan {
    /// Splits `limit` slots over `keys` (docs/semantics.md#fair-claim, step 4); `running` holds
    /// the `running`/`cancel_requested` count of each `(namespace, key)` (absent = 0; only read
    /// with a cap).
    pub fn new(
        keys: Vec<LockedKey>,
        running: &HashMap<(String, String), u64>,
        fair: &FairShare,
        limit: u32,
    ) -> FairPlan {
        let weights: Vec<u32> = keys.iter().map(|k| fair.weight(&k.key)).collect();
        let rooms: Vec<u32> = keys
            .iter()
            .map(|k| {
                let n = running
                    .get(&(k.namespace.clone(), k.key.clone()))
                    .copied()
                    .unwrap_or(0);
                fair.room(n)
            })
            .collect();
        let turns: Vec<KeyTurn> = keys
            .iter()
            .zip(weights.iter().zip(&rooms))
            .map(|(k, (w, r))| KeyTurn {
                pass: k.pass,
                weight: *w,
                room: *r,
            })
            .collect();
        let slots = allocate(&turns, limit);
        FairPlan {
            keys,
            slots,
            rooms,
            weights,
        }
    }

    /// What each key's row becomes, given how many rows each key's head read claimed (same
    /// order as `keys`); keys that need no write are left out.
    pub fn outcomes(&self, claimed: &[u32], now: DateTime<Utc>) -> Vec<(usize, KeyOutcome)> {
        self.outcomes_drained(claimed, &[], now)
    }

    /// [`FairPlan::outcomes`], told also which keys' head reads found no claimable row beyond
    /// their slots (`more[i]` false; a key not listed counts as having more): a served key
    /// among them is [`KeyOutcome::Drained`].
    pub fn outcomes_drained(
        &self,
        claimed: &[u32],
        more: &[bool],
        now: DateTime<Utc>,
    ) -> Vec<(usize, KeyOutcome)> {
        let mut out = Vec::new();
        for (i, k) in self.keys.iter().enumerate() {
            let got = claimed.get(i).copied().unwrap_or(0);
            if got > 0 {
                let pass = advanced_pass(k.pass, got, self.weights[i]);
                if more.get(i).copied().unwrap_or(true) {
                    out.push((i, KeyOutcome::Advance(pass)));
                } else {
                    out.push((i, KeyOutcome::Drained(pass)));
                }
            } else if self.rooms[i] == 0 {
                out.push((
                    i,
                    KeyOutcome::Full(now + chrono::Duration::milliseconds(CAP_RECHECK_MS)),
                ));
            } else if self.slots[i] > 0 {
                out.push((i, KeyOutcome::Empty));
            }
        }
        out
    }

    /// How many of `leases` each key got (same order as `keys`), by each execution's namespace
    /// and effective fairness key.
    pub fn claimed(&self, leases: &[crate::ExecutionLease]) -> Vec<u32> {
        let index: HashMap<(&str, &str), usize> = self
            .keys
            .iter()
            .enumerate()
            .map(|(i, k)| ((k.namespace.as_str(), k.key.as_str()), i))
            .collect();
        let mut claimed = vec![0u32; self.keys.len()];
        for l in leases {
            let e = &l.execution;
            if let Some(i) = index.get(&(e.namespace.as_str(), e.effective_fairness_key())) {
                claimed[*i] += 1;
            }
        }
        claimed
    }

    /// The `(namespace, key, slots)` of keys given at least one slot.
    pub fn wanted(&self) -> impl Iterator<Item = (usize, &LockedKey, u32)> {
        self.keys
            .iter()
            .zip(&self.slots)
            .enumerate()
            .filter(|(_, (_, n))| **n > 0)
            .map(|(i, (k, n))| (i, k, *n))
    }
}

/// The statuses a per-key cap counts (docs/semantics.md#fair-claim, step 3).
pub const RUNNING_STATUSES: [ExecutionStatus; 2] =
    [ExecutionStatus::Running, ExecutionStatus::CancelRequested];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::STRIDE;

    fn key(ns: &str, k: &str, pass: i64) -> LockedKey {
        LockedKey {
            namespace: ns.into(),
            key: k.into(),
            pass,
        }
    }

    #[test]
    fn plan_respects_caps_and_reports_outcomes() {
        let mut fair = FairShare {
            max_running_per_key: Some(2),
            ..FairShare::default()
        };
        fair.weights.insert("b".into(), 2);
        let mut running = HashMap::new();
        running.insert(("ns".to_owned(), "a".to_owned()), 2u64);
        running.insert(("ns".to_owned(), "b".to_owned()), 1u64);
        let plan = FairPlan::new(
            vec![key("ns", "a", 0), key("ns", "b", 0), key("ns", "c", 0)],
            &running,
            &fair,
            5,
        );
        assert_eq!(plan.rooms, vec![0, 1, 2]);
        assert_eq!(plan.slots, vec![0, 1, 2]);
        let now = Utc::now();
        let out = plan.outcomes(&[0, 1, 0], now);
        assert_eq!(
            out,
            vec![
                (
                    0,
                    KeyOutcome::Full(now + chrono::Duration::milliseconds(CAP_RECHECK_MS))
                ),
                (1, KeyOutcome::Advance(STRIDE / 2)),
                (2, KeyOutcome::Empty),
            ]
        );
        assert_eq!(
            plan.wanted().map(|(i, _, n)| (i, n)).collect::<Vec<_>>(),
            vec![(1, 1), (2, 2)]
        );
    }

    #[test]
    fn served_keys_without_more_rows_are_drained() {
        let plan = FairPlan::new(
            vec![key("ns", "a", 0), key("ns", "b", 0), key("ns", "c", 0)],
            &HashMap::new(),
            &FairShare::default(),
            6,
        );
        assert_eq!(plan.slots, vec![2, 2, 2]);
        let now = Utc::now();
        // a: served and more rows behind; b: served, nothing more; c: nothing at all.
        let out = plan.outcomes_drained(&[2, 1, 0], &[true, false, false], now);
        assert_eq!(
            out,
            vec![
                (0, KeyOutcome::Advance(2 * STRIDE)),
                (1, KeyOutcome::Drained(STRIDE)),
                (2, KeyOutcome::Empty),
            ]
        );
        // Unknown (the in-memory store, or a key not listed): never drained.
        assert_eq!(
            plan.outcomes(&[2, 1, 0], now),
            vec![
                (0, KeyOutcome::Advance(2 * STRIDE)),
                (1, KeyOutcome::Advance(STRIDE)),
                (2, KeyOutcome::Empty),
            ]
        );
    }

    #[test]
    fn sweep_gate_is_due_once_per_interval_per_task_unless_forced() {
        let g = SweepGate::default();
        let t0 = Utc::now();
        assert!(g.due("a", t0, false));
        assert!(!g.due("a", t0, false));
        assert!(g.due("b", t0, false), "another task has its own clock");
        assert!(!g.due("a", t0 + chrono::Duration::milliseconds(999), false));
        assert!(g.due("a", t0 + chrono::Duration::milliseconds(999), true));
        assert!(g.due("a", t0 + chrono::Duration::seconds(2), false));
        assert!(g.due("a", t0, false), "the clock went back");
        // A slow sweep spaces the next periodic one by ten times its duration, at most 10 s.
        g.swept("a", std::time::Duration::from_millis(300));
        assert!(!g.due("a", t0 + chrono::Duration::milliseconds(2999), false));
        assert!(g.due("a", t0 + chrono::Duration::milliseconds(3000), false));
        g.swept("a", std::time::Duration::from_secs(60));
        let t1 = t0 + chrono::Duration::milliseconds(3000);
        assert!(!g.due("a", t1 + chrono::Duration::milliseconds(9999), false));
        assert!(g.due("a", t1 + chrono::Duration::milliseconds(9999), true));
        g.swept("a", std::time::Duration::from_millis(5));
        let t2 = t1 + chrono::Duration::milliseconds(9999);
        assert!(g.due("a", t2 + chrono::Duration::milliseconds(1000), false));
    }

    #[test]
    fn plain_claims_serve_one_namespace_without_shares() {
        let mut req = ClaimRequest {
            namespaces: NamespaceScope::One("ns".into()),
            task_names: vec!["t".into()],
            limit: 1,
            lease_duration_s: 1.0,
            worker_id: "w".into(),
            fair: FairShare::default(),
            max_running: None,
        };
        assert_eq!(plain_claim_namespace(&req, false).unwrap(), "ns");
        req.fair.max_running_per_key = Some(1);
        let e = plain_claim_namespace(&req, false).unwrap_err().to_string();
        assert!(e.contains(FAIR_CLAIM_UNSUPPORTED), "{e}");
        assert!(e.contains("onestep migrate --upgrade"), "{e}");
        req.fair = FairShare::default();
        req.namespaces = NamespaceScope::All;
        req.task_names.push("u".into());
        let e = plain_claim_namespace(&req, true).unwrap_err().to_string();
        assert!(
            e.contains("a fair claim serves exactly one task name"),
            "{e}"
        );
    }
}
