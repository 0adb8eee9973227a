//! Execution, attempt and completion statuses (docs/semantics.md#statuses) with their wire strings.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::error::ExecutionError;

/// The eight execution statuses (docs/semantics.md#statuses). Wire form: lowercase snake case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExecutionStatus {
    /// Waiting to be claimed.
    Queued,
    /// Claimed; a worker holds the lease.
    Running,
    /// Waiting to be claimed again after a failed or lost attempt.
    Retrying,
    /// Terminal: the handler returned a result.
    Succeeded,
    /// Terminal: the handler failed and the retry policy gave up.
    Failed,
    /// Running, and a client asked for cancellation; the worker sees it at its next heartbeat.
    CancelRequested,
    /// Terminal: cancelled.
    Cancelled,
    /// Terminal: `expires_at` passed before it could be (re)claimed.
    Expired,
}

impl ExecutionStatus {
    /// Every status, in the documented order.
    pub const ALL: [ExecutionStatus; 8] = [
        ExecutionStatus::Queued,
        ExecutionStatus::Running,
        ExecutionStatus::Retrying,
        ExecutionStatus::Succeeded,
        ExecutionStatus::Failed,
        ExecutionStatus::CancelRequested,
        ExecutionStatus::Cancelled,
        ExecutionStatus::Expired,
    ];

    /// The wire string, e.g. `cancel_requested`.
    pub fn as_str(self) -> &'static str {
        match self {
            ExecutionStatus::Queued => "queued",
            ExecutionStatus::Running => "running",
            ExecutionStatus::Retrying => "retrying",
            ExecutionStatus::Succeeded => "succeeded",
            ExecutionStatus::Failed => "failed",
            ExecutionStatus::CancelRequested => "cancel_requested",
            ExecutionStatus::Cancelled => "cancelled",
            ExecutionStatus::Expired => "expired",
        }
    }

    /// Terminal statuses never change again (docs/semantics.md#invariants, item 7).
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            ExecutionStatus::Succeeded
                | ExecutionStatus::Failed
                | ExecutionStatus::Cancelled
                | ExecutionStatus::Expired
        )
    }

    /// Statuses from which a claim may take the row (T2 in docs/semantics.md#transitions).
    pub fn is_claimable(self) -> bool {
        matches!(self, ExecutionStatus::Queued | ExecutionStatus::Retrying)
    }

    /// Statuses in which the row holds a lease (docs/semantics.md#invariants, item 4).
    pub fn holds_lease(self) -> bool {
        matches!(
            self,
            ExecutionStatus::Running | ExecutionStatus::CancelRequested
        )
    }
}

impl fmt::Display for ExecutionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for ExecutionStatus {
    type Err = ExecutionError;

    /// Parses a wire string; anything else is `status must be an ExecutionStatus` (docs/semantics.md#listing-and-cursors).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ExecutionStatus::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| ExecutionError::invalid("status must be an ExecutionStatus"))
    }
}

/// Attempt statuses (docs/semantics.md#statuses). Only `running` is non-final.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AttemptStatus {
    /// The attempt holds the lease.
    Running,
    /// Ended with a success completion.
    Succeeded,
    /// Ended with a retrying completion.
    Retrying,
    /// Ended with a failed completion.
    Failed,
    /// Ended cancelled (completion, cancel-wins, or dead cancel request).
    Cancelled,
    /// Its lease expired and maintenance reclaimed it, or it was released.
    LeaseLost,
    /// The handler slept (docs/steps.md#sleep): the attempt ended and the execution waits,
    /// `queued`, until its wake time (T15). Not a failure; it does not count against the retry
    /// policy's `max_attempts`.
    Parked,
}

impl AttemptStatus {
    /// Every attempt status, in the documented order.
    pub const ALL: [AttemptStatus; 7] = [
        AttemptStatus::Running,
        AttemptStatus::Succeeded,
        AttemptStatus::Retrying,
        AttemptStatus::Failed,
        AttemptStatus::Cancelled,
        AttemptStatus::LeaseLost,
        AttemptStatus::Parked,
    ];

    /// The wire string, e.g. `lease_lost`.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptStatus::Running => "running",
            AttemptStatus::Succeeded => "succeeded",
            AttemptStatus::Retrying => "retrying",
            AttemptStatus::Failed => "failed",
            AttemptStatus::Cancelled => "cancelled",
            AttemptStatus::LeaseLost => "lease_lost",
            AttemptStatus::Parked => "parked",
        }
    }
}

impl fmt::Display for AttemptStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for AttemptStatus {
    type Err = ExecutionError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        AttemptStatus::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| ExecutionError::invalid(format!("unknown attempt status '{s}'")))
    }
}

/// What a worker may report when it completes an attempt (docs/semantics.md#execution-and-lease-objects).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CompletionStatus {
    /// The handler returned a result (T9, or T10 when a cancel was requested).
    Succeeded,
    /// Run again later (T12); only from `running`.
    Retrying,
    /// Give up (T13); only from `running`.
    Failed,
    /// The run was cancelled (T11).
    Cancelled,
}

impl CompletionStatus {
    /// The execution status this completion writes when it is not overridden by cancel-wins.
    pub fn execution_status(self) -> ExecutionStatus {
        match self {
            CompletionStatus::Succeeded => ExecutionStatus::Succeeded,
            CompletionStatus::Retrying => ExecutionStatus::Retrying,
            CompletionStatus::Failed => ExecutionStatus::Failed,
            CompletionStatus::Cancelled => ExecutionStatus::Cancelled,
        }
    }

    /// The execution statuses this completion is accepted from (docs/semantics.md#completion step 5).
    pub fn allowed_sources(self) -> &'static [ExecutionStatus] {
        match self {
            CompletionStatus::Succeeded | CompletionStatus::Cancelled => {
                &[ExecutionStatus::Running, ExecutionStatus::CancelRequested]
            }
            CompletionStatus::Retrying | CompletionStatus::Failed => &[ExecutionStatus::Running],
        }
    }

    /// The wire string.
    pub fn as_str(self) -> &'static str {
        self.execution_status().as_str()
    }
}

impl fmt::Display for CompletionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The attempt status that corresponds to an effective execution status after a completion.
pub fn attempt_status_for(effective: ExecutionStatus) -> AttemptStatus {
    match effective {
        ExecutionStatus::Succeeded => AttemptStatus::Succeeded,
        ExecutionStatus::Retrying => AttemptStatus::Retrying,
        ExecutionStatus::Failed => AttemptStatus::Failed,
        _ => AttemptStatus::Cancelled,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_strings_round_trip() {
        for st in ExecutionStatus::ALL {
            assert_eq!(st.as_str().parse::<ExecutionStatus>().ok(), Some(st));
        }
        for st in AttemptStatus::ALL {
            assert_eq!(st.as_str().parse::<AttemptStatus>().ok(), Some(st));
        }
        assert!("QUEUED".parse::<ExecutionStatus>().is_err());
    }

    #[test]
    fn terminal_set_matches_spec() {
        let terminal: Vec<_> = ExecutionStatus::ALL
            .into_iter()
            .filter(|s| s.is_terminal())
            .map(|s| s.as_str())
            .collect();
        assert_eq!(terminal, ["succeeded", "failed", "cancelled", "expired"]);
    }
}
