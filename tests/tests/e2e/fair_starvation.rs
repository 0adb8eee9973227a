//! Starvation (issue 30, docs/semantics.md#fair-claim), on every server: key A has 20,000
//! queued executions, submitted first; keys B–K have 50 each, submitted after. Three
//! `onestep run` processes serve the task. Every execution of B–K must start before half of
//! A's backlog has started: the test waits until all 500 have succeeded, then counts A's
//! executions that ever started (any status but `queued`), which must be under 10,000. A plain
//! oldest-first claim would start all 20,000 of A first.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use onestep_core::request::SubmitRequest;
use onestep_e2e::{Backend, Schedule, e2e_config, on_each_server};
use serde_json::json;

const A_BACKLOG: usize = 20_000;
const OTHER_KEYS: [&str; 10] = ["B", "C", "D", "E", "F", "G", "H", "I", "J", "K"];
const PER_OTHER_KEY: usize = 50;
const LIMIT: Duration = Duration::from_secs(180);

fn request(key: &str, i: usize) -> SubmitRequest {
    SubmitRequest {
        task_name: "echo".into(),
        payload: json!({"key": key, "i": i}),
        fairness_key: Some(key.into()),
        ..SubmitRequest::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_keys_start_before_half_of_a_big_backlog() -> Result<()> {
    let config = e2e_config("fair.yaml");
    on_each_server(
        "fair claim: 10 small keys beside a 20,000 backlog, 3 workers",
        &config,
        Schedule::Exclusive,
        |env| async move {
            let a: Vec<SubmitRequest> = (0..A_BACKLOG).map(|i| request("A", i)).collect();
            for chunk in a.chunks(1000) {
                for r in env.client.submit_many(chunk).await? {
                    r.context("submit A")?;
                }
            }
            let others: Vec<SubmitRequest> = OTHER_KEYS
                .iter()
                .flat_map(|k| (0..PER_OTHER_KEY).map(move |i| request(k, i)))
                .collect();
            for r in env.client.submit_many(&others).await? {
                r.context("submit B–K")?;
            }
            let _w1 = env.spawn_worker("w1")?;
            let _w2 = env.spawn_worker("w2")?;
            let _w3 = env.spawn_worker("w3")?;
            // Key of a row as the fair claim spells it (every row here has one).
            let (small_done, a_started) = match env.backend() {
                Backend::Postgres => (
                    "SELECT COUNT(*)::text FROM onestep_executions \
                     WHERE fairness_key <> 'A' AND status = 'succeeded'",
                    "SELECT COUNT(*)::text FROM onestep_executions \
                     WHERE fairness_key = 'A' AND status <> 'queued'",
                ),
                Backend::Mysql => (
                    "SELECT CAST(COUNT(*) AS CHAR) FROM onestep_executions \
                     WHERE fairness_key <> 'A' AND status = 'succeeded'",
                    "SELECT CAST(COUNT(*) AS CHAR) FROM onestep_executions \
                     WHERE fairness_key = 'A' AND status <> 'queued'",
                ),
            };
            let count = |sql: &'static str| {
                let env = env.clone();
                async move {
                    let rows = env.db.query_strings(sql).await?;
                    let n = rows.first().cloned().flatten().unwrap_or_default();
                    n.parse::<u64>().context("COUNT(*) is not a number")
                }
            };
            let small_total = (OTHER_KEYS.len() * PER_OTHER_KEY) as u64;
            let started = Instant::now();
            loop {
                let done = count(small_done).await?;
                if done == small_total {
                    break;
                }
                ensure!(
                    started.elapsed() < LIMIT,
                    "only {done} of {small_total} B–K executions succeeded in {LIMIT:?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            let a = count(a_started).await?;
            eprintln!(
                "[{}] all {small_total} B–K executions done after {:.1}s; A had started {a} of {A_BACKLOG}",
                env.server(),
                started.elapsed().as_secs_f64()
            );
            ensure!(
                a > 0,
                "A got no turn at all while B–K ran: the claim is not sharing"
            );
            ensure!(
                a < (A_BACKLOG / 2) as u64,
                "A started {a} of {A_BACKLOG} before B–K were all done (must be under half)"
            );
            Ok(())
        },
    )
    .await
}
