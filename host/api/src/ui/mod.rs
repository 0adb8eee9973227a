//! The operator dashboard at `/ui` (docs/ui.md): two page shells (the list with the overview,
//! and one execution's detail), their stylesheet and script, all embedded in the binary, and
//! the HTML fragments the script fetches with the caller's token in the `Authorization` header.
//! Fragments go through the same tenancy, roles and client as `/v1`; actions use `/v1` itself.
//!
//! The shells need no token (they hold no data); every fragment does, exactly like `/v1`.

pub mod render;
pub mod values;

use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use chrono::Utc;
use minijinja::context;
use onestep_core::ExecutionStatus;
use onestep_core::request::ListQuery;
use serde::Deserialize;

use crate::error::ApiError;
use crate::extract::{Caller, ExecutionId};
use crate::routes::check_own_cursor;
use crate::state::{ApiState, OverviewSnapshot};

/// How long the overview's figures are reused for one namespace.
pub const OVERVIEW_CACHE: Duration = Duration::from_secs(5);
/// Up to this age, older figures are still shown while they are re-read in the background
/// (docs/ui.md#overview); older ones are re-read before the page is answered.
pub const OVERVIEW_STALE_MAX: Duration = Duration::from_secs(60);
/// Rows the "last hour" figures read at most.
pub const RECENT_ROWS: u32 = 10_000;

/// The overview's table of rate-limit buckets (operate tokens) holds at most this many rows.
const OVERVIEW_BUCKETS: u32 = 20;

/// The overview's table of the busiest fairness keys holds at most this many rows.
pub const OVERVIEW_KEYS: u32 = 10;
/// Rows per list page of the dashboard.
pub const PAGE_ROWS: u32 = 50;

const APP_JS: &str = include_str!("assets/app.js");
const APP_CSS: &str = include_str!("assets/app.css");

/// The `/ui` routes (merged into [`router`](crate::router)).
pub fn routes() -> Router<ApiState> {
    Router::new()
        .route("/ui", get(list_shell))
        .route("/ui/", get(list_shell))
        .route("/ui/executions/{id}", get(detail_shell))
        .route("/ui/deployments", get(deployments_shell))
        .route("/ui/fragments/deployments", get(deployments_fragment))
        .route("/ui/assets/app.js", get(app_js))
        .route("/ui/assets/app.css", get(app_css))
        .route("/ui/fragments/overview", get(overview_fragment))
        .route("/ui/fragments/list", get(list_fragment))
        .route("/ui/fragments/executions/{id}", get(detail_fragment))
        .route(
            "/ui/fragments/executions/{id}/values/{name}",
            get(value_download),
        )
        .route(
            "/ui/fragments/executions/{id}/attempts/{attempt}/logs",
            get(logs_fragment),
        )
}

