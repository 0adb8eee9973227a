//! The event stream (docs/http-api.md#stream) end to end: `onestep serve` with streams closed
//! after one second (config/e2e/stream.yaml), a real worker, and `onestep watch --json` as the
//! client, so every watch of a run longer than a second is resumed with `Last-Event-ID`. Each
//! watch shows every attempt start and end in order, every log line exactly once (compared with
//! the logs route), the progress reports in order, statuses by increasing version, no event id
//! twice, and exits 0 for a success, 1 for a failure or an unknown id. On MariaDB, MySQL 9,
//! PostgreSQL and SQLite.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use onestep_e2e::{Schedule, e2e_config, guest, on_each_server, onestep_bin, run_cli, wait_for};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::api_flow::curl;

const LIMIT: Duration = Duration::from_secs(60);

/// `onestep serve config/e2e/stream.yaml`, killed when dropped.
pub(crate) struct Serve {
    child: Child,
    pub(crate) base: String,
}

impl Serve {
    pub(crate) fn spawn(envs: &[(&str, &str)], log: &Path) -> Result<Serve> {
        Self::spawn_config(&e2e_config("stream.yaml"), envs, log)
    }

    /// `onestep serve config` on a free port.
    pub(crate) fn spawn_config(config: &Path, envs: &[(&str, &str)], log: &Path) -> Result<Serve> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let listen = format!("127.0.0.1:{port}");
        let out = std::fs::File::create(log)?;
        let child = Command::new(onestep_bin()?)
            .arg("serve")
            .arg(config)
            .envs(envs.iter().copied())
            .env("ONESTEP_API_LISTEN", &listen)
            .stdout(Stdio::from(out.try_clone()?))
            .stderr(Stdio::from(out))
            .spawn()
            .context("cannot start onestep serve")?;
        Ok(Serve {
            child,
            base: format!("http://{listen}"),
        })
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one `onestep watch --json` printed.
struct Watched {
    code: i32,
    events: Vec<(String, Option<String>, Value)>,
    stderr: String,
}

impl Watched {
    fn of<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.events
            .iter()
            .filter(move |(n, _, _)| n == name)
            .map(|(_, _, d)| d)
    }

    fn reconnects(&self) -> usize {
        self.stderr.matches("reconnecting").count()
    }
}

async fn watch(base: &str, id: &str) -> Result<Watched> {
    let base = base.to_owned();
    let id = id.to_owned();
    tokio::task::spawn_blocking(move || {
        let out = Command::new(onestep_bin()?)
            .args([
                "watch",
                &id,
                "--json",
                "--url",
                &base,
                "--give-up-after",
                "20",
            ])
            .output()
            .context("cannot run onestep watch")?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let mut events = Vec::new();
        for line in stdout.lines() {
            let v: Value = serde_json::from_str(line)
                .with_context(|| format!("not a JSON line: {line:?}\nstderr: {stderr}"))?;
            let name = v["event"].as_str().context("no event name")?.to_owned();
            let id = v["id"].as_str().map(str::to_owned);
            events.push((name, id, v["data"].clone()));
        }
        Ok(Watched {
            code: out.status.code().unwrap_or(-1),
            events,
            stderr,
        })
    })
    .await?
}

fn submit(base: &str, task: &str, payload: Value) -> Result<String> {
    let body = json!({"task_name": task, "payload": payload}).to_string();
    let key = format!("Idempotency-Key: {}", Uuid::new_v4());
    let url = format!("{base}/v1/executions");
    let (code, view) = curl(&[
        "-X",
        "POST",
        &url,
        "-H",
        "Content-Type: application/json",
        "-H",
        &key,
        "-d",
        &body,
    ])?;
    ensure!(code == 202, "submit answered {code}: {view}");
    Ok(view["id"].as_str().context("no id")?.to_owned())
}

/// The six integers of an event id.
fn position(id: &str) -> Result<[i128; 6]> {
    let parts: Vec<i128> = id
        .split('.')
        .map(str::parse)
        .collect::<Result<_, _>>()
        .with_context(|| format!("event id {id:?}"))?;
    parts
        .try_into()
        .map_err(|p| anyhow::anyhow!("event id {id:?} has {} parts", Vec::len(&p)))
}

