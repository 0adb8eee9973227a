//! Our `WasiHttpHooks::send_request`: every outgoing request of a guest goes
//! through [`Hooks`], which checks the origin against the task's allow-list
//! (denied: `HTTP-request-denied`, a value, and one log line naming the
//! origin), replaces the host-injected headers, caps the request and response
//! bodies, applies the connect and request timeouts (the latter capped by the
//! attempt's deadline) and the per-attempt limits (requests in flight, requests in all), and sends it
//! through the process's shared pool. Redirects are never followed. See
//! `docs/security.md#network`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderName, HeaderValue};
use http_body::{Body, Frame, SizeHint};
use http_body_util::BodyExt;
use onestep_core::network::{HttpScheme, RequestHost};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use wasmtime_wasi_http::p2::bindings::http::types::ErrorCode;
use wasmtime_wasi_http::{Error, RequestOptions, WasiBody, WasiHttpHooks};

use super::client::{AttemptClients, CONNECT_TIMEOUT, ConnectError};
use super::outbound::{LimitTally, Limited};
use crate::cancel::CancelHandle;
use crate::context::LogIds;
use crate::log_budget::LogBudget;
use onestep_core::rate::RateLimitStore;
use onestep_core::sandbox::NetworkSettings;

/// Future `send_request` returns.
type Sending = Box<
    dyn Future<
            Output = Result<
                (
                    http::Response<WasiBody>,
                    Box<dyn Future<Output = Result<(), Error>> + Send>,
                ),
                Error,
            >,
        > + Send,
>;

/// The `wasi:http` hooks of one attempt.
pub(crate) struct Hooks {
    pub(crate) policy: Arc<NetworkSettings>,
    /// The attempt's connection pools, dropped (every socket closed) with its store.
    pub(crate) clients: AttemptClients,
    /// The attempt's deadline, if any: no request outlives it.
    pub(crate) deadline: Option<Instant>,
    pub(crate) ids: Arc<LogIds>,
    /// `max_concurrent_requests` permits; a request holds one until its
    /// response body is finished or dropped.
    pub(crate) permits: Arc<Semaphore>,
    /// Drains of request bodies the host no longer sends (refused requests,
    /// or a server that answered before the guest finished its body): the
    /// guest's writes and `finish` must still succeed, so that it sees the
    /// request's outcome, not a closed body stream. Capped like every request
    /// body and aborted when the store (and with it this set) is dropped.
    pub(crate) drains: Drains,
    /// What this attempt's requests did (the attempt's end line, the worker's metrics).
    pub(crate) counters: Arc<HttpCounters>,
    /// The attempt's log budget: the lines about refused requests draw on it like any guest
    /// line (a guest looping on denied requests cannot flood the log).
    pub(crate) log: LogBudget,
    /// The fleet-wide buckets of origins with a `rate_limit`
    /// (docs/semantics.md#outbound-rate-limits).
    pub(crate) buckets: Arc<dyn RateLimitStore>,
    /// The attempt's cancel signal: a request waiting for a rate-limit token stops waiting.
    pub(crate) cancel: CancelHandle,
    /// What this attempt's requests did with the origins' buckets.
    pub(crate) limits: Arc<LimitTally>,
}

/// Counters of one attempt's outbound HTTP (see [`HttpTotals`]).
#[derive(Debug, Default)]
pub(crate) struct HttpCounters {
    requests: AtomicU64,
    /// Requests admitted past the allow-list and the concurrency limit, counted against
    /// `max_requests`.
    admitted: AtomicU64,
    denied: AtomicU64,
    refused: AtomicU64,
    failed: AtomicU64,
    bytes_out: Arc<AtomicU64>,
    bytes_in: Arc<AtomicU64>,
    /// Requests that waited for a token of their origin's rate limit, and for how long (µs).
    rate_limit_waits: AtomicU64,
    rate_limit_wait_us: AtomicU64,
}

impl HttpCounters {
    /// A snapshot.
    pub(crate) fn totals(&self) -> HttpTotals {
        HttpTotals {
            requests: self.requests.load(Ordering::Relaxed),
            denied: self.denied.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            bytes_out: self.bytes_out.load(Ordering::Relaxed),
            bytes_in: self.bytes_in.load(Ordering::Relaxed),
            rate_limit_waits: self.rate_limit_waits.load(Ordering::Relaxed),
            rate_limit_wait_ms: self.rate_limit_wait_us.load(Ordering::Relaxed) / 1000,
        }
    }
}

