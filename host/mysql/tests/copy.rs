//! `onestep copy` on MariaDB and MySQL (docs/cli.md#onestep-copy): the shared testkit case
//! (`onestep_testkit::backend_cases::copy`, also run PostgreSQL to PostgreSQL here and between
//! the backends in the e2e suite) from one database to another on the same server, and from
//! MariaDB to MySQL and back (MariaDB's native `uuid` ids to MySQL's `CHAR(32)`).
#![allow(clippy::expect_used, clippy::panic)]

mod common;

use common::{Server, admin_pool, create_db, db_url, drop_db};
use onestep_mysql::{MySqlBackend, StoreOptions};
use onestep_testkit::backend_cases::copy::round_trip;

/// A fresh database on `server`: its admin pool, name and opened backend (traces on).
async fn fresh(server: Server) -> Option<(mysql_async::Pool, String, MySqlBackend)> {
    let url = server.admin_url()?;
    let admin = admin_pool(&url);
    let db = create_db(&admin).await;
    let mut o = StoreOptions::new(db_url(&url, &db));
    o.traces = true;
    let backend = MySqlBackend::open(o).await.expect("open backend");
    Some((admin, db, backend))
}

async fn between(from: Server, to: Server) {
    let (Some((admin_a, db_a, a)), Some((admin_b, db_b, b))) = (fresh(from).await, fresh(to).await)
    else {
        return;
    };
    round_trip(&a, &b).await;
    a.close().await.expect("close");
    b.close().await.expect("close");
    drop_db(&admin_a, &db_a).await;
    drop_db(&admin_b, &db_b).await;
}

#[tokio::test]
async fn copy_mariadb_to_mariadb() {
    between(Server::MariaDb, Server::MariaDb).await;
}

#[tokio::test]
async fn copy_mariadb_to_mysql() {
    between(Server::MariaDb, Server::MySql).await;
}

#[tokio::test]
async fn copy_mysql_to_mariadb() {
    between(Server::MySql, Server::MariaDb).await;
}
