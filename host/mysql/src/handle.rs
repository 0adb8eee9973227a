//! [`Backend`](onestep_core::Backend) for [`MySqlBackend`]: the ports it hands out and its
//! capability answers, as every backend gives them ([`onestep_core::impl_backend`]).

use crate::backend::MySqlBackend;

onestep_core::impl_backend!(MySqlBackend, "mysql", |b| b.server().version_string.clone());

/// No pushed change notifications: the API's waits poll (docs/http-api.md#waiting).
impl onestep_core::changes::ChangePort for MySqlBackend {}
