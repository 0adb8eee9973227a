//! The fleet-wide running caps under crashes (docs/semantics.md#max-running,
//! docs/semantics.md#fair-claim), on every server: three `onestep run` processes serve a task
//! with `max_running: 3` and a task whose source has `max_running_per_key: 2` (three fairness
//! keys), each worker able to run 4 of each at once. A sampler reads the executions table every
//! 50 ms and checks that no sample holds more than 3 `running`/`cancel_requested` executions of
//! the capped task or more than 2 of one key, while the test SIGKILLs a worker three times
//! (its leases keep their slots until they expire and another worker's claim reclaims them)
//! and starts a new one in its place. Every execution ends `succeeded`, some attempts ended
//! `lease_lost` (the kills hit leases), and the samples saw both caps reached (so the fleet
//! did press against them).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Result, ensure};
use onestep_core::ExecutionStatus as S;
use onestep_core::request::SubmitRequest;
use onestep_e2e::{Schedule, e2e_config, on_each_server};
use serde_json::json;

const CAP: usize = 3;
const PER_KEY: usize = 2;
const KEYS: [&str; 3] = ["a", "b", "c"];
const PER_TASK: usize = 30;
const LIMIT: Duration = Duration::from_secs(60);
const SAMPLE: Duration = Duration::from_millis(50);

/// One row per running execution: `capped`, or `keyed/<key>`.
const RUNNING_SQL: &str = "SELECT CASE WHEN task_name = 'capped' THEN 'capped' \
     ELSE CONCAT('keyed/', COALESCE(fairness_key, namespace)) END \
     FROM onestep_executions WHERE status IN ('running', 'cancel_requested')";

fn cap_of(label: &str) -> usize {
    if label == "capped" { CAP } else { PER_KEY }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn caps_hold_across_three_workers_while_workers_are_killed() -> Result<()> {
    let config = e2e_config("max_running.yaml");
    on_each_server(
        "max_running under SIGKILL",
        &config,
        Schedule::Concurrent,
        |env| async move {
            let work = json!({"steps": 4, "step_ms": 100});
            let mut ids = Vec::with_capacity(2 * PER_TASK);
            for _ in 0..PER_TASK {
                ids.push(env.submit("capped", work.clone()).await?.id);
            }
            for i in 0..PER_TASK {
                let request = SubmitRequest {
                    task_name: "keyed".into(),
                    payload: work.clone(),
                    fairness_key: Some(KEYS[i % KEYS.len()].into()),
                    ..SubmitRequest::default()
                };
                ids.push(env.client.submit(&request).await?.id);
            }

            let stop = Arc::new(AtomicBool::new(false));
            let sampler = tokio::spawn({
                let env = Arc::clone(&env);
                let stop = Arc::clone(&stop);
                async move {
                    let mut samples = 0usize;
                    let mut most: BTreeMap<String, usize> = BTreeMap::new();
                    while !stop.load(Ordering::SeqCst) {
                        let mut now: BTreeMap<String, usize> = BTreeMap::new();
                        for label in env
                            .db
                            .query_strings(RUNNING_SQL)
                            .await?
                            .into_iter()
                            .flatten()
                        {
                            *now.entry(label).or_default() += 1;
                        }
                        for (label, n) in &now {
                            ensure!(
                                *n <= cap_of(label),
                                "sample {samples}: {n} running for {label} (cap {}): {now:?}",
                                cap_of(label)
                            );
                            let m = most.entry(label.clone()).or_default();
                            *m = (*m).max(*n);
                        }
                        samples += 1;
                        tokio::time::sleep(SAMPLE).await;
                    }
                    anyhow::Ok((samples, most))
                }
            });

            let mut workers = [
                env.spawn_worker("w1")?,
                env.spawn_worker("w2")?,
                env.spawn_worker("w3")?,
            ];
            for round in 0..3 {
                tokio::time::sleep(Duration::from_millis(1500)).await;
                let slot = round % workers.len();
                workers[slot].signal("KILL")?;
                let code = workers[slot].wait_exit(Duration::from_secs(10))?;
                ensure!(code.is_none(), "killed worker exited with {code:?}");
                workers[slot] = env.spawn_worker(&format!("w{}-{round}", slot + 1))?;
            }
            let mut finished = Ok(());
            for id in &ids {
                if let Err(e) = env.wait_status(*id, &[S::Succeeded], LIMIT).await {
                    finished = Err(e);
                    break;
                }
            }
            stop.store(true, Ordering::SeqCst);
            let (samples, most) = sampler.await??;
            finished?;
            ensure!(samples >= 20, "only {samples} samples");
            // The kills hit workers holding leases: their attempts were reclaimed.
            let lost = env
                .db
                .query_strings(
                    "SELECT status FROM onestep_execution_attempts WHERE status = 'lease_lost'",
                )
                .await?
                .len();
            ensure!(lost >= 1, "no attempt of a killed worker was reclaimed");
            ensure!(
                most.get("capped") == Some(&CAP),
                "the capped task never reached its cap: {most:?}"
            );
            ensure!(
                most.iter()
                    .any(|(label, n)| label.starts_with("keyed/") && *n == PER_KEY),
                "no key reached its cap: {most:?}"
            );
            Ok(())
        },
    )
    .await
}
