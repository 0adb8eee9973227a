//! Workers follow deployments (docs/deployments.md#workers-follow-deployments): three
//! `onestep run` processes whose YAML lists no task, only a source with `deployed:`, serve the
//! tasks deployed into the component store and deployments tables (written here through the
//! ports, as the API would). Deploy v1 → attempts record v1's digest; deploy v2 while 100
//! executions are in flight across the three workers → those finish on v1, and every attempt
//! that starts after the discovery bound runs v2 (digests per attempt, by start time); roll
//! back to v1 the same way (100 in flight on v2); a new task is served without a restart; a
//! corrupted stored chunk is refused by the workers while the previous version keeps serving; a
//! worker is killed with SIGKILL during a deploy and nothing is lost; a worker started from
//! scratch serves every active deployment.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use chrono::{DateTime, Utc};
use onestep_core::ExecutionStatus as S;
use onestep_core::components::ComponentDigest;
use onestep_core::deploy_policy::DeploymentSettings as Typed;
use onestep_core::deployments::{NewDeployment, StoredSettings};
use onestep_core::retry::RetryPolicy;
use onestep_core::sandbox::SandboxSettings;
use onestep_e2e::{Backend, Env, NAMESPACE, Servers, WorkerProcess, guest, servers_of, wait_for};
use serde_json::json;
use uuid::Uuid;

/// `deployed.poll_s` of the test's workers.
const POLL_S: f64 = 0.3;
/// The discovery bound the test waits after a change: poll_s plus fetch and load (a debug
/// build, small components) with a wide margin: 4 s was exceeded once (by 0.1 s) with three
/// workers holding 100 attempts on a 2-core machine at load 12.
const BOUND: Duration = Duration::from_secs(8);
/// Executions in flight when the version changes (the issue's 100), across the three workers.
const IN_FLIGHT: usize = 100;
/// Concurrency of the task: three workers hold [`IN_FLIGHT`] at once.
const CONCURRENCY: u32 = 40;

fn settings(task: &str, concurrency: u32) -> Result<StoredSettings> {
    let typed = Typed {
        namespace: NAMESPACE.to_owned(),
        task: task.to_owned(),
        description: None,
        sandbox: SandboxSettings::default(),
        headers: Vec::new(),
        timeout: Some(Duration::from_secs(60)),
        retry: RetryPolicy::NoRetry,
        concurrency,
        params: serde_json::Map::new(),
    };
    Ok(StoredSettings::from_stored(&typed.to_canonical_json()?)?)
}

async fn deploy(env: &Env, task: &str, digest: &ComponentDigest, concurrency: u32) -> Result<i64> {
    let d = env
        .deployments()
        .deploy(&NewDeployment {
            namespace: NAMESPACE.to_owned(),
            task: task.to_owned(),
            digest: digest.clone(),
            settings: settings(task, concurrency)?,
            actor: "e2e".to_owned(),
            note: None,
            max_tasks: None,
        })
        .await?;
    ensure!(d.created, "a new version");
    Ok(d.deployment.version)
}

/// The component digests (hex, as attempt diagnostics record them) of `id`'s attempts.
async fn digests_of(env: &Env, id: Uuid) -> Result<Vec<String>> {
    Ok(env
        .db
        .query_strings(&format!(
            "SELECT component_digest FROM onestep_execution_attempts_diagnostics \
             WHERE execution_id = '{}'",
            id.simple()
        ))
        .await?
        .into_iter()
        .flatten()
        .collect())
}

fn hex(d: &ComponentDigest) -> String {
    d.as_str().trim_start_matches("sha256:").to_owned()
}

async fn submit_all(env: &Env, task: &str, n: usize, steps: u64) -> Result<Vec<Uuid>> {
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(
            env.submit(task, json!({"steps": steps, "step_ms": 100, "i": i}))
                .await?
                .id,
        );
    }
    Ok(ids)
}

async fn all_succeed(env: &Env, ids: &[Uuid]) -> Result<()> {
    for id in ids {
        env.wait_status(*id, &[S::Succeeded], Duration::from_secs(90))
            .await?;
    }
    Ok(())
}

