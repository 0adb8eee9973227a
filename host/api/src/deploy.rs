//! The deployments API (docs/http-api.md#deployments, docs/deployments.md): upload a component
//! (`POST /v1/components`, raw bytes, content-addressed), deploy it for a task with typed
//! settings (`POST /v1/deployments`), read the history and the audit events, activate an older
//! version (rollback) and deactivate a task. The namespace is always the token's.
//!
//! A deploy is checked in this order, writing nothing until every check passed: the settings'
//! shape and structural rules ([`DeploymentSettings::validate`]), the namespace (a token of one
//! namespace cannot deploy into another, nor one no policy covers: 403), the component is
//! stored **by the token's namespace** (422 `unknown_component`, the same answer as for bytes
//! never stored: another namespace's digest is not a capability), the operator's policy (422 `policy_violation` listing every broken
//! rule, docs/deployment-policy.md#the-checks), then the **load check**: the stored component is
//! compiled and linked for the settings' sandbox as a worker would ([`ComponentVetter`], 422
//! `component_unloadable` with the loader's reason). Only then `DeploymentStore::deploy`.
//!
//! Who may: uploading, deploying, activating and deactivating need a `deploy` token (or no
//! tokens at all: local use); every role reads its namespace's deployments
//! (docs/http-api.md#roles). Without the operator's `deployments:` section every change is
//! refused with 409 `deployments_disabled`.

use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::{FromRequestParts, Path, Query, Request, State};
use axum::http::request::Parts;
use axum::http::{StatusCode, header};
use chrono::{DateTime, Utc};
use http_body_util::{BodyExt, Limited};
use onestep_core::components::{ComponentDigest, ComponentStore, MAX_COMPONENT_BYTES};
use onestep_core::deploy_policy::{DeploymentPolicy, DeploymentSettings, PolicyViolation};
use onestep_core::deployments::{
    ComponentVetter, Deployment, DeploymentError, DeploymentEvent, DeploymentFilter,
    DeploymentStore, MAX_PAGE, NewDeployment, StoredSettings,
};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::auth::Role;
use crate::error::{ApiError, ErrorBody, ViolationView, code};
use crate::extract::{BODY_READ_TIMEOUT, JsonBody, OptionalJsonBody};
use crate::openapi::{BodyErrors, ForbiddenErrors, V1Errors};
use crate::state::ApiState;

/// How many versions `GET /v1/deployments/{task}` lists.
pub const TASK_VERSIONS: u32 = 50;

/// Default page size of the history and the events.
pub const DEFAULT_PAGE: u32 = 50;

/// What the deployments API runs on, wired by `onestep serve`.
pub struct DeployApi {
    /// The component store.
    pub components: Arc<dyn ComponentStore>,
    /// The deployments store.
    pub deployments: Arc<dyn DeploymentStore>,
    /// The load check of a component against its settings.
    pub vetter: Arc<dyn ComponentVetter>,
    /// The operator's policy (`deployments:` of the configuration); `None`: deployments are not
    /// enabled and every change is refused.
    pub policy: Option<DeploymentPolicy>,
}

impl std::fmt::Debug for DeployApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeployApi")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

/// The refusal of every change when the operator's configuration has no `deployments:` section.
pub const DISABLED_MESSAGE: &str = "deployments are not enabled on this server: the operator's \
    configuration has no deployments: section (docs/configuration.md#deployments)";

fn disabled() -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        code::DEPLOYMENTS_DISABLED,
        DISABLED_MESSAGE,
    )
}

impl From<DeploymentError> for ApiError {
    fn from(e: DeploymentError) -> Self {
        let msg = e.to_string();
        match e {
            DeploymentError::Invalid(_) => ApiError::invalid(msg),
            DeploymentError::UnknownComponent { .. } => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                code::UNKNOWN_COMPONENT,
                msg,
            ),
            DeploymentError::VersionNotFound { .. } => {
                ApiError::new(StatusCode::NOT_FOUND, code::DEPLOYMENT_NOT_FOUND, msg)
            }
            DeploymentError::NoActiveVersion { .. } => {
                ApiError::new(StatusCode::CONFLICT, code::NO_ACTIVE_DEPLOYMENT, msg)
            }
            DeploymentError::TooManyTasks {
                namespace,
                asked,
                limit,
            } => policy_refusal(&[PolicyViolation {
                limit: "tasks".into(),
                kind: onestep_core::deploy_policy::ViolationKind::AboveCeiling,
                asked: format!("{asked} tasks with an active version"),
                rule: format!(
                    "the ceiling for namespace {namespace:?} is {limit} (deactivate a task first)"
                ),
            }]),
            DeploymentError::Store(e) => ApiError::from(e),
        }
    }
}

