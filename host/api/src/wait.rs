//! Bounded waits for an execution's outcome (`?wait=S`, docs/http-api.md#waiting).
//!
//! One [`WaitHub`] per API process. A waiting request reads its execution, and while it is not
//! terminal, registers the version it read and sleeps until that version moves, its deadline
//! passes, or the process starts shutting down. One poller task reads the versions of every
//! waited execution in one statement per tick (`ExecutionStore::versions`), so the database work
//! does not grow with the number of waiting callers: ten thousand callers waiting on one
//! execution cost what one does, and ten thousand executions cost one statement per tick.
//!
//! With a [`ChangeListener`] (PostgreSQL `LISTEN`/`NOTIFY`, `api.notify: listen`), one more task
//! holds the listening session and wakes the waiters of a notified execution at once; the poll
//! stays as the safety net (a notification lost with its session, a change no trigger reports)
//! but runs every `api.poll_ms` (default 1 s) while the session listens, every 100 ms while it
//! does not, and once at once each time the session (re)starts.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use onestep_core::changes::{ChangeListener, ChangeSink};
use onestep_core::ports::ExecutionStore;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// How often the poller reads the versions of the waited executions without notifications
/// (the bound on how late a waiter learns of a change, plus one read).
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(100);

/// The default poll while the listening session is up (`api.poll_ms` with `api.notify:
/// listen`): the safety net's bound.
pub const DEFAULT_LISTENING_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// The version a waiter sees for an execution that no longer exists (purged).
const GONE: i64 = i64::MIN;

/// How long a notification of an execution nobody waited on is remembered: a caller that read
/// the execution just before the change and registers just after is woken by it.
const RECENT_FOR: Duration = Duration::from_secs(5);
/// The most such notifications remembered.
const RECENT_MAX: usize = 100_000;

/// The first pause before reconnecting a lost listening session; doubled up to [`RECONNECT_MAX`].
const RECONNECT_FIRST: Duration = Duration::from_millis(500);
const RECONNECT_MAX: Duration = Duration::from_secs(30);

/// The waits of one API process.
#[derive(Clone)]
pub struct WaitHub {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn ExecutionStore>,
    /// The latest version known, per waited execution.
    watched: Mutex<HashMap<Uuid, watch::Sender<i64>>>,
    /// Notified versions of executions nobody waited on when they arrived ([`RECENT_FOR`]).
    recent: Mutex<HashMap<Uuid, (i64, Instant)>>,
    /// Wakes the poller when the first waiter arrives.
    arrived: Arc<Notify>,
    /// Makes the poller read at once (the listening session (re)started or was lost, or a
    /// notification did not read).
    poll_now: Arc<Notify>,
    /// Cancelled when the process shuts down (every wait answers at once) or the hub is
    /// dropped (its tasks end).
    closing: CancellationToken,
    /// The poll without a listening session.
    interval: Duration,
    /// The pushed notifications and the poll while they listen.
    listener: Option<(Arc<dyn ChangeListener>, Duration)>,
    /// The listening session is up.
    listening: AtomicBool,
    /// Cancelled once the listening task has ended (its session unregistered), or from the
    /// start without a listener.
    listener_ended: CancellationToken,
    /// The poller and the listener tasks are running.
    started: std::sync::Once,
    metrics: WaitMetrics,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.closing.cancel();
    }
}

/// The hub's counters, shown at `/metrics` (docs/observability.md#api-metrics).
#[derive(Debug)]
struct WaitMetrics {
    registry: Registry,
    polls: Counter,
    notified: Counter,
    sessions: Counter,
    listening: Gauge,
}

