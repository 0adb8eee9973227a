//! Driving the Python reference (onestep 1.15.0 + onestep-sql 0.7.1) from the backends' interop
//! tests: the venv comes from `scripts/ref-venv.sh` (`$ONESTEP_REF_VENV`, default
//! `target/ref-venv`); if it cannot be created (pip unreachable) the test FAILS, it never skips.
//! One script, `host/testkit/reference/ref_client.py`, serves every backend: it picks the
//! reference's backend class by the DSN's scheme.

use std::path::PathBuf;
use std::sync::OnceLock;

use serde_json::Value;

fn testkit_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The venv's python (created once per test binary).
pub fn python() -> PathBuf {
    static PY: OnceLock<PathBuf> = OnceLock::new();
    PY.get_or_init(|| {
        let out = std::process::Command::new("bash")
            .arg(testkit_dir().join("../../scripts/ref-venv.sh"))
            .output()
            .expect("run scripts/ref-venv.sh");
        assert!(
            out.status.success(),
            "scripts/ref-venv.sh failed (is pip reachable?):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    })
    .clone()
}

/// Runs `ref_client.py DSN NS AUTO_CREATE args…` and parses its JSON output. `dsn` is in the
/// reference's spelling (`mysql+asyncmy://…`, `postgresql+psycopg://…`).
pub async fn run(dsn: &str, ns: &str, auto_create: bool, args: &[&str]) -> Value {
    let script = testkit_dir().join("reference/ref_client.py");
    let out = tokio::process::Command::new(python())
        .arg(script)
        .args([dsn, ns, if auto_create { "1" } else { "0" }])
        .args(args)
        .output()
        .await
        .expect("run the reference client");
    assert!(
        out.status.success(),
        "reference client failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("reference output is JSON")
}

/// A sleeping execution (docs/steps.md#sleep) as the reference's client sees it: parked by our
/// backend (`store` and `leases` over the table pair `py_dsn` names), the reference reads it
/// `queued`, not terminal, its result not ready; once it woke and succeeded, the reference
/// reads the result. Task `sleepy` of namespace `ns` must have nothing else waiting.
pub async fn parked_execution_as_the_reference_sees_it(
    store: &dyn onestep_core::ports::ExecutionStore,
    leases: &dyn onestep_core::ports::LeaseStore,
    py_dsn: &str,
    ns: &str,
) {
    use serde_json::json;
    let e = store
        .submit(crate::builders::prepared(ns, "sleepy", json!({"nap": 1})))
        .await
        .expect("submit");
    let claim = crate::builders::claim(ns, "sleepy", 1, 30.0, "ours");
    let lease = leases
        .claim(&claim)
        .await
        .expect("claim")
        .pop()
        .expect("a lease");
    let wake = chrono::Utc::now() + chrono::Duration::milliseconds(1500);
    let parked = leases
        .park(&lease.lease_ref(), &onestep_core::park::Park::until(wake))
        .await
        .expect("park");
    assert_eq!(parked.status.as_str(), "queued");
    // Not claimable before the wake time.
    assert!(leases.claim(&claim).await.expect("claim").is_empty());
    let id = e.id.to_string();
    let seen = run(py_dsn, ns, false, &["result", &id]).await;
    assert_eq!(
        seen,
        json!({"status": "queued", "terminal": false, "raised": "ExecutionNotReady"}),
        "the reference reads a parked execution as waiting"
    );
    let seen = run(py_dsn, ns, false, &["get", &id]).await;
    assert_eq!(seen["attempts"], json!(1));
    // At the wake time a new attempt finishes the execution (it stays `queued` until claimed).
    let left = (wake - chrono::Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(left + std::time::Duration::from_millis(100)).await;
    let woke = leases
        .claim(&claim)
        .await
        .expect("claim")
        .pop()
        .expect("woke");
    assert_eq!(woke.attempt_no, 2);
    leases
        .complete(
            &woke.lease_ref(),
            &onestep_core::execution::Completion::succeeded(json!({"slept": true})),
        )
        .await
        .expect("complete");
    let seen = run(py_dsn, ns, false, &["result", &id]).await;
    assert_eq!(
        seen,
        json!({"status": "succeeded", "terminal": true, "result": {"slept": true}})
    );
}
