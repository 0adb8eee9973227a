//! Tenants: bearer tokens mapped to namespaces, compared in constant time.
//!
//! Tokens come from a file (lines `token namespace [role]`; blank lines and `#` comments ignored)
//! or from an environment variable (`token=namespace[:role],…`), never from the YAML itself.
//! A token's [`Role`] says what it may do (docs/http-api.md#roles).
//! Only SHA-256 digests of the tokens are kept in memory. A presented token is hashed and compared
//! against **every** known digest with [`subtle::ConstantTimeEq`], without an early exit, so the
//! time taken does not depend on which token (if any) matched.

use sha2::{Digest, Sha256};
use subtle::{ConditionallySelectable, ConstantTimeEq};

use onestep_core::ExecutionError;
use onestep_core::request::validate_namespace;

/// Tokens shorter than this are accepted but reported by [`TokenTable::short_tokens`], so that
/// `onestep serve` can warn about guessable tokens.
pub const MIN_TOKEN_CHARS: usize = 16;

/// What a token may do (docs/http-api.md#roles). Every role reads its namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Browse only: list, get, result.
    Read,
    /// Read plus submit.
    Submit,
    /// No role given: read, submit and cancel (what every token could do before roles existed).
    Default,
    /// Everything on executions: read, submit, cancel, retry and the bulk operations. Reads
    /// deployments; does not deploy.
    Operate,
    /// Read plus deploy: upload components, deploy, activate (roll back) and deactivate the
    /// namespace's task deployments (docs/deployments.md). Does not submit or cancel.
    Deploy,
}

impl Role {
    /// Parses `read`, `submit`, `operate` or `deploy`.
    pub fn parse(text: &str) -> Option<Role> {
        match text {
            "read" => Some(Role::Read),
            "submit" => Some(Role::Submit),
            "operate" => Some(Role::Operate),
            "deploy" => Some(Role::Deploy),
            _ => None,
        }
    }

    /// The role's name as the API reports it (`read`, `submit`, `default`, `operate`,
    /// `deploy`).
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Submit => "submit",
            Role::Default => "default",
            Role::Operate => "operate",
            Role::Deploy => "deploy",
        }
    }

    /// May submit executions.
    pub fn can_submit(self) -> bool {
        matches!(self, Role::Submit | Role::Default | Role::Operate)
    }

    /// May cancel one execution.
    pub fn can_cancel(self) -> bool {
        matches!(self, Role::Default | Role::Operate)
    }

    /// May retry and run the bulk operations.
    pub fn can_operate(self) -> bool {
        matches!(self, Role::Operate)
    }

    /// May upload components and deploy, activate and deactivate deployments of its namespace
    /// (`deploy` only: deploying is a separate duty, `operate` does not imply it).
    pub fn can_deploy(self) -> bool {
        matches!(self, Role::Deploy)
    }
}

/// Why a token table cannot be built ([`TokenTable`]'s constructors). The texts name the entry
/// (its number or line), never the token.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TokenError {
    /// An empty token or one containing whitespace (entry numbers count from 1).
    #[error("token #{0} must be non-empty and contain no whitespace")]
    BadToken(usize),
    /// A token's namespace is not a valid namespace.
    #[error("token #{entry}: {source}")]
    Namespace {
        /// The entry's number (from 1).
        entry: usize,
        /// Why the namespace is refused.
        source: ExecutionError,
    },
    /// The same token twice.
    #[error("token #{0} is listed twice")]
    Duplicate(usize),
    /// No token at all.
    #[error("no tokens configured")]
    NoTokens,
    /// A role other than read, submit, operate or deploy (`entry` names the file line).
    #[error("{entry}: unknown role {role:?} (expected read, submit, operate or deploy)")]
    UnknownRole {
        /// Where: `tokens file line <n>`.
        entry: String,
        /// The role as written.
        role: String,
    },
    /// A tokens-file line that is not `token namespace [role]` (line numbers from 1).
    #[error("tokens file line {0}: expected `token namespace [role]`")]
    FileLine(usize),
    /// An environment item that is not `token=namespace[:role]` (item numbers from 1).
    #[error("tokens item #{0}: expected `token=namespace[:role]`")]
    EnvItem(usize),
}

