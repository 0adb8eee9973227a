//! A task's `rate_limit` on execution starts (docs/semantics.md#rate-limits): the fetch loop
//! takes a token per claimed lease from the task's bucket, waits when there is none, gives back
//! what a claim did not use, and claims nothing while the bucket cannot be read. The bucket
//! ([`MemoryBuckets`]) reads a clock that follows tokio's paused time, so the worker's waits
//! and the bucket's refill run on one virtual clock.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use onestep_core::ExecutionError;
use onestep_core::ports::LeaseStore;
use onestep_core::rate::{MemoryBuckets, RateLimit, RateLimitStore, Take, task_bucket};
use onestep_core::runner::TaskRunner;
use onestep_core::time::Clock;
use onestep_testkit::{Op, Step};
use onestep_worker::{
    TaskBinding, TaskSettings, Worker, WorkerError, WorkerObserver, WorkerSettings,
};
use serde_json::json;
use tokio::time::Instant;

use crate::harness::{Harness, TASK, bounded, let_time_pass, task_settings};

/// "Now" on tokio's (paused) clock.
#[derive(Debug)]
struct TokioClock {
    origin: Instant,
    at: DateTime<Utc>,
}

impl TokioClock {
    fn new() -> Arc<TokioClock> {
        Arc::new(TokioClock {
            origin: Instant::now(),
            at: onestep_testkit::ManualClock::default_start(),
        })
    }
}

impl Clock for TokioClock {
    fn now(&self) -> DateTime<Utc> {
        let elapsed = chrono::Duration::from_std(self.origin.elapsed()).unwrap_or_default();
        self.at + elapsed
    }
}

/// Records when each attempt started (virtual time) and each limiter wait.
#[derive(Debug)]
struct Starts {
    origin: Instant,
    started: Mutex<Vec<f64>>,
    waits: Mutex<u64>,
    errors: Mutex<Vec<String>>,
}

impl Starts {
    fn new() -> Arc<Starts> {
        Arc::new(Starts {
            origin: Instant::now(),
            started: Mutex::new(Vec::new()),
            waits: Mutex::new(0),
            errors: Mutex::new(Vec::new()),
        })
    }
    fn started(&self) -> Vec<f64> {
        self.started.lock().expect("lock").clone()
    }
}

impl WorkerObserver for Starts {
    fn attempt_started(&self, _task: &str, _queue_wait: Duration) {
        let at = self.origin.elapsed().as_secs_f64();
        self.started.lock().expect("lock").push(at);
    }
    fn rate_limited(&self, task: &str, _wait: Duration) {
        assert_eq!(task, TASK);
        *self.waits.lock().expect("lock") += 1;
    }
    fn store_error(&self, _task: &str, error: &ExecutionError) {
        self.errors.lock().expect("lock").push(error.to_string());
    }
}

fn start(
    h: &mut Harness,
    settings: TaskSettings,
    buckets: Arc<dyn RateLimitStore>,
    observer: Arc<Starts>,
) -> tokio::task::JoinHandle<Result<(), WorkerError>> {
    let binding = TaskBinding {
        settings,
        store: h.store.clone() as Arc<dyn LeaseStore>,
        runner: h.runner.clone() as Arc<dyn TaskRunner>,
        quarantine: onestep_worker::Quarantine::default(),
    };
    let w = Worker::new(vec![binding], WorkerSettings::default())
        .expect("valid settings")
        .with_clock(h.clock.clone())
        .with_observer(observer)
        .with_rate_limits(TASK, buckets);
    tokio::spawn(w.run(h.shutdown.clone()))
}

fn limited(per_second: f64, burst: u32) -> TaskSettings {
    let mut s = task_settings();
    s.concurrency = 8;
    s.batch_size = 8;
    s.rate_limit = Some(RateLimit { per_second, burst });
    s
}

#[tokio::test(start_paused = true)]
async fn starts_never_exceed_the_burst_plus_the_rate() {
    let mut h = Harness::new();
    h.runner.set_default(Step::succeed(json!("ok")));
    for i in 0..30 {
        h.submit(json!(i)).await;
    }
    let starts = Starts::new();
    let buckets = Arc::new(MemoryBuckets::new(TokioClock::new()));
    let worker = start(&mut h, limited(4.0, 3), buckets, Arc::clone(&starts));
    bounded(h.runner.wait_for_calls(30)).await;
    h.shutdown.cancel();
    worker.await.expect("worker task").expect("worker");
    let at = starts.started();
    assert_eq!(at.len(), 30);
    // Any run of starts i..=j: at most burst + rate × (t_j − t_i).
    for i in 0..at.len() {
        for j in i..at.len() {
            let n = (j - i + 1) as f64;
            let bound = 3.0 + 4.0 * (at[j] - at[i]) + 1e-9;
            assert!(n <= bound, "{n} starts in {:.3} s: {at:?}", at[j] - at[i]);
        }
    }
    // And the limiter does not starve the task: the burst at once, then 4 a second.
    let span = at[29] - at[0];
    assert!(span >= 27.0 / 4.0 - 1e-9, "30 starts in {span:.3} s");
    assert!(
        span <= 27.0 / 4.0 + 1.0,
        "too slow: 30 starts in {span:.3} s"
    );
    assert!(
        *starts.waits.lock().expect("lock") > 0,
        "the limiter waited"
    );
}

