//! One tenant's bad deploy does not stop the others (docs/security.md#one-tenants-bad-deploy):
//! a real `onestep run` whose file declares a good task (`echo`), a task whose component cannot
//! be linked (`bad`: `bad-import.wasm`, an import no sandbox grants) and a task whose component
//! file is missing (`gone`) starts, serves `echo`, leaves the other two tasks' executions
//! `queued`, names both quarantined tasks and why in `/readyz` and in
//! `onestep_task_quarantined{task, reason}` on `/metrics`, and logs each once. Deploying working
//! builds of the two files lifts both quarantines through the reload and their executions
//! succeed. `onestep check --strict` still refuses the file. And a task whose source's table
//! disappears under a running worker (its claims fail with a non-retryable error) is quarantined
//! with reason `claim` while the other task keeps succeeding. On MariaDB, MySQL and PostgreSQL.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use onestep_core::ExecutionStatus as S;
use onestep_e2e::{Env, Servers, guest, run_cli, servers_of, wait_for};
use prometheus_parse::{Scrape, Value};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(60);

/// `GET url` with curl: (status, body).
fn http_get(url: &str) -> Result<(u16, String)> {
    let out = Command::new("curl")
        .args(["-sS", "-o", "-", "-w", "\n%{http_code}", url])
        .output()
        .context("cannot run curl")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", text.as_str()));
    Ok((code.trim().parse().unwrap_or(0), body.to_owned()))
}

/// The value of `onestep_task_quarantined{task, reason}`, `None` when there is no such series.
fn quarantined(base: &str, task: &str, reason: &str) -> Result<Option<f64>> {
    let (code, body) = http_get(&format!("{base}/metrics"))?;
    ensure!(code == 200, "/metrics answered {code}");
    let scrape = Scrape::parse(body.lines().map(|l| Ok(l.to_owned())))
        .context("/metrics does not parse as the Prometheus text format")?;
    Ok(scrape
        .samples
        .iter()
        .find(|s| {
            s.metric == "onestep_task_quarantined"
                && s.labels.get("task") == Some(task)
                && s.labels.get("reason") == Some(reason)
        })
        .map(|s| match s.value {
            Value::Gauge(v) | Value::Untyped(v) => v,
            _ => f64::NAN,
        }))
}

/// `/readyz`: (status code, document).
fn readyz(base: &str) -> Result<(u16, serde_json::Value)> {
    let (code, body) = http_get(&format!("{base}/readyz"))?;
    let doc = serde_json::from_str(&body).with_context(|| format!("/readyz {code}: {body:?}"))?;
    Ok((code, doc))
}

