//! A task's fleet-wide `rate_limit` (docs/semantics.md#rate-limits), on every server: two
//! `onestep run` processes serve 60 queued executions of one task limited to 5 starts a second
//! with a burst of 1 (concurrency 4 and batch size 8 each, so without the limit they would start
//! 16 at once). The attempts' `started_at` instants, taken together, never hold more than
//! `5 × W + 1` starts in a window of `W` seconds (plus the claim's own delay after its token,
//! [`CLAIM_SLACK_S`]), both workers start some, and all 60 take at least `(60 − 1) / 5` s.

use std::time::Duration;

use anyhow::{Result, ensure};
use onestep_core::ExecutionStatus as S;
use onestep_e2e::{Schedule, e2e_config, on_each_server, secs_between};
use serde_json::json;

const N: usize = 60;
const PER_SECOND: f64 = 5.0;
const BURST: f64 = 1.0;
/// A lease's `started_at` is its claim's instant, a little after its token was taken: two
/// starts may sit closer together than their tokens did by the difference of their claims'
/// durations.
const CLAIM_SLACK_S: f64 = 0.25;
const LIMIT: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_share_one_tasks_rate_limit() -> Result<()> {
    let config = e2e_config("rate_limit.yaml");
    on_each_server(
        "rate limit across two workers",
        &config,
        Schedule::Concurrent,
        |env| async move {
            let mut ids = Vec::with_capacity(N);
            for i in 0..N {
                ids.push(env.submit("echo", json!({"i": i})).await?.id);
            }
            let _w1 = env.spawn_worker("w1")?;
            let _w2 = env.spawn_worker("w2")?;
            let mut starts = Vec::with_capacity(N);
            let mut workers = std::collections::BTreeSet::new();
            for id in &ids {
                env.wait_status(*id, &[S::Succeeded], LIMIT).await?;
                let attempts = env.db.attempts(*id).await?;
                ensure!(attempts.len() == 1, "{id}: {attempts:?}");
                starts.push(attempts[0].started_at);
                workers.insert(attempts[0].worker_id.clone());
            }
            ensure!(
                workers.len() == 2,
                "both workers started executions: {workers:?}"
            );
            starts.sort_unstable();
            let t0 = starts[0];
            let at: Vec<f64> = starts.iter().map(|s| secs_between(t0, *s)).collect();
            for i in 0..at.len() {
                for j in i..at.len() {
                    let n = (j - i + 1) as f64;
                    let window = at[j] - at[i];
                    let bound = PER_SECOND * (window + CLAIM_SLACK_S) + BURST;
                    ensure!(
                        n <= bound,
                        "{n} starts within {window:.3} s (at most {bound:.2}): {at:?}"
                    );
                }
            }
            let span = at[N - 1];
            let least = (N as f64 - BURST) / PER_SECOND - CLAIM_SLACK_S;
            ensure!(
                span >= least,
                "{N} starts in {span:.3} s (< {least:.2} s): {at:?}"
            );
            Ok(())
        },
    )
    .await
}
