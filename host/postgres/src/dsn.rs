//! DSN parsing (docs/postgres.md#dsn-and-tls): SQLAlchemy-style URLs (`postgres://`,
//! `postgresql://`, `postgresql+psycopg://`, `postgresql+asyncpg://`, any
//! `postgresql+<driver>://`) mapped to `tokio_postgres::Config` plus the TLS mode; the secrets
//! they carry are redacted by `onestep_core::store::redact`.

use std::time::Duration;

pub use onestep_core::store::redact::{MAX_MESSAGE_CHARS, redact};
use onestep_core::store::{SetupError, SplitDsn, percent_decode, split_dsn};

/// The query parameters a DSN may carry.
pub const ALLOWED_PARAMS: &[&str] = &[
    "sslmode",
    "sslrootcert",
    "connect_timeout",
    "application_name",
];

/// How the connection uses TLS (the DSN's `sslmode`; docs/postgres.md#dsn-and-tls).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsMode {
    /// No TLS (`sslmode=disable`, or no `sslmode`).
    Disable,
    /// TLS when the server offers it, plain otherwise (`allow`, `prefer`).
    Prefer,
    /// TLS required, the server certificate verified (`require`, `verify-ca`, `verify-full`).
    Require,
}

/// A parsed DSN plus the secrets that must never appear in messages.
#[derive(Clone)]
pub struct ParsedDsn {
    /// Driver configuration (without TLS, which [`Self::tls`] describes).
    pub config: tokio_postgres::Config,
    /// The TLS mode.
    pub tls: TlsMode,
    /// A PEM file of extra trusted roots (`sslrootcert`).
    pub root_cert: Option<String>,
    /// The database named by the URL path.
    pub database: String,
    /// Strings to redact (password, `user:password`, the whole DSN).
    pub secrets: Vec<String>,
}

impl std::fmt::Debug for ParsedDsn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParsedDsn")
            .field("database", &self.database)
            .field("tls", &self.tls)
            .finish_non_exhaustive()
    }
}

/// Whether `scheme` names PostgreSQL (`postgres`, `postgresql`, `postgresql+<driver>`).
pub fn is_postgres_scheme(scheme: &str) -> bool {
    scheme == "postgres" || scheme == "postgresql" || scheme.starts_with("postgresql+")
}

/// Parses `dsn`. Errors are messages that never contain the password.
pub fn parse_dsn(dsn: &str) -> Result<ParsedDsn, SetupError> {
    let SplitDsn { rest, secrets, .. } = split_dsn(
        dsn,
        "postgresql://",
        "postgresql://, postgres:// or postgresql+<driver>://",
        is_postgres_scheme,
    )?;
    let fail = |m: String| SetupError(redact(&m, &secrets));
    let url = url::Url::parse(&format!("postgresql://{rest}"))
        .map_err(|e| fail(format!("invalid postgresql dsn: {e}")))?;
    let mut config = tokio_postgres::Config::new();
    config.host(
        url.host_str()
            .filter(|h| !h.is_empty())
            .unwrap_or("localhost"),
    );
    config.port(url.port().unwrap_or(5432));
    let user = percent_decode(url.username());
    config.user(if user.is_empty() { "postgres" } else { &user });
    if let Some(p) = url.password() {
        config.password(percent_decode(p));
    }
    let database = percent_decode(url.path().trim_start_matches('/'));
    if database.is_empty() || database.contains('/') {
        return Err(fail(
            "the dsn must name a database (postgresql://user@host/<database>)".into(),
        ));
    }
    config.dbname(&database);
    config.application_name("onestep");
    // docs/semantics.md#sessions: every session runs in UTC and READ COMMITTED.
    config.options("-c TimeZone=UTC -c default_transaction_isolation=read\\ committed");
    config.connect_timeout(Duration::from_secs(10));
    let mut tls = TlsMode::Disable;
    let mut root_cert = None;
    for (k, v) in url.query_pairs() {
        match k.as_ref() {
            "sslmode" => {
                tls = match v.as_ref() {
                    "disable" => TlsMode::Disable,
                    "allow" | "prefer" => TlsMode::Prefer,
                    "require" | "verify-ca" | "verify-full" => TlsMode::Require,
                    other => {
                        return Err(fail(format!(
                            "unsupported sslmode '{other}' (allowed: disable, allow, prefer, \
                             require, verify-ca, verify-full)"
                        )));
                    }
                }
            }
            "sslrootcert" => root_cert = Some(v.into_owned()),
            "connect_timeout" => {
                let s: u64 = v.parse().map_err(|_| {
                    fail(format!(
                        "connect_timeout must be a whole number of seconds, got '{v}'"
                    ))
                })?;
                config.connect_timeout(Duration::from_secs(s.max(1)));
            }
            "application_name" => {
                config.application_name(v.as_ref());
            }
            other => {
                return Err(fail(format!(
                    "unsupported dsn parameter '{other}' (allowed: {})",
                    ALLOWED_PARAMS.join(", ")
                )));
            }
        }
    }
    Ok(ParsedDsn {
        config,
        tls,
        root_cert,
        database,
        secrets,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_sqlalchemy_schemes_and_tls_modes() {
        for (dsn, tls) in [
            ("postgres://u:p@127.0.0.1:5433/db", TlsMode::Disable),
            (
                "postgresql+psycopg://u:p@127.0.0.1:5433/db?sslmode=require",
                TlsMode::Require,
            ),
            (
                "postgresql+asyncpg://u:p@127.0.0.1:5433/db?sslmode=prefer",
                TlsMode::Prefer,
            ),
            (
                "postgresql://u@127.0.0.1:5433/db?sslmode=verify-full",
                TlsMode::Require,
            ),
        ] {
            let p = parse_dsn(dsn).unwrap();
            assert_eq!(p.config.get_ports(), &[5433]);
            assert_eq!(p.database, "db");
            assert_eq!(p.tls, tls, "{dsn}");
        }
    }

    #[test]
    fn errors_never_carry_the_password() {
        for (dsn, needle) in [
            (
                "postgresql://u:s3cr3t@h/db?sslmode=bogus",
                "unsupported sslmode 'bogus'",
            ),
            (
                "postgresql://u:s3cr3t@h/db?foo=1",
                "unsupported dsn parameter 'foo'",
            ),
            ("postgresql://u:s3cr3t@h/", "must name a database"),
            ("mysql://u:s3cr3t@h/db", "unsupported dsn scheme 'mysql'"),
        ] {
            let e = parse_dsn(dsn).unwrap_err().to_string();
            assert!(e.contains(needle), "{e}");
            assert!(!e.contains("s3cr3t"), "{e}");
        }
    }

    #[test]
    fn percent_encoded_passwords_are_decoded_and_redacted() {
        let p = parse_dsn("postgresql://u:p%40ss@h/db").unwrap();
        assert_eq!(p.config.get_password(), Some(&b"p@ss"[..]));
        assert_eq!(redact("x p@ss y", &p.secrets), "x <redacted> y");
    }
}
