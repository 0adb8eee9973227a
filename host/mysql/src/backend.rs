//! The backend object: options, opening (docs/semantics.md#opening-a-backend), closing, migration, and the shared plumbing
//! every operation uses (connections, the clock, retries, error mapping).

use std::sync::Arc;

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, Pool, Transaction, TxOpts};
use onestep_core::store::{StoreCore, StoreOptions, TransientBackoff, Tx, TxError, for_ddl};
use onestep_core::{ConnectorKind, ExecutionError};

use crate::dsn::parse_dsn;
use crate::errors::{OpError, OpResult, backend_error, classify};
use crate::faults::Fault;
#[cfg(not(feature = "test-support"))]
use crate::faults::Faults;
use crate::schema::{DdlStyle, SchemaFeatures, SchemaReport, ensure_schema};
use crate::session::{
    ServerInfo, SessionState, build_pool, gate_server_version, read_session_state,
};

/// The fault counters of this crate's integration tests (feature `test-support`).
#[cfg(feature = "test-support")]
pub use crate::faults::Faults;

/// What a [`MySqlBackend`] shares between its clones: the state of every backend plus
/// [`Own`].
pub(crate) type Inner = StoreCore<Pool, ServerInfo, SchemaFeatures, Own>;

/// This backend's own shared state.
pub(crate) struct Own {
    /// The features of `report`, copied at open.
    pub(crate) features: SchemaFeatures,
    pub(crate) retry: TransientBackoff,
    pub(crate) faults: Faults,
    /// When this handle's fair claim last swept (docs/semantics.md#fair-claim, step 1).
    pub(crate) last_sweep: onestep_core::store::fair::SweepGate,
}

onestep_core::store_handle! {
    /// The MySQL/MariaDB backend: implements [`onestep_core::ports::ExecutionStore`] and
    /// [`onestep_core::ports::LeaseStore`]. Cheap to clone (shared pool).
    pub struct MySqlBackend(Arc<Inner>);
    server: ServerInfo,
    report: SchemaReport,
    debug: [features],
}

impl MySqlBackend {
    /// Opens the backend: parses the DSN, builds the pool, then performs readiness once
    /// (docs/semantics.md#opening-a-backend): server gate (MySQL ≥ 8.0.16 or MariaDB ≥ 10.6, recognised by name), serialised
    /// `auto_create` or the existence check, and schema-feature detection.
    ///
    /// Errors are [`ExecutionError::InvalidArgument`] for bad options and
    /// [`ExecutionError::Backend`] (operation `open`) otherwise; none carries the DSN or password.
    pub async fn open(opts: StoreOptions) -> Result<Self, ExecutionError> {
        Self::open_with_ddl(opts, DdlStyle::Onestep).await
    }

    /// [`Self::open`] whose `auto_create` emits `ddl_style`'s DDL: [`DdlStyle::Reference`]
    /// creates the reference's tables, for tests and benchmarks of reference-created tables.
    pub async fn open_with_ddl(
        opts: StoreOptions,
        ddl_style: DdlStyle,
    ) -> Result<Self, ExecutionError> {
        let tables = opts.validate()?;
        let parsed = parse_dsn(&opts.dsn)
            .map_err(|m| backend_error("open", ConnectorKind::Misconfigured, &m.0, &[]))?;
        let secrets = parsed.secrets.clone();
        let pool = build_pool(&parsed, opts.pool_min, opts.pool_max)
            .map_err(|e| ExecutionError::invalid(e.0))?;
        let ready = async {
            let mut conn = pool.get_conn().await?;
            let version: Option<String> = conn.query_first("SELECT VERSION()").await?;
            let server = gate_server_version(&version.unwrap_or_default()).map_err(|m| {
                OpError::Domain(backend_error(
                    "open",
                    ConnectorKind::Misconfigured,
                    &m.0,
                    &[],
                ))
            })?;
            let report = ensure_schema(
                &mut conn,
                &tables,
                opts.auto_create,
                ddl_style,
                crate::schema::IdColumn::for_server(&server),
            )
            .await?;
            Ok::<_, OpError>((server, report))
        }
        .await;
        let ready = match ready {
            Ok(v) => v,
            Err(e) => {
                let _ = pool.disconnect().await;
                return Err(e.into_execution_error("open", &secrets));
            }
        };
        let upgrade_command = |t: &_| crate::upgrade::upgrade_command(&parsed.opts, t);
        let own = |features: &SchemaFeatures| Own {
            features: *features,
            retry: TransientBackoff::default(),
            faults: Faults::default(),
            last_sweep: onestep_core::store::fair::SweepGate::default(),
        };
        Ok(MySqlBackend {
            attempt_ids: onestep_core::ids::IdVersion::V7,
            inner: Arc::new(StoreCore::settle(
                opts,
                tables,
                pool,
                secrets,
                ready,
                upgrade_command,
                own,
            )),
        })
    }

    /// Creates the table pair if missing (the CLI's `onestep migrate`), then closes. Equivalent to
    /// opening with `auto_create = true`. Returns what was created.
    pub async fn migrate(opts: StoreOptions) -> Result<SchemaReport, ExecutionError> {
        Self::migrate_with_ddl(opts, DdlStyle::Onestep).await
    }

