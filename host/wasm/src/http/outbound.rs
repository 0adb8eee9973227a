//! Fleet-wide outbound rate limits (`sandbox.network.rate_limits`,
//! docs/semantics.md#outbound-rate-limits): before a request to an allowed origin with a
//! `rate_limit` is sent, [`acquire`] takes one token from the origin's bucket in the
//! [`RateLimitStore`] every worker of the fleet shares (the database of the task's source). With
//! no token it sleeps until the bucket's next one (the store's `retry_in`, at most
//! [`MAX_STEP`] per round) and asks again; the wait ends early when the attempt is cancelled or
//! its deadline passes, so it counts against the attempt's `timeout_s`. A response `429` with
//! `Retry-After` ([`retry_after`]) pauses the bucket until then for the whole fleet.
//!
//! A store that cannot be read fails the request (closed, never past the limit) with
//! `internal-error` naming the origin; the failure is counted (`errors`) and logged.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use onestep_core::rate::{RateLimit, RateLimitStore};
use wasmtime_wasi_http::Error;

use crate::cancel::CancelHandle;

/// Shortest sleep between two asks (a bucket a hair short of its next token).
const MIN_STEP: Duration = Duration::from_millis(1);
/// Longest sleep between two asks (a pause's end is asked again at most this late).
pub(crate) const MAX_STEP: Duration = Duration::from_secs(5);

/// What one attempt's requests to one rate-limited origin did with its bucket, in
/// [`Report::rate_limits`](crate::Report::rate_limits), the worker's metrics and the attempt's
/// diagnostics.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct OriginLimitTotals {
    /// The allow entry as written (`scheme://host:port`, host possibly `*.suffix`).
    pub origin: String,
    /// Tokens taken (requests let through).
    pub tokens: u64,
    /// Requests that had to wait for a token.
    pub waits: u64,
    /// Time spent waiting for tokens, in all.
    pub waited: Duration,
    /// `429` responses with a `Retry-After` that paused the origin for the fleet.
    pub pauses: u64,
    /// Requests failed because the bucket could not be read or paused (the store's error).
    pub errors: u64,
}

/// Per-origin tallies of one attempt.
#[derive(Debug, Default)]
pub(crate) struct LimitTally {
    by_origin: Mutex<BTreeMap<String, OriginLimitTotals>>,
}

impl LimitTally {
    fn with(&self, origin: &str, f: impl FnOnce(&mut OriginLimitTotals)) {
        let mut map = self.by_origin.lock().unwrap_or_else(|p| p.into_inner());
        let entry = map
            .entry(origin.to_owned())
            .or_insert_with(|| OriginLimitTotals {
                origin: origin.to_owned(),
                ..OriginLimitTotals::default()
            });
        f(entry);
    }

    /// A snapshot, by origin.
    pub(crate) fn totals(&self) -> Vec<OriginLimitTotals> {
        self.by_origin
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }
}

/// One limited origin of a request: its bucket, rate and the store that keeps it.
#[derive(Clone)]
pub(crate) struct Limited {
    pub(crate) store: Arc<dyn RateLimitStore>,
    pub(crate) origin: String,
    pub(crate) bucket: String,
    pub(crate) rate: RateLimit,
    pub(crate) tally: Arc<LimitTally>,
}

/// Why a request got no token.
#[derive(Debug)]
pub(crate) enum NoToken {
    /// The attempt was cancelled while waiting.
    Cancelled,
    /// The attempt's deadline passed while waiting.
    Deadline,
    /// The store failed.
    Store(String),
}

impl NoToken {
    /// The `wasi:http` error the guest sees.
    pub(crate) fn error(&self, origin: &str) -> Error {
        let text = match self {
            NoToken::Cancelled => {
                format!(
                    "the attempt was cancelled while waiting for a token of the outbound rate limit of {origin}"
                )
            }
            NoToken::Deadline => {
                format!(
                    "the attempt's deadline passed while waiting for a token of the outbound rate limit of {origin}"
                )
            }
            NoToken::Store(e) => {
                format!("the outbound rate limit of {origin} cannot be read: {e}")
            }
        };
        Error::InternalError(Some(text))
    }
}

