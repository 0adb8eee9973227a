//! PostgreSQL `LISTEN`/`NOTIFY` between API processes (docs/http-api.md#waiting,
//! docs/postgres.md#change-notifications). Two `onestep serve` on one PostgreSQL database with
//! config/e2e/notify.yaml: `api.notify: listen` and the safety-net poll slowed to 5 s.
//!
//! 1. A caller waits on instance B (`?wait=30`) for an execution submitted through A; half a
//!    second later this test claims and completes it on a connection of its own (neither API
//!    process writes it). The answer comes within [`NOTIFIED`] of the completion's
//!    `finished_at`, three times in a row: the poll, 5 s away (it read once when the caller
//!    arrived), cannot have answered, so the notification did. B's `/metrics` counts the
//!    notifications.
//! 2. Every listening session of the database is killed (`pg_terminate_backend`) while a caller
//!    waits on B, and the execution is completed at once: the caller still gets its answer
//!    within [`FALLBACK`] (B polls every 100 ms while its session is down, and once at once
//!    when it notices the loss and when it listens again).
//! 3. Both instances listen again (`onestep_api_change_listening 1`, a second session counted),
//!    the killed sessions' registrations are gone from the listeners table, and a completion
//!    again answers a caller on B within [`NOTIFIED`] — through the new session.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use onestep_core::request::{ClaimRequest, NamespaceScope};
use onestep_core::{Completion, Execution};
use onestep_e2e::{Env, e2e_config, wait_for};
use serde_json::json;

use crate::api_flow::curl;
use crate::stream::Serve;

const LIMIT: Duration = Duration::from_secs(60);
/// How late a notified waiter may answer: the notification's round trip plus one read, with
/// room for a loaded machine — far below the 5 s safety-net poll of config/e2e/notify.yaml.
const NOTIFIED: Duration = Duration::from_secs(1);
/// How late a waiter may answer once the listening sessions are killed: the 100 ms fallback
/// poll, the loss noticed, the reconnect's read; still below the 5 s poll.
const FALLBACK: Duration = Duration::from_secs(2);

fn pg_server() -> String {
    std::env::var("ONESTEP_TEST_POSTGRES_URL")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/".into())
}

async fn serve(dsn: &str, log: &std::path::Path) -> Result<Serve> {
    let s = Serve::spawn_config(
        &e2e_config("notify.yaml"),
        &[("ONESTEP_DSN", dsn), ("ONESTEP_E2E_BACKEND", "postgres")],
        log,
    )?;
    let base = s.base.clone();
    wait_for("the API to listen for changes", LIMIT, || async {
        Ok((metric(&base, "onestep_api_change_listening")? == Some(1.0)).then_some(()))
    })
    .await
    .with_context(|| std::fs::read_to_string(log).unwrap_or_default())?;
    Ok(s)
}

/// The value of an unlabelled metric of `base`'s `/metrics` (`None` before it answers).
fn metric(base: &str, name: &str) -> Result<Option<f64>> {
    let out = std::process::Command::new("curl")
        .args(["-sS", "--max-time", "5", &format!("{base}/metrics")])
        .output()
        .context("cannot run curl")?;
    if !out.status.success() {
        return Ok(None);
    }
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text.lines().find_map(|l| {
        let (n, v) = l.split_once(' ')?;
        (n == name).then(|| v.trim().parse::<f64>().ok()).flatten()
    }))
}

/// Claims `id` (the only queued execution) and completes it on the test's own connection.
async fn complete(env: &Env, id: uuid::Uuid) -> Result<Execution> {
    let leases = env.leases();
    let claim = ClaimRequest {
        namespaces: NamespaceScope::One("e2e".into()),
        task_names: vec!["countdown".into()],
        limit: 1,
        lease_duration_s: 30.0,
        worker_id: "notify-test".into(),
        fair: Default::default(),
        max_running: None,
    };
    let leased = leases.claim(&claim).await?;
    ensure!(
        leased.len() == 1 && leased[0].execution.id == id,
        "claimed {leased:?}, not {id}"
    );
    Ok(leases
        .complete(
            &leased[0].lease_ref(),
            &Completion::succeeded(json!({"done": true})),
        )
        .await?)
}

/// A caller waiting on `base` for a new execution (submitted through `submitter`) that this
/// test completes 500 ms later, right after `before_completion`: how long after the
/// completion's `finished_at` the caller had its terminal answer.
async fn answer_after_completion(
    env: &Env,
    base: &str,
    submitter: &str,
    before_completion: impl AsyncFnOnce() -> Result<()>,
) -> Result<Duration> {
    let key = format!("Idempotency-Key: {}", uuid::Uuid::new_v4());
    let (code, view) = curl(&[
        "-X",
        "POST",
        &format!("{submitter}/v1/executions"),
        "-H",
        "Content-Type: application/json",
        "-H",
        &key,
        "-d",
        r#"{"task_name": "countdown", "payload": {"steps": 1}}"#,
    ])?;
    ensure!(code == 202, "submit answered {code}: {view}");
    let id: uuid::Uuid = view["id"].as_str().context("no id")?.parse()?;
    let url = format!("{base}/v1/executions/{id}?wait=30");
    let waiting = tokio::task::spawn_blocking(move || {
        let answer = curl(&[&url]);
        (answer, chrono::Utc::now())
    });
    // Let the caller arrive and register (the poll reads once then, and next in 5 s).
    tokio::time::sleep(Duration::from_millis(500)).await;
    ensure!(
        !waiting.is_finished(),
        "the wait answered before the completion"
    );
    before_completion().await?;
    let done = complete(env, id).await?;
    let (answer, answered_at) = waiting.await?;
    let (code, body) = answer?;
    ensure!(
        code == 200 && body["status"] == "succeeded",
        "the wait answered {code}: {body}"
    );
    let finished = done.finished_at.context("no finished_at")?;
    Ok((answered_at - finished).to_std().unwrap_or(Duration::ZERO))
}

