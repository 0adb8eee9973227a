//! A task's fleet-wide running cap (docs/semantics.md#max-running): the arithmetic every store
//! shares. A claim with [`ClaimRequest::max_running`] first takes the task's cap lock (a row of
//! the rate-limit buckets table named [`cap_lock_name`] on PostgreSQL and MySQL/MariaDB; the
//! claim's `BEGIN IMMEDIATE` on SQLite; the store's mutex in memory), then counts the task's
//! `running`/`cancel_requested` executions in the same transaction and claims at most
//! [`capped_limit`] of them. Every capped claim of the task holds the lock while it counts and
//! claims, so the count is exact across claimers; a crashed worker's leases stop counting when
//! maintenance reclaims them (T7), which every claim runs before it counts.

use crate::request::ClaimRequest;

/// The name of a task's cap-lock row in the rate-limit buckets table (never a bucket name:
/// those start with `task:` or `origin:`).
pub fn cap_lock_name(task_name: &str) -> String {
    format!("max_running:{task_name}")
}

/// How many leases a claim with `running` executions of its task running may take: its
/// `limit`, at most the room under `max_running` (0: claim nothing). Without a cap, `limit`.
pub fn capped_limit(req: &ClaimRequest, running: u64) -> u32 {
    match req.max_running {
        None => req.limit,
        Some(cap) => {
            let room = u64::from(cap).saturating_sub(running);
            u32::try_from(room.min(u64::from(req.limit))).unwrap_or(req.limit)
        }
    }
}

/// The task a capped claim counts (its one task name); `None` without a cap.
pub fn capped_task(req: &ClaimRequest) -> Option<&str> {
    match (req.max_running, req.task_names.as_slice()) {
        (Some(_), [task]) => Some(task.as_str()),
        _ => None,
    }
}

/// The refusal of a capped claim on tables without the rate-limit buckets table, which holds
/// the cap lock.
pub const CAP_LOCK_TABLE_ABSENT: &str = "max_running needs the rate-limit buckets table, which \
    holds the task's cap lock, and these tables lack it (tables created by the reference or an \
    older onestep); add it with `onestep migrate --upgrade`";

#[cfg(test)]
mod tests {
    use super::*;

    fn req(limit: u32, cap: Option<u32>) -> ClaimRequest {
        ClaimRequest {
            namespaces: crate::request::NamespaceScope::One("ns".into()),
            task_names: vec!["t".into()],
            limit,
            lease_duration_s: 30.0,
            worker_id: "w".into(),
            fair: Default::default(),
            max_running: cap,
        }
    }

    #[test]
    fn the_limit_is_cut_to_the_room_under_the_cap() {
        assert_eq!(capped_limit(&req(10, None), 1_000), 10);
        assert_eq!(capped_limit(&req(10, Some(3)), 0), 3);
        assert_eq!(capped_limit(&req(2, Some(3)), 0), 2);
        assert_eq!(capped_limit(&req(10, Some(3)), 2), 1);
        assert_eq!(capped_limit(&req(10, Some(3)), 3), 0);
        assert_eq!(capped_limit(&req(10, Some(3)), 7), 0);
        assert_eq!(capped_task(&req(1, Some(1))), Some("t"));
        assert_eq!(capped_task(&req(1, None)), None);
        assert_eq!(cap_lock_name("t"), "max_running:t");
    }

    #[test]
    fn a_cap_is_at_least_one_and_needs_one_task() {
        let e = req(1, Some(0)).validate().unwrap_err().to_string();
        assert!(e.contains("max_running must be >= 1"), "{e}");
        let mut two = req(1, Some(2));
        two.task_names.push("u".into());
        let e = two.validate().unwrap_err().to_string();
        assert!(e.contains("exactly one task name"), "{e}");
        assert_eq!(req(1, Some(2)).validate().unwrap().max_running, Some(2));
    }
}
