//! Retry policies (docs/semantics.md#retry-policies): what to do after a failed attempt.

use rand::Rng;
use serde::{Deserialize, Serialize};

use crate::error::ExecutionError;

/// Why an attempt failed, for policy selection (docs/semantics.md#error-object `kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// The handler (or something around it) failed.
    Error,
    /// The handler exceeded `timeout_s`.
    Timeout,
    /// The run was cancelled (never consulted for tracked executions; kept for completeness).
    Cancelled,
}

impl FailureKind {
    /// The error object's `kind` string.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureKind::Error => "error",
            FailureKind::Timeout => "timeout",
            FailureKind::Cancelled => "cancelled",
        }
    }
}

/// Jitter applied to exponential backoff. Serialises as the YAML spells it (`none`, `full`,
/// `equal`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Jitter {
    /// Exactly the base delay.
    #[default]
    None,
    /// Uniform in `[0, base]`.
    Full,
    /// Uniform in `[max(0, base/2), min(max_delay_s, 1.5 × base)]`.
    Equal,
}

/// A retry policy (docs/semantics.md#retry-policies). `max_attempts` counts every run, the first included.
///
/// Serialises with the YAML's names (`{"type": "exponential_backoff", "max_attempts": 3, …}`,
/// absent options as `null`): `onestep check --json` prints it that way.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RetryPolicy {
    /// Always fail (`no_retry` / `none`; the default).
    #[default]
    NoRetry,
    /// Retry while `n + 1 < max_attempts`, after `delay_s` (default 0).
    MaxAttempts {
        /// Total runs allowed (≥ 1).
        max_attempts: u32,
        /// Fixed delay in seconds.
        delay_s: Option<f64>,
    },
    /// Retry while `n + 1 < max_attempts` after `min(max_delay_s, min_delay_s × multiplier^n)`.
    ExponentialBackoff {
        /// Total runs allowed (≥ 1; default 3).
        max_attempts: u32,
        /// First delay in seconds (≥ 0; default 1.0).
        min_delay_s: f64,
        /// Largest delay in seconds (≥ `min_delay_s`; default 60.0).
        max_delay_s: f64,
        /// Growth factor (> 0; default 2.0).
        multiplier: f64,
        /// Jitter mode (default none).
        jitter: Jitter,
    },
    /// A sub-policy per failure kind, with `default` as the fallback; no match → fail.
    ByFailureKind {
        /// Fallback policy.
        default: Option<Box<RetryPolicy>>,
        /// Policy for kind `error`.
        error: Option<Box<RetryPolicy>>,
        /// Policy for kind `timeout`.
        timeout: Option<Box<RetryPolicy>>,
        /// Policy for kind `cancelled`.
        cancelled: Option<Box<RetryPolicy>>,
    },
}

/// The outcome of consulting a policy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RetryDecision {
    /// Complete as `retrying`, claimable again after `delay_s` seconds.
    Retry {
        /// Delay in seconds.
        delay_s: f64,
    },
    /// Complete as `failed`.
    Fail,
}

impl RetryPolicy {
    /// `exponential_backoff` with the documented defaults.
    pub fn exponential_default() -> Self {
        RetryPolicy::ExponentialBackoff {
            max_attempts: 3,
            min_delay_s: 1.0,
            max_delay_s: 60.0,
            multiplier: 2.0,
            jitter: Jitter::None,
        }
    }