/// What one attempt's outbound HTTP did, on the attempt's end line and in
/// [`Report::http`](crate::Report::http) (docs/security.md#network).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct HttpTotals {
    /// Requests sent to a server (allowed and within the limits).
    pub requests: u64,
    /// Requests refused because their origin is not allowed.
    pub denied: u64,
    /// Requests refused by a limit or as malformed (`max_concurrent_requests`,
    /// `max_connections`, a declared body over `max_request_bytes`, a scheme other than
    /// http/https, a URL with userinfo, …).
    pub refused: u64,
    /// Sent requests that failed before a response (DNS, a prohibited address, connect,
    /// TLS, timeout, …).
    pub failed: u64,
    /// Request body bytes sent.
    pub bytes_out: u64,
    /// Response body bytes received by the guest.
    pub bytes_in: u64,
    /// Requests that waited for a token of their origin's fleet-wide rate limit
    /// (docs/semantics.md#outbound-rate-limits).
    pub rate_limit_waits: u64,
    /// Milliseconds those requests waited, in all.
    pub rate_limit_wait_ms: u64,
}

/// Background drains of one attempt (see [`Hooks::drains`]).
pub(crate) type Drains = Arc<std::sync::Mutex<tokio::task::JoinSet<()>>>;

/// Reads `body` to its end in the background, discarding it.
fn drain<B>(drains: &Drains, body: B)
where
    B: Body<Data = Bytes, Error = Error> + Unpin + Send + 'static,
{
    let Ok(handle) = tokio::runtime::Handle::try_current() else {
        return;
    };
    let mut set = drains.lock().unwrap_or_else(|e| e.into_inner());
    while set.try_join_next().is_some() {}
    set.spawn_on(
        async move {
            let mut body = body;
            while let Some(Ok(_)) = body.frame().await {}
        },
        &handle,
    );
}

fn fail(e: Error) -> Sending {
    Box::new(std::future::ready(Err(e)))
}

impl Hooks {
    /// Drops `request` (its body drained) and answers `e` (a value for the guest).
    fn drop_request(&mut self, request: http::Request<WasiBody>, e: Error) -> Sending {
        let body = Capped::new(
            request.into_body(),
            self.policy.max_request_bytes,
            Error::HttpRequestBodySize,
            None,
            None,
            None,
        );
        drain(&self.drains, body);
        fail(e)
    }

    /// Refuses `request` with `e` (a limit or a malformed request).
    fn refuse(&mut self, request: http::Request<WasiBody>, e: Error) -> Sending {
        self.counters.refused.fetch_add(1, Ordering::Relaxed);
        self.drop_request(request, e)
    }

    /// Refuses a request whose URL cannot be sent (`HTTP-request-URI-invalid`), with one
    /// line in the attempt's log saying why (drawn on its log budget).
    fn refuse_uri(&mut self, request: http::Request<WasiBody>, why: &str) -> Sending {
        if let Some(why) = self.log.admit(tracing::Level::WARN, why) {
            tracing::warn!(
                target: crate::guest_log::TARGET,
                execution_id = %self.ids.execution_id,
                attempt_id = %self.ids.attempt_id,
                "outbound HTTP request refused: {why}"
            );
        }
        self.refuse(request, Error::HttpRequestUriInvalid)
    }

    fn deny(&mut self, request: http::Request<WasiBody>, origin: &str, why: &str) -> Sending {
        self.counters.denied.fetch_add(1, Ordering::Relaxed);
        if let Some(origin) = self.log.admit(tracing::Level::WARN, origin) {
            tracing::warn!(
                target: crate::guest_log::TARGET,
                execution_id = %self.ids.execution_id,
                attempt_id = %self.ids.attempt_id,
                origin = %origin,
                "outbound HTTP request denied: {why}"
            );
        }
        self.drop_request(request, Error::HttpRequestDenied)
    }
}

impl WasiHttpHooks for Hooks {
    /// What one outgoing body buffers (docs/security.md#http-resources).
    fn p2_outgoing_body_chunk_size(&mut self) -> usize {
        super::resources::BODY_CHUNK_BYTES
    }

