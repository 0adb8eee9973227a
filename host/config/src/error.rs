//! [`ConfigError`]: every way loading a configuration can fail. `Display` is the exact message.

use std::fmt;
use std::path::PathBuf;

use crate::node::Node;

/// One `${VAR}` reference without a default whose variable is unset (docs/configuration.md#load-pipeline step 4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingVar {
    /// The variable name.
    pub name: String,
    /// Where it is referenced, e.g. `config.resources.db.dsn`.
    pub path: String,
}

/// A configuration load failure. `Display` renders the message the CLI prints after
/// `onestep: failed to load <target>: ` (see [`format_load_error`](crate::format_load_error)).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read or is not UTF-8: `cannot read <path>: <reason>`.
    #[error("cannot read {}: {reason}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS or decoding error.
        reason: String,
    },
    /// The YAML syntax is invalid: `invalid YAML: <reason> (line L, column C)`.
    #[error("invalid YAML: {message}{}", location(*line, *column))]
    Parse {
        /// The parser's reason.
        message: String,
        /// 1-based line (0 = unknown).
        line: u64,
        /// 1-based column (0 = unknown).
        column: u64,
    },
    /// `YAML app config must be a mapping at the top level`.
    #[error("YAML app config must be a mapping at the top level")]
    NotMapping,
    /// `env_file not found: <path>` (an explicitly named dotenv file does not exist).
    #[error("env_file not found: {}", .0.display())]
    EnvFileNotFound(PathBuf),
    /// The multi-line strict-env report (docs/configuration.md#load-pipeline step 4).
    #[error("{}", strict_env_message(.0))]
    StrictEnv(Vec<MissingVar>),
    /// A validation or build error: `[<path>: ]<message>[ (line L, column C)]`.
    ///
    /// `message` is the reference's text (docs/configuration.md#strict-validation,
    /// docs/configuration.md#checks-in-both-modes). When that text already names the
    /// location (`unsupported fields for tasks[0]: x`) `path` is `None`.
    #[error("{}{message}{}", path.as_ref().map(|p| format!("{p}: ")).unwrap_or_default(), location(*line, *column))]
    Invalid {
        /// The dotted path of the offending value, e.g. `resources.agent_jobs`.
        path: Option<String>,
        /// The rule that was broken.
        message: String,
        /// 1-based line (0 = unknown).
        line: u64,
        /// 1-based column (0 = unknown).
        column: u64,
    },
}

impl ConfigError {
    /// An error at `node` whose message does not name its location: rendered `<path>: <message>`.
    pub fn at(node: &Node, path: &str, message: impl Into<String>) -> Self {
        ConfigError::Invalid {
            path: (!path.is_empty()).then(|| path.to_owned()),
            message: message.into(),
            line: node.line,
            column: node.column,
        }
    }

    /// An error at `node` whose message already names its location.
    pub fn bare(node: &Node, message: impl Into<String>) -> Self {
        ConfigError::Invalid {
            path: None,
            message: message.into(),
            line: node.line,
            column: node.column,
        }
    }

    /// The rule text without path or location (for `Invalid`), else the full message.
    pub fn reason(&self) -> String {
        match self {
            ConfigError::Invalid { message, .. } => message.clone(),
            other => other.to_string(),
        }
    }

    /// The (line, column) of the error, when known.
    pub fn location(&self) -> Option<(u64, u64)> {
        match self {
            ConfigError::Parse { line, column, .. } | ConfigError::Invalid { line, column, .. }
                if *line > 0 =>
            {
                Some((*line, *column))
            }
            _ => None,
        }
    }
}

fn location(line: u64, column: u64) -> String {
    if line == 0 {
        String::new()
    } else {
        format!(" (line {line}, column {column})")
    }
}

/// The hint printed after the list of missing variables.
pub const STRICT_ENV_HINT: &str = "hint: set them in the environment or in an env file \
     (--env-file / app.env_file), or give a default with ${VAR:-default}";

fn strict_env_message(missing: &[MissingVar]) -> String {
    let mut out = String::from("strict_env: missing required environment variable(s):\n");
    for m in missing {
        out.push_str(&format!("  - {} (referenced at: {})\n", m.name, m.path));
    }
    out.push_str(STRICT_ENV_HINT);
    out
}

impl fmt::Display for MissingVar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (referenced at: {})", self.name, self.path)
    }
}
