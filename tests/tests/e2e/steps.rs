//! Durable steps across crashes (docs/steps.md), on every server, with the `steps` guest
//! (world `onestep:handler@0.3.0`) under real `onestep run` workers:
//!
//! * a worker SIGKILLed mid-execution: a new worker resumes the execution, the steps the first
//!   attempt recorded are loaded, not run again (the output says which attempt did each step's
//!   work, and the steps table which attempt saved it);
//! * a stale attempt: a worker SIGSTOPped past its lease while another takes the execution
//!   over, then SIGCONTed, never overwrites or adds a step (its saves are fenced).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use onestep_core::ExecutionStatus as S;
use onestep_e2e::{Env, Schedule, e2e_config, on_each_server, wait_for};
use serde_json::json;

const N: usize = 30;
const LIMIT: Duration = Duration::from_secs(60);

/// The steps table as `key → attempt_no`.
async fn saved(env: &Env) -> Result<BTreeMap<String, u32>> {
    let mut out = BTreeMap::new();
    for row in env
        .db
        .query_strings("SELECT CONCAT(step_key, ':', attempt_no) FROM onestep_executions_steps")
        .await?
        .into_iter()
        .flatten()
    {
        let (key, attempt) = row.rsplit_once(':').context("key:attempt")?;
        out.insert(key.to_owned(), attempt.parse()?);
    }
    Ok(out)
}

/// Waits until at least `n` steps are saved; returns them.
async fn wait_saved(env: &Env, n: usize) -> Result<BTreeMap<String, u32>> {
    wait_for(
        &format!("[{}] {n} steps saved", env.server()),
        LIMIT,
        || async {
            let s = saved(env).await?;
            Ok((s.len() >= n).then_some(s))
        },
    )
    .await
}

/// The output's `attempts` (which attempt did the work of each step) and `ran_here`.
fn output(result: &serde_json::Value) -> Result<(Vec<u64>, u64)> {
    let attempts = result["attempts"]
        .as_array()
        .context("attempts")?
        .iter()
        .map(|a| a.as_u64().context("attempt number"))
        .collect::<Result<Vec<u64>>>()?;
    Ok((attempts, result["ran_here"].as_u64().context("ran_here")?))
}

