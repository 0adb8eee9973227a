//! The worker process's shared outbound HTTP clients: hyper-util's pooled,
//! keep-alive `Client` over a connector of our own ([`Connector`]) that
//! resolves the host itself, checks every resolved address
//! ([`policy::is_special`](super::policy::is_special)) and connects to the
//! checked address (no second lookup, so no DNS rebinding), then speaks TLS
//! (rustls, webpki roots) for `https`.
//!
//! The pools belong to one attempt ([`AttemptClients`], made from the
//! process's [`Clients`], which hold the resolver and the TLS configuration):
//! every connection an attempt opens holds one of its `max_connections` slots
//! until the socket is closed, idle connections are few per origin and short
//! lived, and the pools (with every idle socket) are dropped with the
//! attempt's store. Requests reach the pools with their URL in canonical form
//! (no userinfo, checked host, explicit port), so the pool key is the checked
//! origin. There are two pools per attempt: `public` refuses special
//! addresses, `named` allows them and is used only for requests whose allow
//! entry names the host exactly. A connection opened for one kind of request
//! is therefore never reused for the other. See `docs/security.md#network`.

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::Uri;
use http_body_util::combinators::UnsyncBoxBody;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;

use super::policy::is_special;

/// Body of the requests the clients send (the guest's body, capped).
pub(crate) type RequestBody = UnsyncBoxBody<Bytes, wasmtime_wasi_http::Error>;

/// A pooled client.
pub(crate) type HttpClient = Client<Connector, RequestBody>;

/// Future of a DNS answer.
pub type Resolving = Pin<Box<dyn Future<Output = io::Result<Vec<IpAddr>>> + Send>>;

/// How host names are resolved: the system resolver by default; tests (and
/// embedders with their own DNS) may give another ([`Runtime::with_resolver`](crate::Runtime::with_resolver)).
#[derive(Clone)]
pub struct Resolver(Arc<dyn Fn(&str) -> Resolving + Send + Sync>);

impl Resolver {
    /// A resolver calling `f` with the host name (never an IP literal).
    pub fn new(f: impl Fn(&str) -> Resolving + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }

    /// The system resolver (`getaddrinfo` on a blocking thread).
    pub fn system() -> Self {
        Self::new(|host| {
            let host = host.to_string();
            Box::pin(async move {
                let addrs = tokio::net::lookup_host((host.as_str(), 0)).await?;
                Ok(addrs.map(|a| a.ip()).collect())
            })
        })
    }
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Resolver")
    }
}

/// Why the connector refused or failed (found again in the error chain by
/// the sender, which turns it into a `wasi:http` error code).
#[derive(Debug)]
pub(crate) enum ConnectError {
    /// Every address the host resolved to is special and the entry does not
    /// name the host.
    Prohibited(String),
    /// The name did not resolve.
    Dns(String),
    /// No answer from DNS, TCP or TLS within the connect timeout.
    Timeout,
    /// TCP failed.
    Io(io::Error),
    /// The TLS handshake failed.
    Tls(io::Error),
    /// The attempt already holds `max_connections` connections (the number), all in use, and
    /// none was freed within the connect timeout.
    Limit(u32),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Prohibited(h) => write!(f, "{h} resolves only to refused addresses"),
            ConnectError::Dns(e) => write!(f, "DNS lookup failed: {e}"),
            ConnectError::Timeout => f.write_str("connect timed out"),
            ConnectError::Io(e) => write!(f, "connect failed: {e}"),
            ConnectError::Tls(e) => write!(f, "TLS handshake failed: {e}"),
            ConnectError::Limit(n) => write!(
                f,
                "the attempt holds sandbox.network.max_connections ({n}) connections, all in use"
            ),
        }
    }
}

impl std::error::Error for ConnectError {}

tokio::task_local! {
    /// Connect timeout of the task whose request is connecting (the pool's
    /// connector is shared; the timeout is per task).
    pub(crate) static CONNECT_TIMEOUT: Duration;
}

/// The connector of one pool of one attempt.
#[derive(Clone)]
pub(crate) struct Connector {
    resolver: Resolver,
    tls: TlsConnector,
    /// Whether special addresses may be reached (the `named` pool).
    allow_special: bool,
    /// The attempt's connection slots (`max_connections`), shared by its two pools.
    slots: Arc<Semaphore>,
    max_connections: u32,
}

/// A TCP or TLS connection, holding one of its attempt's connection slots until it is closed.
pub(crate) struct Stream {
    io: Io,
    _slot: OwnedSemaphorePermit,
}