    /// A short name for summaries: `NoRetry`, `MaxAttempts`, `ExponentialBackoff`, `ByFailureKind`.
    pub fn name(&self) -> &'static str {
        match self {
            RetryPolicy::NoRetry => "NoRetry",
            RetryPolicy::MaxAttempts { .. } => "MaxAttempts",
            RetryPolicy::ExponentialBackoff { .. } => "ExponentialBackoff",
            RetryPolicy::ByFailureKind { .. } => "ByFailureKind",
        }
    }

    /// Checks the constructor rules of docs/semantics.md#retry-policies (`max_attempts must be >= 1`, …).
    pub fn validate(&self) -> Result<(), ExecutionError> {
        let finite = |name: &str, v: f64| {
            if v.is_finite() {
                Ok(())
            } else {
                Err(ExecutionError::invalid(format!(
                    "{name} must be a finite number"
                )))
            }
        };
        match self {
            RetryPolicy::NoRetry => Ok(()),
            RetryPolicy::MaxAttempts {
                max_attempts,
                delay_s,
            } => {
                if *max_attempts < 1 {
                    return Err(ExecutionError::invalid("max_attempts must be >= 1"));
                }
                if let Some(d) = delay_s {
                    finite("delay_s", *d)?;
                    if *d < 0.0 {
                        return Err(ExecutionError::invalid("delay_s must be >= 0"));
                    }
                }
                Ok(())
            }
            RetryPolicy::ExponentialBackoff {
                max_attempts,
                min_delay_s,
                max_delay_s,
                multiplier,
                ..
            } => {
                if *max_attempts < 1 {
                    return Err(ExecutionError::invalid("max_attempts must be >= 1"));
                }
                finite("min_delay_s", *min_delay_s)?;
                finite("max_delay_s", *max_delay_s)?;
                finite("multiplier", *multiplier)?;
                if *min_delay_s < 0.0 {
                    return Err(ExecutionError::invalid("min_delay_s must be >= 0"));
                }
                if max_delay_s < min_delay_s {
                    return Err(ExecutionError::invalid(
                        "max_delay_s must be >= min_delay_s",
                    ));
                }
                if *multiplier <= 0.0 {
                    return Err(ExecutionError::invalid("multiplier must be > 0"));
                }
                Ok(())
            }
            RetryPolicy::ByFailureKind {
                default,
                error,
                timeout,
                cancelled,
            } => {
                let subs = [default, error, timeout, cancelled];
                if subs.iter().all(|s| s.is_none()) {
                    return Err(ExecutionError::invalid(
                        "by_failure_kind needs at least one of default, error, timeout, cancelled",
                    ));
                }
                for s in subs.into_iter().flatten() {
                    s.validate()?;
                }
                Ok(())
            }
        }
    }

    /// Decides after a failure of `kind` when `previous_attempts` (= `n`, the execution's
    /// attempts minus one) runs came before this one.
    pub fn decide<R: Rng + ?Sized>(
        &self,
        kind: FailureKind,
        previous_attempts: u32,
        rng: &mut R,
    ) -> RetryDecision {
        let n = previous_attempts;
        match self {
            RetryPolicy::NoRetry => RetryDecision::Fail,
            RetryPolicy::MaxAttempts {
                max_attempts,
                delay_s,
            } => {
                if n.saturating_add(1) < *max_attempts {
                    RetryDecision::Retry {
                        delay_s: delay_s.unwrap_or(0.0),
                    }
                } else {
                    RetryDecision::Fail
                }
            }
            RetryPolicy::ExponentialBackoff {
                max_attempts,
                min_delay_s,
                max_delay_s,
                multiplier,
                jitter,
            } => {
                if n.saturating_add(1) >= *max_attempts {
                    return RetryDecision::Fail;
                }
                let exp = i32::try_from(n).unwrap_or(i32::MAX);
                let grown = min_delay_s * multiplier.powi(exp);
                let base = if grown.is_finite() {
                    grown.min(*max_delay_s)
                } else {
                    *max_delay_s
                };
                let delay_s = match jitter {
                    Jitter::None => base,
                    Jitter::Full => uniform(rng, 0.0, base),
                    Jitter::Equal => {
                        uniform(rng, (base / 2.0).max(0.0), max_delay_s.min(1.5 * base))
                    }
                };
                RetryDecision::Retry { delay_s }
            }
            RetryPolicy::ByFailureKind {
                default,
                error,
                timeout,
                cancelled,
            } => {
                let specific = match kind {
                    FailureKind::Error => error,
                    FailureKind::Timeout => timeout,
                    FailureKind::Cancelled => cancelled,
                };
                match specific.as_ref().or(default.as_ref()) {
                    Some(p) => p.decide(kind, n, rng),
                    None => RetryDecision::Fail,
                }
            }
        }
    }
}

fn uniform<R: Rng + ?Sized>(rng: &mut R, lo: f64, hi: f64) -> f64 {
    if hi <= lo {
        lo
    } else {
        rng.random_range(lo..=hi)
    }
}

