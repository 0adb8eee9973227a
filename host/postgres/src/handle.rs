//! [`Backend`](onestep_core::Backend) for [`PgBackend`]: the ports it hands out and its
//! capability answers, as every backend gives them ([`onestep_core::impl_backend`]).

use crate::backend::PgBackend;

onestep_core::impl_backend!(PgBackend, "postgres", |b| format!(
    "PostgreSQL {}",
    b.server().version_string
));
