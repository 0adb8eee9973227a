//! Completion webhooks (docs/semantics.md#completion-webhooks): what a submit's `callback`
//! carries, the API's `callbacks` settings, the Standard Webhooks signature
//! (<https://www.standardwebhooks.com/>), the retry backoff, and the outbox port
//! ([`CallbackStore`]) every backend serves.
//!
//! The outbox is written in the submit's transaction: a `callback` row per execution that asked
//! for one. The execution's terminal status is the durable event; a sender claims due callbacks
//! whose execution is terminal under a short lease, posts them, and records each attempt. A
//! sender killed mid-delivery loses nothing: its lease runs out and the callback is claimed
//! again (at-least-once). Plain data, pure functions and the port: no I/O here.

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use chrono::{DateTime, Utc};
use hmac::{Hmac, KeyInit, Mac};
use serde::Serialize;
use uuid::Uuid;

use crate::error::ExecutionError;
use crate::network::OriginPattern;
use crate::status::ExecutionStatus;

/// The event of the execution's terminal status (always delivered, last).
pub const TERMINAL_EVENT: &str = "terminal";
/// The event of the execution's first attempt starting (opt-in).
pub const STARTED_EVENT: &str = "started";
/// The event of the handler's latest progress report (opt-in, throttled).
pub const PROGRESS_EVENT: &str = "progress";
/// Events a submit may name in `callback.events`, in their delivery order.
pub const CALLBACK_EVENTS: [&str; 3] = [STARTED_EVENT, PROGRESS_EVENT, TERMINAL_EVENT];
/// Default `api.callbacks.progress_interval_s`: at most one progress delivery per callback
/// per interval.
pub const DEFAULT_PROGRESS_INTERVAL: Duration = Duration::from_secs(5);
/// Bounds of `api.callbacks.progress_interval_s` (seconds).
pub const PROGRESS_INTERVAL_RANGE_S: std::ops::RangeInclusive<u64> = 1..=3600;
/// Longest callback URL (characters).
pub const MAX_CALLBACK_URL_CHARS: usize = 2048;
/// Default `api.callbacks.retry.max_attempts`.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 8;
/// Largest `api.callbacks.retry.max_attempts`.
pub const MAX_MAX_ATTEMPTS: u32 = 100;
/// Default `api.callbacks.retry.first_backoff_s`.
pub const DEFAULT_FIRST_BACKOFF: Duration = Duration::from_secs(5);
/// Longest wait between two attempts, whatever the backoff doubles to.
pub const MAX_BACKOFF: Duration = Duration::from_secs(3600);
/// Default `api.callbacks.timeout_s`: the longest one delivery (connect, send, response head)
/// may take.
pub const DEFAULT_DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);
/// The prefix of a Standard Webhooks secret.
pub const SECRET_PREFIX: &str = "whsec_";

/// What a submit's `callback` asks for, validated: the URL as given (trimmed) and its events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CallbackSpec {
    /// Where deliveries are posted (an origin of `api.callbacks.allow`).
    pub url: String,
    /// The events delivered ([`CALLBACK_EVENTS`]).
    pub events: Vec<String>,
}

impl CallbackSpec {
    /// The events as stored (comma-separated).
    pub fn events_text(&self) -> String {
        self.events.join(",")
    }

    /// The events of their stored text.
    pub fn events_of(text: &str) -> Vec<String> {
        text.split(',')
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .collect()
    }
}

/// Checks `callback.events`: `None` is the default (`terminal`); each entry one of
/// [`CALLBACK_EVENTS`], at most once, and `terminal` among them (a callback ends with it).
pub fn check_events(events: Option<&[String]>) -> Result<Vec<String>, String> {
    let Some(events) = events else {
        return Ok(vec![TERMINAL_EVENT.to_owned()]);
    };
    if events.is_empty() {
        return Err("callback.events must not be empty (omit it for \"terminal\")".into());
    }
    let mut out: Vec<String> = Vec::new();
    for e in events {
        let e = e.trim();
        if !CALLBACK_EVENTS.contains(&e) {
            return Err(format!(
                "callback.events: unknown event {e:?}; allowed: {}",
                CALLBACK_EVENTS.join(", ")
            ));
        }
        if out.iter().any(|x| x == e) {
            return Err(format!("callback.events: {e:?} is listed twice"));
        }
        out.push(e.to_owned());
    }
    if !out.iter().any(|e| e == TERMINAL_EVENT) {
        return Err(
            "callback.events must include \"terminal\" (every callback ends with it; \
             \"started\" and \"progress\" come before it)"
                .into(),
        );
    }
    Ok(out)
}

