//! Scheduling fields of an execution (docs/semantics.md#priority-and-fairness-key): its
//! `priority` (0 = most urgent … 9, default 5) and its `fairness_key` (default: the execution's
//! namespace), with the rules a submit is held to; and the fair claim's arithmetic
//! (docs/semantics.md#fair-claim): keys with pending work are served in stride order of their
//! passes, weighted, within each key's running cap; within a key, lower priority numbers first,
//! then the oldest.

use crate::error::ExecutionError;
use crate::text::{MAX_NAME_CHARS, is_task_name_char, required_text};

/// The priority of an execution submitted without one (and of rows written without the column,
/// e.g. by the reference).
pub const DEFAULT_PRIORITY: u8 = 5;

/// The largest (least urgent) priority; 0 is the most urgent.
pub const MAX_PRIORITY: u8 = 9;

/// Checks a submitted priority: an integer in `0..=9`.
///
/// Errors: `priority must be an integer from 0 to 9 (got <n>)`.
pub fn priority(value: i64) -> Result<u8, ExecutionError> {
    u8::try_from(value)
        .ok()
        .filter(|p| *p <= MAX_PRIORITY)
        .ok_or_else(|| {
            ExecutionError::invalid(format!(
                "priority must be an integer from 0 to {MAX_PRIORITY} (got {value})"
            ))
        })
}

/// A stored priority as read back, or `None` when it is outside `0..=9`.
pub fn stored_priority(value: i64) -> Option<u8> {
    priority(value).ok()
}

/// Checks a submitted fairness key: trimmed, 1..=255 characters, each an ASCII letter, digit,
/// `_`, `.`, `:` or `-` — the task-name rules (docs/semantics.md#task-names), so that a key is
/// safe in metric labels, logs and URLs.
///
/// Errors: the text-field messages, and `fairness_key may contain only <chars> (found <c>)`.
pub fn fairness_key(value: &str) -> Result<String, ExecutionError> {
    let t = required_text("fairness_key", value, MAX_NAME_CHARS)?;
    if let Some(c) = t.chars().find(|c| !is_task_name_char(*c)) {
        return Err(ExecutionError::invalid(format!(
            "fairness_key may contain only {} (found {})",
            crate::text::TASK_NAME_CHARS,
            c.escape_default()
        )));
    }
    Ok(t)
}

/// Refuses a submission that sets a priority or a fairness key when the executions table lacks
/// their columns (tables of the reference or of an older onestep, before `onestep migrate
/// --upgrade`); one without them is stored as before and reads back with the defaults.
///
/// Errors: `InvalidArgument` naming the upgrade.
pub fn check_storable(
    priority: u8,
    fairness_key: Option<&str>,
    columns_present: bool,
) -> Result<(), ExecutionError> {
    if columns_present || (priority == DEFAULT_PRIORITY && fairness_key.is_none()) {
        return Ok(());
    }
    Err(ExecutionError::invalid(
        "priority and fairness_key need the executions table's priority and fairness_key \
         columns, which these tables lack; add them with `onestep migrate --upgrade`",
    ))
}

/// The pass a key advances by for one claimed execution at weight 1 (stride scheduling: a key
/// of weight `w` advances by `STRIDE / w`, so over a busy period keys are served in proportion
/// to their weights; docs/semantics.md#fair-claim).
pub const STRIDE: i64 = 1_000_000;

/// The largest weight a source may give a fairness key (the smallest is 1).
pub const MAX_WEIGHT: u32 = 1000;

/// A fair claim's share settings (docs/semantics.md#fair-claim): per-key weights (default 1)
/// and the per-key running cap counted across every worker of the fleet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FairShare {
    /// Weight per fairness key (1..=[`MAX_WEIGHT`]); a key not named here weighs 1.
    pub weights: std::collections::BTreeMap<String, u32>,
    /// Most executions of one fairness key (of the claimed task) running at once, across the
    /// fleet; `None` = no cap.
    pub max_running_per_key: Option<u32>,
}

impl FairShare {
    /// The weight of `key` (1 when not named).
    pub fn weight(&self, key: &str) -> u32 {
        self.weights
            .get(key)
            .copied()
            .unwrap_or(1)
            .clamp(1, MAX_WEIGHT)
    }

    /// How many more executions of a key with `running` executions may start now.
    pub fn room(&self, running: u64) -> u32 {
        match self.max_running_per_key {
            None => u32::MAX,
            Some(cap) => u32::try_from(u64::from(cap).saturating_sub(running)).unwrap_or(0),
        }
    }
}

/// The pass step of one claimed execution for a key of `weight`.
pub fn stride(weight: u32) -> i64 {
    STRIDE / i64::from(weight.clamp(1, MAX_WEIGHT))
}

/// The pass of a key after `claimed` more executions at `weight`.
pub fn advanced_pass(pass: i64, claimed: u32, weight: u32) -> i64 {
    pass.saturating_add(stride(weight).saturating_mul(i64::from(claimed)))
}

/// The pass a key enters the rotation with: its own pass, but never behind the least pass of
/// the keys already waiting (`virtual_time`), so that a key that was idle gets no credit for
/// the time it had nothing queued, and a new key starts at the back of the current round.
pub fn entry_pass(own: Option<i64>, virtual_time: Option<i64>) -> i64 {
    match (own, virtual_time) {
        (Some(p), Some(v)) => p.max(v),
        (Some(p), None) => p,
        (None, Some(v)) => v,
        (None, None) => 0,
    }
}

/// One fairness key as a fair claim sees it: its pass, weight and the room under its cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyTurn {
    /// The key's pass (lower = served sooner).
    pub pass: i64,
    /// The key's weight (1..=[`MAX_WEIGHT`]).
    pub weight: u32,
    /// How many more of its executions may start now (`u32::MAX` without a cap).
    pub room: u32,
}

