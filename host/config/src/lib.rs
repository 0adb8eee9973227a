//! onestep-config: the only crate that knows YAML.
//!
//! It owns the worker/API configuration file (docs/configuration.md, adapted to WebAssembly component
//! handlers): the load pipeline of docs/configuration.md#load-pipeline ([`load`]), dotenv selection and parsing ([`mod@env`]),
//! `${VAR}` interpolation with the strict-env report ([`interpolate`]), strict validation of
//! `onestep check --strict` ([`strict`], docs/configuration.md#strict-validation), the build-time checks that always apply (docs/configuration.md#checks-in-both-modes,
//! [`build`]), the typed result ([`AppConfig`] and friends in [`model`]) and the `check` summary
//! ([`summary`], docs/cli.md#onestep-check).
//!
//! Invariants: the process environment is never modified (dotenv values form a layer below it,
//! see [`EnvLookup`]); every error names the offending path and, when known, the line and
//! column ([`ConfigError`]); secrets (DSNs, API tokens) are wrapped in [`Secret`] and never
//! printed; relative paths in the file resolve against the YAML file's directory.

pub mod build;
pub mod env;
pub mod error;
mod fields;
pub mod interpolate;
pub mod manifest;
pub mod model;
pub mod node;
pub mod strict;
pub mod summary;

use std::path::{Path, PathBuf};

pub use build::deployments::{DeploymentsConfig, OperatorSecret};
pub use env::EnvLookup;
pub use error::{ConfigError, MissingVar};
pub use manifest::{DeploymentManifest, load_manifest, parse_manifest};
pub use model::{
    AllowedOrigin, ApiAuth, ApiConfig, ApiToken, AppConfig, DatabaseKind, DeployedConfig,
    EngineOptions, ExecutionSourceConfig, HandlerConfig, JsonMap, LogFormat, LogLevel,
    LoggingConfig, MysqlConnectorConfig, NetworkSettings, OriginPattern, OtlpProtocol, Preopen,
    PreopenMode, SandboxSettings, Secret, TaskConfig, TracingSettings,
};

use build::{BuildContext, BuildInputs};
use node::{Node, Value};

/// Options of [`load`].
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// Apply strict validation (docs/configuration.md#strict-validation) before building (`--strict`).
    pub strict: bool,
    /// `--env-file`: overrides `app.env_file` and `.env` (relative to the YAML's directory).
    pub env_file: Option<PathBuf>,
    /// `--strict-env`: report unset `${VAR}` references without default (also `app.strict_env`).
    pub strict_env: bool,
    /// Where variables come from (default: the process environment).
    pub env: EnvLookup,
    /// Check that handler components and preopen directories exist (default true).
    pub check_files: bool,
    /// With `check_files`, also require every handler component file to exist (default true).
    /// `onestep run` turns it off: a task whose component is missing is quarantined at start
    /// like one whose component cannot be loaded (docs/security.md#one-tenants-bad-deploy).
    pub require_components: bool,
    /// Require every connector to name a `dsn` (default true). `onestep task run` turns it off:
    /// one local attempt opens no database, so a file without a DSN runs.
    pub require_dsn: bool,
}

impl Default for LoadOptions {
    fn default() -> Self {
        LoadOptions {
            strict: false,
            env_file: None,
            strict_env: false,
            env: EnvLookup::process(),
            check_files: true,
            require_components: true,
            require_dsn: true,
        }
    }
}

/// Loads a YAML configuration file (docs/configuration.md#load-pipeline): read, parse, choose and read the dotenv file,
/// strict env, interpolation, strict validation (when `opts.strict`), build.
pub fn load(path: &Path, opts: &LoadOptions) -> Result<AppConfig, ConfigError> {
    let source_path = std::path::absolute(path)
        .map(|p| fields::resolve_path(Path::new("/"), &p.to_string_lossy()))
        .map_err(|e| ConfigError::Read {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    let bytes = std::fs::read(&source_path).map_err(|e| ConfigError::Read {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let text = String::from_utf8(bytes).map_err(|_| ConfigError::Read {
        path: path.to_path_buf(),
        reason: "the file is not valid UTF-8".to_owned(),
    })?;
    load_str(&text, &source_path, opts)
}

/// Like [`load`] for text already in memory; `source_path` gives the directory that relative
/// paths resolve against (it need not exist when `check_files` is false and no dotenv is used).
pub fn load_str(
    text: &str,
    source_path: &Path,
    opts: &LoadOptions,
) -> Result<AppConfig, ConfigError> {
    let root = node::parse(text)?;
    if !root.is_map() {
        return Err(ConfigError::NotMapping);
    }
    let base_dir = source_path
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));

    // Step 2–3: dotenv.
    let app = root.get("app").filter(|a| a.is_map());
    let app_env_file = match app.and_then(|a| a.get_set("env_file")) {
        None => None,
        Some(n) => Some(
            n.as_str()
                .ok_or_else(|| ConfigError::bare(n, "app.env_file must be a string"))?,
        ),
    };
    let env_file = env::select_env_file(&base_dir, opts.env_file.as_deref(), app_env_file)?;
    let mut env = opts.env.clone();
    let mut warnings = Vec::new();
    if let Some(p) = &env_file {
        let dotenv = env::read_dotenv(p)?;
        env.add_dotenv(dotenv.vars);
        warnings.extend(dotenv.warnings);
    }

    // Step 4: strict env.
    let app_strict_env = match app.and_then(|a| a.get_set("strict_env")) {
        None => false,
        Some(Node {
            value: Value::Bool(b),
            ..
        }) => *b,
        Some(n) => return Err(ConfigError::bare(n, "app.strict_env must be a boolean")),
    };
    if opts.strict_env || app_strict_env {
        let missing = interpolate::missing_vars(&root, &env);
        if !missing.is_empty() {
            return Err(ConfigError::StrictEnv(missing));
        }
    }

    // Step 5: interpolation; step 6: strict validation, then build.
    let tree = interpolate::expand_tree(&root, &env);
    if opts.strict {
        strict::validate(&tree)?;
    }
    // An injected header that expands to nothing where a variable stood (docs/configuration.md#sandbox-network).
    let empty_headers = interpolate::empty_header_refs(&root, &env);
    if let Some(first) = empty_headers.first() {
        if opts.strict {
            return Err(ConfigError::Invalid {
                path: Some(first.path.clone()),
                message: format!(
                    "the injected header's variable {} is unset or empty (the header would be \
                     sent without it)",
                    first.name
                ),
                line: 0,
                column: 0,
            });
        }
        warnings.extend(empty_headers.iter().map(|m| {
            format!(
                "{}: the injected header's variable {} is unset or empty",
                m.path, m.name
            )
        }));
    }
    let ctx = BuildContext {
        base_dir: &base_dir,
        check_files: opts.check_files,
        require_components: opts.require_components,
        require_dsn: opts.require_dsn,
    };
    build::build(
        &tree,
        &ctx,
        BuildInputs {
            source_path: source_path.to_path_buf(),
            env,
            env_file,
            warnings,
        },
    )
}

/// The CLI's rendering of a load failure: `onestep: failed to load <target>: <reason>`.
pub fn format_load_error(target: &str, err: &ConfigError) -> String {
    format!("onestep: failed to load {target}: {err}")
}
