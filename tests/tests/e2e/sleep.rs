//! Sleeping handlers (docs/steps.md#sleep), on every server, with the `steps` guest (world
//! `onestep:handler@0.3.0`) under a real `onestep run` worker (`config/e2e/sleep.yaml`):
//!
//! * `sleep(10 s)` on a task with `concurrency: 1`: the attempt parks (its slot and lease
//!   freed at once), another execution of the task runs and finishes during the sleep, and the
//!   sleeper resumes at its wake time with its earlier steps loaded and succeeds;
//! * two executions that each sleep on that one slot: the second runs (and sleeps, and ends)
//!   while the first sleeps, and both succeed;
//! * a cancel during a sleep ends the execution at once (nobody runs it again);
//! * `max_duration_s` (5 s): a sleep that would end after it, and an execution still running
//!   at it, fail with `timeout` / `MaxDurationExceeded`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use onestep_core::ExecutionStatus as S;
use onestep_e2e::{Env, Schedule, e2e_config, on_each_server, statuses};
use serde_json::json;

const LIMIT: Duration = Duration::from_secs(60);

/// The steps of one execution as `key → attempt_no`.
async fn saved(env: &Env, id: uuid::Uuid) -> Result<BTreeMap<String, u32>> {
    let id = match env.backend() {
        onestep_e2e::Backend::Mysql => format!("'{}'", id.simple()),
        onestep_e2e::Backend::Postgres => format!("'{id}'"),
    };
    let mut out = BTreeMap::new();
    for row in env
        .db
        .query_strings(&format!(
            "SELECT CONCAT(step_key, ':', attempt_no) FROM onestep_executions_steps \
             WHERE execution_id = {id}"
        ))
        .await?
        .into_iter()
        .flatten()
    {
        let (key, attempt) = row.rsplit_once(':').context("key:attempt")?;
        out.insert(key.to_owned(), attempt.parse()?);
    }
    Ok(out)
}

