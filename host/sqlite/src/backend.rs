//! The backend object: options, opening (docs/sqlite.md#opening), closing, migration, and the
//! shared plumbing every operation uses: one writer connection, serialised in-process by a
//! mutex, every write in a `BEGIN IMMEDIATE` transaction; a few reader connections; every call
//! into SQLite on `tokio::task::spawn_blocking`; retries of `SQLITE_BUSY` through core's
//! transaction runner.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use onestep_core::backend::{UpgradeReport, UpgradeStep};
use onestep_core::names::TableNames;
use onestep_core::store::{
    StoreCore, StoreOptions, TransientBackoff, Tx, TxError, for_ddl, upgrade_then_close,
};
use onestep_core::{ConnectorKind, ExecutionError};
use rusqlite::{Connection, OpenFlags};

use crate::dsn::{Synchronous, parse_dsn};
use crate::errors::{OpError, OpResult, backend_error};
use crate::schema::{SchemaFeatures, SchemaReport, ensure_schema, validate_names};

/// How long a statement waits for another connection's (or process's) write lock before
/// `SQLITE_BUSY` (then retried by the transaction runner).
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Most reader connections kept open.
pub const MAX_READERS: usize = 4;

/// The library identity read at open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInfo {
    /// `sqlite_version()`.
    pub version_string: String,
}

/// The settings of a connection (docs/semantics.md#sessions), as `onestep check` shows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionState {
    /// Always `UTC`: instants are stored in UTC.
    pub time_zone: String,
    /// Always `SERIALIZABLE`: SQLite transactions are serializable.
    pub isolation: String,
    /// `PRAGMA journal_mode` (`wal`).
    pub journal_mode: String,
    /// `PRAGMA synchronous` (1 = NORMAL, 2 = FULL).
    pub synchronous: i64,
}

/// The connections of one opened database file.
pub(crate) struct Pool {
    path: PathBuf,
    synchronous: Synchronous,
    writer: Mutex<Option<Connection>>,
    readers: Mutex<Vec<Connection>>,
    max_readers: usize,
    closed: AtomicBool,
}

impl Pool {
    fn open_connection(&self) -> rusqlite::Result<Connection> {
        let c = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        configure(&c, self.synchronous)?;
        Ok(c)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding the lock leaves the connection usable; an open transaction is
    // rolled back before the next use.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The settings of every connection: `busy_timeout`, WAL, `synchronous`, foreign keys.
fn configure(c: &Connection, synchronous: Synchronous) -> rusqlite::Result<()> {
    c.busy_timeout(BUSY_TIMEOUT)?;
    let _mode: String = c.query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))?;
    c.execute_batch(&format!(
        "PRAGMA synchronous={}; PRAGMA foreign_keys=ON;",
        synchronous.pragma()
    ))?;
    c.set_prepared_statement_cache_capacity(64);
    Ok(())
}

/// What a [`SqliteBackend`] shares between its clones.
pub(crate) type Inner = StoreCore<Pool, ServerInfo, SchemaFeatures, Own>;

/// This backend's own shared state.
pub(crate) struct Own {
    /// The quoted executions table.
    pub(crate) t: String,
    /// The quoted attempts table.
    pub(crate) a: String,
    /// The quoted fairness-keys table (docs/semantics.md#fair-claim).
    pub(crate) k: String,
    /// When this handle last swept the keys of each task (the injected clock).
    pub(crate) sweeps: onestep_core::store::fair::SweepGate,
}

onestep_core::store_handle! {
    /// The embedded SQLite backend: implements the storage ports of `onestep_core::ports` over
    /// one database file. Cheap to clone (shared connections).
    pub struct SqliteBackend(Arc<Inner>);
    server: ServerInfo,
    report: SchemaReport,
    debug: [],
}

fn misconfigured(message: &str) -> ExecutionError {
    backend_error("open", ConnectorKind::Misconfigured, message, &[])
}

/// Runs a blocking call on tokio's blocking pool.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> OpResult<T> + Send + 'static,
) -> OpResult<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| OpError::Task(format!("the SQLite call did not finish: {e}")))?
}

/// Runs `f` in a `BEGIN IMMEDIATE` transaction on `c`: committed when it succeeds, rolled back
/// at once otherwise (docs/lease-protocol.md#refused-writes).
pub(crate) fn immediate<T>(
    c: &mut Connection,
    f: impl FnOnce(&mut Connection) -> OpResult<T>,
) -> OpResult<T> {
    if !c.is_autocommit() {
        c.execute_batch("ROLLBACK")?;
    }
    c.execute_batch("BEGIN IMMEDIATE")?;
    let out = f(c).and_then(|v| {
        c.execute_batch("COMMIT")?;
        Ok(v)
    });
    if out.is_err()
        && !c.is_autocommit()
        && let Err(e) = c.execute_batch("ROLLBACK")
    {
        tracing::debug!(error = %e, "rollback failed");
    }
    out
}

