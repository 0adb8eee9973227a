//! Tenants: bearer tokens mapped to namespaces, compared in constant time.
//!
//! Tokens come from a file (lines `token namespace`; blank lines and `#` comments ignored) or
//! from an environment variable (`token=namespace,token=namespace`), never from the YAML itself.
//! Only SHA-256 digests of the tokens are kept in memory. A presented token is hashed and compared
//! against **every** known digest with [`subtle::ConstantTimeEq`], without an early exit, so the
//! time taken does not depend on which token (if any) matched.

use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};

use onestep_core::request::validate_namespace;

/// Tokens shorter than this are accepted but reported by [`TokenTable::short_tokens`], so that
/// `onestep serve` can warn about guessable tokens.
pub const MIN_TOKEN_CHARS: usize = 16;

/// How requests are mapped to namespaces.
#[derive(Debug, Clone)]
pub enum Tenancy {
    /// No authentication: every request uses this namespace (local use only).
    Single(String),
    /// Bearer tokens, each bound to one namespace.
    Tokens(TokenTable),
}

/// Digests of the known tokens and the namespace of each.
#[derive(Clone, Default)]
pub struct TokenTable {
    entries: Vec<([u8; 32], usize)>,
    namespaces: Vec<String>,
    short: usize,
}

impl std::fmt::Debug for TokenTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenTable")
            .field("tokens", &self.entries.len())
            .field("namespaces", &self.namespaces)
            .finish()
    }
}

fn digest(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl TokenTable {
    /// Builds a table from `(token, namespace)` pairs. Errors (never echoing a token): an empty
    /// token or one containing whitespace, an invalid namespace, the same token twice, or no
    /// token at all.
    pub fn from_pairs<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, String> {
        let mut table = TokenTable::default();
        for (n, (token, namespace)) in pairs.into_iter().enumerate() {
            let entry = n + 1;
            if token.is_empty() || token.chars().any(char::is_whitespace) {
                return Err(format!(
                    "token #{entry} must be non-empty and contain no whitespace"
                ));
            }
            if token.chars().count() < MIN_TOKEN_CHARS {
                table.short += 1;
            }
            let namespace =
                validate_namespace(namespace).map_err(|e| format!("token #{entry}: {e}"))?;
            let d = digest(token);
            if table.entries.iter().any(|(known, _)| *known == d) {
                return Err(format!("token #{entry} is listed twice"));
            }
            let idx = match table.namespaces.iter().position(|ns| *ns == namespace) {
                Some(i) => i,
                None => {
                    table.namespaces.push(namespace);
                    table.namespaces.len() - 1
                }
            };
            table.entries.push((d, idx));
        }
        if table.entries.is_empty() {
            return Err("no tokens configured".into());
        }
        Ok(table)
    }

    /// Parses a tokens file: one `token namespace` per line; blank lines and lines starting with
    /// `#` are skipped. Errors name the line number, never the token.
    pub fn parse_file(text: &str) -> Result<Self, String> {
        let mut pairs = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut parts = line.split_whitespace();
            match (parts.next(), parts.next(), parts.next()) {
                (Some(t), Some(ns), None) => pairs.push((t, ns)),
                _ => {
                    return Err(format!(
                        "tokens file line {}: expected `token namespace`",
                        i + 1
                    ));
                }
            }
        }
        Self::from_pairs(pairs)
    }

    /// Parses an environment value `token=namespace,token=namespace` (spaces around items are
    /// ignored).
    pub fn parse_env(text: &str) -> Result<Self, String> {
        let mut pairs = Vec::new();
        for (i, item) in text.split(',').enumerate() {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            match item.split_once('=') {
                Some((t, ns)) => pairs.push((t.trim(), ns.trim())),
                None => {
                    return Err(format!(
                        "tokens item #{}: expected `token=namespace`",
                        i + 1
                    ));
                }
            }
        }
        Self::from_pairs(pairs)
    }

    /// The distinct namespaces, in first-seen order.
    pub fn namespaces(&self) -> &[String] {
        &self.namespaces
    }

    /// Number of tokens shorter than [`MIN_TOKEN_CHARS`].
    pub fn short_tokens(&self) -> usize {
        self.short
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when the table holds no token (never for a table built by the constructors).
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The namespace index of `token`, comparing against every entry in constant time.
    pub fn lookup(&self, token: &str) -> Option<usize> {
        let presented = digest(token);
        let mut found = subtle::Choice::from(0u8);
        let mut index = 0u64;
        for (known, idx) in &self.entries {
            let hit = known.ct_eq(&presented);
            index = u64::conditional_select(&index, &(*idx as u64), hit);
            found |= hit;
        }
        bool::from(found).then_some(index as usize)
    }
}

/// Extracts the token of an `Authorization: Bearer <token>` header value.
pub fn bearer_token(header: &str) -> Option<&str> {
    let (scheme, token) = header.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "tok-aaaaaaaaaaaaaaaa";
    const B: &str = "tok-bbbbbbbbbbbbbbbb";

    #[test]
    fn parses_file_and_env_forms() {
        let f =
            TokenTable::parse_file(&format!("# comment\n\n{A} tenant-a\n{B}  tenant-b\n")).unwrap();
        assert_eq!(f.len(), 2);
        assert_eq!(f.namespaces()[f.lookup(A).unwrap()], "tenant-a");
        assert_eq!(f.namespaces()[f.lookup(B).unwrap()], "tenant-b");
        assert_eq!(f.lookup("tok-cccccccccccccccc"), None);
        let e = TokenTable::parse_env(&format!("{A}=tenant-a, {B}=tenant-a")).unwrap();
        assert_eq!(e.namespaces(), ["tenant-a"]);
        assert_eq!(e.lookup(B), Some(0));
    }

    #[test]
    fn rejects_bad_tables_without_echoing_tokens() {
        for (text, needle) in [
            (&format!("{A} ns extra") as &str, "line 1"),
            (&format!("{A} ns\n{A} other"), "twice"),
            ("# only comments", "no tokens"),
        ] {
            let err = TokenTable::parse_file(text).unwrap_err();
            assert!(err.contains(needle), "{err}");
            assert!(!err.contains(A));
        }
        assert!(TokenTable::parse_env("no-equals-sign-here-at-all").is_err());
        let err = TokenTable::from_pairs([("a b", "ns")]).unwrap_err();
        assert!(err.contains("whitespace"), "{err}");
        assert_eq!(TokenTable::parse_env("short=ns").unwrap().short_tokens(), 1);
    }

    #[test]
    fn bearer_header_parsing() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer   abc "), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer "), None);
    }
}
