//! Rate-limit bucket cases (docs/semantics.md#rate-limits): a new bucket grants its burst then
//! refills at the rate on the store's clock, a pause grants nothing until it ends, a refund
//! gives tokens back (never above the burst), concurrent takers never draw more than
//! `burst + rate × elapsed`, names are checked, and two buckets are independent. On tables
//! without the buckets table (reference tables before `onestep migrate --upgrade`) every call is
//! refused with the upgrade message, which [`supported`] checks before a case returns early.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use chrono::TimeDelta;
use onestep_core::rate::{BUCKETS_TABLE_ABSENT, MAX_BUCKET_CHARS, RateLimit, RateLimitStore};

use super::case;
use crate::suite::{Case, Fixture};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case("buckets_burst_then_refill", |fx| {
            Box::pin(burst_then_refill(fx))
        }),
        case("buckets_pause_and_its_end", |fx| Box::pin(pause(fx))),
        case("buckets_refund", |fx| Box::pin(refund(fx))),
        case("buckets_concurrent_takers_never_overdraw", |fx| {
            Box::pin(concurrent(fx))
        }),
        case("buckets_names_and_rates_are_checked", |fx| {
            Box::pin(validation(fx))
        }),
        case("buckets_are_independent", |fx| Box::pin(independent(fx))),
    ]
}

const RATE: RateLimit = RateLimit {
    per_second: 2.0,
    burst: 3,
};

/// Whether the store keeps buckets; `false` (checked: the refusal naming the upgrade) on tables
/// without the buckets table.
async fn supported(fx: &Fixture) -> bool {
    match fx.buckets.take("task:probe", RATE, 0).await {
        Ok(t) => {
            assert_eq!(t.granted, 0, "nothing wanted, nothing granted");
            true
        }
        Err(e) => {
            let text = e.to_string();
            assert_eq!(e.code(), "invalid_argument", "{text}");
            assert!(
                text.contains(BUCKETS_TABLE_ABSENT) && text.contains("onestep migrate --upgrade"),
                "{text}"
            );
            false
        }
    }
}

async fn take(
    fx: &Fixture,
    bucket: &str,
    rate: RateLimit,
    wanted: u32,
) -> onestep_core::rate::Take {
    fx.buckets.take(bucket, rate, wanted).await.expect("take")
}

async fn burst_then_refill(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    let b = "task:refill";
    let first = take(&fx, b, RATE, 5).await;
    assert_eq!(
        (first.granted, first.paused),
        (3, false),
        "a new bucket is full"
    );
    assert_eq!(first.retry_in, None);
    let none = take(&fx, b, RATE, 1).await;
    assert_eq!(none.granted, 0);
    assert_eq!(
        none.retry_in,
        Some(Duration::from_millis(500)),
        "one token at 2/s"
    );
    fx.clock.advance(0.25);
    let half = take(&fx, b, RATE, 1).await;
    assert_eq!(half.granted, 0, "half a token is not a token");
    assert_eq!(half.retry_in, Some(Duration::from_millis(250)));
    fx.clock.advance(0.25);
    assert_eq!(
        take(&fx, b, RATE, 2).await.granted,
        1,
        "one token after 0.5 s"
    );
    fx.clock.advance(1.0);
    assert_eq!(take(&fx, b, RATE, 1).await.granted, 1);
    assert_eq!(take(&fx, b, RATE, 1).await.granted, 1);
    assert_eq!(take(&fx, b, RATE, 1).await.granted, 0);
    // Ten idle seconds refill to the burst, never beyond.
    fx.clock.advance(10.0);
    assert_eq!(take(&fx, b, RATE, 10).await.granted, 3);
    // A clock going back adds nothing.
    fx.clock.advance(-5.0);
    assert_eq!(take(&fx, b, RATE, 1).await.granted, 0);
}

async fn pause(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    let b = "origin:https://api.example:443";
    let now = fx.clock.now_value();
    fx.buckets
        .pause(b, RATE, now + TimeDelta::seconds(2))
        .await
        .expect("pause a new bucket");
    // An earlier pause never shortens a later one.
    fx.buckets
        .pause(b, RATE, now + TimeDelta::seconds(1))
        .await
        .expect("shorter pause");
    let paused = take(&fx, b, RATE, 1).await;
    assert_eq!((paused.granted, paused.paused), (0, true));
    assert_eq!(paused.retry_in, Some(Duration::from_secs(2)));
    fx.clock.advance(1.5);
    let still = take(&fx, b, RATE, 1).await;
    assert_eq!((still.granted, still.paused), (0, true));
    assert_eq!(still.retry_in, Some(Duration::from_millis(500)));
    fx.clock.advance(0.5);
    let after = take(&fx, b, RATE, 5).await;
    assert!(!after.paused, "the pause ended at its instant");
    assert_eq!(
        after.granted, 3,
        "the bucket refilled (to its burst) while paused"
    );
    // A pause is capped at an hour.
    let now = fx.clock.now_value();
    fx.buckets
        .pause(b, RATE, now + TimeDelta::days(2))
        .await
        .expect("long pause");
    let capped = take(&fx, b, RATE, 1).await;
    assert!(capped.paused);
    assert_eq!(capped.retry_in, Some(onestep_core::rate::MAX_PAUSE));
}