/// The caller's namespace and its actor name, for routes that read deployments (every role).
#[derive(Debug, Clone)]
pub struct DeployReader {
    /// The caller's namespace.
    pub namespace: String,
}

impl FromRequestParts<ApiState> for DeployReader {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, ApiError> {
        let auth = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        let (client, _) = state.caller_for(auth)?;
        Ok(DeployReader {
            namespace: client.namespace().to_owned(),
        })
    }
}

/// The caller when it may deploy (a `deploy` token, or no tokens at all): its namespace and the
/// actor name its changes are audited under (401 / 403 otherwise).
#[derive(Debug, Clone)]
pub struct Deployer {
    /// The token's namespace: the only one it may deploy into.
    pub namespace: String,
    /// Who the audit names: `deploy@<namespace>` for a `deploy` token (tokens carry no name),
    /// `local@<namespace>` without tokens.
    pub actor: String,
}

impl FromRequestParts<ApiState> for Deployer {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &ApiState) -> Result<Self, ApiError> {
        let auth = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok());
        let (client, role) = state.caller_for(auth)?;
        let namespace = client.namespace().to_owned();
        if state.unauthenticated() {
            return Ok(Deployer {
                actor: format!("local@{namespace}"),
                namespace,
            });
        }
        if !role.can_deploy() {
            return Err(ApiError::forbidden(format!(
                "a token with role '{}' may not upload components or change deployments \
                 (role 'deploy' only)",
                role.as_str()
            )));
        }
        Ok(Deployer {
            actor: format!("{}@{namespace}", Role::Deploy.as_str()),
            namespace,
        })
    }
}

fn api(state: &ApiState) -> Result<&DeployApi, ApiError> {
    state.deploy_api().ok_or_else(disabled)
}

fn policy(deploy: &DeployApi) -> Result<&DeploymentPolicy, ApiError> {
    deploy.policy.as_ref().ok_or_else(disabled)
}

fn violation_views(violations: &[PolicyViolation]) -> Vec<ViolationView> {
    violations
        .iter()
        .map(|v| ViolationView {
            limit: v.limit.clone(),
            kind: serde_json::to_value(v.kind)
                .ok()
                .and_then(|k| k.as_str().map(str::to_owned))
                .unwrap_or_default(),
            asked: v.asked.clone(),
            rule: v.rule.clone(),
            message: v.to_string(),
        })
        .collect()
}

fn policy_refusal(violations: &[PolicyViolation]) -> ApiError {
    policy_refusal_of("the deployment", violations)
}

/// 422 `policy_violation` naming `what` (`the deployment`, `version 3 of task "x"`) and every
/// broken rule.
fn policy_refusal_of(what: &str, violations: &[PolicyViolation]) -> ApiError {
    let lines: Vec<String> = violations.iter().map(ToString::to_string).collect();
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        code::POLICY_VIOLATION,
        format!(
            "{what} is refused by the operator's policy ({} rule{} broken): {}",
            violations.len(),
            if violations.len() == 1 { "" } else { "s" },
            lines.join("; ")
        ),
    )
    .with_violations(violation_views(violations))
}

/// A stored component.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct ComponentView {
    /// `sha256:<64 hex>`: what a deployment names.
    pub digest: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// False when the token's namespace had already stored the same bytes. Whether another
    /// namespace stored them is never told.
    pub created: bool,
}