/// Every attempt of every execution of `ids` ran `digest` (and each ran at least one).
async fn ran_on(env: &Env, ids: &[Uuid], digest: &ComponentDigest, what: &str) -> Result<()> {
    for id in ids {
        let got = digests_of(env, *id).await?;
        ensure!(
            !got.is_empty() && got.iter().all(|d| *d == hex(digest)),
            "{what}: execution {id} ran {got:?}, expected {}",
            hex(digest)
        );
    }
    Ok(())
}

async fn wait_running(env: &Env, ids: &[Uuid], n: usize) -> Result<Vec<Uuid>> {
    wait_for("executions running", Duration::from_secs(30), || async {
        let mut running = Vec::new();
        for id in ids {
            if env.get(*id).await?.status == S::Running {
                running.push(*id);
            }
        }
        Ok((running.len() >= n).then_some(running))
    })
    .await
}

async fn corrupt_chunk(env: &Env, digest: &ComponentDigest) -> Result<()> {
    let sql = match env.backend() {
        Backend::Postgres => format!(
            "UPDATE onestep_executions_component_chunks SET bytes = decode('00ff', 'hex') \
             WHERE digest = '{digest}' AND seq = 0"
        ),
        Backend::Mysql => format!(
            "UPDATE onestep_executions_component_chunks SET bytes = X'00ff' \
             WHERE digest = '{digest}' AND seq = 0"
        ),
    };
    env.db.query_strings(&sql).await?;
    let e = env
        .components()
        .get(digest)
        .await
        .expect_err("a corrupt chunk is detected");
    ensure!(e.to_string().contains("is corrupt"), "{e}");
    Ok(())
}

/// A payload both long-running builds run for about 8 s: `countdown`'s steps and
/// `misbehave`'s `sleep` (each ignores the other's keys).
fn long_payload(i: usize) -> serde_json::Value {
    json!({"steps": 8, "step_ms": 1000, "mode": "sleep", "secs": 8, "i": i})
}

/// The same, done at once.
fn short_payload(i: usize) -> serde_json::Value {
    json!({"steps": 1, "step_ms": 1, "mode": "sleep", "secs": 0, "i": i})
}

async fn submit_payloads(
    env: &Env,
    n: usize,
    payload: fn(usize) -> serde_json::Value,
) -> Result<Vec<Uuid>> {
    let mut ids = Vec::new();
    for i in 0..n {
        ids.push(env.submit("dep", payload(i)).await?.id);
    }
    Ok(ids)
}

/// Every attempt of `ids`: (execution, attempt number, started_at, component digest hex).
async fn attempts_of(env: &Env, ids: &[Uuid]) -> Result<Vec<(Uuid, u32, DateTime<Utc>, String)>> {
    let mut out = Vec::new();
    for id in ids {
        let attempts = env
            .client
            .attempts(*id)
            .await?
            .with_context(|| format!("execution {id} is missing"))?;
        for a in attempts {
            let digest = a
                .diagnostics
                .as_ref()
                .and_then(|d| d.facts.component_digest.clone())
                .unwrap_or_default();
            out.push((*id, a.attempt_no, a.started_at, digest));
        }
    }
    Ok(out)
}

