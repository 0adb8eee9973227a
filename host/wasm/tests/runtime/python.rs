//! A handler written in Python (componentize-py) runs in the same sandbox.

use crate::common::*;
use onestep_wasm::{CancelHandle, Outcome, SandboxSettings};
use std::time::Duration;

#[tokio::test]
async fn python_guest_runs() {
    ensure_python_guest();
    let _g = shared();
    let rt = runtime();
    let started = std::time::Instant::now();
    let handler = tokio::task::spawn_blocking(|| runtime().load(guest_path("python-echo")))
        .await
        .expect("join")
        .expect("load python-echo");
    eprintln!(
        "python-echo loaded in {:?} ({:?})",
        started.elapsed(),
        rt.cache_stats()
    );

    let sandbox = SandboxSettings::default();
    let outcome = handler
        .invoke(
            &sandbox,
            ctx(2),
            r#"{"greeting": "hi"}"#,
            CancelHandle::new(),
            None,
        )
        .await;
    let Outcome::Succeeded(out) = outcome else {
        panic!("{outcome:?}")
    };
    let out = json(&out);
    assert_eq!(out["echo"], serde_json::json!({"greeting": "hi"}));
    assert_eq!(out["attempt"], 2);
    assert_eq!(out["task"], "test-task");
    assert_eq!(out["language"], "python");

    let outcome = handler
        .invoke(
            &sandbox,
            ctx(1),
            r#"{"fail": "try later"}"#,
            CancelHandle::new(),
            None,
        )
        .await;
    assert_eq!(
        outcome,
        Outcome::HandlerError {
            retryable: true,
            message: "try later".into(),
            retry_after: Some(Duration::from_secs(1)),
        }
    );
}
