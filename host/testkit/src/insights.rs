//! One backend-agnostic check of [`ExecutionInsights`] (the dashboard's overview and the API's
//! `onestep_executions` gauge) and of [`ExecutionStore::attempts`], run by each SQL backend's
//! tests on a real server: exact grouped counts per namespace, task and status, the last-hour
//! sample and its truncation, and the attempts of an execution in order.
// Test support: a failed set-up step panics like an assertion.
#![allow(clippy::expect_used, clippy::panic)]

use chrono::{Duration, Utc};
use onestep_core::ExecutionStatus as S;
use onestep_core::execution::Completion;
use onestep_core::ports::{ExecutionInsights, ExecutionStore, LeaseStore};
use serde_json::json;

use crate::builders::{claim, handler_error, prepared};

/// Seeds two namespaces, then checks every insight. `store` must be empty of the namespaces
/// `ins-a` and `ins-b`.
pub async fn counts_recent_and_attempts<St>(store: &St, insights: &dyn ExecutionInsights)
where
    St: ExecutionStore + LeaseStore,
{
    for i in 0..3 {
        store
            .submit(prepared("ins-a", "x", json!({"i": i})))
            .await
            .expect("submit");
    }
    store
        .submit(prepared("ins-a", "y", json!({})))
        .await
        .expect("submit");
    store
        .submit(prepared("ins-b", "x", json!({})))
        .await
        .expect("submit");
    let leases = store
        .claim(&claim("ins-a", "x", 2, 30.0, "w-ins"))
        .await
        .expect("claim");
    assert_eq!(leases.len(), 2);
    let ok_id = leases[0].execution.id;
    store
        .complete(&leases[0].lease_ref(), &Completion::succeeded(json!(1)))
        .await
        .expect("complete");
    store
        .complete(
            &leases[1].lease_ref(),
            &Completion::failed(handler_error("ValueError")),
        )
        .await
        .expect("complete");

    let got: Vec<(String, S, u64)> = insights
        .counts_by_task_status("ins-a")
        .await
        .expect("counts")
        .into_iter()
        .map(|c| (c.task_name, c.status, c.count))
        .collect();
    let mut want = vec![
        ("x".to_owned(), S::Queued, 1),
        ("x".to_owned(), S::Succeeded, 1),
        ("x".to_owned(), S::Failed, 1),
        ("y".to_owned(), S::Queued, 1),
    ];
    let mut sorted = got.clone();
    sorted.sort_by(|a, b| (&a.0, a.1.as_str()).cmp(&(&b.0, b.1.as_str())));
    want.sort_by(|a, b| (&a.0, a.1.as_str()).cmp(&(&b.0, b.1.as_str())));
    assert_eq!(sorted, want, "counts of ins-a");

    let mut all: Vec<(String, String, S, u64)> = insights
        .counts_by_namespace(&["ins-a".into(), "ins-b".into(), "ins-none".into()])
        .await
        .expect("counts by namespace")
        .into_iter()
        .map(|(ns, c)| (ns, c.task_name, c.status, c.count))
        .collect();
    all.sort_by(|a, b| (&a.0, &a.1, a.2.as_str()).cmp(&(&b.0, &b.1, b.2.as_str())));
    assert_eq!(all.len(), 5, "{all:?}");
    assert!(
        all.contains(&("ins-b".into(), "x".into(), S::Queued, 1)),
        "{all:?}"
    );
    assert_eq!(
        all.iter()
            .filter(|r| r.0 == "ins-a")
            .map(|r| r.3)
            .sum::<u64>(),
        4
    );
    assert!(
        insights
            .counts_by_namespace(&[])
            .await
            .expect("no namespaces")
            .is_empty()
    );

    let since = Utc::now() - Duration::hours(1);
    let recent = insights
        .recent_activity("ins-a", since, 100)
        .await
        .expect("recent");
    assert_eq!(recent.sampled, 4, "{recent:?}");
    assert!(!recent.truncated);
    assert_eq!(
        (recent.succeeded, recent.failed, recent.finished),
        (1, 1, 2)
    );
    assert_eq!(recent.queue_waits_us.len(), 2, "the two started ones");
    assert!(recent.queue_waits_us.iter().all(|w| *w >= 0));
    let cut = insights
        .recent_activity("ins-a", since, 2)
        .await
        .expect("recent, cut");
    assert!(cut.truncated && cut.sampled == 2, "{cut:?}");
    let future = insights
        .recent_activity("ins-a", Utc::now() + Duration::hours(1), 100)
        .await
        .expect("recent, none");
    assert_eq!(future.sampled, 0);

    // The busiest fairness keys: task z's key t1 has 2 waiting and 1 running; the finished
    // rows count nowhere.
    for i in 0..3 {
        let req = onestep_core::request::SubmitRequest {
            task_name: "z".into(),
            payload: json!({"i": i}),
            fairness_key: Some("t1".into()),
            ..onestep_core::request::SubmitRequest::default()
        };
        store
            .submit(crate::builders::prepare("ins-a", &req))
            .await
            .expect("submit z");
    }
    let z = store
        .claim(&claim("ins-a", "z", 1, 30.0, "w-ins"))
        .await
        .expect("claim z");
    assert_eq!(z.len(), 1);
    let loads = insights
        .key_loads(&["ins-a".into(), "ins-b".into()], 10)
        .await
        .expect("key loads");
    let rows: Vec<(&str, &str, &str, u64, u64)> = loads
        .keys
        .iter()
        .map(|k| {
            let (ns, t, key) = (&k.namespace, &k.task_name, &k.fairness_key);
            (ns.as_str(), t.as_str(), key.as_str(), k.waiting, k.running)
        })
        .collect();
    assert_eq!(
        rows,
        [
            ("ins-a", "z", "t1", 2, 1),
            ("ins-a", "x", "ins-a", 1, 0),
            ("ins-a", "y", "ins-a", 1, 0),
            ("ins-b", "x", "ins-b", 1, 0),
        ],
        "busiest first"
    );
    assert!(!loads.truncated);
    let cut = insights
        .key_loads(&["ins-a".into(), "ins-b".into()], 2)
        .await
        .expect("key loads, cut");
    assert!(cut.truncated, "{cut:?}");
    assert_eq!(cut.keys.len(), 2);
    assert_eq!(cut.keys[0].fairness_key, "t1");
    let only_b = insights
        .key_loads(&["ins-b".into()], 10)
        .await
        .expect("key loads of ins-b");
    assert_eq!(only_b.keys.len(), 1, "another namespace's keys are absent");

    let attempts = store
        .attempts("ins-a", ok_id)
        .await
        .expect("attempts")
        .expect("the execution exists");
    assert_eq!(attempts.len(), 1, "{attempts:?}");
    assert_eq!(attempts[0].attempt_no, 1);
    assert_eq!(attempts[0].status, "succeeded");
    assert_eq!(attempts[0].worker_id, "w-ins");
    assert!(attempts[0].finished_at.is_some());
    assert!(
        store
            .attempts("ins-b", ok_id)
            .await
            .expect("other namespace")
            .is_none(),
        "another namespace's execution is absent"
    );
}

