//! SQLite, several processes on one file (docs/sqlite.md#multi-process): `onestep migrate`
//! creates the file, three `onestep run` workers share it and drain 200 `countdown`
//! executions, one worker is killed with SIGKILL while it holds leases. Every execution ends
//! `succeeded`, none is lost, each has consecutive attempts ending in exactly one success, the
//! killed worker's attempts end `lease_lost` and are reclaimed by the others, and no attempt of
//! a fenced-out lease completed.

use std::time::Duration;

use anyhow::{Result, ensure};
use onestep_core::request::SubmitRequest;
use onestep_core::{Backend, ExecutionClient, ExecutionStatus as S, Limits};
use onestep_e2e::{NAMESPACE, WorkerProcess, e2e_config, guest, run_cli, wait_for};
use onestep_sqlite::{SqliteBackend, StoreOptions};
use serde_json::json;

const EXECUTIONS: usize = 200;
const LIMIT: Duration = Duration::from_secs(180);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_workers_share_one_file_and_survive_a_sigkill() -> Result<()> {
    guest("countdown")?;
    let dir = tempfile::tempdir()?;
    let dsn = format!(
        "sqlite://{}",
        dir.path().join("data").join("e2e.db").display()
    );
    let (code, out, err) = run_cli(&["migrate", "--dsn", &dsn], &[])?;
    ensure!(code == 0, "migrate exited {code}: {out}{err}");

    let backend = SqliteBackend::open(StoreOptions::new(dsn.clone())).await?;
    let client = ExecutionClient::new(backend.executions(), NAMESPACE, Limits::default())?;
    let mut ids = Vec::with_capacity(EXECUTIONS);
    for _ in 0..EXECUTIONS {
        let request = SubmitRequest {
            task_name: "countdown".to_owned(),
            payload: json!({"steps": 5, "step_ms": 60}),
            ..SubmitRequest::default()
        };
        ids.push(client.submit(&request).await?.id);
    }

    let config = e2e_config("worker.yaml");
    let spawn = |id: &str| {
        WorkerProcess::spawn(
            &config,
            &[
                ("ONESTEP_E2E_BACKEND", "sqlite"),
                ("ONESTEP_DSN", &dsn),
                ("ONESTEP_WORKER_ID", id),
            ],
            dir.path(),
        )
    };
    let mut workers = vec![spawn("w1")?, spawn("w2")?, spawn("w3")?];

    // Kill w2 while it holds a running attempt.
    let held = wait_for("w2 to hold a lease", LIMIT, || async {
        for id in &ids {
            let attempts = client.attempts(*id).await?.unwrap_or_default();
            if attempts
                .iter()
                .any(|a| a.worker_id == "w2" && a.status == "running")
            {
                return Ok(Some(*id));
            }
        }
        Ok(None)
    })
    .await;
    let logs = |workers: &[WorkerProcess]| {
        workers
            .iter()
            .map(WorkerProcess::log)
            .collect::<Vec<_>>()
            .join("\n----\n")
    };
    let held = match held {
        Ok(id) => id,
        Err(e) => anyhow::bail!("{e}\n{}", logs(&workers)),
    };
    workers[1].signal("KILL")?;
    // w2 may have completed attempts before it was seen holding one (a slow poll under load):
    // those are its, the ones after the kill cannot be.
    let killed_at = chrono::Utc::now();
    let code = workers[1].wait_exit(Duration::from_secs(10))?;
    ensure!(code.is_none(), "killed worker exited with {code:?}");

    let drained = wait_for("every execution to finish", LIMIT, || async {
        let counts = backend.insights().counts_by_task_status(NAMESPACE).await?;
        let open: u64 = counts
            .iter()
            .filter(|c| !c.status.is_terminal())
            .map(|c| c.count)
            .sum();
        Ok((open == 0).then_some(()))
    })
    .await;
    if let Err(e) = drained {
        anyhow::bail!("{e}\n{}", logs(&workers));
    }

    let mut lease_lost = 0;
    for id in &ids {
        let x = client
            .get(*id)
            .await?
            .ok_or_else(|| anyhow::anyhow!("execution {id} lost"))?;
        ensure!(
            x.status == S::Succeeded,
            "{id}: {:?} {:?}",
            x.status,
            x.error
        );
        let attempts = client.attempts(*id).await?.unwrap_or_default();
        ensure!(attempts.len() == x.attempts as usize, "{id}: {attempts:?}");
        let numbers: Vec<u32> = attempts.iter().map(|a| a.attempt_no).collect();
        let expected: Vec<u32> = (1..=x.attempts).collect();
        ensure!(numbers == expected, "{id}: attempt numbers {numbers:?}");
        let (last, earlier) = attempts
            .split_last()
            .ok_or_else(|| anyhow::anyhow!("{id}: no attempt"))?;
        ensure!(
            last.status == "succeeded"
                && (last.worker_id != "w2" || last.finished_at.is_some_and(|f| f <= killed_at)),
            "{id}: {last:?} (w2 killed at {killed_at})"
        );
        for a in earlier {
            // Only the killed worker lost leases; none of its attempts completed.
            ensure!(
                a.status == "lease_lost" && a.worker_id == "w2",
                "{id}: {a:?}"
            );
            lease_lost += 1;
        }
    }
    ensure!(
        lease_lost >= 1,
        "no attempt of the killed worker was reclaimed"
    );
    let reclaimed = client.attempts(held).await?.unwrap_or_default();
    ensure!(
        reclaimed.first().is_some_and(|a| a.status == "lease_lost"),
        "{reclaimed:?}"
    );
    for (i, w) in workers.iter().enumerate() {
        if i != 1 {
            w.signal("TERM")?;
        }
    }
    for w in &mut workers {
        w.wait_exit(Duration::from_secs(20)).ok();
    }
    backend.close().await?;
    Ok(())
}
