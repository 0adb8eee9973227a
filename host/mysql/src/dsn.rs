//! DSN parsing (docs/semantics.md#sessions): SQLAlchemy-style URLs (`mysql://`, `mysql+pymysql://`,
//! `mysql+asyncmy://`, any `mysql+<driver>://`) mapped to `mysql_async` options; the secrets
//! they carry are redacted by `onestep_core::store::redact`.

use mysql_async::Opts;
pub use onestep_core::store::redact::{MAX_MESSAGE_CHARS, redact};
use onestep_core::store::{SetupError, SplitDsn, split_dsn};

/// Query parameters SQLAlchemy URLs commonly carry that mean nothing to `mysql_async` (the
/// connection is always utf8mb4); they are dropped instead of failing the parse.
const IGNORED_PARAMS: &[&str] = &["charset", "use_unicode", "binary_prefix"];

/// A parsed DSN plus the secrets that must never appear in messages.
#[derive(Clone)]
pub struct ParsedDsn {
    /// Driver options.
    pub opts: Opts,
    /// Strings to redact (password, `user:password`, the whole DSN).
    pub secrets: Vec<String>,
}

impl std::fmt::Debug for ParsedDsn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParsedDsn")
            .field("host", &self.opts.ip_or_hostname())
            .field("port", &self.opts.tcp_port())
            .field("db", &self.opts.db_name())
            .finish_non_exhaustive()
    }
}

impl ParsedDsn {
    /// The TCP port the DSN names (3306 when it names none).
    pub fn tcp_port(&self) -> u16 {
        self.opts.tcp_port()
    }
}

/// Parses `dsn`. Errors are messages that never contain the password.
pub fn parse_dsn(dsn: &str) -> Result<ParsedDsn, SetupError> {
    let SplitDsn { rest, secrets, .. } =
        split_dsn(dsn, "mysql://", "mysql:// or mysql+<driver>://", |scheme| {
            scheme == "mysql" || scheme.starts_with("mysql+") || scheme == "mariadb"
        })?;
    let (base, query) = match rest.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (rest, None),
    };
    let kept: Vec<&str> = query
        .map(|q| {
            q.split('&')
                .filter(|kv| !kv.is_empty())
                .filter(|kv| {
                    let key = kv.split('=').next().unwrap_or_default();
                    !IGNORED_PARAMS.contains(&key)
                })
                .collect()
        })
        .unwrap_or_default();
    let mut url = format!("mysql://{base}");
    if !kept.is_empty() {
        url.push('?');
        url.push_str(&kept.join("&"));
    }
    let opts =
        Opts::from_url(&url).map_err(|e| redact(&format!("invalid mysql dsn: {e}"), &secrets))?;
    Ok(ParsedDsn { opts, secrets })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_sqlalchemy_schemes() {
        for dsn in [
            "mysql://u:p@127.0.0.1:3307/db",
            "mysql+pymysql://u:p@127.0.0.1:3307/db?charset=utf8mb4",
            "mysql+asyncmy://u:p@127.0.0.1:3307/db",
        ] {
            let p = parse_dsn(dsn).unwrap();
            assert_eq!(p.opts.tcp_port(), 3307);
            assert_eq!(p.opts.db_name(), Some("db"));
            assert_eq!(p.opts.user(), Some("u"));
        }
        assert!(parse_dsn("postgres://x").is_err());
        assert!(parse_dsn("").is_err());
    }

    #[test]
    fn errors_never_carry_the_password() {
        let e = parse_dsn("mysql://user:s3cr%21t@host/db?bogus=s3cr%21t")
            .unwrap_err()
            .to_string();
        assert!(!e.contains("s3cr"), "{e}");
    }
}
