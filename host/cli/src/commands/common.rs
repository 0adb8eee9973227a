//! Pieces shared by the commands that load a YAML app file.

use std::path::{Path, PathBuf};

use onestep_config::{AppConfig, LoadOptions, format_load_error};

/// Flags every YAML-loading command accepts (docs/configuration.md#load-pipeline).
#[derive(Debug, Clone, clap::Args)]
pub struct EnvArgs {
    /// Dotenv file to load (overrides `app.env_file` and a `.env` next to the YAML).
    #[arg(long, value_name = "PATH")]
    pub env_file: Option<PathBuf>,
    /// Fail when a `${VAR}` without a default refers to an unset variable.
    #[arg(long)]
    pub strict_env: bool,
}

/// Loads `target`; on failure prints `onestep: failed to load <target>: <reason>` and returns
/// exit code 2.
pub fn load(target: &Path, strict: bool, env: &EnvArgs) -> Result<AppConfig, u8> {
    load_with(target, strict, env, true)
}

/// [`load`], with `require_components: false` letting a task's component file be missing (it is
/// quarantined at start, docs/security.md#one-tenants-bad-deploy; `onestep run` only).
pub fn load_with(
    target: &Path,
    strict: bool,
    env: &EnvArgs,
    require_components: bool,
) -> Result<AppConfig, u8> {
    let opts = LoadOptions {
        strict,
        env_file: env.env_file.clone(),
        strict_env: env.strict_env,
        require_components,
        ..LoadOptions::default()
    };
    onestep_config::load(target, &opts).map_err(|e| {
        eprintln!("{}", format_load_error(&target.display().to_string(), &e));
        2
    })
}

/// A JSON argument `--NAME`: JSON text, or `@FILE` to read it from a file (`@-`: stdin). The
/// error names the flag and says what was wrong.
pub fn read_json_arg(name: &str, text: &str) -> Result<serde_json::Value, String> {
    let source = match text.strip_prefix('@') {
        Some("-") => std::io::read_to_string(std::io::stdin())
            .map_err(|e| format!("--{name}: cannot read stdin: {e}"))?,
        Some(file) => std::fs::read_to_string(Path::new(file))
            .map_err(|e| format!("--{name}: cannot read {file}: {e}"))?,
        None => text.to_owned(),
    };
    serde_json::from_str(&source).map_err(|e| format!("--{name} is not valid JSON: {e}"))
}
