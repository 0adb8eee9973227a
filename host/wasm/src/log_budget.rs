//! What one attempt may put in the worker's log, and what all attempts of a
//! task together may put there per minute (docs/security.md#logs).
//!
//! Every line of guest text — a `log` call, a `progress` note, a captured
//! stdout/stderr line — asks the attempt's [`LogBudget`] first. A line is
//! cut to `max_log_message_bytes`, escaped ([`guest_log::escape`]), then
//! charged what it costs in the worker's largest log format, JSON: its text
//! as a JSON string ([`json_len`]), the attempt's ids as often as the line
//! repeats them, and [`LOG_LINE_OVERHEAD_BYTES`] for the rest of the line
//! ([`line_overhead`]); so the guest lines of one attempt never write more
//! than `log_limit_bytes`, in either format. It is charged against three bounds: the attempt's bytes
//! (`log_limit_bytes`), the attempt's line count (`max_log_lines`), and the
//! task's [`LogRate`] (`log_rate_bytes_per_minute`, a token bucket shared by
//! every attempt of the task in this worker, a minute's worth of burst). A
//! line that does not fit is dropped and counted; the first drop of an
//! attempt is announced by one warning, and the totals ([`LogTotals`]) go on
//! the line that logs how the attempt ended. A line whose level the log
//! filter would discard costs nothing.
//!
//! The handler-error message is charged too, but never dropped: it explains
//! the failure, so when the budget or the rate is spent it is only cut to
//! [`ERROR_MESSAGE_FLOOR`] bytes.

use std::borrow::Cow;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use onestep_core::settings::LOG_LINE_OVERHEAD_BYTES;
use serde::Serialize;

use crate::context::LogIds;
use crate::guest_log;
use crate::settings::SandboxSettings;

/// Bytes of a handler-error message always kept, whatever the budget says.
pub(crate) const ERROR_MESSAGE_FLOOR: usize = 256;

/// Appended to a message that was cut.
const TRUNCATED: &str = "…[truncated]";

/// What one attempt's guest text cost, reported on the attempt's end line
/// and in [`Report::log`](crate::Report::log).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LogTotals {
    /// Guest lines written to the log.
    pub lines: u64,
    /// Bytes charged for them (text plus the per-line overhead).
    pub bytes: u64,
    /// Guest lines dropped (attempt budget, line cap or task rate).
    pub dropped_lines: u64,
    /// Of those, dropped because the task's rate was spent.
    pub rate_limited_lines: u64,
    /// Guest text not written: dropped lines and the cut tails of long ones.
    pub dropped_bytes: u64,
    /// Messages cut at `max_log_message_bytes` (or, for the error message,
    /// at what the budget had left).
    pub truncated: u64,
}

impl LogTotals {
    /// Whether anything the guest said was dropped or cut.
    pub fn lost_any(&self) -> bool {
        self.dropped_lines > 0 || self.truncated > 0
    }
}

/// A token bucket of bytes refilled continuously at `rate` per minute, at
/// most one minute's worth.
#[derive(Debug)]
struct Bucket {
    per_minute: u64,
    tokens: f64,
    at: Instant,
}

impl Bucket {
    fn refill(&mut self, per_minute: u64, now: Instant) {
        if per_minute != self.per_minute {
            self.per_minute = per_minute;
            self.tokens = self.tokens.min(per_minute as f64);
        }
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.at = now;
        self.tokens = (self.tokens + elapsed * per_minute as f64 / 60.0).min(per_minute as f64);
    }
}

/// The per-task rate over time: one bucket shared by every attempt of a
/// task (every clone of its [`Handler`](crate::Handler)) in this process.
#[derive(Debug, Clone, Default)]
pub(crate) struct LogRate {
    bucket: Arc<Mutex<Option<Bucket>>>,
}

impl LogRate {
    fn lock(&self) -> MutexGuard<'_, Option<Bucket>> {
        self.bucket.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes `cost` bytes at `per_minute` if they are there.
    fn take(&self, cost: u64, per_minute: u64, now: Instant) -> bool {
        let mut guard = self.lock();
        let bucket = guard.get_or_insert(Bucket {
            per_minute,
            tokens: per_minute as f64,
            at: now,
        });
        bucket.refill(per_minute, now);
        if bucket.tokens >= cost as f64 {
            bucket.tokens -= cost as f64;
            true
        } else {
            false
        }
    }

