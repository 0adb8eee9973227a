//! `handler.params` reaches the guest (world `onestep:handler@0.2.0`, `ctx.params`) in Rust
//! (`inspect`), Python (`python-echo`) and JavaScript (`js-echo`), through `onestep task run`
//! and through a worker; a `0.1.0` component (`echo`) with params runs unchanged. Also the
//! JavaScript guests' handler errors, progress and cooperative cancel (`js-countdown`).
//! Config: `config/e2e/params.yaml`.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use onestep_core::ExecutionStatus as S;
use onestep_e2e::{Schedule, e2e_config, guest, on_each_server, run_cli};
use serde_json::{Value, json};

/// Builds (when missing) every guest `params.yaml` names.
fn guests() -> Result<()> {
    for name in ["inspect", "python-echo", "js-echo", "js-countdown", "echo"] {
        guest(name)?;
    }
    Ok(())
}

/// `task run params.yaml TASK --payload PAYLOAD --json EXTRA…`: (exit code, report, stderr).
fn task_run(task: &str, payload: &Value, extra: &[&str]) -> Result<(i32, Value, String)> {
    let config = e2e_config("params.yaml");
    let config = config.to_string_lossy();
    let payload = payload.to_string();
    let mut args = vec![
        "task",
        "run",
        &config,
        task,
        "--payload",
        &payload,
        "--json",
    ];
    args.extend_from_slice(extra);
    let (code, stdout, stderr) =
        run_cli(&args, &[("ONESTEP_DSN", "mysql://nobody@127.0.0.1:1/none")])?;
    let report = serde_json::from_str(stdout.trim())
        .with_context(|| format!("not a JSON report: {stdout:?}, stderr {stderr}"))?;
    Ok((code, report, stderr))
}

fn inspect_params() -> Value {
    json!({"greeting": "Hej", "limits": {"n": 3, "ratio": 0.5}, "tags": ["a", "b"]})
}

#[test]
fn task_run_hands_params_to_rust_python_and_js_guests() -> Result<()> {
    guests()?;
    let (code, r, stderr) = task_run("inspect", &json!({"x": 1}), &[])?;
    ensure!(code == 0, "{code} {r} {stderr}");
    let out = &r["result"];
    ensure!(out["params"] == inspect_params(), "{r}");
    ensure!(
        out["payload"] == json!({"x": 1}) && out["namespace"] == "e2e",
        "{r}"
    );
    ensure!(out["task"] == "inspect" && out["attempt"] == 1, "{r}");
    ensure!(stderr.contains("inspect: params"), "{stderr}");

    let (code, r, stderr) = task_run("python-echo", &json!({"q": "?"}), &["--attempt", "2"])?;
    ensure!(code == 0, "{code} {r} {stderr}");
    ensure!(
        r["result"]
            == json!({"echo": {"q": "?"}, "attempt": 2, "task": "python-echo",
                      "params": {"model": "small", "retries": 2}, "language": "python"}),
        "{r}"
    );

    let (code, r, stderr) = task_run("js-echo", &json!([1, 2]), &[])?;
    ensure!(code == 0, "{code} {r} {stderr}");
    ensure!(
        r["result"]
            == json!({"echo": [1, 2], "attempt": 1, "task": "js-echo",
                      "params": {"lang": "js", "n": 1}, "language": "js"}),
        "{r}"
    );
    ensure!(stderr.contains("js-echo attempt 1 of js-echo"), "{stderr}");

    // A 0.1.0 component with params: its context has no such field; it runs unchanged.
    let (code, r, _) = task_run("echo", &json!({"same": true}), &[])?;
    ensure!(
        code == 0 && r["result"] == json!({"same": true}),
        "{code} {r}"
    );
    Ok(())
}

#[test]
fn js_guests_raise_errors_report_progress_and_cancel_cooperatively() -> Result<()> {
    guests()?;
    // A thrown object is the handler error, with its retry delay.
    let (code, r, _) = task_run("js-echo", &json!({"fail": "try later"}), &[])?;
    ensure!(code == 3 && r["outcome"] == "handler_error", "{code} {r}");
    ensure!(
        r["error"] == json!({"retryable": true, "message": "try later", "retry_after_ms": 1000}),
        "{r}"
    );

    // Progress after each step, as it happens (on stderr).
    let (code, r, stderr) = task_run("js-countdown", &json!({"steps": 3, "step_ms": 5}), &[])?;
    ensure!(code == 0, "{code} {r} {stderr}");
    ensure!(
        r["result"] == json!({"steps_done": 3, "language": "js"}),
        "{r}"
    );
    for step in ["step 1", "step 2", "step 3"] {
        ensure!(stderr.contains(step), "no progress {step:?} in {stderr}");
    }

    // A cancel: within its 2 s grace the guest sees cancel-requested and returns its own
    // retryable error (not a trap).
    let started = std::time::Instant::now();
    let (code, r, stderr) = task_run(
        "js-countdown",
        &json!({"steps": 100000, "step_ms": 10}),
        &["--cancel-after", "0.5"],
    )?;
    ensure!(
        code == 3 && r["outcome"] == "handler_error",
        "{code} {r} {stderr}"
    );
    ensure!(
        r["error"]["retryable"] == true
            && r["error"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("cancelled after ")),
        "{r}"
    );
    ensure!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_hands_params_to_each_guest() -> Result<()> {
    tokio::task::spawn_blocking(guests).await??;
    let config = e2e_config("params.yaml");
    on_each_server("params", &config, Schedule::Concurrent, |env| async move {
        let _worker = env.spawn_worker("params-1")?;
        let cases = [
            ("inspect", json!({"n": 1})),
            ("python-echo", json!({"n": 2})),
            ("js-echo", json!({"n": 3})),
            ("echo", json!({"n": 4})),
        ];
        let mut ids = Vec::new();
        for (task, payload) in &cases {
            ids.push(env.submit(task, payload.clone()).await?.id);
        }
        // The first start compiles the Python and JavaScript components (cached afterwards).
        let limit = Duration::from_secs(180);
        let mut results = Vec::new();
        for id in &ids {
            let e = env.wait_status(*id, &[S::Succeeded], limit).await?;
            results.push(e.result.context("no result")?);
        }
        ensure!(results[0]["params"] == inspect_params(), "{}", results[0]);
        ensure!(results[0]["payload"] == json!({"n": 1}), "{}", results[0]);
        ensure!(
            results[1]["params"] == json!({"model": "small", "retries": 2})
                && results[1]["language"] == "python",
            "{}",
            results[1]
        );
        ensure!(
            results[2]["params"] == json!({"lang": "js", "n": 1}) && results[2]["language"] == "js",
            "{}",
            results[2]
        );
        ensure!(results[3] == json!({"n": 4}), "{}", results[3]);
        Ok(())
    })
    .await
}
