//! Outbound HTTP (`wasi:http`, world `onestep:handler@0.2.0`) through the
//! real `fetch` guest and a real loopback server (`http_server`): the
//! allow-list, the address policy with a resolver override, redirects,
//! body caps, timeouts, cancel, injected headers, the load-time refusal of
//! a `wasi:http` component without network, and a `0.1.0` component next to
//! it.

use crate::common::*;
use crate::http_server::{self, TestServer};
use onestep_wasm::{
    AllowedOrigin, CancelHandle, Error, Handler, NetworkSettings, Outcome, PoolingMode, Resolver,
    Runtime, RuntimeSettings, SandboxSettings, Secret, TrapKind,
};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::OnceLock;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tracing_subscriber::EnvFilter;

/// Names under `.rebind.test` and `svc.internal.test` resolve to 127.0.0.1
/// (what a DNS-rebinding attacker or an internal service would look like);
/// every other name fails to resolve.
fn test_resolver() -> Resolver {
    Resolver::new(|host| {
        let host = host.to_ascii_lowercase();
        Box::pin(async move {
            if host.ends_with(".rebind.test") || host == "svc.internal.test" {
                Ok(vec![IpAddr::V4(Ipv4Addr::LOCALHOST)])
            } else {
                Err(std::io::Error::other(format!("{host}: no such name")))
            }
        })
    })
}

pub(crate) fn http_runtime() -> &'static Runtime {
    static RT: OnceLock<Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        Runtime::with_resolver(
            RuntimeSettings {
                cache_dir: Some(cache_dir()),
                pooling: PoolingMode::Off,
                ..RuntimeSettings::default()
            },
            test_resolver(),
        )
        .expect("runtime")
    })
}

pub(crate) fn fetch() -> Handler {
    ensure_rust_guests();
    let sandbox = sandbox(&["http://127.0.0.1:1"]);
    http_runtime()
        .load_for(guest_path("fetch"), &sandbox)
        .expect("load fetch")
}

pub(crate) fn sandbox(allow: &[&str]) -> SandboxSettings {
    SandboxSettings {
        network: NetworkSettings::allowing(allow.iter().copied()).expect("allow entries"),
        ..SandboxSettings::default()
    }
}

pub(crate) async fn run(sandbox: &SandboxSettings, payload: serde_json::Value) -> Outcome {
    fetch()
        .invoke(
            sandbox,
            ctx(1),
            &payload.to_string(),
            CancelHandle::new(),
            Some(Duration::from_secs(30)),
        )
        .await
}

pub(crate) fn output(outcome: &Outcome) -> serde_json::Value {
    match outcome {
        Outcome::Succeeded(s) => serde_json::from_str(s).expect("fetch output is JSON"),
        other => panic!("expected success, got {other:?}"),
    }
}

/// The message of a non-retryable handler error (how `fetch` reports a
/// failed request).
pub(crate) fn error_message(outcome: &Outcome) -> String {
    match outcome {
        Outcome::HandlerError {
            retryable: false,
            message,
            ..
        } => message.clone(),
        other => panic!("expected a fatal handler error, got {other:?}"),
    }
}

/// Runs `case` on a tokio runtime of its own (multi-threaded when `multi`)
/// and drops that runtime, with every socket its test server and client
/// tasks hold, before the test-serialisation guard is released: a test that
/// counts the process's file descriptors must not see them close late. The
/// multi-threaded cases (the cancel latency, the keep-alive count) run alone.
pub(crate) fn guarded(multi: bool, case: impl std::future::Future<Output = ()>) {
    let _alone = multi.then(exclusive);
    let _beside_others = (!multi).then(shared);
    let rt = if multi {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    }
    .expect("test runtime");
    rt.block_on(case);
    drop(rt);
}

pub(crate) async fn server() -> TestServer {
    http_server::start().await
}

#[test]
fn an_allowed_request_returns_the_body() {
    guarded(false, an_allowed_request_returns_the_body_case());
}

async fn an_allowed_request_returns_the_body_case() {
    let s = server().await;
    let sb = sandbox(&[&format!("http://127.0.0.1:{}", s.port())]);
    let out = output(&run(&sb, serde_json::json!({"url": s.url("/ok")})).await);
    assert_eq!(out["status"], 200, "{out}");
    assert_eq!(out["body_prefix"], "hello from the test server", "{out}");
    let out = output(&run(&sb, serde_json::json!({"url": s.url("/json")})).await);
    assert_eq!(out["json"]["answer"], 42, "{out}");
}

#[test]
fn sequential_attempts_all_succeed_and_share_no_connection() {
    guarded(
        true,
        sequential_attempts_all_succeed_and_share_no_connection_case(),
    );
}