/// The invariants of every watch: `end` last and only once, every other event with an id, no
/// id twice, each position component never going back (log and progress by attempt first),
/// statuses by strictly increasing version, and every log line of every attempt exactly once,
/// as the logs route has them.
fn check_stream(base: &str, id: &str, w: &Watched, wanted_end: &str) -> Result<()> {
    let (last, rest) = w.events.split_last().context("no event")?;
    ensure!(
        last.0 == "end" && last.2["status"] == wanted_end && last.2["reason"] == "terminal",
        "last event {last:?}"
    );
    let mut seen = std::collections::HashSet::new();
    let mut prev = [-1i128, 0, 0, 0, 0, i128::from(i64::MIN)];
    for (name, event_id, data) in rest {
        ensure!(name != "end", "end before the last event");
        let event_id = event_id
            .as_deref()
            .with_context(|| format!("{name} without id"))?;
        ensure!(
            seen.insert(event_id.to_owned()),
            "event id {event_id} twice"
        );
        let p = position(event_id)?;
        ensure!(
            p[0] >= prev[0]
                && p[1] >= prev[1]
                && (p[2], p[3]) >= (prev[2], prev[3])
                && (p[4], p[5]) >= (prev[4], prev[5])
                && p != prev,
            "position went back or stood still: {prev:?} then {p:?} ({name} {data})"
        );
        if name == "status" {
            ensure!(
                i128::from(data["version"].as_i64().context("version")?) == p[0],
                "a status event's id carries its version"
            );
        }
        prev = p;
    }
    let versions: Vec<i64> = w
        .of("status")
        .filter_map(|d| d["version"].as_i64())
        .collect();
    ensure!(
        versions.windows(2).all(|v| v[0] < v[1]),
        "status versions {versions:?}"
    );
    ensure!(
        w.of("status").last().map(|d| d["status"].clone()) == Some(json!(wanted_end)),
        "the last status is {wanted_end}"
    );
    // Every log line of every attempt, once, in order.
    let (code, attempts) = curl(&[&format!("{base}/v1/executions/{id}/attempts")])?;
    ensure!(code == 200, "attempts answered {code}");
    let mut stored = Vec::new();
    for a in attempts["items"].as_array().context("items")? {
        let n = a["attempt"].as_u64().context("attempt")?;
        let (code, logs) = curl(&[&format!("{base}/v1/executions/{id}/attempts/{n}/logs")])?;
        ensure!(code == 200, "logs answered {code}");
        for line in logs["lines"].as_array().context("lines")? {
            stored.push((n, line["seq"].clone(), line["message"].clone()));
        }
    }
    let streamed: Vec<_> = w
        .of("log")
        .map(|d| {
            (
                d["attempt"].as_u64().unwrap_or(0),
                d["seq"].clone(),
                d["message"].clone(),
            )
        })
        .collect();
    ensure!(
        streamed == stored,
        "streamed logs {streamed:?}, stored {stored:?}"
    );
    ensure!(w.of("log").all(|d| d["skipped"] == 0), "no line skipped");
    Ok(())
}

