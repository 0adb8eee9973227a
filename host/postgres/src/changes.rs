//! Pushed change notifications (docs/postgres.md#change-notifications): the API's one
//! dedicated `LISTEN` session per process.
//!
//! The notify trigger (`crate::schema::notify_ddl`) sends, after every `UPDATE` statement that
//! left executions terminal, `NOTIFY <T>_changes, 'id version,id version,…'` — but only while
//! the listeners table `<T>_listeners` has a row, because a notifying commit takes PostgreSQL's
//! cluster-wide notify lock and so serialises with every other notifying commit
//! (docs/benchmarks.md#waiting-callers measures it). A listening session therefore:
//!
//! 1. connects on its own (not from the pool: the pool's connection tasks drop notifications),
//!    `application_name` `onestep listen`;
//! 2. `LISTEN`s, then registers its backend pid in the listeners table (so no notification the
//!    trigger sends for it can be missed), and deletes the rows of sessions that no longer exist
//!    (a listener killed without unregistering);
//! 3. tells the sink it listens (the sink reads what it waits for once: changes committed before
//!    were not notified), then hands every notification to the sink;
//! 4. repeats the clean-up every minute (which also proves the session alive), and unregisters
//!    when stopped.
//!
//! A session that is lost (the server restarted, `pg_terminate_backend`) ends [`listen`] with
//! the error; the caller reconnects, and its poll covers the gap.

use std::sync::Arc;
use std::time::Duration;

use onestep_core::ExecutionError;
use onestep_core::changes::{ChangeListener, ChangePort, ChangeSink};
use tokio_postgres::AsyncMessage;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::backend::PgBackend;
use crate::dsn::{ParsedDsn, TlsMode};
use crate::errors::{OpError, OpResult};
use crate::schema::{listeners_table, notify_channel, q};

/// The listening session's `application_name` (how an operator finds it in
/// `pg_stat_activity`).
pub const LISTEN_APPLICATION_NAME: &str = "onestep listen";

/// How often a listening session deletes the registrations of sessions that are gone.
const TIDY_EVERY: Duration = Duration::from_secs(60);

/// How a listening session connects: the DSN's configuration and TLS, kept at open.
#[derive(Clone)]
pub(crate) struct ListenConnect {
    config: tokio_postgres::Config,
    tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
}

impl ListenConnect {
    /// From the parsed DSN (`tls` built as the pool's is, for the TLS modes that use it).
    pub(crate) fn new(
        parsed: &ParsedDsn,
        tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
    ) -> Self {
        let mut config = parsed.config.clone();
        config.application_name(LISTEN_APPLICATION_NAME);
        if config.get_connect_timeout().is_none() {
            // A server that does not answer is tried again (the API polls meanwhile).
            config.connect_timeout(Duration::from_secs(15));
        }
        // A dead peer is noticed by the keepalives within about a minute even when no
        // notification and no clean-up is due.
        config.keepalives(true);
        config.keepalives_idle(Duration::from_secs(30));
        config.keepalives_interval(Duration::from_secs(10));
        config.keepalives_retries(3);
        config.ssl_mode(match parsed.tls {
            TlsMode::Disable => tokio_postgres::config::SslMode::Disable,
            TlsMode::Require => tokio_postgres::config::SslMode::Require,
            _ => tokio_postgres::config::SslMode::Prefer,
        });
        ListenConnect { config, tls }
    }

    /// Connects, and drives the connection in a task that forwards its notifications (and,
    /// last, the error or end of the connection) to the receiver.
    async fn connect(
        &self,
    ) -> OpResult<(
        tokio_postgres::Client,
        tokio::sync::mpsc::UnboundedReceiver<Message>,
    )> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let client = match &self.tls {
            None => {
                let (client, connection) = self.config.connect(tokio_postgres::NoTls).await?;
                tokio::spawn(drive(connection, tx));
                client
            }
            Some(tls) => {
                let (client, connection) = self.config.connect(tls.clone()).await?;
                tokio::spawn(drive(connection, tx));
                client
            }
        };
        Ok((client, rx))
    }
}

/// What the connection task forwards.
enum Message {
    Notification(String),
    Lost(Option<tokio_postgres::Error>),
}

/// Polls the connection (which also carries the client's statements) until it ends.
async fn drive<S, T>(
    mut connection: tokio_postgres::Connection<S, T>,
    tx: tokio::sync::mpsc::UnboundedSender<Message>,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    loop {
        match std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            Some(Ok(AsyncMessage::Notification(n))) => {
                if tx
                    .send(Message::Notification(n.payload().to_owned()))
                    .is_err()
                {
                    return;
                }
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                let _ = tx.send(Message::Lost(Some(e)));
                return;
            }
            None => {
                let _ = tx.send(Message::Lost(None));
                return;
            }
        }
    }
}

