//! `onestep copy` between the backends (docs/cli.md#onestep-copy, docs/cli.md#switching-servers):
//! the shared testkit case (`onestep_testkit::backend_cases::copy`: every column of every row of
//! the four tables compared, the live leases released, a second copy skipping everything, the
//! target reclaiming the released executions) from MariaDB to PostgreSQL, PostgreSQL to
//! MariaDB, and MySQL to PostgreSQL when MySQL is tested; then the command itself from MariaDB
//! to PostgreSQL and back: the live-lease refusal, the same-store refusal (the same database
//! named `localhost` and `127.0.0.1`), the summary, the re-run, and the round trip. SQLite
//! (docs/sqlite.md#outgrowing-sqlite): the shared case from SQLite to MariaDB and PostgreSQL and
//! back, and the command from a SQLite file to MariaDB and to PostgreSQL and from each into a new
//! SQLite file, every column compared.

use std::sync::Arc;

use anyhow::{Context, Result, ensure};
use onestep_core::Backend;
use onestep_e2e::{TestDb, run_cli, servers};
use onestep_testkit::backend_cases::copy::{Seeded, everything, round_trip, seed};
use tempfile::TempDir;

/// The root URL of the server labelled `label`, when it is tested.
fn server(label: &str) -> Result<Option<String>> {
    Ok(servers()?
        .into_iter()
        .find(|(l, _)| *l == label)
        .map(|(_, url)| url))
}

async fn open(db: &TestDb) -> Result<Arc<dyn Backend>> {
    Ok(match db.backend() {
        onestep_e2e::Backend::Mysql => {
            let mut o = onestep_mysql::StoreOptions::new(db.dsn.clone());
            o.traces = true;
            Arc::new(onestep_mysql::MySqlBackend::open(o).await?)
        }
        onestep_e2e::Backend::Postgres => {
            let mut o = onestep_postgres::StoreOptions::new(db.dsn.clone());
            o.traces = true;
            Arc::new(onestep_postgres::PgBackend::open(o).await?)
        }
    })
}

async fn fresh(label: &'static str) -> Result<Option<(TestDb, Arc<dyn Backend>)>> {
    let Some(url) = server(label)? else {
        return Ok(None);
    };
    let db = TestDb::create(label, &url).await?;
    let backend = open(&db).await?;
    Ok(Some((db, backend)))
}

#[tokio::test]
async fn copy_between_backends_compares_every_column() -> Result<()> {
    for (from, to) in [
        ("mariadb", "postgres"),
        ("postgres", "mariadb"),
        ("mysql", "postgres"),
    ] {
        let (Some((a_db, a)), Some((b_db, b))) = (fresh(from).await?, fresh(to).await?) else {
            eprintln!("{from} → {to}: a server is not tested, skipped");
            continue;
        };
        round_trip(a.as_ref(), b.as_ref()).await;
        a.close().await?;
        b.close().await?;
        a_db.drop_db().await?;
        b_db.drop_db().await?;
    }
    Ok(())
}

fn copy_cli(args: &[&str]) -> Result<(i32, String, String)> {
    let mut all = vec!["copy"];
    all.extend_from_slice(args);
    run_cli(&all, &[])
}

