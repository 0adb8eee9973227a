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
    CallbackSettings, CallbackState, CallbackStore, DeliveryOutcome, DueCallback, TERMINAL_EVENT,
    event_type, message_id, sign,
};
use onestep_core::network::{HttpScheme, RequestHost};
use onestep_core::ports::ExecutionStore;
use tokio_util::sync::CancellationToken;

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
        })
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

    /// One attempt at `due`, recorded.
    async fn deliver(&self, due: DueCallback) {
        let attempt_no = due.attempts.saturating_add(1);
        let webhook_id = message_id(due.execution_id, TERMINAL_EVENT);
        let execution = match self.executions.get(&due.namespace, due.execution_id).await {
            Ok(Some(x)) => x,
            Ok(None) => {
                // Purged meanwhile: nothing to deliver.
                self.record(
                    &due,
                    attempt_no,
                    "execution.gone",
                    &webhook_id,
                    Err("the execution no longer exists".into()),
                    true,
                )
                .await;
                return;
            }
            Err(e) => {
                tracing::warn!(execution_id = %due.execution_id, error = %e, "completion webhooks: reading the execution failed");
                return;
            }
        };
        let event = event_type(execution.status);
        let at = Utc::now();
        let body = serde_json::json!({
            "type": event,
            "timestamp": at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
            "data": ExecutionView::from(&execution),
        });
        let body = Bytes::from(body.to_string());
        let result = self.post(&due, &webhook_id, at.timestamp(), body).await;
        self.record(&due, attempt_no, &event, &webhook_id, result, false)
            .await;
    }

    async fn record(
        &self,
        due: &DueCallback,
        attempt_no: u32,
        event: &str,
        webhook_id: &str,
        result: Result<u16, String>,
        give_up: bool,
    ) {
        let at = Utc::now();
        let (status, error) = match &result {
            Ok(s) if (200..300).contains(s) => (Some(*s), None),
            Ok(s) => (Some(*s), Some(format!("the receiver answered HTTP {s}"))),
            Err(e) => (None, Some(e.clone())),
        };
        let (state, next_at) = if error.is_none() {
            (CallbackState::Delivered, None)
        } else if give_up {
            (CallbackState::Dead, None)
        } else {
            match self.settings.after_failure(attempt_no, due.round_start, at) {
                Some(next) => (CallbackState::Pending, Some(next)),
                None => (CallbackState::Dead, None),
            }
        };
        match state {
            CallbackState::Delivered => {
                tracing::debug!(execution_id = %due.execution_id, attempt_no, "completion webhook delivered")
            }
            CallbackState::Pending => {
                tracing::info!(execution_id = %due.execution_id, attempt_no, error = ?error, "completion webhook attempt failed; will retry")
            }
            CallbackState::Dead => {
                tracing::warn!(execution_id = %due.execution_id, attempt_no, error = ?error, "completion webhook dead: no attempt left")
            }
        }
        let outcome = DeliveryOutcome {
            execution_id: due.execution_id,
            attempt_no,
            event: event.to_owned(),
            webhook_id: webhook_id.to_owned(),
            at,
            status,
            error,
            state,
            next_at,
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