/// Waits until the execution's only attempt is `parked`.
async fn wait_parked(env: &Env, id: uuid::Uuid) -> Result<()> {
    env.wait_attempts(id, "the attempt parked", LIMIT, |rows| {
        statuses(rows) == ["parked"]
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleep_frees_the_slot_and_resumes_with_its_steps() -> Result<()> {
    let config = e2e_config("sleep.yaml");
    on_each_server(
        "sleep frees the slot",
        &config,
        Schedule::Concurrent,
        |env| async move {
            let sleeper = env
                .submit(
                    "steps",
                    json!({"n": 4, "step_ms": 50, "sleep_ms": 10_000, "sleep_after": 2}),
                )
                .await?;
            let _w = env.spawn_worker("w1")?;
            wait_parked(&env, sleeper.id).await?;
            let parked = env.get(sleeper.id).await?;
            ensure!(parked.status == S::Queued, "{}", parked.status);
            ensure!(parked.attempts == 1, "attempts {}", parked.attempts);
            let rows = env.db.attempts(sleeper.id).await?;
            // The wake time is 10 s after the sleep call (after the attempt started, before it
            // parked).
            let parked_at = rows[0].finished_at.context("parked attempt finished")?;
            let sleep = onestep_e2e::secs_between(parked_at, parked.available_at.naive_utc());
            let since_start =
                onestep_e2e::secs_between(rows[0].started_at, parked.available_at.naive_utc());
            ensure!(
                sleep <= 10.0 && since_start >= 10.0,
                "wake {sleep} s after the park, {since_start} s after the attempt's start"
            );
            // The one slot is free: another execution runs and ends during the sleep.
            let other = env.submit("steps", json!({"n": 2, "step_ms": 50})).await?;
            let done = env.wait_status(other.id, &[S::Succeeded], LIMIT).await?;
            let finished = done.finished_at.context("finished_at")?;
            ensure!(
                finished < parked.available_at,
                "the other execution ended at {finished}, after the wake time {}",
                parked.available_at
            );
            ensure!(
                env.get(sleeper.id).await?.status == S::Queued,
                "still asleep"
            );
            // The sleeper resumes at its wake time with its earlier steps.
            let woke = env.wait_status(sleeper.id, &[S::Succeeded], LIMIT).await?;
            ensure!(woke.attempts == 2, "attempts {}", woke.attempts);
            let result = woke.result.context("result")?;
            ensure!(result["attempts"] == json!([1, 1, 2, 2]), "{result}");
            ensure!(result["ran_here"] == json!(2), "{result}");
            ensure!(result["woke_in_attempt"] == json!(2), "{result}");
            let rows = env.db.attempts(sleeper.id).await?;
            ensure!(
                statuses(&rows) == ["parked", "succeeded"],
                "{:?}",
                statuses(&rows)
            );
            let resumed =
                onestep_e2e::secs_between(parked.available_at.naive_utc(), rows[1].started_at);
            ensure!(resumed >= 0.0, "claimed {resumed} s before its wake time");
            eprintln!(
                "[{}] sleep 10 s: parked for {sleep:.3} s, claimed {resumed:.3} s after the \
                 wake time",
                env.server()
            );
            let steps = saved(&env, sleeper.id).await?;
            let want: BTreeMap<String, u32> = [
                ("step-0", 1),
                ("step-1", 1),
                ("nap", 1),
                ("step-2", 2),
                ("step-3", 2),
            ]
            .into_iter()
            .map(|(k, a)| (k.to_owned(), a))
            .collect();
            ensure!(steps == want, "{steps:?}");
            Ok(())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sleepers_share_one_slot() -> Result<()> {
    let config = e2e_config("sleep.yaml");
    on_each_server(
        "two sleepers, one slot",
        &config,
        Schedule::Concurrent,
        |env| async move {
            // The first sleeps 10 s after one step; it holds the task's only slot until it parks.
            let first = env
                .submit(
                    "steps",
                    json!({"n": 2, "step_ms": 50, "sleep_ms": 10_000, "sleep_after": 1}),
                )
                .await?;
            let _w = env.spawn_worker("w1")?;
            wait_parked(&env, first.id).await?;
            let first_wake = env.get(first.id).await?.available_at;
            // The second runs in the freed slot during the first's sleep, and sleeps too (2 s).
            let second = env
                .submit(
                    "steps",
                    json!({"n": 2, "step_ms": 50, "sleep_ms": 2_000, "sleep_after": 1}),
                )
                .await?;
            wait_parked(&env, second.id).await?;
            let rows = env.db.attempts(second.id).await?;
            ensure!(
                rows[0].started_at < first_wake.naive_utc(),
                "the second started at {}, after the first's wake time {first_wake}",
                rows[0].started_at
            );
            ensure!(
                env.get(first.id).await?.status == S::Queued,
                "the first is still asleep"
            );
            // Both wake and finish.
            for (name, e) in [("first", &first), ("second", &second)] {
                let done = env.wait_status(e.id, &[S::Succeeded], LIMIT).await?;
                ensure!(done.attempts == 2, "{name}: attempts {}", done.attempts);
                let result = done.result.context("result")?;
                ensure!(result["woke_in_attempt"] == json!(2), "{name}: {result}");
                let rows = env.db.attempts(e.id).await?;
                ensure!(
                    statuses(&rows) == ["parked", "succeeded"],
                    "{name}: {:?}",
                    statuses(&rows)
                );
            }
            // The second's whole run (its sleep included) fit inside the first's sleep.
            let second_done = env.get(second.id).await?;
            let finished = second_done.finished_at.context("finished_at")?;
            ensure!(
                finished < first_wake,
                "the second ended at {finished}, after the first's wake time {first_wake}"
            );
            Ok(())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_during_a_sleep_ends_it_at_once() -> Result<()> {
    let config = e2e_config("sleep.yaml");
    on_each_server(
        "cancel during a sleep",
        &config,
        Schedule::Concurrent,
        |env| async move {
            let e = env
                .submit(
                    "steps",
                    json!({"n": 2, "step_ms": 10, "sleep_ms": 60_000, "sleep_after": 1}),
                )
                .await?;
            let _w = env.spawn_worker("w1")?;
            wait_parked(&env, e.id).await?;
            let asked = Instant::now();
            let c = env
                .client
                .cancel(e.id, Some("no longer needed"))
                .await?
                .context("exists")?;
            ensure!(c.status == S::Cancelled, "{}", c.status);
            let ended = env.wait_status(e.id, &[S::Cancelled], LIMIT).await?;
            let took = asked.elapsed();
            ensure!(took < Duration::from_secs(1), "cancelled after {took:?}");
            ensure!(ended.finished_at.is_some(), "finished");
            // Nobody runs it again: the worker keeps polling, the parked attempt stays the last.
            tokio::time::sleep(Duration::from_secs(2)).await;
            let rows = env.db.attempts(e.id).await?;
            ensure!(statuses(&rows) == ["parked"], "{:?}", statuses(&rows));
            ensure!(
                env.get(e.id).await?.status == S::Cancelled,
                "still cancelled"
            );
            eprintln!(
                "[{}] cancel of a sleeping execution: {took:?}",
                env.server()
            );
            Ok(())
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_duration_ends_a_sleeping_execution() -> Result<()> {
    let config = e2e_config("sleep.yaml");
    on_each_server(
        "max_duration_s",
        &config,
        Schedule::Concurrent,
        |env| async move {
            // A sleep that would end after the 5 s bound fails at once.
            let long = env
                .submit(
                    "bounded",
                    json!({"n": 2, "step_ms": 10, "sleep_ms": 10_000, "sleep_after": 1}),
                )
                .await?;
            // A sleep within the bound, then a step that is still running at it.
            let late = env
                .submit(
                    "bounded",
                    json!({"n": 3, "step_ms": 1_500, "sleep_ms": 1_500, "sleep_after": 1}),
                )
                .await?;
            let _w = env.spawn_worker("w1")?;
            let failed = env.wait_status(long.id, &[S::Failed], LIMIT).await?;
            let error = failed.error.context("error")?;
            ensure!(
                (error.kind.as_str(), error.exception_type.as_str())
                    == ("timeout", "MaxDurationExceeded"),
                "{error:?}"
            );
            let rows = env.db.attempts(long.id).await?;
            ensure!(statuses(&rows) == ["failed"], "{:?}", statuses(&rows));
            let messages = env.client.attempts(long.id).await?.context("attempts")?;
            let message = messages[0]
                .diagnostics
                .as_ref()
                .and_then(|d| d.message.clone())
                .unwrap_or_default();
            ensure!(
                message.contains("max_duration_s (5) exceeded")
                    && message.contains("its sleep would end"),
                "{message}"
            );
            let failed = env.wait_status(late.id, &[S::Failed], LIMIT).await?;
            let error = failed.error.context("error")?;
            ensure!(error.exception_type == "MaxDurationExceeded", "{error:?}");
            let rows = env.db.attempts(late.id).await?;
            ensure!(
                statuses(&rows) == ["parked", "failed"],
                "{:?}",
                statuses(&rows)
            );
            let started = failed.started_at.context("started")?;
            let ended = failed.finished_at.context("finished")?;
            let total = (ended - started).num_milliseconds();
            ensure!(
                (4_900..=15_000).contains(&total),
                "ended {total} ms after its first start"
            );
            Ok(())
        },
    )
    .await
}
