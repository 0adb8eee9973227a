//! The loopback HTTP server of the outbound-HTTP tests (axum on
//! 127.0.0.1, a random port): `/ok`, `/json`, `/slow?ms=`, `/huge?bytes=`
//! (`&length=1` declares a Content-Length), `/redirect?to=` and `/headers`
//! (echoes the request headers as JSON), `/too-many?after=S` (`429` with `Retry-After: S`). It counts slow requests that were
//! dropped before they finished (the client went away) and the client ports
//! `/ok` was served to (one per TCP connection).

use axum::Router;
use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

#[derive(Default)]
pub struct Counters {
    pub slow_started: AtomicU64,
    pub slow_dropped: AtomicU64,
    /// Client ports `/ok` was requested from: one per TCP connection.
    pub ok_peers: std::sync::Mutex<std::collections::HashSet<u16>>,
}

pub struct TestServer {
    pub addr: SocketAddr,
    pub counters: Arc<Counters>,
}

impl TestServer {
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port())
    }
}

struct DropCount(Arc<Counters>, bool);

impl Drop for DropCount {
    fn drop(&mut self) {
        if !self.1 {
            self.0.slow_dropped.fetch_add(1, Ordering::SeqCst);
        }
    }
}

type Q = Query<HashMap<String, String>>;

async fn slow(State(c): State<Arc<Counters>>, Query(q): Q) -> &'static str {
    c.slow_started.fetch_add(1, Ordering::SeqCst);
    let mut guard = DropCount(c, false);
    let ms = q.get("ms").and_then(|m| m.parse().ok()).unwrap_or(30_000);
    tokio::time::sleep(Duration::from_millis(ms)).await;
    guard.1 = true;
    "slow"
}

async fn huge(Query(q): Q) -> Response {
    let bytes: usize = q
        .get("bytes")
        .and_then(|m| m.parse().ok())
        .unwrap_or(1 << 20);
    let chunk = bytes::Bytes::from(vec![b'x'; 64 * 1024]);
    let n = bytes.div_ceil(chunk.len());
    let stream = futures::stream::iter((0..n).map(move |_| Ok::<_, std::io::Error>(chunk.clone())));
    let mut r = Response::new(Body::from_stream(stream));
    if q.contains_key("length") {
        r.headers_mut()
            .insert(header::CONTENT_LENGTH, (n * 64 * 1024).into());
    }
    r
}

async fn ok(
    State(c): State<Arc<Counters>>,
    axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<SocketAddr>,
) -> &'static str {
    c.ok_peers
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(peer.port());
    "hello from the test server"
}

async fn too_many(Query(q): Q) -> Response {
    let after = q.get("after").cloned().unwrap_or_else(|| "1".into());
    (
        StatusCode::TOO_MANY_REQUESTS,
        [(header::RETRY_AFTER, after)],
        "slow down",
    )
        .into_response()
}

async fn redirect(Query(q): Q) -> Response {
    let to = q.get("to").cloned().unwrap_or_default();
    (StatusCode::FOUND, [(header::LOCATION, to)], "").into_response()
}

async fn headers(h: HeaderMap) -> Response {
    let map: serde_json::Map<String, serde_json::Value> = h
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned().into(),
            )
        })
        .collect();
    axum::Json(serde_json::Value::Object(map)).into_response()
}

/// Starts the server on the current tokio runtime.
pub async fn start() -> TestServer {
    let counters = Arc::new(Counters::default());
    let app = Router::new()
        .route("/ok", get(ok))
        .route(
            "/json",
            get(|| async { axum::Json(serde_json::json!({"answer": 42})) }),
        )
        .route("/slow", get(slow))
        .route("/huge", get(huge))
        .route("/redirect", get(redirect))
        .route("/too-many", get(too_many))
        .route("/headers", get(headers))
        .with_state(counters.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the test server");
    let addr = listener.local_addr().expect("local addr");
    tokio::spawn(async move {
        let _ = axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await;
    });
    TestServer { addr, counters }
}