/// The second worker's `/metrics` (docs/observability.md#worker-metrics): its attempt loaded the
/// `k` recorded steps (hits), missed and then saved the other `N - k`.
async fn step_metrics_of_the_second_attempt(addr: &str, k: usize) -> Result<()> {
    let want = [
        ("onestep_step_loads_total", "hit", k),
        ("onestep_step_loads_total", "miss", N - k),
        ("onestep_step_saves_total", "saved", N - k),
    ];
    // The attempt's figures are recorded when it ends, which may be just after the completion.
    let text = wait_for("the step metrics", Duration::from_secs(10), || async {
        let out = std::process::Command::new("curl")
            .args(["-sS", &format!("http://{addr}/metrics")])
            .output()
            .context("cannot run curl")?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        Ok(text
            .contains(r#"onestep_step_saves_total{app="e2e-steps",task="steps",result="saved"}"#)
            .then_some(text))
    })
    .await?;
    for (name, result, n) in want {
        let line = format!(r#"{name}{{app="e2e-steps",task="steps",result="{result}"}} {n}"#);
        ensure!(
            text.lines().any(|l| l == line),
            "missing {line:?} in:\n{text}"
        );
    }
    ensure!(
        !text.contains(r#"result="fenced""#) && !text.contains(r#"result="error""#),
        "{text}"
    );
    Ok(())
}

/// `onestep steps --json`, `onestep get` and `onestep attempts` show the recorded steps (key,
/// size, which attempt saved it; docs/cli.md#attempts-and-logs) as the table holds them.
fn cli_shows_the_steps(env: &Env, id: uuid::Uuid, saved: &BTreeMap<String, u32>) -> Result<()> {
    let id = id.to_string();
    let envs = [
        ("ONESTEP_DSN", env.db.dsn.as_str()),
        ("ONESTEP_NAMESPACE", onestep_e2e::NAMESPACE),
    ];
    let (code, out, err) = onestep_e2e::run_cli(&["steps", &id, "--json"], &envs)?;
    ensure!(code == 0, "onestep steps: {code} {err}");
    let view: serde_json::Value = serde_json::from_str(&out).context("steps --json")?;
    let items = view["items"].as_array().context("items")?;
    ensure!(items.len() == saved.len(), "{out}");
    for item in items {
        let key = item["key"].as_str().context("key")?;
        let attempt = item["attempt"].as_u64().context("attempt")?;
        ensure!(
            saved.get(key).map(|a| u64::from(*a)) == Some(attempt),
            "{key} by attempt {attempt}: {saved:?}"
        );
        ensure!(item["bytes"].as_u64().is_some_and(|b| b > 0), "{item}");
        ensure!(item.get("value").is_none(), "no values by default: {item}");
    }
    // One step with its value.
    let (code, out, err) = onestep_e2e::run_cli(
        &["steps", &id, "--json", "--values", "--key", "step-0"],
        &envs,
    )?;
    ensure!(code == 0, "onestep steps --values: {code} {err}");
    let view: serde_json::Value = serde_json::from_str(&out).context("steps --values")?;
    ensure!(
        view["items"].as_array().map(Vec::len) == Some(1) && !view["items"][0]["value"].is_null(),
        "{out}"
    );
    let both = saved.values().any(|a| *a == 1) && saved.values().any(|a| *a == 2);
    for command in ["get", "attempts"] {
        let (code, out, err) = onestep_e2e::run_cli(&[command, &id], &envs)?;
        ensure!(code == 0, "onestep {command}: {code} {err}");
        ensure!(
            out.contains(&format!("steps: {} (", saved.len()))
                && out.contains("KEY")
                && out.contains("step-0")
                && (!both || (out.contains(" #1 ") && out.contains(" #2 "))),
            "onestep {command} shows the steps:\n{out}"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_s_steps_are_not_run_again() -> Result<()> {
    let config = e2e_config("steps.yaml");
    on_each_server(
        "steps resume after SIGKILL",
        &config,
        Schedule::Concurrent,
        |env| async move {
            let e = env.submit("steps", json!({"n": N, "step_ms": 150})).await?;
            let mut w1 = env.spawn_worker("w1")?;
            wait_saved(&env, 5).await?;
            w1.signal("KILL")?;
            ensure!(
                w1.wait_exit(Duration::from_secs(10))?.is_none(),
                "w1 was killed"
            );
            // What the killed attempt recorded: nothing more can come from it.
            let first = saved(&env).await?;
            let k = first.len();
            ensure!((5..N).contains(&k), "{k} steps saved before the kill");
            ensure!(first.values().all(|a| *a == 1), "{first:?}");
            let port = std::net::TcpListener::bind("127.0.0.1:0")?
                .local_addr()?
                .port();
            let metrics_addr = format!("127.0.0.1:{port}");
            let _w2 = env.spawn_worker_with("w2", &["--metrics-addr", &metrics_addr])?;
            let done = env.wait_status(e.id, &[S::Succeeded], LIMIT).await?;
            ensure!(done.attempts == 2, "attempts {}", done.attempts);
            step_metrics_of_the_second_attempt(&metrics_addr, k).await?;
            let result = done.result.context("result")?;
            let (attempts, ran_here) = output(&result)?;
            ensure!(attempts.len() == N, "{result}");
            // Steps 0..k were done by attempt 1 and loaded by attempt 2; the rest ran in 2.
            let expected: Vec<u64> = (0..N).map(|i| if i < k { 1 } else { 2 }).collect();
            ensure!(attempts == expected, "{k} recorded: {attempts:?}");
            ensure!(
                ran_here == (N - k) as u64,
                "ran_here {ran_here}, {k} recorded"
            );
            let last = saved(&env).await?;
            ensure!(last.len() == N, "{last:?}");
            for (key, attempt) in &last {
                let want = if first.contains_key(key) { 1 } else { 2 };
                ensure!(*attempt == want, "{key} saved by attempt {attempt}");
            }
            let attempts = env.db.attempts(e.id).await?;
            ensure!(
                onestep_e2e::statuses(&attempts) == ["lease_lost", "succeeded"],
                "{:?}",
                onestep_e2e::statuses(&attempts)
            );
            cli_shows_the_steps(&env, e.id, &last)?;
            Ok(())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_attempt_cannot_overwrite_a_step() -> Result<()> {
    let config = e2e_config("steps.yaml");
    on_each_server(
        "stale attempt fenced",
        &config,
        Schedule::Concurrent,
        |env| async move {
            let e = env.submit("steps", json!({"n": N, "step_ms": 150})).await?;
            let w1 = env.spawn_worker("w1")?;
            wait_saved(&env, 3).await?;
            let _w2 = env.spawn_worker("w2")?;
            w1.signal("STOP")?;
            // A save already sent may still land; after that nothing comes from w1.
            tokio::time::sleep(Duration::from_millis(300)).await;
            let frozen = saved(&env).await?;
            ensure!(frozen.values().all(|a| *a == 1), "{frozen:?}");
            // w2 reclaims the expired lease and records steps of its own.
            wait_for(
                &format!("[{}] a step saved by attempt 2", env.server()),
                LIMIT,
                || async { Ok(saved(&env).await?.values().any(|a| *a == 2).then_some(())) },
            )
            .await?;
            w1.signal("CONT")?;
            let done = env.wait_status(e.id, &[S::Succeeded], LIMIT).await?;
            ensure!(done.attempts == 2, "attempts {}", done.attempts);
            // Give the resumed stale attempt time to try its next save.
            tokio::time::sleep(Duration::from_millis(1000)).await;
            let last = saved(&env).await?;
            ensure!(last.len() == N, "{last:?}");
            for (key, attempt) in &last {
                let want = if frozen.contains_key(key) { 1 } else { 2 };
                ensure!(
                    *attempt == want,
                    "{key} saved by attempt {attempt}: the stale attempt wrote after the takeover"
                );
            }
            let (attempts, _) = output(&done.result.context("result")?)?;
            let k = frozen.len();
            let expected: Vec<u64> = (0..N).map(|i| if i < k { 1 } else { 2 }).collect();
            ensure!(attempts == expected, "{k} recorded: {attempts:?}");
            Ok(())
        },
    )
    .await
}