enum Io {
    Tcp(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Connection for Stream {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match &mut self.get_mut().io {
            Io::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Tcp(s) => Pin::new(s).poll_flush(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match &mut self.get_mut().io {
            Io::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            Io::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<Stream>;
    type Error = ConnectError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, ConnectError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), ConnectError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let this = self.clone();
        let timeout = CONNECT_TIMEOUT
            .try_with(|t| *t)
            .unwrap_or(onestep_core::network::DEFAULT_CONNECT_TIMEOUT);
        Box::pin(async move {
            let until = tokio::time::Instant::now() + timeout;
            let slot =
                match tokio::time::timeout_at(until, this.slots.clone().acquire_owned()).await {
                    Ok(Ok(slot)) => slot,
                    _ => return Err(ConnectError::Limit(this.max_connections)),
                };
            match tokio::time::timeout_at(until, this.connect(uri)).await {
                Ok(r) => r.map(|io| TokioIo::new(Stream { io, _slot: slot })),
                Err(_) => Err(ConnectError::Timeout),
            }
        })
    }
}

impl Connector {
    async fn connect(&self, uri: Uri) -> Result<Io, ConnectError> {
        let host = uri.host().unwrap_or_default().to_string();
        let https = uri.scheme_str() == Some("https");
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let addrs: Vec<IpAddr> = match bare.parse::<IpAddr>() {
            Ok(ip) => vec![ip],
            Err(_) => (self.resolver.0)(&host)
                .await
                .map_err(|e| ConnectError::Dns(e.to_string()))?,
        };
        if addrs.is_empty() {
            return Err(ConnectError::Dns(format!("{host} has no address")));
        }
        let checked: Vec<SocketAddr> = addrs
            .into_iter()
            .filter(|ip| self.allow_special || !is_special(*ip))
            .map(|ip| SocketAddr::new(ip, port))
            .collect();
        if checked.is_empty() {
            return Err(ConnectError::Prohibited(host));
        }
        let mut last = None;
        let mut tcp = None;
        for addr in checked {
            match TcpStream::connect(addr).await {
                Ok(s) => {
                    tcp = Some(s);
                    break;
                }
                Err(e) => last = Some(e),
            }
        }
        let tcp = match (tcp, last) {
            (Some(s), _) => s,
            (None, Some(e)) => return Err(ConnectError::Io(e)),
            (None, None) => return Err(ConnectError::Prohibited(host)),
        };
        let _ = tcp.set_nodelay(true);
        if !https {
            return Ok(Io::Tcp(tcp));
        }
        let name = match bare.parse::<IpAddr>() {
            Ok(ip) => rustls::pki_types::ServerName::IpAddress(ip.into()),
            Err(_) => rustls::pki_types::ServerName::try_from(host.clone())
                .map_err(|e| ConnectError::Tls(io::Error::new(io::ErrorKind::InvalidInput, e)))?,
        };
        let tls = self
            .tls
            .connect(name, tcp)
            .await
            .map_err(ConnectError::Tls)?;
        Ok(Io::Tls(Box::new(tls)))
    }
}

/// Idle connections an attempt keeps per origin (the pool key: scheme, checked host, port).
pub(crate) const MAX_IDLE_PER_ORIGIN: usize = 4;
/// How long an idle connection is kept for reuse by the same attempt.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// What the attempts' pools of a worker process share: the resolver and the TLS
/// configuration (with its session cache, so a later attempt resumes TLS sessions).
#[derive(Clone)]
pub(crate) struct Clients {
    resolver: Resolver,
    tls: TlsConnector,
}

impl Clients {
    /// With `resolver`; TLS trusts the webpki roots. Fails only if rustls cannot build a
    /// client configuration.
    pub(crate) fn new(resolver: Resolver) -> Result<Self, rustls::Error> {
        let roots = rustls::RootCertStore {
            roots: webpki_roots::TLS_SERVER_ROOTS.into(),
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        Ok(Clients {
            resolver,
            tls: TlsConnector::from(Arc::new(config)),
        })
    }

    /// The pools of one attempt, which may hold `max_connections` connections at once.
    pub(crate) fn for_attempt(&self, max_connections: u32) -> AttemptClients {
        let permits = usize::try_from(max_connections).unwrap_or(usize::MAX);
        let slots = Arc::new(Semaphore::new(permits.min(Semaphore::MAX_PERMITS)));
        let build = |allow_special| self.pool(allow_special, &slots, max_connections);
        AttemptClients {
            public: build(false),
            named: build(true),
            base: self.clone(),
            slots,
            max_connections,
        }
    }

    fn pool(
        &self,
        allow_special: bool,
        slots: &Arc<Semaphore>,
        max_connections: u32,
    ) -> HttpClient {
        Client::builder(TokioExecutor::new())
            .pool_timer(TokioTimer::new())
            .pool_idle_timeout(IDLE_TIMEOUT)
            .pool_max_idle_per_host(MAX_IDLE_PER_ORIGIN)
            .build(Connector {
                resolver: self.resolver.clone(),
                tls: self.tls.clone(),
                allow_special,
                slots: slots.clone(),
                max_connections,
            })
    }
}

/// The two pools of one attempt (see the module docs).
pub(crate) struct AttemptClients {
    public: HttpClient,
    named: HttpClient,
    base: Clients,
    slots: Arc<Semaphore>,
    max_connections: u32,
}

impl AttemptClients {
    /// The pool for a request: `named` when its allow entry names the host exactly. When
    /// every slot is taken, both pools are replaced by empty ones first: their idle
    /// connections close (those in use close when their request ends) and free their slots,
    /// so that a new origin can be reached while fewer than `max_connections` connections
    /// are in use.
    pub(crate) fn pool(&mut self, named: bool) -> HttpClient {
        if self.slots.available_permits() == 0 {
            self.public = self.base.pool(false, &self.slots, self.max_connections);
            self.named = self.base.pool(true, &self.slots, self.max_connections);
        }
        if named {
            self.named.clone()
        } else {
            self.public.clone()
        }
    }
}
