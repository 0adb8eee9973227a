//! `onestep run FILE`: runs the worker declared in a YAML app file until SIGINT/SIGTERM
//! (docs/cli.md#onestep-run), then drains (docs/semantics.md#shutdown-and-drain).

use std::path::PathBuf;
use std::sync::Arc;

use onestep_config::LogFormat;
use onestep_worker::{Worker, WorkerSettings};
use tokio_util::sync::CancellationToken;

use super::common::{EnvArgs, load_with};
use crate::logging;
use crate::metrics::{self, Metrics};
use crate::wiring::{build_runtime, open_backends, task_bindings};

/// Log formats of `--log-format`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum LogFormatArg {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// Arguments of `onestep run`.
#[derive(Debug, clap::Args)]
pub(crate) struct RunArgs {
    /// The YAML app file.
    pub(crate) target: PathBuf,
    /// Log level: DEBUG, INFO, WARNING, ERROR, CRITICAL (default: the file's, else INFO).
    #[arg(long, value_name = "LEVEL")]
    pub(crate) log_level: Option<String>,
    /// Log format (default: the file's, else text).
    #[arg(long, value_enum)]
    pub(crate) log_format: Option<LogFormatArg>,
    /// Serve Prometheus `/metrics`, `/healthz` and `/readyz` on HOST:PORT (`:PORT`: every
    /// interface); overrides `app.metrics_addr`.
    #[arg(long, value_name = "HOST:PORT", value_parser = onestep_config::build::parse_metrics_addr)]
    pub(crate) metrics_addr: Option<std::net::SocketAddr>,
    /// Do not reload components while running: no file watching and no SIGHUP reload
    /// (docs/cli.md#redeploying-a-component).
    #[arg(long)]
    pub(crate) no_reload: bool,
    /// Seconds between checks of the component files (a change is loaded once it has been
    /// stable for one check).
    #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
    pub(crate) reload_interval: f64,
    #[command(flatten)]
    pub(crate) env: EnvArgs,
}

/// Exit codes: 0 after a clean, signal-initiated shutdown; 1 the app failed while starting or
/// running (`onestep: <target> failed while running: <reason>`); 2 load/validation error. A task
/// whose component cannot be loaded (or is missing) does not stop the start: it is quarantined
/// (docs/security.md#one-tenants-bad-deploy).
pub(crate) async fn run(args: RunArgs) -> u8 {
    let Some(reload_interval) = reload_interval(args.reload_interval) else {
        eprintln!("onestep: --reload-interval must be a number of seconds, at least 0.1");
        return 2;
    };
    // A missing component file quarantines its task instead (docs/security.md#one-tenants-bad-deploy).
    let cfg = match load_with(&args.target, false, &args.env, false) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let level = args
        .log_level
        .clone()
        .or_else(|| cfg.logging.level.map(|l| l.as_str().to_owned()))
        .unwrap_or_else(|| "INFO".to_owned());
    let json = match args.log_format {
        Some(LogFormatArg::Json) => true,
        Some(LogFormatArg::Text) => false,
        None => cfg.logging.format == Some(LogFormat::Json),
    };
    let tracing = match logging::init_with_traces(&level, json, &cfg) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("onestep: {e}");
            return 2;
        }
    };
    let code = run_loaded(&args, cfg, reload_interval).await;
    // Export the spans still buffered (the last attempts' and the drain's).
    if let Some(t) = tracing {
        t.shutdown().await;
    }
    code
}

/// The `--reload-interval` of `run` and `dev`: at least 0.1 s (`None` otherwise).
pub(crate) fn reload_interval(secs: f64) -> Option<std::time::Duration> {
    std::time::Duration::try_from_secs_f64(secs)
        .ok()
        .filter(|d| *d >= std::time::Duration::from_millis(100))
}

/// Runs the loaded worker (see [`run`]).
async fn run_loaded(
    args: &RunArgs,
    cfg: onestep_config::AppConfig,
    reload_interval: std::time::Duration,
) -> u8 {
    raise_open_files_limit();
    for w in &cfg.warnings {
        tracing::warn!("{w}");
    }
    let shutdown = CancellationToken::new();
    spawn_signal_listener(shutdown.clone());
    let opts = WorkerOptions {
        metrics_addr: args.metrics_addr,
        reload: (!args.no_reload).then_some(reload_interval),
    };
    match run_worker(&cfg, &opts, shutdown).await {
        Ok(()) => 0,
        Err(e) => {
            eprintln!(
                "onestep: {} failed while running: {e:#}",
                args.target.display()
            );
            1
        }
    }
}

/// How [`run_worker`] runs besides the file: `onestep run`'s flags (and `onestep dev`'s).
pub(crate) struct WorkerOptions {
    /// `--metrics-addr` (else the file's `app.metrics_addr`).
    pub(crate) metrics_addr: Option<std::net::SocketAddr>,
    /// The period of the component-file watch; `None`: no reload (`--no-reload`).
    pub(crate) reload: Option<std::time::Duration>,
}

