//! Pushed change notifications on PostgreSQL (docs/postgres.md#change-notifications): the
//! notify trigger and the listening session of `ChangeListener for PgBackend`.
//!
//! * The trigger notifies only while a session is registered: a bare `LISTEN` on the channel
//!   hears nothing of a completion, then, once our listener runs, hears it.
//! * Only terminal arrivals are notified (a claim is not; a completion and a cancel are), with
//!   the version the row has after the change; a completion of 250 executions in one statement
//!   arrives as notifications of at most 100 executions each, every execution once.
//! * The listener unregisters when stopped; a session killed with `pg_terminate_backend` ends
//!   `listen` with an error (the API then reconnects), and the next session deletes the dead
//!   one's registration.
// Test code: a helper that cannot set up its fixture panics, like an assertion (clippy.toml
// allows this inside #[test] functions; these helpers live outside them).
#![allow(clippy::expect_used, clippy::panic)]

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use onestep_core::Backend;
use onestep_core::changes::ChangeSink;
use onestep_core::execution::Completion;
use onestep_core::ports::{ExecutionStore, LeaseStore};
use onestep_core::request::SubmitRequest;
use onestep_postgres::{PgBackend, StoreOptions};
use onestep_testkit::builders::{claim, prepare};
use serde_json::json;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

const NS: &str = "changes";

/// What the listener told the test.
#[derive(Debug)]
enum Heard {
    Listening,
    Changed(Uuid, i64),
    Unreadable,
}

struct Sink(mpsc::UnboundedSender<Heard>);

impl ChangeSink for Sink {
    fn listening(&self) {
        let _ = self.0.send(Heard::Listening);
    }
    fn changed(&self, id: Uuid, version: i64) {
        let _ = self.0.send(Heard::Changed(id, version));
    }
    fn unreadable(&self) {
        let _ = self.0.send(Heard::Unreadable);
    }
}

fn request(n: usize) -> SubmitRequest {
    SubmitRequest {
        task_name: "t".into(),
        payload: json!({"n": n}),
        ..SubmitRequest::default()
    }
}

/// The next thing heard within `limit`.
async fn next(rx: &mut mpsc::UnboundedReceiver<Heard>, limit: Duration) -> Option<Heard> {
    tokio::time::timeout(limit, rx.recv()).await.ok().flatten()
}

/// A bare session that `LISTEN`s on the channel without registering: the payloads it hears.
async fn bare_listener(dsn: &str) -> (tokio_postgres::Client, mpsc::UnboundedReceiver<String>) {
    let (client, mut connection) = tokio_postgres::connect(dsn, tokio_postgres::NoTls)
        .await
        .expect("connect");
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(Ok(m)) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            if let tokio_postgres::AsyncMessage::Notification(n) = m {
                let _ = tx.send(n.payload().to_owned());
            }
        }
    });
    client
        .batch_execute("LISTEN onestep_executions_changes")
        .await
        .expect("listen");
    (client, rx)
}

async fn complete_one(b: &PgBackend, n: usize) -> onestep_core::Execution {
    let e = b.submit(prepare(NS, &request(n))).await.expect("submit");
    let leases = b.claim(&claim(NS, "t", 1, 30.0, "w")).await.expect("claim");
    assert_eq!(leases.len(), 1);
    assert_eq!(leases[0].execution.id, e.id);
    b.complete(&leases[0].lease_ref(), &Completion::succeeded(json!(n)))
        .await
        .expect("complete")
}