/// Writes `bytes` next to `target` and renames it over `target` (how deploy tools replace files).
fn deploy(target: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = target.with_extension("tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, target)?;
    Ok(())
}

fn source(name: &str, task: &str) -> String {
    source_on(name, task, "")
}

/// A source of `task`; `tables` adds its table lines (default tables when empty).
fn source_on(name: &str, task: &str, tables: &str) -> String {
    format!(
        r#"  {name}:
    type: "${{ONESTEP_E2E_BACKEND:-mysql}}_execution_source"
    connector: db
    namespace: e2e
    task_names: [{task}]{tables}
    poll_interval_s: 0.05
    lease_duration_s: 2.0
    heartbeat_interval_s: 0.5
    worker_id: "${{ONESTEP_WORKER_ID:-e2e-worker}}"
    auto_create: true
"#
    )
}

fn config(echo: &Path, bad: &Path, gone: &Path) -> String {
    format!(
        r#"apiVersion: onestep/v1alpha1
kind: App
app: {{name: e2e-quarantine, shutdown_timeout_s: 2.0, logging: {{level: INFO, format: text}}}}
resources:
  db: {{type: "${{ONESTEP_E2E_BACKEND:-mysql}}", dsn: "${{ONESTEP_DSN}}"}}
{}{}{}tasks:
  - {{name: echo, source: echo_jobs, handler: {{component: "{}"}}}}
  - {{name: bad, source: bad_jobs, handler: {{component: "{}"}}}}
  - {{name: gone, source: gone_jobs, handler: {{component: "{}"}}}}
"#,
        source("echo_jobs", "echo"),
        source("bad_jobs", "bad"),
        source("gone_jobs", "gone"),
        echo.display(),
        bad.display(),
        gone.display()
    )
}

async fn quarantine_case(env: &Env, config: &Path, bad: &Path, gone: &Path) -> Result<()> {
    let env_vars = env.onestep_env();
    let target = config.display().to_string();
    let (code, _, stderr) = run_cli(&["check", "--strict", &target], &env_vars)?;
    ensure!(
        code == 2,
        "check --strict accepted a file with a missing component: exit {code}, {stderr}"
    );

    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let addr = format!("127.0.0.1:{port}");
    let base = format!("http://{addr}");
    let mut worker = env.spawn_worker_with(
        "w-quarantine",
        &["--metrics-addr", &addr, "--reload-interval", "0.2"],
    )?;
    // The worker starts although two of its three tasks cannot run.
    wait_for("/readyz to answer 200", LIMIT, || async {
        Ok((http_get(&format!("{base}/readyz"))?.0 == 200).then_some(()))
    })
    .await
    .with_context(|| format!("worker log:\n{}", worker.log()))?;
    let stuck_bad = env.submit("bad", json!({"n": "bad"})).await?.id;
    let stuck_gone = env.submit("gone", json!({"n": "gone"})).await?.id;
    for i in 0..5 {
        let id = env.submit("echo", json!({"n": i})).await?.id;
        env.wait_status(id, &[S::Succeeded], LIMIT).await?;
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    for id in [stuck_bad, stuck_gone] {
        let e = env.get(id).await?;
        ensure!(
            e.status == S::Queued,
            "a quarantined task's execution is {:?}",
            e.status
        );
    }

    let (code, doc) = readyz(&base)?;
    ensure!(
        code == 200 && doc["status"] == "ready",
        "/readyz {code}: {doc}"
    );
    let listed = doc["quarantined"]
        .as_array()
        .context("no quarantined list")?;
    ensure!(listed.len() == 2, "/readyz lists {listed:?}");
    let by_task = |task: &str| listed.iter().find(|q| q["task"] == task).cloned();
    let bad_entry = by_task("bad").context("/readyz does not name task 'bad'")?;
    ensure!(bad_entry["reason"] == "load", "{bad_entry}");
    let error = bad_entry["error"].as_str().unwrap_or_default();
    ensure!(
        error.starts_with(&format!(
            "task 'bad': cannot load {}: component bad.wasm cannot be linked: component imports instance `onestep:bad-import/missing`",
            bad.display()
        )),
        "/readyz error for 'bad': {error:?}"
    );
    let gone_entry = by_task("gone").context("/readyz does not name task 'gone'")?;
    let error = gone_entry["error"].as_str().unwrap_or_default();
    ensure!(
        gone_entry["reason"] == "load" && error.contains(&gone.display().to_string()),
        "{gone_entry}"
    );
    for task in ["bad", "gone"] {
        ensure!(
            quarantined(&base, task, "load")? == Some(1.0),
            "onestep_task_quarantined{{task={task},reason=load}} is not 1"
        );
    }
    ensure!(
        quarantined(&base, "echo", "load")?.is_none_or(|v| v == 0.0),
        "echo is not quarantined"
    );
    let log = worker.log();
    for task in ["bad", "gone"] {
        let lines = log
            .lines()
            .filter(|l| l.contains("task quarantined") && l.contains(&format!("task={task}")))
            .count();
        ensure!(lines == 1, "{lines} quarantine lines for {task}:\n{log}");
    }

    // Good builds arrive: the reload loads them, the quarantines lift, the work runs.
    let echo = std::fs::read(guest("echo")?)?;
    deploy(bad, &echo)?;
    deploy(gone, &echo)?;
    for id in [stuck_bad, stuck_gone] {
        env.wait_status(id, &[S::Succeeded], LIMIT).await?;
    }
    let (code, doc) = readyz(&base)?;
    ensure!(
        code == 200 && doc["quarantined"] == json!([]),
        "/readyz {code} after the fix: {doc}"
    );
    for task in ["bad", "gone"] {
        ensure!(
            quarantined(&base, task, "load")? == Some(0.0),
            "onestep_task_quarantined{{task={task},reason=load}} is not 0 after the fix"
        );
    }
    ensure!(
        worker.log().matches("task quarantine lifted").count() == 2,
        "{}",
        worker.log()
    );
    worker.signal("TERM")?;
    ensure!(
        worker.wait_exit(Duration::from_secs(20))? == Some(0),
        "clean drain"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_that_cannot_load_is_quarantined_and_the_others_run() -> Result<()> {
    for (server, url) in servers_of(Servers::All)? {
        let dir = tempfile::tempdir()?;
        let bad = dir.path().join("bad.wasm");
        std::fs::copy(guest("bad-import")?, &bad)?;
        let gone = dir.path().join("gone.wasm");
        let config = dir.path().join("quarantine.yaml");
        std::fs::write(&config, self::config(&guest("echo")?, &bad, &gone))?;
        let env = Env::new(server, &url, &config).await?;
        let outcome = quarantine_case(&env, &config, &bad, &gone).await;
        if let Err(e) = &outcome {
            eprintln!("[{server}] quarantine FAILED: {e:#}\n{}", env.worker_logs());
        }
        env.finish().await?;
        outcome.with_context(|| format!("[{server}] quarantine"))?;
    }
    Ok(())
}

async fn claim_case(env: &Env) -> Result<()> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let addr = format!("127.0.0.1:{port}");
    let base = format!("http://{addr}");
    let mut worker = env.spawn_worker_with("w-claim", &["--metrics-addr", &addr])?;
    wait_for("/readyz to answer 200", LIMIT, || async {
        Ok((http_get(&format!("{base}/readyz"))?.0 == 200).then_some(()))
    })
    .await?;
    // The bad task's table goes away (an operator's mistake, a revoked grant): its claims fail
    // with a non-retryable error.
    env.db
        .query_strings("ALTER TABLE bad_executions RENAME TO bad_executions_moved")
        .await?;
    let doc = wait_for("/readyz to list the claim quarantine", LIMIT, || async {
        // Not answering, or not yet JSON: not yet.
        Ok(readyz(&base)
            .ok()
            .map(|(_, doc)| doc)
            .filter(|doc| doc["quarantined"][0]["task"] == "bad"))
    })
    .await
    .with_context(|| format!("worker log:\n{}", worker.log()))?;
    ensure!(
        doc["status"] == "ready" && doc["quarantined"][0]["reason"] == "claim",
        "{doc}"
    );
    ensure!(
        quarantined(&base, "bad", "claim")? == Some(1.0),
        "onestep_task_quarantined{{task=bad,reason=claim}} is not 1"
    );
    for i in 0..5 {
        let id = env.submit("echo", json!({"n": i})).await?.id;
        env.wait_status(id, &[S::Succeeded], LIMIT).await?;
    }
    let log = worker.log();
    let lines = log
        .lines()
        .filter(|l| l.contains("task quarantined") && l.contains("task=bad"))
        .count();
    ensure!(lines == 1, "{lines} quarantine lines:\n{log}");
    worker.signal("TERM")?;
    ensure!(
        worker.wait_exit(Duration::from_secs(20))? == Some(0),
        "clean drain with a claim-quarantined task"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_task_whose_claims_fail_for_good_is_quarantined_and_the_others_run() -> Result<()> {
    for (server, url) in servers_of(Servers::All)? {
        let dir = tempfile::tempdir()?;
        let echo = guest("echo")?;
        let config = dir.path().join("claim.yaml");
        std::fs::write(
            &config,
            format!(
                r#"apiVersion: onestep/v1alpha1
kind: App
app: {{name: e2e-quarantine-claim, shutdown_timeout_s: 2.0, logging: {{level: INFO, format: text}}}}
resources:
  db: {{type: "${{ONESTEP_E2E_BACKEND:-mysql}}", dsn: "${{ONESTEP_DSN}}"}}
{}{}tasks:
  - {{name: echo, source: echo_jobs, handler: {{component: "{}"}}}}
  - {{name: bad, source: bad_jobs, handler: {{component: "{}"}}}}
"#,
                source("echo_jobs", "echo"),
                source_on(
                    "bad_jobs",
                    "bad",
                    "\n    table: bad_executions\n    attempts_table: bad_attempts"
                ),
                echo.display(),
                echo.display()
            ),
        )?;
        let env = Env::new(server, &url, &config).await?;
        let outcome = claim_case(&env).await;
        if let Err(e) = &outcome {
            eprintln!(
                "[{server}] claim quarantine FAILED: {e:#}\n{}",
                env.worker_logs()
            );
        }
        env.finish().await?;
        outcome.with_context(|| format!("[{server}] claim quarantine"))?;
    }
    Ok(())
}
