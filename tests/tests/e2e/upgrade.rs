//! Reference-created tables through the real binary (docs/schema.md#upgrading-reference-tables,
//! docs/postgres.md#upgrading-reference-tables), on each server: `onestep run` on them logs
//! exactly one warning naming the exact upgrade command and `onestep check --connect` reports
//! `schema=needs-upgrade` with the same command; `onestep migrate --upgrade --dsn …` adds the
//! column and indexes online (a second run reports the tables up to date); afterwards the worker
//! logs no warning and `check --connect` reports `schema=ok`.

use std::time::{Duration, Instant};

use anyhow::{Result, bail, ensure};
use onestep_e2e::{
    BACKEND_VAR, Backend, Servers, TestDb, WorkerProcess, e2e_config, run_cli, servers_of,
};
use onestep_mysql::{DdlStyle, MySqlBackend, StoreOptions};

/// The MySQL warning's and the PostgreSQL warning's lead-in to the command.
const WARNINGS: [&str; 2] = [
    "upgrade them online with: onestep migrate --upgrade --dsn",
    "add them online with: onestep migrate --upgrade --dsn",
];

fn warnings(log: &str) -> usize {
    WARNINGS.iter().map(|w| log.matches(w).count()).sum()
}

/// `onestep check --connect` on the worker's file: (exit code, stdout).
fn check_connect(db: &TestDb) -> Result<(i32, String)> {
    let config = e2e_config("worker.yaml");
    let path = config.to_string_lossy();
    let (code, out, err) = run_cli(
        &["check", "--connect", &path],
        &[("ONESTEP_DSN", &db.dsn), (BACKEND_VAR, db.backend().kind())],
    )?;
    Ok((code, format!("{out}{err}")))
}

fn started_worker(db: &TestDb, logs: &std::path::Path) -> Result<WorkerProcess> {
    let mut worker = WorkerProcess::spawn(
        &e2e_config("worker.yaml"),
        &[
            ("ONESTEP_DSN", &db.dsn),
            ("ONESTEP_WORKER_ID", "upgrade"),
            (BACKEND_VAR, db.backend().kind()),
        ],
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
    for (server, url) in servers_of(Servers::All)? {
        let db = TestDb::create(server, &url).await?;
        let logs = tempfile::tempdir()?;
        let port = url
            .rsplit(':')
            .next()
            .unwrap_or_default()
            .trim_end_matches('/');
        let (command, added) = if db.backend() == Backend::Postgres {
            // The reference's PostgreSQL tables are ours without our four indexes, the priority
            // columns and their claim index (dropping `fairness_key` drops the two fair indexes
            // that read it), with the reference's claim index (docs/postgres.md#schema).
            run_cli(&["migrate", "--dsn", &db.dsn], &[])?;
            db.query_strings(
                "DROP INDEX ix_onestep_executions_expiry; DROP INDEX ix_onestep_executions_status; \
                 DROP INDEX ix_onestep_executions_status_list; \
                 DROP INDEX ix_onestep_executions_task_list; \
                 DROP INDEX ix_onestep_executions_claim_priority; \
                 ALTER TABLE onestep_executions DROP COLUMN priority, DROP COLUMN fairness_key; \
                 CREATE INDEX ix_onestep_executions_claim ON onestep_executions \
                 (namespace, task_name, available_at, created_at, id) \
                 WHERE status IN ('queued', 'retrying')",
            )
            .await?;
            (
                format!(
                    "onestep migrate --upgrade --dsn 'postgresql://postgres@127.0.0.1:{port}/{}' --table onestep_executions --attempts-table onestep_execution_attempts",
                    db.name
                ),
                vec![
                    "--dsn: added columns priority, fairness_key (ADD COLUMN (catalog only))",
                    "--dsn: added constraint ck_onestep_execution_priority (NOT VALID, then VALIDATE)",
                    "--dsn: added index ix_onestep_executions_claim_priority (CONCURRENTLY)",
                    "--dsn: added index ix_onestep_executions_fair (CONCURRENTLY)",
                    "--dsn: added index ix_onestep_executions_fair_running (CONCURRENTLY)",
                    "--dsn: added index ix_onestep_executions_expiry (CONCURRENTLY)",
                    "--dsn: added index ix_onestep_executions_status (CONCURRENTLY)",
                    "--dsn: added index ix_onestep_executions_status_list (CONCURRENTLY)",
                    "--dsn: added index ix_onestep_executions_task_list (CONCURRENTLY)",
                ],
            )
        } else {
            let o = StoreOptions::new(db.dsn.clone());
            MySqlBackend::migrate_with_ddl(o, DdlStyle::Reference).await?;
            (
                format!(
                    "onestep migrate --upgrade --dsn 'mysql://root@127.0.0.1:{port}/{}' --table onestep_executions --attempts-table onestep_execution_attempts",
                    db.name
                ),
                vec![
                    "--dsn: added column claimable (ALGORITHM=INSTANT)",
                    "--dsn: added columns priority, fairness_key (ALGORITHM=INSTANT)",
                    "--dsn: added index ix_onestep_executions_claim_priority (ALGORITHM=INPLACE, LOCK=NONE)",
                    "--dsn: added index ix_onestep_executions_expiry (ALGORITHM=INPLACE, LOCK=NONE)",
                    "--dsn: added index ix_onestep_executions_status (ALGORITHM=INPLACE, LOCK=NONE)",
                    "--dsn: added index ix_onestep_executions_status_list (ALGORITHM=INPLACE, LOCK=NONE)",
                    "--dsn: added index ix_onestep_executions_task_list (ALGORITHM=INPLACE, LOCK=NONE)",
                ],
            )
        };

        let log = started_worker(&db, logs.path())?.log();
        ensure!(warnings(&log) == 1, "{server}: one warning: {log}");
        ensure!(log.contains(&command), "{server}: {command} in {log}");
        let (code, out) = check_connect(&db)?;
        ensure!(
            code == 0 && out.contains("schema=needs-upgrade") && out.contains(&command),
            "{server}: check --connect before the upgrade ({code}): {out}"
        );

        let (code, out, err) = run_cli(&["migrate", "--upgrade", "--dsn", &db.dsn], &[])?;
        ensure!(code == 0, "{server}: {code} {err}");
        for line in added {
            ensure!(out.contains(line), "{server}: {line} in {out}");
        }
        let (code, out, _) = run_cli(&["migrate", "--upgrade", "--dsn", &db.dsn], &[])?;
        ensure!(
            code == 0 && out.contains("are up to date"),
            "{server}: second run: {out}"
        );

        let log = started_worker(&db, logs.path())?.log();
        ensure!(
            warnings(&log) == 0,
            "{server}: no warning after the upgrade: {log}"
        );
        let (code, out) = check_connect(&db)?;
        ensure!(
            code == 0 && out.contains("schema=ok") && !out.contains("needs-upgrade"),
            "{server}: check --connect after the upgrade ({code}): {out}"
        );
        db.drop_db().await?;
    }
    Ok(())
}