/// The serialised form read back (stored deployments, docs/deployment-policy.md): a plain
/// struct rather than serde's internally tagged enum, which buffers values and so cannot read
/// numbers under `serde_json`'s `arbitrary_precision`. A field of another type than `type`'s,
/// when not `null`, is refused, as is an unknown one.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RetryRepr {
    #[serde(rename = "type")]
    kind: String,
    max_attempts: Option<u32>,
    delay_s: Option<f64>,
    min_delay_s: Option<f64>,
    max_delay_s: Option<f64>,
    multiplier: Option<f64>,
    jitter: Option<Jitter>,
    default: Option<Box<RetryRepr>>,
    error: Option<Box<RetryRepr>>,
    timeout: Option<Box<RetryRepr>>,
    cancelled: Option<Box<RetryRepr>>,
}

impl RetryRepr {
    fn into_policy(self) -> Result<RetryPolicy, String> {
        let set: [(&str, bool); 10] = [
            ("max_attempts", self.max_attempts.is_some()),
            ("delay_s", self.delay_s.is_some()),
            ("min_delay_s", self.min_delay_s.is_some()),
            ("max_delay_s", self.max_delay_s.is_some()),
            ("multiplier", self.multiplier.is_some()),
            ("jitter", self.jitter.is_some()),
            ("default", self.default.is_some()),
            ("error", self.error.is_some()),
            ("timeout", self.timeout.is_some()),
            ("cancelled", self.cancelled.is_some()),
        ];
        let own: &[&str] = match self.kind.as_str() {
            "no_retry" => &[],
            "max_attempts" => &["max_attempts", "delay_s"],
            "exponential_backoff" => &[
                "max_attempts",
                "min_delay_s",
                "max_delay_s",
                "multiplier",
                "jitter",
            ],
            "by_failure_kind" => &["default", "error", "timeout", "cancelled"],
            other => return Err(format!("unknown retry type {other:?}")),
        };
        if let Some((field, _)) = set.iter().find(|(f, on)| *on && !own.contains(f)) {
            return Err(format!(
                "field {field} does not belong to retry type {}",
                self.kind
            ));
        }
        let need = |v: Option<u32>| v.ok_or_else(|| "max_attempts is required".to_owned());
        let need_f = |name: &str, v: Option<f64>| v.ok_or_else(|| format!("{name} is required"));
        let sub = |p: Option<Box<RetryRepr>>| -> Result<Option<Box<RetryPolicy>>, String> {
            p.map(|p| p.into_policy().map(Box::new)).transpose()
        };
        Ok(match self.kind.as_str() {
            "max_attempts" => RetryPolicy::MaxAttempts {
                max_attempts: need(self.max_attempts)?,
                delay_s: self.delay_s,
            },
            "exponential_backoff" => RetryPolicy::ExponentialBackoff {
                max_attempts: need(self.max_attempts)?,
                min_delay_s: need_f("min_delay_s", self.min_delay_s)?,
                max_delay_s: need_f("max_delay_s", self.max_delay_s)?,
                multiplier: need_f("multiplier", self.multiplier)?,
                jitter: self.jitter.unwrap_or_default(),
            },
            "by_failure_kind" => RetryPolicy::ByFailureKind {
                default: sub(self.default)?,
                error: sub(self.error)?,
                timeout: sub(self.timeout)?,
                cancelled: sub(self.cancelled)?,
            },
            _ => RetryPolicy::NoRetry,
        })
    }
}