/// `change` switches the active version of task `dep` from the build `from` to `to` while
/// [`IN_FLIGHT`] executions run `from` across the workers, and short executions are submitted
/// every 100 ms from 1 s before the change until 2 s past the bound; then: every in-flight one
/// finishes, each on `from` alone (attempts in flight finish on the version they started with),
/// and, over every attempt, each that started before the change ran `from` and each that
/// started after the change plus the bound ran `to`.
async fn switch_under_load<F, Fut>(
    env: &Env,
    what: &str,
    from: &ComponentDigest,
    to: &ComponentDigest,
    change: F,
) -> Result<()>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<()>>,
{
    let long = submit_payloads(env, IN_FLIGHT, long_payload).await?;
    wait_running(env, &long, IN_FLIGHT).await?;
    let mut stream = Vec::new();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    for i in 0..10 {
        tick.tick().await;
        stream.push(env.submit("dep", short_payload(i)).await?.id);
    }
    let before = Utc::now();
    change().await?;
    let changed = Utc::now();
    let end = tokio::time::Instant::now() + BOUND + Duration::from_secs(2);
    while tokio::time::Instant::now() < end {
        tick.tick().await;
        stream.push(env.submit("dep", short_payload(stream.len())).await?.id);
    }
    all_succeed(env, &long).await?;
    all_succeed(env, &stream).await?;
    ran_on(env, &long, from, &format!("in flight during {what}")).await?;
    let bound = chrono::Duration::from_std(BOUND)?;
    let mut late = 0;
    // The last attempt on the old build and the first on the new one, after the change.
    let (mut last_old, mut first_new) = (None::<DateTime<Utc>>, None::<DateTime<Utc>>);
    for (id, n, started, digest) in attempts_of(env, &[long, stream].concat()).await? {
        if started >= changed && digest == hex(from) {
            last_old = last_old.max(Some(started));
        }
        if started >= changed && digest == hex(to) {
            first_new = Some(first_new.map_or(started, |f| f.min(started)));
        }
        if started < before {
            ensure!(
                digest == hex(from),
                "{what}: attempt {n} of {id} started before the change ({started}) but ran {digest}"
            );
        } else if started >= changed + bound {
            late += 1;
            ensure!(
                digest == hex(to),
                "{what}: attempt {n} of {id} started {started}, after the change ({changed}) and \
                 the bound, but ran {digest}"
            );
        }
    }
    ensure!(
        late >= 10,
        "{what}: {late} attempts started after the bound"
    );
    let ms = |t: Option<DateTime<Utc>>| t.map(|t| (t - changed).num_milliseconds());
    eprintln!(
        "[{}] {what}: {IN_FLIGHT} in flight; after the change, the last attempt on the old build \
         started at +{:?} ms, the first on the new at +{:?} ms (bound {BOUND:?})",
        env.server(),
        ms(last_old),
        ms(first_new)
    );
    Ok(())
}

fn spawn(env: &Env, id: &str) -> Result<WorkerProcess> {
    env.spawn_worker(id)
}