async fn listening_sessions(env: &Env) -> Result<Vec<String>> {
    Ok(env
        .db
        .query_strings(
            "SELECT pid::text FROM pg_stat_activity \
             WHERE datname = current_database() AND application_name = 'onestep listen' \
             ORDER BY pid",
        )
        .await?
        .into_iter()
        .flatten()
        .collect())
}

async fn case(env: Arc<Env>) -> Result<()> {
    let logs = tempfile::tempdir()?;
    let dsn = env.db.dsn.clone();
    let a = serve(&dsn, &logs.path().join("a.log")).await?;
    let b = serve(&dsn, &logs.path().join("b.log")).await?;
    let sessions = listening_sessions(&env).await?;
    ensure!(
        sessions.len() == 2,
        "one listening session per API process: {sessions:?}"
    );

    // 1. Notified: answers within NOTIFIED of a completion made by another connection.
    let notified_before = metric(&b.base, "onestep_api_change_notifications_total")?.unwrap_or(0.0);
    for round in 0..3 {
        let late = answer_after_completion(&env, &b.base, &a.base, async || Ok(())).await?;
        eprintln!("round {round}: answered {late:?} after the completion (notified)");
        ensure!(
            late < NOTIFIED,
            "round {round}: the caller on B answered {late:?} after the completion (bound {NOTIFIED:?}, poll 5 s)"
        );
    }
    let notified = metric(&b.base, "onestep_api_change_notifications_total")?.unwrap_or(0.0);
    ensure!(
        notified - notified_before >= 3.0,
        "B counted {notified_before} then {notified} notified executions"
    );

    // 2. The listening sessions killed while a caller waits: the fallback poll answers.
    let killed_env = Arc::clone(&env);
    let late = answer_after_completion(&env, &b.base, &a.base, async move || {
        let killed = killed_env
            .db
            .query_strings(
                "SELECT pg_terminate_backend(pid)::text FROM pg_stat_activity \
                 WHERE datname = current_database() AND application_name = 'onestep listen'",
            )
            .await?;
        ensure!(
            killed.len() == 2 && killed.iter().all(|k| k.as_deref() == Some("true")),
            "terminated {killed:?}"
        );
        Ok(())
    })
    .await?;
    eprintln!("answered {late:?} after the completion, the listening sessions killed");
    ensure!(
        late < FALLBACK,
        "with its session killed, the caller on B answered {late:?} after the completion (bound {FALLBACK:?})"
    );

    // 3. Both listen again on new sessions, the dead registrations are gone, and the new
    // session delivers.
    for s in [&a, &b] {
        let base = s.base.clone();
        wait_for("the API to listen again", LIMIT, || async {
            let up = metric(&base, "onestep_api_change_listening")? == Some(1.0);
            let sessions = metric(&base, "onestep_api_change_sessions_total")?.unwrap_or(0.0);
            Ok((up && sessions >= 2.0).then_some(()))
        })
        .await?;
    }
    let again = listening_sessions(&env).await?;
    ensure!(
        again.len() == 2 && again.iter().all(|p| !sessions.contains(p)),
        "new listening sessions {again:?} (the killed ones were {sessions:?})"
    );
    let registered: Vec<String> = env
        .db
        .query_strings("SELECT pid::text FROM onestep_executions_listeners ORDER BY pid")
        .await?
        .into_iter()
        .flatten()
        .collect();
    ensure!(
        registered == again,
        "the listeners table holds {registered:?}, the live sessions are {again:?}"
    );
    let started = Instant::now();
    let late = answer_after_completion(&env, &b.base, &a.base, async || Ok(())).await?;
    eprintln!("answered {late:?} after the completion on the new session");
    ensure!(
        late < NOTIFIED,
        "after the reconnect the caller on B answered {late:?} after the completion (bound {NOTIFIED:?}); {:?} in all",
        started.elapsed()
    );
    drop((a, b));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_notify_wakes_waiters_across_api_processes_and_survives_a_killed_session()
-> Result<()> {
    if std::env::var("ONESTEP_TEST_SKIP_POSTGRES").as_deref() == Ok("1") {
        eprintln!("skipped: ONESTEP_TEST_SKIP_POSTGRES=1");
        return Ok(());
    }
    let env = Arc::new(Env::new("postgres", &pg_server(), &e2e_config("worker.yaml")).await?);
    let outcome = case(Arc::clone(&env)).await;
    if let Ok(env) = Arc::try_unwrap(env) {
        env.finish().await?;
    }
    outcome
}