fn html(text: Result<String, render::RenderError>) -> Response {
    match text {
        Ok(body) => {
            let mut resp = Html(body).into_response();
            resp.headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            resp
        }
        Err(e) => {
            tracing::error!(error = %e, "dashboard template failed");
            (StatusCode::INTERNAL_SERVER_ERROR, "template error").into_response()
        }
    }
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

async fn app_js() -> Response {
    asset("text/javascript; charset=utf-8", APP_JS)
}

async fn app_css() -> Response {
    asset("text/css; charset=utf-8", APP_CSS)
}

async fn list_shell() -> Response {
    html(render::render(
        "shell.html",
        context! {title => "executions", page => "list", id => "", statuses => render::status_names()},
    ))
}

async fn detail_shell(ExecutionId(id): ExecutionId) -> Response {
    html(render::render(
        "shell.html",
        context! {title => format!("execution {id}"), page => "detail", id => id.to_string(),
        statuses => render::status_names()},
    ))
}

async fn deployments_shell() -> Response {
    html(render::render(
        "shell.html",
        context! {title => "deployments", page => "deployments", id => "", statuses => render::status_names()},
    ))
}

/// Versions the deployments view reads (newest first, every task of the namespace).
pub const DEPLOYMENT_ROWS: u32 = 200;
/// Audit events the deployments view shows.
pub const DEPLOYMENT_EVENTS: u32 = 50;

/// The namespace's deployments per task and the newest audit events (docs/ui.md#deployments);
/// every role reads them.
async fn deployments_fragment(
    Caller(client, _role): Caller,
    State(state): State<ApiState>,
) -> Result<Response, ApiError> {
    let Some(deploy) = state.deploy_api() else {
        return Ok(html(Ok(
            "<p class=\"muted\">This server has no deployments API.</p>".to_owned(),
        )));
    };
    let namespace = client.namespace().to_owned();
    let filter = onestep_core::deployments::DeploymentFilter {
        namespace: Some(namespace.clone()),
        task: None,
    };
    let (page, events) = tokio::try_join!(
        deploy.deployments.list(&filter, None, DEPLOYMENT_ROWS),
        deploy
            .deployments
            .audit(&namespace, None, None, DEPLOYMENT_EVENTS),
    )?;
    Ok(html(render::render(
        "deployments.html",
        render::deployments_context(
            &namespace,
            &page.items,
            page.next_before.is_some(),
            &events.items,
        ),
    )))
}

/// Digest (hex, as attempts record it) → the versions of `task` deployed with it, newest
/// versions first read; empty without a deployments API or deployments of the task.
async fn deployed_versions(
    state: &ApiState,
    namespace: &str,
    task: &str,
) -> Result<std::collections::BTreeMap<String, Vec<i64>>, ApiError> {
    let mut out: std::collections::BTreeMap<String, Vec<i64>> = Default::default();
    let Some(deploy) = state.deploy_api() else {
        return Ok(out);
    };
    if onestep_core::deployments::check_name("task", task).is_err() {
        return Ok(out);
    }
    let page = deploy
        .deployments
        .list(
            &onestep_core::deployments::DeploymentFilter {
                namespace: Some(namespace.to_owned()),
                task: Some(task.to_owned()),
            },
            None,
            DEPLOYMENT_ROWS,
        )
        .await?;
    for d in page.items.iter().rev() {
        let hex = d
            .digest
            .as_str()
            .strip_prefix("sha256:")
            .unwrap_or(d.digest.as_str());
        out.entry(hex.to_owned()).or_default().push(d.version);
    }
    Ok(out)
}

async fn overview_fragment(
    Caller(client, role): Caller,
    State(state): State<ApiState>,
) -> Result<Response, ApiError> {
    let Some(insights) = state.insights() else {
        return Ok(html(Ok(
            "<p class=\"muted\">This server has no overview figures.</p>".to_owned(),
        )));
    };
    let namespace = client.namespace().to_owned();
    let snapshot = match state.cached_overview(&namespace, OVERVIEW_STALE_MAX) {
        Some(s) if s.taken.elapsed() < OVERVIEW_CACHE => s,
        Some(stale) => {
            // Stale but recent: answer with it and re-read in the background, once at a time.
            if state.begin_overview_refresh(&namespace)
                && let Some(insights) = state.insights_handle()
            {
                let (state, namespace) = (state.clone(), namespace.clone());
                tokio::spawn(async move {
                    if let Err(e) = read_overview(&state, insights.as_ref(), &namespace).await {
                        tracing::warn!(%namespace, error = %e, "overview refresh failed");
                    }
                    state.end_overview_refresh(&namespace);
                });
            }
            stale
        }
        None => read_overview(&state, insights, &namespace).await?,
    };
    Ok(html(render::render(
        "overview.html",
        context! {
            namespace => namespace,
            statuses => render::status_names(),
            counts => render::count_rows(&snapshot.counts),
            hour => render::hour_context(&snapshot.recent),
            keys => minijinja::Value::from_serialize(&snapshot.keys.keys),
            keys_truncated => snapshot.keys.truncated,
            // Fleet-wide, shared by every namespace: operate tokens only (docs/ui.md#rate-limits).
            throttles => if role.can_operate() {
                crate::throttles::RateLimitsView::new(&snapshot.rate_limits, Utc::now()).items
            } else {
                Vec::new()
            },
            throttles_truncated => role.can_operate() && snapshot.rate_limits.truncated,
            as_of => snapshot.as_of.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            cache_s => OVERVIEW_CACHE.as_secs(),
        },
    )))
}

/// Reads the overview figures of `namespace` and keeps them in the cache.
async fn read_overview(
    state: &ApiState,
    insights: &dyn onestep_core::ports::ExecutionInsights,
    namespace: &str,
) -> Result<OverviewSnapshot, onestep_core::ExecutionError> {
    // The two statements are independent: run them side by side on two connections.
    let since = Utc::now() - chrono::Duration::hours(1);
    let namespaces = [namespace.to_owned()];
    let (counts, recent, keys, rate_limits) = tokio::try_join!(
        insights.counts_by_task_status(namespace),
        insights.recent_activity(namespace, since, RECENT_ROWS),
        insights.key_loads(&namespaces, OVERVIEW_KEYS),
        insights.rate_limits(OVERVIEW_BUCKETS),
    )?;
    let snapshot = OverviewSnapshot {
        taken: Instant::now(),
        as_of: Utc::now(),
        counts,
        recent,
        keys,
        rate_limits,
    };
    state.store_overview(namespace, snapshot.clone());
    Ok(snapshot)
}

/// Query of the list fragment (the list filter of `GET /v1/executions`).
#[derive(Debug, Default, Deserialize)]
pub struct ListFragmentParams {
    task_name: Option<String>,
    status: Option<String>,
    cursor: Option<String>,
    created_from: Option<String>,
    created_before: Option<String>,
    idempotency_key: Option<String>,
    metadata: Option<String>,
    exception_type: Option<String>,
}

async fn list_fragment(
    Caller(client, _role): Caller,
    query: Result<Query<ListFragmentParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(params) =
        query.map_err(|_| ApiError::invalid("the query string could not be parsed"))?;
    let status = params
        .status
        .as_deref()
        .filter(|s| !s.trim().is_empty())
        .map(str::parse::<ExecutionStatus>)
        .transpose()?;
    let task_name = params.task_name.filter(|t| !t.trim().is_empty());
    let search = crate::search::SearchText {
        created_from: params.created_from.as_deref(),
        created_before: params.created_before.as_deref(),
        idempotency_key: params.idempotency_key.as_deref(),
        metadata: params.metadata.as_deref(),
        exception_type: params.exception_type.as_deref(),
    }
    .parse()?;
    let cursor = params.cursor.filter(|c| !c.is_empty());
    check_own_cursor(&client, cursor.as_deref()).await?;
    let page = client
        .search(
            &ListQuery {
                task_name,
                status,
                limit: PAGE_ROWS,
                cursor,
            },
            &search,
        )
        .await?;
    let live = page.items.iter().any(|e| !e.terminal());
    let items: Vec<render::ListRow> = page.items.iter().map(render::ListRow::from).collect();
    Ok(html(render::render(
        "list.html",
        context! {
            items => items,
            live => live,
            next_cursor => page.next_cursor,
            partial => page.partial,
            window => onestep_core::request::SEARCH_WINDOW_ROWS,
        },
    )))
}

/// Query of the detail fragment: `values=false` (the auto-refresh) leaves the payload and
/// metadata out.
#[derive(Debug, Default, Deserialize)]
pub struct DetailParams {
    values: Option<bool>,
}

async fn detail_fragment(
    Caller(client, role): Caller,
    State(state): State<ApiState>,
    ExecutionId(id): ExecutionId,
    query: Result<Query<DetailParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Response, ApiError> {
    let Query(params) = query.map_err(|_| ApiError::invalid("values must be true or false"))?;
    let execution = client.get(id).await?.ok_or(ApiError::not_found(id))?;
    let attempts = client.attempts(id).await?.unwrap_or_default();
    let cancel_reason = match execution.cancel_requested_at {
        Some(_) => client.cancel_reason(id).await?.flatten(),
        None => None,
    };
    // docs/ui.md#deliveries: the completion webhook, when the execution has one.
    let deliveries = match state.callback_store() {
        Some(store) => store.deliveries(client.namespace(), id).await?,
        None => None,
    };
    // docs/ui.md#steps: the durable steps (none shown when the store keeps none).
    let steps = match state.step_store() {
        Some(store) => match store.list(id).await {
            Ok(s) => Some(s),
            Err(onestep_core::ExecutionError::InvalidArgument(m))
                if m.contains(onestep_core::steps::STEPS_TABLE_ABSENT) =>
            {
                None
            }
            Err(e) => return Err(e.into()),
        },
        None => None,
    };
    // docs/ui.md#deployments: which deployed version ran each attempt, by component digest.
    let deployed = deployed_versions(&state, client.namespace(), &execution.task_name).await?;
    Ok(html(render::render(
        "detail.html",
        render::detail_context(
            &execution,
            &attempts,
            cancel_reason.as_deref(),
            role.can_cancel(),
            role.can_operate(),
            params.values.unwrap_or(true),
            deliveries.as_ref(),
            &deployed,
            steps.as_deref(),
        ),
    )))
}

/// One stored value of an execution (`payload`, `metadata`, `result`), whole, as a JSON
/// attachment: what the detail page's preview cut (docs/ui.md#values). Same tenancy as the
/// detail fragment; `result` only once the execution succeeded (404 before).
async fn value_download(
    Caller(client, _role): Caller,
    axum::extract::Path((id, name)): axum::extract::Path<(String, String)>,
) -> Result<Response, ApiError> {
    let id =
        uuid::Uuid::parse_str(&id).map_err(|_| ApiError::invalid("execution id must be a UUID"))?;
    let execution = client.get(id).await?.ok_or(ApiError::not_found(id))?;
    let value = match name.as_str() {
        "payload" => execution.payload,
        "metadata" => serde_json::Value::Object(execution.metadata),
        "result" if execution.status == ExecutionStatus::Succeeded => {
            execution.result.unwrap_or(serde_json::Value::Null)
        }
        "result" => return Err(ApiError::not_found(id)),
        _ => {
            return Err(ApiError::invalid(
                "value must be payload, metadata or result",
            ));
        }
    };
    let body = serde_json::to_vec(&value)
        .map_err(|e| ApiError::invalid(format!("the stored {name} cannot be encoded: {e}")))?;
    let disposition = format!("attachment; filename=\"{id}-{name}.json\"");
    let mut resp = ([(header::CONTENT_TYPE, "application/json")], body).into_response();
    let headers = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&disposition) {
        headers.insert(header::CONTENT_DISPOSITION, v);
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    Ok(resp)
}

/// The stored log tail of one attempt, loaded when its `<details>` opens.
async fn logs_fragment(
    Caller(client, _role): Caller,
    crate::attempts::AttemptPath { id, attempt }: crate::attempts::AttemptPath,
) -> Result<Response, ApiError> {
    let tail = client
        .attempt_log(id, attempt)
        .await?
        .ok_or(ApiError::not_found(id))?;
    Ok(html(render::render(
        "logs.html",
        render::logs_context(attempt, tail.as_ref()),
    )))
}
