//! Redeploying a component under load (docs/cli.md#redeploying-a-component): a worker serving
//! a task from a component file gets first a broken build (refused, the old build keeps
//! serving) and then a different working build, swapped in by rename while executions keep
//! arriving. No execution is lost, each attempt records the digest of the build it ran, and the
//! attempts before and after the swap show the two digests.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use onestep_core::ExecutionStatus as S;
use onestep_e2e::{Env, Servers, guest, servers_of, wait_for};
use serde_json::json;
use sha2::{Digest, Sha256};

fn sha256(path: &Path) -> Result<String> {
    Ok(hex::encode(Sha256::digest(std::fs::read(path)?)))
}

/// Writes `bytes` next to `target` and renames it over `target` (how deploy tools replace files).
fn deploy(target: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = target.with_extension("tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, target)?;
    Ok(())
}

async fn redeploy_case(env: &Env, component: &Path) -> Result<()> {
    let echo = guest("echo")?;
    let flaky = guest("flaky")?;
    let (old, new) = (sha256(&echo)?, sha256(&flaky)?);
    let mut worker = env.spawn_worker_with("w-reload", &["--reload-interval", "0.2"])?;
    // Both components succeed on this payload: echo returns it, flaky succeeds on attempt 1.
    let payload = |i: u64| json!({"succeed_on_attempt": 1, "i": i});
    let mut ids = Vec::new();
    for i in 0..10 {
        ids.push(env.submit("hot", payload(i)).await?.id);
    }
    for id in &ids {
        env.wait_status(*id, &[S::Succeeded], Duration::from_secs(30))
            .await?;
    }

    // A broken build: refused, the old one keeps serving.
    deploy(component, b"\0asm garbage")?;
    wait_for(
        "the broken build to be refused",
        Duration::from_secs(20),
        || async { Ok(worker.log().contains("new component refused").then_some(())) },
    )
    .await?;
    let during = env.submit("hot", payload(100)).await?.id;
    let e = env
        .wait_status(during, &[S::Succeeded], Duration::from_secs(30))
        .await?;
    ensure!(e.status == S::Succeeded);
    ids.push(during);

    // Load: executions keep arriving while the working new build is deployed.
    let submitter = {
        let mut more = Vec::new();
        for i in 0..30 {
            more.push(env.submit("hot", payload(200 + i)).await?.id);
            if i == 10 {
                deploy(component, &std::fs::read(&flaky)?)?;
            }
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        more
    };
    wait_for(
        "the new build to be loaded",
        Duration::from_secs(20),
        || async { Ok(worker.log().contains("component reloaded").then_some(())) },
    )
    .await?;
    let after = env.submit("hot", payload(999)).await?.id;
    ids.extend(submitter);
    ids.push(after);
    for id in &ids {
        env.wait_status(*id, &[S::Succeeded], Duration::from_secs(60))
            .await?;
    }
    ensure!(
        env.db.count_status("executions", "succeeded").await? == ids.len() as u64,
        "every execution succeeded once"
    );
    let digests: BTreeSet<String> = env
        .db
        .query_strings("SELECT component_digest FROM onestep_execution_attempts_diagnostics")
        .await?
        .into_iter()
        .flatten()
        .collect();
    ensure!(
        digests == BTreeSet::from([old.clone(), new.clone()]),
        "digests {digests:?}, expected the two builds {old} and {new}"
    );
    let first = env
        .db
        .query_strings(&format!(
            "SELECT component_digest FROM onestep_execution_attempts_diagnostics WHERE execution_id = '{}'",
            ids[0].simple()
        ))
        .await?;
    ensure!(first == [Some(old.clone())], "before the swap: {first:?}");
    let last = env
        .db
        .query_strings(&format!(
            "SELECT component_digest FROM onestep_execution_attempts_diagnostics WHERE execution_id = '{}'",
            after.simple()
        ))
        .await?;
    ensure!(last == [Some(new.clone())], "after the swap: {last:?}");
    let result = env.get(after).await?;
    ensure!(result.status == S::Succeeded);
    let log = worker.log();
    ensure!(
        log.contains(&format!("old_digest={old}")) && log.contains(&format!("new_digest={new}")),
        "the reload line names both digests:\n{log}"
    );
    worker.signal("TERM")?;
    ensure!(
        worker.wait_exit(Duration::from_secs(20))? == Some(0),
        "clean drain after the reload"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_component_is_redeployed_under_load_without_losing_work() -> Result<()> {
    for (server, url) in servers_of(Servers::All)? {
        let dir = tempfile::tempdir()?;
        let component = dir.path().join("hot.wasm");
        std::fs::copy(guest("echo")?, &component)?;
        let config = dir.path().join("reload.yaml");
        std::fs::write(
            &config,
            format!(
                r#"apiVersion: onestep/v1alpha1
kind: App
app: {{name: e2e-reload, shutdown_timeout_s: 2.0, logging: {{level: INFO, format: text}}}}
resources:
  db: {{type: "${{ONESTEP_E2E_BACKEND:-mysql}}", dsn: "${{ONESTEP_DSN}}"}}
  jobs:
    type: "${{ONESTEP_E2E_BACKEND:-mysql}}_execution_source"
    connector: db
    namespace: e2e
    task_names: [hot]
    batch_size: 8
    poll_interval_s: 0.05
    lease_duration_s: 2.0
    heartbeat_interval_s: 0.5
    worker_id: "${{ONESTEP_WORKER_ID:-e2e-worker}}"
    auto_create: true
tasks:
  - name: hot
    source: jobs
    handler: {{component: "{}"}}
    concurrency: 4
"#,
                component.display()
            ),
        )?;
        let env = Env::new(server, &url, &config).await?;
        let outcome = redeploy_case(&env, &component).await;
        if let Err(e) = &outcome {
            eprintln!("[{server}] redeploy FAILED: {e:#}\n{}", env.worker_logs());
        }
        env.finish().await?;
        outcome.with_context(|| format!("[{server}] redeploy"))?;
    }
    Ok(())
}
