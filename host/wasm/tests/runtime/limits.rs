//! Memory ceiling, fuel, and crashes that must not affect the next call.

use crate::common::*;
use onestep_wasm::{CancelHandle, Outcome, SandboxSettings, TrapKind};

#[tokio::test]
async fn memory_bomb_hits_the_limit_and_host_rss_stays_bounded() {
    let m = load("misbehave");
    let _g = exclusive();
    let limit: u64 = 64 << 20;
    let sandbox = SandboxSettings {
        memory_limit_bytes: limit,
        ..SandboxSettings::default()
    };
    let peak_resettable = reset_peak_rss();
    let before = rss_bytes();
    let report = m
        .invoke_report(
            &sandbox,
            ctx(1),
            r#"{"mode":"alloc"}"#,
            CancelHandle::new(),
            None,
        )
        .await;
    let after = rss_bytes();
    let peak = peak_rss_bytes();
    eprintln!(
        "memory bomb: rss before {} MiB, after {} MiB, peak {} MiB (resettable: {peak_resettable}), guest peak {} MiB",
        before >> 20,
        after >> 20,
        peak >> 20,
        report.peak_memory_bytes >> 20
    );
    assert_eq!(
        report.outcome,
        Outcome::Trapped {
            kind: TrapKind::MemoryLimit
        }
    );
    assert!(
        report.peak_memory_bytes <= limit,
        "guest grew to {}",
        report.peak_memory_bytes
    );
    // The host stays within the guest's limit plus slack, and gives it back.
    let slack = 48 << 20;
    if peak_resettable {
        assert!(peak < before + limit + slack, "peak RSS {} MiB", peak >> 20);
    }
    assert!(
        after < before + slack,
        "RSS after {} MiB vs {} MiB",
        after >> 20,
        before >> 20
    );
}

#[tokio::test]
async fn fuel_budget_stops_a_spinning_guest() {
    let _g = shared();
    let m = load("misbehave");
    let sandbox = SandboxSettings {
        fuel: Some(20_000_000),
        ..SandboxSettings::default()
    };
    let report = m
        .invoke_report(
            &sandbox,
            ctx(1),
            r#"{"mode":"spin"}"#,
            CancelHandle::new(),
            None,
        )
        .await;
    assert_eq!(
        report.outcome,
        Outcome::Trapped {
            kind: TrapKind::OutOfFuel
        }
    );
    assert_eq!(report.fuel_consumed, Some(20_000_000));
}

#[tokio::test]
async fn a_panicking_guest_does_not_affect_the_next_invocation() {
    let _g = shared();
    let m = load("misbehave");
    let sandbox = SandboxSettings::default();
    let report = m
        .invoke_report(
            &sandbox,
            ctx(1),
            r#"{"mode":"panic"}"#,
            CancelHandle::new(),
            None,
        )
        .await;
    assert_eq!(
        report.outcome,
        Outcome::Trapped {
            kind: TrapKind::GuestPanic("misbehave: deliberate panic".into())
        },
        "stderr: {}",
        report.stderr
    );
    // Same handler, next invocations: fresh store, works.
    for _ in 0..3 {
        let outcome = m
            .invoke(
                &sandbox,
                ctx(2),
                r#"{"mode":"fatal"}"#,
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
    let echo = load("echo");
    let outcome = echo
        .invoke(&sandbox, ctx(1), "true", CancelHandle::new(), None)
        .await;
    assert_eq!(outcome, Outcome::Succeeded("true".into()));
}