fn parse_role(entry: &str, text: &str) -> Result<Role, TokenError> {
    Role::parse(text).ok_or_else(|| TokenError::UnknownRole {
        entry: entry.to_owned(),
        role: text.to_owned(),
    })
}

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
    entries: Vec<([u8; 32], usize, Role)>,
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
    /// Builds a table from `(token, namespace)` pairs, every token with [`Role::Default`].
    pub fn from_pairs<'a>(
        pairs: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Result<Self, TokenError> {
        Self::from_entries(pairs.into_iter().map(|(t, ns)| (t, ns, Role::Default)))
    }

    /// Builds a table from `(token, namespace, role)` entries. Errors (never echoing a token):
    /// an empty token or one containing whitespace, an invalid namespace, the same token twice,
    /// or no token at all.
    pub fn from_entries<'a>(
        entries: impl IntoIterator<Item = (&'a str, &'a str, Role)>,
    ) -> Result<Self, TokenError> {
        let mut table = TokenTable::default();
        for (n, (token, namespace, role)) in entries.into_iter().enumerate() {
            let entry = n + 1;
            if token.is_empty() || token.chars().any(char::is_whitespace) {
                return Err(TokenError::BadToken(entry));
            }
            if token.chars().count() < MIN_TOKEN_CHARS {
                table.short += 1;
            }
            let namespace = validate_namespace(namespace)
                .map_err(|source| TokenError::Namespace { entry, source })?;
            let d = digest(token);
            if table.entries.iter().any(|(known, _, _)| *known == d) {
                return Err(TokenError::Duplicate(entry));
            }
            let idx = match table.namespaces.iter().position(|ns| *ns == namespace) {
                Some(i) => i,
                None => {
                    table.namespaces.push(namespace);
                    table.namespaces.len() - 1
                }
            };
            table.entries.push((d, idx, role));
        }
        if table.entries.is_empty() {
            return Err(TokenError::NoTokens);
        }
        Ok(table)
    }

    /// Parses a tokens file: one `token namespace [role]` per line (role `read`, `submit`,
    /// `operate` or `deploy`; none means [`Role::Default`]); blank lines and lines starting with `#` are
    /// skipped. Errors name the line number, never the token.
    pub fn parse_file(text: &str) -> Result<Self, TokenError> {
        let mut entries = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let entry = format!("tokens file line {}", i + 1);
            let mut parts = line.split_whitespace();
            match (parts.next(), parts.next(), parts.next(), parts.next()) {
                (Some(t), Some(ns), None, None) => entries.push((t, ns, Role::Default)),
                (Some(t), Some(ns), Some(role), None) => {
                    entries.push((t, ns, parse_role(&entry, role)?));
                }
                _ => {
                    return Err(TokenError::FileLine(i + 1));
                }
            }
        }
        Self::from_entries(entries)
    }

    /// Parses an environment value `token=namespace[:role],token=namespace[:role]` (spaces
    /// around items are ignored; a trailing `:read`, `:submit`, `:operate` or `:deploy` is the role, any
    /// other text after the last `:` belongs to the namespace).
    pub fn parse_env(text: &str) -> Result<Self, TokenError> {
        let mut entries = Vec::new();
        for (i, item) in text.split(',').enumerate() {
            let item = item.trim();
            if item.is_empty() {
                continue;
            }
            match item.split_once('=') {
                Some((t, rest)) => {
                    let rest = rest.trim();
                    let (ns, role) = rest
                        .rsplit_once(':')
                        .and_then(|(ns, r)| Role::parse(r.trim()).map(|role| (ns.trim(), role)))
                        .unwrap_or((rest, Role::Default));
                    entries.push((t.trim(), ns, role));
                }
                None => {
                    return Err(TokenError::EnvItem(i + 1));
                }
            }
        }
        Self::from_entries(entries)
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
        self.lookup_with_role(token).map(|(i, _)| i)
    }

    /// The namespace index and role of `token`, comparing against every entry in constant time.
    pub fn lookup_with_role(&self, token: &str) -> Option<(usize, Role)> {
        let presented = digest(token);
        let mut found = subtle::Choice::from(0u8);
        let mut index = 0u64;
        let mut role = 0u8;
        for (known, idx, r) in &self.entries {
            let hit = known.ct_eq(&presented);
            index = u64::conditional_select(&index, &(*idx as u64), hit);
            role = u8::conditional_select(&role, &role_code(*r), hit);
            found |= hit;
        }
        bool::from(found).then_some((index as usize, role_from_code(role)))
    }
}

fn role_code(role: Role) -> u8 {
    match role {
        Role::Read => 0,
        Role::Submit => 1,
        Role::Default => 2,
        Role::Operate => 3,
        Role::Deploy => 4,
    }
}

fn role_from_code(code: u8) -> Role {
    match code {
        0 => Role::Read,
        1 => Role::Submit,
        3 => Role::Operate,
        4 => Role::Deploy,
        _ => Role::Default,
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
            let err = TokenTable::parse_file(text).unwrap_err().to_string();
            assert!(err.contains(needle), "{err}");
            assert!(!err.contains(A));
        }
        assert!(TokenTable::parse_env("no-equals-sign-here-at-all").is_err());
        let err = TokenTable::from_pairs([("a b", "ns")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("whitespace"), "{err}");
        assert_eq!(TokenTable::parse_env("short=ns").unwrap().short_tokens(), 1);
    }

    #[test]
    fn roles_in_both_forms() {
        let f = TokenTable::parse_file(&format!("{A} ns read\n{B} ns\n")).unwrap();
        assert_eq!(f.lookup_with_role(A), Some((0, Role::Read)));
        assert_eq!(f.lookup_with_role(B), Some((0, Role::Default)));
        let err = TokenTable::parse_file(&format!("{A} ns admin"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 1") && err.contains("admin"), "{err}");
        assert!(!err.contains(A));
        let e = TokenTable::parse_env(&format!("{A}=ns-a:operate,{B}=ns:b")).unwrap();
        assert_eq!(e.lookup_with_role(A), Some((0, Role::Operate)));
        // An unknown suffix is part of the namespace.
        assert_eq!(e.namespaces()[e.lookup(B).unwrap()], "ns:b");
        assert!(Role::Operate.can_operate() && Role::Operate.can_cancel());
        assert!(Role::Default.can_cancel() && !Role::Default.can_operate());
        assert!(Role::Submit.can_submit() && !Role::Submit.can_cancel());
        assert!(!Role::Read.can_submit() && !Role::Read.can_cancel());
        let d = TokenTable::parse_env(&format!("{A}=ns-a:deploy")).unwrap();
        assert_eq!(d.lookup_with_role(A), Some((0, Role::Deploy)));
        assert!(Role::Deploy.can_deploy());
        assert!(!Role::Deploy.can_submit() && !Role::Deploy.can_cancel());
        assert!(!Role::Deploy.can_operate());
        for r in [Role::Read, Role::Submit, Role::Default, Role::Operate] {
            assert!(!r.can_deploy(), "{r:?}");
        }
    }

    #[test]
    fn bearer_header_parsing() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer   abc "), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer "), None);
    }
}
