//! A task's `rate_limit: {per_second, burst}` (docs/semantics.md#rate-limits): the
//! fleet-wide token bucket its execution starts draw from (docs/semantics.md#rate-limits).
//! Unknown keys are errors in both modes; the bounds are [`RateLimit::validate`]'s.

use onestep_core::rate::RateLimit;

use crate::error::ConfigError;
use crate::fields::{check_allowed, integer, join, number};
use crate::node::Node;

/// `rate_limit` keys.
pub const RATE_LIMIT_KEYS: [&str; 2] = ["per_second", "burst"];

/// Parses `rate_limit` at `path` (`None` when absent or null).
pub(crate) fn parse_rate_limit(
    node: Option<&Node>,
    path: &str,
) -> Result<Option<RateLimit>, ConfigError> {
    let Some(node) = node else {
        return Ok(None);
    };
    if !node.is_map() {
        return Err(ConfigError::at(
            node,
            path,
            format!(
                "rate_limit must be a mapping {{per_second: NUMBER, burst: INTEGER}} (got {})",
                node.type_name()
            ),
        ));
    }
    check_allowed(node, path, &RATE_LIMIT_KEYS)?;
    let Some(ps) = node.get_set("per_second") else {
        return Err(ConfigError::at(
            node,
            path,
            "rate_limit needs per_second (a number > 0)",
        ));
    };
    let per_second = number(ps).ok_or_else(|| {
        ConfigError::at(
            ps,
            &join(path, "per_second"),
            format!("per_second must be a number > 0 (got {})", ps.type_name()),
        )
    })?;
    let burst = match node.get_set("burst") {
        None => {
            return Err(ConfigError::at(
                node,
                path,
                "rate_limit needs burst (an integer >= 1)",
            ));
        }
        Some(b) => match integer(b) {
            Some(i) => u32::try_from(i).map_err(|_| {
                ConfigError::at(
                    b,
                    &join(path, "burst"),
                    format!(
                        "burst must be an integer between 1 and {} (got {i})",
                        onestep_core::rate::MAX_BURST
                    ),
                )
            })?,
            None => {
                return Err(ConfigError::at(
                    b,
                    &join(path, "burst"),
                    format!(
                        "burst must be an integer between 1 and {} (got {})",
                        onestep_core::rate::MAX_BURST,
                        b.type_name()
                    ),
                ));
            }
        },
    };
    RateLimit { per_second, burst }
        .validate()
        .map(Some)
        .map_err(|m| {
            let at = if m.starts_with("burst") {
                "burst"
            } else {
                "per_second"
            };
            let n = node.get(at).unwrap_or(node);
            ConfigError::at(n, &join(path, at), m)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(yaml: &str) -> Result<Option<RateLimit>, String> {
        let root = crate::node::parse(yaml).map_err(|e| e.to_string())?;
        parse_rate_limit(root.get_set("rate_limit"), "tasks[0].rate_limit")
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_rate_limit_is_read_and_checked_with_its_location() {
        assert_eq!(
            parse("rate_limit: {per_second: 2.5, burst: 5}"),
            Ok(Some(RateLimit {
                per_second: 2.5,
                burst: 5
            }))
        );
        assert_eq!(parse("other: 1"), Ok(None));
        for (yaml, wanted) in [
            ("rate_limit: 3", "rate_limit must be a mapping"),
            ("rate_limit: {burst: 1}", "needs per_second"),
            ("rate_limit: {per_second: 1}", "needs burst"),
            (
                "rate_limit: {per_second: 0, burst: 1}",
                "tasks[0].rate_limit.per_second",
            ),
            (
                "rate_limit: {per_second: -1, burst: 1}",
                "per_second must be a number > 0",
            ),
            (
                "rate_limit: {per_second: '1', burst: 1}",
                "per_second must be a number",
            ),
            (
                "rate_limit: {per_second: 1, burst: 0}",
                "tasks[0].rate_limit.burst",
            ),
            (
                "rate_limit: {per_second: 1, burst: 1.5}",
                "burst must be an integer",
            ),
            ("rate_limit: {per_second: 1, burst: -3}", "(got -3)"),
            (
                "rate_limit: {per_second: 1, burst: 9999999999}",
                "(got 9999999999)",
            ),
            ("rate_limit: {per_second: 2000000, burst: 1}", "at most"),
            (
                "rate_limit: {per_second: 1, burst: 1, rate: 2}",
                "unsupported fields",
            ),
        ] {
            let e = parse(yaml).expect_err(yaml);
            assert!(e.contains(wanted), "{yaml}: {e}");
            assert!(e.contains("line 1"), "{yaml}: {e}");
        }
    }
}