impl WaitMetrics {
    fn new(listens: bool) -> Self {
        let mut registry = Registry::default();
        let polls = Counter::default();
        registry.register(
            "onestep_api_change_polls",
            "Version reads of the waited executions (one statement each) by this API process",
            polls.clone(),
        );
        let notified = Counter::default();
        let sessions = Counter::default();
        let listening = Gauge::default();
        if listens {
            registry.register(
                "onestep_api_change_notifications",
                "Executions named by the change notifications this API process received (api.notify: listen)",
                notified.clone(),
            );
            registry.register(
                "onestep_api_change_sessions",
                "Listening sessions this API process started (api.notify: listen); more than one: it reconnected",
                sessions.clone(),
            );
            registry.register(
                "onestep_api_change_listening",
                "1 while this API process's listening session is up (api.notify: listen), else 0",
                listening.clone(),
            );
        }
        WaitMetrics {
            registry,
            polls,
            notified,
            sessions,
            listening,
        }
    }
}

impl std::fmt::Debug for WaitHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WaitHub")
            .field("watched", &lock(&self.inner.watched).len())
            .field("interval", &self.inner.interval)
            .field("listens", &self.inner.listener.is_some())
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl WaitHub {
    /// A hub reading `store` every `interval`.
    pub fn new(store: Arc<dyn ExecutionStore>, interval: Duration) -> Self {
        Self::build(store, interval, None)
    }

    /// A hub woken by `listener`'s notifications, reading `store` every `listening_interval`
    /// while the listening session is up and every `interval` while it is not.
    pub fn listening(
        store: Arc<dyn ExecutionStore>,
        listener: Arc<dyn ChangeListener>,
        interval: Duration,
        listening_interval: Duration,
    ) -> Self {
        Self::build(store, interval, Some((listener, listening_interval)))
    }

    /// A new hub on the same store and poll, woken by `listener` (see [`Self::listening`]);
    /// for a hub that has not started.
    pub fn with_listener(
        &self,
        listener: Arc<dyn ChangeListener>,
        listening_interval: Duration,
    ) -> Self {
        Self::listening(
            Arc::clone(&self.inner.store),
            listener,
            DEFAULT_POLL_INTERVAL.min(self.inner.interval),
            listening_interval,
        )
    }

    fn build(
        store: Arc<dyn ExecutionStore>,
        interval: Duration,
        listener: Option<(Arc<dyn ChangeListener>, Duration)>,
    ) -> Self {
        let min = Duration::from_millis(1);
        let metrics = WaitMetrics::new(listener.is_some());
        let listener_ended = CancellationToken::new();
        if listener.is_none() {
            listener_ended.cancel();
        }
        WaitHub {
            inner: Arc::new(Inner {
                store,
                watched: Mutex::new(HashMap::new()),
                recent: Mutex::new(HashMap::new()),
                arrived: Arc::new(Notify::new()),
                poll_now: Arc::new(Notify::new()),
                closing: CancellationToken::new(),
                interval: interval.max(min),
                listener: listener.map(|(l, i)| (l, i.max(min))),
                listening: AtomicBool::new(false),
                listener_ended,
                started: std::sync::Once::new(),
                metrics,
            }),
        }
    }

    /// Ends every wait now and refuses new ones (they answer at once): the process is shutting
    /// down. The listening session, if any, ends too.
    pub fn close(&self) {
        self.inner.closing.cancel();
        self.inner.arrived.notify_one();
    }

    /// Whether [`Self::close`] was called.
    pub fn is_closed(&self) -> bool {
        self.inner.closing.is_cancelled()
    }

    /// Resolves when [`Self::close`] is called (event streams end then).
    pub async fn closed(&self) {
        self.inner.closing.cancelled().await;
    }

    /// Resolves once the listening session, if any, has ended after [`Self::close`] (it
    /// unregisters on the way: docs/postgres.md#change-notifications), at once without one or
    /// when the hub never started. `onestep serve` awaits it, bounded, before exiting.
    pub async fn stopped(&self) {
        if !self.inner.started.is_completed() {
            return;
        }
        self.inner.listener_ended.cancelled().await;
    }

    /// Executions being waited on now.
    pub fn watched(&self) -> usize {
        lock(&self.inner.watched).len()
    }

    /// Whether this hub has pushed notifications (`api.notify: listen`).
    pub fn listens(&self) -> bool {
        self.inner.listener.is_some()
    }

    /// Whether the listening session is up now.
    pub fn is_listening(&self) -> bool {
        self.inner.listening.load(Ordering::Acquire)
    }

    /// The hub's metrics (`/metrics`).
    pub fn registry(&self) -> &Registry {
        &self.inner.metrics.registry
    }

    /// Starts the poller, and the listening session when there is a listener, if they are not
    /// running yet (the first wait does it too). `onestep serve` calls it at start, so that
    /// the session is up before the first caller arrives.
    pub fn start(&self) {
        self.inner.started.call_once(|| {
            let weak = Arc::downgrade(&self.inner);
            tokio::spawn(poll(weak.clone()));
            if let Some((listener, _)) = &self.inner.listener {
                let (closing, ended) = (
                    self.inner.closing.clone(),
                    self.inner.listener_ended.clone(),
                );
                let listener = Arc::clone(listener);
                tokio::spawn(async move {
                    listen(weak, listener, closing).await;
                    ended.cancel();
                });
            } else {
                self.inner.listener_ended.cancel();
            }
        });
    }

    /// Sleeps until execution `id`'s stored version differs from `version`, `timeout` passes or
    /// the hub closes. Returns whether the version moved (the caller re-reads it).
    pub async fn changed(&self, id: Uuid, version: i64, timeout: Duration) -> bool {
        if self.is_closed() || timeout.is_zero() {
            return false;
        }
        self.start();
        let mut rx = {
            let mut watched = lock(&self.inner.watched);
            let first = watched.is_empty();
            let tx = watched
                .entry(id)
                .or_insert_with(|| watch::channel(version).0);
            // Versions only grow: the caller read this one, so the execution has it at least
            // (and whoever waited on an older one may wake).
            raise(tx, version);
            // A notification that came between the caller's read and now.
            if let Some((notified, _)) = lock(&self.inner.recent).remove(&id) {
                raise(tx, notified);
            }
            let rx = tx.subscribe();
            if first {
                self.inner.arrived.notify_one();
            }
            rx
        };
        tokio::select! {
            moved = tokio::time::timeout(timeout, rx.wait_for(|v| *v != version)) => {
                matches!(moved, Ok(Ok(_)))
            }
            () = self.inner.closing.cancelled() => false,
        }
    }
}

