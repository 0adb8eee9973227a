//! The backend object: options, opening (docs/postgres.md#opening), closing, migration, TLS,
//! and the shared plumbing every operation uses (connections, the clock, retries, error
//! mapping).

use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use onestep_core::store::{
    SetupError, StoreCore, StoreOptions, TransientBackoff, Tx, TxError, for_ddl,
};
use onestep_core::{ConnectorKind, ExecutionError};

use crate::dsn::{ParsedDsn, TlsMode, parse_dsn};
use crate::errors::{OpError, OpResult, backend_error, classify, db_message};
use crate::schema::{SchemaFeatures, SchemaReport, ensure_schema, validate_names};

/// The oldest server accepted (`server_version_num`): PostgreSQL 12.
pub const MIN_SERVER_VERSION_NUM: i32 = 120000;

/// The server identity read at open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInfo {
    /// `SHOW server_version`.
    pub version_string: String,
    /// `SHOW server_version_num`.
    pub version_num: i32,
}

/// The session state of a pooled connection (docs/semantics.md#sessions).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionState {
    /// `SHOW TimeZone`.
    pub time_zone: String,
    /// `SHOW transaction_isolation`.
    pub isolation: String,
    /// `pg_backend_pid()`.
    pub backend_pid: i32,
}

/// What a [`PgBackend`] shares between its clones: the state of every backend plus [`Own`].
pub(crate) type Inner = StoreCore<Pool, ServerInfo, SchemaFeatures, Own>;

/// This backend's own shared state.
pub(crate) struct Own {
    /// How the API's listening session connects (docs/postgres.md#change-notifications), when
    /// the tables have the notify trigger.
    pub(crate) listen: Option<crate::changes::ListenConnect>,
    /// The statements prepared from the table names at open.
    pub(crate) sql: crate::sql::Statements,
    /// The fair claim's statements, when the tables have the keys table
    /// (docs/semantics.md#fair-claim).
    pub(crate) fair: Option<crate::fair::FairSql>,
    /// When this handle last swept for fairness keys.
    pub(crate) gate: onestep_core::store::fair::SweepGate,
    /// Keys this handle's sweeps inserted since it last analyzed the keys table
    /// (docs/postgres.md#fair-claim).
    pub(crate) keys_inserted: std::sync::atomic::AtomicU64,
}

onestep_core::store_handle! {
    /// The PostgreSQL backend: implements the storage ports of `onestep_core::ports`. Cheap to
    /// clone (shared pool).
    pub struct PgBackend(Arc<Inner>);
    server: ServerInfo,
    report: SchemaReport,
    debug: [],
}

