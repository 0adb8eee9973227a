//! Bounded waits for an execution's outcome (`?wait=S`, docs/http-api.md#waiting).
//!
//! One [`WaitHub`] per API process. A waiting request reads its execution, and while it is not
//! terminal, registers the version it read and sleeps until that version moves, its deadline
//! passes, or the process starts shutting down. One poller task reads the versions of every
//! waited execution in one statement per tick (`ExecutionStore::versions`), so the database work
//! does not grow with the number of waiting callers: ten thousand callers waiting on one
//! execution cost what one does, and ten thousand executions cost one statement per tick.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use onestep_core::ports::ExecutionStore;
use tokio::sync::{Notify, watch};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// How often the poller reads the versions of the waited executions (the bound on how late a
/// waiter learns of a change, plus one read).
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(100);

/// The version a waiter sees for an execution that no longer exists (purged).
const GONE: i64 = i64::MIN;

/// The waits of one API process.
#[derive(Clone)]
pub struct WaitHub {
    inner: Arc<Inner>,
}

struct Inner {
    store: Arc<dyn ExecutionStore>,
    /// The latest version the poller read, per waited execution.
    watched: Mutex<HashMap<Uuid, watch::Sender<i64>>>,
    /// Wakes the poller when the first waiter arrives.
    arrived: Notify,
    /// Cancelled when the process shuts down: every wait answers at once.
    closing: CancellationToken,
    interval: Duration,
    /// The poller task is running.
    started: std::sync::Once,
}

impl std::fmt::Debug for WaitHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WaitHub")
            .field("watched", &lock(&self.inner.watched).len())
            .field("interval", &self.inner.interval)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl WaitHub {
    /// A hub reading `store` every `interval`.
    pub fn new(store: Arc<dyn ExecutionStore>, interval: Duration) -> Self {
        WaitHub {
            inner: Arc::new(Inner {
                store,
                watched: Mutex::new(HashMap::new()),
                arrived: Notify::new(),
                closing: CancellationToken::new(),
                interval: interval.max(Duration::from_millis(1)),
                started: std::sync::Once::new(),
            }),
        }
    }

    /// Ends every wait now and refuses new ones (they answer at once): the process is shutting
    /// down.
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

    /// Executions being waited on now.
    pub fn watched(&self) -> usize {
        lock(&self.inner.watched).len()
    }

    /// Sleeps until execution `id`'s stored version differs from `version`, `timeout` passes or
    /// the hub closes. Returns whether the version moved (the caller re-reads it).
    pub async fn changed(&self, id: Uuid, version: i64, timeout: Duration) -> bool {
        if self.is_closed() || timeout.is_zero() {
            return false;
        }
        self.start_poller();
        let mut rx = {
            let mut watched = lock(&self.inner.watched);
            let first = watched.is_empty();
            let rx = watched
                .entry(id)
                .or_insert_with(|| watch::channel(version).0)
                .subscribe();
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

    fn start_poller(&self) {
        self.inner.started.call_once(|| {
            let inner = Arc::downgrade(&self.inner);
            tokio::spawn(poll(inner));
        });
    }
}

/// The poller: while anyone waits, one `versions` read per tick over every waited id; parks
/// when nobody waits; ends when the hub is dropped or closed.
async fn poll(hub: std::sync::Weak<Inner>) {
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
            tokio::select! {
                () = inner.arrived.notified() => {}
                () = inner.closing.cancelled() => return,
                // Re-check now and then: a hub dropped while parked ends its poller.
                () = tokio::time::sleep(Duration::from_secs(5)) => {}
            }
            continue;
        }
        match inner.store.versions(&ids).await {
            Ok(found) => {
                let found: HashMap<Uuid, i64> = found.into_iter().collect();
                let watched = lock(&inner.watched);
                for id in &ids {
                    let now = found.get(id).copied().unwrap_or(GONE);
                    if let Some(tx) = watched.get(id) {
                        tx.send_if_modified(|v| {
                            let moved = *v != now;
                            *v = now;
                            moved
                        });
                    }
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, waited = ids.len(), "cannot read the versions of waited executions; retrying");
            }
        }
        let interval = inner.interval;
        let closing = inner.closing.clone();
        drop(inner);
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            () = closing.cancelled() => return,
        }
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