/// Raises the known version of an execution to `version` (never lowers it: a notification or
/// read older than what is known must not wake the waiters of the newer version).
fn raise(tx: &watch::Sender<i64>, version: i64) {
    tx.send_if_modified(|v| {
        let moved = version > *v;
        if moved {
            *v = version;
        }
        moved
    });
}

/// The poller: while anyone waits, one `versions` read per tick over every waited id; parks
/// when nobody waits; ends when the hub is dropped or closed.
async fn poll(hub: Weak<Inner>) {
    loop {
        let Some(inner) = hub.upgrade() else {
            return;
        };
        if inner.closing.is_cancelled() {
            return;
        }
        let ids: Vec<Uuid> = {
            let mut watched = lock(&inner.watched);
            watched.retain(|_, tx| tx.receiver_count() > 0);
            watched.keys().copied().collect()
        };
        if ids.is_empty() {
            let closing = inner.closing.clone();
            let arrived = Arc::clone(&inner.arrived);
            drop(inner);
            tokio::select! {
                () = arrived.notified() => {}
                () = closing.cancelled() => return,
                // Re-check now and then: a hub dropped while parked ends its poller.
                () = tokio::time::sleep(Duration::from_secs(5)) => {}
            }
            continue;
        }
        inner.metrics.polls.inc();
        match inner.store.versions(&ids).await {
            Ok(found) => {
                let found: HashMap<Uuid, i64> = found.into_iter().collect();
                let watched = lock(&inner.watched);
                for id in &ids {
                    let Some(tx) = watched.get(id) else { continue };
                    match found.get(id) {
                        Some(now) => raise(tx, *now),
                        None => {
                            tx.send_if_modified(|v| {
                                let moved = *v != GONE;
                                *v = GONE;
                                moved
                            });
                        }
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, waited = ids.len(), "cannot read the versions of waited executions; retrying");
            }
        }
        let interval = match &inner.listener {
            Some((_, listening)) if inner.listening.load(Ordering::Acquire) => *listening,
            _ => inner.interval,
        };
        let closing = inner.closing.clone();
        let now = Arc::clone(&inner.poll_now);
        drop(inner);
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = now.notified() => {}
            () = closing.cancelled() => return,
        }
    }
}

