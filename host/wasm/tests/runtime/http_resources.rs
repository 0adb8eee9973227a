//! Host memory a guest holds through `wasi:http` resources
//! (docs/security.md#http-resources): the `fetch` guest's `fields-hog`
//! and `body-hog` modes against `http_fields_limit_bytes` and
//! `max_http_handles`, with this process's RSS (`/proc/self/status`)
//! measured during and after each attempt.

use crate::common::*;
use crate::http::{http_runtime, sandbox};
use onestep_wasm::{CancelHandle, Handler, Outcome, SandboxSettings, TrapKind};
use std::time::Duration;

/// A field of this process's `/proc/self/status`, in KiB.
fn status_kb(name: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /proc/self/status"))
}

/// This process's resident set, in KiB.
fn rss_kb() -> u64 {
    status_kb("VmRSS:")
}

/// RSS growth this test binary may show from one hostile attempt: the
/// attempt's stated ceiling (1 MiB of header bytes, 576 table entries of a
/// few KiB and 48 KiB of body buffer each) with a generous margin.
const MAX_RSS_GROWTH_KB: u64 = 96 * 1024;

fn fetch(sandbox: &SandboxSettings) -> Handler {
    ensure_rust_guests();
    http_runtime()
        .load_for(guest_path("fetch"), sandbox)
        .expect("load fetch")
}

async fn run(sandbox: &SandboxSettings, payload: serde_json::Value) -> Outcome {
    fetch(sandbox)
        .invoke(
            sandbox,
            ctx(1),
            &payload.to_string(),
            CancelHandle::new(),
            Some(Duration::from_secs(60)),
        )
        .await
}

/// The message of a trap the host caused, or a panic describing the outcome.
fn trap_message(outcome: &Outcome) -> &str {
    match outcome {
        Outcome::Trapped {
            kind: TrapKind::Other(message),
        } => message,
        other => panic!("expected a trap naming the limit, got {other:?}"),
    }
}

/// Runs `payload` and returns its outcome with the RSS before and after.
async fn measured(sandbox: &SandboxSettings, payload: serde_json::Value) -> (Outcome, u64, u64) {
    // Warm: the component loaded and instantiated once.
    let _ = run(
        sandbox,
        serde_json::json!({"mode": "fields-hog", "n": 1, "size": 1}),
    )
    .await;
    let before = rss_kb();
    let outcome = run(sandbox, payload.clone()).await;
    let after = rss_kb();
    eprintln!(
        "{payload}: RSS {} MB before, {} MB after the attempt (+{} KB), peak (VmHWM) {} MB: \
         {outcome:?}",
        before / 1024,
        after / 1024,
        after.saturating_sub(before),
        status_kb("VmHWM:") / 1024
    );
    (outcome, before, after)
}

#[tokio::test]
async fn header_fields_past_the_byte_limit_end_the_attempt() {
    let _g = exclusive();
    let s = sandbox(&["http://127.0.0.1:1"]);
    // 3,000 fields of 100 KB: 300 MB of host memory if the host let them be.
    let payload = serde_json::json!({"mode": "fields-hog", "n": 3000, "size": 100_000});
    let (outcome, before, after) = measured(&s, payload).await;
    let message = trap_message(&outcome);
    assert!(
        message.contains("http_fields_limit_bytes (1048576 bytes"),
        "{message}"
    );
    assert!(
        after.saturating_sub(before) < MAX_RSS_GROWTH_KB,
        "RSS grew from {before} KB to {after} KB"
    );
    // Within the limit, fields work as before.
    let ok = run(
        &s,
        serde_json::json!({"mode": "fields-hog", "n": 100, "size": 1000}),
    )
    .await;
    assert_eq!(ok, Outcome::Succeeded(r#"{"held":100}"#.into()));
}

#[tokio::test]
async fn many_small_fields_reach_the_handle_limit() {
    let _g = exclusive();
    let s = SandboxSettings {
        max_http_handles: 100,
        ..sandbox(&["http://127.0.0.1:1"])
    };
    let outcome = run(
        &s,
        serde_json::json!({"mode": "fields-hog", "n": 5000, "size": 10}),
    )
    .await;
    let message = trap_message(&outcome);
    assert!(
        message.contains("420 host resources") && message.contains("sandbox.max_http_handles"),
        "{message}"
    );
    let ok = run(
        &s,
        serde_json::json!({"mode": "fields-hog", "n": 90, "size": 10}),
    )
    .await;
    assert_eq!(ok, Outcome::Succeeded(r#"{"held":90}"#.into()));
}

#[tokio::test]
async fn open_bodies_to_a_denied_origin_reach_the_handle_limit() {
    let _g = exclusive();
    let s = sandbox(&["http://127.0.0.1:1"]);
    // 20,000 bodies held open (each with its request's response future).
    let payload =
        serde_json::json!({"mode": "body-hog", "n": 20_000, "url": "http://192.0.2.1:8080/"});
    let (outcome, before, after) = measured(&s, payload).await;
    let message = trap_message(&outcome);
    assert!(message.contains("sandbox.max_http_handles"), "{message}");
    assert!(
        after.saturating_sub(before) < MAX_RSS_GROWTH_KB,
        "RSS grew from {before} KB to {after} KB"
    );
}