/// One event of a callback, in delivery order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CallbackEvent {
    /// The first attempt started (`execution.started`).
    Started,
    /// The latest progress report (`execution.progress`).
    Progress,
    /// The terminal status (`execution.succeeded`, …).
    Terminal,
}

impl CallbackEvent {
    /// The name used in `callback.events` and in the metrics' `event` label.
    pub fn as_str(self) -> &'static str {
        match self {
            CallbackEvent::Started => STARTED_EVENT,
            CallbackEvent::Progress => PROGRESS_EVENT,
            CallbackEvent::Terminal => TERMINAL_EVENT,
        }
    }
}

/// Which event a claimed callback delivers now, derived from the execution's durable state:
/// `started` once its first attempt started (if asked for and not yet passed), else the
/// terminal status once it ended, else `progress` when asked for and a report newer than the
/// last one passed exists (`latest_progress_at`). `None`: nothing (a claim raced a change).
pub fn next_event(
    due: &DueCallback,
    status: ExecutionStatus,
    started: bool,
    latest_progress_at: Option<DateTime<Utc>>,
) -> Option<CallbackEvent> {
    let wants = |e: &str| due.events.iter().any(|x| x == e);
    if wants(STARTED_EVENT) && !due.started_done && started {
        return Some(CallbackEvent::Started);
    }
    if status.is_terminal() {
        return Some(CallbackEvent::Terminal);
    }
    if wants(PROGRESS_EVENT)
        && latest_progress_at.is_some_and(|at| due.progress_sent_at.is_none_or(|sent| at > sent))
    {
        return Some(CallbackEvent::Progress);
    }
    None
}

/// A Standard Webhooks signing secret: the bytes after `whsec_`, base64-decoded. Never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSecret(Vec<u8>);

impl fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("WebhookSecret(..)")
    }
}

impl Serialize for WebhookSecret {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str("whsec_…")
    }
}

impl WebhookSecret {
    /// Parses `whsec_<base64>` (24 to 64 decoded bytes, as Standard Webhooks recommends).
    /// The error never repeats the secret.
    pub fn parse(text: &str) -> Result<Self, String> {
        let Some(b64) = text.trim().strip_prefix(SECRET_PREFIX) else {
            return Err(format!(
                "a webhook secret must start with {SECRET_PREFIX} followed by base64"
            ));
        };
        let bytes = B64
            .decode(b64)
            .map_err(|_| format!("a webhook secret must be {SECRET_PREFIX} followed by base64"))?;
        if !(24..=64).contains(&bytes.len()) {
            return Err(format!(
                "a webhook secret must decode to 24 to 64 bytes (this one has {})",
                bytes.len()
            ));
        }
        Ok(WebhookSecret(bytes))
    }

    /// Parses a space-separated list of secrets (rotation: every one signs).
    pub fn parse_list(text: &str) -> Result<Vec<Self>, String> {
        let secrets = text
            .split_whitespace()
            .map(WebhookSecret::parse)
            .collect::<Result<Vec<_>, _>>()?;
        if secrets.is_empty() {
            return Err(format!(
                "no webhook secret given (expected {SECRET_PREFIX}… values separated by spaces)"
            ));
        }
        Ok(secrets)
    }

    /// The secret's key bytes.
    pub fn key(&self) -> &[u8] {
        &self.0
    }
}

/// `api.callbacks` (docs/configuration.md#api-callbacks).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CallbackSettings {
    /// Origins a callback URL may name (the syntax and address rules of `sandbox.network.allow`).
    pub allow: Vec<OriginPattern>,
    /// The signing secrets of every namespace without its own.
    pub secrets: Vec<WebhookSecret>,
    /// Per-namespace signing secrets.
    pub namespace_secrets: BTreeMap<String, Vec<WebhookSecret>>,
    /// Attempts per event before the callback is `dead`.
    pub max_attempts: u32,
    /// The wait after the first failed attempt; it doubles after each (at most [`MAX_BACKOFF`]).
    pub first_backoff: Duration,
    /// The longest one delivery may take.
    pub timeout: Duration,
    /// At most one `progress` delivery per callback per this interval.
    pub progress_interval: Duration,
}

impl CallbackSettings {
    /// The secrets signing `namespace`'s deliveries.
    pub fn secrets_for(&self, namespace: &str) -> &[WebhookSecret] {
        self.namespace_secrets
            .get(namespace)
            .map_or(self.secrets.as_slice(), Vec::as_slice)
    }

