//! `onestep dev [APP.yaml]` (docs/cli.md#onestep-dev): the HTTP API, the dashboard and the
//! workers of one app file in one process, for a developer's machine, until SIGINT/SIGTERM
//! (then the API stops and the workers drain, exit 0).
//!
//! What it changes from `onestep serve` + `onestep run` on the same file, in code (the file is
//! never edited):
//! - **Database**: `--dsn`, else `ONESTEP_DSN` (process environment or the dotenv file), else an
//!   embedded SQLite file `.onestep/dev.db` beside the app file. The file's own `dsn:` values
//!   are not used: every connector gets this one DSN, so `dev` never touches the database the
//!   file names for production unless asked to. Tables are created as `onestep migrate` does
//!   (`auto_create` on for every source and the API).
//! - **Auth**: a random local token, made on the first start and kept in `.onestep/dev-token`
//!   (mode 0600), maps to the API's namespace with the `operate` role; the file's
//!   `tokens_file`/`tokens_env` are not used. A request without it gets 401.
//! - **API**: the file's `api:` section when there is one, else one built from the first task's
//!   source (its connector, tables and namespace; the app's tasks allowed) listening on
//!   `127.0.0.1:8080`; `--listen` overrides either.
//! - **Reload**: each task's component file is watched as `onestep run` does
//!   (host/cli/src/wiring/reload.rs): after a rebuild, new executions run the new build.
//!
//! `.onestep/` gets a `.gitignore` holding `*`, so nothing in it is committed.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use onestep_api::{Role, Tenancy, TokenTable};
use onestep_config::{ApiAuth, ApiConfig, AppConfig, LoadOptions, LogFormat, Secret};
use tokio_util::sync::CancellationToken;

use super::common::EnvArgs;
use super::run::{
    LogFormatArg, WorkerOptions, raise_open_files_limit, reload_interval, run_worker,
    spawn_signal_listener,
};
use super::serve::{open_api, serve_on};
use crate::logging;
use crate::wiring::store::kind_of_dsn;

/// The app file `onestep dev` reads when none is given: what `onestep new handler` writes.
const DEFAULT_FILE: &str = "handler.yaml";
/// The directory beside the app file that holds the dev database and token.
const DEV_DIR: &str = ".onestep";
/// The token file in [`DEV_DIR`].
const TOKEN_FILE: &str = "dev-token";

/// Arguments of `onestep dev`.
#[derive(Debug, clap::Args)]
pub(crate) struct DevArgs {
    /// The YAML app file.
    #[arg(default_value = DEFAULT_FILE)]
    pub(crate) file: PathBuf,
    /// The execution database for every connector of the file (default: `ONESTEP_DSN`, else
    /// `sqlite://<dir>/.onestep/dev.db` beside the file; the file's own `dsn:` is not used).
    #[arg(long, value_name = "DSN")]
    pub(crate) dsn: Option<String>,
    /// Listen address of the API and dashboard, overriding `api.listen` (default
    /// 127.0.0.1:8080; `127.0.0.1:0` for a free port).
    #[arg(long, value_name = "ADDR")]
    pub(crate) listen: Option<SocketAddr>,
    /// Log level: DEBUG, INFO, WARNING, ERROR, CRITICAL (default: the file's, else INFO).
    #[arg(long, value_name = "LEVEL")]
    pub(crate) log_level: Option<String>,
    /// Log format (default: the file's, else text).
    #[arg(long, value_enum)]
    pub(crate) log_format: Option<LogFormatArg>,
    /// Do not reload components when their files change.
    #[arg(long)]
    pub(crate) no_reload: bool,
    /// Seconds between checks of the component files.
    #[arg(long, default_value_t = 1.0, value_name = "SECONDS")]
    pub(crate) reload_interval: f64,
    #[command(flatten)]
    pub(crate) env: EnvArgs,
}

/// Where the DSN `onestep dev` uses came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DsnOrigin {
    Flag,
    Env,
    Default,
}

/// The DSN for `dev`: `flag` > `ONESTEP_DSN` (`env`) > the embedded default in `dev_dir`.
fn resolve_dsn(flag: Option<&str>, env: Option<String>, dev_dir: &Path) -> (String, DsnOrigin) {
    let given = |v: &str| !v.trim().is_empty();
    if let Some(dsn) = flag.filter(|d| given(d)) {
        return (dsn.trim().to_owned(), DsnOrigin::Flag);
    }
    if let Some(dsn) = env.filter(|d| given(d)) {
        return (dsn.trim().to_owned(), DsnOrigin::Env);
    }
    (
        format!("sqlite://{}", dev_dir.join("dev.db").display()),
        DsnOrigin::Default,
    )
}