impl Limited {
    /// Takes one token, waiting for it as long as needed (until `cancel` or `deadline`).
    /// Returns how long it waited when there was no token at once, and whether it got one.
    pub(crate) async fn acquire(
        &self,
        cancel: &CancelHandle,
        deadline: Option<Instant>,
    ) -> (Option<Duration>, Result<(), NoToken>) {
        let started = Instant::now();
        let mut waited = false;
        let result = loop {
            if cancel.is_cancelled() {
                break Err(NoToken::Cancelled);
            }
            let take = match self.store.take(&self.bucket, self.rate, 1).await {
                Ok(t) => t,
                Err(e) => {
                    self.tally.with(&self.origin, |t| t.errors += 1);
                    tracing::warn!(
                        origin = %self.origin,
                        bucket = %self.bucket,
                        error = %e,
                        "outbound rate-limit bucket unavailable: the request fails"
                    );
                    break Err(NoToken::Store(e.to_string()));
                }
            };
            if take.granted >= 1 {
                self.tally.with(&self.origin, |t| t.tokens += 1);
                break Ok(());
            }
            waited = true;
            let step = take.retry_in.unwrap_or(MIN_STEP).clamp(MIN_STEP, MAX_STEP);
            let until = deadline.map(tokio::time::Instant::from);
            tokio::select! {
                biased;
                _ = cancel.cancelled() => break Err(NoToken::Cancelled),
                _ = async {
                    match until {
                        Some(d) => tokio::time::sleep_until(d).await,
                        None => std::future::pending().await,
                    }
                } => break Err(NoToken::Deadline),
                _ = tokio::time::sleep(step) => {}
            }
        };
        let wait = waited.then(|| started.elapsed());
        if let Some(d) = wait {
            self.tally.with(&self.origin, |t| {
                t.waits += 1;
                t.waited += d;
            });
        }
        (wait, result)
    }

    /// After a response `status` with `headers`: a `429` with a `Retry-After` in the future
    /// pauses the origin's bucket for the fleet until then (capped by the store at
    /// [`MAX_PAUSE`](onestep_core::rate::MAX_PAUSE)). A store failure is logged and counted;
    /// the response still reaches the guest.
    pub(crate) async fn after_response(&self, status: http::StatusCode, headers: &http::HeaderMap) {
        if status != http::StatusCode::TOO_MANY_REQUESTS {
            return;
        }
        let Some(until) = retry_after(headers, Utc::now()) else {
            return;
        };
        match self.store.pause(&self.bucket, self.rate, until).await {
            Ok(()) => {
                self.tally.with(&self.origin, |t| t.pauses += 1);
                tracing::info!(
                    origin = %self.origin,
                    until = %until.to_rfc3339(),
                    "outbound origin answered 429 with Retry-After: paused for the fleet"
                );
            }
            Err(e) => {
                self.tally.with(&self.origin, |t| t.errors += 1);
                tracing::warn!(
                    origin = %self.origin,
                    bucket = %self.bucket,
                    error = %e,
                    "could not pause the outbound rate-limit bucket after a 429"
                );
            }
        }
    }
}

/// When a response's `Retry-After` (delay-seconds or an HTTP-date,
/// docs/semantics.md#outbound-rate-limits) ends, if it is a valid value after `now`. Delays
/// beyond [`MAX_PAUSE`](onestep_core::rate::MAX_PAUSE) are cut to it.
pub(crate) fn retry_after(headers: &http::HeaderMap, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
    let value = headers
        .get(http::header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim();
    let max = onestep_core::rate::MAX_PAUSE.as_secs();
    let until = if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // An overlong number of digits is a very long delay.
        let secs = value.parse::<u64>().unwrap_or(max).min(max);
        now + chrono::Duration::seconds(i64::try_from(secs).ok()?)
    } else {
        let at = httpdate::parse_http_date(value).ok()?;
        DateTime::<Utc>::from(at).min(now + chrono::Duration::seconds(i64::try_from(max).ok()?))
    };
    (until > now).then_some(until)
}

#[cfg(test)]
mod tests {
    use super::*;
    use onestep_core::rate::{MemoryBuckets, origin_bucket};
    use onestep_core::time::SystemClock;