    /// Takes `cost` bytes whether or not they are there (down to zero).
    fn take_anyway(&self, cost: u64, per_minute: u64, now: Instant) {
        if !self.take(cost, per_minute, now)
            && let Some(b) = self.lock().as_mut()
        {
            b.tokens = 0.0;
        }
    }

    /// Bytes the bucket holds at `now` (tests).
    #[cfg(test)]
    fn available(&self, per_minute: u64, now: Instant) -> f64 {
        let mut guard = self.lock();
        match guard.as_mut() {
            Some(b) => {
                b.refill(per_minute, now);
                b.tokens
            }
            None => per_minute as f64,
        }
    }
}

/// Why a line was dropped (named by the attempt's one warning).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spent {
    Bytes,
    Lines,
    Rate,
}

impl Spent {
    fn describe(self) -> &'static str {
        match self {
            Spent::Bytes => "the attempt's log_limit_bytes is spent",
            Spent::Lines => "the attempt's max_log_lines is reached",
            Spent::Rate => "the task's log_rate_bytes_per_minute is spent",
        }
    }
}

#[derive(Debug)]
struct Inner {
    bytes_left: u64,
    lines_left: u64,
    totals: LogTotals,
    warned: bool,
}

/// The log budget of one attempt. Clones share it (the host imports and the
/// two output captures of the attempt each hold one).
#[derive(Debug, Clone)]
pub(crate) struct LogBudget {
    inner: Arc<Mutex<Inner>>,
    rate: LogRate,
    per_minute: u64,
    max_message: usize,
    /// What each line costs besides its text ([`line_overhead`]).
    overhead: u64,
    ids: Arc<LogIds>,
}

/// Bytes `text` (already [`guest_log::escape`]d, so free of control
/// characters) takes as a JSON string's contents: `"` and `\` are written
/// with a backslash. The text format writes it as it is, never longer.
pub(crate) fn json_len(text: &str) -> u64 {
    let escaped = text.bytes().filter(|b| matches!(b, b'"' | b'\\')).count();
    (text.len() + escaped) as u64
}

/// What one guest line of the attempt `ids` costs besides its text: the
/// execution id, attempt id and task name three times (the event's fields,
/// the worker's `delivery` span and the JSON format's span list), the
/// namespace once, and [`LOG_LINE_OVERHEAD_BYTES`] for the rest.
pub(crate) fn line_overhead(ids: &LogIds) -> u64 {
    let repeated =
        json_len(&ids.execution_id) + json_len(&ids.attempt_id) + json_len(&ids.task_name);
    LOG_LINE_OVERHEAD_BYTES
        .saturating_add(repeated.saturating_mul(3))
        .saturating_add(json_len(&ids.namespace))
}

impl LogBudget {
    /// A full budget for one attempt of a task with `sandbox`, drawing on the
    /// task's `rate`.
    pub(crate) fn new(sandbox: &SandboxSettings, rate: LogRate, ids: Arc<LogIds>) -> Self {
        LogBudget {
            inner: Arc::new(Mutex::new(Inner {
                bytes_left: sandbox.log_limit_bytes,
                lines_left: sandbox.max_log_lines,
                totals: LogTotals::default(),
                warned: false,
            })),
            rate,
            per_minute: sandbox.log_rate_bytes_per_minute,
            max_message: usize::try_from(sandbox.max_log_message_bytes).unwrap_or(usize::MAX),
            overhead: line_overhead(&ids),
            ids,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Admits one line of guest text to be logged at `level`: the text to
    /// log (cut to `max_log_message_bytes`), or `None` when it is dropped
    /// (counted). A level the log filter discards admits nothing and costs
    /// nothing.
    pub(crate) fn admit<'a>(&self, level: tracing::Level, text: &'a str) -> Option<Cow<'a, str>> {
        if !guest_log::enabled(level) {
            return None;
        }
        self.admit_at(text, Instant::now())
    }

