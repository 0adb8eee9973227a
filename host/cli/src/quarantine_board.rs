//! The worker's record of quarantined tasks (docs/security.md#one-tenants-bad-deploy), for
//! `/metrics` and `/readyz` (docs/observability.md#readiness): the gauge
//! `onestep_task_quarantined{app, task, reason}` (1 while the task is quarantined for `reason`,
//! `load` or `claim`, else 0; label values escaped like every other, see
//! [`LabelText`]) and, per quarantined task, the full error for the `/readyz`
//! document. The error text never becomes a label: only the fixed `reason` kinds do.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use onestep_api::metrics::LabelText;
use onestep_worker::{QuarantineCause, QuarantineKind};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use serde_json::json;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QuarantineLabels {
    app: LabelText,
    task: LabelText,
    reason: LabelText,
}

/// The quarantined tasks of one worker process.
#[derive(Debug, Default)]
pub(crate) struct QuarantineBoard {
    gauge: Family<QuarantineLabels, Gauge>,
    causes: Mutex<BTreeMap<String, QuarantineCause>>,
}

impl QuarantineBoard {
    /// Registers `onestep_task_quarantined` in `registry`.
    pub(crate) fn register(&self, registry: &mut Registry) {
        registry.register(
            "onestep_task_quarantined",
            "1 while the task is quarantined (claims nothing; its executions stay queued), by reason: load (its component cannot be loaded) or claim (a non-retryable claim error)",
            self.gauge.clone(),
        );
    }

    fn causes(&self) -> MutexGuard<'_, BTreeMap<String, QuarantineCause>> {
        self.causes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records that `task` of `app` is quarantined for `cause`, or no longer is (`None`).
    pub(crate) fn record(&self, app: &LabelText, task: &str, cause: Option<&QuarantineCause>) {
        for kind in [QuarantineKind::Load, QuarantineKind::Claim] {
            let on = cause.is_some_and(|c| c.kind == kind);
            let labels = QuarantineLabels {
                app: app.clone(),
                task: task.into(),
                reason: kind.as_str().into(),
            };
            // A kind the task was never quarantined for gets no series.
            if on || self.gauge.get(&labels).is_some() {
                self.gauge.get_or_create(&labels).set(i64::from(on));
            }
        }
        let mut causes = self.causes();
        match cause {
            Some(c) => causes.insert(task.to_owned(), c.clone()),
            None => causes.remove(task),
        };
    }

    /// How many tasks are quarantined.
    pub(crate) fn count(&self) -> usize {
        self.causes().len()
    }

    /// The `quarantined` list of `/readyz`: `{task, reason, error}` per quarantined task.
    pub(crate) fn json(&self) -> serde_json::Value {
        self.causes()
            .iter()
            .map(|(task, c)| json!({"task": task, "reason": c.kind.as_str(), "error": c.message}))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gauge_and_the_list_follow_the_quarantine() {
        let board = QuarantineBoard::default();
        let mut registry = Registry::default();
        board.register(&mut registry);
        let render = || {
            let mut out = String::new();
            prometheus_client::encoding::text::encode(&mut out, &registry).expect("encode");
            out
        };
        let cause = QuarantineCause::new(QuarantineKind::Load, "task 'bad': cannot load x.wasm");
        board.record(&"app".into(), "bad", Some(&cause));
        assert_eq!(board.count(), 1);
        assert!(
            render().contains(r#"onestep_task_quarantined{app="app",task="bad",reason="load"} 1"#),
            "{}",
            render()
        );
        assert!(!render().contains(r#"reason="claim""#));
        assert_eq!(
            board.json(),
            json!([{"task": "bad", "reason": "load", "error": "task 'bad': cannot load x.wasm"}])
        );
        board.record(&"app".into(), "bad", None);
        assert_eq!(board.count(), 0);
        assert!(
            render().contains(r#"onestep_task_quarantined{app="app",task="bad",reason="load"} 0"#)
        );
        assert_eq!(board.json(), json!([]));
    }
}