    fn send_request(
        &mut self,
        mut request: http::Request<WasiBody>,
        options: Option<RequestOptions>,
        _fut: Box<dyn Future<Output = Result<(), Error>> + Send>,
    ) -> Sending {
        let uri = request.uri().clone();
        let scheme = match uri.scheme_str() {
            Some("http") => HttpScheme::Http,
            Some("https") => HttpScheme::Https,
            _ => return self.refuse(request, Error::HttpProtocolError),
        };
        let Some(authority) = uri.authority() else {
            return self.refuse(request, Error::HttpRequestUriInvalid);
        };
        if authority.as_str().contains('@') {
            return self.refuse_uri(
                request,
                "the URL has user information (user@host); credentials go in headers \
                 (sandbox.network.headers)",
            );
        }
        let host = match RequestHost::parse(authority.host()) {
            Ok(host) => host,
            Err(why) => return self.refuse_uri(request, &why.to_string()),
        };
        let port = uri.port_u16().unwrap_or(scheme.default_port());
        let origin = format!("{}://{host}:{port}", scheme.as_str());
        let policy = self.policy.clone();
        let Some(entry) = policy
            .allow
            .iter()
            .find(|e| e.origin.matches(scheme, &host, port))
        else {
            return self.deny(request, &origin, "origin not in sandbox.network.allow");
        };
        let Ok(permit) = self.permits.clone().try_acquire_owned() else {
            if self.log.admit(tracing::Level::INFO, "").is_some() {
                tracing::info!(
                    execution_id = %self.ids.execution_id,
                    attempt_id = %self.ids.attempt_id,
                    limit = self.policy.max_concurrent_requests,
                    "outbound HTTP request refused: max_concurrent_requests reached"
                );
            }
            return self.refuse(request, Error::ConnectionLimitReached);
        };
        if self.counters.admitted.fetch_add(1, Ordering::Relaxed) >= self.policy.max_requests {
            drop(permit);
            if self.log.admit(tracing::Level::INFO, "").is_some() {
                tracing::info!(
                    execution_id = %self.ids.execution_id,
                    attempt_id = %self.ids.attempt_id,
                    limit = self.policy.max_requests,
                    "outbound HTTP request refused: max_requests reached"
                );
            }
            return self.refuse(request, Error::HttpRequestDenied);
        }
        for (name, value) in &entry.headers {
            let (Ok(name), Ok(mut value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value.expose()),
            ) else {
                return self.refuse(
                    request,
                    Error::InternalError(Some(
                        "an injected header of sandbox.network.headers is not a valid header"
                            .into(),
                    )),
                );
            };
            value.set_sensitive(true);
            request.headers_mut().insert(name, value);
        }
        let max_request = self.policy.max_request_bytes;
        let declared = request
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok());
        if declared.is_some_and(|n| n > max_request) {
            return self.refuse(request, Error::HttpRequestBodySize(Some(max_request)));
        }
        // The pool key is the URL's scheme and authority: the checked origin, one spelling.
        let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
        match http::Uri::builder()
            .scheme(scheme.as_str())
            .authority(format!("{host}:{port}"))
            .path_and_query(path)
            .build()
        {
            Ok(checked) => *request.uri_mut() = checked,
            Err(e) => return self.refuse_uri(request, &format!("the URL cannot be rebuilt: {e}")),
        }
        // wasmtime sets `Host` to the guest's spelling of the authority: name the checked
        // origin instead (the port only when it is not the scheme's).
        let host_header = if port == scheme.default_port() {
            host.to_string()
        } else {
            format!("{host}:{port}")
        };
        match HeaderValue::from_str(&host_header) {
            Ok(value) => {
                request.headers_mut().insert(http::header::HOST, value);
            }
            Err(e) => return self.refuse_uri(request, &format!("the Host header: {e}")),
        }
        let client = self.clients.pool(entry.origin.names_exactly(&host));
        let guest_connect = options.and_then(|o| o.connect_timeout);
        let guest_first_byte = options.and_then(|o| o.first_byte_timeout);
        let connect_timeout = guest_connect.map_or(self.policy.connect_timeout, |g| {
            g.min(self.policy.connect_timeout)
        });
        let request_timeout = self.policy.request_timeout;
        let now = Instant::now();
        let mut deadline = now.checked_add(request_timeout);
        if let Some(d) = self.deadline {
            deadline = Some(deadline.map_or(d, |r| r.min(d)));
        }
        let first_byte = guest_first_byte
            .and_then(|g| now.checked_add(g))
            .map_or(deadline, |g| Some(deadline.map_or(g, |d| d.min(g))));
        let max_response = self.policy.max_response_bytes;
        let drains = self.drains.clone();
        let counters = self.counters.clone();
        let limited = entry.rate_limit.map(|rate| Limited {
            store: self.buckets.clone(),
            origin: entry.origin.to_string(),
            bucket: entry.bucket(),
            rate,
            tally: self.limits.clone(),
        });
        let cancel = self.cancel.clone();
        let attempt_deadline = self.deadline;
        let request = request.map(|body| {
            DrainOnDrop {
                body: Some(Capped::new(
                    body,
                    max_request,
                    Error::HttpRequestBodySize,
                    None,
                    None,
                    Some(counters.bytes_out.clone()),
                )),
                drains,
            }
            .boxed_unsync()
        });
        Box::new(async move {
            // The origin's fleet-wide rate limit: one token before the request leaves; the wait
            // counts against the attempt's deadline, not the request's own timeouts, which
            // start once the token is taken.
            let (deadline, first_byte) = match &limited {
                None => (deadline, first_byte),
                Some(limited) => {
                    let (wait, got) = limited.acquire(&cancel, attempt_deadline).await;
                    let waited = wait.unwrap_or(Duration::ZERO);
                    if wait.is_some() {
                        counters.rate_limit_waits.fetch_add(1, Ordering::Relaxed);
                        counters.rate_limit_wait_us.fetch_add(
                            u64::try_from(waited.as_micros()).unwrap_or(u64::MAX),
                            Ordering::Relaxed,
                        );
                    }
                    if let Err(no) = got {
                        counters.refused.fetch_add(1, Ordering::Relaxed);
                        return Err(no.error(&limited.origin));
                    }
                    // Shift the request's own deadlines by the wait (never past the attempt's).
                    let shift = |at: Option<Instant>| {
                        at.map(|t| {
                            let t = t.checked_add(waited).unwrap_or(t);
                            attempt_deadline.map_or(t, |d| t.min(d))
                        })
                    };
                    (shift(deadline), shift(first_byte))
                }
            };
            counters.requests.fetch_add(1, Ordering::Relaxed);
            let sending = CONNECT_TIMEOUT.scope(connect_timeout, client.request(request));
            let response = match first_byte {
                Some(at) => match tokio::time::timeout_at(at.into(), sending).await {
                    Ok(r) => r,
                    Err(_) => return Err(Error::HttpResponseTimeout),
                },
                None => sending.await,
            }
            .map_err(|e| {
                let code = client_error(&e);
                if matches!(code, Error::ConnectionLimitReached) {
                    // `max_connections`: a limit, like `max_concurrent_requests`; never sent.
                    counters.requests.fetch_sub(1, Ordering::Relaxed);
                    counters.refused.fetch_add(1, Ordering::Relaxed);
                } else {
                    counters.failed.fetch_add(1, Ordering::Relaxed);
                }
                code
            })?;
            let length = response
                .headers()
                .get(http::header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.parse::<u64>().ok());
            if let Some(limited) = &limited {
                limited
                    .after_response(response.status(), response.headers())
                    .await;
            }
            if let Some(n) = length.filter(|n| *n > max_response) {
                return Err(Error::HttpResponseBodySize(Some(n)));
            }
            let response = response.map(|body| {
                Capped::new(
                    body.map_err(Error::Hyper),
                    max_response,
                    Error::HttpResponseBodySize,
                    deadline,
                    Some(permit),
                    Some(counters.bytes_in.clone()),
                )
                .boxed_unsync()
            });
            let io: Box<dyn Future<Output = Result<(), Error>> + Send> =
                Box::new(std::future::ready(Ok(())));
            Ok((response, io))
        })
    }

    fn p2_error_from_hyper(&mut self, err: &hyper::Error) -> ErrorCode {
        if err.is_timeout() {
            ErrorCode::HttpResponseTimeout
        } else if err.is_incomplete_message() {
            ErrorCode::HttpResponseIncomplete
        } else {
            ErrorCode::HttpProtocolError
        }
    }
}

