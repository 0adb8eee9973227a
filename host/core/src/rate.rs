//! Fleet-wide token buckets (docs/semantics.md#rate-limits): the vocabulary shared by the
//! workers' limiters (a task's `rate_limit` on execution starts, a `sandbox.network` origin's
//! `rate_limit` on outbound requests) and the backends that keep the buckets in the database,
//! so every worker of a fleet draws from the same bucket.
//!
//! The arithmetic lives here, once: a backend locks the bucket's row, builds a [`Bucket`] from
//! it, calls [`Bucket::take`] or [`Bucket::pause`] at the database's `now`, and writes the
//! bucket back in the same transaction. [`MemoryBuckets`] is the in-process store for fast tests
//! and single-process use.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

use crate::ExecutionError;
use crate::time::SharedClock;

/// Largest `per_second` a rate may set.
pub const MAX_PER_SECOND: f64 = 1_000_000.0;
/// Largest `burst` a rate may set.
pub const MAX_BURST: u32 = 1_000_000;
/// Longest pause an upstream's `Retry-After` can impose on a bucket.
pub const MAX_PAUSE: Duration = Duration::from_secs(3600);
/// Longest bucket name (`task:<name>`, `origin:<scheme>://<host>:<port>`).
pub const MAX_BUCKET_CHARS: usize = 512;

/// A token bucket's rate: refills `per_second` tokens a second up to `burst`.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimit {
    /// Tokens added per second (> 0, ≤ [`MAX_PER_SECOND`]).
    pub per_second: f64,
    /// Most tokens the bucket holds (≥ 1, ≤ [`MAX_BURST`]); a new bucket starts full.
    pub burst: u32,
}

impl RateLimit {
    /// Checks the bounds; the message names the field and what is allowed.
    pub fn validate(self) -> Result<RateLimit, String> {
        if !(self.per_second.is_finite() && self.per_second > 0.0) {
            return Err(format!(
                "per_second must be a number > 0 (got {})",
                self.per_second
            ));
        }
        if self.per_second > MAX_PER_SECOND {
            return Err(format!(
                "per_second must be at most {MAX_PER_SECOND} (got {})",
                self.per_second
            ));
        }
        if self.burst < 1 || self.burst > MAX_BURST {
            return Err(format!(
                "burst must be an integer between 1 and {MAX_BURST} (got {})",
                self.burst
            ));
        }
        Ok(self)
    }
}

fn max_pause() -> chrono::Duration {
    chrono::Duration::seconds(MAX_PAUSE.as_secs() as i64)
}

/// The stored state of one bucket.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bucket {
    /// Tokens held at `refilled_at` (fractional).
    pub tokens: f64,
    /// When `tokens` was computed.
    pub refilled_at: DateTime<Utc>,
    /// No token is handed out before this (an upstream's `Retry-After`).
    pub paused_until: Option<DateTime<Utc>>,
}

/// What [`Bucket::take`] granted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Take {
    /// Tokens granted (0 ..= wanted).
    pub granted: u32,
    /// When none was granted: how long until the next token (or the pause's end).
    pub retry_in: Option<Duration>,
    /// Whether the bucket is paused by an upstream's `Retry-After` (then `granted` is 0).
    pub paused: bool,
}

impl Bucket {
    /// A new bucket: full at `now`.
    pub fn full(rate: RateLimit, now: DateTime<Utc>) -> Bucket {
        Bucket {
            tokens: f64::from(rate.burst),
            refilled_at: now,
            paused_until: None,
        }
    }

    /// Refills to `now` (a clock going backwards adds nothing) and takes up to `wanted` whole
    /// tokens. The bucket is updated in place: write it back.
    pub fn take(&mut self, rate: RateLimit, wanted: u32, now: DateTime<Utc>) -> Take {
        let elapsed = (now - self.refilled_at)
            .to_std()
            .unwrap_or(Duration::ZERO)
            .as_secs_f64();
        let burst = f64::from(rate.burst);
        self.tokens = (self.tokens.max(0.0) + elapsed * rate.per_second).min(burst);
        if now > self.refilled_at {
            self.refilled_at = now;
        }
        if let Some(until) = self.paused_until {
            if until > now {
                return Take {
                    granted: 0,
                    retry_in: Some((until - now).to_std().unwrap_or(Duration::ZERO)),
                    paused: true,
                };
            }
            self.paused_until = None;
        }
        let whole = self.tokens.floor();
        let granted = if whole >= f64::from(wanted) {
            wanted
        } else {
            // `whole` is in 0..wanted here, so the cast is exact.
            whole as u32
        };
        self.tokens -= f64::from(granted);
        let retry_in = if granted == 0 && wanted > 0 {
            let missing = (1.0 - self.tokens).max(0.0);
            Some(Duration::from_secs_f64(missing / rate.per_second))
        } else {
            None
        };
        Take {
            granted,
            retry_in,
            paused: false,
        }
    }

