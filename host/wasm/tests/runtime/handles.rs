//! The per-attempt cap on open host handles (`max_open_handles`): a guest
//! opening files without closing them gets exactly the cap, then an error
//! value; closing one frees a slot; nothing stays open after the attempt.

use crate::common::*;
use onestep_wasm::{CancelHandle, Outcome, Preopen, PreopenMode, SandboxSettings};

/// A read-only preopen `/ro` holding `doc.txt`.
fn sandbox(tmp: &TempDir, max_open_handles: u32) -> SandboxSettings {
    std::fs::write(tmp.path().join("doc.txt"), "read me").expect("write doc");
    SandboxSettings {
        preopens: vec![Preopen {
            host: tmp.path().to_path_buf(),
            guest: "/ro".into(),
            mode: PreopenMode::Ro,
        }],
        max_open_handles,
        ..SandboxSettings::default()
    }
}

async fn open_files(sandbox: &SandboxSettings, payload: serde_json::Value) -> serde_json::Value {
    let m = load("misbehave");
    match m
        .invoke(
            sandbox,
            ctx(1),
            &payload.to_string(),
            CancelHandle::new(),
            None,
        )
        .await
    {
        Outcome::Succeeded(out) => json(&out),
        other => panic!("{payload}: expected data, got {other:?}"),
    }
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count())
}

#[tokio::test]
async fn the_guest_gets_exactly_the_default_cap_then_an_error_value() {
    let _g = shared();
    let tmp = TempDir::new("handles-default");
    let s = sandbox(&tmp, SandboxSettings::default().max_open_handles);
    assert_eq!(s.max_open_handles, 256);
    let out = open_files(&s, serde_json::json!({"mode": "open_files"})).await;
    eprintln!("default cap: {out}");
    assert_eq!(out["opened"], 256, "{out}");
    assert!(
        out["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{out}"
    );
    assert_eq!(out["reopened"], true, "closing a file frees a slot: {out}");
}

#[tokio::test]
async fn streams_count_and_a_small_cap_is_exact() {
    let _g = shared();
    let tmp = TempDir::new("handles-small");
    let s = sandbox(&tmp, 7);
    let out = open_files(&s, serde_json::json!({"mode": "open_files"})).await;
    assert_eq!(out["opened"], 7, "{out}");
    assert_eq!(out["reopened"], true, "{out}");
    // Reading makes an input stream per file, which keeps the file open on
    // its own: 3 files × (descriptor + stream) = 6, the 4th file's stream
    // would be the 8th handle.
    let out = open_files(&s, serde_json::json!({"mode": "open_files", "read": true})).await;
    eprintln!("cap 7 with reads: {out}");
    assert_eq!(out["opened"], 3, "{out}");
    assert_eq!(out["reopened"], true, "{out}");
    // Under the cap nothing is refused.
    let out = open_files(&s, serde_json::json!({"mode": "open_files", "max": 6})).await;
    assert_eq!(out["opened"], 6, "{out}");
    assert!(out["error"].is_null(), "{out}");
}

#[tokio::test]
async fn a_zero_cap_still_allows_the_preopens_and_stdio() {
    let _g = shared();
    let tmp = TempDir::new("handles-zero");
    let s = sandbox(&tmp, 0);
    let out = open_files(&s, serde_json::json!({"mode": "open_files"})).await;
    assert_eq!(out["opened"], 0, "{out}");
    assert_eq!(out["reopened"], false, "{out}");
    assert!(
        out["error"].as_str().is_some_and(|e| !e.is_empty()),
        "{out}"
    );
    // The preopen itself is listed and stdout works.
    let out = open_files(&s, serde_json::json!({"mode": "print", "lines": 3})).await;
    assert_eq!(out["printed"], 3, "{out}");
}

#[tokio::test]
async fn every_host_file_is_closed_when_the_attempt_ends() {
    let _g = exclusive();
    let tmp = TempDir::new("handles-close");
    let s = sandbox(&tmp, 256);
    // Warm up (compile, pool, runtime threads) before counting.
    open_files(&s, serde_json::json!({"mode": "open_files", "max": 1})).await;
    let before = open_fds();
    for _ in 0..3 {
        let out = open_files(&s, serde_json::json!({"mode": "open_files", "read": true})).await;
        assert_eq!(out["opened"], 128, "{out}");
    }
    let after = open_fds();
    assert!(
        after <= before + 2,
        "host fds before {before}, after three capped attempts {after}"
    );
}