    fn admit_at<'a>(&self, text: &'a str, now: Instant) -> Option<Cow<'a, str>> {
        let (raw, cut) = cut(text, self.max_message);
        // Charged as written: escaping can make control characters longer,
        // and JSON doubles quotes and backslashes.
        let text = guest_log::escape(raw);
        let cost = json_len(&text).saturating_add(self.overhead);
        let mut inner = self.lock();
        let spent = if inner.lines_left == 0 {
            Some(Spent::Lines)
        } else if inner.bytes_left < cost {
            Some(Spent::Bytes)
        } else if !self.rate.take(cost, self.per_minute, now) {
            Some(Spent::Rate)
        } else {
            None
        };
        if let Some(spent) = spent {
            inner.totals.dropped_lines += 1;
            inner.totals.dropped_bytes = inner
                .totals
                .dropped_bytes
                .saturating_add(raw.len() as u64 + cut);
            if spent == Spent::Rate {
                inner.totals.rate_limited_lines += 1;
            }
            if !inner.warned {
                inner.warned = true;
                drop(inner);
                self.warn(spent);
            }
            return None;
        }
        inner.lines_left -= 1;
        inner.bytes_left -= cost;
        inner.totals.lines += 1;
        inner.totals.bytes = inner.totals.bytes.saturating_add(cost);
        if cut > 0 {
            inner.totals.truncated += 1;
            inner.totals.dropped_bytes = inner.totals.dropped_bytes.saturating_add(cut);
            return Some(Cow::Owned(format!("{text}{TRUNCATED}")));
        }
        Some(text)
    }

    /// The handler-error message as the host keeps and logs it: cut to
    /// `max_log_message_bytes`, and to what the attempt's budget and the
    /// task's rate have left but never below [`ERROR_MESSAGE_FLOOR`] bytes;
    /// charged to both.
    pub(crate) fn error_message(&self, message: String) -> String {
        self.error_message_at(message, Instant::now())
    }

    fn error_message_at(&self, message: String, now: Instant) -> String {
        let mut inner = self.lock();
        let room =
            usize::try_from(inner.bytes_left.saturating_sub(self.overhead)).unwrap_or(usize::MAX);
        let cost = |n: u64| n.saturating_add(self.overhead);
        // Bytes of the message as JSON writes it that may be logged.
        let mut allowed = self.max_message.min(room.max(ERROR_MESSAGE_FLOOR));
        let keep = allowed.min(message.len());
        if !self.rate.take(cost(keep as u64), self.per_minute, now) {
            allowed = allowed.min(ERROR_MESSAGE_FLOOR);
            self.rate
                .take_anyway(cost(allowed.min(keep) as u64), self.per_minute, now);
        }
        let (mut kept, _) = cut(&message, allowed);
        // What JSON adds (escaped quotes and backslashes) comes off the text.
        let extra = usize::try_from(json_len(kept)).unwrap_or(usize::MAX) - kept.len();
        if kept.len() + extra > allowed {
            kept = cut(kept, allowed.saturating_sub(extra)).0;
        }
        let cut_bytes = (message.len() - kept.len()) as u64;
        let charged = cost(json_len(kept));
        inner.bytes_left = inner.bytes_left.saturating_sub(charged);
        inner.totals.bytes = inner.totals.bytes.saturating_add(charged);
        if cut_bytes == 0 {
            return message;
        }
        inner.totals.truncated += 1;
        inner.totals.dropped_bytes = inner.totals.dropped_bytes.saturating_add(cut_bytes);
        format!("{kept}{TRUNCATED}")
    }

    /// Cuts any other guest-derived message (a panic's text) to
    /// `max_log_message_bytes`, uncharged (its bytes were charged as stderr
    /// lines already).
    pub(crate) fn cap_message(&self, message: String) -> String {
        let (kept, cut_bytes) = cut(&message, self.max_message);
        if cut_bytes == 0 {
            return message;
        }
        format!("{kept}{TRUNCATED}")
    }

    /// The attempt's totals so far.
    pub(crate) fn totals(&self) -> LogTotals {
        self.lock().totals
    }

    fn warn(&self, spent: Spent) {
        tracing::warn!(
            target: guest_log::TARGET,
            execution_id = %self.ids.execution_id,
            attempt_id = %self.ids.attempt_id,
            task = %self.ids.task_name,
            "guest log limit reached: {}; further guest lines of this attempt are dropped \
             and counted on its end line",
            spent.describe()
        );
    }
}

