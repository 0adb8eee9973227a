//! [`InvocationContext`]: the facts about an attempt handed to the guest.

use serde::{Deserialize, Serialize};

/// What the guest receives as `ctx` (WIT `context`). Also used to attribute
/// the guest's logs and output in `tracing`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct InvocationContext {
    /// Execution id (stable across retries).
    pub execution_id: String,
    /// Attempt id (unique per try).
    pub attempt_id: String,
    /// 1-based attempt number.
    pub attempt: u32,
    /// Task name.
    pub task_name: String,
    /// Namespace (tenant).
    pub namespace: String,
    /// Worker id.
    pub worker_id: String,
    /// Execution metadata, a JSON object as text (`{}` when empty).
    pub metadata_json: String,
    /// The task's `handler.params`, a JSON object as text (`{}` when
    /// empty). Only components of world `0.2.0` receive it (WIT
    /// `context.params`); `0.1.0` components have no such field.
    pub params_json: String,
    /// Where the guest's log lines, output lines and progress are also recorded for the
    /// attempt's persisted diagnostics (docs/observability.md#attempt-diagnostics). Not sent to
    /// the guest.
    #[serde(skip)]
    pub journal: Option<onestep_core::diagnostics::JournalHandle>,
    /// The attempt's durable steps (docs/steps.md): the store and the attempt's lease, which
    /// fences every save. Only components of world `0.3.0` use them; without them a `0.3.0`
    /// component's step calls answer `unavailable`. Not sent to the guest.
    #[serde(skip)]
    pub steps: Option<crate::durable::DurableSteps>,
}

impl Default for InvocationContext {
    fn default() -> Self {
        Self {
            execution_id: String::new(),
            attempt_id: String::new(),
            attempt: 1,
            task_name: String::new(),
            namespace: String::new(),
            worker_id: String::new(),
            metadata_json: "{}".to_string(),
            params_json: "{}".to_string(),
            journal: None,
            steps: None,
        }
    }
}

/// The ids every guest-originated log line carries.
#[derive(Debug, Clone)]
pub(crate) struct LogIds {
    pub(crate) execution_id: String,
    pub(crate) attempt_id: String,
    pub(crate) task_name: String,
    pub(crate) namespace: String,
    /// The attempt's journal, when someone keeps its diagnostics.
    pub(crate) journal: Option<onestep_core::diagnostics::JournalHandle>,
}

impl LogIds {
    pub(crate) fn from_ctx(ctx: &InvocationContext) -> Self {
        Self {
            execution_id: ctx.execution_id.clone(),
            attempt_id: ctx.attempt_id.clone(),
            task_name: ctx.task_name.clone(),
            namespace: ctx.namespace.clone(),
            journal: ctx.journal.clone(),
        }
    }
}
