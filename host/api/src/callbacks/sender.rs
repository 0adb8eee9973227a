//! The sender of completion webhooks (docs/semantics.md#completion-webhooks): one loop per
//! `onestep serve` process claims due callbacks whose execution has ended, posts each (signed
//! per the Standard Webhooks convention), and records the attempt: `delivered` on a 2xx, else
//! the next try after an exponential backoff, and `dead` after the last attempt. A sender
//! killed mid-delivery loses nothing: its claims run out and another pass claims them again
//! (at-least-once; the `webhook-id` lets receivers drop duplicates).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::{Request, header};
use chrono::Utc;
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use onestep_core::callback::{
    CallbackEvent, CallbackSettings, CallbackState, CallbackStore, DeliveryOutcome, DueCallback,
    PROGRESS_EVENT, PROGRESS_TYPE, PassedEvent, STARTED_EVENT, STARTED_TYPE, TERMINAL_EVENT,
    event_type, message_id, next_event, progress_message_id, sign,
};
use onestep_core::diagnostics::AttemptProgress;
use onestep_core::network::{HttpScheme, RequestHost};
use onestep_core::ports::ExecutionStore;
use tokio_util::sync::CancellationToken;

use super::metrics::{DeliveryResult, WebhookMetrics};
use super::target::{CallbackTarget, check_url, resolve};
use crate::view::ExecutionView;

/// Callbacks claimed per pass (delivered concurrently).
pub const BATCH: u32 = 32;
/// The wait between two passes that found nothing due.
pub const POLL: Duration = Duration::from_millis(500);

/// Posts due callbacks of one store.
#[derive(Clone)]
pub struct CallbackSender {
    store: Arc<dyn CallbackStore>,
    executions: Arc<dyn ExecutionStore>,
    settings: Arc<CallbackSettings>,
    tls: tokio_rustls::TlsConnector,
    metrics: Arc<WebhookMetrics>,
}

/// What one attempt delivers.
struct Message {
    event: CallbackEvent,
    /// The payload `type`.
    kind: String,
    webhook_id: String,
    /// The report a progress delivery carries.
    progress: Option<AttemptProgress>,
}

impl std::fmt::Debug for CallbackSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallbackSender").finish_non_exhaustive()
    }
}

