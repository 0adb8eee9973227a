//! `onestep bench --history N` (docs/benchmarks.md#history) on each server: the history is
//! seeded, the measured figures count only the benchmark's own executions, and the JSON report
//! carries buffer-pool and `Handler_read_*` figures per execution for submit and drain;
//! `--reference-tables` measures tables made with the reference's DDL; `--http-delay-ms` holds
//! every execution in flight at once on a loopback server and reports memory and heartbeats.

use anyhow::{Context, Result, ensure};
use onestep_e2e::{Servers, TestDb, guest, run_cli, servers, servers_of};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_with_history_reports_io_per_phase() -> Result<()> {
    // MySQL family only: it also measures `--reference-tables` (MySQL-only); `--history` on
    // PostgreSQL is `bench_with_history_on_postgres` below.
    for (server, url) in servers_of(Servers::MysqlFamily)? {
        let db = TestDb::create(server, &url).await?;
        let (code, out, err) = run_cli(
            &[
                "bench",
                "-n",
                "300",
                "--history",
                "2500",
                "--history-ids",
                "v4",
                "--concurrency",
                "16",
                "--batch-size",
                "16",
                "--json",
                "--dsn",
                &db.dsn,
            ],
            &[],
        )?;
        ensure!(code == 0, "{server}: bench exited {code}: {err}");
        let r: Value = serde_json::from_str(&out).with_context(|| format!("{server}: {out}"))?;
        ensure!(
            r["history"] == 2500 && r["history_ids"] == "v4",
            "{server}: {r}"
        );
        ensure!(
            r["succeeded"] == 300 && r["not_succeeded"] == 0,
            "{server}: only the measured executions are counted: {r}"
        );
        for phase in ["submit_io", "drain_io"] {
            let io = &r[phase];
            ensure!(
                io["buffer_pool_reads"].as_f64().is_some_and(|v| v >= 0.0),
                "{server}: {phase}: {r}"
            );
            ensure!(
                io["handler_reads"].as_f64().is_some_and(|v| v > 0.0),
                "{server}: {phase} reads rows: {r}"
            );
        }
        ensure!(
            r["db_submit_counters_per_execution"]["handler_read_key"]
                .as_f64()
                .is_some(),
            "{server}: {r}"
        );
        let rows = db
            .query_strings("SELECT CAST(COUNT(*) AS CHAR) FROM onestep_executions")
            .await?;
        ensure!(
            rows == [Some("2800".to_owned())],
            "{server}: history + measured rows: {rows:?}"
        );
        let (code, _, err) = run_cli(&["bench", "--history", "100000001", "--dsn", &db.dsn], &[])?;
        ensure!(
            code == 2 && err.contains("over the limit of 100000000"),
            "{server}: {code} {err}"
        );
        db.drop_db().await?;

        // --reference-tables: the reference's DDL, measured without the claimable indexes.
        let db = TestDb::create(server, &url).await?;
        let (code, out, err) = run_cli(
            &[
                "bench",
                "-n",
                "50",
                "--history",
                "100",
                "--reference-tables",
                "--json",
                "--dsn",
                &db.dsn,
            ],
            &[],
        )?;
        ensure!(code == 0, "{server}: bench exited {code}: {err}");
        let r: Value = serde_json::from_str(&out).with_context(|| format!("{server}: {out}"))?;
        ensure!(
            r["claimable_indexes"] == false && r["succeeded"] == 50,
            "{server}: reference tables: {r}"
        );
        db.drop_db().await?;
    }
    Ok(())
}

