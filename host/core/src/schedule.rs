//! Scheduling fields of an execution (docs/semantics.md#priority-and-fairness-key): its
//! `priority` (0 = most urgent … 9, default 5) and its `fairness_key` (default: the execution's
//! namespace), with the rules a submit is held to. Claims take lower priority numbers first,
//! then the oldest; the fairness key is stored and shown, and is what a fair claim will group by.

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
}