/// Reads a notification's payload, `id version,id version,…`, into the sink; false when any
/// part is malformed (the sink is then told to read what it waits for).
fn deliver(payload: &str, sink: &dyn ChangeSink) -> bool {
    let mut whole = true;
    for item in payload.split(',') {
        let parsed = item.trim().split_once(' ').and_then(|(id, version)| {
            Some((
                Uuid::parse_str(id).ok()?,
                version.trim().parse::<i64>().ok()?,
            ))
        });
        match parsed {
            Some((id, version)) => sink.changed(id, version),
            None => whole = false,
        }
    }
    whole
}

impl PgBackend {
    /// One listening session (module docs), until `stop` or its loss.
    async fn listen_once(
        &self,
        connect: &ListenConnect,
        sink: &Arc<dyn ChangeSink>,
        stop: &CancellationToken,
    ) -> OpResult<()> {
        let names = self.tables();
        let listeners = q(&listeners_table(names));
        let (client, mut messages) = tokio::select! {
            c = connect.connect() => c?,
            () = stop.cancelled() => return Ok(()),
        };
        client
            .batch_execute(&format!("LISTEN {}", q(&notify_channel(names))))
            .await?;
        let register = format!(
            "INSERT INTO {listeners} (pid) VALUES (pg_backend_pid()) ON CONFLICT (pid) DO NOTHING"
        );
        // Registrations whose session is gone: a listener killed without unregistering (or
        // whose pid a later session reuses: then it only keeps the trigger notifying).
        let tidy = format!(
            "DELETE FROM {listeners} WHERE pid NOT IN (SELECT pid FROM pg_catalog.pg_stat_activity)"
        );
        client.batch_execute(&register).await?;
        client.batch_execute(&tidy).await?;
        sink.listening();
        let mut tidy_at = tokio::time::interval(TIDY_EVERY);
        tidy_at.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tidy_at.tick().await;
        loop {
            tokio::select! {
                m = messages.recv() => match m {
                    Some(Message::Notification(payload)) => {
                        if !deliver(&payload, sink.as_ref()) {
                            tracing::warn!(payload = %payload.chars().take(200).collect::<String>(), "a change notification that does not read as `id version,…`; reading the waited executions instead");
                            sink.unreadable();
                        }
                    }
                    Some(Message::Lost(Some(e))) => return Err(OpError::Db(e)),
                    Some(Message::Lost(None)) | None => {
                        return Err(OpError::Pool(
                            onestep_core::ConnectorKind::Disconnected,
                            "the listening session ended".into(),
                        ));
                    }
                },
                _ = tidy_at.tick() => {
                    // Also proves the session alive: a half-open connection fails here.
                    client.batch_execute(&register).await?;
                    client.batch_execute(&tidy).await?;
                }
                () = stop.cancelled() => {
                    let _ = client
                        .batch_execute(&format!(
                            "DELETE FROM {listeners} WHERE pid = pg_backend_pid()"
                        ))
                        .await;
                    return Ok(());
                }
            }
        }
    }
}

#[async_trait::async_trait]
impl ChangeListener for PgBackend {
    async fn listen(
        &self,
        sink: Arc<dyn ChangeSink>,
        stop: CancellationToken,
    ) -> Result<(), ExecutionError> {
        let Some(connect) = self.inner.listen.as_ref() else {
            return Err(ExecutionError::invalid(
                "these tables have no notify trigger: run `onestep migrate --upgrade` \
                 (docs/postgres.md#change-notifications)",
            ));
        };
        self.listen_once(connect, &sink, &stop)
            .await
            .map_err(|e| self.error(e, "listen"))
    }
}

/// The listener while the tables have the notify trigger (`SchemaFeatures::notify_trigger`).
impl ChangePort for PgBackend {
    fn change_port(&self) -> Option<Arc<dyn ChangeListener>> {
        self.inner
            .listen
            .is_some()
            .then(|| Arc::new(self.clone()) as Arc<dyn ChangeListener>)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Seen(Mutex<Vec<(Uuid, i64)>>);

    impl ChangeSink for Seen {
        fn listening(&self) {}
        fn changed(&self, id: Uuid, version: i64) {
            self.0.lock().expect("lock").push((id, version));
        }
        fn unreadable(&self) {}
    }

    #[test]
    fn payloads_read_as_ids_and_versions() {
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let seen = Seen::default();
        assert!(deliver(&format!("{a} 3,{b} 12"), &seen));
        assert_eq!(*seen.0.lock().expect("lock"), vec![(a, 3), (b, 12)]);
        let seen = Seen::default();
        // A malformed part is reported; the well-formed ones still count.
        assert!(!deliver(&format!("{a} 3,nope,{b} x,{b}"), &seen));
        assert_eq!(*seen.0.lock().expect("lock"), vec![(a, 3)]);
        assert!(!deliver("", &Seen::default()));
    }
}