/// The ceiling that covers `namespace`, or 403 with a `no_policy` violation: a namespace no
/// policy covers (any more) may not upload, deploy or activate.
fn ceiling_of<'a>(
    policy: &'a DeploymentPolicy,
    namespace: &str,
) -> Result<&'a onestep_core::deploy_policy::PolicyCeiling, ApiError> {
    policy.ceiling_for(namespace).ok_or_else(|| {
        let v = PolicyViolation {
            limit: "namespace".into(),
            kind: onestep_core::deploy_policy::ViolationKind::NoPolicy,
            asked: format!("{namespace:?}"),
            rule: "which no deployment policy covers (no entry in \
                   deployments.policy.namespaces and no deployments.policy.default): \
                   deployments into it are refused"
                .into(),
        };
        ApiError::forbidden(v.to_string()).with_violations(violation_views(&[v]))
    })
}

/// The largest component `namespace` may upload: its policy ceiling's `max_component_bytes`,
/// never above the store's cap.
fn component_cap(policy: &DeploymentPolicy, namespace: &str) -> Result<usize, ApiError> {
    let ceiling = ceiling_of(policy, namespace)?;
    Ok(usize::try_from(ceiling.max_component_bytes)
        .unwrap_or(usize::MAX)
        .min(MAX_COMPONENT_BYTES))
}

fn too_large(cap: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        code::PAYLOAD_TOO_LARGE,
        format!(
            "the component exceeds the namespace's component size ceiling of {cap} bytes \
             (deployments.policy …max_component_bytes)"
        ),
    )
}

/// Is `ct` `application/wasm` or `application/octet-stream` (parameters allowed)? Neither is a
/// CORS-safelisted type, so a cross-origin page cannot send either without a preflight.
pub fn is_wasm_content_type(ct: &str) -> bool {
    let media = ct.split(';').next().unwrap_or_default().trim();
    media.eq_ignore_ascii_case("application/wasm")
        || media.eq_ignore_ascii_case("application/octet-stream")
}

/// The raw bytes of a component upload, as OpenAPI describes them (`string`, `binary`).
#[derive(utoipa::ToSchema)]
#[schema(value_type = String, format = Binary)]
pub struct ComponentBytes(#[allow(dead_code)] Vec<u8>);

/// Upload a component: the raw bytes of a WebAssembly component (`Content-Type:
/// application/wasm`, or `application/octet-stream`), stored once by their SHA-256 (like an OCI blob: upload first, then a
/// deployment names the digest). The body may be at most the namespace's component size
/// ceiling (its own limit, not `api.max_body_bytes`). The bytes are stored once, but the token's
/// namespace is recorded as holding them: a deploy may name only a component its namespace
/// stored. Uploading bytes the namespace already stored answers `created: false`; bytes only
/// another namespace stored are `created: true` as if new. The bytes are not checked here: the
/// deploy that names them runs the load check.
#[utoipa::path(
    post, path = "/v1/components", tag = "deployments",
    request_body(content((ComponentBytes = "application/wasm"), (ComponentBytes = "application/octet-stream")), description = "The component's bytes"),
    responses(
        (status = 201, description = "Stored", body = ComponentView),
        (status = 200, description = "The namespace had already stored these bytes", body = ComponentView),
        (status = 403, description = "The token's role may not deploy, or no deployment policy covers its namespace", body = ErrorBody),
        (status = 408, description = "Body not received within 30 s", body = ErrorBody),
        (status = 409, description = "Deployments are not enabled (`deployments_disabled`)", body = ErrorBody),
        (status = 413, description = "Over the namespace's component size ceiling", body = ErrorBody),
        (status = 415, description = "No `Content-Type: application/wasm` (or `application/octet-stream`)", body = ErrorBody),
        (status = 422, description = "Empty body", body = ErrorBody),
        (status = 429, description = "The namespace already has 2 uploads or deploys in progress, or the server holds as many component bytes as it may (`deploy_busy`, `Retry-After`)", body = ErrorBody),
        V1Errors,
    ),
    security(("bearer" = []))
)]
pub async fn upload_component(
    deployer: Deployer,
    State(state): State<ApiState>,
    req: Request,
) -> Result<(StatusCode, Json<ComponentView>), ApiError> {
    let deploy = api(&state)?;
    let policy = policy(deploy)?;
    let ct = req
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    if !ct.is_some_and(is_wasm_content_type) {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            code::UNSUPPORTED_MEDIA_TYPE,
            "a component upload must have the header Content-Type: application/wasm (or application/octet-stream)",
        ));
    }
    let cap = component_cap(policy, &deployer.namespace)?;
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok())
        .or_else(|| axum::body::HttpBody::size_hint(req.body()).exact());
    if declared.is_some_and(|n| n > cap as u64) {
        return Err(too_large(cap));
    }
    // The body is held whole in memory: a place among the transfers in progress first (429
    // `deploy_busy` otherwise, before a byte of the body is read).
    let _transfer = state
        .transfers()
        .acquire(&deployer.namespace, declared.unwrap_or(cap as u64))?;
    let body: Body = req.into_body();
    let read = tokio::time::timeout(BODY_READ_TIMEOUT, Limited::new(body, cap).collect()).await;
    let bytes = match read {
        Err(_) => {
            return Err(ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                code::REQUEST_TIMEOUT,
                format!(
                    "the request body did not arrive within {} s",
                    BODY_READ_TIMEOUT.as_secs()
                ),
            ));
        }
        Ok(Err(e)) => {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                return Err(too_large(cap));
            }
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                code::INVALID_BODY,
                "the request body could not be read",
            ));
        }
        Ok(Ok(collected)) => collected.to_bytes(),
    };
    if bytes.is_empty() {
        return Err(ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            code::INVALID_BODY,
            "the request body is empty; send the component's bytes",
        ));
    }
    // Stored for the token's namespace: `created` says whether this namespace held the bytes
    // before, never whether another one stored them.
    let held = deploy
        .components
        .put_for(&deployer.namespace, &bytes)
        .await?;
    let status = if held.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        Json(ComponentView {
            digest: held.digest.to_string(),
            bytes: bytes.len() as u64,
            created: held.created,
        }),
    ))
}