/// Seeds four buckets through `buckets` (a drained task bucket, a paused origin, a task bucket
/// with tokens left, and a `max_running` lock row), then checks what
/// [`ExecutionInsights::rate_limits`] lists: paused first, then fewest tokens, no lock rows, and
/// the cut. The store's buckets table must be empty.
pub async fn rate_limit_states<B>(buckets: &B, insights: &dyn ExecutionInsights)
where
    B: onestep_core::rate::RateLimitStore,
{
    use onestep_core::rate::RateLimit;
    let empty = insights.rate_limits(10).await.expect("rate limits");
    assert!(empty.kept, "the store keeps buckets");
    assert!(empty.items.is_empty() && !empty.truncated, "{empty:?}");

    let slow = RateLimit {
        per_second: 0.001,
        burst: 3,
    };
    let roomy = RateLimit {
        per_second: 0.001,
        burst: 5,
    };
    let took = buckets
        .take("task:thr-drained", slow, 3)
        .await
        .expect("take");
    assert_eq!(took.granted, 3);
    buckets
        .take("task:thr-roomy", roomy, 1)
        .await
        .expect("take");
    let until = Utc::now() + Duration::seconds(60);
    buckets
        .pause("origin:https://llm.example:443", roomy, until)
        .await
        .expect("pause");
    // A fleet-wide cap's lock row lives in the same table and is not a rate limit.
    buckets
        .take("max_running:thr-capped", roomy, 1)
        .await
        .expect("take");

    let got = insights.rate_limits(10).await.expect("rate limits");
    let names: Vec<&str> = got.items.iter().map(|b| b.bucket.as_str()).collect();
    assert_eq!(
        names,
        [
            "origin:https://llm.example:443",
            "task:thr-drained",
            "task:thr-roomy"
        ],
        "{got:?}"
    );
    assert!(!got.truncated);
    let origin = &got.items[0];
    assert_eq!(origin.kind(), "origin");
    assert_eq!(origin.target(), "https://llm.example:443");
    assert!(origin.paused_at(Utc::now()), "{origin:?}");
    let paused = origin.state.paused_until.expect("paused_until");
    assert!(
        (paused - until).num_milliseconds().abs() <= 1,
        "{paused} vs {until}"
    );
    let drained = &got.items[1];
    assert!(
        drained.drained() && !drained.paused_at(Utc::now()),
        "{drained:?}"
    );
    assert!(drained.state.tokens < 0.5, "{drained:?}");
    let roomy_state = &got.items[2];
    assert!(!roomy_state.drained(), "{roomy_state:?}");
    assert!(
        (roomy_state.state.tokens - 4.0).abs() < 0.5,
        "{roomy_state:?}"
    );

    let cut = insights.rate_limits(2).await.expect("rate limits");
    assert_eq!(cut.items.len(), 2);
    assert!(cut.truncated);
}