    fn headers(v: &str) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        h.insert(
            http::header::RETRY_AFTER,
            http::HeaderValue::from_str(v).expect("header"),
        );
        h
    }

    fn limited(rate: RateLimit) -> Limited {
        Limited {
            store: Arc::new(MemoryBuckets::new(Arc::new(SystemClock))),
            origin: "http://127.0.0.1:9".into(),
            bucket: origin_bucket("http://127.0.0.1:9"),
            rate,
            tally: Arc::default(),
        }
    }

    #[test]
    fn retry_after_reads_seconds_and_dates_and_refuses_the_rest() {
        let now = DateTime::<Utc>::from(
            httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").expect("date"),
        );
        assert_eq!(
            retry_after(&headers("120"), now),
            Some(now + chrono::Duration::seconds(120))
        );
        assert_eq!(
            retry_after(&headers("Sun, 06 Nov 1994 08:50:37 GMT"), now),
            Some(now + chrono::Duration::seconds(60))
        );
        // Capped at an hour, in both spellings.
        assert_eq!(
            retry_after(&headers("99999999999999999999999"), now),
            Some(now + chrono::Duration::seconds(3600))
        );
        assert_eq!(
            retry_after(&headers("Mon, 07 Nov 1994 08:49:37 GMT"), now),
            Some(now + chrono::Duration::seconds(3600))
        );
        for none in [
            "0",
            "-5",
            "1.5",
            "soon",
            "",
            "Sun, 06 Nov 1994 08:49:00 GMT",
        ] {
            assert_eq!(retry_after(&headers(none), now), None, "{none:?}");
        }
        assert_eq!(retry_after(&http::HeaderMap::new(), now), None);
    }

    #[tokio::test]
    async fn a_request_past_the_burst_waits_for_the_next_token() {
        // A rate of 1,000/s keeps the real wait short.
        let l = limited(RateLimit {
            per_second: 1000.0,
            burst: 2,
        });
        let cancel = CancelHandle::new();
        for _ in 0..5 {
            l.acquire(&cancel, None).await.1.expect("token");
        }
        let t = l.tally.totals();
        assert_eq!(t.len(), 1);
        assert_eq!(t[0].tokens, 5);
        assert!(t[0].waits >= 1, "{t:?}");
    }

    #[tokio::test]
    async fn a_wait_ends_at_a_cancel_or_the_deadline() {
        let l = limited(RateLimit {
            per_second: 0.001,
            burst: 1,
        });
        let cancel = CancelHandle::new();
        let (wait, got) = l.acquire(&cancel, None).await;
        assert!(wait.is_none() && got.is_ok(), "the burst: {wait:?} {got:?}");
        let deadline = Instant::now() + Duration::from_millis(50);
        assert!(matches!(
            l.acquire(&cancel, Some(deadline)).await,
            (Some(_), Err(NoToken::Deadline))
        ));
        let c2 = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            c2.cancel();
        });
        assert!(matches!(
            l.acquire(&cancel, None).await,
            (Some(_), Err(NoToken::Cancelled))
        ));
        let t = &l.tally.totals()[0];
        assert_eq!((t.tokens, t.waits), (1, 2), "{t:?}");
        assert!(t.waited >= Duration::from_millis(60), "{t:?}");
        let e = NoToken::Deadline.error("http://x:80").to_string();
        assert!(e.contains("http://x:80"), "{e}");
    }

    /// A store whose database is gone.
    struct Down;

    #[async_trait::async_trait]
    impl RateLimitStore for Down {
        async fn take(
            &self,
            _: &str,
            _: RateLimit,
            _: u32,
        ) -> Result<onestep_core::rate::Take, onestep_core::ExecutionError> {
            Err(onestep_core::ExecutionError::invalid(
                "the database is down",
            ))
        }
        async fn refund(
            &self,
            _: &str,
            _: RateLimit,
            _: u32,
        ) -> Result<(), onestep_core::ExecutionError> {
            Err(onestep_core::ExecutionError::invalid(
                "the database is down",
            ))
        }
        async fn pause(
            &self,
            _: &str,
            _: RateLimit,
            _: DateTime<Utc>,
        ) -> Result<(), onestep_core::ExecutionError> {
            Err(onestep_core::ExecutionError::invalid(
                "the database is down",
            ))
        }
    }

    #[tokio::test]
    async fn a_bucket_that_cannot_be_read_fails_the_request_closed() {
        let l = Limited {
            store: Arc::new(Down),
            ..limited(RateLimit {
                per_second: 1.0,
                burst: 1,
            })
        };
        let (wait, got) = l.acquire(&CancelHandle::new(), None).await;
        assert!(wait.is_none(), "{wait:?}");
        let Err(no) = got else {
            panic!("a request went out without a token");
        };
        let e = no.error(&l.origin).to_string();
        assert!(
            e.contains("the outbound rate limit of http://127.0.0.1:9 cannot be read")
                && e.contains("the database is down"),
            "{e}"
        );
        // A pause that cannot be written is counted; the response still goes to the guest.
        l.after_response(http::StatusCode::TOO_MANY_REQUESTS, &headers("5"))
            .await;
        let t = &l.tally.totals()[0];
        assert_eq!((t.tokens, t.errors, t.pauses), (0, 2, 0), "{t:?}");
    }

    #[tokio::test]
    async fn a_429_with_retry_after_pauses_the_bucket_for_everyone() {
        let l = limited(RateLimit {
            per_second: 1000.0,
            burst: 10,
        });
        let other = Limited {
            tally: Arc::default(),
            ..l.clone()
        };
        l.after_response(http::StatusCode::OK, &headers("30")).await;
        l.after_response(http::StatusCode::TOO_MANY_REQUESTS, &http::HeaderMap::new())
            .await;
        let free = l.store.take(&l.bucket, l.rate, 1).await.expect("take");
        assert_eq!(free.granted, 1, "only a 429 with Retry-After pauses");
        l.after_response(http::StatusCode::TOO_MANY_REQUESTS, &headers("30"))
            .await;
        let paused = other
            .store
            .take(&other.bucket, other.rate, 1)
            .await
            .expect("take");
        assert!(paused.paused && paused.granted == 0, "{paused:?}");
        assert!(
            paused.retry_in.is_some_and(|d| d > Duration::from_secs(25)),
            "{paused:?}"
        );
        assert_eq!(l.tally.totals()[0].pauses, 1);
    }
}
