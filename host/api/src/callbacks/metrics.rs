//! The completion-webhook sender's metrics (docs/observability.md#api-metrics): every delivery
//! attempt counted by event and outcome (`onestep_webhook_deliveries_total{event,outcome}`) and
//! timed (`onestep_webhook_delivery_duration_seconds{event}`), served with the API's own
//! metrics at `GET /metrics`. The labels are fixed words of this crate (no tenant data).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use onestep_core::callback::CallbackEvent;

/// Buckets of `onestep_webhook_delivery_duration_seconds`: 1 ms … 30 s.
const BUCKETS: [f64; 12] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0, 30.0,
];

fn histogram() -> Histogram {
    Histogram::new(BUCKETS)
}

/// How one delivery attempt ended (label `outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryResult {
    /// The receiver answered 2xx.
    Acknowledged,
    /// It failed; another attempt follows.
    Failed,
    /// It failed and was the last attempt of its event.
    Dead,
}

impl DeliveryResult {
    /// The label value.
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryResult::Acknowledged => "acknowledged",
            DeliveryResult::Failed => "failed",
            DeliveryResult::Dead => "dead",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    event: &'static str,
    outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EventLabels {
    event: &'static str,
}

/// The delivery counters and latency histogram of one process (shared by its sender and its
/// `/metrics`).
#[derive(Debug)]
pub struct WebhookMetrics {
    registry: Registry,
    deliveries: Family<OutcomeLabels, Counter>,
    duration: Family<EventLabels, Histogram, fn() -> Histogram>,
}

impl Default for WebhookMetrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let deliveries = Family::<OutcomeLabels, Counter>::default();
        registry.register(
            "onestep_webhook_deliveries",
            "Completion-webhook delivery attempts by event (started, progress, terminal) and outcome (acknowledged: a 2xx; failed: retried later; dead: no attempt left)",
            deliveries.clone(),
        );
        let duration: Family<EventLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(histogram);
        registry.register(
            "onestep_webhook_delivery_duration_seconds",
            "Completion-webhook delivery latency (connect, send, response head) by event",
            duration.clone(),
        );
        WebhookMetrics {
            registry,
            deliveries,
            duration,
        }
    }
}

impl WebhookMetrics {
    /// Records one attempt of `event` that took `seconds` and ended `result`.
    pub fn record(&self, event: CallbackEvent, result: DeliveryResult, seconds: f64) {
        self.deliveries
            .get_or_create(&OutcomeLabels {
                event: event.as_str(),
                outcome: result.as_str(),
            })
            .inc();
        self.duration
            .get_or_create(&EventLabels {
                event: event.as_str(),
            })
            .observe(seconds);
    }

    /// The attempts of `event` that ended `result` so far.
    pub fn count(&self, event: CallbackEvent, result: DeliveryResult) -> u64 {
        self.deliveries
            .get_or_create(&OutcomeLabels {
                event: event.as_str(),
                outcome: result.as_str(),
            })
            .get()
    }

    /// The registry (encoded into the API's `/metrics` answer).
    pub fn registry(&self) -> &Registry {
        &self.registry
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deliveries_are_counted_by_event_and_outcome() {
        let m = WebhookMetrics::default();
        m.record(CallbackEvent::Started, DeliveryResult::Acknowledged, 0.002);
        m.record(CallbackEvent::Progress, DeliveryResult::Failed, 0.5);
        m.record(CallbackEvent::Progress, DeliveryResult::Failed, 0.5);
        m.record(CallbackEvent::Terminal, DeliveryResult::Dead, 1.0);
        assert_eq!(m.count(CallbackEvent::Progress, DeliveryResult::Failed), 2);
        let mut out = String::new();
        prometheus_client::encoding::text::encode_registry(&mut out, m.registry()).unwrap();
        assert!(
            out.contains(
                "onestep_webhook_deliveries_total{event=\"started\",outcome=\"acknowledged\"} 1"
            ),
            "{out}"
        );
        assert!(
            out.contains(
                "onestep_webhook_deliveries_total{event=\"progress\",outcome=\"failed\"} 2"
            ),
            "{out}"
        );
        assert!(
            out.contains("onestep_webhook_deliveries_total{event=\"terminal\",outcome=\"dead\"} 1"),
            "{out}"
        );
        assert!(
            out.contains("onestep_webhook_delivery_duration_seconds_count{event=\"progress\"} 2"),
            "{out}"
        );
    }
}