/// The rustls client configuration: the webpki roots plus the PEM file `root_cert`.
fn tls_config(root_cert: Option<&str>) -> Result<rustls::ClientConfig, SetupError> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.into(),
    };
    if let Some(path) = root_cert {
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(path)
            .map_err(|e| SetupError(format!("sslrootcert '{path}': {e}")))?
            .collect::<Result<_, _>>()
            .map_err(|e| SetupError(format!("sslrootcert '{path}': {e}")))?;
        if certs.is_empty() {
            return Err(SetupError(format!(
                "sslrootcert '{path}' holds no certificate"
            )));
        }
        for c in certs {
            roots
                .add(c)
                .map_err(|e| SetupError(format!("sslrootcert '{path}': {e}")))?;
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| SetupError(format!("TLS client configuration: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth())
}

/// The TLS connector of the DSN's TLS mode (`None`: `sslmode=disable`).
fn tls_connector(
    parsed: &ParsedDsn,
) -> Result<Option<tokio_postgres_rustls::MakeRustlsConnect>, SetupError> {
    Ok(match parsed.tls {
        TlsMode::Disable => None,
        _ => Some(tokio_postgres_rustls::MakeRustlsConnect::new(tls_config(
            parsed.root_cert.as_deref(),
        )?)),
    })
}

fn build_pool(
    parsed: &ParsedDsn,
    tls: Option<tokio_postgres_rustls::MakeRustlsConnect>,
    pool_max: usize,
) -> Result<Pool, SetupError> {
    let mut config = parsed.config.clone();
    let manager_config = ManagerConfig {
        recycling_method: RecyclingMethod::Fast,
    };
    let manager = match tls {
        None => {
            config.ssl_mode(tokio_postgres::config::SslMode::Disable);
            Manager::from_config(config, tokio_postgres::NoTls, manager_config)
        }
        Some(tls) => {
            config.ssl_mode(if parsed.tls == TlsMode::Require {
                tokio_postgres::config::SslMode::Require
            } else {
                tokio_postgres::config::SslMode::Prefer
            });
            Manager::from_config(config, tls, manager_config)
        }
    };
    Pool::builder(manager)
        .max_size(pool_max.max(1))
        .runtime(Runtime::Tokio1)
        .wait_timeout(Some(Duration::from_secs(30)))
        .create_timeout(Some(Duration::from_secs(15)))
        .build()
        .map_err(|e| SetupError(format!("cannot build the connection pool: {e}")))
}

impl PgBackend {
    /// Opens the backend: parses the DSN, builds the pool, then performs readiness once
    /// (docs/postgres.md#opening): server gate (PostgreSQL ≥ 12), serialised `auto_create` or
    /// the existence check, and schema-feature detection.
    ///
    /// Errors are [`ExecutionError::InvalidArgument`] for bad options and
    /// [`ExecutionError::Backend`] (operation `open`) otherwise; none carries the DSN or password.
    pub async fn open(opts: StoreOptions) -> Result<Self, ExecutionError> {
        let tables = opts.validate()?;
        validate_names(&tables)?;
        let parsed = parse_dsn(&opts.dsn)
            .map_err(|m| backend_error("open", ConnectorKind::Misconfigured, &m.0, &[]))?;
        let secrets = parsed.secrets.clone();
        let tls = tls_connector(&parsed)
            .map_err(|m| backend_error("open", ConnectorKind::Misconfigured, &m.0, &secrets))?;
        let listen = crate::changes::ListenConnect::new(&parsed, tls.clone());
        let pool = build_pool(&parsed, tls, opts.pool_max)
            .map_err(|m| backend_error("open", ConnectorKind::Misconfigured, &m.0, &secrets))?;
        let ready = async {
            let mut conn = pool.get().await?;
            let row = conn
                .query_one(
                    "SELECT current_setting('server_version'), \
                     current_setting('server_version_num')::int",
                    &[],
                )
                .await?;
            let server = ServerInfo {
                version_string: row.try_get(0)?,
                version_num: row.try_get(1)?,
            };
            if server.version_num < MIN_SERVER_VERSION_NUM {
                return Err(OpError::Domain(backend_error(
                    "open",
                    ConnectorKind::Misconfigured,
                    &format!(
                        "unsupported server: PostgreSQL {} (12 or newer required)",
                        server.version_string
                    ),
                    &[],
                )));
            }
            let client: &mut tokio_postgres::Client = &mut conn;
            let report = ensure_schema(client, &tables, opts.auto_create).await?;
            Ok::<_, OpError>((server, report))
        }
        .await;
        let ready = match ready {
            Ok(v) => v,
            Err(e) => {
                pool.close();
                return Err(e.into_execution_error("open", &secrets));
            }
        };
        let sql = crate::sql::Statements::new(
            &tables,
            opts.reclaim_batch_size,
            ready.1.features.priority_columns,
        );
        let fair = (ready.1.features.fair_keys && ready.1.features.priority_columns)
            .then(|| crate::fair::FairSql::new(&tables));
        let inner = StoreCore::settle(
            opts,
            tables,
            pool,
            secrets,
            ready,
            |t| crate::upgrade::upgrade_command(&parsed, t),
            |features| Own {
                listen: features.notify_trigger.then_some(listen),
                sql,
                fair,
                gate: onestep_core::store::fair::SweepGate::default(),
                keys_inserted: std::sync::atomic::AtomicU64::new(0),
            },
        );
        Ok(PgBackend {
            attempt_ids: onestep_core::ids::IdVersion::V7,
            inner: Arc::new(inner),
        })
    }

    /// Creates the table pair if missing (the CLI's `onestep migrate`), then closes. Equivalent to
    /// opening with `auto_create = true`. Returns what was created.
    pub async fn migrate(opts: StoreOptions) -> Result<SchemaReport, ExecutionError> {
        let backend = PgBackend::open(for_ddl(opts)).await?;
        let report = backend.inner.report.clone();
        backend.close().await.map(|()| report)
    }

    /// Closes the pool (connections are dropped as they come back).
    pub async fn close(&self) -> Result<(), ExecutionError> {
        self.inner.pool.close();
        Ok(())
    }

    /// The per-claim cap of each maintenance step.
    pub fn reclaim_batch_size(&self) -> u32 {
        self.inner.reclaim_batch_size
    }

    /// The session state of a pooled connection (time zone, isolation, backend pid); for
    /// diagnostics and tests of the session pinning (docs/semantics.md#sessions).
    pub async fn session_state(&self) -> Result<SessionState, ExecutionError> {
        let r = async {
            let conn = self.conn().await?;
            let row = conn
                .query_one(
                    "SELECT current_setting('TimeZone'), \
                     current_setting('transaction_isolation'), pg_backend_pid()",
                    &[],
                )
                .await?;
            Ok::<_, OpError>(SessionState {
                time_zone: row.try_get(0)?,
                isolation: row.try_get(1)?,
                backend_pid: row.try_get(2)?,
            })
        }
        .await;
        r.map_err(|e| self.error(e, "session"))
    }

    /// The pool, for this crate's integration tests that inspect the tables directly (feature
    /// `test-support`; not part of the supported API).
    #[cfg(feature = "test-support")]
    #[doc(hidden)]
    pub fn test_pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// The attempt-diagnostics table (quoted), when it exists and diagnostics are kept.
    pub(crate) fn d(&self) -> Option<String> {
        self.inner.diagnostics_table().map(|n| crate::schema::q(&n))
    }

    /// The trace-context table (quoted), when traceparents are written and read.
    pub(crate) fn tr(&self) -> Option<String> {
        self.inner.traces_table().map(|n| crate::schema::q(&n))
    }

    /// The trace-context table (quoted) when it exists.
    pub(crate) fn tr_existing(&self) -> Option<String> {
        self.inner
            .existing_traces_table()
            .map(|n| crate::schema::q(&n))
    }

    pub(crate) fn sql(&self) -> &crate::sql::Statements {
        &self.inner.sql
    }

    /// A pooled connection.
    pub(crate) async fn conn(&self) -> OpResult<deadpool_postgres::Object> {
        Ok(self.inner.pool.get().await?)
    }

    /// The transaction runner over this backend's secrets and the default backoff.
    fn tx(&self) -> Tx<'_> {
        Tx {
            secrets: &self.inner.secrets,
            backoff: TransientBackoff::default(),
        }
    }

    // run, retry_raw (serialization failures, deadlocks, lock timeouts, cancelled statements
    // and connection losses before COMMIT are repeated: `crate::errors::is_retryable_before_commit`),
    // write_resolving_ambiguity, error.
    onestep_core::tx_methods!(OpError, tokio::time::sleep);
}

/// Commits, telling an ambiguous outcome (connection lost during COMMIT) apart from a failure
/// that certainly rolled back.
pub(crate) async fn commit(tx: deadpool_postgres::Transaction<'_>) -> OpResult<()> {
    match tx.commit().await {
        Ok(()) => Ok(()),
        Err(e) if e.code().is_none() && classify(&e) == ConnectorKind::Disconnected => {
            Err(OpError::CommitUnknown(db_message(&e)))
        }
        Err(e) => Err(OpError::Db(e)),
    }
}
