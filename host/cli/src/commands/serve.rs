//! `onestep serve FILE`: the HTTP API from the `api:` section of a YAML app file, until SIGINT or
//! SIGTERM (graceful: in-flight requests finish, then the pool is closed).
//!
//! Wiring: config → `api.connector` (a `mysql` or `postgres` resource) → a [`Store`] (tables, limits,
//! `auto_create`, pool bounds; it is both the store and the readiness probe) → [`ApiState`]
//! (tenants from `tokens_file`/`tokens_env`, or the one `namespace`; `allowed_tasks`;
//! `max_body_bytes`) → [`onestep_api::router`] → [`onestep_api::serve`] (connection cap and
//! timeouts, docs/security.md#api-connections).

use std::net::SocketAddr;
use std::path::PathBuf;

use crate::wiring::store::{Store, StoreOptions};
use onestep_api::{ApiState, Role, ServerLimits, Tenancy, TokenTable};
use onestep_config::{ApiAuth, ApiConfig, AppConfig, LoadOptions, LogFormat};
use onestep_core::names::TableNames;

use crate::logging;

/// Arguments of `onestep serve`.
#[derive(Debug, clap::Args)]
pub(crate) struct ServeArgs {
    /// The YAML app file with an `api:` section.
    pub(crate) file: PathBuf,
    /// Listen address, overriding `api.listen` (e.g. `127.0.0.1:0` for a free port).
    #[arg(long)]
    pub(crate) listen: Option<SocketAddr>,
    /// Dotenv file (overrides `app.env_file` and `.env` beside the YAML).
    #[arg(long)]
    pub(crate) env_file: Option<PathBuf>,
    /// Log level (`DEBUG`, `INFO`, `WARNING`, `ERROR`); default from `app.logging` or INFO.
    #[arg(long)]
    pub(crate) log_level: Option<String>,
}

/// Runs the command; returns the process exit code (0 after a clean shutdown, 1 when the
/// database or the listener fails, 2 for configuration errors).
pub(crate) async fn run(args: ServeArgs) -> u8 {
    let opts = LoadOptions {
        env_file: args.env_file.clone(),
        check_files: false,
        ..LoadOptions::default()
    };
    let config = match onestep_config::load(&args.file, &opts) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("onestep serve: {e}");
            return 2;
        }
    };
    let level = args
        .log_level
        .clone()
        .or_else(|| config.logging.level.map(|l| l.as_str().to_owned()))
        .unwrap_or_else(|| "INFO".into());
    let tracing = match logging::init_with_traces(
        &level,
        config.logging.format == Some(LogFormat::Json),
        &config,
    ) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("onestep serve: {e}");
            return 2;
        }
    };
    let code = serve(&config, args.listen).await;
    if let Some(t) = tracing {
        t.shutdown().await;
    }
    code
}

/// Serves the loaded `config` until a signal (see [`run`]).
async fn serve(config: &AppConfig, listen: Option<SocketAddr>) -> u8 {
    for w in &config.warnings {
        tracing::warn!("{w}");
    }
    let (backend, state, listen) = match prepare(config, listen).await {
        Ok(v) => v,
        Err((code, msg)) => {
            tracing::error!("{msg}");
            eprintln!("onestep serve: {msg}");
            return code;
        }
    };
    let listener = match tokio::net::TcpListener::bind(listen).await {
        Ok(l) => l,
        Err(e) => {
            let msg = format!("cannot listen on {listen}: {e}");
            tracing::error!("{msg}");
            eprintln!("onestep serve: {msg}");
            let _ = backend.close().await;
            return 1;
        }
    };
    let local = listener.local_addr().map_or(listen, |a| a);
    tracing::info!(address = %local, "onestep API listening on http://{local}");
    let stop_sender = tokio_util::sync::CancellationToken::new();
    let sender = match start_sender(
        &backend,
        config,
        state.webhook_metrics(),
        stop_sender.clone(),
    ) {
        Ok(s) => s,
        Err(msg) => {
            tracing::error!("{msg}");
            eprintln!("onestep serve: {msg}");
            let _ = backend.close().await;
            return 1;
        }
    };
    let waits = state.waits().clone();
    serve_on(listener, state, shutdown_signal()).await;
    // The listening session unregisters (docs/postgres.md#change-notifications); a stuck
    // database does not hold the exit (a registration left behind is tidied by the next).
    let _ = tokio::time::timeout(std::time::Duration::from_secs(3), waits.stopped()).await;
    stop_sender.cancel();
    if let Some(s) = sender {
        let _ = s.await;
    }
    let _ = backend.close().await;
    tracing::info!("onestep API stopped");
    0
}