/// One version of a task's deployment.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DeploymentView {
    /// The namespace.
    pub namespace: String,
    /// The task.
    pub task: String,
    /// 1, 2, … per task.
    pub version: i64,
    /// The component, `sha256:<64 hex>`.
    pub digest: String,
    /// `active` (serves new claims), `superseded` or `inactive`.
    pub state: String,
    /// The typed deployment settings (docs/deployment-policy.md#the-manifest), as stored.
    #[schema(value_type = Object)]
    pub settings: serde_json::Value,
    /// Who deployed it.
    pub deployed_by: String,
    /// When.
    pub deployed_at: DateTime<Utc>,
    /// The version active when it was deployed.
    pub previous_version: Option<i64>,
    /// That version's digest.
    pub previous_digest: Option<String>,
    /// The deployer's note.
    pub note: Option<String>,
    /// The store revision of its deploy (the history's order).
    pub revision: i64,
    /// When its state last changed.
    pub updated_at: DateTime<Utc>,
}

impl From<&Deployment> for DeploymentView {
    fn from(d: &Deployment) -> Self {
        DeploymentView {
            namespace: d.namespace.clone(),
            task: d.task.clone(),
            version: d.version,
            digest: d.digest.to_string(),
            state: d.state.as_str().to_owned(),
            settings: d.settings.to_value(),
            deployed_by: d.deployed_by.clone(),
            deployed_at: d.deployed_at,
            previous_version: d.previous_version,
            previous_digest: d.previous_digest.as_ref().map(ToString::to_string),
            note: d.note.clone(),
            revision: d.revision,
            updated_at: d.updated_at,
        }
    }
}

/// What a deploy did.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DeployedView {
    /// False when the task's active version already had the same digest and settings: nothing
    /// was written.
    pub created: bool,
    /// The new version (or the active one the deploy repeated).
    pub deployment: DeploymentView,
}

/// The body of `POST /v1/deployments`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct DeployBody {
    /// The typed deployment settings (what `onestep deploy` builds from a manifest; their
    /// `namespace` must be the token's).
    #[schema(value_type = Object)]
    pub settings: serde_json::Value,
    /// A stored component (`POST /v1/components`), `sha256:<64 hex>`.
    pub digest: String,
    /// Why (kept with the version and its audit event), at most 1000 characters.
    #[serde(default)]
    pub note: Option<String>,
}

