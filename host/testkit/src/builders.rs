//! Builders for requests used across tests.

use onestep_core::error_object::ErrorObject;
use onestep_core::limits::Limits;
use onestep_core::request::{ClaimRequest, PreparedSubmission, SubmitRequest, prepare_submission};
use serde_json::Value;

/// A submission of `payload` for `task` in `namespace`, validated like a client would.
pub fn prepared(namespace: &str, task: &str, payload: Value) -> PreparedSubmission {
    prepare(
        namespace,
        &SubmitRequest {
            task_name: task.to_owned(),
            payload,
            ..SubmitRequest::default()
        },
    )
}

/// Validates an arbitrary request with default limits.
pub fn prepare(namespace: &str, req: &SubmitRequest) -> PreparedSubmission {
    prepare_submission(namespace, req, &Limits::default()).expect("test submission is valid")
}

/// Like [`prepared`] with an idempotency key.
pub fn keyed(namespace: &str, task: &str, key: &str, payload: Value) -> PreparedSubmission {
    prepare(
        namespace,
        &SubmitRequest {
            task_name: task.to_owned(),
            payload,
            idempotency_key: Some(key.to_owned()),
            ..SubmitRequest::default()
        },
    )
}

/// A claim of up to `limit` rows of `task` in `namespace` with a lease of `lease_s` seconds.
pub fn claim(namespace: &str, task: &str, limit: u32, lease_s: f64, worker: &str) -> ClaimRequest {
    ClaimRequest {
        namespaces: onestep_core::request::NamespaceScope::One(namespace.to_owned()),
        fair: Default::default(),
        task_names: vec![task.to_owned()],
        limit,
        lease_duration_s: lease_s,
        worker_id: worker.to_owned(),
        max_running: None,
    }
}

/// A handler error object (`kind = error`, stage `handler`).
pub fn handler_error(exception_type: &str) -> ErrorObject {
    ErrorObject::new("error", exception_type, Some("handler"))
}

/// A cancellation error object.
pub fn cancel_error() -> ErrorObject {
    ErrorObject::new("cancelled", "CancelledError", Some("handler"))
}