async fn case(env: &Env) -> Result<()> {
    let countdown = env
        .components()
        .put(&std::fs::read(guest("countdown")?)?)
        .await?;
    let echo = env
        .components()
        .put(&std::fs::read(guest("echo")?)?)
        .await?;
    ensure!(countdown != echo);

    let misbehave = env
        .components()
        .put(&std::fs::read(guest("misbehave")?)?)
        .await?;
    ensure!(countdown != misbehave);

    // v1 before any worker starts: workers started from scratch serve it.
    deploy(env, "dep", &countdown, CONCURRENCY).await?;
    let mut workers = vec![spawn(env, "w1")?, spawn(env, "w2")?, spawn(env, "w3")?];

    let first = submit_all(env, "dep", 6, 1).await?;
    all_succeed(env, &first).await?;
    ran_on(env, &first, &countdown, "v1").await?;

    // v2 while 100 executions are in flight on the three workers.
    switch_under_load(env, "the v2 deploy", &countdown, &misbehave, || async {
        deploy(env, "dep", &misbehave, CONCURRENCY).await?;
        Ok(())
    })
    .await?;

    // Rollback: activate v1, the same way (100 in flight on v2).
    switch_under_load(
        env,
        "the rollback to v1",
        &misbehave,
        &countdown,
        || async {
            env.deployments()
                .activate(NAMESPACE, "dep", 1, "e2e", Some("rollback"), None)
                .await?;
            Ok(())
        },
    )
    .await?;

    // A new task deployed while the workers run.
    deploy(env, "dep2", &echo, 2).await?;
    tokio::time::sleep(BOUND).await;
    let new_task = submit_all(env, "dep2", 4, 1).await?;
    all_succeed(env, &new_task).await?;
    ran_on(env, &new_task, &echo, "the new task").await?;

    // A corrupted chunk: the workers refuse that version, v1 keeps serving.
    let flaky = env
        .components()
        .put(&std::fs::read(guest("flaky")?)?)
        .await?;
    corrupt_chunk(env, &flaky).await?;
    let bad = deploy(env, "dep", &flaky, 4).await?;
    for w in &workers {
        wait_for("the corrupt version to be refused", BOUND * 3, || async {
            Ok(w.log()
                .contains("deployment refused by this worker")
                .then_some(()))
        })
        .await?;
    }
    let log = workers[0].log();
    ensure!(
        log.contains("is corrupt") && log.contains(&format!("refused_version={bad}")),
        "the refusal names the corruption and the version:\n{log}"
    );
    let during_refusal = submit_all(env, "dep", 6, 1).await?;
    all_succeed(env, &during_refusal).await?;
    ran_on(env, &during_refusal, &countdown, "while v3 is refused").await?;

    // SIGKILL of a worker during a deploy (a new version with other settings: its claim loop
    // is rebuilt), while long executions run: nothing is lost.
    let long = submit_all(env, "dep", 9, 20).await?;
    wait_running(env, &long, 6).await?;
    deploy(env, "dep", &echo, 3).await?;
    workers[0].signal("KILL")?;
    let _ = workers[0].wait_exit(Duration::from_secs(10))?;
    tokio::time::sleep(BOUND).await;
    let after_kill = submit_all(env, "dep", 6, 1).await?;
    all_succeed(env, &long).await?;
    all_succeed(env, &after_kill).await?;
    ran_on(
        env,
        &after_kill,
        &echo,
        "after the deploy with a killed worker",
    )
    .await?;

    // A worker started from scratch serves every active deployment; stop the others first.
    for w in workers.iter_mut().skip(1) {
        w.signal("TERM")?;
        ensure!(
            w.wait_exit(Duration::from_secs(30))? == Some(0),
            "clean drain"
        );
    }
    let fresh = spawn(env, "w4")?;
    let a = submit_all(env, "dep", 3, 1).await?;
    let b = submit_all(env, "dep2", 3, 1).await?;
    all_succeed(env, &a).await?;
    all_succeed(env, &b).await?;
    ran_on(env, &a, &echo, "the fresh worker, dep").await?;
    ran_on(env, &b, &echo, "the fresh worker, dep2").await?;

    // Nothing lost, nothing run twice to success.
    let total = env.db.count_rows("executions").await?;
    ensure!(
        env.db.count_status("executions", "succeeded").await? == total,
        "every execution succeeded"
    );
    let all: BTreeSet<String> = env
        .db
        .query_strings("SELECT component_digest FROM onestep_execution_attempts_diagnostics")
        .await?
        .into_iter()
        .flatten()
        .collect();
    ensure!(
        all == BTreeSet::from([hex(&countdown), hex(&misbehave), hex(&echo)]),
        "only the three good builds ran: {all:?}"
    );
    drop(fresh);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workers_follow_deployments() -> Result<()> {
    for (server, url) in servers_of(Servers::All)? {
        let dir = tempfile::tempdir()?;
        let config = dir.path().join("deployed.yaml");
        std::fs::write(
            &config,
            format!(
                r#"apiVersion: onestep/v1alpha1
kind: App
app: {{name: e2e-deployed, shutdown_timeout_s: 5.0, logging: {{level: INFO, format: text}}}}
resources:
  db: {{type: "${{ONESTEP_E2E_BACKEND:-mysql}}", dsn: "${{ONESTEP_DSN}}"}}
  deployed:
    type: "${{ONESTEP_E2E_BACKEND:-mysql}}_execution_source"
    connector: db
    namespaces: [{NAMESPACE}]
    deployed: {{poll_s: {POLL_S}}}
    batch_size: 4
    poll_interval_s: 0.05
    lease_duration_s: 5.0
    heartbeat_interval_s: 1.0
    worker_id: "${{ONESTEP_WORKER_ID:-e2e-worker}}"
    auto_create: true
"#
            ),
        )?;
        let env = Env::new(server, &url, &config).await?;
        let outcome = case(&env).await;
        if let Err(e) = &outcome {
            eprintln!("[{server}] deployed FAILED: {e:#}\n{}", env.worker_logs());
        }
        env.finish().await?;
        outcome.with_context(|| format!("[{server}] workers follow deployments"))?;
    }
    Ok(())
}
