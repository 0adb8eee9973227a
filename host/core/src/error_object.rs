//! The structured error object persisted in `executions.error` and `attempts.error` (docs/semantics.md#error-object).

use serde::{Deserialize, Serialize};

use crate::error::ExecutionError;

/// Exactly eight keys; absent optional values serialise as JSON `null`. Never holds a message or
/// a traceback (those go to logs only). Unknown keys are rejected when reading (docs/semantics.md#error-object).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ErrorObject {
    /// `error`, `timeout` or `cancelled` (1–64 characters).
    pub kind: String,
    /// The failure's type name, e.g. `TimeoutError`, `CancelledError`, `HandlerError`, `Trap` (1–255).
    pub exception_type: String,
    /// Where it failed: `handler`, `result_validation`, `ack`, … (1–255).
    #[serde(default)]
    pub stage: Option<String>,
    /// Backend label for connector errors, e.g. `mysql`.
    #[serde(default)]
    pub backend: Option<String>,
    /// Connector operation, e.g. `fetch`, `heartbeat`, `ack`.
    #[serde(default)]
    pub operation: Option<String>,
    /// Connector error class (see `ConnectorKind`).
    #[serde(default)]
    pub connector_kind: Option<String>,
    /// Only for stage `sink` (1–1024).
    #[serde(default)]
    pub sinks_succeeded: Option<String>,
    /// Only for stage `sink` (1–1024).
    #[serde(default)]
    pub sinks_remaining: Option<String>,
}

impl ErrorObject {
    /// An error object with `kind`, `exception_type` and `stage`, the other keys null.
    pub fn new(kind: &str, exception_type: &str, stage: Option<&str>) -> Self {
        ErrorObject {
            kind: kind.to_owned(),
            exception_type: exception_type.to_owned(),
            stage: stage.map(str::to_owned),
            backend: None,
            operation: None,
            connector_kind: None,
            sinks_succeeded: None,
            sinks_remaining: None,
        }
    }

    /// Checks the length rules of docs/semantics.md#text-fields (`kind` 1–64, `exception_type` 1–255, optional fields
    /// 1–255, sink lists 1–1024; all counted in characters after trimming).
    pub fn validate(&self) -> Result<(), ExecutionError> {
        fn check(name: &str, v: &str, max: usize) -> Result<(), ExecutionError> {
            let n = v.trim().chars().count();
            if n == 0 || n > max {
                return Err(ExecutionError::invalid(format!(
                    "{name} must be a non-empty string of at most {max} characters"
                )));
            }
            crate::storable::check_text(name, v)
        }
        check("kind", &self.kind, 64)?;
        check("exception_type", &self.exception_type, 255)?;
        for (name, v) in [
            ("stage", &self.stage),
            ("backend", &self.backend),
            ("operation", &self.operation),
            ("connector_kind", &self.connector_kind),
        ] {
            if let Some(v) = v {
                check(name, v, 255)?;
            }
        }
        for (name, v) in [
            ("sinks_succeeded", &self.sinks_succeeded),
            ("sinks_remaining", &self.sinks_remaining),
        ] {
            if let Some(v) = v {
                check(name, v, 1024)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialises_all_eight_keys() {
        let e = ErrorObject::new("timeout", "TimeoutError", Some("handler"));
        let v = serde_json::to_value(&e).unwrap_or_default();
        let keys: Vec<_> = v
            .as_object()
            .map(|m| m.keys().cloned().collect())
            .unwrap_or_default();
        assert_eq!(keys.len(), 8);
        assert!(e.validate().is_ok());
    }

    #[test]
    fn rejects_unknown_keys() {
        let r: Result<ErrorObject, _> =
            serde_json::from_str(r#"{"kind":"error","exception_type":"X","message":"boom"}"#);
        assert!(r.is_err());
    }
}