/// Runs the worker of `cfg` until `shutdown` is cancelled, then drains: metrics and health
/// first, the backends, the runtime, the task bindings, the reload watch, the worker; the
/// backends are closed on the way out. `onestep run` and `onestep dev`.
pub(crate) async fn run_worker(
    cfg: &onestep_config::AppConfig,
    opts: &WorkerOptions,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    // Metrics and health first, so that /healthz and /readyz answer while the sources open
    // (docs/observability.md).
    let metrics = Arc::new(Metrics::new(
        &cfg.name,
        cfg.tasks.iter().filter_map(|t| {
            let source = cfg.sources.get(&t.source)?;
            Some((source.task_name.clone(), source.lease_duration))
        }),
        shutdown.clone(),
    ));
    let stop_metrics = CancellationToken::new();
    let _stop_metrics_on_return = stop_metrics.clone().drop_guard();
    if let Some(addr) = opts.metrics_addr.or(cfg.metrics_addr) {
        let bound = metrics::serve(addr, Arc::clone(&metrics), stop_metrics.clone()).await?;
        tracing::info!(addr = %bound, "metrics server listening on {bound}");
    }

    let mut backends = open_backends(cfg).await?;
    let followed = crate::wiring::follow::open_followed(cfg, &mut backends).await?;
    let runtime = build_runtime(cfg)?;
    let (bindings, reload_targets) = task_bindings(cfg, &backends, &runtime, Some(&metrics))?;
    if let Some(interval) = opts.reload {
        crate::wiring::reload::spawn(runtime.clone(), reload_targets, interval, shutdown.clone());
    }
    metrics.set_ready();
    let settings = WorkerSettings {
        shutdown_timeout: cfg.shutdown_timeout,
        ..WorkerSettings::default()
    };
    let mut worker = Worker::new(bindings, settings)?
        .with_observer(Arc::clone(&metrics) as Arc<dyn onestep_worker::WorkerObserver>);
    // Sources with `deployed:` follow the deployments (docs/deployments.md#workers-follow-deployments).
    let stop_following = CancellationToken::new();
    let _stop_following_on_return = stop_following.clone().drop_guard();
    if !followed.is_empty() {
        let ctx = crate::wiring::follow::FollowContext {
            runtime: runtime.clone(),
            tasks: worker.task_set(),
            secrets: cfg.deployments.clone(),
            yaml_tasks: Arc::new(crate::wiring::follow::FollowContext::yaml_tasks_of(cfg)),
            metrics: Some(Arc::clone(&metrics)),
        };
        crate::wiring::follow::spawn(ctx, followed, stop_following.clone());
    }
    for (task, store) in crate::wiring::rate_limit_stores(cfg, &backends)? {
        worker = worker.with_rate_limits(&task, store);
    }
    tracing::info!(app = %cfg.name, tasks = cfg.tasks.len(), "onestep worker running");
    let outcome = worker.run(shutdown).await;
    stop_following.cancel();
    for backend in backends.values() {
        if let Err(e) = backend.close().await {
            tracing::warn!(error = %e, "closing a backend failed");
        }
    }
    Ok(outcome?)
}

/// Raises this process's soft limit on open files (`RLIMIT_NOFILE`) to its hard limit and logs
/// both values: every attempt may hold up to its sandbox's `max_open_handles` files, so the
/// worker uses all the descriptors the operator allows (docs/security.md#open-files-and-handles).
/// A refusal is logged and the worker runs on with the old limit.
pub(crate) fn raise_open_files_limit() {
    #[cfg(unix)]
    {
        use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
        let text = |v: Option<u64>| v.map_or_else(|| "unlimited".to_owned(), |n| n.to_string());
        let old = getrlimit(Resource::Nofile);
        let (soft, hard) = (text(old.current), text(old.maximum));
        if old.current == old.maximum {
            tracing::info!(soft = %soft, hard = %hard, "open-files limit already at the hard limit");
            return;
        }
        let new = Rlimit {
            current: old.maximum,
            maximum: old.maximum,
        };
        match setrlimit(Resource::Nofile, new) {
            Ok(()) => tracing::info!(
                old_soft = %soft, soft = %hard, hard = %hard,
                "raised the open-files limit (RLIMIT_NOFILE) to the hard limit"
            ),
            Err(e) => tracing::warn!(
                soft = %soft, hard = %hard, error = %e,
                "cannot raise the open-files limit (RLIMIT_NOFILE); keeping the soft limit"
            ),
        }
    }
}

/// Cancels `shutdown` on the first SIGINT or SIGTERM. On Unix both handlers are installed
/// before it returns, so a signal that arrives right after (e.g. once `onestep dev` printed its
/// start line) drains instead of killing the process.
pub(crate) fn spawn_signal_listener(shutdown: CancellationToken) {
    #[cfg(unix)]
    let streams = {
        use tokio::signal::unix::{SignalKind, signal};
        (
            signal(SignalKind::interrupt()).ok(),
            signal(SignalKind::terminate()).ok(),
        )
    };
    tokio::spawn(async move {
        #[cfg(unix)]
        {
            let (int, term) = streams;
            let next = |s: Option<tokio::signal::unix::Signal>| async move {
                match s {
                    Some(mut s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = next(int) => {}
                () = next(term) => {}
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
        tracing::info!("shutdown signal received: draining");
        shutdown.cancel();
    });
}
