//! The connections of outbound HTTP (docs/security.md#network, "Connections"), through the
//! real `fetch` guest (its `repeat` / `urls` mode: many requests in one attempt) and the
//! loopback test server: a URL with userinfo is refused as an invalid URI (one log line); the
//! spellings of one origin (a port with leading zeros, upper-case names, a fully qualified
//! name) share one pooled connection; an IP literal with a trailing dot matches no IP entry; an
//! attempt holds at most `max_connections` connections, letting idle ones go to reach a new
//! origin and refusing with `connection-limit-reached` when all are in use.

use crate::http::{error_message, guarded, logged, output, run, sandbox, server};
use serde_json::json;
use std::time::Duration;

#[test]
fn userinfo_in_the_url_is_refused_as_an_invalid_uri() {
    guarded(
        false,
        userinfo_in_the_url_is_refused_as_an_invalid_uri_case(),
    );
}

async fn userinfo_in_the_url_is_refused_as_an_invalid_uri_case() {
    let s = server().await;
    let sb = sandbox(&[&format!("http://127.0.0.1:{}", s.port())]);
    let url = format!("http://u{{i}}:pw@127.0.0.1:{}/ok", s.port());
    let (outcome, log) = logged(|| run(&sb, json!({"url": url, "repeat": 20}))).await;
    let out = output(&outcome);
    assert_eq!(out["ok"], 0, "{out}");
    assert_eq!(out["errors"]["HttpRequestUriInvalid"], 20, "{out}");
    assert!(
        log.contains("outbound HTTP request refused: the URL has user information"),
        "{log}"
    );
    // (wasmtime's own TRACE lines show what the guest called; ours never show the password.)
    let ours: Vec<&str> = log.lines().filter(|l| l.contains("onestep_wasm")).collect();
    assert!(
        !ours.is_empty() && ours.iter().all(|l| !l.contains("pw@")),
        "the credentials are not logged: {ours:?}"
    );
    let peers = s.counters.ok_peers.lock().map(|p| p.len()).unwrap_or(0);
    assert_eq!(peers, 0, "no request reached the server");
}

#[test]
fn spellings_of_one_origin_share_one_connection() {
    guarded(true, spellings_of_one_origin_share_one_connection_case());
}

async fn spellings_of_one_origin_share_one_connection_case() {
    let s = server().await;
    let port = s.port();
    let sb = sandbox(&[&format!("http://127.0.0.1:{port}")]);
    // 40 spellings of the port: distinct URL authorities, one origin.
    let urls: Vec<String> = (0..40)
        .map(|k| format!("http://127.0.0.1:{}{port}/ok", "0".repeat(k)))
        .collect();
    let out = output(&run(&sb, json!({"urls": urls})).await);
    assert_eq!(out["ok"], 40, "{out}");
    let peers = s.counters.ok_peers.lock().map(|p| p.len()).unwrap_or(0);
    eprintln!("40 spellings of one origin used {peers} TCP connection(s)");
    assert_eq!(peers, 1, "{peers} connections for one origin");
}

#[test]
fn an_ip_literal_with_a_trailing_dot_matches_no_ip_entry_and_names_are_canonical() {
    guarded(
        false,
        an_ip_literal_with_a_trailing_dot_matches_no_ip_entry_and_names_are_canonical_case(),
    );
}

async fn an_ip_literal_with_a_trailing_dot_matches_no_ip_entry_and_names_are_canonical_case() {
    let s = server().await;
    let port = s.port();
    let sb = sandbox(&[
        &format!("http://127.0.0.1:{port}"),
        &format!("http://svc.internal.test:{port}"),
    ]);
    for host in ["127.0.0.1.", "127.1", "2130706433"] {
        let url = format!("http://{host}:{port}/ok");
        let (outcome, log) = logged(|| run(&sb, json!({"url": url}))).await;
        let message = error_message(&outcome);
        assert!(
            message.contains("HttpRequestUriInvalid"),
            "{host}: {message}"
        );
        assert!(log.contains("neither an IP literal"), "{host}: {log}");
    }
    // The test resolver knows only `svc.internal.test` (lower case, no trailing dot): the
    // host resolves the canonical name.
    let url = format!("http://SVC.Internal.test.:{port}/ok");
    let out = output(&run(&sb, json!({"url": url})).await);
    assert_eq!(out["status"], 200, "{out}");
}

#[test]
fn an_attempt_holds_at_most_max_connections() {
    guarded(false, an_attempt_holds_at_most_max_connections_case());
}

async fn an_attempt_holds_at_most_max_connections_case() {
    let (a, b) = (server().await, server().await);
    let mut sb = sandbox(&[
        &format!("http://127.0.0.1:{}", a.port()),
        &format!("http://127.0.0.1:{}", b.port()),
    ]);
    sb.network.max_connections = 1;
    sb.network.connect_timeout = Duration::from_millis(300);
    // Sequential requests to two origins: the idle connection to one is let go to reach the
    // other.
    let urls = [a.url("/ok"), b.url("/ok"), a.url("/ok"), b.url("/ok")];
    let out = output(&run(&sb, json!({"urls": urls})).await);
    assert_eq!(out["ok"], 4, "{out}");
    // A response held unread keeps its connection in use: the next request finds no free
    // connection within the connect timeout.
    let urls = [a.url("/huge?bytes=4194304"), b.url("/ok")];
    let out = output(&run(&sb, json!({"urls": urls, "hold": true})).await);
    assert_eq!(
        out["results"],
        json!([200, "ConnectionLimitReached"]),
        "{out}"
    );
    // The default (16) allows both.
    sb.network.max_connections = onestep_core::network::DEFAULT_MAX_CONNECTIONS;
    let out = output(&run(&sb, json!({"urls": urls, "hold": true})).await);
    assert_eq!(out["results"], json!([200, 200]), "{out}");
}

/// `sandbox.network.max_requests`: an attempt sends at most that many requests in all; each one
/// more fails with `HTTP-request-denied` (a value the guest sees) and one log line says why.
#[test]
fn an_attempt_sends_at_most_max_requests() {
    guarded(false, an_attempt_sends_at_most_max_requests_case());
}

async fn an_attempt_sends_at_most_max_requests_case() {
    let s = server().await;
    let mut sb = sandbox(&[&format!("http://127.0.0.1:{}", s.port())]);
    sb.network.max_requests = 5;
    let (outcome, log) = logged(|| run(&sb, json!({"url": s.url("/ok"), "repeat": 8}))).await;
    let out = output(&outcome);
    assert_eq!(out["ok"], 5, "{out}");
    assert_eq!(out["errors"]["HttpRequestDenied"], 3, "{out}");
    assert!(
        log.contains("outbound HTTP request refused: max_requests reached"),
        "{log}"
    );
    // The default leaves such a loop alone.
    let sb = sandbox(&[&format!("http://127.0.0.1:{}", s.port())]);
    let out = output(&run(&sb, json!({"url": s.url("/ok"), "repeat": 8})).await);
    assert_eq!(out["ok"], 8, "{out}");
}
