//! [`Error`]: why a runtime could not be created or a component loaded.

use std::path::PathBuf;

/// Errors of [`Runtime::new`](crate::Runtime::new),
/// [`Runtime::load`](crate::Runtime::load) and
/// [`Runtime::load_for`](crate::Runtime::load_for). Invocation problems are not
/// errors but [`Outcome`](crate::Outcome)s.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The wasmtime engine could not be configured.
    #[error("wasm engine: {0}")]
    Engine(String),
    /// The compilation cache directory is unusable.
    #[error("compilation cache at {path}: {message}")]
    Cache {
        /// The configured cache directory.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// The component file could not be read.
    #[error("cannot read component {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a WebAssembly component at all: not WebAssembly, or a
    /// core module.
    #[error("component {name} is not a WebAssembly component: {message}")]
    NotAComponent {
        /// File name or label of the component.
        name: String,
        /// What the file is instead, and how a handler is built.
        message: String,
    },
    /// The bytes look like a component but do not compile.
    #[error("invalid component {name}: {message}")]
    Compile {
        /// File name or label of the component.
        name: String,
        /// Compiler message.
        message: String,
    },
    /// The component is built against a version of `onestep:handler` the
    /// host does not serve (`wit/README.md`).
    #[error(
        "component {name} is built against {found}, which this host does not serve (it serves {served}): rebuild it against one of those"
    )]
    WorldVersion {
        /// File name or label of the component.
        name: String,
        /// The unserved version(s) its imports name.
        found: String,
        /// The versions this host serves.
        served: String,
    },
    /// The component imports something the host does not provide.
    #[error("component {name} cannot be linked: {message}")]
    Link {
        /// File name or label of the component.
        name: String,
        /// Linker message.
        message: String,
    },
    /// The component cannot run in the task's sandbox
    /// ([`Runtime::load_for`](crate::Runtime::load_for)).
    #[error("component {name} cannot run in its sandbox: {message}")]
    Sandbox {
        /// File name or label of the component.
        name: String,
        /// What does not fit.
        message: String,
    },
    /// The component does not export the `onestep:handler/handler` world.
    #[error(
        "component {name} does not implement onestep:handler/handler (0.1.0, 0.2.0 or 0.3.0): {message}"
    )]
    NotAHandler {
        /// File name or label of the component.
        name: String,
        /// Details (missing or mistyped export).
        message: String,
    },
    /// The component declares more instances, memories, tables, table
    /// elements or initial memory than the task's sandbox allows per attempt
    /// (every attempt would fail), see
    /// [`Handler::check_sandbox`](crate::Handler::check_sandbox).
    #[error("component {name} exceeds its sandbox: {message}")]
    OverLimits {
        /// File name or label of the component.
        name: String,
        /// Each need over its limit, with the `sandbox:` key that raises it.
        message: String,
    },
}

impl Error {
    /// A short name of what went wrong, for reports (`onestep check --json`):
    /// `engine`, `cache`, `unreadable`, `not-a-component`, `invalid-component`,
    /// `world-version`, `missing-import`, `sandbox`, `wrong-world`, `over-limits`.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Engine(_) => "engine",
            Error::Cache { .. } => "cache",
            Error::Io { .. } => "unreadable",
            Error::NotAComponent { .. } => "not-a-component",
            Error::Compile { .. } => "invalid-component",
            Error::WorldVersion { .. } => "world-version",
            Error::Link { .. } => "missing-import",
            Error::Sandbox { .. } => "sandbox",
            Error::NotAHandler { .. } => "wrong-world",
            Error::OverLimits { .. } => "over-limits",
        }
    }
}
