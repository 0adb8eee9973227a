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
    /// The bytes are not a valid WebAssembly component (e.g. a core module).
    #[error("invalid component {name}: {message}")]
    Compile {
        /// File name or label of the component.
        name: String,
        /// Compiler message.
        message: String,
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
        "component {name} does not implement onestep:handler/handler (0.1.0 or 0.2.0): {message}"
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
