//! [`Backend`](onestep_core::Backend) for [`SqliteBackend`]: the ports it hands out and its
//! capability answers, as every backend gives them ([`onestep_core::impl_backend`]).

use crate::backend::SqliteBackend;

onestep_core::impl_backend!(SqliteBackend, "sqlite", |b| format!(
    "SQLite {}",
    b.server().version_string
));
