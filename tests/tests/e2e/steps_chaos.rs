//! Durable steps under repeated crashes (docs/steps.md#semantics), on every server: the
//! `steps-http` guest (world `onestep:handler/handler@0.3.0`) runs 100 steps whose every step's
//! work POSTs the step's key to a loopback recorder (axum, started by the test; the task's
//! `sandbox.network` allows only its origin), under three real `onestep run` workers. While the
//! execution runs, the test SIGKILLs a randomly chosen worker [`KILLS`] times, each time after a
//! random 2–6 new requests at the recorder, and starts a new worker after each kill so that
//! three stay up; [`MIN_HOLDER_KILLS`] of the kills (at least) hit the worker running the
//! execution. The random choices come from a seed printed at the start (set
//! `ONESTEP_CHAOS_SEED` to replay one).
//!
//! Then, besides the execution's success: every step key reached the recorder; each key at most
//! `1 + kills` times, and the re-runs (the sum over keys of `count - 1`) number at most the
//! kills and at most the attempts before the last (only the step in flight when an attempt
//! stops runs again); each attempt that did a step's work without its save landing did so for
//! one step at most; the latest attempt that did a key's work is the one the steps table names
//! as its saver, which is also the attempt the output names for that step; the attempts are the
//! lease-lost ones of the crashes and the last, succeeded one.
//!
//! Nothing here waits on a clock: kills follow the recorder's counts, and the limits only bound
//! a run that hangs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use axum::Router;
use axum::http::StatusCode;
use axum::routing::post;
use onestep_core::ExecutionStatus as S;
use onestep_e2e::{Env, Schedule, WorkerProcess, guest, on_each_server, statuses};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use tokio::sync::watch;
use uuid::Uuid;

/// Steps of the execution.
const N: usize = 100;
/// Each step's work waits this long before its request.
const STEP_MS: u64 = 20;
/// Workers kept running.
const WORKERS: usize = 3;
/// SIGKILLs during the run.
const KILLS: usize = 8;
/// Of them, at least this many hit the worker running the execution.
const MIN_HOLDER_KILLS: usize = 3;
/// Bounds a run that hangs (never reached by a working one).
const LIMIT: Duration = Duration::from_secs(240);

/// One request the recorder received.
#[derive(Debug, Clone)]
struct Record {
    execution: String,
    key: String,
    attempt: u32,
    worker: String,
}

/// The loopback server the guest's steps POST to: it keeps every request and bumps `changed`.
#[derive(Debug, Clone)]
struct Recorder {
    records: Arc<Mutex<Vec<Record>>>,
    changed: Arc<watch::Sender<u64>>,
}