async fn refund(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    let b = "task:refund";
    assert_eq!(take(&fx, b, RATE, 3).await.granted, 3);
    fx.buckets.refund(b, RATE, 2).await.expect("refund");
    assert_eq!(take(&fx, b, RATE, 5).await.granted, 2, "the refund is back");
    fx.buckets.refund(b, RATE, 100).await.expect("refund");
    assert_eq!(
        take(&fx, b, RATE, 100).await.granted,
        3,
        "never above the burst"
    );
    // A refund to a bucket never taken from leaves it full.
    fx.buckets
        .refund("task:fresh", RATE, 7)
        .await
        .expect("refund");
    assert_eq!(take(&fx, "task:fresh", RATE, 9).await.granted, 3);
}

/// 8 takers hammer one bucket (50/s, burst 10) while the clock moves 2 s in steps of 0.1 s;
/// each step waits until a taker that started after it was refused (the bucket is empty), so
/// no refill is lost to the burst and the total is known: the burst plus 5 tokens a step.
async fn concurrent(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    const STEPS: u64 = 20;
    let rate = RateLimit {
        per_second: 50.0,
        burst: 10,
    };
    let granted = Arc::new(AtomicU64::new(0));
    let epoch = Arc::new(AtomicU64::new(0));
    let drained = Arc::new(AtomicU64::new(u64::MAX));
    let done = Arc::new(AtomicBool::new(false));
    let mut takers = Vec::new();
    for i in 0..8u32 {
        let store: Arc<dyn RateLimitStore> = Arc::clone(&fx.buckets);
        let (granted, epoch, drained, done) = (
            Arc::clone(&granted),
            Arc::clone(&epoch),
            Arc::clone(&drained),
            Arc::clone(&done),
        );
        takers.push(tokio::spawn(async move {
            let wanted = 1 + i % 3;
            while !done.load(Ordering::SeqCst) {
                let seen = epoch.load(Ordering::SeqCst);
                let t = store
                    .take("task:hammered", rate, wanted)
                    .await
                    .expect("take under contention");
                assert!(t.granted <= wanted);
                granted.fetch_add(u64::from(t.granted), Ordering::SeqCst);
                if t.granted == 0 {
                    drained.store(seen, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                }
            }
        }));
    }
    let drive = async {
        for step in 0..=STEPS {
            if step > 0 {
                fx.clock.advance(0.1);
                epoch.store(step, Ordering::SeqCst);
            }
            while drained.load(Ordering::SeqCst) != step {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            let so_far = granted.load(Ordering::SeqCst);
            let bound = 10 + 5 * step;
            assert!(
                so_far <= bound,
                "step {step}: granted {so_far} > burst + rate × elapsed = {bound}"
            );
        }
    };
    if tokio::time::timeout(Duration::from_secs(120), drive)
        .await
        .is_err()
    {
        panic!("the takers never emptied the bucket");
    }
    done.store(true, Ordering::SeqCst);
    for t in takers {
        t.await.expect("taker");
    }
    let total = granted.load(Ordering::SeqCst);
    // Exactly 110 tokens were added; at most a fraction of one can be left by float rounding.
    assert!(
        (109..=110).contains(&total),
        "granted {total}, expected burst 10 + 50/s × 2 s = 110"
    );
}

async fn validation(fx: Fixture) {
    for bad in [String::new(), "x".repeat(MAX_BUCKET_CHARS + 1)] {
        let e = fx
            .buckets
            .take(&bad, RATE, 1)
            .await
            .expect_err("bad bucket name");
        assert_eq!(e.code(), "invalid_argument", "{e}");
        assert!(e.to_string().contains("bucket name"), "{e}");
        let e = fx.buckets.refund(&bad, RATE, 1).await.expect_err("refund");
        assert_eq!(e.code(), "invalid_argument", "{e}");
        let now = fx.clock.now_value();
        let e = fx.buckets.pause(&bad, RATE, now).await.expect_err("pause");
        assert_eq!(e.code(), "invalid_argument", "{e}");
    }
    for (per_second, burst, field) in [
        (0.0, 1, "per_second"),
        (f64::NAN, 1, "per_second"),
        (1.0, 0, "burst"),
    ] {
        let e = fx
            .buckets
            .take("task:t", RateLimit { per_second, burst }, 1)
            .await
            .expect_err("bad rate");
        assert_eq!(e.code(), "invalid_argument", "{e}");
        assert!(e.to_string().contains(field), "{e}");
    }
    if !supported(&fx).await {
        return;
    }
    // The longest name, in characters (not bytes), is kept.
    let longest = "é".repeat(MAX_BUCKET_CHARS);
    assert_eq!(take(&fx, &longest, RATE, 5).await.granted, 3);
    assert_eq!(
        take(&fx, &longest, RATE, 1).await.granted,
        0,
        "the same bucket"
    );
}

async fn independent(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    assert_eq!(take(&fx, "task:a", RATE, 3).await.granted, 3);
    // Names differing in case or by a trailing space are other buckets.
    for other in ["task:b", "task:A", "task:a ", "origin:task:a"] {
        assert_eq!(
            take(&fx, other, RATE, 5).await.granted,
            3,
            "{other:?} is full"
        );
    }
    assert_eq!(
        take(&fx, "task:a", RATE, 1).await.granted,
        0,
        "task:a stays empty"
    );
    // Each bucket keeps the rate it is used with.
    let fast = RateLimit {
        per_second: 10.0,
        burst: 1,
    };
    assert_eq!(take(&fx, "task:fast", fast, 1).await.granted, 1);
    fx.clock.advance(0.1);
    assert_eq!(take(&fx, "task:fast", fast, 1).await.granted, 1);
    assert_eq!(
        take(&fx, "task:a", RATE, 1).await.granted,
        0,
        "0.1 s is a fifth of a token"
    );
}
