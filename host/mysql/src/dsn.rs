//! DSN parsing (docs/semantics.md#sessions): SQLAlchemy-style URLs (`mysql://`, `mysql+pymysql://`,
//! `mysql+asyncmy://`, any `mysql+<driver>://`) mapped to `mysql_async` options, and redaction of
//! secrets in every message that could carry them.

use mysql_async::Opts;

/// Query parameters SQLAlchemy URLs commonly carry that mean nothing to `mysql_async` (the
/// connection is always utf8mb4); they are dropped instead of failing the parse.
const IGNORED_PARAMS: &[&str] = &["charset", "use_unicode", "binary_prefix"];

/// Maximum length of a redacted message (docs/semantics.md#sessions: cut to 500 characters).
pub const MAX_MESSAGE_CHARS: usize = 500;

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
pub fn parse_dsn(dsn: &str) -> Result<ParsedDsn, String> {
    let dsn = dsn.trim();
    if dsn.is_empty() {
        return Err("dsn must be a non-empty string".into());
    }
    let secrets = secrets_of(dsn);
    let Some((scheme, rest)) = dsn.split_once("://") else {
        return Err("dsn must be a mysql:// URL".into());
    };
    let scheme_ok = scheme == "mysql" || scheme.starts_with("mysql+") || scheme == "mariadb";
    if !scheme_ok {
        return Err(redact(
            &format!("unsupported dsn scheme '{scheme}' (expected mysql:// or mysql+<driver>://)"),
            &secrets,
        ));
    }
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

/// The secrets contained in a DSN: the raw and percent-decoded password, `user:password`, and the
/// DSN itself.
fn secrets_of(dsn: &str) -> Vec<String> {
    let mut out = vec![dsn.to_owned()];
    if let Some((_, rest)) = dsn.split_once("://")
        && let Some((userinfo, _)) = rest.rsplit_once('@')
    {
        out.push(userinfo.to_owned());
        if let Some((_, pass)) = userinfo.split_once(':')
            && !pass.is_empty()
        {
            out.push(pass.to_owned());
            let decoded = percent_decode(pass);
            if decoded != pass {
                out.push(decoded);
            }
        }
    }
    // Longest first so that `user:password` is replaced before `password`.
    out.sort_by_key(|s| std::cmp::Reverse(s.len()));
    out.retain(|s| !s.is_empty());
    out
}

fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && i + 2 < bytes.len()
            && let (Some(h), Some(l)) = (hex_val(bytes[i + 1]), hex_val(bytes[i + 2]))
        {
            out.push(h * 16 + l);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn hex_val(b: u8) -> Option<u8> {
    (b as char).to_digit(16).and_then(|d| u8::try_from(d).ok())
}

/// Replaces every secret with `<redacted>` and cuts the message to [`MAX_MESSAGE_CHARS`].
pub fn redact(message: &str, secrets: &[String]) -> String {
    let mut m = message.to_owned();
    for s in secrets {
        if !s.is_empty() {
            m = m.replace(s.as_str(), "<redacted>");
        }
    }
    if m.chars().count() > MAX_MESSAGE_CHARS {
        m = m.chars().take(MAX_MESSAGE_CHARS).collect();
    }
    m
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
        let e = parse_dsn("mysql://user:s3cr%21t@host/db?bogus=s3cr%21t").unwrap_err();
        assert!(!e.contains("s3cr"), "{e}");
        let secrets = secrets_of("mysql://user:hunter2@h/db");
        assert_eq!(
            redact("Access denied for user:hunter2 hunter2", &secrets),
            "Access denied for <redacted> <redacted>"
        );
    }
}
