//! Happy paths and typed results.

use crate::common::*;
use onestep_wasm::{CancelHandle, Error, Outcome, SandboxSettings, TrapKind};
use std::time::Duration;

#[tokio::test]
async fn echo_returns_its_payload() {
    let _g = shared();
    let echo = load("echo");
    let payload = r#"{"hello":"world","n":[1,2,3]}"#;
    let outcome = echo
        .invoke(
            &SandboxSettings::default(),
            ctx(1),
            payload,
            CancelHandle::new(),
            None,
        )
        .await;
    assert_eq!(outcome, Outcome::Succeeded(payload.to_string()));
}

#[tokio::test]
async fn flaky_fails_retryably_until_its_attempt() {
    let _g = shared();
    let flaky = load("flaky");
    let payload = r#"{"succeed_on_attempt": 3}"#;
    let sandbox = SandboxSettings::default();
    for attempt in 1..=2 {
        let outcome = flaky
            .invoke(&sandbox, ctx(attempt), payload, CancelHandle::new(), None)
            .await;
        match outcome {
            Outcome::HandlerError {
                retryable,
                message,
                retry_after,
            } => {
                assert!(retryable);
                assert!(
                    message.contains(&format!("attempt {attempt} of 3")),
                    "{message}"
                );
                assert_eq!(retry_after, Some(Duration::from_millis(10)));
            }
            other => panic!("attempt {attempt}: unexpected {other:?}"),
        }
    }
    let outcome = flaky
        .invoke(&sandbox, ctx(3), payload, CancelHandle::new(), None)
        .await;
    match outcome {
        Outcome::Succeeded(out) => assert_eq!(json(&out)["attempt"], 3),
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn fatal_handler_error_is_typed() {
    let _g = shared();
    let m = load("misbehave");
    let outcome = m
        .invoke(
            &SandboxSettings::default(),
            ctx(1),
            r#"{"mode":"fatal"}"#,
            CancelHandle::new(),
            None,
        )
        .await;
    assert_eq!(
        outcome,
        Outcome::HandlerError {
            retryable: false,
            message: "misbehave: deliberate fatal error".into(),
            retry_after: None
        }
    );
}

#[tokio::test]
async fn invalid_payload_is_the_guests_error_not_a_crash() {
    let _g = shared();
    let m = load("countdown");
    let outcome = m
        .invoke(
            &SandboxSettings::default(),
            ctx(1),
            "not json",
            CancelHandle::new(),
            None,
        )
        .await;
    assert!(
        matches!(
            outcome,
            Outcome::HandlerError {
                retryable: false,
                ..
            }
        ),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn countdown_completes_and_honours_cooperative_cancel() {
    let _g = shared();
    let c = load("countdown");
    let sandbox = SandboxSettings::default();
    let outcome = c
        .invoke(
            &sandbox,
            ctx(1),
            r#"{"steps": 3, "step_ms": 5}"#,
            CancelHandle::new(),
            None,
        )
        .await;
    assert!(outcome.is_success(), "{outcome:?}");

    // With a grace period the guest sees cancel-requested() and returns its
    // own (retryable) error instead of being stopped.
    let sandbox = SandboxSettings {
        cancel_grace: Duration::from_secs(5),
        ..SandboxSettings::default()
    };
    let cancel = CancelHandle::new();
    let canceller = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            cancel.cancel();
        })
    };
    let outcome = c
        .invoke(
            &sandbox,
            ctx(1),
            r#"{"steps": 1000, "step_ms": 10}"#,
            cancel,
            None,
        )
        .await;
    canceller.await.expect("canceller");
    match outcome {
        Outcome::HandlerError {
            retryable, message, ..
        } => {
            assert!(retryable);
            assert!(message.starts_with("cancelled at step"), "{message}");
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[tokio::test]
async fn bounded_stdout_is_captured() {
    let _g = shared();
    let m = load("misbehave");
    let sandbox = SandboxSettings {
        output_limit_bytes: 1000,
        ..SandboxSettings::default()
    };
    let report = m
        .invoke_report(
            &sandbox,
            ctx(1),
            r#"{"mode":"print","lines":500}"#,
            CancelHandle::new(),
            None,
        )
        .await;
    assert!(report.outcome.is_success(), "{:?}", report.outcome);
    assert_eq!(report.stdout.len(), 1000);
    assert_eq!(report.output_dropped_bytes, 500 * 100 - 1000);
}

#[tokio::test]
async fn not_a_component_is_a_load_error() {
    let _g = shared();
    let rt = runtime();
    let err = rt
        .load_bytes("garbage", b"definitely not wasm")
        .expect_err("must fail");
    assert!(matches!(err, Error::NotAComponent { .. }), "{err}");
    assert_eq!(err.kind(), "not-a-component");
    // An empty core module: valid wasm, but not a component.
    let err = rt
        .load_bytes("core-module", b"\0asm\x01\0\0\0")
        .expect_err("must fail");
    assert!(matches!(err, Error::NotAComponent { .. }), "{err}");
    assert!(err.to_string().contains("core WebAssembly module"), "{err}");
    // A component preamble with nothing valid after it.
    let err = rt
        .load_bytes("broken", b"\0asm\x0d\0\x01\0\xff\xff")
        .expect_err("must fail");
    assert!(matches!(err, Error::Compile { .. }), "{err}");
    let err = rt.load("/nonexistent/x.wasm").expect_err("must fail");
    assert!(matches!(err, Error::Io { .. }), "{err}");
}

#[tokio::test]
async fn already_cancelled_never_starts() {
    let _g = shared();
    let echo = load("echo");
    let cancel = CancelHandle::new();
    cancel.cancel();
    let outcome = echo
        .invoke(&SandboxSettings::default(), ctx(1), "{}", cancel, None)
        .await;
    assert_eq!(
        outcome,
        Outcome::Trapped {
            kind: TrapKind::Cancelled
        }
    );
}

#[tokio::test]
async fn pooling_off_runtime_works() {
    let _g = shared();
    ensure_rust_guests();
    let rt = onestep_wasm::Runtime::new(onestep_wasm::RuntimeSettings {
        pooling: onestep_wasm::PoolingMode::Off,
        cache_dir: Some(cache_dir()),
        ..Default::default()
    })
    .expect("runtime");
    assert!(!rt.pooling_enabled());
    assert!(rt.pool_stats().is_none());
    let echo = rt.load(guest_path("echo")).expect("load");
    let outcome = echo
        .invoke(
            &SandboxSettings::default(),
            ctx(1),
            "[1]",
            CancelHandle::new(),
            None,
        )
        .await;
    assert_eq!(outcome, Outcome::Succeeded("[1]".into()));
}

#[tokio::test]
async fn a_component_of_another_world_is_not_a_handler() {
    let _g = shared();
    ensure_rust_guests();
    let err = runtime()
        .load(guest_path("not-a-handler"))
        .expect_err("a WASI command is not a handler");
    assert!(matches!(err, Error::NotAHandler { .. }), "{err}");
    assert!(
        err.to_string().contains("not the function `handle`"),
        "{err}"
    );
    eprintln!("{err}");
}

#[tokio::test]
async fn a_component_of_an_unserved_world_version_is_named() {
    let _g = shared();
    ensure_rust_guests();
    let err = runtime()
        .load(guest_path("future-world"))
        .expect_err("0.9.0 is not served");
    assert!(matches!(err, Error::WorldVersion { .. }), "{err}");
    assert_eq!(
        err.to_string(),
        "component future-world.wasm is built against onestep:handler@0.9.0, which this host \
         does not serve (it serves onestep:handler@0.1.0, onestep:handler@0.2.0, onestep:handler@0.3.0): rebuild it \
         against one of those"
    );
}

/// World 0.2.0 components get the task's params in their context; 0.1.0 components (no such
/// field) run unchanged.
#[tokio::test]
async fn params_reach_0_2_components_only() {
    let _g = shared();
    let inspect = load("inspect");
    let echo = load("echo");
    assert_eq!(inspect.world_version(), "onestep:handler@0.2.0");
    assert_eq!(echo.world_version(), "onestep:handler@0.1.0");
    let ctx = onestep_wasm::InvocationContext {
        params_json: r#"{"k":[1,2],"s":"v"}"#.into(),
        ..ctx(1)
    };
    let outcome = inspect
        .invoke(
            &SandboxSettings::default(),
            ctx.clone(),
            r#"{"p":1}"#,
            CancelHandle::new(),
            None,
        )
        .await;
    let Outcome::Succeeded(out) = outcome else {
        panic!("{outcome:?}")
    };
    let out = json(&out);
    assert_eq!(out["params"], serde_json::json!({"k": [1, 2], "s": "v"}));
    assert_eq!(out["payload"], serde_json::json!({"p": 1}));
    let outcome = echo
        .invoke(
            &SandboxSettings::default(),
            ctx,
            "[3]",
            CancelHandle::new(),
            None,
        )
        .await;
    assert_eq!(outcome, Outcome::Succeeded("[3]".into()));
}