/// `dsn` with its password (if any) replaced by `<redacted>`, for the start line.
fn shown_dsn(dsn: &str) -> String {
    let secrets: Vec<String> = onestep_core::store::secrets_of(dsn)
        .into_iter()
        .filter(|s| s != dsn && !dsn.contains(&format!("://{s}@")))
        .collect();
    onestep_core::store::redact(dsn, &secrets)
}

/// Points every connector of `cfg` at `dsn` (its kind from the scheme), turns `auto_create` on
/// everywhere, and returns the API section to serve: the file's, or one built from the first
/// task's source. Errors are usage errors (exit 2).
fn dev_config(cfg: &mut AppConfig, dsn: &str) -> Result<ApiConfig, String> {
    let kind = kind_of_dsn(dsn);
    for connector in cfg.connectors.values_mut() {
        connector.dsn = Secret::new(dsn);
        connector.kind = kind;
    }
    for source in cfg.sources.values_mut() {
        source.kind = kind;
        source.auto_create = true;
    }
    let mut api = match cfg.api.clone() {
        Some(api) => api,
        None => default_api(cfg)?,
    };
    api.auto_create = true;
    cfg.api = Some(api.clone());
    Ok(api)
}

/// The API of an app file without an `api:` section: the first task's source's connector,
/// tables and namespace; the app's task names allowed; the default listen address.
fn default_api(cfg: &AppConfig) -> Result<ApiConfig, String> {
    let source = cfg
        .tasks
        .first()
        .and_then(|t| cfg.sources.get(&t.source))
        .ok_or_else(|| {
            "the app file has no task: onestep dev runs the file's tasks and serves their \
             executions (docs/configuration.md#document-shape)"
                .to_owned()
        })?;
    let listen = onestep_config::model::DEFAULT_API_LISTEN
        .parse()
        .map_err(|e| format!("the default listen address: {e}"))?;
    let settings = onestep_core::ApiSettings {
        allowed_tasks: cfg
            .tasks
            .iter()
            .filter_map(|t| cfg.sources.get(&t.source))
            .map(|s| s.task_name.clone())
            .collect(),
        ..onestep_core::ApiSettings::default()
    };
    Ok(ApiConfig {
        listen,
        connector: source.connector.clone(),
        table: source.table.clone(),
        attempts_table: source.attempts_table.clone(),
        auto_create: true,
        auth: ApiAuth::Namespace(source.namespace.clone()),
        settings,
    })
}

/// The namespace the dev token grants: the `api:` section's one, else the first task's
/// source's (an `api:` section with tokens names no single namespace).
fn dev_namespace(cfg: &AppConfig, api: &ApiConfig) -> Option<String> {
    if let ApiAuth::Namespace(ns) = &api.auth {
        return Some(ns.clone());
    }
    cfg.tasks
        .first()
        .and_then(|t| cfg.sources.get(&t.source))
        .map(|s| s.namespace.clone())
}

/// Creates `dir` and its `.gitignore` (`*`) when missing.
fn prepare_dev_dir(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let ignore = dir.join(".gitignore");
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&ignore)
    {
        Ok(mut f) => f
            .write_all(b"*\n")
            .map_err(|e| format!("cannot write {}: {e}", ignore.display())),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(format!("cannot create {}: {e}", ignore.display())),
    }
}

/// A new random token: 64 hexadecimal digits from two random (v4) UUIDs, 244 random bits.
fn new_token() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

/// The local token in `dir`: read from [`TOKEN_FILE`], or made and written there (mode 0600)
/// on the first start.
fn dev_token(dir: &Path) -> Result<String, String> {
    let path = dir.join(TOKEN_FILE);
    for _ in 0..2 {
        match std::fs::read_to_string(&path) {
            Ok(text) => return checked_token(&path, &text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        }
        let token = new_token();
        let mut open = std::fs::OpenOptions::new();
        open.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut open, 0o600);
        match open.open(&path) {
            Ok(mut f) => {
                f.write_all(format!("{token}\n").as_bytes())
                    .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
                return Ok(token);
            }
            // Another `dev` on the same file made it first: read theirs.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(format!("cannot create {}: {e}", path.display())),
        }
    }
    Err(format!("cannot read or create {}", path.display()))
}