async fn sequential_attempts_all_succeed_and_share_no_connection_case() {
    let s = server().await;
    let sb = sandbox(&[&format!("http://127.0.0.1:{}", s.port())]);
    // Each request races the guest finishing its (empty) body against the
    // server's answer; whichever wins, the guest sees the response.
    for i in 0..40 {
        let outcome = run(&sb, serde_json::json!({"url": s.url("/ok")})).await;
        assert_eq!(output(&outcome)["status"], 200, "request {i}: {outcome:?}");
    }
    // Connections are the attempt's (docs/security.md#connections): one per attempt, closed
    // with it, never reused by the next one.
    let peers = s.counters.ok_peers.lock().map(|p| p.len()).unwrap_or(0);
    eprintln!("40 sequential attempts used {peers} TCP connection(s)");
    assert_eq!(peers, 40, "a connection was shared between attempts");
}

#[test]
fn an_origin_not_allowed_is_denied_as_a_value_and_logged() {
    guarded(
        false,
        an_origin_not_allowed_is_denied_as_a_value_and_logged_case(),
    );
}

async fn an_origin_not_allowed_is_denied_as_a_value_and_logged_case() {
    let s = server().await;
    // Same host, other port; other scheme; other host.
    let sb = sandbox(&[
        &format!("http://127.0.0.1:{}", s.port() + 1),
        &format!("https://127.0.0.1:{}", s.port()),
        &format!("http://localhost:{}", s.port()),
    ]);
    let (outcome, log) = logged(|| run(&sb, serde_json::json!({"url": s.url("/ok")}))).await;
    let message = error_message(&outcome);
    assert!(message.contains("HttpRequestDenied"), "{message}");
    assert!(
        log.contains(&format!("origin=http://127.0.0.1:{}", s.port()))
            && log.contains("outbound HTTP request denied"),
        "{log}"
    );
    // No allow-list at all: every request is denied (the run-time side of
    // the load-time refusal).
    let none = SandboxSettings::default();
    let message = error_message(&run(&none, serde_json::json!({"url": s.url("/ok")})).await);
    assert!(message.contains("HttpRequestDenied"), "{message}");
}

#[test]
fn loopback_is_refused_unless_the_entry_names_it() {
    guarded(false, loopback_is_refused_unless_the_entry_names_it_case());
}

async fn loopback_is_refused_unless_the_entry_names_it_case() {
    let s = server().await;
    let port = s.port();
    // A wildcard whose name resolves to 127.0.0.1: refused (DNS rebinding).
    let wild = sandbox(&[&format!("http://*.rebind.test:{port}")]);
    let url = format!("http://evil.rebind.test:{port}/ok");
    let message = error_message(&run(&wild, serde_json::json!({"url": url})).await);
    assert!(message.contains("DestinationIpProhibited"), "{message}");
    // The same address named exactly (a host name, then the IP literal): allowed.
    let named = sandbox(&[&format!("http://svc.internal.test:{port}")]);
    let url = format!("http://svc.internal.test:{port}/ok");
    let out = output(&run(&named, serde_json::json!({"url": url})).await);
    assert_eq!(out["status"], 200, "{out}");
    let literal = sandbox(&[&format!("http://127.0.0.1:{port}")]);
    let out = output(&run(&literal, serde_json::json!({"url": s.url("/ok")})).await);
    assert_eq!(out["status"], 200, "{out}");
    // An IP literal under a wildcard entry cannot match at all.
    let message = error_message(
        &run(
            &wild,
            serde_json::json!({"url": format!("http://127.0.0.1:{port}/ok")}),
        )
        .await,
    );
    assert!(message.contains("HttpRequestDenied"), "{message}");
}

#[test]
fn redirects_are_not_followed_and_the_next_hop_is_checked_again() {
    guarded(
        false,
        redirects_are_not_followed_and_the_next_hop_is_checked_again_case(),
    );
}

async fn redirects_are_not_followed_and_the_next_hop_is_checked_again_case() {
    let s = server().await;
    let sb = sandbox(&[&format!("http://127.0.0.1:{}", s.port())]);
    let elsewhere = format!("http://localhost:{}/ok", s.port());
    let url = s.url(&format!("/redirect?to={elsewhere}"));
    // The host hands the 302 to the guest as it is.
    let out = output(&run(&sb, serde_json::json!({"url": url})).await);
    assert_eq!(out["status"], 302, "{out}");
    assert_eq!(out["location"], elsewhere.as_str(), "{out}");
    // The guest follows it: a new request, to an origin not allowed.
    let message = error_message(&run(&sb, serde_json::json!({"url": url, "follow": 1})).await);
    assert!(message.contains("HttpRequestDenied"), "{message}");
    // A redirect to an allowed origin is followed by the guest and succeeds.
    let inside = s.url(&format!("/redirect?to={}", s.url("/ok")));
    let out = output(&run(&sb, serde_json::json!({"url": inside, "follow": 1})).await);
    assert_eq!(out["status"], 200, "{out}");
    assert_eq!(out["hops"].as_array().map(Vec::len), Some(2), "{out}");
}