    /// Gives back `n` tokens taken and not used (never above `burst`).
    pub fn refund(&mut self, rate: RateLimit, n: u32) {
        self.tokens = (self.tokens + f64::from(n)).min(f64::from(rate.burst));
    }

    /// Pauses the bucket until `until` (capped at `now + MAX_PAUSE`); an earlier pause never
    /// shortens a later one.
    pub fn pause(&mut self, until: DateTime<Utc>, now: DateTime<Utc>) {
        let until = until.min(now + max_pause());
        if self.paused_until.is_none_or(|p| p < until) {
            self.paused_until = Some(until);
        }
    }
}

/// Token buckets shared by every worker of a fleet (a backend keeps them in the database; the
/// bucket's row is locked for the read-modify-write, so concurrent takers never over-draw).
#[async_trait]
pub trait RateLimitStore: Send + Sync {
    /// Takes up to `wanted` tokens from `bucket` (created full when missing) at the store's now.
    async fn take(
        &self,
        bucket: &str,
        rate: RateLimit,
        wanted: u32,
    ) -> Result<Take, ExecutionError>;

    /// Gives back `n` tokens taken and not used.
    async fn refund(&self, bucket: &str, rate: RateLimit, n: u32) -> Result<(), ExecutionError>;

    /// Pauses `bucket` until `until` for every worker (an upstream answered 429 with
    /// `Retry-After`).
    async fn pause(
        &self,
        bucket: &str,
        rate: RateLimit,
        until: DateTime<Utc>,
    ) -> Result<(), ExecutionError>;
}

/// One stored bucket as the dashboard and `/metrics` show it (docs/ui.md#rate-limits): its name
/// and state at its last take, refund or pause. The rate is the workers' configuration, not
/// stored, so `tokens` is the level at `refilled_at`, not refilled to now.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BucketState {
    /// The bucket's name ([`task_bucket`] or [`origin_bucket`]).
    pub bucket: String,
    /// The bucket's state.
    #[serde(flatten)]
    pub state: BucketSnapshot,
}

/// [`Bucket`] as serialised for a view.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct BucketSnapshot {
    /// Tokens held at `refilled_at`.
    pub tokens: f64,
    /// When the bucket was last taken from, refunded or paused.
    pub refilled_at: DateTime<Utc>,
    /// No token is handed out before this (an upstream's `Retry-After`).
    pub paused_until: Option<DateTime<Utc>>,
}

impl From<Bucket> for BucketSnapshot {
    fn from(b: Bucket) -> Self {
        BucketSnapshot {
            tokens: b.tokens,
            refilled_at: b.refilled_at,
            paused_until: b.paused_until,
        }
    }
}

impl BucketState {
    /// What the bucket limits: `task` (execution starts) or `origin` (outbound requests).
    pub fn kind(&self) -> &str {
        self.bucket.split_once(':').map_or("", |(k, _)| k)
    }

    /// The task's or origin's name, without the kind.
    pub fn target(&self) -> &str {
        self.bucket.split_once(':').map_or(&self.bucket, |(_, t)| t)
    }

    /// Whether an upstream's `Retry-After` pauses the bucket at `now`.
    pub fn paused_at(&self, now: DateTime<Utc>) -> bool {
        self.state.paused_until.is_some_and(|p| p > now)
    }

    /// Whether the bucket held less than one token at its last write (a taker was refused or
    /// took the last token), so callers were being held back then.
    pub fn drained(&self) -> bool {
        self.state.tokens < 1.0
    }
}

/// The stored buckets, paused first, then fewest tokens (docs/ui.md#rate-limits).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct BucketStates {
    /// Whether the store keeps buckets at all (tables created without `<T>_buckets` do not).
    pub kept: bool,
    /// At most the `limit` asked for.
    pub items: Vec<BucketState>,
    /// More buckets are stored than were listed.
    pub truncated: bool,
}

impl BucketStates {
    /// The rows `(bucket, tokens, refilled_at, paused_until)` a backend read with
    /// `LIMIT limit + 1`, in order: the extra row only says that more are stored. `None` is a
    /// store without the buckets table.
    pub fn from_rows(rows: Option<Vec<BucketRow>>, limit: u32) -> Self {
        let Some(rows) = rows else {
            return BucketStates::default();
        };
        let mut out = BucketStates {
            kept: true,
            ..BucketStates::default()
        };
        for (i, (bucket, tokens, refilled_at, paused_until)) in rows.into_iter().enumerate() {
            if i >= limit as usize {
                out.truncated = true;
                break;
            }
            out.items.push(BucketState {
                bucket,
                state: BucketSnapshot {
                    tokens,
                    refilled_at,
                    paused_until,
                },
            });
        }
        out
    }
}

