//! Reference-created tables through the real binary (docs/schema.md#upgrading-reference-tables),
//! on each server: `onestep run` on them logs exactly one warning naming the exact upgrade
//! command; `onestep migrate --upgrade --dsn …` adds the column and both indexes online (a second
//! run reports the tables up to date); the worker started afterwards logs no warning.

use std::time::{Duration, Instant};

use anyhow::{Result, bail, ensure};
use onestep_e2e::{Servers, TestDb, WorkerProcess, e2e_config, run_cli, servers_of};
use onestep_mysql::{DdlStyle, MySqlBackend, MySqlOptions};

const WARNING: &str = "upgrade them online with: onestep migrate --upgrade --dsn";

fn started_worker(db: &TestDb, logs: &std::path::Path) -> Result<WorkerProcess> {
    let mut worker = WorkerProcess::spawn(
        &e2e_config("worker.yaml"),
        &[("ONESTEP_DSN", &db.dsn), ("ONESTEP_WORKER_ID", "upgrade")],
        logs,
    )?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !worker.log().contains("onestep worker running") {
        if Instant::now() > deadline {
            bail!("worker did not start: {}", worker.log());
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    worker.signal("TERM")?;
    worker.wait_exit(Duration::from_secs(30))?;
    Ok(worker)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reference_tables_warn_then_upgrade_online() -> Result<()> {
    // MySQL family only: the reference-DDL upgrade is a MySQL schema matter (PostgreSQL's
    // tables are the reference's plus one index, docs/postgres.md#schema).
    for (server, url) in servers_of(Servers::MysqlFamily)? {
        let db = TestDb::create(server, &url).await?;
        let logs = tempfile::tempdir()?;
        let mut o = MySqlOptions::new(db.dsn.clone());
        o.ddl_style = DdlStyle::Reference;
        MySqlBackend::migrate(o).await?;

        let log = started_worker(&db, logs.path())?.log();
        ensure!(
            log.matches(WARNING).count() == 1,
            "{server}: one warning: {log}"
        );
        let port = url
            .rsplit(':')
            .next()
            .unwrap_or_default()
            .trim_end_matches('/');
        let command = format!(
            "onestep migrate --upgrade --dsn 'mysql://root@127.0.0.1:{port}/{}' --table onestep_executions --attempts-table onestep_execution_attempts",
            db.name
        );
        ensure!(log.contains(&command), "{server}: {command} in {log}");

        let (code, out, err) = run_cli(&["migrate", "--upgrade", "--dsn", &db.dsn], &[])?;
        ensure!(code == 0, "{server}: {code} {err}");
        for line in [
            "--dsn: added column claimable (ALGORITHM=INSTANT)",
            "--dsn: added index ix_onestep_executions_claimable (ALGORITHM=INPLACE, LOCK=NONE)",
            "--dsn: added index ix_onestep_executions_expiry (ALGORITHM=INPLACE, LOCK=NONE)",
            "--dsn: added index ix_onestep_executions_status (ALGORITHM=INPLACE, LOCK=NONE)",
        ] {
            ensure!(out.contains(line), "{server}: {line} in {out}");
        }
        let (code, out, _) = run_cli(&["migrate", "--upgrade", "--dsn", &db.dsn], &[])?;
        ensure!(
            code == 0 && out.contains("are up to date"),
            "{server}: second run: {out}"
        );

        let log = started_worker(&db, logs.path())?.log();
        ensure!(
            !log.contains(WARNING),
            "{server}: no warning after the upgrade: {log}"
        );
        db.drop_db().await?;
    }
    Ok(())
}