/// Splits `slots` claim slots over `keys` in stride order: the next slot always goes to the key
/// whose pass, advanced by the slots it already got, is the least (ties: the earlier key), and
/// never beyond a key's room. Returns the slots per key, in the order of `keys`. A key with a
/// backlog thus gets its weighted share of a claim and no more while others wait, and every
/// slot when it is alone.
pub fn allocate(keys: &[KeyTurn], slots: u32) -> Vec<u32> {
    use std::cmp::Reverse;
    use std::collections::BinaryHeap;
    let mut out = vec![0u32; keys.len()];
    let mut heap: BinaryHeap<Reverse<(i64, usize)>> = keys
        .iter()
        .enumerate()
        .filter(|(_, k)| k.room > 0)
        .map(|(i, k)| Reverse((k.pass, i)))
        .collect();
    let mut left = slots;
    while left > 0 {
        let Some(Reverse((pass, i))) = heap.pop() else {
            break;
        };
        out[i] += 1;
        left -= 1;
        if out[i] < keys[i].room {
            heap.push(Reverse((pass.saturating_add(stride(keys[i].weight)), i)));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn priority_is_zero_to_nine() {
        assert_eq!(priority(0).unwrap(), 0);
        assert_eq!(priority(9).unwrap(), 9);
        for bad in [-1, 10, 256, i64::MAX, i64::MIN] {
            let e = priority(bad).unwrap_err().to_string();
            assert!(
                e.contains(&format!(
                    "priority must be an integer from 0 to 9 (got {bad})"
                )),
                "{e}"
            );
        }
        assert_eq!(stored_priority(12), None);
    }

    #[test]
    fn tables_without_the_columns_take_only_defaults() {
        assert!(check_storable(5, None, false).is_ok());
        assert!(check_storable(0, Some("k"), true).is_ok());
        for (p, k) in [(0, None), (5, Some("k"))] {
            let e = check_storable(p, k, false).unwrap_err().to_string();
            assert!(e.contains("onestep migrate --upgrade"), "{e}");
        }
    }

    #[test]
    fn fairness_key_follows_the_task_name_rules() {
        assert_eq!(
            fairness_key("  tenant-42:eu.1_a ").unwrap(),
            "tenant-42:eu.1_a"
        );
        assert_eq!(fairness_key(&"k".repeat(255)).unwrap().len(), 255);
        let e = fairness_key(&"k".repeat(256)).unwrap_err().to_string();
        assert!(
            e.contains("fairness_key must be at most 255 characters"),
            "{e}"
        );
        let e = fairness_key("  ").unwrap_err().to_string();
        assert!(e.contains("fairness_key must not be empty"), "{e}");
        let e = fairness_key("a b").unwrap_err().to_string();
        assert!(e.contains("fairness_key may contain only"), "{e}");
        assert!(e.contains("(found  )"), "{e}");
        let e = fairness_key("tenant/1").unwrap_err().to_string();
        assert!(e.contains("(found /)"), "{e}");
    }

    #[test]
    fn allocate_splits_slots_in_stride_order() {
        let k = |pass, weight| KeyTurn {
            pass,
            weight,
            room: u32::MAX,
        };
        // One key alone gets every slot.
        assert_eq!(allocate(&[k(0, 1)], 100), vec![100]);
        // Equal keys at equal passes share evenly; a key far behind catches up first.
        assert_eq!(allocate(&[k(0, 1), k(0, 1), k(0, 1)], 6), vec![2, 2, 2]);
        assert_eq!(allocate(&[k(5 * STRIDE, 1), k(0, 1)], 5), vec![0, 5]);
        assert_eq!(allocate(&[k(5 * STRIDE, 1), k(0, 1)], 6), vec![1, 5]);
        // Weight 3 against weight 1: three slots to one.
        assert_eq!(allocate(&[k(0, 3), k(0, 1)], 8), vec![6, 2]);
        // More keys than slots: the least passes win.
        assert_eq!(allocate(&[k(3, 1), k(1, 1), k(2, 1)], 2), vec![0, 1, 1]);
        assert_eq!(allocate(&[], 5), Vec::<u32>::new());
        assert_eq!(allocate(&[k(0, 1)], 0), vec![0]);
    }

    #[test]
    fn allocate_never_exceeds_a_keys_room() {
        let keys = [
            KeyTurn {
                pass: 0,
                weight: 1,
                room: 2,
            },
            KeyTurn {
                pass: 0,
                weight: 1,
                room: 0,
            },
            KeyTurn {
                pass: 10 * STRIDE,
                weight: 1,
                room: u32::MAX,
            },
        ];
        assert_eq!(allocate(&keys, 10), vec![2, 0, 8]);
    }

    #[test]
    fn fair_share_weights_rooms_and_passes() {
        let mut f = FairShare::default();
        f.weights.insert("big".into(), 4);
        assert_eq!(f.weight("big"), 4);
        assert_eq!(f.weight("other"), 1);
        assert_eq!(f.room(7), u32::MAX);
        f.max_running_per_key = Some(3);
        assert_eq!(f.room(0), 3);
        assert_eq!(f.room(2), 1);
        assert_eq!(f.room(3), 0);
        assert_eq!(f.room(9), 0);
        assert_eq!(advanced_pass(10, 3, 4), 10 + 3 * (STRIDE / 4));
        assert_eq!(advanced_pass(i64::MAX - 1, 3, 1), i64::MAX);
        assert_eq!(entry_pass(None, None), 0);
        assert_eq!(entry_pass(Some(5), Some(9)), 9);
        assert_eq!(entry_pass(Some(12), Some(9)), 12);
        assert_eq!(entry_pass(None, Some(9)), 9);
    }
}
