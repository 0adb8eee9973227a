//! The counters of sleeping handlers (docs/steps.md#sleep, docs/observability.md#worker-metrics):
//! attempts the worker parked, and sleeps a handler reached again after their wake time.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::TaskLabels;

#[derive(Debug, Default)]
pub(super) struct SleepMetrics {
    parks: Family<TaskLabels, Counter>,
    wakes: Family<TaskLabels, Counter>,
}

impl SleepMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "onestep_sleep_parks",
            "Attempts parked by a handler's sleep (T15): their slot and lease were freed until the wake time",
            self.parks.clone(),
        );
        registry.register(
            "onestep_sleep_wakes",
            "Sleeps a handler reached again after their wake time: its execution resumed past them",
            self.wakes.clone(),
        );
    }

    pub(super) fn parked(&self, labels: &TaskLabels) {
        self.parks.get_or_create(labels).inc();
    }

    pub(super) fn woke(&self, labels: &TaskLabels, wakes: u32) {
        if wakes > 0 {
            self.wakes.get_or_create(labels).inc_by(u64::from(wakes));
        }
    }
}
