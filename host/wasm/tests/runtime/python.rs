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

    // World 0.2.0 (`compute`): the task's params arrive in the context.
    assert_eq!(handler.world_version(), "onestep:handler@0.2.0");
    assert!(!handler.imports_http());
    let sandbox = SandboxSettings::default();
    let outcome = handler
        .invoke(
            &sandbox,
            onestep_wasm::InvocationContext {
                params_json: r#"{"model":"small"}"#.into(),
                ..ctx(2)
            },
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
    assert_eq!(out["params"], serde_json::json!({"model": "small"}));

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