#[test]
fn a_body_over_max_response_bytes_fails_the_request() {
    guarded(
        false,
        a_body_over_max_response_bytes_fails_the_request_case(),
    );
}

async fn a_body_over_max_response_bytes_fails_the_request_case() {
    let s = server().await;
    let mut sb = sandbox(&[&format!("http://127.0.0.1:{}", s.port())]);
    sb.network.max_response_bytes = 1 << 20;
    // Streamed (chunked): cut once the cap is passed. The stream error a
    // guest reads carries the host's text (wasmtime-wasi-http 48 gives no
    // error code for body-stream errors).
    let url = s.url(&format!("/huge?bytes={}", 8 << 20));
    let message = error_message(&run(&sb, serde_json::json!({"url": url})).await);
    assert!(
        message.contains("HTTP response body size exceeds limit: 1048576 bytes"),
        "{message}"
    );
    // Declared by Content-Length: refused before the body is read.
    let url = s.url(&format!("/huge?bytes={}&length=1", 8 << 20));
    let message = error_message(&run(&sb, serde_json::json!({"url": url})).await);
    assert!(message.contains("HttpResponseBodySize"), "{message}");
    // At the cap: fine.
    let url = s.url(&format!("/huge?bytes={}", 1 << 20));
    let out = output(&run(&sb, serde_json::json!({"url": url})).await);
    assert_eq!(out["bytes"], 1 << 20, "{out}");
}

#[test]
fn a_request_body_over_max_request_bytes_fails_the_request() {
    guarded(
        false,
        a_request_body_over_max_request_bytes_fails_the_request_case(),
    );
}

async fn a_request_body_over_max_request_bytes_fails_the_request_case() {
    let s = server().await;
    let mut sb = sandbox(&[&format!("http://127.0.0.1:{}", s.port())]);
    sb.network.max_request_bytes = 1000;
    let body = "y".repeat(5000);
    let payload = serde_json::json!({"url": s.url("/ok"), "method": "POST", "body": body});
    let message = error_message(&run(&sb, payload).await);
    assert!(message.contains("HttpRequestBodySize"), "{message}");
}

#[test]
fn cancel_during_a_slow_request_stops_the_guest_and_drops_the_request() {
    guarded(
        true,
        cancel_during_a_slow_request_stops_the_guest_and_drops_the_request_case(),
    );
}

