//! Pushed change notifications (docs/http-api.md#waiting): the port through which a backend
//! that the database itself can tell of a change (PostgreSQL `LISTEN`/`NOTIFY`) wakes the API's
//! waiting and streaming callers at once, instead of at the waits' next poll.
//!
//! The port knows no SQL: a [`ChangeListener`] holds one dedicated session, and for every
//! execution whose version moved it calls [`ChangeSink::changed`]. It never replaces the poll:
//! a notification can be lost (the session dropped, the change was made by a writer that does
//! not notify), so the receiver keeps polling, only less often while the session is up.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::error::ExecutionError;

/// What a [`ChangeListener`] tells its receiver.
pub trait ChangeSink: Send + Sync {
    /// The session listens: every change committed from now on is pushed. Changes committed
    /// before (while no session listened) were not: the receiver reads what it waits for once.
    fn listening(&self);

    /// Execution `id` moved to `version`.
    fn changed(&self, id: Uuid, version: i64);

    /// A change arrived that could not be read (a malformed notification): the receiver reads
    /// what it waits for once.
    fn unreadable(&self);
}

/// One backend's pushed notifications.
#[async_trait]
pub trait ChangeListener: Send + Sync + Debug {
    /// Opens a dedicated session, listens ([`ChangeSink::listening`] once it does) and hands
    /// every notification to `sink` until `stop` is cancelled (then `Ok`) or the session is
    /// lost (then the error; the caller reconnects).
    async fn listen(
        &self,
        sink: Arc<dyn ChangeSink>,
        stop: CancellationToken,
    ) -> Result<(), ExecutionError>;
}

/// How a backend hands out its [`ChangeListener`] (`Backend::changes`): `None` when it has no
/// pushed notifications (MySQL/MariaDB and SQLite always; PostgreSQL tables without the notify
/// trigger).
pub trait ChangePort {
    /// The listener, when this backend pushes changes.
    fn change_port(&self) -> Option<Arc<dyn ChangeListener>> {
        None
    }
}
