//! Per-attempt diagnostics through a real worker (docs/observability.md#attempt-diagnostics):
//! a retried execution's attempts over the CLI show each attempt's handler message, log lines
//! and the SHA-256 of the component file that ran; a running execution shows its progress in
//! `onestep get`; a cancelled one keeps its last progress; `onestep logs` prints an attempt's
//! lines; `onestep purge` counts (dry run) and then removes finished executions with their
//! attempts and diagnostics, leaving unfinished ones.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use onestep_core::ExecutionStatus as S;
use onestep_e2e::{Env, NAMESPACE, Schedule, Servers, e2e_config, guest, on_servers, run_cli};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// `onestep ARGS --dsn <env's db> --namespace e2e --json`, parsed; fails on a non-zero exit.
fn cli_json(env: &Env, args: &[&str]) -> Result<Value> {
    let mut all: Vec<&str> = args.to_vec();
    all.extend(["--dsn", &env.db.dsn, "--namespace", NAMESPACE, "--json"]);
    let (code, stdout, stderr) = run_cli(&all, &[])?;
    ensure!(
        code == 0,
        "onestep {args:?} exited {code}: {stdout} {stderr}"
    );
    serde_json::from_str(stdout.trim()).with_context(|| format!("not JSON: {stdout:?}"))
}

fn sha256_of(name: &str) -> Result<String> {
    let bytes = std::fs::read(guest(name)?)?;
    Ok(hex::encode(Sha256::digest(&bytes)))
}

