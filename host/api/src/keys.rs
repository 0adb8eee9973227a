//! The busiest fairness keys of the caller's namespace (docs/http-api.md#keys): what waits and
//! what runs per task and key, across the fleet — the queue as the fair claim sees it
//! (docs/semantics.md#fair-claim). One grouped statement over the unfinished rows.

use axum::Json;
use axum::extract::{Query, State};
use onestep_core::ports::{KeyLoad, KeyLoads};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::error::{ApiError, ErrorBody};
use crate::extract::Tenant;
use crate::openapi::V1Errors;
use crate::state::ApiState;

/// Default and largest `limit` of `GET /v1/keys`.
pub const DEFAULT_KEYS: u32 = 50;
/// The largest `limit` of `GET /v1/keys`.
pub const MAX_KEYS: u32 = 1000;

/// One fairness key of one task.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct KeyLoadView {
    /// Task name.
    pub task_name: String,
    /// The effective fairness key (the namespace when the submit set none).
    pub fairness_key: String,
    /// Executions `queued` or `retrying`.
    pub waiting: u64,
    /// Executions `running` or `cancel_requested` (each holds a slot of `max_running_per_key`).
    pub running: u64,
}

impl From<&KeyLoad> for KeyLoadView {
    fn from(k: &KeyLoad) -> Self {
        KeyLoadView {
            task_name: k.task_name.clone(),
            fairness_key: k.fairness_key.clone(),
            waiting: k.waiting,
            running: k.running,
        }
    }
}

/// The busiest fairness keys, most waiting first, then most running.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct KeysView {
    /// The namespace.
    pub namespace: String,
    /// At most `limit` keys.
    pub items: Vec<KeyLoadView>,
    /// More keys have work than were listed.
    pub truncated: bool,
}

impl KeysView {
    /// The view of `loads` read for `namespace`.
    pub fn new(namespace: &str, loads: &KeyLoads) -> Self {
        KeysView {
            namespace: namespace.to_owned(),
            items: loads.keys.iter().map(KeyLoadView::from).collect(),
            truncated: loads.truncated,
        }
    }
}

/// Query of `GET /v1/keys`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct KeysParams {
    /// How many keys, 1–1000 (default 50).
    #[param(value_type = Option<u32>, minimum = 1, maximum = 1000)]
    pub limit: Option<String>,
}

/// Parses `limit` (1..=[`MAX_KEYS`], default [`DEFAULT_KEYS`]).
pub fn parse_limit(limit: Option<&str>) -> Result<u32, ApiError> {
    match limit.map(str::trim) {
        None | Some("") => Ok(DEFAULT_KEYS),
        Some(text) => match text.parse::<u32>() {
            Ok(n) if (1..=MAX_KEYS).contains(&n) => Ok(n),
            _ => Err(ApiError::invalid(format!(
                "limit must be an integer from 1 to {MAX_KEYS} (got {text:?})"
            ))),
        },
    }
}

/// The busiest fairness keys of the caller's namespace: per task and key, the executions
/// waiting (`queued`, `retrying`) and running (`running`, `cancel_requested`).
#[utoipa::path(
    get, path = "/v1/keys", tag = "executions",
    params(KeysParams),
    responses(
        (status = 200, description = "The busiest keys", body = KeysView),
        (status = 422, description = "limit out of range", body = ErrorBody),
        (status = 503, description = "This server reads no queue figures", body = ErrorBody),
        V1Errors,
    ),
    security(("bearer" = []))
)]
pub async fn list_keys(
    Tenant(client): Tenant,
    State(state): State<ApiState>,
    query: Result<Query<KeysParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<KeysView>, ApiError> {
    let Query(params) =
        query.map_err(|_| ApiError::invalid("the query string could not be parsed"))?;
    let limit = parse_limit(params.limit.as_deref())?;
    let Some(insights) = state.insights() else {
        return Err(ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            crate::error::code::BACKEND_UNAVAILABLE,
            "this server reads no queue figures (no backend insights)",
        ));
    };
    let namespace = client.namespace().to_owned();
    let loads = insights
        .key_loads(std::slice::from_ref(&namespace), limit)
        .await?;
    Ok(Json(KeysView::new(&namespace, &loads)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limit_defaults_and_refuses_out_of_range_with_the_value() {
        assert_eq!(parse_limit(None).ok(), Some(DEFAULT_KEYS));
        assert_eq!(parse_limit(Some(" 7 ")).ok(), Some(7));
        assert_eq!(parse_limit(Some("1000")).ok(), Some(1000));
        for bad in ["0", "1001", "-1", "x", "1e3"] {
            let e = parse_limit(Some(bad)).err().map(|e| e.to_string());
            let e = e.unwrap_or_default();
            assert!(
                e.contains("limit must be an integer from 1 to 1000"),
                "{bad}: {e}"
            );
            assert!(e.contains(bad), "{bad}: {e}");
        }
    }
}