/// Deploy a new version of a task: the typed settings and a stored component. Checked before
/// anything is written: the settings' rules, the namespace (the token's only), the component is
/// stored, the operator's policy ceilings (422 listing every broken rule), and the load check
/// (the component compiles and links for the settings' sandbox, as a worker loads it). The new
/// version becomes active; a deploy repeating the active version's digest and settings writes
/// nothing and answers 200 with `created: false`.
#[utoipa::path(
    post, path = "/v1/deployments", tag = "deployments",
    request_body = DeployBody,
    responses(
        (status = 201, description = "Deployed: the new active version", body = DeployedView),
        (status = 200, description = "The active version already is this deployment (`created: false`)", body = DeployedView),
        (status = 403, description = "The token's role may not deploy, the settings name another namespace, or no deployment policy covers the namespace (`violations`)", body = ErrorBody),
        (status = 409, description = "Deployments are not enabled (`deployments_disabled`)", body = ErrorBody),
        (status = 422, description = "Bad settings or note (`invalid_body`, `invalid_argument`), component not stored by the namespace (`unknown_component`), over the policy (`policy_violation` with `violations`), or not loadable (`component_unloadable`)", body = ErrorBody),
        (status = 429, description = "The namespace already has 2 uploads or deploys in progress, or the server holds as many component bytes as it may (`deploy_busy`, `Retry-After`)", body = ErrorBody),
        BodyErrors,
        V1Errors,
    ),
    security(("bearer" = []))
)]
pub async fn deploy(
    deployer: Deployer,
    State(state): State<ApiState>,
    JsonBody(body): JsonBody<DeployBody>,
) -> Result<(StatusCode, Json<DeployedView>), ApiError> {
    let deploy = api(&state)?;
    let policy = policy(deploy)?;
    // The error names where in the settings it is (`settings.sandbox.fuel: …`).
    let settings: DeploymentSettings =
        serde_path_to_error::deserialize(body.settings).map_err(|e| {
            let at = match e.path().to_string() {
                p if p == "." => "settings".to_owned(),
                p => format!("settings.{p}"),
            };
            ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                code::INVALID_BODY,
                format!("{at}: {}", e.inner()),
            )
        })?;
    settings
        .validate()
        .map_err(|e| ApiError::invalid(format!("settings: {e}")))?;
    onestep_core::deployments::check_note(body.note.as_deref())?;
    if let Err(v) =
        onestep_core::deploy_policy::check_namespace(&deployer.namespace, &settings.namespace)
    {
        return Err(ApiError::forbidden(v.to_string()).with_violations(violation_views(&[v])));
    }
    // A namespace no policy covers is refused before anything is read (403, as an upload).
    ceiling_of(policy, &deployer.namespace)?;
    let digest = ComponentDigest::parse(body.digest.trim())?;
    // Only a component this namespace stored: another namespace's digest is answered exactly
    // as bytes never stored (no existence, no size).
    let Some(stat) = deploy
        .components
        .stat_for(&deployer.namespace, &digest)
        .await?
    else {
        return Err(DeploymentError::UnknownComponent { digest }.into());
    };
    policy
        .check(&deployer.namespace, &settings, stat.size)
        .map_err(|v| policy_refusal(&v))?;
    // The component is read into memory for the load check: a place among the transfers in
    // progress first.
    let _transfer = state.transfers().acquire(&deployer.namespace, stat.size)?;
    let Some(bytes) = deploy.components.get(&digest).await? else {
        return Err(DeploymentError::UnknownComponent { digest }.into());
    };
    deploy
        .vetter
        .vet(&bytes, &settings)
        .await
        .map_err(|reason| {
            ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                code::COMPONENT_UNLOADABLE,
                format!(
                    "component {digest} cannot be loaded for task {:?} (the load check a worker \
                 makes): {reason}",
                    settings.task
                ),
            )
        })?;
    let new = NewDeployment {
        namespace: settings.namespace.clone(),
        task: settings.task.clone(),
        digest,
        settings: StoredSettings::of(&settings)?,
        actor: deployer.actor,
        note: body.note,
        max_tasks: Some(ceiling_of(policy, &deployer.namespace)?.max_tasks),
    };
    let done = deploy.deployments.deploy(&new).await?;
    let status = if done.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((
        status,
        Json(DeployedView {
            created: done.created,
            deployment: DeploymentView::from(&done.deployment),
        }),
    ))
}