    /// What follows failed attempt `attempt_no` (1-based) of a round that began after
    /// `round_start` attempts, failed at `at`: the next try's instant, or `None` (dead).
    pub fn after_failure(
        &self,
        attempt_no: u32,
        round_start: u32,
        at: DateTime<Utc>,
    ) -> Option<DateTime<Utc>> {
        let in_round = attempt_no.saturating_sub(round_start);
        if in_round >= self.max_attempts {
            return None;
        }
        let wait = backoff(self.first_backoff, in_round);
        Some(at + chrono::Duration::from_std(wait).unwrap_or(chrono::Duration::hours(1)))
    }
}

/// The wait after failed attempt `n` (1-based) of a round: `first · 2^(n-1)`, at most
/// [`MAX_BACKOFF`].
pub fn backoff(first: Duration, n: u32) -> Duration {
    let factor = 1u32.checked_shl(n.saturating_sub(1)).unwrap_or(u32::MAX);
    first.saturating_mul(factor).min(MAX_BACKOFF)
}

/// The Standard Webhooks `webhook-signature` header value of a message: one `v1,<base64>`
/// per secret (HMAC-SHA256 of `{id}.{timestamp}.{body}`), separated by spaces.
pub fn sign(secrets: &[WebhookSecret], msg_id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut out = Vec::with_capacity(secrets.len());
    for s in secrets {
        // HMAC takes a key of any length: this cannot fail.
        let Ok(mut mac) = <Hmac<sha2_11::Sha256> as KeyInit>::new_from_slice(s.key()) else {
            continue;
        };
        mac.update(msg_id.as_bytes());
        mac.update(b".");
        mac.update(timestamp.to_string().as_bytes());
        mac.update(b".");
        mac.update(body);
        out.push(format!("v1,{}", B64.encode(mac.finalize().into_bytes())));
    }
    out.join(" ")
}

/// The `webhook-id` of an execution's event: the same on every retry of that event.
pub fn message_id(execution_id: Uuid, event: &str) -> String {
    format!("msg_{}_{event}", execution_id.simple())
}

/// The `webhook-id` of an execution's `seq`-th progress delivery (1-based): the same on every
/// retry of it.
pub fn progress_message_id(execution_id: Uuid, seq: u32) -> String {
    format!("msg_{}_{PROGRESS_EVENT}_{seq}", execution_id.simple())
}

/// The payload `type` of the `started` event.
pub const STARTED_TYPE: &str = "execution.started";
/// The payload `type` of the `progress` event.
pub const PROGRESS_TYPE: &str = "execution.progress";

/// The payload `type` of a terminal status (`execution.succeeded`, …).
pub fn event_type(status: ExecutionStatus) -> String {
    format!("execution.{}", status.as_str())
}

/// The state of an execution's callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CallbackState {
    /// Waiting for the execution to end, or for its next attempt.
    Pending,
    /// A 2xx answered.
    Delivered,
    /// Every attempt of the round failed.
    Dead,
}

impl CallbackState {
    /// The stored text.
    pub fn as_str(self) -> &'static str {
        match self {
            CallbackState::Pending => "pending",
            CallbackState::Delivered => "delivered",
            CallbackState::Dead => "dead",
        }
    }

    /// The state of its stored text.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "pending" => Some(CallbackState::Pending),
            "delivered" => Some(CallbackState::Delivered),
            "dead" => Some(CallbackState::Dead),
            _ => None,
        }
    }
}

/// A callback a sender claimed: its execution has ended and an attempt is due.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DueCallback {
    /// The execution.
    pub execution_id: Uuid,
    /// Its namespace.
    pub namespace: String,
    /// Where to post.
    pub url: String,
    /// Attempts made so far (all rounds).
    pub attempts: u32,
    /// Attempts made before the current round (a redelivery or a passed event starts a new
    /// round).
    pub round_start: u32,
    /// The events asked for.
    pub events: Vec<String>,
    /// Whether the `started` event was passed (acknowledged, or out of attempts).
    pub started_done: bool,
    /// Progress deliveries passed so far (the next one's `webhook-id` carries this + 1).
    pub progress_seq: u32,
    /// The report instant of the last progress passed.
    pub progress_sent_at: Option<DateTime<Utc>>,
}

/// A non-terminal event the callback moves past with an attempt (acknowledged, or out of
/// attempts): the next event starts a new round of attempts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PassedEvent {
    /// `started` is done.
    Started,
    /// Progress delivery `seq` (1-based) carried the report made at `progress_at`; no other
    /// before `after` (the throttle).
    Progress {
        /// The progress deliveries passed, this one included.
        seq: u32,
        /// The report instant delivered.
        progress_at: DateTime<Utc>,
        /// No progress delivery before this instant.
        after: DateTime<Utc>,
    },
}

