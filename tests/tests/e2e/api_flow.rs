//! The curl flow of docs/http-api.md#the-curl-flow end to end: `onestep serve` and `onestep run` as real
//! processes on one database, a real component, and `curl` as the client. Submit with an
//! `Idempotency-Key` (and retry it), read the status, read the result once succeeded, reuse the
//! key with another body (409), cancel a long task (it ends `cancelled`, its result is 409),
//! page the list, and stop the server with SIGTERM (exit 0).

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use onestep_core::ExecutionStatus as S;
use onestep_e2e::{Schedule, e2e_config, on_each_server, onestep_bin, wait_for};
use serde_json::{Value, json};
use uuid::Uuid;

const LIMIT: Duration = Duration::from_secs(30);

/// `onestep serve` as a child process, killed when dropped.
pub(crate) struct Server {
    pub(crate) child: Child,
    pub(crate) base: String,
}

impl Server {
    pub(crate) fn spawn(envs: &[(&str, &str)], log: &Path) -> Result<Server> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let listen = format!("127.0.0.1:{port}");
        let out = std::fs::File::create(log)?;
        let child = Command::new(onestep_bin()?)
            .arg("serve")
            .arg(e2e_config("api.yaml"))
            .envs(envs.iter().copied())
            .env("ONESTEP_API_LISTEN", &listen)
            .stdout(Stdio::from(out.try_clone()?))
            .stderr(Stdio::from(out))
            .spawn()
            .context("cannot start onestep serve")?;
        Ok(Server {
            child,
            base: format!("http://{listen}"),
        })
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Runs `curl` and returns (HTTP status, body as JSON or `null`).
pub(crate) fn curl(args: &[&str]) -> Result<(u16, Value)> {
    let out = Command::new("curl")
        .args(["-sS", "-o", "-", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .context("cannot run curl")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", text.as_str()));
    let code: u16 = code.trim().parse().unwrap_or(0);
    let body = serde_json::from_str(body).unwrap_or(Value::Null);
    Ok((code, body))
}

fn post(base: &str, path: &str, key: Option<&str>, body: &Value) -> Result<(u16, Value)> {
    let url = format!("{base}{path}");
    let body = body.to_string();
    let key_header = key.map(|k| format!("Idempotency-Key: {k}"));
    let mut args = vec![
        "-X",
        "POST",
        url.as_str(),
        "-H",
        "Content-Type: application/json",
    ];
    if let Some(h) = key_header.as_deref() {
        args.extend(["-H", h]);
    }
    args.extend(["-d", body.as_str()]);
    curl(&args)
}

fn get(base: &str, path: &str) -> Result<(u16, Value)> {
    curl(&[format!("{base}{path}").as_str()])
}

fn id_of(body: &Value) -> Result<Uuid> {
    let id = body["id"]
        .as_str()
        .with_context(|| format!("no id in {body}"))?;
    Ok(Uuid::parse_str(id)?)
}

async fn wait_http_status(base: &str, id: Uuid, wanted: &str) -> Result<Value> {
    let what = format!("execution {id} to be {wanted} over HTTP");
    wait_for(&what, LIMIT, || async {
        let (code, body) = get(base, &format!("/v1/executions/{id}"))?;
        ensure!(code == 200, "GET execution answered {code}: {body}");
        Ok((body["status"] == wanted).then_some(body))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_flow_against_serve_and_run() -> Result<()> {
    let config = e2e_config("worker.yaml");
    on_each_server(
        "curl flow",
        &config,
        Schedule::Concurrent,
        |env| async move {
            let _worker = env.spawn_worker("api-worker")?;
            let logs = tempfile::tempdir()?;
            let mut server = Server::spawn(&env.onestep_env(), &logs.path().join("serve.log"))?;
            let base = server.base.clone();
            let serve_log = logs.path().join("serve.log");
            wait_for("the API to answer /healthz", LIMIT, || async {
                Ok((get(&base, "/healthz")?.0 == 200).then_some(()))
            })
            .await
            .with_context(|| std::fs::read_to_string(&serve_log).unwrap_or_default())?;
            let (code, _) = get(&base, "/readyz")?;
            ensure!(code == 200, "/readyz answered {code}");

            // 1. Submit; after a "network timeout" retry with the same key and body.
            let key = format!("req-{}", Uuid::new_v4().simple());
            let body = json!({"task_name": "echo", "payload": {"document_id": "doc-123"}});
            let (code, first) = post(&base, "/v1/executions", Some(&key), &body)?;
            ensure!(code == 202, "submit answered {code}: {first}");
            let id = id_of(&first)?;
            let (code, again) = post(&base, "/v1/executions", Some(&key), &body)?;
            ensure!(
                code == 202 && id_of(&again)? == id,
                "replay answered {code}: {again}"
            );

            // Same key, different body → 409.
            let other = json!({"task_name": "echo", "payload": {"document_id": "doc-999"}});
            let (code, conflict) = post(&base, "/v1/executions", Some(&key), &other)?;
            ensure!(
                code == 409 && conflict["code"] == "conflict",
                "{code}: {conflict}"
            );
            // A submission without a key is refused with 422.
            let (code, _) = post(&base, "/v1/executions", None, &body)?;
            ensure!(code == 422, "keyless submit answered {code}");

            // 2–3. Status, then the result once succeeded.
            wait_http_status(&base, id, S::Succeeded.as_str()).await?;
            let (code, result) = get(&base, &format!("/v1/executions/{id}/result"))?;
            ensure!(code == 200, "result answered {code}: {result}");
            ensure!(
                result["result"] == json!({"document_id": "doc-123"}),
                "{result}"
            );

            // 4. Cancel a long task while it runs: it ends cancelled and its result is 409.
            let long = json!({"task_name": "countdown", "payload": {"steps": 600, "step_ms": 100}});
            let (code, created) =
                post(&base, "/v1/executions", Some(&format!("{key}-long")), &long)?;
            ensure!(code == 202, "{code}: {created}");
            let long_id = id_of(&created)?;
            wait_http_status(&base, long_id, S::Running.as_str()).await?;
            let (code, cancelled) = post(
                &base,
                &format!("/v1/executions/{long_id}/cancel"),
                None,
                &json!({"reason": "user left the page"}),
            )?;
            ensure!(code == 200, "cancel answered {code}: {cancelled}");
            ensure!(
                cancelled["status"] == "cancel_requested" || cancelled["status"] == "cancelled",
                "{cancelled}"
            );
            wait_http_status(&base, long_id, S::Cancelled.as_str()).await?;
            let (code, body) = get(&base, &format!("/v1/executions/{long_id}/result"))?;
            ensure!(code == 409 && body["code"] == "cancelled", "{code}: {body}");

            // Unknown ids are 404, malformed ones 422.
            let (code, _) = get(&base, &format!("/v1/executions/{}", Uuid::new_v4()))?;
            ensure!(code == 404, "missing id answered {code}");
            let (code, _) = get(&base, "/v1/executions/not-a-uuid")?;
            ensure!(code == 422, "malformed id answered {code}");

            // Pages, newest first: two executions, one per page, no duplicate.
            let (code, page1) = get(&base, "/v1/executions?limit=1")?;
            ensure!(code == 200, "{code}: {page1}");
            let cursor = page1["next_cursor"]
                .as_str()
                .context("no next_cursor")?
                .to_owned();
            let (code, page2) = get(&base, &format!("/v1/executions?limit=1&cursor={cursor}"))?;
            ensure!(code == 200, "{code}: {page2}");
            let ids: Vec<Uuid> = [&page1, &page2]
                .iter()
                .map(|p| id_of(&p["items"][0]))
                .collect::<Result<_>>()?;
            ensure!(ids == [long_id, id], "pages {ids:?}");
            ensure!(page2["next_cursor"].is_null(), "{page2}");

            // Stop the server gracefully.
            let status = Command::new("kill")
                .args(["-TERM", &server.child.id().to_string()])
                .status()?;
            ensure!(status.success());
            let deadline = std::time::Instant::now() + LIMIT;
            let code = loop {
                if let Some(status) = server.child.try_wait()? {
                    break status.code();
                }
                ensure!(
                    std::time::Instant::now() < deadline,
                    "onestep serve did not exit"
                );
                tokio::time::sleep(Duration::from_millis(25)).await;
            };
            if code != Some(0) {
                bail!("onestep serve exited with {code:?}");
            }
            Ok(())
        },
    )
    .await
}