/// The token a token file holds, refused (with the path and what to do) when it is not one.
fn checked_token(path: &Path, text: &str) -> Result<String, String> {
    let token = text.trim();
    if token.chars().count() < onestep_api::auth::MIN_TOKEN_CHARS
        || token.chars().any(char::is_whitespace)
    {
        return Err(format!(
            "{} does not hold a token (one word of at least {} characters); delete it and \
             onestep dev makes a new one",
            path.display(),
            onestep_api::auth::MIN_TOKEN_CHARS
        ));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        if let Ok(meta) = std::fs::metadata(path)
            && meta.permissions().mode() & 0o077 != 0
        {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
                .map_err(|e| format!("cannot make {} private (0600): {e}", path.display()))?;
        }
    }
    Ok(token.to_owned())
}

/// Runs the command; returns the process exit code (0 after a signal-initiated shutdown, 1
/// when the database, the listener or the worker fails, 2 for file and argument errors).
pub(crate) async fn run(args: DevArgs) -> u8 {
    let usage = |m: String| {
        eprintln!("onestep dev: {m}");
        2
    };
    let Some(reload) = reload_interval(args.reload_interval) else {
        return usage("--reload-interval must be a number of seconds, at least 0.1".into());
    };
    // No DSN needed (dev brings its own); a missing component quarantines its task until its
    // first build, as in `onestep run`.
    let opts = LoadOptions {
        env_file: args.env.env_file.clone(),
        strict_env: args.env.strict_env,
        require_components: false,
        require_dsn: false,
        ..LoadOptions::default()
    };
    let mut cfg = match onestep_config::load(&args.file, &opts) {
        Ok(c) => c,
        Err(e) => {
            eprintln!(
                "{}",
                onestep_config::format_load_error(&args.file.display().to_string(), &e)
            );
            return 2;
        }
    };
    let dev_dir = cfg.base_dir.join(DEV_DIR);
    let (dsn, origin) = resolve_dsn(args.dsn.as_deref(), cfg.env.get("ONESTEP_DSN"), &dev_dir);
    let api = match dev_config(&mut cfg, &dsn) {
        Ok(a) => a,
        Err(m) => return usage(m),
    };
    let Some(namespace) = dev_namespace(&cfg, &api) else {
        return usage("the app file has no task and its `api:` section no namespace".into());
    };
    let token = match prepare_dev_dir(&dev_dir).and_then(|()| dev_token(&dev_dir)) {
        Ok(t) => t,
        Err(m) => return usage(m),
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
        Err(e) => return usage(e.to_string()),
    };
    let session = Session {
        dsn,
        origin,
        namespace,
        token,
        listen: args.listen.unwrap_or(api.listen),
        reload: (!args.no_reload).then_some(reload),
    };
    let code = session.run(&cfg, &api).await;
    if let Some(t) = tracing {
        t.shutdown().await;
    }
    code
}

/// What one `onestep dev` serves, once resolved.
struct Session {
    dsn: String,
    origin: DsnOrigin,
    namespace: String,
    token: String,
    listen: SocketAddr,
    reload: Option<std::time::Duration>,
}

impl Session {
    /// Opens the API (tables created), prints the start lines, then runs the workers until a
    /// signal; the API stops first, then the workers drain.
    async fn run(&self, cfg: &AppConfig, api: &ApiConfig) -> u8 {
        raise_open_files_limit();
        for w in &cfg.warnings {
            tracing::warn!("{w}");
        }
        // Signals drain from here on (before the start line tells anyone the process is up).
        let shutdown = CancellationToken::new();
        spawn_signal_listener(shutdown.clone());
        let fail = |code: u8, m: String| {
            tracing::error!("{m}");
            eprintln!("onestep dev: {m}");
            code
        };
        let tenancy = match TokenTable::from_entries([(
            self.token.as_str(),
            self.namespace.as_str(),
            Role::Operate,
        )]) {
            Ok(t) => Tenancy::Tokens(t),
            Err(e) => return fail(2, format!("the dev token: {e}")),
        };
        let other: std::collections::BTreeSet<&str> = cfg
            .sources
            .values()
            .map(|s| s.namespace.as_str())
            .filter(|ns| *ns != self.namespace)
            .collect();
        if !other.is_empty() {
            tracing::warn!(
                namespaces = ?other,
                "the dev token serves namespace '{}' only; executions of these namespaces are \
                 not visible in the API",
                self.namespace
            );
        }
        let (store, state) = match open_api(cfg, api, tenancy).await {
            Ok(v) => v,
            Err((code, m)) => return fail(code, m),
        };
        let listener = match tokio::net::TcpListener::bind(self.listen).await {
            Ok(l) => l,
            Err(e) => {
                let _ = store.close().await;
                return fail(
                    1,
                    format!(
                        "cannot listen on {}: {e} (choose another with --listen)",
                        self.listen
                    ),
                );
            }
        };
        let local = listener.local_addr().unwrap_or(self.listen);
        self.print_start(local, cfg);
        let waits = state.waits().clone();
        let api_task = tokio::spawn(serve_on(
            listener,
            state,
            shutdown.clone().cancelled_owned(),
        ));
        let opts = WorkerOptions {
            metrics_addr: None,
            reload: self.reload,
        };
        let outcome = run_worker(cfg, &opts, shutdown.clone()).await;
        // A worker that stopped on its own takes the API down with it.
        shutdown.cancel();
        if let Err(e) = api_task.await {
            tracing::warn!(error = %e, "the API task ended abnormally");
        }
        // A listening session (PostgreSQL) unregisters before the store closes.
        let _ = tokio::time::timeout(std::time::Duration::from_secs(3), waits.stopped()).await;
        if let Err(e) = store.close().await {
            tracing::warn!(error = %e, "closing the API's store failed");
        }
        match outcome {
            Ok(()) => {
                tracing::info!("onestep dev stopped");
                0
            }
            Err(e) => fail(1, format!("{} failed while running: {e:#}", cfg.name)),
        }
    }