async fn registered(admin: &tokio_postgres::Client) -> Vec<i32> {
    admin
        .query(
            "SELECT pid FROM onestep_executions_listeners ORDER BY pid",
            &[],
        )
        .await
        .expect("listeners")
        .iter()
        .map(|r| r.get(0))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_name_ended_executions_while_a_listener_is_registered() {
    let db = common::scratch().await;
    let mut o = StoreOptions::new(db.dsn());
    o.auto_create = true;
    let b = PgBackend::open(o).await.expect("open");
    assert!(b.schema_report().features.notify_trigger);
    let listener = Backend::changes(&b).expect("a listener on tables with the trigger");
    let (admin, admin_conn) = tokio_postgres::connect(db.dsn(), tokio_postgres::NoTls)
        .await
        .expect("admin");
    tokio::spawn(admin_conn);

    // Nobody registered: the trigger sends nothing, a bare LISTEN hears nothing.
    let (_bare, mut bare) = bare_listener(db.dsn()).await;
    complete_one(&b, 0).await;
    assert!(
        tokio::time::timeout(Duration::from_millis(500), bare.recv())
            .await
            .is_err(),
        "no notification without a registered listener"
    );

    // Our listener registers and hears terminal arrivals only.
    let (tx, mut rx) = mpsc::unbounded_channel();
    let stop = CancellationToken::new();
    let task = {
        let (listener, stop) = (Arc::clone(&listener), stop.clone());
        tokio::spawn(async move { listener.listen(Arc::new(Sink(tx)), stop).await })
    };
    assert!(matches!(
        next(&mut rx, Duration::from_secs(10)).await,
        Some(Heard::Listening)
    ));
    assert_eq!(registered(&admin).await.len(), 1);
    let e = b.submit(prepare(NS, &request(1))).await.expect("submit");
    let leases = b.claim(&claim(NS, "t", 1, 30.0, "w")).await.expect("claim");
    assert!(
        next(&mut rx, Duration::from_millis(500)).await.is_none(),
        "a claim is not notified"
    );
    let done = b
        .complete(&leases[0].lease_ref(), &Completion::succeeded(json!(1)))
        .await
        .expect("complete");
    match next(&mut rx, Duration::from_secs(5)).await {
        Some(Heard::Changed(id, version)) => {
            assert_eq!((id, version), (e.id, done.version));
        }
        other => panic!("expected the completion, heard {other:?}"),
    }
    // The bare session hears the same payload now that the trigger sends.
    let payload = tokio::time::timeout(Duration::from_secs(5), bare.recv())
        .await
        .expect("the bare session hears it too")
        .expect("payload");
    assert_eq!(payload, format!("{} {}", e.id, done.version));

    // A cancel of a queued execution ends it: notified.
    let q = b.submit(prepare(NS, &request(2))).await.expect("submit");
    let cancelled = b
        .cancel(NS, q.id, Some("test".into()))
        .await
        .expect("cancel")
        .expect("found");
    match next(&mut rx, Duration::from_secs(5)).await {
        Some(Heard::Changed(id, version)) => assert_eq!((id, version), (q.id, cancelled.version)),
        other => panic!("expected the cancel, heard {other:?}"),
    }

    // 250 completions in one statement: every execution once, at most 100 per notification.
    let many: Vec<_> = (0..250).map(|n| prepare(NS, &request(100 + n))).collect();
    for r in b.submit_many(many).await.expect("submit_many") {
        r.expect("item");
    }
    let leases = b
        .claim(&claim(NS, "t", 250, 30.0, "w"))
        .await
        .expect("claim");
    assert_eq!(leases.len(), 250);
    let items: Vec<_> = leases
        .iter()
        .map(|l| (l.lease_ref(), Completion::succeeded(json!(null))))
        .collect();
    let ended: HashMap<Uuid, i64> = b
        .complete_many(&items)
        .await
        .expect("complete_many")
        .into_iter()
        .map(|r| r.map(|e| (e.id, e.version)).expect("item"))
        .collect();
    let mut heard = HashMap::new();
    while heard.len() < 250 {
        match next(&mut rx, Duration::from_secs(5)).await {
            Some(Heard::Changed(id, version)) => {
                assert!(heard.insert(id, version).is_none(), "{id} twice");
            }
            other => panic!("after {} of 250: {other:?}", heard.len()),
        }
    }
    assert_eq!(heard, ended);
    let mut sizes = Vec::new();
    while let Ok(Some(p)) = tokio::time::timeout(Duration::from_millis(300), bare.recv()).await {
        sizes.push(p.split(',').count());
    }
    // The bare session heard the cancel and the 250, in payloads of at most 100.
    assert!(sizes.iter().all(|s| *s <= 100), "{sizes:?}");
    assert_eq!(sizes.iter().sum::<usize>(), 251, "{sizes:?}");

    // Stopped: it unregisters.
    stop.cancel();
    task.await
        .expect("join")
        .expect("a stopped listener ends Ok");
    assert!(registered(&admin).await.is_empty());

    // Killed: `listen` ends with an error; the next session tidies the dead registration.
    let (tx, mut rx) = mpsc::unbounded_channel();
    let stop = CancellationToken::new();
    let task = {
        let (listener, stop) = (Arc::clone(&listener), stop.clone());
        tokio::spawn(async move { listener.listen(Arc::new(Sink(tx)), stop).await })
    };
    assert!(matches!(
        next(&mut rx, Duration::from_secs(10)).await,
        Some(Heard::Listening)
    ));
    let dead = registered(&admin).await;
    assert_eq!(dead.len(), 1);
    admin
        .execute("SELECT pg_terminate_backend($1)", &[&dead[0]])
        .await
        .expect("terminate");
    let outcome = tokio::time::timeout(Duration::from_secs(10), task)
        .await
        .expect("the killed session ends listen at once")
        .expect("join");
    assert!(outcome.is_err(), "{outcome:?}");
    assert_eq!(registered(&admin).await, dead, "nobody tidied yet");
    let (tx, mut rx) = mpsc::unbounded_channel();
    let stop = CancellationToken::new();
    let task = {
        let (listener, stop) = (Arc::clone(&listener), stop.clone());
        tokio::spawn(async move { listener.listen(Arc::new(Sink(tx)), stop).await })
    };
    assert!(matches!(
        next(&mut rx, Duration::from_secs(10)).await,
        Some(Heard::Listening)
    ));
    let now = registered(&admin).await;
    assert_eq!(now.len(), 1);
    assert_ne!(now, dead, "the dead session's registration is gone");
    let e = complete_one(&b, 3).await;
    match next(&mut rx, Duration::from_secs(5)).await {
        Some(Heard::Changed(id, version)) => assert_eq!((id, version), (e.id, e.version)),
        other => panic!("expected the completion, heard {other:?}"),
    }
    stop.cancel();
    task.await.expect("join").expect("stopped");

    b.close().await.expect("close");
    drop(admin);
    db.drop_database().await.expect("drop");
}