/// The `wasi:http` error for a failure of the pooled client.
fn client_error(e: &hyper_util::client::legacy::Error) -> Error {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if let Some(c) = s.downcast_ref::<ConnectError>() {
            return match c {
                ConnectError::Prohibited(_) => Error::DestinationIpProhibited,
                ConnectError::Dns(m) => Error::DnsError {
                    rcode: Some(m.clone()),
                    info_code: None,
                },
                ConnectError::Timeout => Error::ConnectionTimeout,
                ConnectError::Io(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                    Error::ConnectionRefused
                }
                ConnectError::Io(_) => Error::DestinationUnavailable,
                ConnectError::Tls(e) if e.to_string().contains("certificate") => {
                    Error::TlsCertificateError
                }
                ConnectError::Tls(_) => Error::TlsProtocolError,
                ConnectError::Limit(_) => Error::ConnectionLimitReached,
            };
        }
        if let Some(w) = s.downcast_ref::<Error>() {
            return match w {
                Error::HttpRequestBodySize(n) => Error::HttpRequestBodySize(*n),
                Error::HttpResponseBodySize(n) => Error::HttpResponseBodySize(*n),
                Error::HttpResponseTimeout => Error::HttpResponseTimeout,
                other => Error::InternalError(Some(other.to_string())),
            };
        }
        if let Some(h) = s.downcast_ref::<hyper::Error>() {
            if h.is_timeout() {
                return Error::HttpResponseTimeout;
            }
            if h.is_incomplete_message() {
                return Error::HttpResponseIncomplete;
            }
        }
        source = s.source();
    }
    Error::HttpProtocolError
}