impl Recorder {
    /// Starts the recorder on a loopback port; returns it and the port.
    async fn start() -> Result<(Recorder, u16)> {
        let recorder = Recorder {
            records: Arc::new(Mutex::new(Vec::new())),
            changed: Arc::new(watch::Sender::new(0)),
        };
        let state = recorder.clone();
        let app = Router::new().route(
            "/record",
            post(move |body: bytes::Bytes| {
                let state = state.clone();
                async move { state.record(&body) }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok((recorder, port))
    }

    /// Keeps one request's `{"execution", "key", "attempt", "worker"}`; 400 for anything else.
    fn record(&self, body: &[u8]) -> (StatusCode, String) {
        let parsed = serde_json::from_slice::<Value>(body).ok().and_then(|v| {
            Some(Record {
                execution: v["execution"].as_str()?.to_owned(),
                key: v["key"].as_str()?.to_owned(),
                attempt: u32::try_from(v["attempt"].as_u64()?).ok()?,
                worker: v["worker"].as_str()?.to_owned(),
            })
        });
        let Some(record) = parsed else {
            return (
                StatusCode::BAD_REQUEST,
                format!("not a record: {}", String::from_utf8_lossy(body)),
            );
        };
        match self.records.lock() {
            Ok(mut records) => records.push(record),
            Err(_) => return (StatusCode::INTERNAL_SERVER_ERROR, "poisoned".into()),
        }
        self.changed.send_modify(|n| *n += 1);
        (StatusCode::NO_CONTENT, String::new())
    }

    /// The requests of execution `id`, in arrival order.
    fn of(&self, id: Uuid) -> Vec<Record> {
        let id = id.to_string();
        self.records
            .lock()
            .map(|r| r.iter().filter(|r| r.execution == id).cloned().collect())
            .unwrap_or_default()
    }
}

/// The worker config: the `steps-http` task, the e2e leases of `config/e2e/steps.yaml` (2 s,
/// heartbeats every 0.5 s, so a killed worker's execution is reclaimed within seconds), and a
/// network sandbox that allows only the recorder.
fn write_config(dir: &Path, port: u16) -> Result<PathBuf> {
    let component = guest("steps-http")?;
    let yaml = format!(
        r#"apiVersion: onestep/v1alpha1
kind: App
app:
  name: e2e-steps-chaos
  shutdown_timeout_s: 1.0
  logging: {{level: INFO, format: text}}
resources:
  db:
    type: "${{ONESTEP_E2E_BACKEND:-mysql}}"
    dsn: "${{ONESTEP_DSN}}"
    engine_options: {{max_connections: 10}}
  chaos_jobs:
    type: "${{ONESTEP_E2E_BACKEND:-mysql}}_execution_source"
    connector: db
    namespace: e2e
    task_names: [steps-http]
    poll_interval_s: 0.1
    lease_duration_s: 2.0
    heartbeat_interval_s: 0.5
    worker_id: "${{ONESTEP_WORKER_ID:-e2e-worker}}"
tasks:
  - name: steps-http
    source: chaos_jobs
    handler: {{component: "{component}"}}
    concurrency: 1
    timeout_s: 120.0
    retry: {{type: max_attempts, max_attempts: 3}}
    sandbox:
      network:
        allow: ["http://127.0.0.1:{port}"]
        request_timeout_s: 30
"#,
        component = component.display(),
    );
    let path = dir.join("steps_chaos.yaml");
    std::fs::write(&path, yaml)?;
    Ok(path)
}

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

/// One SIGKILL of the run.
#[derive(Debug)]
struct Kill {
    /// The killed worker's id.
    worker: String,
    /// Whether it sent the execution's latest request (it was running the execution).
    holder: bool,
    /// Distinct keys recorded once it had exited.
    distinct_after: usize,
}

/// The running workers, by id; a new one gets the next number.
struct Workers<'a> {
    env: &'a Env,
    running: Vec<(String, WorkerProcess)>,
    spawned: usize,
}

impl Workers<'_> {
    fn spawn(&mut self) -> Result<()> {
        self.spawned += 1;
        let id = format!("w{}", self.spawned);
        let worker = self.env.spawn_worker(&id)?;
        self.running.push((id, worker));
        Ok(())
    }
}

/// Waits until execution `id` has at least `want` requests at the recorder; `Ok(false)` when
/// the execution ended first.
async fn wait_records(
    env: &Env,
    recorder: &Recorder,
    changes: &mut watch::Receiver<u64>,
    id: Uuid,
    want: usize,
) -> Result<bool> {
    let deadline = tokio::time::Instant::now() + LIMIT;
    loop {
        if recorder.of(id).len() >= want {
            return Ok(true);
        }
        if env.get(id).await?.terminal() {
            return Ok(false);
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("[{}] timed out waiting for {want} requests", env.server());
        }
        // A new request wakes this at once; the timeout only re-checks the status.
        let _ = tokio::time::timeout(Duration::from_millis(500), changes.changed()).await;
    }
}

/// Kills [`KILLS`] workers at random moments while execution `id` runs, starting a new one
/// after each; returns the kills.
async fn kill_while_running(
    env: &Env,
    recorder: &Recorder,
    workers: &mut Workers<'_>,
    id: Uuid,
    rng: &mut StdRng,
) -> Result<Vec<Kill>> {
    let mut changes = recorder.changed.subscribe();
    let mut kills: Vec<Kill> = Vec::new();
    while kills.len() < KILLS {
        let gap = rng.random_range(2..=6usize);
        let want = recorder.of(id).len() + gap;
        if !wait_records(env, recorder, &mut changes, id, want).await? {
            bail!(
                "[{}] the execution ended after {} of {KILLS} kills",
                env.server(),
                kills.len()
            );
        }
        // The running execution is the latest requester's among the live workers (a request
        // the last victim sent just before it died may be counted after its death).
        let records = recorder.of(id);
        let holder_at = records
            .iter()
            .rev()
            .find_map(|r| workers.running.iter().position(|(w, _)| *w == r.worker));
        let holder_kills = kills.iter().filter(|k| k.holder).count();
        let must_hit = MIN_HOLDER_KILLS.saturating_sub(holder_kills) >= KILLS - kills.len();
        let at = match holder_at {
            Some(at) if must_hit => at,
            _ => rng.random_range(0..workers.running.len()),
        };
        let (worker, mut process) = workers.running.remove(at);
        process.signal("KILL")?;
        let code = tokio::task::block_in_place(|| process.wait_exit(Duration::from_secs(10)))?;
        ensure!(
            code.is_none(),
            "{worker} exited with {code:?}, not by SIGKILL"
        );
        let distinct_after = recorder
            .of(id)
            .iter()
            .map(|r| r.key.as_str())
            .collect::<BTreeSet<_>>()
            .len();
        let kill = Kill {
            holder: holder_at == Some(at),
            worker,
            distinct_after,
        };
        eprintln!(
            "[{}] kill {}: {}{} after {} requests, {} keys",
            env.server(),
            kills.len() + 1,
            kill.worker,
            if kill.holder {
                " (running the execution)"
            } else {
                ""
            },
            recorder.of(id).len(),
            kill.distinct_after,
        );
        kills.push(kill);
        workers.spawn()?;
    }
    Ok(kills)
}

/// `result.attempts`: which attempt did each step's work.
fn output_attempts(result: &Value) -> Result<(Vec<u32>, u64)> {
    let attempts = result["attempts"]
        .as_array()
        .context("attempts")?
        .iter()
        .map(|a| {
            a.as_u64()
                .and_then(|a| u32::try_from(a).ok())
                .context("attempt number")
        })
        .collect::<Result<Vec<u32>>>()?;
    Ok((attempts, result["ran_here"].as_u64().context("ran_here")?))
}

async fn chaos_case(env: Arc<Env>, recorder: Recorder, port: u16, seed: u64) -> Result<()> {
    let server = env.server();
    // One generator per server, from the printed seed.
    let salt = server
        .bytes()
        .fold(0u64, |h, b| h.wrapping_mul(31).wrapping_add(u64::from(b)));
    let mut rng = StdRng::seed_from_u64(seed ^ salt);
    let record_url = format!("http://127.0.0.1:{port}/record");
    let e = env
        .submit(
            "steps-http",
            json!({"n": N, "step_ms": STEP_MS, "record_url": record_url}),
        )
        .await?;
    let mut workers = Workers {
        env: &env,
        running: Vec::new(),
        spawned: 0,
    };
    for _ in 0..WORKERS {
        workers.spawn()?;
    }
    let kills = kill_while_running(&env, &recorder, &mut workers, e.id, &mut rng).await?;
    let done = env.wait_status(e.id, &[S::Succeeded], LIMIT).await?;
    let k = kills.len();
    ensure!(k >= 5, "{k} kills");

    // The recorder: every key, each at most 1 + kills times, re-runs at most the kills.
    let records = recorder.of(e.id);
    let mut by_key: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for r in &records {
        by_key.entry(r.key.clone()).or_default().push(r.attempt);
    }
    let want_keys: BTreeSet<String> = (0..N).map(|i| format!("step-{i}")).collect();
    ensure!(
        by_key.keys().cloned().collect::<BTreeSet<_>>() == want_keys,
        "recorded keys {:?}",
        by_key.keys()
    );
    let mut reruns = 0usize;
    for (key, attempts) in &by_key {
        ensure!(
            attempts.len() <= 1 + k,
            "{key} recorded {} times with {k} kills",
            attempts.len()
        );
        reruns += attempts.len() - 1;
    }
    ensure!(reruns <= k, "{reruns} re-runs with {k} kills: {by_key:?}");
    let n_attempts = done.attempts;
    ensure!(
        reruns < n_attempts as usize,
        "{reruns} re-runs with {n_attempts} attempts"
    );

    // The steps table, the recorder and the output agree on which attempt did each step.
    let table = saved(&env).await?;
    ensure!(
        table.keys().cloned().collect::<BTreeSet<_>>() == want_keys,
        "steps table {table:?}"
    );
    let result = done.result.clone().context("result")?;
    let (out_attempts, ran_here) = output_attempts(&result)?;
    ensure!(out_attempts.len() == N, "{result}");
    ensure!(
        out_attempts.windows(2).all(|w| w[0] <= w[1]),
        "a step done before an earlier one: {out_attempts:?}"
    );
    // Keys an attempt did the work of without its save landing: the step in flight at its end.
    let mut unsaved: BTreeMap<u32, Vec<String>> = BTreeMap::new();
    for (i, saver) in out_attempts.iter().enumerate() {
        let key = format!("step-{i}");
        ensure!(
            table.get(&key) == Some(saver),
            "{key}: output says attempt {saver}, the steps table {:?}",
            table.get(&key)
        );
        ensure!(
            (1..=n_attempts).contains(saver),
            "{key} by attempt {saver} of {n_attempts}"
        );
        let attempts = &by_key[&key];
        let distinct: BTreeSet<u32> = attempts.iter().copied().collect();
        ensure!(
            distinct.len() == attempts.len(),
            "{key}: an attempt did its work twice: {attempts:?}"
        );
        // The saver is the latest attempt that did the work (a stale attempt's save is fenced).
        ensure!(
            distinct.last() == Some(saver),
            "{key} saved by attempt {saver}, requests by {attempts:?}"
        );
        for a in attempts.iter().filter(|a| *a != saver) {
            unsaved.entry(*a).or_default().push(key.clone());
        }
    }
    for (attempt, keys) in &unsaved {
        ensure!(
            keys.len() == 1 && *attempt < n_attempts,
            "attempt {attempt} did the work of {keys:?} without saving it"
        );
    }
    let last_did = out_attempts.iter().filter(|a| **a == n_attempts).count();
    ensure!(
        ran_here == last_did as u64,
        "ran_here {ran_here}, {last_did} steps by the last attempt"
    );

    // The attempts: the crashed ones lost their lease, the last one succeeded.
    let rows = env.db.attempts(e.id).await?;
    let st = statuses(&rows);
    ensure!(rows.len() == n_attempts as usize, "{st:?}");
    ensure!(
        st.last() == Some(&"succeeded") && st[..st.len() - 1].iter().all(|s| *s == "lease_lost"),
        "{st:?}"
    );
    let effective = kills
        .iter()
        .filter(|k| k.holder && k.distinct_after < N)
        .count();
    ensure!(
        effective >= MIN_HOLDER_KILLS,
        "{effective} kills stopped the running attempt: {kills:?}"
    );
    ensure!(
        st.len() > effective,
        "{} attempts after {effective} kills of the running worker",
        st.len()
    );
    eprintln!(
        "[{server}] {k} kills ({effective} of the running worker), {n_attempts} attempts, \
         {reruns} re-runs, {} requests",
        records.len()
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_survive_repeated_worker_kills() -> Result<()> {
    let seed = match std::env::var("ONESTEP_CHAOS_SEED") {
        Ok(s) => s.parse().context("ONESTEP_CHAOS_SEED is not a u64")?,
        Err(_) => rand::random(),
    };
    eprintln!("steps chaos: seed {seed} (ONESTEP_CHAOS_SEED={seed} replays it)");
    let (recorder, port) = Recorder::start().await?;
    let dir = tempfile::tempdir()?;
    let config = write_config(dir.path(), port)?;
    on_each_server(
        "steps under repeated SIGKILL",
        &config,
        Schedule::Concurrent,
        |env| chaos_case(env, recorder.clone(), port, seed),
    )
    .await
}
