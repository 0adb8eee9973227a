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

/// Runs `onestep ARGS` with `envs` and `stdin` on its standard input; returns (exit code,
/// stdout, stderr).
fn onestep_stdin(
    args: &[&str],
    envs: &[(&str, &str)],
    stdin: &str,
) -> Result<(i32, String, String)> {
    use std::io::Write;
    let mut child = Command::new(onestep_bin()?)
        .args(args)
        .envs(envs.iter().copied())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("cannot run onestep")?;
    child
        .stdin
        .take()
        .context("stdin")?
        .write_all(stdin.as_bytes())?;
    let out = child.wait_with_output()?;
    Ok((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

/// `task run --steps FILE` (docs/steps.md#local-runs): the real `steps` guest starts with the
/// file's steps in memory, loads them instead of doing their work, and the report counts them;
/// a bad file exits 2 naming the file and what is wrong, before anything runs.
#[test]
fn task_run_preloads_steps_from_a_file() -> Result<()> {
    let config = e2e_config("steps.yaml");
    let config = config.to_string_lossy().into_owned();
    let dir = tempfile::tempdir()?;
    let no_db = [("ONESTEP_DSN", "mysql://nobody@127.0.0.1:1/none")];
    let payload = json!({"n": 3, "step_ms": 0}).to_string();
    let run = |extra: &[&str]| {
        let mut args = vec!["task", "run", &config, "steps", "--payload", &payload];
        args.extend_from_slice(extra);
        onestep(&args, &no_db)
    };

    // Steps 0 and 1 recorded "by attempt 7": the guest loads them, does step 2 itself (as
    // attempt 2) and reports which attempt did each step's work.
    let file = dir.path().join("steps.json");
    std::fs::write(
        &file,
        json!({"step-0": {"i": 0, "attempt": 7}, "step-1": {"i": 1, "attempt": 7}}).to_string(),
    )?;
    let path = file.to_string_lossy().into_owned();
    let (code, stdout, stderr) = run(&["--steps", &path, "--attempt", "2", "--json"])?;
    ensure!(code == 0, "exit {code}: {stdout} {stderr}");
    let r: Value = serde_json::from_str(stdout.trim())?;
    ensure!(r["result"]["attempts"] == json!([7, 7, 2]), "{r}");
    ensure!(r["result"]["ran_here"] == json!(1), "{r}");
    ensure!(
        r["steps"] == json!({"preloaded": 2, "loaded": 2, "missed": 1, "saved": 1}),
        "{r}"
    );
    // The text report's steps line.
    let (code, stdout, stderr) = run(&["--steps", &path])?;
    ensure!(code == 0, "exit {code}: {stdout} {stderr}");
    ensure!(
        stdout.contains(
            "steps:    2 preloaded, 2 loaded by the handler (1 missed), 1 saved (in memory only)"
        ),
        "{stdout}"
    );
    // Without --steps every step's work is done here.
    let (code, stdout, _) = run(&["--json"])?;
    ensure!(code == 0, "exit {code}: {stdout}");
    let r: Value = serde_json::from_str(stdout.trim())?;
    ensure!(r["result"]["ran_here"] == json!(3), "{r}");
    ensure!(
        r["steps"] == json!({"preloaded": 0, "loaded": 0, "missed": 3, "saved": 3}),
        "{r}"
    );

    // The output of `onestep steps ID --values --json`, on stdin.
    let view = json!({
        "execution_id": "2a31b3a6-72c9-4ae3-8e8e-4d6f78c00f3a",
        "items": [
            {"key": "step-0", "bytes": 19, "saved_at": "2026-12-07T12:00:00.000000+00:00",
             "attempt": 1, "attempt_id": "2a31b3a6-72c9-4ae3-8e8e-4d6f78c00f3b",
             "value": {"i": 0, "attempt": 5}}
        ],
        "total_bytes": 19, "steps_kept": true, "values_omitted": 0
    });
    let mut args = vec!["task", "run", &config, "steps", "--payload", &payload];
    args.extend_from_slice(&["--steps", "-", "--json"]);
    let (code, stdout, stderr) = onestep_stdin(&args, &no_db, &view.to_string())?;
    ensure!(code == 0, "exit {code}: {stdout} {stderr}");
    let r: Value = serde_json::from_str(stdout.trim())?;
    ensure!(r["result"]["attempts"] == json!([5, 1, 1]), "{r}");
    ensure!(r["steps"]["preloaded"] == json!(1), "{r}");

    // Bad files: exit 2, the file and what is wrong, and nothing ran.
    let bad = |name: &str, text: &str| -> Result<String> {
        let f = dir.path().join(name);
        std::fs::write(&f, text)?;
        Ok(f.to_string_lossy().into_owned())
    };
    let not_json = bad("not-json.json", "{\"step-0\": 1,\n \"step-1\": }")?;
    let array = bad("array.json", "[1, 2]")?;
    let bad_key = bad("bad-key.json", r#"{"a\nb": 1}"#)?;
    let no_value = bad(
        "no-value.json",
        &json!({"execution_id": "2a31b3a6-72c9-4ae3-8e8e-4d6f78c00f3a", "items": [
            {"key": "step-0", "bytes": 19, "saved_at": "2026-12-07T12:00:00.000000+00:00",
             "attempt": 1, "attempt_id": "2a31b3a6-72c9-4ae3-8e8e-4d6f78c00f3b"}],
            "total_bytes": 19, "steps_kept": true, "values_omitted": 0})
        .to_string(),
    )?;
    let missing = dir
        .path()
        .join("missing.json")
        .to_string_lossy()
        .into_owned();
    for (file, message) in [
        (
            &not_json,
            "not valid JSON: expected value at line 2 column 12",
        ),
        (
            &array,
            "a steps file is a JSON object of step key → recorded value",
        ),
        (
            &bad_key,
            "step \"a\\nb\": invalid step key: the key holds the control character",
        ),
        (&no_value, "items[0] (step \"step-0\") has no value"),
        (&missing, "cannot read"),
    ] {
        let (code, stdout, stderr) = run(&["--steps", file])?;
        ensure!(code == 2, "{file}: exit {code}, {stdout} {stderr}");
        ensure!(
            stderr.contains(&format!("--steps {file}: {message}")),
            "{file}: {stderr}"
        );
        ensure!(stdout.is_empty(), "{file}: something ran: {stdout}");
    }
    let (code, _, stderr) = onestep_stdin(
        &[
            "task",
            "run",
            &config,
            "steps",
            "--payload",
            "@-",
            "--steps",
            "-",
        ],
        &no_db,
        "{}",
    )?;
    ensure!(
        code == 2 && stderr.contains("cannot both read stdin"),
        "exit {code}: {stderr}"
    );
    Ok(())
}

/// `replay --with-steps` (docs/steps.md#local-runs) on every server: an execution that slept
/// once (attempt 1 did step 0 and recorded the sleep, attempt 2 the rest) replays from its
/// recorded steps — step 0 still says attempt 1, nothing is worked again, the sleep is over —
/// and without the flag does the work again (and sleeps again: parked). The steps the replay
/// saves stay in memory: the recorded steps and attempts are unchanged. `onestep steps --values
/// --json` pipes into `task run --steps -`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_with_steps_loads_the_recorded_steps() -> Result<()> {
    let config = e2e_config("sleep.yaml");
    on_each_server(
        "replay with steps",
        &config,
        Schedule::Concurrent,
        |env| async move {
            let config = e2e_config("sleep.yaml");
            let config = config.to_string_lossy().into_owned();
            let envs = env.onestep_env();
            let e = env
                .submit(
                    "steps",
                    json!({"n": 3, "step_ms": 0, "sleep_ms": 1000, "sleep_after": 1}),
                )
                .await?;
            let _w = env.spawn_worker("w1")?;
            let done = env
                .wait_status(e.id, &[S::Succeeded], Duration::from_secs(60))
                .await?;
            ensure!(done.attempts == 2, "attempts {}", done.attempts);
            let result = done.result.context("result")?;
            ensure!(result["attempts"] == json!([1, 2, 2]), "{result}");
            let recorded_steps = env.steps().list(e.id).await?;
            let keys: Vec<&str> = recorded_steps.iter().map(|s| s.key.as_str()).collect();
            ensure!(keys == ["step-0", "nap", "step-1", "step-2"], "{keys:?}");
            let id = e.id.to_string();

            let replay = |extra: &[&str]| {
                let mut args = vec!["replay", &id, "--config", &config];
                args.extend_from_slice(extra);
                onestep(&args, &envs)
            };
            let (code, stdout, stderr) = replay(&["--with-steps", "--json"])?;
            ensure!(code == 0, "exit {code}: {stdout} {stderr}");
            let r: Value = serde_json::from_str(stdout.trim())?;
            let replayed = &r["replayed"];
            ensure!(replayed["outcome"] == "succeeded", "{r}");
            // The replay is attempt 2 (the last): step 0's work is attempt 1's, from the record.
            ensure!(replayed["result"]["attempts"] == json!([1, 2, 2]), "{r}");
            ensure!(replayed["result"]["ran_here"] == json!(0), "{r}");
            ensure!(replayed["result"]["woke_in_attempt"] == json!(2), "{r}");
            ensure!(replayed["steps"]["preloaded"] == json!(4), "{r}");
            ensure!(replayed["steps"]["loaded"] == json!(3), "{r}");
            ensure!(replayed["steps"]["missed"] == json!(0), "{r}");
            ensure!(replayed["steps"]["saved"] == json!(0), "{r}");
            // The text report ends with the counts.
            let (code, stdout, stderr) = replay(&["--with-steps"])?;
            ensure!(code == 0, "exit {code}: {stdout} {stderr}");
            ensure!(
                stdout.trim_end().lines().last()
                    == Some(
                        "steps:    4 loaded from the record, 3 loaded by the handler (0 missed), \
                         0 saved (in memory only)"
                    ),
                "{stdout}"
            );

            // Without --with-steps: step 0 is worked again, and the sleep sleeps again.
            let (code, stdout, stderr) = replay(&["--json"])?;
            ensure!(code == 7, "exit {code}: {stdout} {stderr}");
            let r: Value = serde_json::from_str(stdout.trim())?;
            ensure!(r["replayed"]["outcome"] == "parked", "{r}");
            ensure!(
                r["replayed"]["steps"]
                    == json!({"preloaded": 0, "loaded": 0, "missed": 1, "saved": 2}),
                "{r}"
            );

            // Nothing written: the same steps, the same two attempts, still succeeded.
            ensure!(
                env.steps().list(e.id).await? == recorded_steps,
                "the recorded steps changed"
            );
            ensure!(
                env.db.attempts(e.id).await?.len() == 2,
                "an attempt was written"
            );
            ensure!(
                env.get(e.id).await?.status == S::Succeeded,
                "status changed"
            );

            // `onestep steps ID --values --json` into `task run --steps -`.
            let mut conn = envs.to_vec();
            conn.push(("ONESTEP_NAMESPACE", onestep_e2e::NAMESPACE));
            let (code, steps_json, stderr) = onestep(&["steps", &id, "--values", "--json"], &conn)?;
            ensure!(code == 0, "exit {code}: {stderr}");
            let payload = json!({"n": 3, "step_ms": 0}).to_string();
            let (code, stdout, stderr) = onestep_stdin(
                &[
                    "task",
                    "run",
                    &config,
                    "steps",
                    "--payload",
                    &payload,
                    "--steps",
                    "-",
                    "--json",
                ],
                &envs,
                &steps_json,
            )?;
            ensure!(code == 0, "exit {code}: {stdout} {stderr}");
            let r: Value = serde_json::from_str(stdout.trim())?;
            ensure!(r["result"]["attempts"] == json!([1, 2, 2]), "{r}");
            ensure!(r["result"]["ran_here"] == json!(0), "{r}");
            ensure!(r["steps"]["preloaded"] == json!(4), "{r}");
            Ok(())
        },
    )
    .await
}
