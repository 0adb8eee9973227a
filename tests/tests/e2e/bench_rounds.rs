//! `onestep bench --rounds/--purge-older-than/--ids/--idempotency-keys/--upgrade-after-round`
//! (docs/benchmarks.md#history-at-scale) on each server: several rounds on the same tables with
//! a purge after each, v4 ids for the rows the run writes, idempotency keys on every row, and
//! reference-created tables measured before and after `migrate --upgrade` in one run.

use anyhow::{Context, Result, ensure};
use onestep_e2e::{Backend, TestDb, run_cli, servers};
use serde_json::Value;

/// `SELECT COUNT(*) <rest>` as a number (the cast and trim work on all three servers).
async fn count(db: &TestDb, rest: &str) -> Result<u64> {
    let got = db
        .query_strings(&format!("SELECT CAST(COUNT(*) AS CHAR(20)) {rest}"))
        .await?;
    got.first()
        .cloned()
        .flatten()
        .and_then(|v| v.trim().parse().ok())
        .with_context(|| format!("count {rest}: {got:?}"))
}

fn rounds_of(out: &str, server: &str) -> Result<Vec<Value>> {
    let v: Value = serde_json::from_str(out).with_context(|| format!("{server}: {out}"))?;
    v.as_array()
        .cloned()
        .with_context(|| format!("{server}: several rounds give a JSON array: {v}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_rounds_purge_v4_ids_and_keys() -> Result<()> {
    for (server, url) in servers()? {
        let db = TestDb::create(server, &url).await?;
        // 1,500 history rows created 1 ms apart up to now: after the first round most are
        // older than 1 s, and so is every round's work by the next purge.
        let (code, out, err) = run_cli(
            &[
                "bench",
                "-n",
                "200",
                "--history",
                "1500",
                "--history-ids",
                "v4",
                "--ids",
                "v4",
                "--idempotency-keys",
                "--rounds",
                "3",
                "--purge-older-than",
                "1s",
                "--purge-batch",
                "100",
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
        let rounds = rounds_of(&out, server)?;
        ensure!(rounds.len() == 3, "{server}: {rounds:?}");
        for (i, r) in rounds.iter().enumerate() {
            ensure!(
                r["round"] == i as u64 + 1
                    && r["ids"] == "v4"
                    && r["idempotency_keys"] == true
                    && r["succeeded"] == 200,
                "{server}: round {}: {r}",
                i + 1
            );
            ensure!(
                r["history"] == if i == 0 { 1500 } else { 0 },
                "{server}: the history is seeded once: {r}"
            );
            let purge = &r["purge"];
            ensure!(
                purge["older_than_s"] == 1.0 && purge["executions"].as_u64().is_some(),
                "{server}: {r}"
            );
            let tables = r["footprint"].as_array().context("footprint")?;
            ensure!(
                tables.len() >= 2
                    && tables[0]["table"] == "onestep_executions"
                    && tables[1]["table"] == "onestep_execution_attempts"
                    && tables
                        .iter()
                        .all(|t| t["bytes"].as_u64().is_some_and(|b| b > 0)),
                "{server}: {r}"
            );
        }
        // The first purge removed the history older than 1 s: at least the oldest 500 rows, which
        // had finished more than 1 s before the seed ended.
        ensure!(
            rounds[0]["purge"]["executions"]
                .as_u64()
                .is_some_and(|n| n >= 450),
            "{server}: {}",
            rounds[0]
        );
        // What the footprint says is what the table holds.
        let rows = count(&db, "FROM onestep_executions").await?;
        let last = rounds[2]["footprint"][0]["rows"].as_u64().unwrap_or(0);
        ensure!(rows == last, "{server}: {rows} rows vs footprint {last}");
        ensure!(
            last < 1500 + 600,
            "{server}: purge kept the table bounded: {last}"
        );
        // Every row left has a v4 id (the version digit is the 13th hex digit), and a 32-hex
        // idempotency key; so do the attempts.
        let version = "LOWER(SUBSTR(REPLACE(CAST(id AS CHAR(36)), '-', ''), 13, 1))";
        let odd = count(
            &db,
            &format!(
                "FROM onestep_executions WHERE {version} <> '4' \
                 OR idempotency_key IS NULL OR LENGTH(idempotency_key) <> 32"
            ),
        )
        .await?;
        ensure!(odd == 0, "{server}: {odd} rows without a v4 id or a key");
        let attempts = count(&db, "FROM onestep_execution_attempts").await?;
        let odd = count(
            &db,
            &format!("FROM onestep_execution_attempts WHERE {version} <> '4'"),
        )
        .await?;
        ensure!(
            attempts > 0 && odd == 0,
            "{server}: {odd} of {attempts} attempts without a v4 id"
        );
        // `--idempotency-keys ordered`: the run's keys are UUIDv7 hex (version digit 13 is 7);
        // its rows are the only ones with v7 ids (the default `--ids`).
        let (code, out, err) = run_cli(
            &[
                "bench",
                "-n",
                "100",
                "--idempotency-keys",
                "ordered",
                "--json",
                "--dsn",
                &db.dsn,
            ],
            &[],
        )?;
        ensure!(code == 0, "{server}: ordered keys: {code} {err}");
        let r: Value = serde_json::from_str(&out).with_context(|| format!("{server}: {out}"))?;
        ensure!(
            r["idempotency_key_order"] == "ordered" && r["succeeded"] == 100,
            "{server}: {r}"
        );
        let new_rows = count(
            &db,
            &format!("FROM onestep_executions WHERE {version} = '7'"),
        )
        .await?;
        let ordered = count(
            &db,
            &format!(
                "FROM onestep_executions WHERE {version} = '7' \
                 AND LENGTH(idempotency_key) = 32 AND SUBSTR(idempotency_key, 13, 1) = '7'"
            ),
        )
        .await?;
        ensure!(
            new_rows == 100 && ordered == 100,
            "{server}: {ordered} of {new_rows} new rows with time-ordered keys"
        );
        db.drop_db().await?;
    }
    // Bad input is refused before a database is touched.
    for (args, want) in [
        (&["--rounds", "0"][..], "--rounds must be >= 1"),
        (
            &["--purge-older-than", "soon"][..],
            "--purge-older-than 'soon' is not a duration",
        ),
        (
            &["--purge-older-than", "0s"][..],
            "--purge-older-than must be longer than 0",
        ),
        (
            &["--idempotency-keys", "sometimes"][..],
            "invalid value 'sometimes'",
        ),
        (
            &["--rounds", "2", "--upgrade-after-round", "2"][..],
            "--upgrade-after-round must be between 1 and --rounds - 1",
        ),
    ] {
        let mut all = vec!["bench", "-n", "1"];
        all.extend_from_slice(args);
        let (code, _, err) = run_cli(&all, &[])?;
        ensure!(code == 2 && err.contains(want), "{args:?}: {code} {err}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_reference_tables_before_and_after_upgrade() -> Result<()> {
    for (server, url) in servers()? {
        let db = TestDb::create(server, &url).await?;
        // MySQL/MariaDB gain the claimable column first; PostgreSQL only indexes.
        let first_step = if db.backend() == Backend::Postgres {
            "index ix_onestep_executions_expiry"
        } else {
            "column claimable"
        };
        let (code, out, err) = run_cli(
            &[
                "bench",
                "-n",
                "100",
                "--history",
                "500",
                "--reference-tables",
                "--rounds",
                "2",
                "--upgrade-after-round",
                "1",
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
        let rounds = rounds_of(&out, server)?;
        ensure!(rounds.len() == 2, "{server}: {rounds:?}");
        ensure!(
            rounds[0]["claimable_indexes"] == false && rounds[0]["upgrade_before"].is_null(),
            "{server}: round 1 on the reference's DDL: {}",
            rounds[0]
        );
        let steps = rounds[1]["upgrade_before"]["steps"]
            .as_array()
            .context("upgrade steps")?;
        ensure!(
            rounds[1]["claimable_indexes"] == true
                && steps
                    .iter()
                    .any(|s| s.as_str().is_some_and(|s| s.starts_with(first_step))),
            "{server}: round 2 after the upgrade: {}",
            rounds[1]
        );
        ensure!(
            rounds.iter().all(|r| r["succeeded"] == 100),
            "{server}: {rounds:?}"
        );
        db.drop_db().await?;
    }
    Ok(())
}