    /// [`Self::migrate`] with `ddl_style`'s DDL (see [`Self::open_with_ddl`]).
    pub async fn migrate_with_ddl(
        opts: StoreOptions,
        ddl_style: DdlStyle,
    ) -> Result<SchemaReport, ExecutionError> {
        let backend = MySqlBackend::open_with_ddl(for_ddl(opts), ddl_style).await?;
        let report = backend.inner.report.clone();
        backend.close().await.map(|()| report)
    }

    /// Disconnects the pool (waits for checked-out connections to come back).
    pub async fn close(&self) -> Result<(), ExecutionError> {
        self.inner
            .pool
            .clone()
            .disconnect()
            .await
            .map_err(|e| self.error(e.into(), "close"))
    }

    /// The session state of a pooled connection (time zone, isolation, connection id); for
    /// diagnostics and tests of the session pinning (docs/semantics.md#sessions).
    pub async fn session_state(&self) -> Result<SessionState, ExecutionError> {
        let r = async {
            let mut conn = self.inner.pool.get_conn().await?;
            Ok(read_session_state(&mut conn, &self.inner.server).await?)
        }
        .await;
        r.map_err(|e: OpError| self.error(e, "session"))
    }

    /// The pool. Connections taken from it are reset when they go back (unlike [`Self::conn`]).
    pub(crate) fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// The pool, for this crate's integration tests that inspect the tables or the session
    /// directly (feature `test-support`; not part of the supported API).
    #[cfg(feature = "test-support")]
    #[doc(hidden)]
    pub fn test_pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// The fault counters, for this crate's integration tests (feature `test-support`).
    #[cfg(feature = "test-support")]
    #[doc(hidden)]
    pub fn faults(&self) -> &Faults {
        &self.inner.faults
    }

    pub(crate) fn t(&self) -> &str {
        &self.inner.names.executions
    }

    pub(crate) fn a(&self) -> &str {
        &self.inner.names.attempts
    }

    /// The attempt-diagnostics table, when it exists.
    pub(crate) fn d(&self) -> Option<String> {
        self.inner.diagnostics_table()
    }

    /// The trace-context table, when traceparents are written and read.
    pub(crate) fn tr(&self) -> Option<String> {
        self.inner.traces_table()
    }

    /// The trace-context table when it exists (purge deletes its rows whether or not traces
    /// are on).
    pub(crate) fn tr_existing(&self) -> Option<String> {
        self.inner.existing_traces_table()
    }

    /// A pooled connection for one of this crate's operations. It goes back to the pool without
    /// `COM_RESET_CONNECTION`: the operations only run DML and reads inside transactions (an
    /// unfinished one is rolled back by the pool) and never change session state, so the pinned
    /// session of docs/semantics.md#sessions survives, and so does the connection's prepared-statement cache —
    /// a reset would drop both and force the setup commands plus a fresh PREPARE of every
    /// statement on the next use. Connections taken from [`Self::pool`] are still reset.
    pub(crate) async fn conn(&self) -> OpResult<Conn> {
        let mut conn = self.inner.pool.get_conn().await?;
        conn.reset_connection(false);
        Ok(conn)
    }

    /// The transaction runner over this backend's secrets and backoff.
    fn tx(&self) -> Tx<'_> {
        Tx {
            secrets: &self.inner.secrets,
            backoff: self.inner.retry,
        }
    }

    // run, retry_raw (deadlock 1213, lock wait 1205 and connection losses before COMMIT are
    // repeated; docs/semantics.md#error-classification), write_resolving_ambiguity, error.
    onestep_core::tx_methods!(OpError, tokio::time::sleep);
}

/// Starts a READ COMMITTED transaction (the session is pinned; stated again for clarity).
pub(crate) async fn begin(conn: &mut Conn) -> OpResult<Transaction<'_>> {
    Ok(conn.start_transaction(TxOpts::default()).await?)
}

/// Commits, telling an ambiguous outcome (connection lost during COMMIT) apart from a failure
/// that certainly rolled back. Honours the injected [`Faults`].
pub(crate) async fn commit(backend: &MySqlBackend, tx: Transaction<'_>) -> OpResult<()> {
    let faults = &backend.inner.faults;
    if faults.take(Fault::LostBeforeCommit) {
        drop(tx);
        return Err(OpError::Db(mysql_async::Error::Io(
            mysql_async::IoError::Io(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "injected: connection lost before commit",
            )),
        )));
    }
    if faults.take(Fault::DeadlockBeforeCommit) {
        drop(tx);
        return Err(OpError::Db(mysql_async::Error::Server(
            mysql_async::ServerError {
                code: crate::errors::codes::DEADLOCK,
                message: "injected: Deadlock found when trying to get lock".into(),
                state: "40001".into(),
            },
        )));
    }
    match tx.commit().await {
        Ok(()) => {
            if faults.take(Fault::CommitAckLost) {
                return Err(OpError::CommitUnknown(mysql_async::Error::Io(
                    mysql_async::IoError::Io(std::io::Error::new(
                        std::io::ErrorKind::ConnectionReset,
                        "injected: connection lost during commit",
                    )),
                )));
            }
            Ok(())
        }
        Err(e) if classify(&e) == ConnectorKind::Disconnected => Err(OpError::CommitUnknown(e)),
        Err(e) => Err(OpError::Db(e)),
    }
}