impl SqliteBackend {
    /// Opens the backend: parses the DSN, opens the file (creating it and its directory only
    /// with `auto_create`), sets WAL and `synchronous`, then performs readiness once.
    ///
    /// Errors are [`ExecutionError::InvalidArgument`] for bad options and
    /// [`ExecutionError::Backend`] (operation `open`) otherwise.
    pub async fn open(opts: StoreOptions) -> Result<Self, ExecutionError> {
        let tables = opts.validate()?;
        validate_names(&tables)?;
        let parsed = parse_dsn(&opts.dsn).map_err(|m| misconfigured(&m.0))?;
        let path = parsed.path.clone();
        let auto_create = opts.auto_create;
        let names = tables.clone();
        let sync = parsed.synchronous;
        let (writer, report) = blocking(move || {
            let exists = path.exists();
            if !exists && !auto_create {
                return Err(OpError::Domain(misconfigured(&format!(
                    "database file '{}' does not exist; `onestep migrate` creates it",
                    path.display()
                ))));
            }
            if !exists {
                create_parent(&path)?;
            }
            let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
            if auto_create {
                flags |= OpenFlags::SQLITE_OPEN_CREATE;
            }
            let mut c = Connection::open_with_flags(&path, flags)?;
            configure(&c, sync)?;
            let report = ensure_schema(&mut c, &names, auto_create)?;
            Ok((c, report))
        })
        .await
        .map_err(|e| e.into_execution_error("open", &[]))?;
        let server = ServerInfo {
            version_string: rusqlite::version().to_owned(),
        };
        let pool = Pool {
            path: parsed.path.clone(),
            synchronous: parsed.synchronous,
            writer: Mutex::new(Some(writer)),
            readers: Mutex::new(Vec::new()),
            max_readers: opts.pool_max.clamp(1, MAX_READERS),
            closed: AtomicBool::new(false),
        };
        let dsn = opts.dsn.trim().to_owned();
        let own = Own {
            t: crate::schema::q(&tables.executions),
            a: crate::schema::q(&tables.attempts),
            k: crate::schema::q(&crate::schema::keys_table(&tables)),
            sweeps: onestep_core::store::fair::SweepGate::default(),
        };
        let inner = StoreCore::settle(
            opts,
            tables,
            pool,
            Vec::new(),
            (server, report),
            |t| upgrade_command(&dsn, t),
            |_| own,
        );
        Ok(SqliteBackend {
            attempt_ids: onestep_core::ids::IdVersion::V7,
            inner: Arc::new(inner),
        })
    }

    /// Creates the tables if missing (the CLI's `onestep migrate`, with the file and its
    /// directory), then closes. Returns what was created.
    pub async fn migrate(opts: StoreOptions) -> Result<SchemaReport, ExecutionError> {
        let backend = SqliteBackend::open(for_ddl(opts)).await?;
        let report = backend.inner.report.clone();
        backend.close().await.map(|()| report)
    }

    /// `onestep migrate --upgrade`: creates what is missing, then closes.
    pub async fn upgrade(opts: StoreOptions) -> Result<UpgradeReport, ExecutionError> {
        upgrade_then_close(&SqliteBackend::open(for_ddl(opts)).await?).await
    }

    /// Adds the columns, then the indexes, the executions table lacks (idempotent).
    pub(crate) async fn upgrade_tables(&self) -> Result<UpgradeReport, ExecutionError> {
        let names = self.tables().clone();
        let attempts = names.attempts.clone();
        let (columns, indexes, parked) = self
            .write(move |_, c| {
                let columns = crate::schema::add_missing_columns(c, &names)?;
                let indexes = crate::schema::add_missing_indexes(c, &names)?;
                Ok((columns, indexes, crate::schema::allow_parked(c, &names)?))
            })
            .await
            .map_err(|e| self.error(e, "upgrade"))?;
        let step = |added: String| UpgradeStep {
            added,
            form: "default".to_owned(),
        };
        let parked = parked.then(|| UpgradeStep {
            added: format!("status 'parked' on {attempts} (its status CHECK widened)"),
            form: "writable_schema (the stored rows are unchanged)".to_owned(),
        });
        Ok(UpgradeReport {
            created: self.schema_report().created.clone(),
            steps: (columns.into_iter().map(|c| step(format!("column {c}"))))
                .chain(indexes.into_iter().map(|i| step(format!("index {i}"))))
                .chain(parked)
                .collect(),
        })
    }

