//! `webhooks-bench`: completion-webhook deliveries per second to a loopback receiver
//! (docs/benchmarks.md#webhook-deliveries). Figures, not a test.
//!
//! ```text
//! webhooks-bench [DSN] [EXECUTIONS]      (default: a scratch SQLite file, 2,000 executions)
//! ```
//!
//! Submits EXECUTIONS executions with a callback to an in-process loopback HTTP receiver (an
//! axum server answering `204` and counting), ends them all (cancel: queued → cancelled, the
//! terminal event), then runs the real sender ([`CallbackSender`]: claim 32 due rows, post them
//! concurrently, signed, record each attempt) pass after pass until every callback is
//! `delivered`, and prints the deliveries per second: the outbox's claim/record statements plus
//! signing and one HTTP/1.1 connection per delivery, not the network.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use onestep_api::callbacks::CallbackSender;
use onestep_core::callback::{
    CallbackPort, CallbackSettings, CallbackSpec, DEFAULT_PROGRESS_INTERVAL, TERMINAL_EVENT,
    WebhookSecret,
};
use onestep_core::network::OriginPattern;
use onestep_core::ports::ExecutionStore;
use onestep_core::request::{SubmitRequest, prepare_submission};
use onestep_core::{Limits, StoreOptions};
use serde_json::json;

const NAMESPACE: &str = "bench";
const TASK: &str = "hook";
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

#[tokio::main]
async fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let dir = tempfile::tempdir()?;
    let dsn = match args.get(1) {
        Some(d) if !d.is_empty() => d.clone(),
        _ => format!("sqlite://{}", dir.path().join("hooks.db").display()),
    };
    let n: usize = match args.get(2) {
        Some(a) => a
            .parse()
            .with_context(|| format!("EXECUTIONS {a:?} is not a number"))?,
        None => 2_000,
    };
    ensure!(n > 0, "EXECUTIONS must be positive");
    if !dsn.starts_with("sqlite://") {
        bail!("usage: webhooks-bench [sqlite://FILE] [EXECUTIONS]");
    }
    let mut opts = StoreOptions::new(&dsn);
    opts.auto_create = true;
    let backend = onestep_sqlite::SqliteBackend::open(opts)
        .await
        .context("open the backend")?;
    let outbox = backend
        .callback_port()
        .context("this backend keeps no webhook outbox")?;
    let executions: Arc<dyn ExecutionStore> = Arc::new(backend.clone());

    // The receiver: 204 to everything, counted.
    let got = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&got);
    let app = axum::Router::new().fallback(move || {
        let counter = Arc::clone(&counter);
        async move {
            counter.fetch_add(1, Ordering::Relaxed);
            axum::http::StatusCode::NO_CONTENT
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let url = format!("http://127.0.0.1:{port}/hook");

    // N executions with a callback, ended.
    let limits = Limits::default();
    let setup = Instant::now();
    let mut ids = Vec::with_capacity(n);
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        let mut batch = Vec::with_capacity(chunk.len());
        for i in chunk {
            let req = SubmitRequest {
                task_name: TASK.into(),
                payload: json!({"i": i}),
                ..SubmitRequest::default()
            };
            let mut sub = prepare_submission(NAMESPACE, &req, &limits)?;
            sub.callback = Some(CallbackSpec {
                url: url.clone(),
                events: vec![TERMINAL_EVENT.into()],
            });
            batch.push(sub);
        }
        for e in backend.submit_many(batch).await? {
            ids.push(e?.id);
        }
    }
    for id in &ids {
        executions.cancel(NAMESPACE, *id, None).await?;
    }
    eprintln!(
        "webhooks-bench: {n} ended executions with a callback in {:.1} s ({dsn})",
        setup.elapsed().as_secs_f64()
    );

    let settings = CallbackSettings {
        allow: vec![
            OriginPattern::parse(&format!("http://127.0.0.1:{port}"))
                .map_err(|e| anyhow::anyhow!("{e}"))?,
        ],
        secrets: WebhookSecret::parse_list(SECRET).map_err(|e| anyhow::anyhow!(e))?,
        namespace_secrets: BTreeMap::new(),
        max_attempts: 3,
        first_backoff: Duration::from_secs(1),
        timeout: Duration::from_secs(10),
        progress_interval: DEFAULT_PROGRESS_INTERVAL,
    };
    let sender =
        CallbackSender::new(outbox, executions, settings).map_err(|e| anyhow::anyhow!(e))?;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(300);
    while got.load(Ordering::Relaxed) < n {
        ensure!(Instant::now() < deadline, "not all delivered within 300 s");
        if sender.pass().await? == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    let secs = started.elapsed().as_secs_f64();
    let metrics = sender.metrics();
    let acked = metrics.count(
        onestep_core::callback::CallbackEvent::Terminal,
        onestep_api::callbacks::metrics::DeliveryResult::Acknowledged,
    );
    println!(
        "webhook deliveries: {n} to a loopback receiver in {secs:.2} s = {:.0} deliveries/s \
         (SQLite, one sender, {} per pass; {acked} acknowledged)",
        n as f64 / secs,
        onestep_api::callbacks::sender::BATCH
    );
    backend.close().await?;
    Ok(())
}
