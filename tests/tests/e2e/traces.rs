//! OpenTelemetry traces end to end (docs/observability.md#traces): an OTLP receiver on loopback
//! (OTLP/HTTP: axum, the protobuf messages decoded with prost; OTLP/gRPC: the generated tonic
//! service), `onestep serve` and `onestep run` on MariaDB exporting to it through
//! `OTEL_EXPORTER_OTLP_ENDPOINT` and `OTEL_EXPORTER_OTLP_PROTOCOL`. A submit
//! carrying a `traceparent` header, retried with another traceparent (still a replay), runs a
//! flaky execution in two attempts. The batch delay is longer than the test, so every span
//! arrives through the exporters' flush at SIGTERM. Asserted: the `submit` span is a child of the
//! incoming traceparent; the stored traceparent is the submit span's context and shows nowhere
//! in the API's answers; two `process flaky` spans with the messaging attributes in the same
//! trace, children of and linked to the submit span, each with `invoke` and `complete` children;
//! a `claim` span per claim that returned the lease, linked from its attempt.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use onestep_e2e::{Env, WorkerProcess, e2e_config, onestep_bin, servers, wait_for};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue, any_value};
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::{Value, json};
use uuid::Uuid;

const LIMIT: Duration = Duration::from_secs(30);
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_ID: &str = "00f067aa0ba902b7";

/// Every span received, with the `service.name` of its resource.
#[derive(Clone, Default)]
struct Received(Arc<Mutex<Vec<(String, Span)>>>);

