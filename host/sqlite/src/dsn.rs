//! DSN parsing (docs/sqlite.md#dsn): `sqlite://PATH` names a database file — relative
//! (`sqlite://./dir/x.db`, `sqlite://dir/x.db`, resolved against the working directory) or
//! absolute (`sqlite:///abs/x.db`). The one query parameter is `synchronous=normal|full`; any
//! other is refused. A SQLite DSN carries no secret.

use std::path::PathBuf;

use onestep_core::store::{SetupError, SplitDsn, percent_decode, split_dsn};

/// The query parameters a DSN may carry.
pub const ALLOWED_PARAMS: &[&str] = &["synchronous"];

/// SQLite's `PRAGMA synchronous` in WAL mode (docs/sqlite.md#durability).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// `NORMAL` (the default): a process crash loses no committed transaction; an OS crash or
    /// power loss may lose the last ones committed before it.
    #[default]
    Normal,
    /// `FULL`: every COMMIT waits for the WAL to reach the disk.
    Full,
}

impl Synchronous {
    /// The pragma's value.
    pub fn pragma(self) -> &'static str {
        match self {
            Synchronous::Normal => "NORMAL",
            Synchronous::Full => "FULL",
        }
    }
}

/// A parsed DSN.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedDsn {
    /// The database file, as written (relative to the working directory when not absolute).
    pub path: PathBuf,
    /// The durability setting.
    pub synchronous: Synchronous,
}

/// Parses `dsn`.
pub fn parse_dsn(dsn: &str) -> Result<ParsedDsn, SetupError> {
    let SplitDsn { rest, .. } = split_dsn(dsn, "sqlite://", "sqlite://", |s| s == "sqlite")?;
    let (path, query) = match rest.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (rest, None),
    };
    let path = percent_decode(path);
    if path.is_empty() {
        return Err(
            "the dsn must name a database file (sqlite://./dir/x.db, sqlite:///abs/x.db)".into(),
        );
    }
    if path == ":memory:" || path.starts_with("file:") {
        return Err(
            "the dsn must name a database file: in-memory and URI databases are not supported \
             (workers and clients share one file)"
                .into(),
        );
    }
    let mut synchronous = Synchronous::default();
    for (k, v) in url::form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        match k.as_ref() {
            "synchronous" => {
                synchronous = match v.to_ascii_lowercase().as_str() {
                    "normal" => Synchronous::Normal,
                    "full" => Synchronous::Full,
                    other => {
                        return Err(SetupError(format!(
                            "unsupported synchronous '{other}' (allowed: normal, full)"
                        )));
                    }
                }
            }
            other => {
                return Err(SetupError(format!(
                    "unsupported dsn parameter '{other}' (allowed: {})",
                    ALLOWED_PARAMS.join(", ")
                )));
            }
        }
    }
    Ok(ParsedDsn {
        path: PathBuf::from(path),
        synchronous,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_and_absolute_paths() {
        for (dsn, path) in [
            ("sqlite://./dir/x.db", "./dir/x.db"),
            ("sqlite://dir/x.db", "dir/x.db"),
            ("sqlite:///abs/x.db", "/abs/x.db"),
            ("sqlite:///abs/a%20b.db", "/abs/a b.db"),
        ] {
            let p = parse_dsn(dsn).unwrap();
            assert_eq!(p.path, PathBuf::from(path), "{dsn}");
            assert_eq!(p.synchronous, Synchronous::Normal);
        }
        let p = parse_dsn("sqlite://x.db?synchronous=full").unwrap();
        assert_eq!(p.synchronous, Synchronous::Full);
    }

    #[test]
    fn bad_dsns_are_refused_clearly() {
        for (dsn, needle) in [
            ("sqlite://", "must name a database file"),
            ("sqlite://:memory:", "in-memory"),
            ("sqlite://x.db?foo=1", "unsupported dsn parameter 'foo'"),
            (
                "sqlite://x.db?synchronous=off",
                "unsupported synchronous 'off'",
            ),
            ("mysql://host/db", "unsupported dsn scheme 'mysql'"),
        ] {
            let e = parse_dsn(dsn).unwrap_err().to_string();
            assert!(e.contains(needle), "{dsn}: {e}");
        }
    }
}
