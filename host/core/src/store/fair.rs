//! The fair claim's bookkeeping (docs/semantics.md#fair-claim): how the keys of a claim split
//! its slots and what each key's state becomes after it (the in-memory store runs it; the
//! database backends refuse a claim that needs it, [`plain_claim_namespace`], until their keys
//! table lands).

use std::collections::HashMap;

use chrono::{DateTime, Utc};

use crate::request::ClaimRequest;
#[cfg(test)]
use crate::request::NamespaceScope;
use crate::schedule::{FairShare, KeyTurn, advanced_pass, allocate};
use crate::{ExecutionError, ExecutionStatus};

/// How long a key at its running cap waits before a claim looks at it again.
pub const CAP_RECHECK_MS: i64 = 250;

/// The plain claim of a database backend that has no fair claim yet
/// (docs/semantics.md#fair-claim): its one namespace, or `InvalidArgument` naming what it
/// cannot serve.
pub fn plain_claim_namespace<'a>(
    req: &'a ClaimRequest,
    backend: &str,
) -> Result<&'a str, ExecutionError> {
    match req.namespaces.single() {
        Some(ns) if !req.needs_fair_keys() => Ok(ns),
        _ => Err(ExecutionError::invalid(format!(
            "{FAIR_CLAIM_UNSUPPORTED} by the {backend} backend yet"
        ))),
    }
}

/// The start of the refusal of [`plain_claim_namespace`].
pub const FAIR_CLAIM_UNSUPPORTED: &str = "a claim of several namespaces, with weights or with max_running_per_key (the fair claim) \
     is not implemented";

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
        let mut out = Vec::new();
        for (i, k) in self.keys.iter().enumerate() {
            let got = claimed.get(i).copied().unwrap_or(0);
            if got > 0 {
                out.push((
                    i,
                    KeyOutcome::Advance(advanced_pass(k.pass, got, self.weights[i])),
                ));
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
    fn plain_claims_serve_one_namespace_without_shares() {
        let mut req = ClaimRequest {
            namespaces: NamespaceScope::One("ns".into()),
            task_names: vec!["t".into()],
            limit: 1,
            lease_duration_s: 1.0,
            worker_id: "w".into(),
            fair: FairShare::default(),
        };
        assert_eq!(plain_claim_namespace(&req, "PostgreSQL").unwrap(), "ns");
        req.fair.max_running_per_key = Some(1);
        let e = plain_claim_namespace(&req, "PostgreSQL")
            .unwrap_err()
            .to_string();
        assert!(e.contains(FAIR_CLAIM_UNSUPPORTED), "{e}");
        assert!(e.contains("by the PostgreSQL backend yet"), "{e}");
        req.fair = FairShare::default();
        req.namespaces = NamespaceScope::All;
        assert!(plain_claim_namespace(&req, "MySQL").is_err());
    }
}