impl Received {
    fn spans(&self) -> Vec<(String, Span)> {
        self.0.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

fn text(value: Option<&AnyValue>) -> Option<String> {
    match value?.value.as_ref()? {
        any_value::Value::StringValue(s) => Some(s.clone()),
        any_value::Value::IntValue(i) => Some(i.to_string()),
        any_value::Value::BoolValue(b) => Some(b.to_string()),
        _ => None,
    }
}

fn attrs(list: &[KeyValue]) -> BTreeMap<String, String> {
    list.iter()
        .filter_map(|kv| Some((kv.key.clone(), text(kv.value.as_ref())?)))
        .collect()
}

impl Received {
    fn keep(&self, request: ExportTraceServiceRequest) {
        let Ok(mut all) = self.0.lock() else {
            return;
        };
        for rs in request.resource_spans {
            let service = rs
                .resource
                .as_ref()
                .and_then(|r| attrs(&r.attributes).remove("service.name"))
                .unwrap_or_default();
            for ss in rs.scope_spans {
                for span in ss.spans {
                    all.push((service.clone(), span));
                }
            }
        }
    }
}

/// `POST /v1/traces`: an `ExportTraceServiceRequest` in protobuf.
async fn receive(State(received): State<Received>, body: Bytes) -> Response {
    match ExportTraceServiceRequest::decode(body) {
        Ok(r) => received.keep(r),
        Err(e) => return (StatusCode::BAD_REQUEST, e.to_string()).into_response(),
    }
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/x-protobuf")],
        ExportTraceServiceResponse::default().encode_to_vec(),
    )
        .into_response()
}

#[tonic::async_trait]
impl TraceService for Received {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.keep(request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// The OTLP/gRPC receiver on a free loopback port: (endpoint, what it received).
async fn start_grpc_receiver() -> Result<(String, Received)> {
    let received = Received::default();
    let addr = TcpListener::bind("127.0.0.1:0")?.local_addr()?;
    let service = TraceServiceServer::new(received.clone());
    tokio::spawn(async move {
        let _ = tonic::transport::Server::builder()
            .add_service(service)
            .serve(addr)
            .await;
    });
    Ok((format!("http://{addr}"), received))
}

/// The OTLP/HTTP receiver on a free loopback port: (base URL, what it received).
async fn start_http_receiver() -> Result<(String, Received)> {
    let received = Received::default();
    let app = axum::Router::new()
        .route("/v1/traces", axum::routing::post(receive))
        .with_state(received.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let base = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((base, received))
}

/// `onestep serve` as a child process, killed when dropped.
struct Server {
    child: Child,
    base: String,
}

impl Server {
    fn spawn(dsn: &str, envs: &[(&str, &str)], log: &Path) -> Result<Server> {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let listen = format!("127.0.0.1:{port}");
        let out = std::fs::File::create(log)?;
        let child = Command::new(onestep_bin()?)
            .arg("serve")
            .arg(e2e_config("traces.yaml"))
            .env("ONESTEP_DSN", dsn)
            .env("ONESTEP_API_LISTEN", &listen)
            .envs(envs.iter().copied())
            .stdout(Stdio::from(out.try_clone()?))
            .stderr(Stdio::from(out))
            .spawn()
            .context("cannot start onestep serve")?;
        Ok(Server {
            child,
            base: format!("http://{listen}"),
        })
    }

    fn terminate(&mut self) -> Result<Option<i32>> {
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()?;
        ensure!(status.success(), "kill -TERM onestep serve failed");
        let deadline = std::time::Instant::now() + LIMIT;
        loop {
            if let Some(s) = self.child.try_wait()? {
                return Ok(s.code());
            }
            ensure!(
                std::time::Instant::now() < deadline,
                "onestep serve still running after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
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

/// `curl` with `args`: (status, body as JSON, raw body).
fn curl(args: &[&str]) -> Result<(u16, Value, String)> {
    let out = Command::new("curl")
        .args(["-sS", "-o", "-", "-w", "\n%{http_code}"])
        .args(args)
        .output()
        .context("cannot run curl")?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", text.as_str()));
    Ok((
        code.trim().parse().unwrap_or(0),
        serde_json::from_str(body).unwrap_or(Value::Null),
        body.to_owned(),
    ))
}

fn submit(base: &str, key: &str, traceparent: &str, body: &Value) -> Result<(u16, Value)> {
    let url = format!("{base}/v1/executions");
    let key = format!("Idempotency-Key: {key}");
    let tp = format!("traceparent: {traceparent}");
    let body = body.to_string();
    let (code, json, _) = curl(&[
        "-X",
        "POST",
        &url,
        "-H",
        "Content-Type: application/json",
        "-H",
        &key,
        "-H",
        &tp,
        "-d",
        &body,
    ])?;
    Ok((code, json))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_and_every_attempt_in_one_trace_over_http() -> Result<()> {
    let (endpoint, received) = start_http_receiver().await?;
    one_trace(&endpoint, "http/protobuf", &received).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_and_every_attempt_in_one_trace_over_grpc() -> Result<()> {
    let (endpoint, received) = start_grpc_receiver().await?;
    one_trace(&endpoint, "grpc", &received).await
}

async fn one_trace(endpoint: &str, protocol: &str, received: &Received) -> Result<()> {
    let (maria_label, maria_url) = servers()?
        .into_iter()
        .next()
        .context("no MariaDB server configured")?;
    let config = e2e_config("traces.yaml");
    let env = Env::new(maria_label, &maria_url, &config).await?;
    let logs = tempfile::tempdir()?;
    // A batch delay longer than the test: what arrives was exported by the flush at exit.
    let otel: Vec<(&str, &str)> = vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol),
        ("OTEL_BSP_SCHEDULE_DELAY", "600000"),
    ];
    let mut server = Server::spawn(&env.db.dsn, &otel, &logs.path().join("serve.log"))?;
    let mut worker_env = otel.clone();
    worker_env.extend([
        ("ONESTEP_DSN", env.db.dsn.as_str()),
        ("ONESTEP_WORKER_ID", "traced"),
        ("OTEL_SERVICE_NAME", "e2e-traces-worker"),
    ]);
    let mut worker = WorkerProcess::spawn(&config, &worker_env, logs.path())?;
    let serve_log = logs.path().join("serve.log");

    let outcome = async {
        let base = server.base.clone();
        wait_for("the API to answer /healthz", LIMIT, || async {
            Ok((curl(&[&format!("{base}/healthz")])?.0 == 200).then_some(()))
        })
        .await?;

        let incoming = format!("00-{TRACE_ID}-{PARENT_ID}-01");
        let body = json!({"task_name": "flaky", "payload": {"succeed_on_attempt": 2}});
        let (code, first) = submit(&base, "traced-1", &incoming, &body)?;
        ensure!(code == 202, "submit answered {code}: {first}");
        let id: Uuid = first["id"].as_str().context("an id")?.parse()?;
        // A retry of the same submit with a traceparent of its own: a replay, not a conflict.
        let (code, again) = submit(
            &base,
            "traced-1",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            &body,
        )?;
        ensure!(
            code == 202 && again["id"] == first["id"],
            "replay answered {code}: {again}"
        );

        let done = wait_for("the execution to succeed", LIMIT, || async {
            let (code, view, raw) = curl(&[&format!("{base}/v1/executions/{id}")])?;
            ensure!(code == 200, "GET answered {code}: {raw}");
            Ok((view["status"] == "succeeded").then_some((view, raw)))
        })
        .await?;
        let (view, raw) = done;
        ensure!(view["attempts"] == 2, "{view}");
        ensure!(view["metadata"] == json!({}), "metadata: {view}");
        let (_, _, attempts_raw) = curl(&[&format!("{base}/v1/executions/{id}/attempts")])?;
        for text in [&raw, &attempts_raw] {
            ensure!(
                !text.contains(TRACE_ID) && !text.contains("traceparent"),
                "the trace context shows in an answer: {text}"
            );
        }
        let stored = env
            .db
            .query_strings("SELECT traceparent FROM onestep_executions_traces")
            .await?;
        ensure!(stored.len() == 1, "stored: {stored:?}");
        let stored = stored[0].clone().context("a traceparent")?;

        // Stop both: the exporters flush at exit.
        ensure!(server.terminate()? == Some(0), "serve did not exit 0");
        worker.signal("TERM")?;
        ensure!(
            worker.wait_exit(LIMIT)? == Some(0),
            "worker did not exit 0: {}",
            worker.log()
        );

        let spans = wait_for("the spans of both processes", LIMIT, || async {
            let spans = received.spans();
            let processes = spans
                .iter()
                .filter(|(_, s)| s.name == "process flaky")
                .count();
            let submits = spans.iter().filter(|(_, s)| s.name == "submit").count();
            Ok((processes >= 2 && submits >= 2).then_some(spans))
        })
        .await?;
        let by_name = |name: &str| -> Vec<&(String, Span)> {
            spans.iter().filter(|(_, s)| s.name == name).collect()
        };

        // submit: a child of the incoming traceparent; the replay's is not stored.
        let submits = by_name("submit");
        let created: Vec<_> = submits
            .iter()
            .filter(|(_, s)| {
                attrs(&s.attributes)
                    .get("onestep.replayed")
                    .map(String::as_str)
                    == Some("false")
            })
            .collect();
        ensure!(created.len() == 1, "submit spans: {submits:?}");
        let (service, submit_span) = created[0];
        ensure!(service == "e2e-traces", "service {service}");
        ensure!(hex(&submit_span.trace_id) == TRACE_ID, "{submit_span:?}");
        ensure!(
            hex(&submit_span.parent_span_id) == PARENT_ID,
            "{submit_span:?}"
        );
        let submit_id = hex(&submit_span.span_id);
        ensure!(
            stored == format!("00-{TRACE_ID}-{submit_id}-01"),
            "stored {stored}, submit span {submit_id}"
        );
        let a = attrs(&submit_span.attributes);
        ensure!(
            a.get("messaging.message.id") == Some(&id.to_string())
                && a.get("messaging.destination.name").map(String::as_str) == Some("flaky"),
            "{a:?}"
        );

        // Two attempts in the same trace, children of the submit span and linked to it.
        let processes = by_name("process flaky");
        ensure!(processes.len() == 2, "process spans: {processes:?}");
        let claims = by_name("claim");
        let mut numbers = Vec::new();
        for (service, p) in &processes {
            ensure!(service == "e2e-traces-worker", "service {service}");
            ensure!(hex(&p.trace_id) == TRACE_ID, "{p:?}");
            ensure!(hex(&p.parent_span_id) == submit_id, "{p:?}");
            ensure!(
                p.links
                    .iter()
                    .any(|l| hex(&l.trace_id) == TRACE_ID && hex(&l.span_id) == submit_id),
                "no link to the submit: {p:?}"
            );
            ensure!(
                p.links.iter().any(|l| claims
                    .iter()
                    .any(|(_, c)| c.span_id == l.span_id && c.trace_id == l.trace_id)),
                "no link to a claim: {p:?}"
            );
            let a = attrs(&p.attributes);
            for (key, wanted) in [
                ("messaging.system", "onestep"),
                ("messaging.operation.type", "process"),
                ("messaging.destination.name", "flaky"),
                ("messaging.message.id", id.to_string().as_str()),
            ] {
                ensure!(
                    a.get(key).map(String::as_str) == Some(wanted),
                    "{key}: {a:?}"
                );
            }
            numbers.push(a.get("onestep.attempt.number").cloned().unwrap_or_default());
            for child in ["invoke", "complete"] {
                ensure!(
                    spans
                        .iter()
                        .any(|(_, s)| s.name == child && s.parent_span_id == p.span_id),
                    "no {child} child of {p:?}"
                );
            }
        }
        numbers.sort();
        ensure!(numbers == ["1", "2"], "attempt numbers {numbers:?}");
        let first_attempt = processes
            .iter()
            .find(|(_, p)| {
                attrs(&p.attributes)
                    .get("onestep.attempt.number")
                    .map(String::as_str)
                    == Some("1")
            })
            .context("attempt 1")?;
        ensure!(
            first_attempt.1.status.as_ref().map(|s| s.code) == Some(2),
            "the failed attempt's status is not ERROR: {:?}",
            first_attempt.1.status
        );
        Ok(())
    }
    .await;
    if let Err(e) = &outcome {
        eprintln!(
            "FAILED: {e:#}\n----- serve\n{}\n----- worker\n{}",
            std::fs::read_to_string(&serve_log).unwrap_or_default(),
            worker.log()
        );
    }
    drop(worker);
    drop(server);
    env.finish().await?;
    outcome
}