/// What the listening session tells the hub.
struct Sink(Weak<Inner>);

impl ChangeSink for Sink {
    fn listening(&self) {
        if let Some(inner) = self.0.upgrade() {
            inner.listening.store(true, Ordering::Release);
            inner.metrics.listening.set(1);
            inner.metrics.sessions.inc();
            // What changed before the session listened was not notified: read it once.
            inner.poll_now.notify_one();
        }
    }

    fn changed(&self, id: Uuid, version: i64) {
        let Some(inner) = self.0.upgrade() else {
            return;
        };
        inner.metrics.notified.inc();
        let watched = lock(&inner.watched);
        if let Some(tx) = watched.get(&id) {
            raise(tx, version);
            return;
        }
        drop(watched);
        let mut recent = lock(&inner.recent);
        let now = Instant::now();
        if recent.len() >= RECENT_MAX {
            recent.retain(|_, (_, at)| now.duration_since(*at) < RECENT_FOR);
            if recent.len() >= RECENT_MAX {
                recent.clear();
            }
        }
        let entry = recent.entry(id).or_insert((version, now));
        if version >= entry.0 {
            *entry = (version, now);
        }
    }

    fn unreadable(&self) {
        if let Some(inner) = self.0.upgrade() {
            inner.poll_now.notify_one();
        }
    }
}

/// The listening session, reconnected after a loss (with a growing pause) until the hub closes
/// or is dropped. While it is down the poller reads every `interval`.
async fn listen(hub: Weak<Inner>, listener: Arc<dyn ChangeListener>, closing: CancellationToken) {
    let mut pause = RECONNECT_FIRST;
    loop {
        if closing.is_cancelled() {
            return;
        }
        let began = Instant::now();
        let sink: Arc<dyn ChangeSink> = Arc::new(Sink(hub.clone()));
        let outcome = listener.listen(sink, closing.clone()).await;
        let Some(inner) = hub.upgrade() else {
            return;
        };
        let was = inner.listening.swap(false, Ordering::AcqRel);
        let interval = inner.interval;
        inner.metrics.listening.set(0);
        // Notifications may have been lost: read at once, then every `interval`.
        inner.poll_now.notify_one();
        drop(inner);
        match outcome {
            Ok(()) => return,
            Err(e) => {
                if began.elapsed() > RECONNECT_MAX {
                    pause = RECONNECT_FIRST;
                }
                tracing::warn!(
                    error = %e,
                    was_listening = was,
                    retry_in_ms = u64::try_from(pause.as_millis()).unwrap_or(u64::MAX),
                    poll_ms = u64::try_from(interval.as_millis()).unwrap_or(u64::MAX),
                    "the change-notification session is down; waits poll every poll_ms until it is back"
                );
            }
        }
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = closing.cancelled() => return,
        }
        pause = (pause * 2).min(RECONNECT_MAX);
    }
}