/// One attempt's result and the callback's state after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryOutcome {
    /// The execution.
    pub execution_id: Uuid,
    /// The attempt's number (1-based, over all rounds).
    pub attempt_no: u32,
    /// The event (`execution.succeeded`, …).
    pub event: String,
    /// The `webhook-id` sent.
    pub webhook_id: String,
    /// When it was made.
    pub at: DateTime<Utc>,
    /// The receiver's HTTP status, when it answered.
    pub status: Option<u16>,
    /// Why it failed, when it did.
    pub error: Option<String>,
    /// The state after it.
    pub state: CallbackState,
    /// With [`CallbackState::Pending`]: when to try again.
    pub next_at: Option<DateTime<Utc>>,
    /// A non-terminal event this attempt ends (the callback stays pending for the next).
    pub passed: Option<PassedEvent>,
}

/// One recorded delivery attempt (`GET /v1/executions/{id}/deliveries`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DeliveryAttempt {
    /// 1-based.
    pub attempt_no: u32,
    /// `execution.succeeded`, …
    pub event: String,
    /// The `webhook-id` sent.
    pub webhook_id: String,
    /// When it was made.
    pub at: DateTime<Utc>,
    /// The receiver's HTTP status, when it answered.
    pub status: Option<u16>,
    /// Why it failed, when it did.
    pub error: Option<String>,
}

/// An execution's callback and its attempts, oldest first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CallbackRecord {
    /// Where deliveries go.
    pub url: String,
    /// The events asked for.
    pub events: Vec<String>,
    /// Its state.
    pub state: CallbackState,
    /// Attempts made (all rounds).
    pub attempts: u32,
    /// When the next attempt is due (pending; after the execution ends).
    pub next_at: Option<DateTime<Utc>>,
    /// The attempts.
    pub deliveries: Vec<DeliveryAttempt>,
}

/// The outbox of completion webhooks (docs/semantics.md#completion-webhooks). A backend writes
/// a submit's callback in the submit's transaction (`PreparedSubmission::callback`); this port
/// claims, records and reads them.
#[async_trait]
pub trait CallbackStore: Send + Sync {
    /// Claims at most `limit` pending callbacks that are due and whose execution is terminal,
    /// none held by another sender's unexpired claim; each is held for `lease`.
    async fn claim_due(
        &self,
        limit: u32,
        lease: Duration,
    ) -> Result<Vec<DueCallback>, ExecutionError>;

    /// Records one attempt and moves the callback to `outcome.state` (releasing the claim). An
    /// attempt number recorded before (a sender whose claim ran out) is kept once.
    async fn record_delivery(&self, outcome: &DeliveryOutcome) -> Result<(), ExecutionError>;

    /// The callback of execution `id` in `namespace` with its attempts; `None` when it has none.
    async fn deliveries(
        &self,
        namespace: &str,
        id: Uuid,
    ) -> Result<Option<CallbackRecord>, ExecutionError>;

    /// Starts a new round of attempts for execution `id`'s callback (due now); false when it
    /// has none.
    async fn redeliver(&self, namespace: &str, id: Uuid) -> Result<bool, ExecutionError>;
}

/// How a backend hands out its [`CallbackStore`] (`Backend::callbacks`): `None` while it keeps
/// no outbox, and then a submit's `callback` is refused.
pub trait CallbackPort {
    /// The outbox port, when this backend keeps one.
    fn callback_port(&self) -> Option<std::sync::Arc<dyn CallbackStore>> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_default_to_terminal_and_refuse_unknown_and_duplicates() {
        assert_eq!(check_events(None).unwrap(), vec!["terminal"]);
        assert!(check_events(Some(&[])).is_err());
        let e = check_events(Some(&["finished".into()])).unwrap_err();
        assert!(e.contains("unknown event \"finished\""), "{e}");
        let e = check_events(Some(&["progress".into()])).unwrap_err();
        assert!(e.contains("must include \"terminal\""), "{e}");
        assert_eq!(
            check_events(Some(&[
                "started".into(),
                "progress".into(),
                "terminal".into()
            ]))
            .unwrap(),
            vec!["started", "progress", "terminal"]
        );
        let e = check_events(Some(&["terminal".into(), "terminal".into()])).unwrap_err();
        assert!(e.contains("listed twice"), "{e}");
    }

