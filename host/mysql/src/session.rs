//! Connection pool and session pinning (docs/semantics.md#sessions) and the server gate (docs/semantics.md#opening-a-backend step 1).
//!
//! Every pooled connection runs `SET time_zone = '+00:00'` and `SET SESSION TRANSACTION ISOLATION
//! LEVEL READ COMMITTED` through `mysql_async`'s *setup* commands, which run on every new
//! connection **and again after every `COM_RESET_CONNECTION`** (the pool resets a connection when
//! it is returned, which clears session variables). `CLIENT_FOUND_ROWS` is enabled so that an
//! UPDATE reports rows *matched*, not rows changed.

use mysql_async::prelude::Queryable;
use mysql_async::{Conn, OptsBuilder, Pool, PoolConstraints, PoolOpts};
use onestep_core::store::SetupError;

use crate::dsn::ParsedDsn;

/// The session statements run on every connection (and after every reset).
pub const SESSION_SETUP: [&str; 2] = [
    "SET time_zone = '+00:00'",
    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
];

/// Which server product the backend talks to, recognised by name (docs/semantics.md#opening-a-backend, docs/semantics.md#compatibility-with-the-reference).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flavor {
    /// Oracle MySQL (≥ 8.0.16).
    MySql,
    /// MariaDB (≥ 10.6).
    MariaDb,
}

/// The server's identity as read at open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInfo {
    /// Product.
    pub flavor: Flavor,
    /// Leading `major.minor.patch`.
    pub version: (u32, u32, u32),
    /// `SELECT VERSION()` as returned.
    pub version_string: String,
}

impl ServerInfo {
    /// The session variable holding the isolation level: `@@transaction_isolation` on MySQL,
    /// `@@tx_isolation` on MariaDB (10.11 has no `transaction_isolation`).
    pub fn isolation_variable(&self) -> &'static str {
        match self.flavor {
            Flavor::MySql => "@@transaction_isolation",
            Flavor::MariaDb => "@@tx_isolation",
        }
    }
}

/// Parses `VERSION()` and applies the gate: MariaDB (name contains `MariaDB`) needs 10.6+
/// (`SKIP LOCKED`); anything else is treated as MySQL and needs 8.0.16+ (SKIP LOCKED 8.0, JSON
/// expression defaults 8.0.13, enforced CHECK constraints 8.0.16).
pub fn gate_server_version(v: &str) -> Result<ServerInfo, SetupError> {
    let version = leading_version(v)
        .ok_or_else(|| format!("unrecognized MySQL server version string: '{v}'"))?;
    let flavor = if v.to_ascii_lowercase().contains("mariadb") {
        Flavor::MariaDb
    } else {
        Flavor::MySql
    };
    match flavor {
        Flavor::MariaDb if version < (10, 6, 0) => Err(format!(
            "MariaDB {v} is not supported by onestep-mysql: 10.6+ is required (SKIP LOCKED needs 10.6)"
        )
        .into()),
        Flavor::MySql if version < (8, 0, 16) => Err(format!(
            "MySQL {v} is not supported by onestep-mysql: 8.0.16+ is required (SKIP LOCKED needs \
             8.0, JSON expression defaults 8.0.13, enforced CHECK constraints 8.0.16)"
        )
        .into()),
        _ => Ok(ServerInfo {
            flavor,
            version,
            version_string: v.to_owned(),
        }),
    }
}

fn leading_version(v: &str) -> Option<(u32, u32, u32)> {
    let mut parts = [0u32; 3];
    let mut rest = v;
    for (i, part) in parts.iter_mut().enumerate() {
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        if digits.is_empty() {
            return None;
        }
        *part = digits.parse().ok()?;
        rest = &rest[digits.len()..];
        if i < 2 {
            rest = rest.strip_prefix('.')?;
        }
    }
    Some((parts[0], parts[1], parts[2]))
}

/// Builds the pool: session setup, found-rows, TCP even to localhost (no silent switch to the
/// socket), `min..=max` connections.
pub fn build_pool(dsn: &ParsedDsn, pool_min: usize, pool_max: usize) -> Result<Pool, SetupError> {
    let max = pool_max.max(1);
    let min = pool_min.min(max);
    let constraints = PoolConstraints::new(min, max)
        .ok_or_else(|| format!("invalid pool bounds: min {pool_min}, max {pool_max}"))?;
    let opts = OptsBuilder::from_opts(dsn.opts.clone())
        .client_found_rows(true)
        .prefer_socket(false)
        .setup(SESSION_SETUP.to_vec())
        .pool_opts(
            // A non-zero inactive TTL makes the pool keep up to `max` idle connections (closing
            // those above `min` after 60 s idle); with the default 0 every returned connection
            // above `min` is discarded, so nothing would ever be reused.
            PoolOpts::default()
                .with_constraints(constraints)
                .with_inactive_connection_ttl(std::time::Duration::from_secs(60))
                .with_reset_connection(true),
        );
    Ok(Pool::new(opts))
}

/// What a connection's session is pinned to (for diagnostics and tests).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionState {
    /// `@@session.time_zone`, expected `+00:00`.
    pub time_zone: String,
    /// The isolation level, expected `READ-COMMITTED`.
    pub isolation: String,
    /// `CONNECTION_ID()`, to tell whether a connection was reused.
    pub connection_id: u64,
}

/// Reads the session state of `conn`.
pub(crate) async fn read_session_state(
    conn: &mut Conn,
    server: &ServerInfo,
) -> Result<SessionState, mysql_async::Error> {
    let sql = format!(
        "SELECT @@session.time_zone, {}, CONNECTION_ID()",
        server.isolation_variable()
    );
    let row: Option<(String, String, u64)> = conn.query_first(sql).await?;
    let (time_zone, isolation, connection_id) = row.unwrap_or_default();
    Ok(SessionState {
        time_zone,
        isolation,
        connection_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_recognises_products_by_name() {
        let m = gate_server_version("10.11.19-MariaDB-0+deb12u1");
        assert_eq!(m.map(|s| s.flavor), Ok(Flavor::MariaDb));
        assert!(gate_server_version("10.5.2-MariaDB").is_err());
        let my = gate_server_version("9.7.4-2");
        assert_eq!(
            my.map(|s| (s.flavor, s.version)),
            Ok((Flavor::MySql, (9, 7, 4)))
        );
        assert!(gate_server_version("8.0.15").is_err());
        assert!(gate_server_version("8.0.16").is_ok());
        assert!(gate_server_version("5.7.44").is_err());
        let e = gate_server_version("banana").err().map(|e| e.to_string());
        assert_eq!(
            e.as_deref(),
            Some("unrecognized MySQL server version string: 'banana'")
        );
    }
}