impl CallbackSender {
    /// A sender over `store` (the outbox) and `executions` (the payloads), with `settings`.
    /// Fails only when rustls cannot build a client configuration.
    pub fn new(
        store: Arc<dyn CallbackStore>,
        executions: Arc<dyn ExecutionStore>,
        settings: CallbackSettings,
    ) -> Result<Self, String> {
        let roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.into(),
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("webhook TLS: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(CallbackSender {
            store,
            executions,
            settings: Arc::new(settings),
            tls: tokio_rustls::TlsConnector::from(Arc::new(config)),
            metrics: Arc::default(),
        })
    }

    /// The same sender counting its deliveries in `metrics` (the API's
    /// [`crate::ApiState::webhook_metrics`], shown at `/metrics`).
    #[must_use]
    pub fn with_metrics(mut self, metrics: Arc<WebhookMetrics>) -> Self {
        self.metrics = metrics;
        self
    }

    /// The delivery metrics this sender counts in.
    pub fn metrics(&self) -> &Arc<WebhookMetrics> {
        &self.metrics
    }

    /// How long a claim holds a callback: longer than one delivery may take.
    fn lease(&self) -> Duration {
        self.settings.timeout + Duration::from_secs(5)
    }

    /// Runs passes until `stop` is cancelled.
    pub async fn run(self, stop: CancellationToken) {
        tracing::info!(
            max_attempts = self.settings.max_attempts,
            "completion webhooks: sender started"
        );
        loop {
            let wait = match self.pass().await {
                Ok(n) if n >= BATCH as usize => Duration::ZERO,
                Ok(_) => POLL,
                Err(e) => {
                    tracing::warn!(error = %e, "completion webhooks: claiming failed");
                    POLL * 4
                }
            };
            tokio::select! {
                () = stop.cancelled() => break,
                () = tokio::time::sleep(wait) => {}
            }
        }
        tracing::info!("completion webhooks: sender stopped");
    }

    /// One pass: claims what is due and delivers it; how many were claimed.
    pub async fn pass(&self) -> Result<usize, onestep_core::ExecutionError> {
        let due = self.store.claim_due(BATCH, self.lease()).await?;
        let n = due.len();
        futures::future::join_all(due.into_iter().map(|d| self.deliver(d))).await;
        Ok(n)
    }

    /// The latest progress report of the execution's attempts (`None`: none, or unreadable).
    async fn latest_progress(&self, due: &DueCallback) -> Option<AttemptProgress> {
        match self
            .executions
            .attempts(&due.namespace, due.execution_id)
            .await
        {
            Ok(attempts) => attempts
                .unwrap_or_default()
                .into_iter()
                .filter_map(|a| a.diagnostics.and_then(|d| d.progress))
                .max_by_key(|p| p.at),
            Err(e) => {
                tracing::warn!(execution_id = %due.execution_id, error = %e, "completion webhooks: reading the progress failed");
                None
            }
        }
    }

    /// One attempt at `due`, recorded: the event its execution's durable state calls for
    /// (`started`, then `progress`, then the terminal status; [`next_event`]).
    async fn deliver(&self, due: DueCallback) {
        let attempt_no = due.attempts.saturating_add(1);
        let execution = match self.executions.get(&due.namespace, due.execution_id).await {
            Ok(Some(x)) => x,
            Ok(None) => {
                // Purged meanwhile: nothing to deliver.
                let message = Message {
                    event: CallbackEvent::Terminal,
                    kind: "execution.gone".into(),
                    webhook_id: message_id(due.execution_id, TERMINAL_EVENT),
                    progress: None,
                };
                self.record(
                    &due,
                    attempt_no,
                    &message,
                    Err("the execution no longer exists".into()),
                    true,
                    Duration::ZERO,
                )
                .await;
                return;
            }
            Err(e) => {
                tracing::warn!(execution_id = %due.execution_id, error = %e, "completion webhooks: reading the execution failed");
                return;
            }
        };
        let wants_progress = due.events.iter().any(|e| e == PROGRESS_EVENT);
        let progress = if wants_progress && !execution.status.is_terminal() {
            self.latest_progress(&due).await
        } else {
            None
        };
        let Some(event) = next_event(
            &due,
            execution.status,
            execution.started_at.is_some(),
            progress.as_ref().map(|p| p.at),
        ) else {
            // A claim that raced a change: the lease runs out and the row is looked at again.
            tracing::debug!(execution_id = %due.execution_id, "completion webhooks: nothing to deliver");
            return;
        };
        let message = match event {
            CallbackEvent::Started => Message {
                event,
                kind: STARTED_TYPE.into(),
                webhook_id: message_id(due.execution_id, STARTED_EVENT),
                progress: None,
            },
            CallbackEvent::Progress => Message {
                event,
                kind: PROGRESS_TYPE.into(),
                webhook_id: progress_message_id(
                    due.execution_id,
                    due.progress_seq.saturating_add(1),
                ),
                progress,
            },
            CallbackEvent::Terminal => Message {
                event,
                kind: event_type(execution.status),
                webhook_id: message_id(due.execution_id, TERMINAL_EVENT),
                progress: None,
            },
        };
        let at = Utc::now();
        let mut data = serde_json::to_value(ExecutionView::from(&execution))
            .unwrap_or(serde_json::Value::Null);
        if let (Some(p), Some(obj)) = (&message.progress, data.as_object_mut()) {
            obj.insert(
                "progress".into(),
                serde_json::json!({
                    "done": p.done,
                    "total": p.total,
                    "note": p.note,
                    "at": p.at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
                }),
            );
        }
        let body = serde_json::json!({
            "type": message.kind,
            "timestamp": at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            "data": data,
        });
        let body = Bytes::from(body.to_string());
        let started = std::time::Instant::now();
        let result = self
            .post(&due, &message.webhook_id, at.timestamp(), body)
            .await;
        self.record(&due, attempt_no, &message, result, false, started.elapsed())
            .await;
    }

    async fn record(
        &self,
        due: &DueCallback,
        attempt_no: u32,
        message: &Message,
        result: Result<u16, String>,
        give_up: bool,
        took: Duration,
    ) {
        let at = Utc::now();
        let (status, error) = match &result {
            Ok(s) if (200..300).contains(s) => (Some(*s), None),
            Ok(s) => (Some(*s), Some(format!("the receiver answered HTTP {s}"))),
            Err(e) => (None, Some(e.clone())),
        };
        let retry_at = if error.is_none() || give_up {
            None
        } else {
            self.settings.after_failure(attempt_no, due.round_start, at)
        };
        let result = match (&error, retry_at) {
            (None, _) => DeliveryResult::Acknowledged,
            (Some(_), Some(_)) => DeliveryResult::Failed,
            (Some(_), None) => DeliveryResult::Dead,
        };
        self.metrics
            .record(message.event, result, took.as_secs_f64());
        // A started or progress event that ended (acknowledged, or out of attempts) is passed:
        // the callback stays pending for the next event, due at once, in a new round.
        let passed = match (message.event, result, give_up) {
            (_, _, true) | (CallbackEvent::Terminal, _, _) | (_, DeliveryResult::Failed, _) => None,
            (CallbackEvent::Started, _, _) => Some(PassedEvent::Started),
            (CallbackEvent::Progress, _, _) => {
                message.progress.as_ref().map(|p| PassedEvent::Progress {
                    seq: due.progress_seq.saturating_add(1),
                    progress_at: p.at,
                    after: at
                        + chrono::Duration::from_std(self.settings.progress_interval)
                            .unwrap_or(chrono::Duration::seconds(5)),
                })
            }
        };
        let (state, next_at) = match (result, &passed) {
            (DeliveryResult::Acknowledged, None) => (CallbackState::Delivered, None),
            (_, Some(_)) => (CallbackState::Pending, Some(at)),
            (DeliveryResult::Failed, None) => (CallbackState::Pending, retry_at),
            (DeliveryResult::Dead, None) => (CallbackState::Dead, None),
        };
        let event = message.event.as_str();
        match result {
            DeliveryResult::Acknowledged => {
                tracing::debug!(execution_id = %due.execution_id, attempt_no, event, "completion webhook delivered")
            }
            DeliveryResult::Failed => {
                tracing::info!(execution_id = %due.execution_id, attempt_no, event, error = ?error, "completion webhook attempt failed; will retry")
            }
            DeliveryResult::Dead => {
                tracing::warn!(execution_id = %due.execution_id, attempt_no, event, error = ?error, "completion webhook event dead: no attempt left")
            }
        }
        let outcome = DeliveryOutcome {
            execution_id: due.execution_id,
            attempt_no,
            event: message.kind.clone(),
            webhook_id: message.webhook_id.clone(),
            at,
            status,
            error,
            state,
            next_at,
            passed,
        };
        if let Err(e) = self.store.record_delivery(&outcome).await {
            // The claim runs out and the callback is tried again.
            tracing::warn!(execution_id = %due.execution_id, error = %e, "completion webhooks: recording an attempt failed");
        }
    }

    /// Posts `body` to the callback's URL (checked again: the allow-list and addresses may
    /// have changed since the submit); the receiver's status or why there is none.
    async fn post(
        &self,
        due: &DueCallback,
        webhook_id: &str,
        timestamp: i64,
        body: Bytes,
    ) -> Result<u16, String> {
        let target = check_url(&due.url, &self.settings.allow)?;
        let signature = sign(
            self.settings.secrets_for(&due.namespace),
            webhook_id,
            timestamp,
            &body,
        );
        let request = Request::post(target.path_and_query.as_str())
            .header(header::HOST, target.authority())
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::USER_AGENT, "onestep-webhooks")
            .header("webhook-id", webhook_id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .body(Full::new(body))
            .map_err(|e| format!("cannot build the request: {e}"))?;
        match tokio::time::timeout(self.settings.timeout, self.send(&target, request)).await {
            Ok(r) => r,
            Err(_) => Err(format!(
                "no answer within {} s",
                self.settings.timeout.as_secs_f64()
            )),
        }
    }

    async fn send(
        &self,
        target: &CallbackTarget,
        request: Request<Full<Bytes>>,
    ) -> Result<u16, String> {
        let addrs = resolve(target).await?;
        let tcp = tokio::net::TcpStream::connect(addrs.as_slice())
            .await
            .map_err(|e| format!("cannot connect to {}: {e}", target.authority()))?;
        match target.scheme {
            HttpScheme::Http => exchange(TokioIo::new(tcp), request).await,
            HttpScheme::Https => {
                let name = match &target.host {
                    RequestHost::Ip(ip) => rustls::pki_types::ServerName::IpAddress((*ip).into()),
                    RequestHost::Name(n) => rustls::pki_types::ServerName::try_from(n.clone())
                        .map_err(|e| format!("bad TLS server name {n}: {e}"))?,
                };
                let tls = self
                    .tls
                    .connect(name, tcp)
                    .await
                    .map_err(|e| format!("TLS with {} failed: {e}", target.authority()))?;
                exchange(TokioIo::new(tls), request).await
            }
        }
    }
}

/// One HTTP/1.1 exchange on `io` (hyper's client connection); the response status.
async fn exchange<I>(io: I, request: Request<Full<Bytes>>) -> Result<u16, String>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| format!("HTTP handshake failed: {e}"))?;
    let driver = tokio::spawn(conn);
    let answer = sender
        .send_request(request)
        .await
        .map(|r| r.status().as_u16())
        .map_err(|e| format!("the request failed: {e}"));
    drop(sender);
    driver.abort();
    answer
}