    #[test]
    fn secrets_parse_and_never_print() {
        let s = WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        assert_eq!(s.key().len(), 24);
        assert_eq!(format!("{s:?}"), "WebhookSecret(..)");
        assert!(WebhookSecret::parse("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").is_err());
        assert!(WebhookSecret::parse("whsec_!!").is_err());
        assert!(WebhookSecret::parse("whsec_c2hvcnQ=").is_err());
        assert_eq!(
            WebhookSecret::parse_list(
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
            )
            .unwrap()
            .len(),
            2
        );
        assert!(WebhookSecret::parse_list("  ").is_err());
    }

    /// The example of the Standard Webhooks specification (its reference libraries' test
    /// vector): secret, id, timestamp and body give this signature.
    #[test]
    fn signature_matches_the_specification_example() {
        let s = WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let sig = sign(
            &[s],
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            br#"{"test": 2432232314}"#,
        );
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn rotation_signs_with_every_secret() {
        let a = WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        let b = WebhookSecret::parse(&format!("whsec_{}", B64.encode([7u8; 32]))).unwrap();
        let sig = sign(&[a, b], "msg_1", 1, b"{}");
        let parts: Vec<&str> = sig.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert!(parts.iter().all(|p| p.starts_with("v1,")));
        assert_ne!(parts[0], parts[1]);
    }

    #[test]
    fn backoff_doubles_up_to_the_cap_and_attempts_are_bounded() {
        let first = Duration::from_secs(2);
        assert_eq!(backoff(first, 1), Duration::from_secs(2));
        assert_eq!(backoff(first, 3), Duration::from_secs(8));
        assert_eq!(backoff(first, 60), MAX_BACKOFF);
        let s = CallbackSettings {
            allow: Vec::new(),
            secrets: Vec::new(),
            namespace_secrets: BTreeMap::new(),
            max_attempts: 3,
            first_backoff: first,
            timeout: DEFAULT_DELIVERY_TIMEOUT,
            progress_interval: DEFAULT_PROGRESS_INTERVAL,
        };
        let at = Utc::now();
        assert_eq!(
            s.after_failure(1, 0, at),
            Some(at + chrono::Duration::seconds(2))
        );
        assert_eq!(
            s.after_failure(2, 0, at),
            Some(at + chrono::Duration::seconds(4))
        );
        assert_eq!(s.after_failure(3, 0, at), None);
        // A redelivery after 3 attempts starts a new round of 3.
        assert!(s.after_failure(4, 3, at).is_some());
        assert_eq!(s.after_failure(6, 3, at), None);
    }

    #[test]
    fn the_next_event_follows_started_progress_terminal() {
        let t0 = Utc::now();
        let mut due = DueCallback {
            execution_id: Uuid::nil(),
            namespace: "ns".into(),
            url: "https://x".into(),
            attempts: 0,
            round_start: 0,
            events: vec!["started".into(), "progress".into(), "terminal".into()],
            started_done: false,
            progress_seq: 0,
            progress_sent_at: None,
        };
        use ExecutionStatus::{Queued, Running, Succeeded};
        assert_eq!(next_event(&due, Queued, false, None), None);
        assert_eq!(
            next_event(&due, Running, true, Some(t0)),
            Some(CallbackEvent::Started)
        );
        // Ended before the sender saw it start: started still comes first.
        assert_eq!(
            next_event(&due, Succeeded, true, None),
            Some(CallbackEvent::Started)
        );
        due.started_done = true;
        assert_eq!(next_event(&due, Running, true, None), None);
        assert_eq!(
            next_event(&due, Running, true, Some(t0)),
            Some(CallbackEvent::Progress)
        );
        due.progress_sent_at = Some(t0);
        assert_eq!(next_event(&due, Running, true, Some(t0)), None);
        // Never progress once terminal.
        assert_eq!(
            next_event(
                &due,
                Succeeded,
                true,
                Some(t0 + chrono::Duration::seconds(1))
            ),
            Some(CallbackEvent::Terminal)
        );
        // Cancelled while queued: no started, the terminal only.
        due.started_done = false;
        assert_eq!(
            next_event(&due, ExecutionStatus::Cancelled, false, None),
            Some(CallbackEvent::Terminal)
        );
        due.events = vec!["terminal".into()];
        assert_eq!(
            next_event(&due, Running, true, Some(t0 + chrono::Duration::seconds(9))),
            None
        );
    }

    #[test]
    fn message_ids_are_stable_per_event() {
        let id = Uuid::nil();
        assert_eq!(
            message_id(id, "terminal"),
            "msg_00000000000000000000000000000000_terminal"
        );
        assert_eq!(
            event_type(ExecutionStatus::Succeeded),
            "execution.succeeded"
        );
        assert_eq!(
            progress_message_id(id, 3),
            "msg_00000000000000000000000000000000_progress_3"
        );
    }
}
