//! The testkit's conformance suite against real MariaDB and MySQL servers: one test per case and
//! server/table style (one fresh database per case), so `cargo test -p onestep-mysql
//! --test conformance t14_release` runs that case on every server. A server whose URL variable is
//! unset fails its tests; `ONESTEP_TEST_SKIP_<SERVER>=1` skips them (see `common`).
// Test code: a helper that cannot set up its fixture panics, like an assertion (clippy.toml
// allows this inside #[test] functions; these helpers live outside them).
#![allow(clippy::expect_used, clippy::panic)]

mod common;

use common::{MySqlFactory, Server};
use onestep_mysql::DdlStyle;

/// The factory for `server` with tables of `style`; `None` when the server is explicitly skipped.
fn factory(server: Server, style: DdlStyle) -> Option<MySqlFactory> {
    server.admin_url().map(|url| MySqlFactory::new(&url, style))
}

mod mariadb {
    onestep_testkit::conformance_tests!(super::factory(
        super::Server::MariaDb,
        super::DdlStyle::Onestep
    ));
}

mod mysql {
    onestep_testkit::conformance_tests!(super::factory(
        super::Server::MySql,
        super::DdlStyle::Onestep
    ));
}

/// The same suite on tables shaped like the reference's (no `claimable` column, server-default
/// collations): exercises the fallback query shapes.
mod reference_tables_mariadb {
    onestep_testkit::conformance_tests!(super::factory(
        super::Server::MariaDb,
        super::DdlStyle::Reference
    ));
}

mod reference_tables_mysql {
    onestep_testkit::conformance_tests!(super::factory(
        super::Server::MySql,
        super::DdlStyle::Reference
    ));
}

/// Reference-created tables after `onestep migrate --upgrade` (docs/schema.md#upgrading-reference-tables):
/// the `claimable` query shapes on a virtual column.
fn upgraded(server: Server) -> Option<MySqlFactory> {
    server.admin_url().map(|url| MySqlFactory::upgraded(&url))
}

mod upgraded_reference_tables_mariadb {
    onestep_testkit::conformance_tests!(super::upgraded(super::Server::MariaDb));
}

mod upgraded_reference_tables_mysql {
    onestep_testkit::conformance_tests!(super::upgraded(super::Server::MySql));
}