fn attempt_steps(w: &Watched) -> Vec<(u64, String)> {
    w.of("attempt")
        .map(|d| {
            (
                d["attempt"].as_u64().unwrap_or(0),
                d["status"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// One server's case: `envs` point `onestep serve` and the worker at its database.
async fn case(
    envs: Vec<(String, String)>,
    spawn_worker: impl FnOnce() -> Result<Box<dyn Send>>,
) -> Result<()> {
    let envs: Vec<(&str, &str)> = envs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let logs = tempfile::tempdir()?;
    let serve_log = logs.path().join("serve.log");
    let serve = Serve::spawn(&envs, &serve_log)?;
    let base = serve.base.clone();
    wait_for("the API to answer /healthz", LIMIT, || async {
        Ok((curl(&[&format!("{base}/healthz")])?.0 == 200).then_some(()))
    })
    .await
    .with_context(|| std::fs::read_to_string(&serve_log).unwrap_or_default())?;
    let _worker = spawn_worker()?;
    let serve_text = || std::fs::read_to_string(&serve_log).unwrap_or_default();

    // A run of 3 s: resumed at least twice; one attempt, its progress in order, then success.
    let id = submit(&base, "countdown", json!({"steps": 30, "step_ms": 100}))?;
    let w = watch(&base, &id).await?;
    ensure!(
        w.code == 0,
        "watch exited {}: {}\n{}",
        w.code,
        w.stderr,
        serve_text()
    );
    check_stream(&base, &id, &w, "succeeded").with_context(|| w.stderr.clone())?;
    ensure!(
        w.reconnects() >= 2,
        "resumed {} times: {}",
        w.reconnects(),
        w.stderr
    );
    ensure!(
        attempt_steps(&w) == [(1, "running".into()), (1, "succeeded".into())],
        "{:?}",
        attempt_steps(&w)
    );
    let statuses: Vec<&str> = w
        .of("status")
        .filter_map(|d| d["status"].as_str())
        .collect();
    ensure!(
        statuses.ends_with(&["running", "succeeded"]),
        "statuses {statuses:?} in {:#?}",
        w.events
    );
    let done: Vec<u64> = w
        .of("progress")
        .filter_map(|d| d["done"].as_u64())
        .collect();
    ensure!(
        done.len() >= 2 && done.windows(2).all(|d| d[0] <= d[1]) && done.last() == Some(&29),
        "progress {done:?}"
    );

    // Two retryable failures, then a success: every attempt start and end, each failure's log
    // line and message.
    let id = submit(&base, "flaky", json!({"succeed_on_attempt": 3}))?;
    let w = watch(&base, &id).await?;
    ensure!(w.code == 0, "watch exited {}: {}", w.code, w.stderr);
    check_stream(&base, &id, &w, "succeeded").with_context(|| w.stderr.clone())?;
    let expected: Vec<(u64, String)> = [
        (1, "running"),
        (1, "retrying"),
        (2, "running"),
        (2, "retrying"),
        (3, "running"),
        (3, "succeeded"),
    ]
    .iter()
    .map(|(n, s)| (*n, (*s).to_owned()))
    .collect();
    ensure!(attempt_steps(&w) == expected, "{:?}", attempt_steps(&w));
    ensure!(w.of("log").count() == 2, "one line per failed attempt");

    // Retries exhausted (4 attempts): failed, exit 1.
    let id = submit(&base, "flaky", json!({"succeed_on_attempt": 9}))?;
    let w = watch(&base, &id).await?;
    ensure!(w.code == 1, "watch exited {}: {}", w.code, w.stderr);
    check_stream(&base, &id, &w, "failed").with_context(|| w.stderr.clone())?;
    ensure!(attempt_steps(&w).len() == 8, "{:?}", attempt_steps(&w));

    // An unknown execution: exit 1 with the API's message.
    let w = watch(&base, &Uuid::new_v4().to_string()).await?;
    ensure!(
        w.code == 1 && w.events.is_empty() && w.stderr.contains("was not found"),
        "{} {}",
        w.code,
        w.stderr
    );
    drop(serve);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_shows_every_change_once_across_resumed_streams() -> Result<()> {
    let config = e2e_config("worker.yaml");
    on_each_server("stream", &config, Schedule::Concurrent, |env| async move {
        let envs = env
            .onestep_env()
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let worker_env = std::sync::Arc::clone(&env);
        case(envs, move || {
            Ok(Box::new(worker_env.spawn_worker("stream-worker")?) as Box<dyn Send>)
        })
        .await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_on_sqlite() -> Result<()> {
    guest("countdown")?;
    guest("flaky")?;
    let dir = tempfile::tempdir()?;
    let dsn = format!(
        "sqlite://{}",
        dir.path().join("data").join("e2e.db").display()
    );
    let (code, out, err) = run_cli(&["migrate", "--dsn", &dsn], &[])?;
    ensure!(code == 0, "migrate exited {code}: {out}{err}");
    let envs = vec![
        ("ONESTEP_E2E_BACKEND".to_owned(), "sqlite".to_owned()),
        ("ONESTEP_DSN".to_owned(), dsn.clone()),
    ];
    let logs = dir.path().to_path_buf();
    let started = Instant::now();
    let outcome = case(envs, move || {
        let worker = onestep_e2e::WorkerProcess::spawn(
            &e2e_config("worker.yaml"),
            &[
                ("ONESTEP_E2E_BACKEND", "sqlite"),
                ("ONESTEP_DSN", &dsn),
                ("ONESTEP_WORKER_ID", "stream-worker"),
            ],
            &logs,
        )?;
        Ok(Box::new(worker) as Box<dyn Send>)
    })
    .await;
    eprintln!("[sqlite] stream: {:.1}s", started.elapsed().as_secs_f64());
    if let Err(e) = outcome {
        bail!("{e:#}");
    }
    Ok(())
}
