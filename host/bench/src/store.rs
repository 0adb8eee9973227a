//! The one place of the benchmarks that knows the concrete backends: opening one for a round
//! (with the benchmark's knobs: reference-shaped tables, diagnostics off, attempt ids of a chosen
//! version), the throw-away database, history seeding, `migrate --upgrade` between rounds and
//! the database server's process for CPU figures. Everything else in this crate uses the
//! backend through [`onestep_core::Backend`] and its ports. The SQL of all of it stays in the
//! backend crates (their `bench-support` feature).

use std::time::Instant;

use anyhow::{Context, Result};
use onestep_core::history::HistorySeed;
use onestep_core::ids::IdVersion;
use onestep_core::store::StoreOptions;
use onestep_core::{Backend, ExecutionError};
use onestep_mysql::{DdlStyle, Flavor, MySqlBackend};
use onestep_postgres::PgBackend;
use onestep_sqlite::SqliteBackend;

use crate::cpu;
use crate::retention::UpgradeFigures;

/// What a DSN's scheme names: `postgres://`, `postgresql[+driver]://` → PostgreSQL, anything
/// else MySQL/MariaDB (whose parser reports a bad scheme).
fn is_postgres(dsn: &str) -> bool {
    let scheme = dsn.trim().split_once("://").map_or("", |(s, _)| s);
    onestep_postgres::dsn::is_postgres_scheme(scheme)
}

/// Whether a DSN names an embedded SQLite file (`sqlite://`).
fn is_sqlite(dsn: &str) -> bool {
    dsn.trim().starts_with("sqlite://")
}

/// How one round opens the backend.
#[derive(Debug, Clone)]
pub(crate) struct OpenOptions {
    pub dsn: String,
    pub pool_max: usize,
    /// Persist attempt diagnostics (`--no-diagnostics` turns them off).
    pub diagnostics: bool,
    /// Create missing tables with the reference's DDL (`--reference-tables`).
    pub reference_tables: bool,
    /// The first round (PostgreSQL's reference-shaped tables are created before it only).
    pub first_round: bool,
    /// The version of the attempt ids the claims make (`--ids`).
    pub attempt_ids: IdVersion,
}

/// An opened backend of a benchmark round.
#[derive(Debug, Clone)]
pub(crate) enum BenchStore {
    Mysql(MySqlBackend),
    Postgres(PgBackend),
    Sqlite(SqliteBackend),
}

impl BenchStore {
    /// Opens the backend the DSN names, creating missing tables.
    pub async fn open(o: &OpenOptions) -> Result<Self> {
        if is_sqlite(&o.dsn) {
            let mut opts = StoreOptions::new(o.dsn.clone());
            opts.pool_max = o.pool_max;
            opts.diagnostics = o.diagnostics;
            let b = SqliteBackend::open(opts)
                .await
                .context("cannot open the backend")?;
            return Ok(BenchStore::Sqlite(b.with_attempt_ids(o.attempt_ids)));
        }
        if is_postgres(&o.dsn) {
            let mut opts = StoreOptions::new(o.dsn.clone());
            opts.pool_max = o.pool_max;
            if o.reference_tables && o.first_round {
                onestep_postgres::upgrade::create_reference_shaped(opts.clone())
                    .await
                    .context("cannot create reference-shaped tables")?;
            }
            opts.diagnostics = o.diagnostics;
            let b = PgBackend::open(opts)
                .await
                .context("cannot open the backend")?;
            Ok(BenchStore::Postgres(b.with_attempt_ids(o.attempt_ids)))
        } else {
            let mut opts = StoreOptions::new(o.dsn.clone());
            opts.pool_max = o.pool_max;
            opts.diagnostics = o.diagnostics;
            let ddl = if o.reference_tables {
                DdlStyle::Reference
            } else {
                DdlStyle::Onestep
            };
            let b = MySqlBackend::open_with_ddl(opts, ddl)
                .await
                .context("cannot open the backend")?;
            Ok(BenchStore::Mysql(b.with_attempt_ids(o.attempt_ids)))
        }
    }

    /// Whether the tables have the `claimable` column and indexes (MySQL/MariaDB) or our
    /// expiry and status indexes (PostgreSQL, whose partial indexes already hold only live
    /// rows; docs/postgres.md#schema).
    pub fn claimable_indexes(&self) -> bool {
        match self {
            BenchStore::Mysql(b) => b.schema_report().features.claimable_column,
            BenchStore::Postgres(b) => b.schema_report().upgrade_command.is_none(),
            BenchStore::Sqlite(b) => b.schema_report().upgrade_command.is_none(),
        }
    }

    /// Writes the finished history of `--history` (docs/benchmarks.md#history).
    pub async fn seed_history(&self, seed: &HistorySeed) -> Result<u64, ExecutionError> {
        match self {
            BenchStore::Mysql(b) => b.seed_history(seed).await,
            BenchStore::Postgres(b) => b.seed_history(seed).await,
            BenchStore::Sqlite(b) => b.seed_history(seed).await,
        }
    }

