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
            let _w2 = env.spawn_worker("w2")?;
            let done = env.wait_status(e.id, &[S::Succeeded], LIMIT).await?;
            ensure!(done.attempts == 2, "attempts {}", done.attempts);
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