/// Query of the history and the events.
#[derive(Debug, Clone, Default, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct HistoryParams {
    /// Only this task.
    pub task: Option<String>,
    /// `next_before` of the previous page.
    #[param(value_type = Option<i64>, minimum = 1)]
    pub before: Option<String>,
    /// Page size, 1..=200 (default 50).
    #[param(value_type = Option<u32>, minimum = 1, maximum = 200)]
    pub limit: Option<String>,
}

fn page_args(p: &HistoryParams) -> Result<(Option<i64>, u32), ApiError> {
    let before = match p.before.as_deref().map(str::trim) {
        None | Some("") => None,
        Some(t) => Some(t.parse::<i64>().map_err(|_| {
            ApiError::invalid(format!("before must be a revision number (got {t:?})"))
        })?),
    };
    let limit = match p.limit.as_deref().map(str::trim) {
        None | Some("") => DEFAULT_PAGE,
        Some(t) => t.parse::<u32>().map_err(|_| {
            ApiError::invalid(format!(
                "limit must be an integer from 1 to {MAX_PAGE} (got {t:?})"
            ))
        })?,
    };
    onestep_core::deployments::check_page(before, limit)?;
    if let Some(t) = &p.task {
        onestep_core::deployments::check_name("task", t)?;
    }
    Ok((before, limit))
}

/// A page of the history, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DeploymentPageView {
    /// The versions, newest deploy first.
    pub items: Vec<DeploymentView>,
    /// Pass as `before` for the next page; `null` on the last.
    pub next_before: Option<i64>,
}

/// The namespace's deployment history, newest first (every version of every task, or of one).
#[utoipa::path(
    get, path = "/v1/deployments", tag = "deployments",
    params(HistoryParams),
    responses(
        (status = 200, description = "A page of versions", body = DeploymentPageView),
        (status = 409, description = "This server has no deployments API", body = ErrorBody),
        (status = 422, description = "Bad task, before or limit", body = ErrorBody),
        V1Errors,
    ),
    security(("bearer" = []))
)]
pub async fn list_deployments(
    reader: DeployReader,
    State(state): State<ApiState>,
    query: Result<Query<HistoryParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<DeploymentPageView>, ApiError> {
    let Query(params) =
        query.map_err(|_| ApiError::invalid("the query string could not be parsed"))?;
    let (before, limit) = page_args(&params)?;
    let deploy = api(&state)?;
    let page = deploy
        .deployments
        .list(
            &DeploymentFilter {
                namespace: Some(reader.namespace),
                task: params.task,
            },
            before,
            limit,
        )
        .await?;
    Ok(Json(DeploymentPageView {
        items: page.items.iter().map(DeploymentView::from).collect(),
        next_before: page.next_before,
    }))
}

/// One task's deployments.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TaskDeploymentsView {
    /// The namespace.
    pub namespace: String,
    /// The task.
    pub task: String,
    /// The version serving new claims; `null` when none (deactivated).
    pub active: Option<DeploymentView>,
    /// The newest versions (at most 50), newest deploy first.
    pub versions: Vec<DeploymentView>,
}

/// A task's active version and its recent versions. (A task named `events` is read with
/// `GET /v1/deployments?task=events`.)
#[utoipa::path(
    get, path = "/v1/deployments/{task}", tag = "deployments",
    params(("task" = String, Path, description = "Task name")),
    responses(
        (status = 200, description = "The task's deployments", body = TaskDeploymentsView),
        (status = 404, description = "The task has no deployment in the caller's namespace (`deployment_not_found`)", body = ErrorBody),
        (status = 409, description = "This server has no deployments API", body = ErrorBody),
        (status = 422, description = "Bad task name", body = ErrorBody),
        V1Errors,
    ),
    security(("bearer" = []))
)]
pub async fn get_task_deployments(
    reader: DeployReader,
    State(state): State<ApiState>,
    Path(task): Path<String>,
) -> Result<Json<TaskDeploymentsView>, ApiError> {
    onestep_core::deployments::check_name("task", &task)?;
    let deploy = api(&state)?;
    let active = deploy.deployments.active(&reader.namespace, &task).await?;
    let page = deploy
        .deployments
        .list(
            &DeploymentFilter {
                namespace: Some(reader.namespace.clone()),
                task: Some(task.clone()),
            },
            None,
            TASK_VERSIONS,
        )
        .await?;
    if page.items.is_empty() {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            code::DEPLOYMENT_NOT_FOUND,
            format!(
                "task {task:?} of namespace {:?} has no deployment",
                reader.namespace
            ),
        ));
    }
    Ok(Json(TaskDeploymentsView {
        namespace: reader.namespace,
        task,
        active: active.as_ref().map(DeploymentView::from),
        versions: page.items.iter().map(DeploymentView::from).collect(),
    }))
}