/// `text` cut to at most `max` bytes at a character boundary, and the number
/// of bytes cut off.
fn cut(text: &str, max: usize) -> (&str, u64) {
    if text.len() <= max {
        return (text, 0);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    (&text[..end], (text.len() - end) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest_log::tests::{ids, logged};
    use std::time::Duration;

    /// How long the bucket of `per_minute` takes to refill `bytes`.
    fn refill_time(bytes: u64, per_minute: u64) -> Duration {
        Duration::from_secs_f64(bytes as f64 * 60.0 / per_minute as f64)
    }

    fn budget(sandbox: &SandboxSettings, rate: &LogRate) -> LogBudget {
        LogBudget::new(sandbox, rate.clone(), Arc::new(ids()))
    }

    fn sandbox(bytes: u64, lines: u64, message: u64, per_minute: u64) -> SandboxSettings {
        SandboxSettings {
            log_limit_bytes: bytes,
            max_log_lines: lines,
            max_log_message_bytes: message,
            log_rate_bytes_per_minute: per_minute,
            ..SandboxSettings::default()
        }
    }

    /// What a line of the test ids costs besides its text.
    fn o() -> u64 {
        line_overhead(&ids())
    }

    #[test]
    fn lines_are_charged_text_plus_overhead_until_the_bytes_are_spent() {
        let s = sandbox(3 * (10 + o()), 100, 1000, u64::MAX / 2);
        let b = budget(&s, &LogRate::default());
        let now = Instant::now();
        for _ in 0..3 {
            assert_eq!(b.admit_at("0123456789", now).as_deref(), Some("0123456789"));
        }
        assert_eq!(b.admit_at("0123456789", now), None);
        assert_eq!(
            b.admit_at("", now),
            None,
            "nothing left, not even for empty lines"
        );
        let t = b.totals();
        assert_eq!((t.lines, t.bytes), (3, 3 * (10 + o())));
        assert_eq!(
            (t.dropped_lines, t.dropped_bytes, t.rate_limited_lines),
            (2, 10, 0)
        );
    }

    #[test]
    fn empty_lines_are_not_free_and_the_line_count_is_capped() {
        let s = sandbox(1 << 30, 1000, 1000, u64::MAX / 2);
        let b = budget(&s, &LogRate::default());
        let now = Instant::now();
        let logged = (0..65_537)
            .filter(|_| b.admit_at("", now).is_some())
            .count();
        assert_eq!(logged, 1000);
        let t = b.totals();
        assert_eq!((t.lines, t.dropped_lines), (1000, 64_537));
        assert_eq!(t.bytes, 1000 * o());
    }

    #[test]
    fn long_messages_are_cut_at_a_character_boundary() {
        let s = sandbox(1 << 20, 100, 300, u64::MAX / 2);
        let b = budget(&s, &LogRate::default());
        let text = "é".repeat(1000); // 2000 bytes
        let out = b.admit_at(&text, Instant::now()).expect("admitted");
        assert!(out.ends_with(TRUNCATED), "{out}");
        let kept = out.trim_end_matches(TRUNCATED);
        assert_eq!(kept.len(), 300);
        let t = b.totals();
        assert_eq!(
            (t.truncated, t.dropped_bytes, t.bytes),
            (1, 1700, 300 + o())
        );
    }

    #[test]
    fn lines_are_charged_as_json_writes_them() {
        let s = sandbox(1 << 20, 100, 1000, u64::MAX / 2);
        let b = budget(&s, &LogRate::default());
        let out = b
            .admit_at(r#"say "hi" \ "#, Instant::now())
            .expect("admitted");
        assert_eq!(b.totals().bytes, out.len() as u64 + 3 + o());
        // The ids are charged as often as a JSON line repeats them.
        let mut long = ids();
        long.task_name = "t".repeat(200);
        assert_eq!(line_overhead(&long), o() + 3 * 199);
    }

    #[test]
    fn lines_are_charged_as_escaped() {
        let s = sandbox(1 << 20, 100, 1000, u64::MAX / 2);
        let b = budget(&s, &LogRate::default());
        let out = b.admit_at("\u{1b}\n", Instant::now()).expect("admitted");
        assert_eq!(out, "\\u{1b}\\n");
        // JSON writes each backslash twice.
        assert_eq!(b.totals().bytes, out.len() as u64 + 2 + o());
    }

    #[test]
    fn the_task_rate_is_shared_by_attempts_and_refills_over_time() {
        let per_minute = 60 * (100 + o()); // one 100-byte line per second
        let s = sandbox(1 << 20, 1000, 1000, per_minute);
        let rate = LogRate::default();
        let line = "x".repeat(100);
        let t0 = Instant::now();
        // A minute's worth of burst, over two attempts.
        let a = budget(&s, &rate);
        let first = (0..40).filter(|_| a.admit_at(&line, t0).is_some()).count();
        let b = budget(&s, &rate);
        let second = (0..40).filter(|_| b.admit_at(&line, t0).is_some()).count();
        assert_eq!((first, second), (40, 20));
        assert_eq!(b.totals().rate_limited_lines, 20);
        assert_eq!(b.totals().dropped_lines, 20);
        // Ten seconds later, ten more lines (and not eleven).
        let t1 = t0 + refill_time(10 * (100 + o()), per_minute);
        let c = budget(&s, &rate);
        let third = (0..40).filter(|_| c.admit_at(&line, t1).is_some()).count();
        assert_eq!(third, 10);
        // The bucket never holds more than a minute's worth.
        let later = t1 + Duration::from_secs(3600);
        assert!((rate.available(per_minute, later) - per_minute as f64).abs() < 1e-6);
    }

    #[test]
    fn the_error_message_is_charged_and_cut_but_never_dropped() {
        let rate = LogRate::default();
        // Plenty of budget: cut at max_log_message_bytes only.
        let s = sandbox(1 << 20, 10, 1000, u64::MAX / 2);
        let b = budget(&s, &rate);
        let m = b.error_message("e".repeat(10 << 20));
        assert_eq!(m.trim_end_matches(TRUNCATED).len(), 1000);
        assert_eq!(b.totals().bytes, 1000 + o());
        // A short one is kept as it is.
        assert_eq!(b.error_message("short".into()), "short");

        // Budget spent by lines: the message keeps its floor.
        let s = sandbox(2 * (10 + o()), 10, 16 * 1024, u64::MAX / 2);
        let b = budget(&s, &rate);
        let now = Instant::now();
        while b.admit_at("0123456789", now).is_some() {}
        let m = b.error_message_at("e".repeat(5000), now);
        assert_eq!(m.trim_end_matches(TRUNCATED).len(), ERROR_MESSAGE_FLOOR);
        assert_eq!(b.totals().truncated, 1);

        // Rate spent: the floor again, and the bucket is left empty.
        let per_minute = 2500;
        let s = sandbox(1 << 20, 10, 16 * 1024, per_minute);
        let rate = LogRate::default();
        let b = budget(&s, &rate);
        assert!(b.admit_at(&"x".repeat(1500), now).is_some());
        let m = b.error_message_at("e".repeat(5000), now);
        assert_eq!(m.trim_end_matches(TRUNCATED).len(), ERROR_MESSAGE_FLOOR);
        assert!(rate.available(per_minute, now) < 1.0);
    }

    #[test]
    fn the_first_drop_warns_once_and_names_the_bound() {
        let s = sandbox(1 << 20, 2, 1000, u64::MAX / 2);
        let b = budget(&s, &LogRate::default());
        let out = logged(false, || {
            for _ in 0..10 {
                let _ = b.admit(tracing::Level::INFO, "line");
            }
        });
        assert_eq!(out.lines().count(), 1, "{out}");
        assert!(out.contains("max_log_lines is reached"), "{out}");
        assert_eq!(b.totals().dropped_lines, 8);
    }

    #[test]
    fn lines_the_filter_discards_cost_nothing() {
        let s = sandbox(1 << 20, 2, 1000, u64::MAX / 2);
        let b = budget(&s, &LogRate::default());
        // No subscriber: nothing is enabled.
        for _ in 0..10 {
            assert_eq!(b.admit(tracing::Level::ERROR, "line"), None);
        }
        assert_eq!(b.totals(), LogTotals::default());
    }
}