/// Starts the completion-webhook sender (docs/semantics.md#completion-webhooks) when
/// `api.callbacks` is configured and the backend keeps an outbox; it runs until `stop`.
fn start_sender(
    backend: &Store,
    config: &AppConfig,
    metrics: std::sync::Arc<onestep_api::callbacks::metrics::WebhookMetrics>,
    stop: tokio_util::sync::CancellationToken,
) -> Result<Option<tokio::task::JoinHandle<()>>, String> {
    let Some(settings) = config
        .api
        .as_ref()
        .and_then(|a| a.settings.callbacks.clone())
    else {
        return Ok(None);
    };
    let Some(store) = backend.callbacks() else {
        tracing::warn!(
            backend = backend.kind(),
            "api.callbacks is configured but this backend keeps no webhook outbox: submits \
             with a callback are refused"
        );
        return Ok(None);
    };
    let sender =
        onestep_api::callbacks::CallbackSender::new(store, backend.executions(), settings)?
            .with_metrics(metrics);
    Ok(Some(tokio::spawn(sender.run(stop))))
}

type Prepared = (Store, ApiState, SocketAddr);

/// Builds the backend and the state from the config; errors are `(exit code, message)`.
async fn prepare(config: &AppConfig, listen: Option<SocketAddr>) -> Result<Prepared, (u8, String)> {
    let usage = |m: String| (2u8, m);
    let api = config.api.as_ref().ok_or_else(|| {
        usage(
            "the app file has no `api:` section; add one naming the connector and the \
                 namespace clients use, e.g. `api: {connector: db, namespace: default}` \
                 (docs/configuration.md#api-for-onestep-serve)"
                .into(),
        )
    })?;
    let tenancy = file_tenancy(config, api).map_err(usage)?;
    let (backend, state) = open_api(config, api, tenancy).await?;
    Ok((backend, state, listen.unwrap_or(api.listen)))
}

/// Warns when `api.max_connections` (plus the database pool's and the process's own descriptors)
/// exceeds the open-files limit: past it, accepting fails with EMFILE instead of queueing
/// (docs/security.md#api-connections).
fn warn_if_descriptors_short(max_connections: usize) {
    #[cfg(unix)]
    {
        use rustix::process::{Resource, getrlimit};
        const SPARE: u64 = 256;
        if let Some(soft) = getrlimit(Resource::Nofile).current {
            let wanted = max_connections as u64 + SPARE;
            if wanted > soft {
                tracing::warn!(
                    max_connections,
                    open_files_limit = soft,
                    "api.max_connections plus {SPARE} spare descriptors exceeds the open-files limit \
                     (RLIMIT_NOFILE); raise the limit (ulimit -n) or lower api.max_connections"
                );
            }
        }
    }
}

/// Serves `state`'s router on `listener` with the default connection limits until `shutdown`
/// resolves (in-flight requests finish); `onestep serve` and `onestep dev`.
pub(crate) async fn serve_on(
    listener: tokio::net::TcpListener,
    state: ApiState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let limits = ServerLimits {
        max_connections: usize::try_from(state.max_connections()).unwrap_or(usize::MAX),
        ..ServerLimits::default()
    };
    super::run::raise_open_files_limit();
    warn_if_descriptors_short(limits.max_connections);
    tracing::info!(
        max_connections = limits.max_connections,
        header_read_timeout_s = limits.header_read_timeout.as_secs(),
        "connection limits (docs/security.md#api-connections)"
    );
    // Bounded waits (`?wait=S`) answer at once when shutdown starts instead of holding the
    // drain (docs/http-api.md#waiting).
    let waits = state.waits().clone();
    // The poller, and the listening session with `api.notify: listen`, before the first caller.
    waits.start();
    let shutdown = async move {
        shutdown.await;
        waits.close();
    };
    onestep_api::serve(listener, onestep_api::router(state), limits, shutdown).await;
}

/// The tenancy the `api:` section configures: its tokens, or its one namespace.
fn file_tenancy(config: &AppConfig, api: &ApiConfig) -> Result<Tenancy, String> {
    Ok(match &api.auth {
        ApiAuth::Namespace(ns) => {
            tracing::warn!(
                namespace = %ns,
                "no API tokens configured: every request is served in namespace '{ns}' without \
                 authentication (local use only; set api.tokens_file or api.tokens_env)"
            );
            Tenancy::Single(ns.clone())
        }
        ApiAuth::TokensFile(_) | ApiAuth::TokensEnv(_) => {
            let tokens = api
                .load_tokens(&config.env)
                .map_err(|e| e.to_string())?
                .unwrap_or_default();
            let table = TokenTable::from_entries(tokens.iter().map(|t| {
                let role = t
                    .role
                    .as_deref()
                    .and_then(Role::parse)
                    .unwrap_or(Role::Default);
                (t.token.expose(), t.namespace.as_str(), role)
            }))
            .map_err(|e| format!("api tokens: {e}"))?;
            if table.short_tokens() > 0 {
                tracing::warn!(
                    count = table.short_tokens(),
                    "some API tokens are shorter than {} characters and may be guessable",
                    onestep_api::auth::MIN_TOKEN_CHARS
                );
            }
            tracing::info!(
                tokens = table.len(),
                namespaces = ?table.namespaces(),
                "bearer-token authentication enabled"
            );
            Tenancy::Tokens(table)
        }
    })
}