/// `(bucket, tokens, refilled_at, paused_until)`: one stored bucket row.
pub type BucketRow = (String, f64, DateTime<Utc>, Option<DateTime<Utc>>);

/// The `LIKE` patterns of the buckets a view lists: the task and origin rate limits, not the
/// lock rows of `max_running` kept in the same table.
pub const LISTED_BUCKET_PREFIXES: [&str; 2] = ["task:", "origin:"];

/// The bucket name of a task's `rate_limit` on execution starts.
pub fn task_bucket(task_name: &str) -> String {
    format!("task:{task_name}")
}

/// The bucket name of an outbound origin's `rate_limit` (`origin` as `scheme://host:port`).
pub fn origin_bucket(origin: &str) -> String {
    format!("origin:{origin}")
}

/// Checks a bucket name (1–[`MAX_BUCKET_CHARS`] characters).
pub fn validate_bucket(bucket: &str) -> Result<(), ExecutionError> {
    let n = bucket.chars().count();
    if n == 0 || n > MAX_BUCKET_CHARS {
        return Err(ExecutionError::invalid(format!(
            "a rate-limit bucket name must have 1 to {MAX_BUCKET_CHARS} characters (got {n})"
        )));
    }
    Ok(())
}

/// The refusal of a store whose tables lack the rate-limit buckets table (tables created by the
/// reference or an older onestep, opened without `auto_create`).
pub const BUCKETS_TABLE_ABSENT: &str = "the rate-limit buckets table is absent (tables created by \
    the reference or an older onestep): rate limits cannot be kept; add it with `onestep migrate \
    --upgrade`";

/// One read-modify-write of a locked bucket, as every store applies it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BucketOp {
    /// [`RateLimitStore::take`] of `wanted` tokens.
    Take(u32),
    /// [`RateLimitStore::refund`] of `n` tokens.
    Refund(u32),
    /// [`RateLimitStore::pause`] until the instant.
    Pause(DateTime<Utc>),
}

impl BucketOp {
    /// Checks the bucket name and the rate before a store touches anything.
    pub fn check(bucket: &str, rate: RateLimit) -> Result<(), ExecutionError> {
        validate_bucket(bucket)?;
        rate.validate()
            .map(drop)
            .map_err(|m| ExecutionError::invalid(format!("rate limit of bucket '{bucket}': {m}")))
    }

    /// Applies the operation to `bucket` at `now` (truncated to microseconds, the precision the
    /// databases keep, so a stored bucket and an in-memory one compute alike); the answer of a
    /// take (a refund or a pause answers an empty take).
    pub fn apply(self, bucket: &mut Bucket, rate: RateLimit, now: DateTime<Utc>) -> Take {
        let now = crate::time::truncate_micros(now);
        match self {
            BucketOp::Take(wanted) => bucket.take(rate, wanted, now),
            BucketOp::Refund(n) => {
                bucket.refund(rate, n);
                Take::default()
            }
            BucketOp::Pause(until) => {
                bucket.pause(crate::time::truncate_micros(until), now);
                Take::default()
            }
        }
    }

    /// A new bucket, full at `now` (truncated like [`Self::apply`]).
    pub fn fresh(rate: RateLimit, now: DateTime<Utc>) -> Bucket {
        Bucket::full(rate, crate::time::truncate_micros(now))
    }
}

