//! `onestep wait` (docs/cli.md#onestep-wait) against the two `onestep serve` processes and the
//! real worker (countdown.wasm, flaky.wasm) of [`crate::api_instances`]: with `--api` on the
//! instance that did not take the submit — a success (exit 0, the API's execution view with its
//! last attempt), a failure after retries (exit 1), `--timeout` (exit 1 `timeout`, on time), an
//! unknown id and an unreachable API (exit 1, each with its message) — and on the database
//! (`--dsn`), which now re-reads the execution only when its `version` moved.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use onestep_e2e::run_cli;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::api_flow::curl;

/// `onestep ARGS…` off the async runtime: (exit code, stdout, stderr, how long it took).
async fn cli(
    args: Vec<String>,
    envs: Vec<(String, String)>,
) -> Result<(i32, String, String, Duration)> {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        let started = Instant::now();
        let (code, out, err) = run_cli(&args, &envs)?;
        Ok((code, out, err, started.elapsed()))
    })
    .await?
}

fn submit(base: &str, task: &str, payload: Value) -> Result<String> {
    let body = json!({"task_name": task, "payload": payload}).to_string();
    let key = format!("Idempotency-Key: {}", Uuid::new_v4());
    let (code, view) = curl(&[
        "-X",
        "POST",
        &format!("{base}/v1/executions"),
        "-H",
        "Content-Type: application/json",
        "-H",
        &key,
        "-d",
        &body,
    ])?;
    ensure!(code == 202, "submit answered {code}: {view}");
    Ok(view["id"].as_str().context("no id")?.to_owned())
}

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

/// The cases; `submit_base` takes the submits, `wait_base` the waits; `db_env` points the
/// database path at the same database (`ONESTEP_DSN`).
pub(crate) async fn case(
    submit_base: &str,
    wait_base: &str,
    db_env: Vec<(String, String)>,
) -> Result<()> {
    // A success through the other instance: exit 0, the API's view (with the last attempt).
    let id = submit(
        submit_base,
        "countdown",
        json!({"steps": 10, "step_ms": 100}),
    )?;
    let (code, out, err, took) = cli(
        args(&["wait", &id, "--api", wait_base, "--json", "--timeout", "60"]),
        vec![],
    )
    .await?;
    ensure!(code == 0, "wait --api exited {code}: {out}{err}");
    let view: Value = serde_json::from_str(&out).with_context(|| format!("not JSON: {out}"))?;
    ensure!(
        view["id"] == id.as_str()
            && view["status"] == "succeeded"
            && view["terminal"] == true
            && view["last_attempt"]["status"] == "succeeded",
        "{view}"
    );
    ensure!(
        took >= Duration::from_millis(900),
        "it waited for the run: {took:?}"
    );

    // Retries exhausted (4 attempts): exit 1, the text view and the status on stderr.
    let id = submit(submit_base, "flaky", json!({"succeed_on_attempt": 9}))?;
    let (code, out, err, _) = cli(args(&["wait", &id, "--api", wait_base]), vec![]).await?;
    ensure!(
        code == 1,
        "wait --api of a failure exited {code}: {out}{err}"
    );
    let has = |k: &str, v: &str| {
        out.lines()
            .any(|l| l.split_whitespace().collect::<Vec<_>>() == [k, v])
    };
    ensure!(
        out.contains("failed (terminal)") && has("attempts:", "4"),
        "{out}"
    );
    ensure!(
        err.contains(&format!("execution {id} is failed")),
        "stderr: {err}"
    );

    // --timeout: exit 1 with `timeout` about when asked, the execution still running.
    let id = submit(
        submit_base,
        "countdown",
        json!({"steps": 200, "step_ms": 100}),
    )?;
    let (code, out, err, took) = cli(
        args(&[
            "wait",
            &id,
            "--api",
            wait_base,
            "--timeout",
            "1.5",
            "--json",
        ]),
        vec![],
    )
    .await?;
    let body: Value = serde_json::from_str(&out).with_context(|| format!("not JSON: {out}"))?;
    ensure!(
        code == 1 && body["code"] == "timeout",
        "wait --api --timeout exited {code}: {out}{err}"
    );
    ensure!(
        err.contains(&format!("execution {id} is still")),
        "stderr: {err}"
    );
    ensure!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(6),
        "--timeout 1.5 took {took:?}"
    );
    let (code, view) = curl(&[
        "-X",
        "POST",
        &format!("{submit_base}/v1/executions/{id}/cancel"),
        "-H",
        "Content-Type: application/json",
        "-d",
        "{}",
    ])?;
    ensure!(code == 200, "cancel answered {code}: {view}");

    // An unknown execution, a malformed id, an API nobody listens on.
    let unknown = Uuid::new_v4().to_string();
    let (code, _, err, _) = cli(args(&["wait", &unknown, "--api", wait_base]), vec![]).await?;
    ensure!(
        code == 1 && err.contains("was not found"),
        "unknown id: {code} {err}"
    );
    let (code, _, err, _) = cli(args(&["wait", "nope", "--api", wait_base]), vec![]).await?;
    ensure!(code == 2, "malformed id: {code} {err}");
    let closed = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let (code, _, err, took) = cli(
        args(&["wait", &unknown, "--api", &format!("http://{closed}")]),
        vec![],
    )
    .await?;
    ensure!(
        code == 1 && err.contains(&format!("cannot reach the API at http://{closed}")),
        "unreachable: {code} {err}"
    );
    ensure!(
        took < Duration::from_secs(5),
        "an unreachable API fails at once: {took:?}"
    );

    // On the database: a success answered soon after it finished (version reads after 0.25,
    // 0.5, 1, 2 s, …), then a cancelled one, exit 1.
    let id = submit(
        submit_base,
        "countdown",
        json!({"steps": 10, "step_ms": 100}),
    )?;
    let (code, out, err, took) = cli(
        args(&[
            "wait",
            &id,
            "--namespace",
            "e2e",
            "--json",
            "--timeout",
            "60",
        ]),
        db_env.clone(),
    )
    .await?;
    ensure!(code == 0, "wait on the database exited {code}: {out}{err}");
    let view: Value = serde_json::from_str(&out).with_context(|| format!("not JSON: {out}"))?;
    ensure!(
        view["status"] == "succeeded" && view["last_attempt"]["status"] == "succeeded",
        "{view}"
    );
    ensure!(took < Duration::from_secs(10), "{took:?}");
    let id = submit(
        submit_base,
        "countdown",
        json!({"steps": 200, "step_ms": 100}),
    )?;
    let waiting = {
        let a = args(&["wait", &id, "--namespace", "e2e", "--timeout", "60"]);
        tokio::spawn(cli(a, db_env))
    };
    tokio::time::sleep(Duration::from_millis(800)).await;
    let (code, view) = curl(&[
        "-X",
        "POST",
        &format!("{submit_base}/v1/executions/{id}/cancel"),
        "-H",
        "Content-Type: application/json",
        "-d",
        "{}",
    ])?;
    ensure!(code == 200, "cancel answered {code}: {view}");
    let (code, out, err, _) = waiting.await??;
    ensure!(
        code == 1 && out.contains("cancelled (terminal)"),
        "wait on a cancelled one: {code} {out}{err}"
    );
    Ok(())
}
