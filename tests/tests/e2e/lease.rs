//! Losing a worker, on MariaDB and MySQL: a SIGKILLed worker's execution is reclaimed by
//! another worker once its lease (2 s) has expired (attempt 1 `lease_lost`, attempt 2
//! `succeeded`); a SIGTERMed worker drains (docs/semantics.md#shutdown-and-drain): what finishes within
//! `shutdown_timeout_s` (1 s) succeeds, the rest is stopped and recorded `retrying` with kind
//! `cancelled`, nothing new is claimed, the process exits 0 promptly, and no row stays
//! `running`; SIGINT stops a worker the same way; a worker that cannot start exits 1.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use onestep_core::ExecutionStatus as S;
use onestep_core::request::SubmitRequest;
use onestep_e2e::{
    BACKEND_VAR, Backend, Schedule, WorkerProcess, e2e_config, on_each_server, run_cli,
    secs_between, servers, statuses,
};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(30);
/// `lease_duration_s` of `config/e2e/worker.yaml`.
const LEASE_S: f64 = 2.0;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_run_is_reclaimed_after_lease_expiry() -> Result<()> {
    let config = e2e_config("worker.yaml");
    on_each_server(
        "SIGKILL → reclaim",
        &config,
        Schedule::Concurrent,
        |env| async move {
            let mut first = env.spawn_worker("w1")?;
            let exec = env
                .submit("countdown", json!({"steps": 30, "step_ms": 100}))
                .await?;
            env.wait_status(exec.id, &[S::Running], LIMIT).await?;
            // Mid-run: at least one heartbeat went through.
            env.wait_attempts(exec.id, "a first heartbeat", LIMIT, |a| {
                a.len() == 1 && a[0].heartbeat_at > a[0].started_at
            })
            .await?;

            first.signal("KILL")?;
            let code = first.wait_exit(Duration::from_secs(10))?;
            ensure!(code.is_none(), "killed worker exited with {code:?}");
            // Nobody completes it: it stays running with w1's lease until the lease expires.
            let held = env.get(exec.id).await?;
            ensure!(held.status == S::Running, "{:?}", held.status);

            let _second = env.spawn_worker("w2")?;
            let done = env.wait_status(exec.id, &[S::Succeeded], LIMIT).await?;
            ensure!(done.attempts == 2, "{done:?}");
            let attempts = env.db.attempts(exec.id).await?;
            ensure!(
                statuses(&attempts) == ["lease_lost", "succeeded"],
                "{attempts:?}"
            );
            ensure!(attempts[0].worker_id == "w1" && attempts[1].worker_id == "w2");
            // Reclaimed only after the lease ran out: the last heartbeat extended it to
            // heartbeat_at + 2 s, and attempt 2 started after that.
            let gap = secs_between(attempts[0].heartbeat_at, attempts[1].started_at);
            ensure!(
                gap >= LEASE_S - 0.01,
                "attempt 2 started {gap:.3}s after the last heartbeat"
            );
            Ok(())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_and_exits_0_leaving_nothing_running() -> Result<()> {
    let config = e2e_config("worker.yaml");
    on_each_server(
        "SIGTERM → drain",
        &config,
        Schedule::Concurrent,
        |env| async move {
            let mut worker = env.spawn_worker("w1")?;
            let long = env
                .submit("countdown", json!({"steps": 600, "step_ms": 50}))
                .await?;
            env.wait_status(long.id, &[S::Running], LIMIT).await?;
            // A guest blocked in an hour-long host call.
            let sleeper = env
                .submit("sleepy", json!({"mode": "sleep", "secs": 3600}))
                .await?;
            env.wait_status(sleeper.id, &[S::Running], LIMIT).await?;
            // A short one that can finish inside the drain window (0.5 s < 1 s).
            let short = env
                .submit("countdown", json!({"steps": 5, "step_ms": 100}))
                .await?;
            env.wait_status(short.id, &[S::Running, S::Succeeded], LIMIT)
                .await?;

            // Work that becomes claimable only during the drain must not be claimed.
            let late = env
                .client
                .submit(&SubmitRequest {
                    task_name: "echo".into(),
                    payload: json!("late"),
                    delay_s: Some(0.5),
                    ..SubmitRequest::default()
                })
                .await?;

            let signalled = Instant::now();
            let signalled_at = chrono::Utc::now().naive_utc();
            worker.signal("TERM")?;
            let code = worker.wait_exit(Duration::from_secs(15))?;
            let took = signalled.elapsed().as_secs_f64();
            ensure!(code == Some(0), "exit {code:?}");
            // shutdown_timeout_s is 1 s; stopping the guest and writing its completion is quick.
            ensure!(took < 4.0, "the drain took {took:.2}s");
            ensure!(
                worker.log().contains("worker stopped"),
                "no clean stop in the log: {}",
                worker.log()
            );

            let short_done = env.get(short.id).await?;
            ensure!(
                short_done.status == S::Succeeded,
                "short: {:?}",
                short_done.status
            );
            let long_now = env.get(long.id).await?;
            ensure!(
                long_now.status == S::Retrying,
                "long: {:?}",
                long_now.status
            );
            let attempts = env.db.attempts(long.id).await?;
            ensure!(statuses(&attempts) == ["retrying"], "{attempts:?}");
            ensure!(
                attempts[0].error_kind.as_deref() == Some("cancelled"),
                "{attempts:?}"
            );
            // It ended during the drain: after the signal, before the process exited (the
            // time it ran before the signal depends on the machine's load and is not checked).
            let ended = secs_between(signalled_at, attempts[0].finished_at.expect("finished"));
            ensure!(
                ended < took + 0.5,
                "the long attempt ended {ended:.2}s after the signal (drain took {took:.2}s)"
            );

            let late = env.get(late.id).await?;
            ensure!(
                late.status == S::Queued && late.attempts == 0,
                "claimed during the drain: {late:?}"
            );

            let attempts = env.db.attempts(sleeper.id).await?;
            ensure!(statuses(&attempts) == ["retrying"], "sleeper: {attempts:?}");
            ensure!(
                attempts[0].error_kind.as_deref() == Some("cancelled"),
                "{attempts:?}"
            );

            ensure!(env.db.count_status("executions", "running").await? == 0);
            ensure!(env.db.count_status("execution_attempts", "running").await? == 0);
            let leases = env
                .db
                .query_strings("SELECT id FROM onestep_executions WHERE lease_token IS NOT NULL")
                .await?;
            ensure!(leases.is_empty(), "leases left behind: {leases:?}");
            Ok(())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_stops_an_idle_worker_with_exit_0() -> Result<()> {
    let config = e2e_config("worker.yaml");
    on_each_server(
        "SIGINT idle",
        &config,
        Schedule::Concurrent,
        |env| async move {
            let mut worker = env.spawn_worker("w1")?;
            // Started: it has served an execution.
            let exec = env.submit("echo", json!({"hello": "world"})).await?;
            env.wait_status(exec.id, &[S::Succeeded], LIMIT).await?;
            worker.signal("INT")?;
            let code = worker.wait_exit(Duration::from_secs(10))?;
            ensure!(code == Some(0), "exit {code:?}: {}", worker.log());
            Ok(())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_that_cannot_start_exits_1_and_bad_file_exits_2() -> Result<()> {
    let config = e2e_config("worker.yaml");
    let target = config.display().to_string();
    for (server, url) in servers()? {
        // A database that does not exist: opening the source fails (docs/cli.md#onestep-run: exit 1).
        let dsn = format!("{}/onestep_e2e_absent_database", url.trim_end_matches('/'));
        let log_dir = tempfile::tempdir()?;
        let envs = [
            ("ONESTEP_DSN", dsn.as_str()),
            (BACKEND_VAR, Backend::of(server).kind()),
        ];
        let mut worker = WorkerProcess::spawn(&config, &envs, log_dir.path())?;
        let code = worker.wait_exit(Duration::from_secs(30))?;
        let log = worker.log();
        ensure!(code == Some(1), "[{server}] exit {code:?}: {log}");
        let prefix = format!("onestep: {target} failed while running: ");
        ensure!(
            log.lines().any(|l| l.starts_with(&prefix)),
            "[{server}] no '{prefix}' line: {log}"
        );
        ensure!(!log.contains(&dsn), "[{server}] the DSN leaked: {log}");
    }
    // A file that does not load: exit 2 before anything starts.
    let dir = tempfile::tempdir()?;
    let bad = dir.path().join("bad.yaml");
    std::fs::write(&bad, "tasks: 3\n")?;
    let bad = bad.display().to_string();
    let (code, _, stderr) = run_cli(&["run", &bad], &[])?;
    ensure!(code == 2, "exit {code}: {stderr}");
    ensure!(
        stderr.starts_with(&format!("onestep: failed to load {bad}: ")),
        "{stderr:?}"
    );
    Ok(())
}