/// The optional body of activate and deactivate.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ChangeBody {
    /// Why (kept with the audit event), at most 1000 characters.
    #[serde(default)]
    pub note: Option<String>,
}

/// Make a version the task's active one (a rollback when it is older); the version active
/// before becomes superseded. Activating the active version changes nothing. The version's
/// settings are checked against the operator's policy as it is now (a ceiling lowered, a secret
/// or origin revoked since it was deployed refuses it, 422 `policy_violation`); a namespace no
/// policy covers any more cannot activate (403).
#[utoipa::path(
    post, path = "/v1/deployments/{task}/versions/{version}/activate", tag = "deployments",
    params(
        ("task" = String, Path, description = "Task name"),
        ("version" = i64, Path, description = "Version, 1 or more"),
    ),
    request_body(content = Option<ChangeBody>, description = "An optional note"),
    responses(
        (status = 200, description = "The version, now active", body = DeploymentView),
        (status = 404, description = "No such version (`deployment_not_found`)", body = ErrorBody),
        (status = 409, description = "Deployments are not enabled (`deployments_disabled`)", body = ErrorBody),
        (status = 422, description = "Bad task, version or note, or the version's settings are over the policy as it is now (`policy_violation` with `violations`)", body = ErrorBody),
        ForbiddenErrors,
        BodyErrors,
        V1Errors,
    ),
    security(("bearer" = []))
)]
pub async fn activate_version(
    deployer: Deployer,
    State(state): State<ApiState>,
    Path((task, version)): Path<(String, String)>,
    OptionalJsonBody(body): OptionalJsonBody<ChangeBody>,
) -> Result<Json<DeploymentView>, ApiError> {
    let deploy = api(&state)?;
    let policy = policy(deploy)?;
    onestep_core::deployments::check_name("task", &task)?;
    let version: i64 = version
        .trim()
        .parse()
        .map_err(|_| ApiError::invalid(format!("version must be an integer (got {version:?})")))?;
    onestep_core::deployments::check_version(version)?;
    check_activation(deploy, policy, &deployer.namespace, &task, version).await?;
    let max_tasks = ceiling_of(policy, &deployer.namespace)?.max_tasks;
    let d = deploy
        .deployments
        .activate(
            &deployer.namespace,
            &task,
            version,
            &deployer.actor,
            body.note.as_deref(),
            Some(max_tasks),
        )
        .await?;
    Ok(Json(DeploymentView::from(&d)))
}

/// An activation serves an old version's settings again, so they must be within the operator's
/// policy **as it is now** (an operator who lowered a ceiling, revoked a secret or an origin, or
/// removed the namespace's policy must not see a rollback restore it): the namespace must still
/// be covered (403 `no_policy`) and the version's settings and component within its ceiling (422
/// `policy_violation` naming the version). A version that is already active changes nothing and
/// is not checked. Versions never change once written, so the check cannot go stale before the
/// store's activation.
async fn check_activation(
    deploy: &DeployApi,
    policy: &DeploymentPolicy,
    namespace: &str,
    task: &str,
    version: i64,
) -> Result<(), ApiError> {
    ceiling_of(policy, namespace)?;
    let Some(target) = deploy.deployments.get(namespace, task, version).await? else {
        return Err(DeploymentError::VersionNotFound {
            namespace: namespace.to_owned(),
            task: task.to_owned(),
            version,
        }
        .into());
    };
    if target.state == onestep_core::deployments::DeploymentState::Active {
        return Ok(());
    }
    let settings = target.settings.typed()?;
    let size = match deploy.components.stat(&target.digest).await? {
        Some(stat) => stat.size,
        None => {
            return Err(DeploymentError::UnknownComponent {
                digest: target.digest,
            }
            .into());
        }
    };
    policy
        .check(namespace, &settings, size)
        .map_err(|v| policy_refusal_of(&format!("version {version} of task {task:?}"), &v))
}

