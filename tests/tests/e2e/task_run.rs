//! `onestep task run` (one attempt of a task's real component in its declared sandbox, no
//! database) and `onestep replay` (a recorded execution run again locally, nothing written),
//! through the real binary: outcome, JSON report, exit codes, and the bad inputs.

use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use onestep_core::ExecutionStatus as S;
use onestep_e2e::{Schedule, e2e_config, on_each_server, onestep_bin};
use serde_json::{Value, json};

/// Runs `onestep ARGS` with `envs`; returns (exit code, stdout, stderr).
fn onestep(args: &[&str], envs: &[(&str, &str)]) -> Result<(i32, String, String)> {
    let out = Command::new(onestep_bin()?)
        .args(args)
        .envs(envs.iter().copied())
        .output()
        .context("cannot run onestep")?;
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// `task run` of worker.yaml's `task` with `payload` and `--json`: (exit code, report).
fn task_run(task: &str, payload: &Value, extra: &[&str]) -> Result<(i32, Value, String)> {
    let config = e2e_config("worker.yaml");
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
    // No database: the DSN points nowhere.
    let (code, stdout, stderr) =
        onestep(&args, &[("ONESTEP_DSN", "mysql://nobody@127.0.0.1:1/none")])?;
    let report = serde_json::from_str(stdout.trim())
        .with_context(|| format!("not a JSON report: {stdout:?}, stderr {stderr}"))?;
    Ok((code, report, stderr))
}

/// A file whose connector names no DSN at all runs under `task run` (no database is opened)
/// and is still refused by `check`, which a worker would need.
#[test]
fn task_run_needs_no_dsn() -> Result<()> {
    let dir = std::env::temp_dir().join(format!("onestep-nodsn-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let echo = onestep_e2e::guest("echo")?;
    let file = dir.join("app.yaml");
    std::fs::write(
        &file,
        format!(
            "apiVersion: onestep/v1alpha1\nkind: App\napp: {{name: t}}\nresources:\n  db: {{type: postgres}}\n  jobs: {{type: postgres_execution_source, connector: db, namespace: default, task_names: [echo]}}\ntasks:\n  - name: echo\n    source: jobs\n    handler: {{component: '{}'}}\n",
            echo.display()
        ),
    )?;
    let file = file.to_string_lossy().into_owned();
    let (code, stdout, stderr) = onestep(
        &["task", "run", &file, "echo", "--payload", "[1]", "--json"],
        &[],
    )?;
    ensure!(code == 0, "exit {code}: {stdout} {stderr}");
    let r: Value = serde_json::from_str(stdout.trim())?;
    ensure!(
        r["outcome"] == "succeeded" && r["result"] == json!([1]),
        "{r}"
    );
    let (code, _, stderr) = onestep(&["check", &file], &[])?;
    ensure!(
        code == 2 && stderr.contains("'dsn' must be a non-empty string"),
        "exit {code}: {stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

#[test]
fn task_run_runs_one_attempt_without_a_database() -> Result<()> {
    let (code, r, stderr) = task_run("echo", &json!({"hello": "world"}), &[])?;
    ensure!(code == 0, "{code} {r} {stderr}");
    ensure!(
        r["outcome"] == "succeeded" && r["result"]["hello"] == "world",
        "{r}"
    );
    ensure!(
        r["component_sha256"]
            .as_str()
            .is_some_and(|d| d.len() == 64),
        "{r}"
    );
    ensure!(
        r["peak_memory_bytes"].as_u64().is_some_and(|m| m > 0),
        "{r}"
    );

    // A retryable handler error, seen at the attempt number given.
    let (code, r, _) = task_run(
        "flaky",
        &json!({"succeed_on_attempt": 3}),
        &["--attempt", "2"],
    )?;
    ensure!(code == 3 && r["outcome"] == "handler_error", "{code} {r}");
    ensure!(r["error"]["retryable"] == true, "{r}");
    ensure!(
        r["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("attempt 2")),
        "{r}"
    );
    let (code, r, _) = task_run(
        "flaky",
        &json!({"succeed_on_attempt": 3}),
        &["--attempt", "3"],
    )?;
    ensure!(code == 0, "{code} {r}");

    // A trap, the task's 1 s timeout, and a cancel.
    let (code, r, _) = task_run("misbehave", &json!({"mode": "panic"}), &[])?;
    ensure!(code == 4 && r["outcome"] == "trapped", "{code} {r}");
    ensure!(
        r["error"]
            .as_str()
            .is_some_and(|e| e.contains("deliberate panic")),
        "{r}"
    );
    let (code, r, _) = task_run("misbehave", &json!({"mode": "spin"}), &[])?;
    ensure!(code == 5 && r["outcome"] == "timeout", "{code} {r}");
    let started = std::time::Instant::now();
    let (code, r, _) = task_run(
        "sleepy",
        &json!({"mode": "sleep", "secs": 3600}),
        &["--cancel-after", "0.3"],
    )?;
    ensure!(code == 6 && r["outcome"] == "cancelled", "{code} {r}");
    ensure!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );

    // The sandbox is the task's: misbehave cannot read /etc/passwd.
    let (code, r, _) = task_run("misbehave", &json!({"mode": "read_passwd"}), &[])?;
    ensure!(code == 0, "{code} {r}");
    ensure!(r["result"]["denied"] == true, "{r}");

    // Bad input: exit 2 with a specific message.
    let config = e2e_config("worker.yaml");
    let config = config.to_string_lossy();
    for (args, message) in [
        (
            vec!["task", "run", &config, "nope", "--payload", "{}"],
            "no task 'nope' in",
        ),
        (
            vec!["task", "run", &config, "echo", "--payload", "{bad"],
            "--payload is not valid JSON",
        ),
        (
            vec![
                "task",
                "run",
                &config,
                "echo",
                "--payload",
                "{}",
                "--metadata",
                "[1]",
            ],
            "--metadata must be a JSON object",
        ),
        (
            vec!["task", "run", "/no/such.yaml", "echo", "--payload", "{}"],
            "failed to load /no/such.yaml",
        ),
    ] {
        let (code, _, stderr) = onestep(&args, &[])?;
        ensure!(code == 2, "{args:?}: exit {code}, {stderr}");
        ensure!(stderr.contains(message), "{args:?}: {stderr}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_runs_a_recorded_execution_locally_and_writes_nothing() -> Result<()> {
    let config = e2e_config("worker.yaml");
    on_each_server("replay", &config, Schedule::Concurrent, |env| async move {
        let config = e2e_config("worker.yaml");
        let config = config.to_string_lossy().into_owned();
        let envs = env.onestep_env();
        let e = env.submit("misbehave", json!({"mode": "fatal"})).await?;
        let id = e.id.to_string();
        let (code, stdout, stderr) = onestep(
            &[
                "replay",
                &id,
                "--config",
                &config,
                "--task",
                "misbehave",
                "--json",
            ],
            &envs,
        )?;
        ensure!(code == 3, "exit {code}: {stdout} {stderr}");
        let r: Value = serde_json::from_str(stdout.trim())?;
        ensure!(r["recorded"]["status"] == "queued", "{r}");
        ensure!(r["replayed"]["outcome"] == "handler_error", "{r}");
        ensure!(
            r["replayed"]["error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("deliberate fatal error")),
            "{r}"
        );
        // Nothing written: still queued, no attempt.
        let after = env.get(e.id).await?;
        ensure!(
            after.status == S::Queued && after.attempts == 0,
            "{after:?}"
        );
        ensure!(
            env.db.attempts(e.id).await?.is_empty(),
            "an attempt was written"
        );

        // An execution another task's source cannot see, and one that does not exist.
        let missing = uuid::Uuid::new_v4().to_string();
        let (code, _, stderr) = onestep(
            &[
                "replay",
                &missing,
                "--config",
                &config,
                "--task",
                "misbehave",
            ],
            &envs,
        )?;
        ensure!(code == 2, "exit {code}: {stderr}");
        ensure!(stderr.contains("no execution"), "{stderr}");
        let (code, _, stderr) = onestep(&["replay", "not-an-id", "--config", &config], &envs)?;
        ensure!(code == 2, "exit {code}: {stderr}");
        // Without --task the file's several tasks' sources are searched for the id, and the
        // execution runs with the task named like its own.
        let (code, stdout, stderr) =
            onestep(&["replay", &id, "--config", &config, "--json"], &envs)?;
        ensure!(code == 3, "exit {code}: {stdout} {stderr}");
        let r: Value = serde_json::from_str(stdout.trim())?;
        ensure!(r["replayed"]["outcome"] == "handler_error", "{r}");
        let (code, _, stderr) = onestep(&["replay", &missing, "--config", &config], &envs)?;
        ensure!(
            code == 2 && stderr.contains("no execution") && stderr.contains("misbehave"),
            "exit {code}: {stderr}"
        );
        Ok(())
    })
    .await
}
