//! Driving the Python reference (onestep 1.15.0 + onestep-sql 0.7.1) on PostgreSQL from the
//! tests, through the testkit's shared driver (`onestep_testkit::backend_cases::reference`: the
//! venv from `scripts/ref-venv.sh`; if it cannot be created the test FAILS, it never skips).
#![allow(dead_code)]

use onestep_testkit::backend_cases::reference;
use serde_json::Value;

/// Our DSN in the reference's spelling (`postgresql+psycopg://`).
pub fn py_dsn(dsn: &str) -> String {
    match dsn.split_once("://") {
        Some((_, rest)) => format!("postgresql+psycopg://{rest}"),
        None => dsn.to_owned(),
    }
}

/// Runs `ref_client.py DSN NS AUTO_CREATE args…` on our DSN `dsn` and parses its JSON output.
pub async fn run(dsn: &str, ns: &str, auto_create: bool, args: &[&str]) -> Value {
    reference::run(&py_dsn(dsn), ns, auto_create, args).await
}

/// The reference creates its tables in the database `dsn` names.
pub async fn create_tables(dsn: &str) {
    run(dsn, "setup", true, &["create"]).await;
}