/// Stop the task's active version: the task then serves no new claims until a deploy or an
/// activation.
#[utoipa::path(
    post, path = "/v1/deployments/{task}/deactivate", tag = "deployments",
    params(("task" = String, Path, description = "Task name")),
    request_body(content = Option<ChangeBody>, description = "An optional note"),
    responses(
        (status = 200, description = "The version that stopped (now `inactive`)", body = DeploymentView),
        (status = 409, description = "No active version (`no_active_deployment`), or deployments are not enabled (`deployments_disabled`)", body = ErrorBody),
        (status = 422, description = "Bad task or note", body = ErrorBody),
        ForbiddenErrors,
        BodyErrors,
        V1Errors,
    ),
    security(("bearer" = []))
)]
pub async fn deactivate_task(
    deployer: Deployer,
    State(state): State<ApiState>,
    Path(task): Path<String>,
    OptionalJsonBody(body): OptionalJsonBody<ChangeBody>,
) -> Result<Json<DeploymentView>, ApiError> {
    let deploy = api(&state)?;
    policy(deploy)?;
    onestep_core::deployments::check_name("task", &task)?;
    let d = deploy
        .deployments
        .deactivate(
            &deployer.namespace,
            &task,
            &deployer.actor,
            body.note.as_deref(),
        )
        .await?;
    Ok(Json(DeploymentView::from(&d)))
}

/// One audit event.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DeploymentEventView {
    /// The store revision of the change.
    pub revision: i64,
    /// The namespace.
    pub namespace: String,
    /// The task.
    pub task: String,
    /// `deploy`, `activate` or `deactivate`.
    pub action: String,
    /// The version acted on.
    pub version: i64,
    /// Its digest.
    pub digest: String,
    /// The version that served before (`null`: none).
    pub from_version: Option<i64>,
    /// Its digest.
    pub from_digest: Option<String>,
    /// Who.
    pub actor: String,
    /// When.
    pub at: DateTime<Utc>,
    /// The actor's note.
    pub note: Option<String>,
}

impl From<&DeploymentEvent> for DeploymentEventView {
    fn from(e: &DeploymentEvent) -> Self {
        DeploymentEventView {
            revision: e.revision,
            namespace: e.namespace.clone(),
            task: e.task.clone(),
            action: e.action.as_str().to_owned(),
            version: e.version,
            digest: e.digest.to_string(),
            from_version: e.from_version,
            from_digest: e.from_digest.as_ref().map(ToString::to_string),
            actor: e.actor.clone(),
            at: e.at,
            note: e.note.clone(),
        }
    }
}

/// A page of audit events, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DeploymentEventPageView {
    /// The events, newest first.
    pub items: Vec<DeploymentEventView>,
    /// Pass as `before` for the next page; `null` on the last.
    pub next_before: Option<i64>,
}

/// The namespace's deployment audit: who deployed, activated or deactivated what, when, from
/// which version to which, newest first.
#[utoipa::path(
    get, path = "/v1/deployments/events", tag = "deployments",
    params(HistoryParams),
    responses(
        (status = 200, description = "A page of events", body = DeploymentEventPageView),
        (status = 409, description = "This server has no deployments API", body = ErrorBody),
        (status = 422, description = "Bad task, before or limit", body = ErrorBody),
        V1Errors,
    ),
    security(("bearer" = []))
)]
pub async fn list_deployment_events(
    reader: DeployReader,
    State(state): State<ApiState>,
    query: Result<Query<HistoryParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Json<DeploymentEventPageView>, ApiError> {
    let Query(params) =
        query.map_err(|_| ApiError::invalid("the query string could not be parsed"))?;
    let (before, limit) = page_args(&params)?;
    let deploy = api(&state)?;
    let page = deploy
        .deployments
        .audit(&reader.namespace, params.task.as_deref(), before, limit)
        .await?;
    Ok(Json(DeploymentEventPageView {
        items: page.items.iter().map(DeploymentEventView::from).collect(),
        next_before: page.next_before,
    }))
}
