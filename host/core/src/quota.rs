//! Quotas at submit (docs/semantics.md#quotas): how many executions one namespace, and one
//! fairness key inside it, may have waiting (queued or retrying). The API's `api.quotas`
//! ([`QuotaSettings`]) resolves to one [`SubmitQuota`] per namespace, which the
//! [`ExecutionClient`](crate::client::ExecutionClient) hands with each submission to the
//! store; the store enforces it inside the submit transaction
//! ([`crate::store::quota`]). A refusal is [`ExecutionError::QuotaExceeded`](crate::ExecutionError::QuotaExceeded).

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

/// The default `api.quotas.retry_after_s`.
pub const DEFAULT_RETRY_AFTER_S: u32 = 5;
/// The largest `api.quotas.retry_after_s` (an hour).
pub const MAX_RETRY_AFTER_S: u32 = 3600;

/// The limits one namespace's new submissions are held to; `None` is no limit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SubmitQuota {
    /// Most executions of the namespace waiting to run (queued or retrying).
    pub max_queued: Option<u32>,
    /// Most executions of one fairness key of the namespace waiting to run (the key is the
    /// submission's `fairness_key`, else the namespace).
    pub max_queued_per_key: Option<u32>,
}

impl SubmitQuota {
    /// Whether any limit is set.
    pub fn is_limited(&self) -> bool {
        self.max_queued.is_some() || self.max_queued_per_key.is_some()
    }
}

/// `api.quotas` (docs/configuration.md#api-quotas): the limits of every namespace, per-namespace
/// overrides, and the `Retry-After` of a refusal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct QuotaSettings {
    /// The limits of a namespace without an override.
    pub default: SubmitQuota,
    /// Seconds a refused client is told to wait (`Retry-After`), 1 to [`MAX_RETRY_AFTER_S`].
    pub retry_after_s: u32,
    /// Per-namespace overrides: a limit given here replaces the default's; one not given
    /// keeps the default's.
    pub namespaces: BTreeMap<String, SubmitQuota>,
}

impl Default for QuotaSettings {
    fn default() -> Self {
        QuotaSettings {
            default: SubmitQuota::default(),
            retry_after_s: DEFAULT_RETRY_AFTER_S,
            namespaces: BTreeMap::new(),
        }
    }
}

impl QuotaSettings {
    /// The quota of `namespace`: its override's limits, else the default's; `None` when it
    /// has no limit at all.
    pub fn for_namespace(&self, namespace: &str) -> Option<SubmitQuota> {
        let own = self.namespaces.get(namespace).copied().unwrap_or_default();
        let q = SubmitQuota {
            max_queued: own.max_queued.or(self.default.max_queued),
            max_queued_per_key: own.max_queued_per_key.or(self.default.max_queued_per_key),
        };
        q.is_limited().then_some(q)
    }
}

/// Which quota refused a submission.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum QuotaKind {
    /// `max_queued`: the namespace's waiting executions.
    MaxQueued,
    /// `max_queued_per_key`: one fairness key's waiting executions.
    MaxQueuedPerKey,
}

impl QuotaKind {
    /// The setting's name: `max_queued` or `max_queued_per_key`.
    pub fn as_str(self) -> &'static str {
        match self {
            QuotaKind::MaxQueued => "max_queued",
            QuotaKind::MaxQueuedPerKey => "max_queued_per_key",
        }
    }
}

impl fmt::Display for QuotaKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A submission refused by a quota: which quota, whose, and its limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaRefusal {
    /// The quota.
    pub quota: QuotaKind,
    /// The namespace.
    pub namespace: String,
    /// The fairness key, for [`QuotaKind::MaxQueuedPerKey`].
    pub key: Option<String>,
    /// The limit that was reached.
    pub limit: u32,
}

impl fmt::Display for QuotaRefusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.key {
            Some(key) => write!(
                f,
                "quota exceeded: fairness key {key:?} of namespace {:?} has {} executions waiting \
                 (queued or retrying), its max_queued_per_key; try again later",
                self.namespace, self.limit
            ),
            None => write!(
                f,
                "quota exceeded: namespace {:?} has {} executions waiting (queued or retrying), \
                 its max_queued; try again later",
                self.namespace, self.limit
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(a: Option<u32>, b: Option<u32>) -> SubmitQuota {
        SubmitQuota {
            max_queued: a,
            max_queued_per_key: b,
        }
    }

    #[test]
    fn an_override_replaces_only_the_limits_it_names() {
        let mut s = QuotaSettings {
            default: q(Some(10), Some(3)),
            ..QuotaSettings::default()
        };
        s.namespaces.insert("acme".into(), q(Some(50), None));
        assert_eq!(s.for_namespace("acme"), Some(q(Some(50), Some(3))));
        assert_eq!(s.for_namespace("other"), Some(q(Some(10), Some(3))));
    }

    #[test]
    fn a_namespace_without_any_limit_has_no_quota() {
        let mut s = QuotaSettings::default();
        s.namespaces.insert("acme".into(), q(None, Some(2)));
        assert_eq!(s.for_namespace("other"), None);
        assert_eq!(s.for_namespace("acme"), Some(q(None, Some(2))));
    }

    #[test]
    fn the_message_names_the_quota_the_scope_and_the_limit() {
        let r = QuotaRefusal {
            quota: QuotaKind::MaxQueued,
            namespace: "acme".into(),
            key: None,
            limit: 10000,
        };
        assert_eq!(
            r.to_string(),
            "quota exceeded: namespace \"acme\" has 10000 executions waiting (queued or \
             retrying), its max_queued; try again later"
        );
        let r = QuotaRefusal {
            quota: QuotaKind::MaxQueuedPerKey,
            namespace: "acme".into(),
            key: Some("t1".into()),
            limit: 3,
        };
        assert!(
            r.to_string()
                .contains("fairness key \"t1\" of namespace \"acme\" has 3")
        );
        assert!(r.to_string().contains("max_queued_per_key"));
    }
}