#[tokio::test]
async fn copy_command_mariadb_to_postgres_and_back() -> Result<()> {
    let (Some((maria_db, maria)), Some((pg_db, pg))) =
        (fresh("mariadb").await?, fresh("postgres").await?)
    else {
        eprintln!("PostgreSQL is not tested, skipped");
        return Ok(());
    };
    let seeded = seed(maria.as_ref()).await;
    let original = everything(maria.as_ref()).await;
    let (from, to) = (maria_db.dsn.as_str(), pg_db.dsn.as_str());

    // Live leases: refused, nothing written.
    let (code, _, err) = copy_cli(&["--from", from, "--to", to])?;
    ensure!(code == 2, "exit {code}: {err}");
    ensure!(
        err.contains(
            "the source has 2 execution(s) with a live lease (cancel_requested: 1, running: 1)"
        ) && err.contains("--release-leases"),
        "{err}"
    );
    ensure!(everything(pg.as_ref()).await.is_empty(), "written anyway");

    // The same store under another name: refused.
    let alias = from.replacen("127.0.0.1", "localhost", 1);
    ensure!(alias != from, "the test URL names 127.0.0.1: {from}");
    let (code, _, err) = copy_cli(&["--from", from, "--to", &alias, "--release-leases"])?;
    ensure!(
        code == 2 && err.contains("same store"),
        "exit {code}: {err}"
    );

    // Copied, counted and verified.
    let (code, out, err) = copy_cli(&[
        "--from",
        from,
        "--to",
        to,
        "--release-leases",
        "--batch-size",
        "4",
    ])?;
    ensure!(code == 0, "exit {code}: {out}{err}");
    ensure!(err.contains("copy: page 2: 2 executions"), "{err}");
    ensure!(
        out.contains("copied: 6 executions, 5 attempts, 3 diagnostics, 1 traces")
            && out.contains("leases released (reclaimed by the target's workers): cancel_requested: 1, running: 1")
            && out.contains("verified: the target holds 6 executions, 5 attempts, 3 diagnostics, 1 traces"),
        "{out}"
    );

    // Again: all skipped.
    let (code, out, err) = copy_cli(&["--from", from, "--to", to, "--release-leases"])?;
    ensure!(code == 0, "exit {code}: {out}{err}");
    ensure!(
        out.contains("copied: 0 executions, 0 attempts, 0 diagnostics, 0 traces")
            && out.contains(
                "skipped (already in the target): 6 executions, 5 attempts, 3 diagnostics, 1 traces"
            ),
        "{out}"
    );

    // And back into a new MariaDB database (the leases are expired now: no flag needed).
    let back_db = TestDb::create("mariadb", &server("mariadb")?.context("mariadb")?).await?;
    let (code, out, err) = copy_cli(&["--from", to, "--to", &back_db.dsn])?;
    ensure!(code == 0, "exit {code}: {out}{err}");
    let back = open(&back_db).await?;
    let returned = everything(back.as_ref()).await;
    let copied = everything(pg.as_ref()).await;
    ensure!(returned == copied, "PostgreSQL → MariaDB changed a row");
    ensure!(
        returned.len() == original.len(),
        "{} rows back",
        returned.len()
    );
    for (o, r) in original.iter().zip(&returned) {
        let mut expected = o.clone();
        if [seeded.running, seeded.cancel_requested].contains(&o.id()) {
            expected.execution.lease_expires_at = r.execution.lease_expires_at;
        }
        ensure!(
            &expected == r,
            "execution {} changed on the round trip",
            o.id()
        );
    }
    for b in [maria, pg, back] {
        b.close().await?;
    }
    for db in [maria_db, pg_db, back_db] {
        db.drop_db().await?;
    }
    Ok(())
}

/// A new SQLite store (traces on, tables created) in a temporary directory, with its URL.
async fn fresh_sqlite() -> Result<(TempDir, String, Arc<dyn Backend>)> {
    let dir = tempfile::tempdir()?;
    let dsn = format!("sqlite://{}", dir.path().join("store.db").display());
    let mut o = onestep_sqlite::StoreOptions::new(dsn.clone());
    o.traces = true;
    let backend: Arc<dyn Backend> = Arc::new(onestep_sqlite::SqliteBackend::open(o).await?);
    Ok((dir, dsn, backend))
}

#[tokio::test]
async fn copy_sqlite_to_and_from_servers_compares_every_column() -> Result<()> {
    for (label, sqlite_first) in [
        ("mariadb", true),
        ("postgres", true),
        ("mariadb", false),
        ("postgres", false),
    ] {
        let Some((db, server)) = fresh(label).await? else {
            eprintln!("{label} is not tested, skipped");
            continue;
        };
        let (_dir, _, file) = fresh_sqlite().await?;
        if sqlite_first {
            round_trip(file.as_ref(), server.as_ref()).await;
        } else {
            round_trip(server.as_ref(), file.as_ref()).await;
        }
        file.close().await?;
        server.close().await?;
        db.drop_db().await?;
    }
    Ok(())
}