#[tokio::test(start_paused = true)]
async fn tokens_a_claim_did_not_use_are_given_back() {
    let mut h = Harness::new();
    h.runner.set_default(Step::succeed(json!("ok")));
    let one = h.submit(json!(0)).await;
    let starts = Starts::new();
    let buckets = Arc::new(MemoryBuckets::new(TokioClock::new()));
    let store: Arc<dyn RateLimitStore> = buckets.clone();
    let worker = start(&mut h, limited(0.001, 5), store, Arc::clone(&starts));
    bounded(h.runner.wait_for_calls(1)).await;
    assert_eq!(h.runner.calls_for(one.id).len(), 1);
    // The claim wanted 8 tokens, was granted 5 and used 1: 4 are back in the bucket.
    // Past the worker's next poll (1 s after each empty claim), while it sleeps.
    let_time_pass(Duration::from_millis(2_500)).await;
    let rate = RateLimit {
        per_second: 0.001,
        burst: 5,
    };
    let left = buckets
        .take(&task_bucket(TASK), rate, 10)
        .await
        .expect("take");
    assert_eq!(left.granted, 4, "{left:?}");
    buckets
        .refund(&task_bucket(TASK), rate, 4)
        .await
        .expect("refund");
    for i in 0..4 {
        h.submit(json!(i)).await;
    }
    bounded(h.runner.wait_for_calls(5)).await;
    h.shutdown.cancel();
    worker.await.expect("worker task").expect("worker");
    // At 0.001 tokens a second, four more starts without the refund would take over an hour.
    let at = starts.started();
    assert_eq!(at.len(), 5);
    assert!(
        at[4] < 5.0,
        "the four later starts used the given-back tokens: {at:?}"
    );
}

/// A bucket store that always fails.
#[derive(Debug, Default)]
struct Broken {
    calls: Mutex<u32>,
}

#[async_trait]
impl RateLimitStore for Broken {
    async fn take(&self, _: &str, _: RateLimit, _: u32) -> Result<Take, ExecutionError> {
        *self.calls.lock().expect("lock") += 1;
        Err(crate::harness::disconnected("rate_limit"))
    }
    async fn refund(&self, _: &str, _: RateLimit, _: u32) -> Result<(), ExecutionError> {
        Err(crate::harness::disconnected("rate_limit"))
    }
    async fn pause(&self, _: &str, _: RateLimit, _: DateTime<Utc>) -> Result<(), ExecutionError> {
        Err(crate::harness::disconnected("rate_limit"))
    }
}

#[tokio::test(start_paused = true)]
async fn a_bucket_that_cannot_be_read_claims_nothing() {
    let mut h = Harness::new();
    h.runner.set_default(Step::succeed(json!("ok")));
    let queued = h.submit(json!(0)).await;
    let starts = Starts::new();
    let broken = Arc::new(Broken::default());
    let worker = start(
        &mut h,
        limited(100.0, 10),
        broken.clone(),
        Arc::clone(&starts),
    );
    let_time_pass(Duration::from_secs(5)).await;
    assert_eq!(
        h.store.calls(Op::Claim),
        0,
        "never claimed past an unreadable bucket"
    );
    assert_eq!(h.runner.call_count(), 0);
    let tries = *broken.calls.lock().expect("lock");
    // The default poll interval is 1 s: one try a second, not a busy loop.
    assert!((4..=7).contains(&tries), "{tries} tries in 5 s");
    assert!(
        !starts.errors.lock().expect("lock").is_empty(),
        "the error was observed"
    );
    h.shutdown.cancel();
    worker.await.expect("worker task").expect("worker");
    assert_eq!(
        h.execution(queued.id).status,
        onestep_core::ExecutionStatus::Queued
    );
}

#[tokio::test(start_paused = true)]
async fn a_rate_limit_without_a_bucket_store_is_refused() {
    let h = Harness::new();
    let binding = TaskBinding {
        settings: limited(1.0, 1),
        store: h.store.clone() as Arc<dyn LeaseStore>,
        runner: h.runner.clone() as Arc<dyn TaskRunner>,
        quarantine: onestep_worker::Quarantine::default(),
    };
    let w = Worker::new(vec![binding], WorkerSettings::default()).expect("valid settings");
    let e = w.run(h.shutdown.clone()).await.expect_err("refused");
    assert!(e.to_string().contains("rate_limit"), "{e}");
    let mut bad = limited(0.0, 1);
    bad.task_name = TASK.into();
    let binding = TaskBinding {
        settings: bad,
        store: h.store.clone() as Arc<dyn LeaseStore>,
        runner: h.runner.clone() as Arc<dyn TaskRunner>,
        quarantine: onestep_worker::Quarantine::default(),
    };
    let e = Worker::new(vec![binding], WorkerSettings::default()).expect_err("bad rate");
    assert!(e.to_string().contains("per_second"), "{e}");
}
