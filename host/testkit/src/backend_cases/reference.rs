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