impl<'de> Deserialize<'de> for RetryPolicy {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        RetryRepr::deserialize(d)?
            .into_policy()
            .map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    #[test]
    fn serialises_with_the_yaml_names() {
        let json = |p: &RetryPolicy| serde_json::to_string(p).unwrap();
        assert_eq!(json(&RetryPolicy::NoRetry), r#"{"type":"no_retry"}"#);
        assert_eq!(
            json(&RetryPolicy::MaxAttempts {
                max_attempts: 2,
                delay_s: None
            }),
            r#"{"type":"max_attempts","max_attempts":2,"delay_s":null}"#
        );
        let exp = RetryPolicy::ExponentialBackoff {
            max_attempts: 3,
            min_delay_s: 1.5,
            max_delay_s: 60.0,
            multiplier: 2.0,
            jitter: Jitter::Full,
        };
        assert_eq!(
            json(&exp),
            r#"{"type":"exponential_backoff","max_attempts":3,"min_delay_s":1.5,"max_delay_s":60.0,"multiplier":2.0,"jitter":"full"}"#
        );
        let by_kind = RetryPolicy::ByFailureKind {
            default: None,
            error: Some(Box::new(RetryPolicy::NoRetry)),
            timeout: None,
            cancelled: None,
        };
        assert_eq!(
            json(&by_kind),
            r#"{"type":"by_failure_kind","default":null,"error":{"type":"no_retry"},"timeout":null,"cancelled":null}"#
        );
    }

    #[test]
    fn exponential_backoff_matches_spec_example() {
        let p = RetryPolicy::ExponentialBackoff {
            max_attempts: 3,
            min_delay_s: 2.0,
            max_delay_s: 30.0,
            multiplier: 2.0,
            jitter: Jitter::None,
        };
        let mut rng = StdRng::seed_from_u64(1);
        assert_eq!(
            p.decide(FailureKind::Error, 0, &mut rng),
            RetryDecision::Retry { delay_s: 2.0 }
        );
        assert_eq!(
            p.decide(FailureKind::Error, 1, &mut rng),
            RetryDecision::Retry { delay_s: 4.0 }
        );
        assert_eq!(
            p.decide(FailureKind::Error, 2, &mut rng),
            RetryDecision::Fail
        );
    }

    #[test]
    fn jitter_stays_in_range() {
        let mut rng = StdRng::seed_from_u64(7);
        for jitter in [Jitter::Full, Jitter::Equal] {
            let p = RetryPolicy::ExponentialBackoff {
                max_attempts: 100,
                min_delay_s: 1.0,
                max_delay_s: 10.0,
                multiplier: 2.0,
                jitter,
            };
            for n in 0..20 {
                match p.decide(FailureKind::Error, n, &mut rng) {
                    RetryDecision::Retry { delay_s } => assert!((0.0..=10.0).contains(&delay_s)),
                    RetryDecision::Fail => panic!("must retry"),
                }
            }
        }
    }

    #[test]
    fn by_failure_kind_falls_back_to_default_then_fail() {
        let p = RetryPolicy::ByFailureKind {
            default: None,
            error: Some(Box::new(RetryPolicy::MaxAttempts {
                max_attempts: 2,
                delay_s: Some(1.5),
            })),
            timeout: None,
            cancelled: None,
        };
        let mut rng = StdRng::seed_from_u64(1);
        assert_eq!(
            p.decide(FailureKind::Error, 0, &mut rng),
            RetryDecision::Retry { delay_s: 1.5 }
        );
        assert_eq!(
            p.decide(FailureKind::Timeout, 0, &mut rng),
            RetryDecision::Fail
        );
        assert!(p.validate().is_ok());
        assert!(
            RetryPolicy::MaxAttempts {
                max_attempts: 0,
                delay_s: None
            }
            .validate()
            .is_err()
        );
    }

    #[test]
    fn every_policy_reads_back_what_it_wrote() {
        let policies = [
            RetryPolicy::NoRetry,
            RetryPolicy::MaxAttempts {
                max_attempts: 2,
                delay_s: Some(1.5),
            },
            RetryPolicy::MaxAttempts {
                max_attempts: 2,
                delay_s: None,
            },
            RetryPolicy::exponential_default(),
            RetryPolicy::ExponentialBackoff {
                max_attempts: 4,
                min_delay_s: 0.25,
                max_delay_s: 10.0,
                multiplier: 1.5,
                jitter: Jitter::Full,
            },
            RetryPolicy::ByFailureKind {
                default: Some(Box::new(RetryPolicy::NoRetry)),
                error: Some(Box::new(RetryPolicy::exponential_default())),
                timeout: None,
                cancelled: None,
            },
        ];
        for p in policies {
            let json = serde_json::to_string(&p).expect("json");
            let back: RetryPolicy = serde_json::from_str(&json).expect(&json);
            assert_eq!(back, p, "{json}");
        }
        for bad in [
            r#"{"type": "sometimes"}"#,
            r#"{"type": "no_retry", "max_attempts": 3}"#,
            r#"{"type": "max_attempts"}"#,
            r#"{"type": "max_attempts", "max_attempts": 2, "colour": 1}"#,
            r#"{"type": "by_failure_kind", "error": {"type": "max_attempts", "max_attempts": 2, "jitter": "full"}}"#,
        ] {
            assert!(serde_json::from_str::<RetryPolicy>(bad).is_err(), "{bad}");
        }
    }
}