async fn cancel_during_a_slow_request_stops_the_guest_and_drops_the_request_case() {
    let s = server().await;
    let handler = fetch();
    // No cancel grace: what is measured is how fast the runtime stops the guest.
    let sb = SandboxSettings {
        cancel_grace: Duration::ZERO,
        ..sandbox(&[&format!("http://127.0.0.1:{}", s.port())])
    };
    let cancel = CancelHandle::new();
    let payload = serde_json::json!({"url": s.url("/slow?ms=30000")}).to_string();
    let task = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            let o = handler
                .invoke(&sb, ctx(1), &payload, cancel, Some(Duration::from_secs(60)))
                .await;
            (o, Instant::now())
        })
    };
    // Wait until the server holds the request.
    let started = Instant::now();
    while s.counters.slow_started.load(Ordering::SeqCst) == 0 {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "request never arrived"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let signalled = Instant::now();
    cancel.cancel();
    let (outcome, done) = task.await.expect("invoke task");
    let latency = done.saturating_duration_since(signalled);
    eprintln!("cancel during a slow HTTP request: guest stopped {latency:?} after the signal");
    assert_eq!(
        outcome,
        Outcome::Trapped {
            kind: TrapKind::Cancelled
        }
    );
    assert!(
        latency < Duration::from_millis(100),
        "cancel latency {latency:?}"
    );
    // The in-flight request was dropped with the store: the server sees its
    // client go away long before the 30 s sleep ends.
    let waiting = Instant::now();
    while s.counters.slow_dropped.load(Ordering::SeqCst) == 0 {
        assert!(
            waiting.elapsed() < Duration::from_secs(5),
            "the server still holds the request"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    eprintln!(
        "server saw the request dropped {:?} after the signal",
        signalled.elapsed()
    );
}

#[test]
fn a_slow_server_ends_in_the_attempt_timeout_or_the_request_timeout() {
    guarded(
        false,
        a_slow_server_ends_in_the_attempt_timeout_or_the_request_timeout_case(),
    );
}

async fn a_slow_server_ends_in_the_attempt_timeout_or_the_request_timeout_case() {
    let s = server().await;
    let sb = sandbox(&[&format!("http://127.0.0.1:{}", s.port())]);
    let payload = serde_json::json!({"url": s.url("/slow?ms=30000")}).to_string();
    // The attempt's deadline first.
    let outcome = fetch()
        .invoke(
            &sb,
            ctx(1),
            &payload,
            CancelHandle::new(),
            Some(Duration::from_millis(500)),
        )
        .await;
    assert_eq!(
        outcome,
        Outcome::Trapped {
            kind: TrapKind::Timeout
        }
    );
    // request_timeout_s shorter than the attempt: the request fails, the
    // handler decides (here: a handler error with the code).
    let mut short = sb.clone();
    short.network.request_timeout = Duration::from_millis(300);
    let message =
        error_message(&run(&short, serde_json::json!({"url": s.url("/slow?ms=30000")})).await);
    assert!(message.contains("HttpResponseTimeout"), "{message}");
}

#[test]
fn injected_headers_reach_the_server_replace_the_guests_and_are_never_logged() {
    guarded(
        false,
        injected_headers_reach_the_server_replace_the_guests_and_are_never_logged_case(),
    );
}

async fn injected_headers_reach_the_server_replace_the_guests_and_are_never_logged_case() {
    let s = server().await;
    const SECRET: &str = "Bearer sk-test-7f3a9c-never-log-me";
    let mut sb = sandbox(&[]);
    sb.network.allow.push(AllowedOrigin {
        origin: onestep_wasm::OriginPattern::parse(&format!("http://127.0.0.1:{}", s.port()))
            .expect("origin"),
        headers: vec![("Authorization".into(), Secret::new(SECRET))],
        rate_limit: None,
    });
    let (outcome, log) = logged(|| {
        run(
            &sb,
            serde_json::json!({"url": s.url("/headers"), "headers": {"authorization": "guest-value", "x-guest": "1"}}),
        )
    })
    .await;
    let out = output(&outcome);
    // The server got the host's value, not the guest's.
    assert_eq!(out["json"]["authorization"], SECRET, "{out}");
    assert_eq!(out["json"]["x-guest"], "1", "{out}");
    // The guest's own request never held it: only what it set itself.
    let sent: Vec<&str> = out["sent_headers"]
        .as_array()
        .expect("sent_headers")
        .iter()
        .filter_map(|v| v.as_str())
        .collect();
    assert_eq!(sent, ["authorization", "x-guest"], "{out}");
    let (outcome, log2) = logged(|| run(&sb, serde_json::json!({"url": s.url("/headers")}))).await;
    let out = output(&outcome);
    assert_eq!(out["json"]["authorization"], SECRET, "{out}");
    assert_eq!(out["sent_headers"], serde_json::json!([]), "{out}");
    for text in [&log, &log2] {
        assert!(
            !text.contains("sk-test-7f3a9c"),
            "the secret is in a log line: {text}"
        );
        assert!(text.contains("fetching"), "nothing was logged: {text}");
    }
    // Nor in the sandbox's Debug output.
    assert!(!format!("{sb:?}").contains("sk-test-7f3a9c"));
}

#[test]
fn a_tls_handshake_that_never_completes_ends_in_the_connect_timeout() {
    guarded(
        false,
        a_tls_handshake_that_never_completes_ends_in_the_connect_timeout_case(),
    );
}

async fn a_tls_handshake_that_never_completes_ends_in_the_connect_timeout_case() {
    // A loopback server that accepts TCP and then says nothing: the https
    // handshake waits until connect_timeout_s.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let held = tokio::spawn(async move {
        let mut sockets = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            sockets.push(socket);
        }
    });
    let mut sb = sandbox(&[&format!("https://127.0.0.1:{port}")]);
    sb.network.connect_timeout = Duration::from_millis(300);
    let started = Instant::now();
    let message = error_message(
        &run(
            &sb,
            serde_json::json!({"url": format!("https://127.0.0.1:{port}/")}),
        )
        .await,
    );
    assert!(message.contains("ConnectionTimeout"), "{message}");
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    held.abort();
}

#[test]
fn more_requests_than_max_concurrent_requests_are_refused() {
    guarded(
        false,
        more_requests_than_max_concurrent_requests_are_refused_case(),
    );
}

