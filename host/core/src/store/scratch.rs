//! Throw-away databases for tests and benchmarks (each backend's `ScratchDatabase`): the random
//! name every backend gives one, and how a scratch database shows in logs. Creating and dropping
//! the database is the backend's (SQL).

use crate::error::ExecutionError;

/// `<prefix><12 random hex digits>`: the name of a new scratch database. A `prefix` that is
/// empty or has a byte `allowed` refuses is an invalid argument (the scratch database prefix
/// must be `rule`).
pub fn scratch_name(
    prefix: &str,
    allowed: impl Fn(u8) -> bool,
    rule: &str,
) -> Result<String, ExecutionError> {
    if prefix.is_empty() || !prefix.bytes().all(allowed) {
        return Err(ExecutionError::invalid(format!(
            "the scratch database prefix must be {rule}"
        )));
    }
    let random = uuid::Uuid::new_v4().simple().to_string();
    Ok(format!("{prefix}{}", &random[..12]))
}

/// The name of a scratch database and the DSN that names it. The DSN carries the credentials of
/// the server URL: `Debug` shows the name only.
#[derive(Clone, PartialEq, Eq)]
pub struct ScratchTarget {
    /// The database's name.
    pub name: String,
    /// A DSN naming the database (never log it).
    pub dsn: String,
}

impl std::fmt::Debug for ScratchTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScratchDatabase")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_the_prefix_and_12_hex_digits() {
        let name = scratch_name("bench_", |b| b.is_ascii_lowercase() || b == b'_', "x");
        let name = name.unwrap_or_default();
        assert_eq!(name.len(), 18, "{name}");
        assert!(name.starts_with("bench_"));
        assert!(name[6..].bytes().all(|b| b.is_ascii_hexdigit()));
        for bad in ["", "bad`name"] {
            let e = scratch_name(bad, |b| b.is_ascii_alphanumeric(), "letters");
            assert!(
                matches!(&e, Err(ExecutionError::InvalidArgument(m))
                    if m == "the scratch database prefix must be letters"),
                "{e:?}"
            );
        }
        let shown = format!(
            "{:?}",
            ScratchTarget {
                name: "db1".into(),
                dsn: "mysql://u:hunter2@h/db1".into()
            }
        );
        assert_eq!(shown, "ScratchDatabase { name: \"db1\", .. }");
    }
}