/// The wait a query asks for: `None` without `wait`, else the duration (0 to `max_s` seconds,
/// fractions allowed; `max_s` is `api.max_wait_s`). The refusal names the bound (`onestep wait
/// --api` reads it from the 422 to ask for no more).
pub fn parse_wait(raw: Option<&str>, max_s: u32) -> Result<Option<Duration>, String> {
    let Some(raw) = raw else {
        return Ok(None);
    };
    let refused = || format!("wait must be a number of seconds from 0 to {max_s}, got '{raw}'");
    let s: f64 = raw.trim().parse().map_err(|_| refused())?;
    if !s.is_finite() || !(0.0..=f64::from(max_s)).contains(&s) {
        return Err(refused());
    }
    Ok(Some(Duration::from_secs_f64(s)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use onestep_core::Limits;
    use onestep_testkit::builders::prepared;
    use onestep_testkit::{ManualClock, MemoryStore};

    fn store() -> Arc<MemoryStore> {
        Arc::new(MemoryStore::new(
            Arc::new(ManualClock::default()),
            Limits::default(),
        ))
    }

    #[tokio::test]
    async fn a_wait_ends_when_the_version_moves_at_its_deadline_or_on_close() {
        let store = store();
        let hub = WaitHub::new(store.clone(), Duration::from_millis(5));
        let e = store
            .submit(prepared("ns", "t", serde_json::json!(1)))
            .await
            .expect("submit");

        // Nothing changes: the wait ends at its deadline, unmoved.
        assert!(
            !hub.changed(e.id, e.version, Duration::from_millis(30))
                .await
        );

        // A cancel moves the version while 20 callers wait on it: every one of them wakes.
        let waiters: Vec<_> = (0..20)
            .map(|_| {
                let hub = hub.clone();
                tokio::spawn(
                    async move { hub.changed(e.id, e.version, Duration::from_secs(30)).await },
                )
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(hub.watched(), 1, "one watched execution for 20 waiters");
        store.cancel("ns", e.id, None).await.expect("cancel");
        for w in waiters {
            assert!(w.await.expect("join"), "the waiter saw the change");
        }

        // A stale version (the caller read before the change) wakes at once.
        assert!(hub.changed(e.id, e.version, Duration::from_secs(30)).await);

        // An unknown (purged) execution wakes its waiter too.
        assert!(
            hub.changed(uuid::Uuid::new_v4(), 0, Duration::from_secs(30))
                .await
        );

        // Closing ends a pending wait and every later one at once.
        let current = store.versions(&[e.id]).await.expect("versions")[0].1;
        let pending = {
            let hub = hub.clone();
            tokio::spawn(async move { hub.changed(e.id, current, Duration::from_secs(30)).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        hub.close();
        assert!(!pending.await.expect("join"));
        assert!(!hub.changed(e.id, current, Duration::from_secs(30)).await);
    }

    /// A listener the test drives: each session says it listens, hands its sink to the test
    /// and lasts until stopped (`Ok`) or killed by the test (`Err`).
    #[derive(Default)]
    struct FakeListener {
        sinks: Mutex<Vec<Arc<dyn ChangeSink>>>,
        kill: Notify,
    }

    impl std::fmt::Debug for FakeListener {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("FakeListener").finish_non_exhaustive()
        }
    }

    #[async_trait::async_trait]
    impl ChangeListener for FakeListener {
        async fn listen(
            &self,
            sink: Arc<dyn ChangeSink>,
            stop: CancellationToken,
        ) -> Result<(), onestep_core::ExecutionError> {
            sink.listening();
            lock(&self.sinks).push(sink);
            tokio::select! {
                () = stop.cancelled() => Ok(()),
                () = self.kill.notified() => Err(onestep_core::ExecutionError::invalid("killed")),
            }
        }
    }

    impl FakeListener {
        fn sink(&self) -> Arc<dyn ChangeSink> {
            Arc::clone(lock(&self.sinks).last().expect("a session"))
        }
        fn sessions(&self) -> usize {
            lock(&self.sinks).len()
        }
    }

    async fn until(what: &str, mut ok: impl FnMut() -> bool) {
        for _ in 0..500 {
            if ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{what} did not happen within 5 s");
    }

    #[tokio::test]
    async fn notifications_wake_waiters_between_slow_polls_and_a_lost_session_falls_back() {
        let store = store();
        let fake = Arc::new(FakeListener::default());
        // The poll while listening is an hour: only a notification can wake a waiter.
        let hub = WaitHub::listening(
            store.clone(),
            fake.clone(),
            Duration::from_millis(20),
            Duration::from_secs(3600),
        );
        assert!(hub.listens());
        hub.start();
        until("listening", || hub.is_listening()).await;
        let submit = |n: i64| {
            let store = store.clone();
            async move {
                store
                    .submit(prepared("ns", "t", serde_json::json!(n)))
                    .await
                    .expect("submit")
            }
        };
        let e = submit(1).await;
        let waiter = {
            let hub = hub.clone();
            tokio::spawn(async move { hub.changed(e.id, e.version, Duration::from_secs(30)).await })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        let cancelled = store
            .cancel("ns", e.id, None)
            .await
            .expect("cancel")
            .expect("found");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !waiter.is_finished(),
            "the slow poll did not see the cancel"
        );
        // A stale notification (the version the waiter read) wakes nobody.
        fake.sink().changed(e.id, e.version);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished());
        fake.sink().changed(e.id, cancelled.version);
        let woke = tokio::time::timeout(Duration::from_secs(1), waiter)
            .await
            .expect("woken at once by the notification")
            .expect("join");
        assert!(woke);

        // A notification that came before the waiter registered (it read just before the
        // change): its registration wakes at once.
        let f = submit(2).await;
        let f_cancelled = store
            .cancel("ns", f.id, None)
            .await
            .expect("cancel")
            .expect("found");
        fake.sink().changed(f.id, f_cancelled.version);
        let woke = tokio::time::timeout(
            Duration::from_secs(1),
            hub.changed(f.id, f.version, Duration::from_secs(30)),
        )
        .await
        .expect("remembered");
        assert!(woke);

        // The session is lost: the poller reads at once and every 20 ms, so an unnotified
        // change wakes its waiter; the session comes back.
        let g = submit(3).await;
        let waiter = {
            let hub = hub.clone();
            tokio::spawn(async move { hub.changed(g.id, g.version, Duration::from_secs(30)).await })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        fake.kill.notify_one();
        store.cancel("ns", g.id, None).await.expect("cancel");
        let woke = tokio::time::timeout(Duration::from_secs(2), waiter)
            .await
            .expect("woken by the fallback poll")
            .expect("join");
        assert!(woke);
        until("a second session", || {
            fake.sessions() == 2 && hub.is_listening()
        })
        .await;
        let text = {
            let mut out = String::new();
            prometheus_client::encoding::text::encode_registry(&mut out, hub.registry())
                .expect("encode");
            out
        };
        assert!(
            text.contains("onestep_api_change_sessions_total 2"),
            "{text}"
        );
        assert!(text.contains("onestep_api_change_listening 1"), "{text}");
        assert!(
            text.contains("onestep_api_change_notifications_total 3"),
            "{text}"
        );

        // Closing stops the session (Ok) and it is not reconnected.
        hub.close();
        tokio::time::timeout(Duration::from_secs(2), hub.stopped())
            .await
            .expect("the listening task ends");
        assert!(!hub.is_listening());
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(fake.sessions(), 2);
    }

    #[test]
    fn waits_are_bounded_numbers_of_seconds() {
        assert_eq!(parse_wait(None, 60), Ok(None));
        assert_eq!(parse_wait(Some("0"), 60), Ok(Some(Duration::ZERO)));
        assert_eq!(
            parse_wait(Some("2.5"), 60),
            Ok(Some(Duration::from_millis(2500)))
        );
        assert_eq!(
            parse_wait(Some("60"), 60),
            Ok(Some(Duration::from_secs(60)))
        );
        for bad in ["61", "-1", "NaN", "inf", "1e20", "soon", ""] {
            let e = parse_wait(Some(bad), 60).expect_err(bad);
            assert!(e.contains("from 0 to 60"), "{bad}: {e}");
        }
        // A lower `api.max_wait_s` bounds it; 0 accepts only `wait=0`.
        assert!(parse_wait(Some("3"), 2).is_err());
        assert_eq!(parse_wait(Some("0"), 0), Ok(Some(Duration::ZERO)));
        assert!(parse_wait(Some("0.5"), 0).is_err());
    }
}
