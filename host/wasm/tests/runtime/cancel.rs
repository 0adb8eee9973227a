//! Cancellation and deadlines: a CPU-bound guest (epoch interruption) and a
//! guest blocked in a host call (future dropped) both stop within 100 ms.
//! These tests run alone (`exclusive()`) so the timings are not skewed by
//! other tests on a 2-core machine.

use crate::common::*;
use onestep_wasm::{CancelHandle, Handler, Outcome, SandboxSettings, TrapKind};
use std::time::{Duration, Instant};

const BOUND: Duration = Duration::from_millis(100);

/// Starts `payload` on `handler` in a sandbox without cancel grace (what is
/// measured is how fast the runtime stops the guest), cancels it after
/// `after`, and returns the outcome and the latency between `cancel()` and
/// the outcome.
async fn cancel_after(
    handler: Handler,
    payload: &'static str,
    after: Duration,
) -> (Outcome, Duration) {
    let cancel = CancelHandle::new();
    let task = {
        let cancel = cancel.clone();
        tokio::spawn(async move {
            let outcome = handler
                .invoke(&no_grace(), ctx(1), payload, cancel, None)
                .await;
            (outcome, Instant::now())
        })
    };
    tokio::time::sleep(after).await;
    assert!(!task.is_finished(), "guest returned before the cancel");
    let signalled = Instant::now();
    cancel.cancel();
    let (outcome, done) = task.await.expect("invoke task");
    (outcome, done.saturating_duration_since(signalled))
}

/// The default sandbox with `cancel_grace` zero: a cancel stops the guest at once.
fn no_grace() -> SandboxSettings {
    SandboxSettings {
        cancel_grace: Duration::ZERO,
        ..SandboxSettings::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn busy_loop_is_cancelled_within_100ms() {
    let m = load("misbehave");
    let _g = exclusive();
    let (outcome, latency) =
        cancel_after(m, r#"{"mode":"spin"}"#, Duration::from_millis(300)).await;
    eprintln!("busy loop cancel latency: {latency:?}");
    assert_eq!(
        outcome,
        Outcome::Trapped {
            kind: TrapKind::Cancelled
        }
    );
    assert!(latency < BOUND, "cancel latency {latency:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sleeping_guest_is_cancelled_within_100ms() {
    let m = load("misbehave");
    let _g = exclusive();
    let (outcome, latency) = cancel_after(
        m,
        r#"{"mode":"sleep","secs":3600}"#,
        Duration::from_millis(300),
    )
    .await;
    eprintln!("sleeping guest cancel latency: {latency:?}");
    assert_eq!(
        outcome,
        Outcome::Trapped {
            kind: TrapKind::Cancelled
        }
    );
    assert!(latency < BOUND, "cancel latency {latency:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn countdown_is_cancelled_within_100ms_without_grace() {
    let c = load("countdown");
    let _g = exclusive();
    let (outcome, latency) = cancel_after(
        c,
        r#"{"steps":1000,"step_ms":50}"#,
        Duration::from_millis(200),
    )
    .await;
    assert_eq!(
        outcome,
        Outcome::Trapped {
            kind: TrapKind::Cancelled
        }
    );
    assert!(latency < BOUND, "cancel latency {latency:?}");
}

async fn timed(
    handler: &Handler,
    sandbox: &SandboxSettings,
    payload: &str,
    timeout: Option<Duration>,
) -> (Outcome, Duration) {
    let started = Instant::now();
    let outcome = handler
        .invoke(sandbox, ctx(1), payload, CancelHandle::new(), timeout)
        .await;
    (outcome, started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_s_is_honoured_within_100ms() {
    let m = load("misbehave");
    let _g = exclusive();
    let limit = Duration::from_millis(300);
    // The worker's `timeout_s` reaches the runtime as the `timeout` argument.
    let sandbox = SandboxSettings::default();
    for payload in [r#"{"mode":"spin"}"#, r#"{"mode":"sleep","secs":3600}"#] {
        let (outcome, elapsed) = timed(&m, &sandbox, payload, Some(limit)).await;
        eprintln!("{payload}: timed out after {elapsed:?}");
        assert_eq!(
            outcome,
            Outcome::Trapped {
                kind: TrapKind::Timeout
            },
            "{payload}"
        );
        assert!(elapsed >= limit, "{payload}: stopped early, {elapsed:?}");
        assert!(
            elapsed < limit + BOUND,
            "{payload}: stopped late, {elapsed:?}"
        );
    }
}

/// A CPU-bound guest must not starve other tasks on the same runtime thread:
/// it yields at every epoch tick, so a heartbeat timer next to it fires at
/// most about one tick late.
#[tokio::test(flavor = "current_thread")]
async fn spinning_guest_does_not_starve_the_executor() {
    let m = load("misbehave");
    let _g = exclusive();
    let period = Duration::from_millis(20);
    let heartbeat = tokio::spawn(async move {
        let mut beats = 0u32;
        let mut worst = Duration::ZERO;
        let end = Instant::now() + Duration::from_millis(400);
        while Instant::now() < end {
            let asked = Instant::now();
            tokio::time::sleep(period).await;
            worst = worst.max(asked.elapsed().saturating_sub(period));
            beats += 1;
        }
        (beats, worst)
    });
    let sandbox = SandboxSettings::default();
    let (outcome, _) = timed(
        &m,
        &sandbox,
        r#"{"mode":"spin"}"#,
        Some(Duration::from_millis(500)),
    )
    .await;
    let (beats, worst) = heartbeat.await.expect("heartbeat");
    eprintln!("heartbeat next to a spinning guest: {beats} beats, worst lateness {worst:?}");
    assert_eq!(
        outcome,
        Outcome::Trapped {
            kind: TrapKind::Timeout
        }
    );
    // Starved, it would not beat at all until the guest is stopped.
    assert!(beats >= 5, "heartbeat ran only {beats} times");
    assert!(
        worst < Duration::from_millis(100),
        "heartbeat {worst:?} late"
    );
}
