//! `onestep bench --history N` (docs/benchmarks.md#history) on each server: the history is
//! seeded, the measured figures count only the benchmark's own executions, and the JSON report
//! carries buffer-pool and `Handler_read_*` figures per execution for submit and drain;
//! `--reference-tables` measures tables made with the reference's DDL.

use anyhow::{Context, Result, ensure};
use onestep_e2e::{TestDb, run_cli, servers};
use serde_json::Value;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_with_history_reports_io_per_phase() -> Result<()> {
    for (server, url) in servers()? {
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