/// `original` with the released leases' expiry taken from `copied`, compared with `copied`.
fn same_rows(
    original: &[onestep_core::transfer::ExecutionRecord],
    copied: &[onestep_core::transfer::ExecutionRecord],
    seeded: Seeded,
    what: &str,
) -> Result<()> {
    ensure!(
        original.len() == copied.len(),
        "{what}: {} rows, {} expected",
        copied.len(),
        original.len()
    );
    for (o, c) in original.iter().zip(copied) {
        let mut expected = o.clone();
        if [seeded.running, seeded.cancel_requested].contains(&o.id()) {
            ensure!(
                c.execution.lease_expires_at < o.execution.lease_expires_at,
                "{what}: the live lease of {} was not released",
                o.id()
            );
            expected.execution.lease_expires_at = c.execution.lease_expires_at;
        }
        ensure!(&expected == c, "{what}: execution {} changed", o.id());
    }
    Ok(())
}

#[tokio::test]
async fn copy_command_sqlite_to_servers_and_back() -> Result<()> {
    let (dir, file_dsn, file) = fresh_sqlite().await?;
    let seeded = seed(file.as_ref()).await;
    let original = everything(file.as_ref()).await;

    // The same file under another spelling of its path: refused.
    let alias = format!(
        "sqlite://{}",
        dir.path().join(".").join("store.db").display()
    );
    let (code, _, err) = copy_cli(&["--from", &file_dsn, "--to", &alias, "--release-leases"])?;
    ensure!(
        code == 2 && err.contains("same store"),
        "exit {code}: {err}"
    );

    for label in ["mariadb", "postgres"] {
        let Some((db, server)) = fresh(label).await? else {
            eprintln!("{label} is not tested, skipped");
            continue;
        };
        // Live leases in the file: refused, nothing written.
        let (code, _, err) = copy_cli(&["--from", &file_dsn, "--to", &db.dsn])?;
        ensure!(code == 2, "{label}: exit {code}: {err}");
        ensure!(
            err.contains(
                "the source has 2 execution(s) with a live lease (cancel_requested: 1, running: 1)"
            ),
            "{label}: {err}"
        );
        ensure!(
            everything(server.as_ref()).await.is_empty(),
            "{label}: written anyway"
        );

        // SQLite → server: copied, counted, verified.
        let (code, out, err) = copy_cli(&[
            "--from",
            &file_dsn,
            "--to",
            &db.dsn,
            "--release-leases",
            "--batch-size",
            "4",
        ])?;
        ensure!(code == 0, "{label}: exit {code}: {out}{err}");
        ensure!(
            out.contains("copied: 6 executions, 5 attempts, 3 diagnostics, 1 traces")
                && out.contains(
                    "verified: the target holds 6 executions, 5 attempts, 3 diagnostics, 1 traces"
                ),
            "{label}: {out}"
        );
        let on_server = everything(server.as_ref()).await;
        same_rows(&original, &on_server, seeded, &format!("SQLite → {label}"))?;

        // Again: all skipped.
        let (code, out, err) =
            copy_cli(&["--from", &file_dsn, "--to", &db.dsn, "--release-leases"])?;
        ensure!(code == 0, "{label}: exit {code}: {out}{err}");
        ensure!(
            out.contains(
                "skipped (already in the target): 6 executions, 5 attempts, 3 diagnostics, 1 traces"
            ),
            "{label}: {out}"
        );

        // Server → a new SQLite file (created by the copy), every column as on the server.
        let back_dir = tempfile::tempdir()?;
        let back_dsn = format!(
            "sqlite://{}",
            back_dir.path().join("nested").join("back.db").display()
        );
        let (code, out, err) = copy_cli(&["--from", &db.dsn, "--to", &back_dsn])?;
        ensure!(code == 0, "{label} → SQLite: exit {code}: {out}{err}");
        ensure!(
            err.contains("copy: target: created onestep_executions")
                && out.contains("copied: 6 executions, 5 attempts, 3 diagnostics, 1 traces"),
            "{label} → SQLite: {out}{err}"
        );
        let mut o = onestep_sqlite::StoreOptions::new(back_dsn.clone());
        o.traces = true;
        let back = onestep_sqlite::SqliteBackend::open(o).await?;
        let returned = everything(&back).await;
        ensure!(returned == on_server, "{label} → SQLite changed a row");
        same_rows(
            &original,
            &returned,
            seeded,
            &format!("SQLite → {label} → SQLite"),
        )?;

        back.close().await?;
        server.close().await?;
        db.drop_db().await?;
    }
    file.close().await?;
    Ok(())
}
