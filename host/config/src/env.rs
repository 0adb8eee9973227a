//! Environment lookup and dotenv files (docs/configuration.md#load-pipeline steps 2–3, docs/configuration.md#environment-interpolation "Dotenv syntax").
//!
//! The process environment is never modified: a dotenv file's variables form a layer *below*
//! the process environment ("load without overriding variables that are already set"). Lookup
//! order is: explicit mapping given to the loader, then the process environment (when enabled),
//! then the dotenv layer.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::error::ConfigError;

/// Where `${VAR}` values come from. Cheap to clone; kept on the loaded
/// [`AppConfig`](crate::AppConfig) so the worker resolves sandbox `env` names the same way.
#[derive(Debug, Clone)]
pub struct EnvLookup {
    explicit: BTreeMap<String, String>,
    process: bool,
    dotenv: BTreeMap<String, String>,
}

impl Default for EnvLookup {
    /// The process environment only.
    fn default() -> Self {
        EnvLookup::process()
    }
}

impl EnvLookup {
    /// The process environment only.
    pub fn process() -> Self {
        EnvLookup {
            explicit: BTreeMap::new(),
            process: true,
            dotenv: BTreeMap::new(),
        }
    }

    /// Only the given variables (no process environment): for tests and embedding.
    pub fn isolated<I, K, V>(vars: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        EnvLookup {
            explicit: vars
                .into_iter()
                .map(|(k, v)| (k.into(), v.into()))
                .collect(),
            process: false,
            dotenv: BTreeMap::new(),
        }
    }

    /// The given variables first, then the process environment.
    pub fn with_overrides<I, K, V>(vars: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        EnvLookup {
            process: true,
            ..EnvLookup::isolated(vars)
        }
    }

    /// The value of `name`: explicit mapping, then process environment, then dotenv layer.
    /// A set-but-empty variable is `Some("")`.
    pub fn get(&self, name: &str) -> Option<String> {
        if let Some(v) = self.explicit.get(name) {
            return Some(v.clone());
        }
        if self.process
            && let Some(v) = std::env::var_os(name)
        {
            return Some(v.to_string_lossy().into_owned());
        }
        self.dotenv.get(name).cloned()
    }

    /// True when `name` is set (even to the empty string).
    pub fn is_set(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    /// Adds dotenv variables below the other layers (never overriding a set variable).
    pub fn add_dotenv(&mut self, vars: BTreeMap<String, String>) {
        for (k, v) in vars {
            self.dotenv.entry(k).or_insert(v);
        }
    }

    /// The variables that came from the dotenv file.
    pub fn dotenv_vars(&self) -> &BTreeMap<String, String> {
        &self.dotenv
    }
}

/// Chooses the dotenv file (docs/configuration.md#load-pipeline step 2): `cli` (`--env-file`) > `app_env_file`
/// (`app.env_file`) > `.env` next to the YAML when it exists. Relative paths are resolved against
/// `base_dir` (the YAML file's directory). A named file that does not exist is
/// `env_file not found: <path>`.
pub fn select_env_file(
    base_dir: &Path,
    cli: Option<&Path>,
    app_env_file: Option<&str>,
) -> Result<Option<PathBuf>, ConfigError> {
    let named = cli
        .map(Path::to_path_buf)
        .or_else(|| app_env_file.map(PathBuf::from));
    match named {
        Some(p) => {
            let p = if p.is_absolute() { p } else { base_dir.join(p) };
            if p.is_file() {
                Ok(Some(p))
            } else {
                Err(ConfigError::EnvFileNotFound(p))
            }
        }
        None => {
            let p = base_dir.join(".env");
            Ok(p.is_file().then_some(p))
        }
    }
}

/// A parsed dotenv file: variables, and one warning per skipped line.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dotenv {
    /// `KEY → value`, later lines win.
    pub vars: BTreeMap<String, String>,
    /// `"<file>:<line>: skipped invalid dotenv line"` for each line that was skipped.
    pub warnings: Vec<String>,
}

/// Reads and parses a dotenv file.
pub fn read_dotenv(path: &Path) -> Result<Dotenv, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let mut out = Dotenv::default();
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        match parse_dotenv_line(line) {
            Some((k, v)) => {
                out.vars.insert(k, v);
            }
            None => out.warnings.push(format!(
                "{}:{}: skipped invalid dotenv line",
                path.display(),
                i + 1
            )),
        }
    }
    Ok(out)
}

/// Parses one `KEY=VALUE` line (docs/configuration.md#environment-interpolation): optional spaces around `=`; the value is `"…"` or
/// `'…'` (literal, no escapes), or unquoted (no `#`, trimmed, non-empty); an optional trailing
/// `# comment`. Returns `None` for anything else (including `export KEY=…` and `KEY=`).
pub fn parse_dotenv_line(line: &str) -> Option<(String, String)> {
    let line = line.trim();
    let (key, rest) = line.split_once('=')?;
    let key = key.trim();
    if !is_env_name(key) {
        return None;
    }
    let rest = rest.trim_start();
    let (value, tail) = match rest.chars().next() {
        Some(q @ ('"' | '\'')) => {
            let body = &rest[1..];
            let end = body.find(q)?;
            (body[..end].to_owned(), &body[end + 1..])
        }
        _ => {
            let (v, tail) = match rest.find('#') {
                Some(i) => (&rest[..i], &rest[i..]),
                None => (rest, ""),
            };
            let v = v.trim();
            if v.is_empty() {
                return None;
            }
            (v.to_owned(), tail)
        }
    };
    let tail = tail.trim();
    if tail.is_empty() || tail.starts_with('#') {
        Some((key.to_owned(), value))
    } else {
        None
    }
}

/// True for a portable environment variable name: `[A-Za-z_][A-Za-z0-9_]*` (core's rule, also
/// the deploy API's).
pub fn is_env_name(name: &str) -> bool {
    onestep_core::settings::is_env_name(name)
}