    /// Closes every connection; the ports fail afterwards.
    pub async fn close(&self) -> Result<(), ExecutionError> {
        let pool = &self.inner.pool;
        pool.closed.store(true, Ordering::SeqCst);
        let writer = lock(&pool.writer).take();
        let readers = std::mem::take(&mut *lock(&pool.readers));
        drop(readers);
        if let Some(c) = writer {
            c.close()
                .map_err(|(_, e)| self.error(OpError::Db(e), "close"))?;
        }
        Ok(())
    }

    /// The per-claim cap of each maintenance step.
    pub fn reclaim_batch_size(&self) -> u32 {
        self.inner.reclaim_batch_size
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.pool.path
    }

    /// The settings of a reader connection.
    pub async fn session_state(&self) -> Result<SessionState, ExecutionError> {
        self.read(|_, c| {
            let journal_mode: String = c.query_row("PRAGMA journal_mode", [], |r| r.get(0))?;
            let synchronous: i64 = c.query_row("PRAGMA synchronous", [], |r| r.get(0))?;
            Ok(SessionState {
                time_zone: "UTC".to_owned(),
                isolation: "SERIALIZABLE".to_owned(),
                journal_mode,
                synchronous,
            })
        })
        .await
        .map_err(|e| self.error(e, "session"))
    }

    /// Runs `f` on the writer connection inside a `BEGIN IMMEDIATE` transaction (committed when
    /// it succeeds), on the blocking pool.
    pub(crate) async fn write<T: Send + 'static>(
        &self,
        f: impl FnOnce(&SqliteBackend, &mut Connection) -> OpResult<T> + Send + 'static,
    ) -> OpResult<T> {
        let b = self.clone();
        blocking(move || {
            let mut guard = lock(&b.inner.pool.writer);
            let c = guard.as_mut().ok_or(OpError::Closed)?;
            immediate(c, |c| f(&b, c))
        })
        .await
    }

    /// Runs `f` on a reader connection (autocommit reads), on the blocking pool.
    pub(crate) async fn read<T: Send + 'static>(
        &self,
        f: impl FnOnce(&SqliteBackend, &Connection) -> OpResult<T> + Send + 'static,
    ) -> OpResult<T> {
        let b = self.clone();
        blocking(move || {
            let pool = &b.inner.pool;
            if pool.closed.load(Ordering::SeqCst) {
                return Err(OpError::Closed);
            }
            let taken = lock(&pool.readers).pop();
            let c = match taken {
                Some(c) => c,
                None => pool.open_connection()?,
            };
            let out = f(&b, &c);
            let mut readers = lock(&pool.readers);
            if readers.len() < pool.max_readers && !pool.closed.load(Ordering::SeqCst) {
                readers.push(c);
            }
            out
        })
        .await
    }

    /// The connection of this crate's integration tests (feature `test-support`): a new
    /// connection to the same file.
    #[cfg(feature = "test-support")]
    #[doc(hidden)]
    pub fn test_connection(&self) -> rusqlite::Result<Connection> {
        self.inner.pool.open_connection()
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

    /// The quoted executions table.
    pub(crate) fn t(&self) -> &str {
        &self.inner.t
    }

    /// The quoted attempts table.
    pub(crate) fn a(&self) -> &str {
        &self.inner.a
    }

    /// The quoted fairness-keys table.
    pub(crate) fn k(&self) -> &str {
        &self.inner.k
    }

    fn tx(&self) -> Tx<'_> {
        Tx {
            secrets: &self.inner.secrets,
            backoff: TransientBackoff::default(),
        }
    }

    // run, retry_raw (SQLITE_BUSY/LOCKED before COMMIT), write_resolving_ambiguity, error.
    onestep_core::tx_methods!(OpError, tokio::time::sleep);
}

/// Creates the directory of a new database file (`auto_create`, `onestep migrate`).
fn create_parent(path: &Path) -> OpResult<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| {
            OpError::Domain(misconfigured(&format!(
                "cannot create the directory '{}': {e}",
                dir.display()
            )))
        })?;
    }
    Ok(())
}

/// The command that upgrades `names` in the file of `dsn`.
fn upgrade_command(dsn: &str, names: &TableNames) -> String {
    format!(
        "onestep migrate --upgrade --dsn '{dsn}' --table {} --attempts-table {}",
        names.executions, names.attempts
    )
}
