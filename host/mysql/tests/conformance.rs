//! The testkit's conformance suite against real MariaDB and MySQL servers (one fresh database per
//! case). Set `ONESTEP_TEST_FILTER=<substring>` to run only matching cases.

mod common;

use std::sync::Arc;

use common::{MySqlFactory, Server, server_version};
use onestep_mysql::DdlStyle;
use onestep_testkit::run_suite;

async fn run(server: Server, style: DdlStyle) {
    let Some(url) = server.admin_url() else {
        return;
    };
    let factory = Arc::new(MySqlFactory::new(&url, style));
    let version = server_version(&factory.admin).await;
    let label = format!("{}:{style:?}", server.label());
    eprintln!("[{label}] conformance suite against VERSION() = {version}");
    let filter = std::env::var("ONESTEP_TEST_FILTER").ok();
    let report = run_suite(factory.clone(), &label, filter.as_deref(), 3).await;
    eprintln!(
        "[{label}] {} passed, {} failed (server {version})",
        report.passed.len(),
        report.failed.len()
    );
    assert!(
        report.failed.is_empty(),
        "[{label}] failed cases:\n{}",
        report
            .failed
            .iter()
            .map(|(n, m)| format!("  {n}: {m}"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance_mariadb() {
    run(Server::MariaDb, DdlStyle::Onestep).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance_mysql() {
    run(Server::MySql, DdlStyle::Onestep).await;
}

/// The same suite on tables shaped like the reference's (no `claimable` column, server-default
/// collations): exercises the fallback query shapes.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance_reference_tables_mariadb() {
    run(Server::MariaDb, DdlStyle::Reference).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn conformance_reference_tables_mysql() {
    run(Server::MySql, DdlStyle::Reference).await;
}
