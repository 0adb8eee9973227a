//! Driving the Python reference (onestep 1.15.0 + onestep-sql 0.7.1) from the tests: the venv
//! comes from `scripts/ref-venv.sh` (`$ONESTEP_REF_VENV`, default `target/ref-venv`); if it
//! cannot be created (pip unreachable) the test FAILS, it never skips.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::OnceLock;

use serde_json::Value;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The venv's python (created once per test binary).
pub fn python() -> PathBuf {
    static PY: OnceLock<PathBuf> = OnceLock::new();
    PY.get_or_init(|| {
        let out = std::process::Command::new("bash")
            .arg(repo_root().join("scripts/ref-venv.sh"))
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

/// Our DSN in the reference's spelling (`postgresql+psycopg://`).
pub fn py_dsn(dsn: &str) -> String {
    match dsn.split_once("://") {
        Some((_, rest)) => format!("postgresql+psycopg://{rest}"),
        None => dsn.to_owned(),
    }
}

/// Runs `ref_pg.py DSN NS AUTO_CREATE args…` and parses its JSON output.
pub async fn run(dsn: &str, ns: &str, auto_create: bool, args: &[&str]) -> Value {
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/interop/ref_pg.py");
    let out = tokio::process::Command::new(python())
        .arg(script)
        .args([
            py_dsn(dsn).as_str(),
            ns,
            if auto_create { "1" } else { "0" },
        ])
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

/// The reference creates its tables in the database `dsn` names.
pub async fn create_tables(dsn: &str) {
    run(dsn, "setup", true, &["create"]).await;
}