/// A body that fails once more than `limit` bytes pass, or once the
/// deadline is reached, and holds a request permit until it ends.
struct Capped<B> {
    inner: B,
    limit: u64,
    seen: u64,
    too_big: fn(Option<u64>) -> Error,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
    permit: Option<OwnedSemaphorePermit>,
    /// Where the bytes that pass are counted.
    tally: Option<Arc<AtomicU64>>,
}

impl<B> Capped<B> {
    fn new(
        inner: B,
        limit: u64,
        too_big: fn(Option<u64>) -> Error,
        deadline: Option<Instant>,
        permit: Option<OwnedSemaphorePermit>,
        tally: Option<Arc<AtomicU64>>,
    ) -> Self {
        Self {
            inner,
            limit,
            seen: 0,
            too_big,
            deadline: deadline.map(|d| Box::pin(tokio::time::sleep_until(d.into()))),
            permit,
            tally,
        }
    }
}

impl<B> Body for Capped<B>
where
    B: Body<Data = Bytes, Error = Error> + Unpin,
{
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        let this = &mut *self;
        if let Some(d) = this.deadline.as_mut()
            && d.as_mut().poll(cx).is_ready()
        {
            this.permit = None;
            return Poll::Ready(Some(Err(Error::HttpResponseTimeout)));
        }
        let polled = Pin::new(&mut this.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.seen = this.seen.saturating_add(data.len() as u64);
                    if let Some(t) = &this.tally {
                        t.fetch_add(data.len() as u64, Ordering::Relaxed);
                    }
                    if this.seen > this.limit {
                        this.permit = None;
                        return Poll::Ready(Some(Err((this.too_big)(Some(this.limit)))));
                    }
                }
            }
            Poll::Ready(None) | Poll::Ready(Some(Err(_))) => this.permit = None,
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A request body that, when hyper lets go of it before its end (the server
/// answered first), is drained in the background instead of closed under
/// the guest.
struct DrainOnDrop {
    body: Option<Capped<WasiBody>>,
    drains: Drains,
}

impl Body for DrainOnDrop {
    type Data = Bytes;
    type Error = Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Error>>> {
        match self.body.as_mut() {
            Some(b) => Pin::new(b).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.as_ref().is_none_or(|b| b.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        self.body
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), |b| b.size_hint())
    }
}

impl Drop for DrainOnDrop {
    fn drop(&mut self) {
        if let Some(body) = self.body.take()
            && !body.is_end_stream()
        {
            drain(&self.drains, body);
        }
    }
}