/// In-process buckets on an injected clock: for tests and for a single process.
#[derive(Debug)]
pub struct MemoryBuckets {
    clock: SharedClock,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl MemoryBuckets {
    /// Empty buckets on `clock`.
    pub fn new(clock: SharedClock) -> MemoryBuckets {
        MemoryBuckets {
            clock,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Runs `op` on `bucket` (created full when missing) at the clock's now.
    fn apply(&self, bucket: &str, rate: RateLimit, op: BucketOp) -> Result<Take, ExecutionError> {
        BucketOp::check(bucket, rate)?;
        let now = self.clock.now();
        let mut map = self
            .buckets
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let b = map
            .entry(bucket.to_owned())
            .or_insert_with(|| BucketOp::fresh(rate, now));
        Ok(op.apply(b, rate, now))
    }
}

impl MemoryBuckets {
    /// The buckets as [`BucketStates`] lists them: paused first (latest pause first), then
    /// fewest tokens, then by name; at most `limit`.
    pub fn states(&self, limit: u32) -> BucketStates {
        let map = self
            .buckets
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut rows: Vec<BucketRow> = map
            .iter()
            .filter(|(name, _)| LISTED_BUCKET_PREFIXES.iter().any(|p| name.starts_with(p)))
            .map(|(name, b)| (name.clone(), b.tokens, b.refilled_at, b.paused_until))
            .collect();
        drop(map);
        rows.sort_by(|a, b| {
            b.3.cmp(&a.3)
                .then(a.1.total_cmp(&b.1))
                .then_with(|| a.0.cmp(&b.0))
        });
        BucketStates::from_rows(Some(rows), limit)
    }
}

#[async_trait]
impl RateLimitStore for MemoryBuckets {
    async fn take(
        &self,
        bucket: &str,
        rate: RateLimit,
        wanted: u32,
    ) -> Result<Take, ExecutionError> {
        self.apply(bucket, rate, BucketOp::Take(wanted))
    }

    async fn refund(&self, bucket: &str, rate: RateLimit, n: u32) -> Result<(), ExecutionError> {
        self.apply(bucket, rate, BucketOp::Refund(n)).map(drop)
    }

    async fn pause(
        &self,
        bucket: &str,
        rate: RateLimit,
        until: DateTime<Utc>,
    ) -> Result<(), ExecutionError> {
        self.apply(bucket, rate, BucketOp::Pause(until)).map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn t(ms: i64) -> DateTime<Utc> {
        Utc.timestamp_millis_opt(1_700_000_000_000 + ms)
            .single()
            .unwrap_or_else(Utc::now)
    }

    const RATE: RateLimit = RateLimit {
        per_second: 2.0,
        burst: 3,
    };

    #[test]
    fn memory_states_list_paused_then_fewest_tokens_without_lock_rows() {
        let clock: SharedClock = std::sync::Arc::new(crate::time::SystemClock);
        let m = MemoryBuckets::new(clock);
        let now = Utc::now();
        for (bucket, op) in [
            ("task:b", BucketOp::Take(1)),
            ("task:a", BucketOp::Take(3)),
            (
                "origin:http://x:80",
                BucketOp::Pause(now + chrono::Duration::seconds(30)),
            ),
            ("max_running:t", BucketOp::Take(1)),
        ] {
            assert!(m.apply(bucket, RATE, op).is_ok());
        }
        let s = m.states(10);
        let names: Vec<&str> = s.items.iter().map(|b| b.bucket.as_str()).collect();
        assert_eq!(names, ["origin:http://x:80", "task:a", "task:b"]);
        assert!(s.kept && !s.truncated);
        assert!(s.items[0].paused_at(now) && !s.items[1].paused_at(now));
        assert!(s.items[1].drained() && !s.items[2].drained());
        assert_eq!(
            (s.items[0].kind(), s.items[0].target()),
            ("origin", "http://x:80")
        );
        let cut = m.states(1);
        assert_eq!(cut.items.len(), 1);
        assert!(cut.truncated);
    }

    #[test]
    fn a_new_bucket_grants_its_burst_then_refills_at_the_rate() {
        let mut b = Bucket::full(RATE, t(0));
        assert_eq!(b.take(RATE, 5, t(0)).granted, 3);
        let none = b.take(RATE, 1, t(0));
        assert_eq!(none.granted, 0);
        assert_eq!(none.retry_in, Some(Duration::from_millis(500)));
        assert_eq!(b.take(RATE, 1, t(500)).granted, 1);
        // Ten idle seconds refill to the burst, never beyond.
        assert_eq!(b.take(RATE, 10, t(10_500)).granted, 3);
    }

    #[test]
    fn a_pause_grants_nothing_until_it_ends_and_never_shortens() {
        let mut b = Bucket::full(RATE, t(0));
        b.pause(t(2_000), t(0));
        b.pause(t(1_000), t(0));
        let paused = b.take(RATE, 1, t(1_500));
        assert!(paused.paused);
        assert_eq!(paused.granted, 0);
        assert_eq!(paused.retry_in, Some(Duration::from_millis(500)));
        assert_eq!(b.take(RATE, 1, t(2_000)).granted, 1);
    }

    #[test]
    fn a_pause_is_capped_and_a_clock_going_back_adds_nothing() {
        let mut b = Bucket::full(RATE, t(0));
        b.pause(t(10_000_000), t(0));
        assert_eq!(b.paused_until, Some(t(0) + max_pause()));
        let mut c = Bucket::full(RATE, t(1_000));
        assert_eq!(c.take(RATE, 3, t(1_000)).granted, 3);
        assert_eq!(c.take(RATE, 1, t(0)).granted, 0);
        c.refund(RATE, 5);
        assert_eq!(c.tokens, 3.0);
    }

    #[test]
    fn rates_out_of_bounds_are_refused_with_the_field() {
        let bad = RateLimit {
            per_second: 0.0,
            burst: 1,
        };
        assert!(
            bad.validate()
                .err()
                .unwrap_or_default()
                .contains("per_second")
        );
        let bad = RateLimit {
            per_second: 1.0,
            burst: 0,
        };
        assert!(bad.validate().err().unwrap_or_default().contains("burst"));
        assert!(RATE.validate().is_ok());
    }
}