async fn more_requests_than_max_concurrent_requests_are_refused_case() {
    let s = server().await;
    let mut sb = sandbox(&[&format!("http://127.0.0.1:{}", s.port())]);
    sb.network.max_concurrent_requests = 0;
    let message = error_message(&run(&sb, serde_json::json!({"url": s.url("/ok")})).await);
    assert!(message.contains("ConnectionLimitReached"), "{message}");
}

#[test]
fn a_wasi_http_component_needs_network_allow_and_0_1_0_components_still_run() {
    guarded(
        false,
        a_wasi_http_component_needs_network_allow_and_0_1_0_components_still_run_case(),
    );
}

async fn a_wasi_http_component_needs_network_allow_and_0_1_0_components_still_run_case() {
    ensure_rust_guests();
    let rt = http_runtime();
    let err = rt
        .load_for(guest_path("fetch"), &SandboxSettings::default())
        .expect_err("no network granted");
    assert!(matches!(err, Error::Sandbox { .. }), "{err:?}");
    assert_eq!(
        err.to_string(),
        "component fetch.wasm cannot run in its sandbox: it imports wasi:http/outgoing-handler@0.2.12 \
         (outbound HTTP) but the task's sandbox grants no network: list the origins it may reach \
         under sandbox.network.allow"
    );
    let handler = rt.load(guest_path("fetch")).expect("plain load links it");
    assert!(handler.imports_http());
    assert!(handler.check_sandbox(&SandboxSettings::default()).is_err());
    // A 0.1.0 component, in the same runtime, with or without network.
    let echo = rt
        .load_for(guest_path("echo"), &sandbox(&["https://api.example.com"]))
        .expect("echo loads");
    assert!(!echo.imports_http());
    for sb in [
        SandboxSettings::default(),
        sandbox(&["https://api.example.com"]),
    ] {
        let outcome = echo
            .invoke(&sb, ctx(1), r#"{"v":1}"#, CancelHandle::new(), None)
            .await;
        assert_eq!(outcome, Outcome::Succeeded(r#"{"v":1}"#.into()));
    }
}

/// Runs `f` with every event of every crate down to TRACE recorded (this
/// thread: the test runtime is single-threaded).
pub(crate) async fn logged<F, Fut>(f: F) -> (Outcome, String)
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Outcome>,
{
    let buf = Buf::default();
    let sub = tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::new("trace"))
        .with_writer(buf.clone())
        .with_ansi(false)
        .finish();
    let outcome = {
        let _sub = tracing::subscriber::set_default(sub);
        f().await
    };
    (outcome, buf.text())
}

#[test]
fn the_attempts_http_totals_count_requests_denials_and_bytes() {
    guarded(
        false,
        the_attempts_http_totals_count_requests_denials_and_bytes_case(),
    );
}

async fn the_attempts_http_totals_count_requests_denials_and_bytes_case() {
    let s = server().await;
    let report = |sb: SandboxSettings, payload: serde_json::Value| async move {
        fetch()
            .invoke_report(
                &sb,
                ctx(1),
                &payload.to_string(),
                CancelHandle::new(),
                Some(Duration::from_secs(30)),
            )
            .await
    };
    let allowed = || sandbox(&[&format!("http://127.0.0.1:{}", s.port())]);
    let r = report(allowed(), serde_json::json!({"url": s.url("/ok")})).await;
    assert!(r.outcome.is_success(), "{:?}", r.outcome);
    let body = "hello from the test server".len() as u64;
    assert_eq!(
        r.http,
        onestep_wasm::HttpTotals {
            requests: 1,
            bytes_in: body,
            ..Default::default()
        }
    );
    let r = report(
        allowed(),
        serde_json::json!({"url": s.url("/ok"), "method": "POST", "body": "x".repeat(1000)}),
    )
    .await;
    assert_eq!(
        (r.http.requests, r.http.bytes_out),
        (1, 1000),
        "{:?}",
        r.http
    );
    let r = report(
        SandboxSettings::default(),
        serde_json::json!({"url": s.url("/ok")}),
    )
    .await;
    assert_eq!(
        r.http,
        onestep_wasm::HttpTotals {
            denied: 1,
            ..Default::default()
        }
    );
    // A request to a port nothing listens on: sent, then failed.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port");
    let sb = sandbox(&[&format!("http://127.0.0.1:{closed}")]);
    let r = report(
        sb,
        serde_json::json!({"url": format!("http://127.0.0.1:{closed}/")}),
    )
    .await;
    assert_eq!((r.http.requests, r.http.failed), (1, 1), "{:?}", r.http);
}
