//! Who is being throttled and why (docs/http-api.md#rate-limits): the fleet-wide rate-limit
//! buckets (task starts, outbound origins) as the workers last wrote them. The buckets are shared
//! by every namespace, so only `operate` tokens read them. One statement over the small buckets
//! table.

use axum::Json;
use axum::extract::{Query, State};
use chrono::{DateTime, Utc};
use onestep_core::rate::{BucketState, BucketStates};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::error::{ApiError, ErrorBody};
use crate::extract::Operator;
use crate::openapi::{ForbiddenErrors, V1Errors};
use crate::state::ApiState;

/// Default `limit` of `GET /v1/rate-limits`.
pub const DEFAULT_BUCKETS: u32 = 50;
/// The largest `limit` of `GET /v1/rate-limits`.
pub const MAX_BUCKETS: u32 = 1000;

/// One fleet-wide token bucket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BucketView {
    /// `task` (execution starts of a task's `rate_limit`) or `origin` (outbound requests of
    /// an origin's `sandbox.network.rate_limits`).
    pub kind: String,
    /// The task's name or the origin (`scheme://host:port`).
    pub target: String,
    /// Tokens the bucket held at `updated_at` (it refills at the workers' configured rate
    /// from then on).
    pub tokens: f64,
    /// When a worker last took from, refunded or paused the bucket.
    pub updated_at: DateTime<Utc>,
    /// An upstream's `429 Retry-After` pauses the origin for the whole fleet until then.
    pub paused_until: Option<DateTime<Utc>>,
    /// Why callers are held back now: `paused` (an upstream's `Retry-After` has not passed),
    /// `drained` (fewer than one token at the last take: takers wait for the refill) or
    /// `null`.
    pub throttled: Option<String>,
}

impl BucketView {
    /// The view of `b` at `now`.
    pub fn new(b: &BucketState, now: DateTime<Utc>) -> Self {
        let throttled = if b.paused_at(now) {
            Some("paused")
        } else if b.drained() {
            Some("drained")
        } else {
            None
        };
        BucketView {
            kind: b.kind().to_owned(),
            target: b.target().to_owned(),
            tokens: (b.state.tokens * 1000.0).round() / 1000.0,
            updated_at: b.state.refilled_at,
            paused_until: b.state.paused_until,
            throttled: throttled.map(str::to_owned),
        }
    }
}

/// The stored buckets, paused first, then fewest tokens.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct RateLimitsView {
    /// Whether the tables keep buckets (`false` on tables created without `<T>_buckets`: run
    /// `onestep migrate --upgrade`).
    pub kept: bool,
    /// At most `limit` buckets.
    pub items: Vec<BucketView>,
    /// More buckets are stored than were listed.
    pub truncated: bool,
    /// The instant `throttled` was judged at (this server's clock).
    pub as_of: DateTime<Utc>,
}

impl RateLimitsView {
    /// The view of `states` at `now`.
    pub fn new(states: &BucketStates, now: DateTime<Utc>) -> Self {
        RateLimitsView {
            kept: states.kept,
            items: states
                .items
                .iter()
                .map(|b| BucketView::new(b, now))
                .collect(),
            truncated: states.truncated,
            as_of: now,
        }
    }
}

/// Query of `GET /v1/rate-limits`.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RateLimitsParams {
    /// How many buckets, 1–1000 (default 50).
    #[param(value_type = Option<u32>, minimum = 1, maximum = 1000)]
    pub limit: Option<String>,
}

/// Parses `limit` (1..=[`MAX_BUCKETS`], default [`DEFAULT_BUCKETS`]).
pub fn parse_limit(limit: Option<&str>) -> Result<u32, ApiError> {
    match limit.map(str::trim) {
        None | Some("") => Ok(DEFAULT_BUCKETS),
        Some(text) => match text.parse::<u32>() {
            Ok(n) if (1..=MAX_BUCKETS).contains(&n) => Ok(n),
            _ => Err(ApiError::invalid(format!(
                "limit must be an integer from 1 to {MAX_BUCKETS} (got {text:?})"
            ))),
        },
    }
}

/// The fleet-wide rate-limit buckets: per task (execution starts) and per outbound origin, the
/// tokens at the last write, an upstream's pause, and whether callers are held back now.
#[utoipa::path(
    get, path = "/v1/rate-limits", tag = "operate",
    params(RateLimitsParams),
    responses(
        (status = 200, description = "The buckets, paused first, then fewest tokens", body = RateLimitsView),
        (status = 422, description = "limit out of range", body = ErrorBody),
        (status = 503, description = "This server reads no queue figures", body = ErrorBody),
        ForbiddenErrors,
        V1Errors,
    ),
    security(("bearer" = []))
)]
pub async fn list_rate_limits(
    Operator(_client): Operator,
    State(state): State<ApiState>,
    query: Result<Query<RateLimitsParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<RateLimitsView>, ApiError> {
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
    let states = insights.rate_limits(limit).await?;
    Ok(Json(RateLimitsView::new(&states, Utc::now())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use onestep_core::rate::BucketSnapshot;

    #[test]
    fn limit_defaults_and_refuses_out_of_range_with_the_value() {
        assert_eq!(parse_limit(None).ok(), Some(DEFAULT_BUCKETS));
        assert_eq!(parse_limit(Some("1000")).ok(), Some(1000));
        for bad in ["0", "1001", "x"] {
            let e = parse_limit(Some(bad)).err().map(|e| e.to_string());
            let e = e.unwrap_or_default();
            assert!(
                e.contains("from 1 to 1000") && e.contains(bad),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn a_bucket_says_why_it_throttles() {
        let now = Utc::now();
        let b = |tokens: f64, paused: Option<i64>| BucketState {
            bucket: "origin:https://api.example:443".into(),
            state: BucketSnapshot {
                tokens,
                refilled_at: now,
                paused_until: paused.map(|s| now + chrono::Duration::seconds(s)),
            },
        };
        let v = BucketView::new(&b(3.0, Some(30)), now);
        assert_eq!(v.throttled.as_deref(), Some("paused"));
        assert_eq!(
            (v.kind.as_str(), v.target.as_str()),
            ("origin", "https://api.example:443")
        );
        assert_eq!(
            BucketView::new(&b(0.2, None), now).throttled.as_deref(),
            Some("drained")
        );
        // A pause that has passed no longer throttles.
        assert_eq!(BucketView::new(&b(2.0, Some(-5)), now).throttled, None);
    }
}
