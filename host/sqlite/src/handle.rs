//! [`Backend`](onestep_core::Backend) for [`SqliteBackend`]: the ports it hands out and its
//! capability answers, as every backend gives them ([`onestep_core::impl_backend`]).

use crate::backend::SqliteBackend;

onestep_core::impl_backend!(SqliteBackend, "sqlite", |b| format!(
    "SQLite {}",
    b.server().version_string
));

/// No pushed change notifications: the API's waits poll (docs/http-api.md#waiting).
impl onestep_core::changes::ChangePort for SqliteBackend {}