/// Opens the store of the `api:` section `api` (its connector, tables, limits, pool bounds) and
/// the API state on it with `tenancy`; errors are `(exit code, message)`.
pub(crate) async fn open_api(
    config: &AppConfig,
    api: &ApiConfig,
    tenancy: Tenancy,
) -> Result<(Store, ApiState), (u8, String)> {
    let usage = |m: String| (2u8, m);
    let connector = config.connectors.get(&api.connector).ok_or_else(|| {
        usage(format!(
            "api.connector: unknown connector resource '{}'",
            api.connector
        ))
    })?;
    let mut opts = StoreOptions::new(connector.dsn.expose());
    opts.kind = connector.kind;
    opts.tables = TableNames::new(api.table.clone(), api.attempts_table.clone())
        .map_err(|e| usage(format!("api: {e}")))?;
    opts.auto_create = api.auto_create;
    opts.limits = api.settings.limits;
    opts.traces = onestep_telemetry::enabled();
    if let Some(max) = connector.engine_options.max_connections {
        opts.pool_max = max as usize;
    }
    if let Some(min) = connector.engine_options.min_connections {
        opts.pool_min = min as usize;
    }
    let backend = Store::open(&opts).await.map_err(|e| {
        let code = if matches!(e, onestep_core::ExecutionError::InvalidArgument(_)) {
            2
        } else {
            1
        };
        (code, format!("cannot open the execution store: {e}"))
    })?;
    if api.settings.allowed_tasks.is_empty() {
        tracing::warn!("api.allowed_tasks is empty: clients may submit any task name");
    }
    let state = ApiState::new(
        backend.executions(),
        backend.readiness(),
        tenancy,
        api.settings.clone(),
    )
    .map_err(|e| usage(format!("api: {e}")))?;
    // How waits and streams learn of changes (docs/http-api.md#waiting).
    let state = with_changes(state, &backend, api).map_err(usage)?;
    // The dashboard's overview figures.
    let mut state = state.with_insights(backend.insights());
    // Durable steps (docs/steps.md): `GET /v1/executions/{id}/steps` and the dashboard.
    state = state.with_steps(backend.steps());
    // Completion webhooks (docs/semantics.md#completion-webhooks): the outbox of the store.
    if let Some(callbacks) = backend.callbacks() {
        state = state.with_callbacks(callbacks);
    }
    // The deployments API (docs/deployments.md): the store's components and deployments, the
    // load check with the WebAssembly runtime, the operator's policy from `deployments:`
    // (absent: every change is refused).
    let policy = config.deployments.as_ref().map(|d| d.policy.clone());
    if policy.is_none() {
        tracing::info!(
            "no deployments: section: the deployments API answers reads and refuses changes"
        );
    }
    state = state.with_deployments(onestep_api::deploy::DeployApi {
        components: backend.components(),
        deployments: backend.deployments(),
        vetter: std::sync::Arc::new(crate::wiring::vet::WasmVetter::new(
            crate::wiring::wasm_cache_dir(),
        )),
        policy,
    });
    Ok((backend, state))
}

/// `api.notify` (docs/http-api.md#waiting): with `listen` (the default where the backend has
/// pushed notifications: PostgreSQL with the notify trigger), the waits and streams are woken
/// by the backend's listening session; with `poll`, by the poll alone. `listen` on a backend
/// without pushed notifications is refused (the configuration refuses it on MySQL/MariaDB and
/// SQLite already; here: PostgreSQL tables without the trigger).
fn with_changes(state: ApiState, backend: &Store, api: &ApiConfig) -> Result<ApiState, String> {
    use onestep_core::api_settings::ChangeNotify;
    let listener = backend.changes();
    let mode = api
        .settings
        .notify
        .unwrap_or_else(|| ChangeNotify::default_for(listener.is_some()));
    match (mode, listener) {
        (ChangeNotify::Listen, Some(listener)) => {
            tracing::info!(
                notify = "listen",
                poll_ms = api.settings.poll_ms.unwrap_or(1000),
                "waits and streams are woken by PostgreSQL LISTEN/NOTIFY, polled as a safety net"
            );
            Ok(state.with_changes(listener))
        }
        (ChangeNotify::Listen, None) => Err(match backend.upgrade_command() {
            Some(command) if backend.kind() == "postgres" => format!(
                "api.notify: listen, but the execution table has no notify trigger (created by \
                 the reference or an older onestep?): add it online with `{command}`, or set \
                 api.notify: poll (docs/postgres.md#change-notifications)"
            ),
            _ => format!(
                "api.notify: listen needs PostgreSQL with the notify trigger; this {} store has \
                 no pushed notifications: set api.notify: poll (docs/http-api.md#waiting)",
                backend.kind()
            ),
        }),
        (ChangeNotify::Poll, _) => {
            tracing::info!(
                notify = "poll",
                poll_ms = api.settings.poll_ms.unwrap_or(100),
                "waits and streams are woken by polling"
            );
            Ok(state)
        }
    }
}

/// Resolves on SIGINT (Ctrl-C) or SIGTERM.
async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!("SIGINT received: finishing in-flight requests"),
        () = term => tracing::info!("SIGTERM received: finishing in-flight requests"),
    }
}