    /// The database server's process(es) on this machine, for its CPU figures; `None` when it
    /// is not a visible process.
    pub fn server_process(&self, dsn: &str) -> Option<cpu::ServerProcess> {
        match self {
            BenchStore::Mysql(b) => {
                let port = onestep_mysql::dsn::parse_dsn(dsn).map_or(3306, |p| p.tcp_port());
                cpu::find_server(port, b.server().flavor == Flavor::MariaDb)
            }
            BenchStore::Postgres(_) => cpu::postgres_processes(),
            // Embedded: its CPU is the benchmark process's own.
            BenchStore::Sqlite(_) => None,
        }
    }

    /// The CPU milliseconds the server has used so far.
    pub fn server_cpu_ms(&self, process: &cpu::ServerProcess) -> Option<f64> {
        match self {
            BenchStore::Mysql(_) => cpu::process_cpu_ms(&process.pid),
            BenchStore::Postgres(_) => cpu::postgres_cpu_ms(),
            BenchStore::Sqlite(_) => None,
        }
    }
}

impl std::ops::Deref for BenchStore {
    type Target = dyn Backend;

    /// The handle every other part of the benchmark uses.
    fn deref(&self) -> &(dyn Backend + 'static) {
        match self {
            BenchStore::Mysql(b) => b,
            BenchStore::Postgres(b) => b,
            BenchStore::Sqlite(b) => b,
        }
    }
}

/// `onestep migrate --upgrade` on the benchmark's tables (`--upgrade-after-round`).
pub(crate) async fn upgrade(dsn: &str) -> Result<UpgradeFigures> {
    let started = Instant::now();
    let steps: Vec<String> = if is_sqlite(dsn) {
        SqliteBackend::upgrade(StoreOptions::new(dsn))
            .await
            .context("migrate --upgrade failed")?
            .steps
            .iter()
            .map(|s| format!("{} ({})", s.added, s.form))
            .collect()
    } else if is_postgres(dsn) {
        PgBackend::upgrade(StoreOptions::new(dsn))
            .await
            .context("migrate --upgrade failed")?
            .steps
            .iter()
            .map(|s| format!("{} ({})", s.added, s.form))
            .collect()
    } else {
        MySqlBackend::upgrade(StoreOptions::new(dsn))
            .await
            .context("migrate --upgrade failed")?
            .steps
            .iter()
            .map(|s| format!("{} ({})", s.added, s.form))
            .collect()
    };
    Ok(UpgradeFigures {
        seconds: started.elapsed().as_secs_f64(),
        steps,
    })
}

/// A throw-away database on a MySQL/MariaDB or a PostgreSQL server.
pub(crate) enum Scratch {
    Mysql(onestep_mysql::ScratchDatabase),
    Postgres(onestep_postgres::ScratchDatabase),
    /// A new directory under the system's temporary one holding `bench.db`, for
    /// `--server-url sqlite://` (removed by `drop_database`, kept with `--keep`).
    Sqlite(std::path::PathBuf, String),
}

impl Scratch {
    /// Creates `onestep_bench_<random>` on `server_url`.
    pub async fn create(server_url: &str) -> Result<Self> {
        let what = "cannot create the benchmark database on --server-url";
        Ok(if is_sqlite(server_url) {
            let dir = tempfile::Builder::new()
                .prefix("onestep_bench_")
                .tempdir()
                .context(what)?
                .keep();
            let dsn = format!("sqlite://{}", dir.join("bench.db").display());
            Scratch::Sqlite(dir, dsn)
        } else if is_postgres(server_url) {
            Scratch::Postgres(
                onestep_postgres::ScratchDatabase::create(server_url, "onestep_bench_")
                    .await
                    .context(what)?,
            )
        } else {
            Scratch::Mysql(
                onestep_mysql::ScratchDatabase::create(server_url, "onestep_bench_")
                    .await
                    .context(what)?,
            )
        })
    }

    /// The DSN of the database.
    pub fn dsn(&self) -> &str {
        match self {
            Scratch::Mysql(d) => d.dsn(),
            Scratch::Postgres(d) => d.dsn(),
            Scratch::Sqlite(_, dsn) => dsn,
        }
    }

    /// Its name.
    pub fn name(&self) -> String {
        match self {
            Scratch::Mysql(d) => d.name().to_owned(),
            Scratch::Postgres(d) => d.name().to_owned(),
            Scratch::Sqlite(d, _) => d.display().to_string(),
        }
    }

    /// Drops it.
    pub async fn drop_database(self) -> Result<(), ExecutionError> {
        match self {
            Scratch::Mysql(d) => d.drop_database().await,
            Scratch::Postgres(d) => d.drop_database().await,
            Scratch::Sqlite(d, _) => std::fs::remove_dir_all(&d).map_err(|e| {
                ExecutionError::invalid(format!("cannot remove {}: {e}", d.display()))
            }),
        }
    }
}
