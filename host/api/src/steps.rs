//! The durable steps of an execution (docs/steps.md, docs/http-api.md#steps):
//! `GET /v1/executions/{id}/steps`, scoped to the caller's namespace like `GET
//! /v1/executions/{id}` (another tenant's execution is a 404).
//!
//! Each step is listed with its key, the size of its value, when and by which attempt it was
//! saved, in the order the keys were first saved. Values are left out unless asked for
//! (`?values=true`): a step holds up to 1 MiB and an execution up to 16 MiB, so one response
//! carries values in first-save order while they total at most [`MAX_VALUE_BYTES_PER_RESPONSE`]
//! (4 MiB); later steps come without `value` and `values_omitted` counts them. `?key=K` lists
//! only that step, so every value can be read (one per request at worst).

use axum::Json;
use axum::extract::{Query, State};
use onestep_core::ExecutionError;
use onestep_core::steps::{STEPS_TABLE_ABSENT, StepRecord};
use onestep_core::timefmt::utc_isoformat;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};
use uuid::Uuid;

use crate::ApiState;
use crate::error::{ApiError, ErrorBody};
use crate::extract::{ExecutionId, Tenant};
use crate::openapi::{NotFoundErrors, V1Errors};

/// Most bytes of step values one `?values=true` response carries (4 MiB).
pub const MAX_VALUE_BYTES_PER_RESPONSE: u64 = 4 * 1024 * 1024;

/// One recorded step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StepView {
    /// The step's key.
    pub key: String,
    /// Bytes of its value (its JSON text).
    pub bytes: u64,
    /// When the current value was saved (UTC, ISO 8601).
    pub saved_at: String,
    /// The number of the attempt that saved it (1-based).
    pub attempt: u32,
    /// The id of that attempt.
    pub attempt_id: Uuid,
    /// The saved value (any JSON), only with `?values=true` and within the response's budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<Value>,
}

impl From<&StepRecord> for StepView {
    fn from(r: &StepRecord) -> Self {
        StepView {
            key: r.key.clone(),
            bytes: r.bytes,
            saved_at: utc_isoformat(&r.saved_at),
            attempt: r.attempt_no,
            attempt_id: r.attempt_id,
            value: None,
        }
    }
}

/// `GET /v1/executions/{id}/steps`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StepsView {
    /// The execution id.
    pub execution_id: Uuid,
    /// Its steps in the order their keys were first saved (only `key` with `?key=`).
    pub items: Vec<StepView>,
    /// Bytes of all the listed steps' values.
    pub total_bytes: u64,
    /// False when the store keeps no steps (tables created before the steps table: `onestep
    /// migrate --upgrade` adds it); `items` is then empty.
    pub steps_kept: bool,
    /// Listed steps whose value was asked for (`?values=true`) but left out, past the
    /// response's 4 MiB of values: ask for each with `?values=true&key=K`.
    pub values_omitted: u32,
}

/// Query of the steps route.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StepsParams {
    /// `true` includes the values (at most 4 MiB of them per response); default `false`.
    #[param(value_type = Option<bool>)]
    pub values: Option<String>,
    /// Only the step of this key (exact; 1–255 bytes).
    pub key: Option<String>,
}

fn values_flag(text: Option<&str>) -> Result<bool, ApiError> {
    match text.map(str::trim) {
        None | Some("false") | Some("0") => Ok(false),
        Some("true") | Some("1") => Ok(true),
        Some(other) => Err(ApiError::invalid(format!(
            "values must be true or false, got '{other}'"
        ))),
    }
}

/// The steps of `id` as `view` lists them, values included within the budget when asked.
/// `Ok(None)` when the store keeps no steps.
pub async fn steps_view(
    store: Option<&dyn onestep_core::steps::StepStore>,
    id: Uuid,
    key: Option<&str>,
    values: bool,
) -> Result<StepsView, ExecutionError> {
    let mut view = StepsView {
        execution_id: id,
        items: Vec::new(),
        total_bytes: 0,
        steps_kept: false,
        values_omitted: 0,
    };
    let Some(store) = store else {
        return Ok(view);
    };
    let records = match store.list(id).await {
        Ok(r) => r,
        Err(ExecutionError::InvalidArgument(m)) if m.contains(STEPS_TABLE_ABSENT) => {
            return Ok(view);
        }
        Err(e) => return Err(e),
    };
    view.steps_kept = true;
    let mut budget = MAX_VALUE_BYTES_PER_RESPONSE;
    for record in records.iter().filter(|r| key.is_none_or(|k| r.key == k)) {
        let mut item = StepView::from(record);
        view.total_bytes += record.bytes;
        if values {
            if record.bytes <= budget {
                // A value replaced since the list is shown as it is now.
                if let Some(text) = store.load(id, &record.key).await? {
                    budget = budget.saturating_sub(text.len() as u64);
                    item.value = Some(serde_json::from_str(&text).map_err(|e| {
                        ExecutionError::Undecodable(format!(
                            "the value of step {:?} is not JSON: {e}",
                            record.key
                        ))
                    })?);
                }
            } else {
                view.values_omitted += 1;
            }
        }
        view.items.push(item);
    }
    Ok(view)
}

/// The durable steps an execution's handler recorded (docs/steps.md): key, size, when and by
/// which attempt, in first-save order; the values only with `values=true` (at most 4 MiB of
/// them per response, `values_omitted` counts the rest; `key=` lists one step).
#[utoipa::path(
    get, path = "/v1/executions/{id}/steps", tag = "executions",
    params(("id" = String, Path, description = "Execution id (UUID)"), StepsParams),
    responses(
        (status = 200, description = "The steps", body = StepsView),
        (status = 422, description = "Malformed id, values or key", body = ErrorBody),
        NotFoundErrors,
        V1Errors,
    ),
    security(("bearer" = []))
)]
pub async fn list_steps(
    Tenant(client): Tenant,
    State(state): State<ApiState>,
    ExecutionId(id): ExecutionId,
    query: Result<Query<StepsParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<StepsView>, ApiError> {
    let Query(params) =
        query.map_err(|_| ApiError::invalid("the query string could not be parsed"))?;
    let values = values_flag(params.values.as_deref())?;
    if let Some(k) = &params.key {
        onestep_core::steps::validate_key(k).map_err(|e| ApiError::invalid(e.to_string()))?;
    }
    // The namespace check: another tenant's execution is a missing one.
    client.get(id).await?.ok_or(ApiError::not_found(id))?;
    let view = steps_view(state.step_store(), id, params.key.as_deref(), values).await?;
    Ok(Json(view))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_values_flag_is_strict() {
        assert!(!values_flag(None).expect("default"));
        assert!(values_flag(Some("true")).expect("true"));
        assert!(values_flag(Some("1")).expect("1"));
        assert!(!values_flag(Some("false")).expect("false"));
        let e = values_flag(Some("yes")).expect_err("yes");
        assert!(
            e.to_string().contains("values must be true or false"),
            "{e}"
        );
    }
}