/// `--http-delay-ms` (docs/benchmarks.md#outbound-http-1000-in-flight), small: 40 `fetch`
/// executions at concurrency 40 wait 2 s each on the bench's loopback server, so all are in
/// flight together and the 1 s heartbeat carries all of them in one call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_http_mode_holds_every_execution_in_flight() -> Result<()> {
    let fetch = guest("fetch")?;
    let handler = format!("component:{}", fetch.display());
    for (server, url) in servers()? {
        let db = TestDb::create(server, &url).await?;
        let (code, out, err) = run_cli(
            &[
                "bench",
                "-n",
                "40",
                "--concurrency",
                "40",
                "--batch-size",
                "40",
                "--http-delay-ms",
                "2000",
                "--lease-s",
                "3",
                "--heartbeat-s",
                "1",
                "--handler",
                &handler,
                "--json",
                "--dsn",
                &db.dsn,
            ],
            &[],
        )?;
        ensure!(code == 0, "{server}: bench exited {code}: {err}");
        let r: Value = serde_json::from_str(&out).with_context(|| format!("{server}: {out}"))?;
        ensure!(
            r["succeeded"] == 40 && r["http"]["answered"] == 40 && r["peak_in_flight"] == 40,
            "{server}: every execution made its request, all at once: {r}"
        );
        ensure!(
            r["started_to_finished_ms"]["p50"]
                .as_f64()
                .is_some_and(|v| v >= 2000.0),
            "{server}: each execution waited for the server: {r}"
        );
        let calls = &r["store_calls"];
        ensure!(
            calls["heartbeat_calls"].as_u64().is_some_and(|n| n >= 1)
                && calls["heartbeat_max_leases"] == 40
                && calls["single_heartbeats"] == 0,
            "{server}: one heartbeat call carries every lease: {r}"
        );
        let per = r["memory"]["per_in_flight_mib"].as_f64();
        ensure!(
            per.is_some_and(|v| v > 0.0 && v < 2.0),
            "{server}: RSS per in-flight execution: {r}"
        );
        ensure!(r["wasm_pooling"].is_boolean(), "{server}: {r}");
        db.drop_db().await?;
    }
    // The mode needs a component that makes the request (refused before any database is used).
    let (code, _, err) = run_cli(&["bench", "-n", "1", "--http-delay-ms", "10"], &[])?;
    ensure!(
        code == 2 && err.contains("--http-delay-ms needs --handler component:PATH"),
        "{code} {err}"
    );
    Ok(())
}

/// `--history` on PostgreSQL (docs/benchmarks.md#history): the history is seeded server-side,
/// only the measured executions count, and the I/O figures are `pg_stat_database`'s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_with_history_on_postgres() -> Result<()> {
    let server = std::env::var("ONESTEP_TEST_POSTGRES_URL")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/".into());
    let db = onestep_postgres::ScratchDatabase::create(&server, "onestep_e2e_")
        .await
        .context("create the test database (is PostgreSQL up?)")?;
    let dsn = db.dsn().to_owned();
    let outcome = async {
        let (code, out, err) = run_cli(
            &[
                "bench",
                "-n",
                "200",
                "--history",
                "3000",
                "--history-ids",
                "v7",
                "--concurrency",
                "16",
                "--batch-size",
                "16",
                "--json",
                "--dsn",
                &dsn,
            ],
            &[],
        )?;
        ensure!(code == 0, "bench exited {code}: {err}");
        let r: Value = serde_json::from_str(&out).with_context(|| out.clone())?;
        ensure!(r["history"] == 3000 && r["history_ids"] == "v7", "{r}");
        ensure!(
            r["succeeded"] == 200 && r["not_succeeded"] == 0,
            "only the measured executions are counted: {r}"
        );
        // pg_stat_database lags by up to a second (docs/benchmarks.md#history), so a
        // 30 ms submit phase may read zeros; the drain phase is long enough.
        let io = &r["drain_io"];
        ensure!(
            io["buffer_pool_read_requests"]
                .as_f64()
                .is_some_and(|v| v > 0.0)
                && io["handler_reads"].as_f64().is_some_and(|v| v > 0.0),
            "drain_io: {r}"
        );
        let (code, _, err) = run_cli(&["bench", "--history", "100000001", "--dsn", &dsn], &[])?;
        ensure!(
            code == 2 && err.contains("over the limit of 100000000"),
            "{code} {err}"
        );
        Ok(())
    }
    .await;
    let _ = db.drop_database().await;
    outcome
}
