//! The first steps of parsing a URL-shaped DSN, the same for every backend: trimming, the
//! secrets it carries ([`secrets_of`]) and its scheme. Each backend parses the rest (host, port,
//! database, parameters) with its driver's types.

use crate::store::errors::SetupError;
use crate::store::redact::{redact, secrets_of};

/// A DSN split at `://`, with the secrets it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitDsn<'a> {
    /// The scheme (`mysql`, `postgresql+psycopg`, …).
    pub scheme: &'a str,
    /// What follows `://` (authority, path and query).
    pub rest: &'a str,
    /// The secrets to redact from every message about this DSN.
    pub secrets: Vec<String>,
}

/// Splits `dsn` (trimmed) at its scheme, which `scheme_ok` must accept. Errors never carry the
/// password: an empty DSN, one that is not `<url>`-shaped (`dsn must be a <url> URL`), and one
/// whose scheme is refused (`unsupported dsn scheme '…' (expected <accepted>)`).
pub fn split_dsn<'a>(
    dsn: &'a str,
    url: &str,
    accepted: &str,
    scheme_ok: impl Fn(&str) -> bool,
) -> Result<SplitDsn<'a>, SetupError> {
    let dsn = dsn.trim();
    if dsn.is_empty() {
        return Err("dsn must be a non-empty string".into());
    }
    let secrets = secrets_of(dsn);
    let Some((scheme, rest)) = dsn.split_once("://") else {
        return Err(format!("dsn must be a {url} URL").into());
    };
    if !scheme_ok(scheme) {
        return Err(SetupError(redact(
            &format!("unsupported dsn scheme '{scheme}' (expected {accepted})"),
            &secrets,
        )));
    }
    Ok(SplitDsn {
        scheme,
        rest,
        secrets,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(dsn: &str) -> Result<SplitDsn<'_>, SetupError> {
        split_dsn(dsn, "x://", "x:// or x+<driver>://", |s| {
            s == "x" || s.starts_with("x+")
        })
    }

    #[test]
    fn splits_at_the_scheme_and_keeps_the_secrets() {
        let d = split(" x+drv://u:pw@h/db ").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!((d.scheme, d.rest), ("x+drv", "u:pw@h/db"));
        assert!(d.secrets.contains(&"pw".to_owned()));
        assert_eq!(split("  ").unwrap_err().0, "dsn must be a non-empty string");
        assert_eq!(split("h/db").unwrap_err().0, "dsn must be a x:// URL");
        let e = split("y://u:pw@h/db").unwrap_err().0;
        assert_eq!(
            e,
            "unsupported dsn scheme 'y' (expected x:// or x+<driver>://)"
        );
        let e = split("pw://u:pw@h/db").unwrap_err().0;
        assert!(!e.contains("pw"), "{e}");
    }
}