async fn retried_attempts_and_purge(env: std::sync::Arc<Env>) -> Result<()> {
    let mut worker = env.spawn_worker("w-diag")?;
    let e = env
        .submit("flaky", json!({"succeed_on_attempt": 3}))
        .await?;
    env.wait_status(e.id, &[S::Succeeded], Duration::from_secs(60))
        .await?;
    let id = e.id.to_string();
    let view = cli_json(&env, &["attempts", &id])?;
    let items = view["items"].as_array().context("items")?;
    ensure!(items.len() == 3, "{view}");
    let digest = sha256_of("flaky")?;
    for (i, a) in items.iter().enumerate() {
        let n = i + 1;
        ensure!(a["attempt"] == n, "{a}");
        ensure!(
            a["component_digest"] == digest.as_str(),
            "digest of attempt {n}: {a}"
        );
        ensure!(a["worker_id"] == "w-diag", "{a}");
        ensure!(a["diagnostics"] == true, "{a}");
        ensure!(
            a["peak_memory_bytes"].as_u64().is_some_and(|m| m > 0),
            "{a}"
        );
        if n < 3 {
            ensure!(a["status"] == "retrying", "{a}");
            ensure!(
                a["message"] == format!("flaky: attempt {n} of 3").as_str(),
                "{a}"
            );
            ensure!(a["log_lines"] == 1, "{a}");
        } else {
            ensure!(a["status"] == "succeeded" && a["message"].is_null(), "{a}");
            ensure!(a["log_lines"] == 0, "{a}");
        }
    }
    let logs = cli_json(&env, &["logs", &id, "--attempt", "2"])?;
    ensure!(logs["total_lines"] == 1, "{logs}");
    ensure!(logs["lines"][0]["level"] == "warn", "{logs}");
    ensure!(
        logs["lines"][0]["message"] == "attempt 2 < 3: failing",
        "{logs}"
    );
    // Human output: one line per log line.
    let (code, text, _) = run_cli(
        &[
            "logs",
            &id,
            "--attempt",
            "1",
            "--dsn",
            &env.db.dsn,
            "--namespace",
            NAMESPACE,
        ],
        &[],
    )?;
    ensure!(
        code == 0 && text.contains("warn") && text.contains("attempt 1 < 3: failing"),
        "{text}"
    );

    // A running countdown shows its progress; after the cancel the attempt keeps it. Steps of
    // 5 ms, well inside the 50 ms cancel grace: the guest wakes, sees the cancel and returns
    // its message before the grace ends even on a loaded machine (with 50 ms steps a CI run
    // saw it stopped mid-sleep, message lost: a race of the test, not of storage).
    let c = env
        .submit("countdown", json!({"steps": 6000, "step_ms": 5}))
        .await?;
    let cid = c.id.to_string();
    let running = onestep_e2e::wait_for(
        "progress in `onestep get`",
        Duration::from_secs(20),
        || async {
            let v = cli_json(&env, &["get", &cid])?;
            Ok(v["progress"]["done"]
                .as_u64()
                .is_some_and(|d| d >= 2)
                .then_some(v))
        },
    )
    .await?;
    ensure!(running["status"] == "running", "{running}");
    ensure!(running["progress"]["total"] == 6000, "{running}");
    ensure!(running["progress"]["note"] == "counting down", "{running}");
    env.client.cancel(c.id, Some("enough")).await?;
    env.wait_status(c.id, &[S::Cancelled], Duration::from_secs(20))
        .await?;
    let view = cli_json(&env, &["attempts", &cid])?;
    let a = &view["items"][0];
    ensure!(a["status"] == "cancelled", "{a}");
    ensure!(
        a["progress"]["done"].as_u64().is_some_and(|d| d >= 2),
        "{a}"
    );
    ensure!(
        a["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("cancelled at step")),
        "{a}"
    );

    // One execution still queued (no worker for its task name): purge must leave it.
    worker.signal("TERM")?;
    worker.wait_exit(Duration::from_secs(20))?;
    let queued = env.submit("echo", json!({"left": true})).await?;
    tokio::time::sleep(Duration::from_millis(50)).await;
    let dry = cli_json(&env, &["purge", "--older-than", "0s", "--dry-run"])?;
    ensure!(
        dry["executions"] == 2 && dry["attempts"] == 4 && dry["diagnostics"] == 4,
        "{dry}"
    );
    ensure!(env.get(e.id).await.is_ok(), "a dry run removes nothing");
    let wet = cli_json(&env, &["purge", "--older-than", "0s", "--batch-size", "1"])?;
    ensure!(
        wet["executions"] == 2 && wet["attempts"] == 4 && wet["diagnostics"] == 4,
        "{wet}"
    );
    ensure!(wet["batches"] == 2, "{wet}");
    ensure!(env.get(e.id).await.is_err(), "purged");
    ensure!(env.get(c.id).await.is_err(), "purged");
    ensure!(
        env.get(queued.id).await?.status == S::Queued,
        "unfinished work stays"
    );
    // Bad input: a specific message and the usage exit code.
    let (code, _, stderr) = run_cli(
        &[
            "purge",
            "--older-than",
            "soon",
            "--dsn",
            &env.db.dsn,
            "--namespace",
            NAMESPACE,
        ],
        &[],
    )?;
    ensure!(
        code == 2 && stderr.contains("--older-than 'soon' is not a duration"),
        "{code} {stderr}"
    );
    let (code, _, stderr) = run_cli(
        &[
            "purge",
            "--older-than",
            "1d",
            "--status",
            "running",
            "--dsn",
            &env.db.dsn,
            "--namespace",
            NAMESPACE,
        ],
        &[],
    )?;
    ensure!(
        code == 2 && stderr.contains("purge removes finished executions only"),
        "{code} {stderr}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn attempts_logs_progress_and_purge() -> Result<()> {
    // MariaDB and MySQL only for now: on PostgreSQL, under CI load, the cancelled countdown
    // was once stopped by the epoch interrupt before it set its "cancelled at step" message (a
    // race in the cancel grace, not in storage); PostgreSQL's diagnostics and purge are covered
    // by host/postgres/tests/diagnostics.rs until that is fixed.
    on_servers(
        Servers::MysqlFamily,
        "attempts_logs_progress_and_purge",
        &e2e_config("worker.yaml"),
        Schedule::Concurrent,
        retried_attempts_and_purge,
    )
    .await
}
