//! Pieces shared by the commands that load a YAML app file.

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use onestep_config::{AppConfig, LoadOptions, format_load_error};

/// Flags every YAML-loading command accepts (docs/configuration.md#load-pipeline).
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct EnvArgs {
    /// Dotenv file to load (overrides `app.env_file` and a `.env` next to the YAML).
    #[arg(long, value_name = "PATH")]
    pub(crate) env_file: Option<PathBuf>,
    /// Fail when a `${VAR}` without a default refers to an unset variable.
    #[arg(long)]
    pub(crate) strict_env: bool,
}

/// Loads `target`; on failure prints `onestep: failed to load <target>: <reason>` and returns
/// exit code 2.
pub(crate) fn load(target: &Path, strict: bool, env: &EnvArgs) -> Result<AppConfig, u8> {
    load_opts(
        target,
        LoadOptions {
            strict,
            ..LoadOptions::default()
        },
        env,
    )
}

/// [`load`], with `require_components: false` letting a task's component file be missing (it is
/// quarantined at start, docs/security.md#one-tenants-bad-deploy; `onestep run` only).
pub(crate) fn load_with(
    target: &Path,
    strict: bool,
    env: &EnvArgs,
    require_components: bool,
) -> Result<AppConfig, u8> {
    load_opts(
        target,
        LoadOptions {
            strict,
            require_components,
            ..LoadOptions::default()
        },
        env,
    )
}

/// [`load`] for one local attempt (`onestep task run`): no connector needs a DSN, since no
/// database is opened.
pub(crate) fn load_local(target: &Path, env: &EnvArgs) -> Result<AppConfig, u8> {
    load_opts(
        target,
        LoadOptions {
            require_dsn: false,
            ..LoadOptions::default()
        },
        env,
    )
}

fn load_opts(target: &Path, opts: LoadOptions, env: &EnvArgs) -> Result<AppConfig, u8> {
    let opts = LoadOptions {
        env_file: env.env_file.clone(),
        strict_env: env.strict_env,
        ..opts
    };
    onestep_config::load(target, &opts).map_err(|e| {
        eprintln!("{}", format_load_error(&target.display().to_string(), &e));
        2
    })
}

/// Why a JSON argument was refused ([`read_json_arg`]); the text names the flag.
#[derive(Debug)]
pub(crate) enum JsonArgError {
    /// `@-` or `@FILE` could not be read.
    Read {
        /// The flag's name without `--`.
        flag: String,
        /// `stdin` or the file's path.
        source_name: String,
        /// The read error.
        error: std::io::Error,
    },
    /// The text is not JSON.
    Json {
        /// The flag's name without `--`.
        flag: String,
        /// The parse error.
        error: serde_json::Error,
    },
}

impl fmt::Display for JsonArgError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JsonArgError::Read {
                flag,
                source_name,
                error,
            } => write!(f, "--{flag}: cannot read {source_name}: {error}"),
            JsonArgError::Json { flag, error } => write!(f, "--{flag} is not valid JSON: {error}"),
        }
    }
}

impl std::error::Error for JsonArgError {}

impl From<JsonArgError> for String {
    fn from(e: JsonArgError) -> String {
        e.to_string()
    }
}

/// A JSON argument `--NAME`: JSON text, or `@FILE` to read it from a file (`@-`: stdin). The
/// error names the flag and says what was wrong.
pub(crate) fn read_json_arg(name: &str, text: &str) -> Result<serde_json::Value, JsonArgError> {
    let read_error = |source_name: &str, error| JsonArgError::Read {
        flag: name.to_owned(),
        source_name: source_name.to_owned(),
        error,
    };
    let source = match text.strip_prefix('@') {
        Some("-") => {
            std::io::read_to_string(std::io::stdin()).map_err(|e| read_error("stdin", e))?
        }
        Some(file) => std::fs::read_to_string(Path::new(file)).map_err(|e| read_error(file, e))?,
        None => text.to_owned(),
    };
    serde_json::from_str(&source).map_err(|error| JsonArgError::Json {
        flag: name.to_owned(),
        error,
    })
}

/// Which values a seconds flag accepts ([`seconds_flag`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SecondsRange {
    /// 0 and more.
    NonNegative,
    /// More than 0.
    Positive,
}

/// A seconds flag whose value is not a finite number in its range, or too large for a
/// `Duration` (`Duration::from_secs_f64` would panic on it): names the flag and the allowed
/// range, e.g. `--timeout must be a non-negative number of seconds, at most 1.8e19`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SecondsFlagError {
    flag: &'static str,
    range: SecondsRange,
}

impl fmt::Display for SecondsFlagError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.range {
            SecondsRange::NonNegative => "a non-negative",
            SecondsRange::Positive => "a positive",
        };
        write!(
            f,
            "{} must be {kind} number of seconds, at most 1.8e19",
            self.flag
        )
    }
}

impl std::error::Error for SecondsFlagError {}

/// The value of seconds flag `flag` (e.g. `--timeout`) as a `Duration`, without a panic for any
/// input: NaN, infinities, values outside `range` and values beyond `Duration::MAX` (about
/// 1.8e19 s) are refused.
pub(crate) fn seconds_flag(
    flag: &'static str,
    secs: f64,
    range: SecondsRange,
) -> Result<Duration, SecondsFlagError> {
    let in_range = match range {
        SecondsRange::NonNegative => secs >= 0.0,
        SecondsRange::Positive => secs > 0.0,
    };
    match Duration::try_from_secs_f64(secs) {
        Ok(d) if in_range => Ok(d),
        _ => Err(SecondsFlagError { flag, range }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seconds_flags_refuse_what_duration_cannot_hold_with_the_flag_and_range_named() {
        let wait = |s| seconds_flag("--timeout", s, SecondsRange::NonNegative);
        assert_eq!(wait(0.0), Ok(Duration::ZERO));
        assert_eq!(wait(2.5), Ok(Duration::from_millis(2500)));
        for bad in [1e20, f64::MAX, f64::INFINITY, f64::NAN, -1.0] {
            assert_eq!(
                wait(bad).unwrap_err().to_string(),
                "--timeout must be a non-negative number of seconds, at most 1.8e19",
                "{bad}"
            );
        }
        let connect = |s| seconds_flag("--connect-timeout", s, SecondsRange::Positive);
        assert_eq!(connect(5.0), Ok(Duration::from_secs(5)));
        for bad in [1e20, f64::INFINITY, f64::NAN, 0.0, -3.0] {
            assert_eq!(
                connect(bad).unwrap_err().to_string(),
                "--connect-timeout must be a positive number of seconds, at most 1.8e19",
                "{bad}"
            );
        }
    }
}