    /// The start lines on stdout: the dashboard, the token and the database; how to submit.
    fn print_start(&self, local: SocketAddr, cfg: &AppConfig) {
        let mut shown = local;
        if shown.ip().is_unspecified() {
            shown.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        let base = format!("http://{shown}");
        let db = match self.origin {
            DsnOrigin::Flag => format!("{} from --dsn", shown_dsn(&self.dsn)),
            DsnOrigin::Env => format!("{} from ONESTEP_DSN", shown_dsn(&self.dsn)),
            DsnOrigin::Default => self.dsn.clone(),
        };
        let task = cfg
            .tasks
            .first()
            .and_then(|t| cfg.sources.get(&t.source))
            .map_or("TASK", |s| s.task_name.as_str());
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "onestep dev: dashboard {base}/ui/  token {}  (db {db})",
            self.token
        );
        let _ = writeln!(
            out,
            "onestep dev: submit with curl -sS -X POST {base}/v1/executions -H 'Authorization: \
             Bearer {}' -H \"Idempotency-Key: $(date +%s%N)\" -H 'Content-Type: \
             application/json' -d '{{\"task_name\":\"{task}\",\"payload\":{{}}}}'",
            self.token
        );
        let _ = out.flush();
        tracing::info!(
            address = %local,
            namespace = %self.namespace,
            reload = self.reload.is_some(),
            "onestep dev: API, dashboard and workers running (Ctrl-C stops)"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dsn_is_the_flag_then_onestep_dsn_then_the_embedded_file() {
        let dir = Path::new("/app/.onestep");
        assert_eq!(
            resolve_dsn(Some("mysql://a/b"), Some("postgres://c/d".into()), dir),
            ("mysql://a/b".to_owned(), DsnOrigin::Flag)
        );
        assert_eq!(
            resolve_dsn(None, Some(" postgres://c/d ".into()), dir),
            ("postgres://c/d".to_owned(), DsnOrigin::Env)
        );
        assert_eq!(
            resolve_dsn(Some(" "), Some(String::new()), dir),
            (
                "sqlite:///app/.onestep/dev.db".to_owned(),
                DsnOrigin::Default
            )
        );
    }

    #[test]
    fn the_shown_dsn_hides_the_password_only() {
        assert_eq!(
            shown_dsn("mysql://user:hunter2@h:3306/db"),
            "mysql://user:<redacted>@h:3306/db"
        );
        assert_eq!(shown_dsn("mysql://root@h/db"), "mysql://root@h/db");
    }

    #[test]
    fn the_token_is_made_once_private_and_reused() {
        let dir = std::env::temp_dir().join(format!("onestep-dev-{}", uuid::Uuid::new_v4()));
        prepare_dev_dir(&dir).expect("dir");
        assert_eq!(
            std::fs::read_to_string(dir.join(".gitignore")).expect("gitignore"),
            "*\n"
        );
        let first = dev_token(&dir).expect("token");
        assert_eq!(first.len(), 64);
        assert_eq!(dev_token(&dir).expect("again"), first);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.join(TOKEN_FILE))
                .expect("meta")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::write(dir.join(TOKEN_FILE), "short\n").expect("write");
        let err = dev_token(&dir).expect_err("short token");
        assert!(err.contains("delete it"), "{err}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
