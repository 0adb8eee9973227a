//! List cases of the client: paging over identical `created_at` and mixed id versions, which
//! cursors a namespace may continue, the search filters and the search window
//! (docs/semantics.md#listing-and-cursors). Registered by [`super::client::cases`].

use chrono::Duration;
use onestep_core::cursor::Cursor;
use onestep_core::execution::Completion;
use onestep_core::request::{ListQuery, ListSearch, SubmitRequest};
use onestep_core::{ErrorObject, Execution, ExecutionClient};
use onestep_core::{ExecutionError, ExecutionStatus};
use serde_json::json;

use super::{NS, TASK, claim_one, submit};
use crate::builders::{self, prepare};
use crate::suite::Fixture;

/// Which cursors may continue a namespace's list (docs/semantics.md#listing-and-cursors): its
/// own execution's, and a position naming an id it does not hold — never used, purged since, or
/// another namespace's, all answered alike (no existence oracle); not its own at another time.
pub(super) async fn cursor_owner(fx: Fixture) {
    let ours = submit(&fx, json!(1)).await;
    let theirs = fx
        .store
        .submit(builders::prepared("other", TASK, json!(2)))
        .await
        .expect("submit other");
    let store = &fx.store;
    assert!(store.get(NS, ours.id).await.expect("get").is_some());
    assert!(store.get("other", theirs.id).await.expect("get").is_some());
    let gone = uuid::Uuid::now_v7();
    assert!(store.get(NS, gone).await.expect("get").is_none());

    let client = ExecutionClient::new(fx.store.clone(), NS, fx.limits).expect("client");
    let cursor = |id, created_at| Cursor { created_at, id }.encode();
    client
        .check_cursor_owner(&cursor(ours.id, ours.created_at))
        .await
        .expect("own execution");
    let later = ours.created_at + Duration::seconds(1);
    // An unknown id and another namespace's id at the same position: the same answer and the
    // same page (this namespace's rows before the position), nothing of the other namespace.
    let mut pages = Vec::new();
    for (what, id) in [
        ("an unused id", gone),
        ("another namespace's id", theirs.id),
    ] {
        let text = cursor(id, later);
        client
            .check_cursor_owner(&text)
            .await
            .unwrap_or_else(|e| panic!("{what}: a position, got {e}"));
        let page = client
            .list(&ListQuery {
                cursor: Some(text),
                ..ListQuery::default()
            })
            .await
            .expect("list after the position");
        pages.push(page.items.iter().map(|e| e.id).collect::<Vec<_>>());
    }
    assert_eq!(
        pages[0],
        vec![ours.id],
        "the rows created before the position"
    );
    assert_eq!(
        pages[0], pages[1],
        "a foreign cursor answers like an unused one"
    );
    // Another namespace's cursor at its own exact time: a position too.
    client
        .check_cursor_owner(&cursor(theirs.id, theirs.created_at))
        .await
        .expect("another namespace's cursor is a position");
    for (what, text) in [
        (
            "its own at another time",
            cursor(ours.id, ours.created_at + Duration::microseconds(1)),
        ),
        ("malformed", "not-a-cursor".to_owned()),
    ] {
        match client.check_cursor_owner(&text).await {
            Err(ExecutionError::InvalidArgument(m)) => {
                assert_eq!(m, "invalid execution cursor", "{what}");
            }
            other => panic!("{what} cursor: expected invalid execution cursor, got {other:?}"),
        }
    }
}

pub(super) async fn list_paging(fx: Fixture) {
    let mut ids = Vec::new();
    for i in 0..7 {
        ids.push(submit(&fx, json!(i)).await.id);
    }
    fx.clock.advance(1.0);
    let other = fx
        .store
        .submit(builders::prepared(NS, "t2", json!("x")))
        .await
        .expect("t2");
    fx.store
        .submit(builders::prepared("elsewhere", TASK, json!("x")))
        .await
        .expect("other namespace");
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let q = ListQuery {
            limit: 3,
            cursor: cursor.clone(),
            ..ListQuery::default()
        };
        let page = fx
            .store
            .list(NS, &q.validate().expect("query"))
            .await
            .expect("list");
        seen.extend(page.items.iter().map(|e| e.id));
        match page.next_cursor {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    assert_eq!(seen.len(), 8, "no duplicates, no gaps: {seen:?}");
    assert_eq!(seen[0], other.id, "newest first");
    let mut sorted_tail = seen[1..].to_vec();
    sorted_tail.dedup();
    assert_eq!(sorted_tail.len(), 7);
    for id in &ids {
        assert!(seen.contains(id));
    }
    let q = ListQuery {
        task_name: Some(TASK.into()),
        limit: 50,
        ..ListQuery::default()
    };
    let page = fx
        .store
        .list(NS, &q.validate().expect("query"))
        .await
        .expect("list");
    assert_eq!(page.items.len(), 7);
    assert!(page.next_cursor.is_none());
    let q = ListQuery {
        status: Some(ExecutionStatus::Running),
        ..ListQuery::default()
    };
    let page = fx
        .store
        .list(NS, &q.validate().expect("query"))
        .await
        .expect("list");
    assert!(page.items.is_empty());
}

/// Rows written before UUIDv7 (random v4 ids) and after (v7) share one order: pages of a
/// listing over mixed ids sharing `created_at` neither repeat nor skip a row and agree with one
/// large page (docs/semantics.md#time-ordered-ids). The id order itself is the backend's (a
/// MariaDB `uuid` column orders differently from `CHAR(32)`), so only consistency is asserted.
pub(super) async fn list_paging_mixed_ids(fx: Fixture) {
    use uuid::{NoContext, Timestamp, Uuid};
    let v7_at = |secs: u64| Uuid::new_v7(Timestamp::from_unix(NoContext, secs, 0));
    let mut ids = vec![
        Uuid::new_v4(),
        v7_at(1),
        Uuid::new_v4(),
        v7_at(1_700_000_000),
        Uuid::now_v7(),
        Uuid::new_v4(),
        v7_at(4_000_000_000),
        Uuid::new_v4(),
        // The extremes of the hex order: a v4 id starting with 0 and one starting with f.
        Uuid::from_u128(0x0000_0000_0000_4000_8000_0000_0000_0001),
        Uuid::from_u128(0xffff_ffff_ffff_4fff_bfff_ffff_ffff_fffe),
    ];
    for (i, id) in ids.iter().enumerate() {
        let mut sub = builders::prepared(NS, TASK, json!(i));
        sub.id = *id;
        assert_eq!(fx.store.submit(sub).await.expect("submit").id, *id);
    }
    // A second created_at, so the cursor crosses a timestamp boundary as well as ties.
    fx.clock.advance(1.0);
    for i in 0..3 {
        let mut sub = builders::prepared(NS, TASK, json!(100 + i));
        if i == 1 {
            sub.id = Uuid::new_v4();
        }
        ids.push(fx.store.submit(sub).await.expect("submit").id);
    }
    let all = fx
        .store
        .list(
            NS,
            &ListQuery {
                limit: 200,
                ..ListQuery::default()
            }
            .validate()
            .expect("query"),
        )
        .await
        .expect("list");
    let one_page: Vec<_> = all.items.iter().map(|e| e.id).collect();
    assert_eq!(one_page.len(), ids.len());
    assert!(all.next_cursor.is_none());
    assert!(
        all.items
            .windows(2)
            .all(|w| w[0].created_at >= w[1].created_at),
        "newest first"
    );
    for limit in [1, 2, 3, 4] {
        let mut seen = Vec::new();
        let mut cursor = None;
        loop {
            let q = ListQuery {
                limit,
                cursor: cursor.clone(),
                ..ListQuery::default()
            };
            let page = fx
                .store
                .list(NS, &q.validate().expect("query"))
                .await
                .expect("list");
            assert!(page.items.len() <= limit as usize);
            seen.extend(page.items.iter().map(|e| e.id));
            match page.next_cursor {
                Some(c) => cursor = Some(c),
                None => break,
            }
            assert!(seen.len() <= ids.len(), "paging does not end: {seen:?}");
        }
        assert_eq!(seen, one_page, "pages of {limit} agree with one page");
    }
    for id in &ids {
        assert!(one_page.contains(id), "{id} listed");
    }
}

/// The extra list filters (docs/semantics.md#listing-and-cursors): created-at range, key, metadata string value,
/// exception-type substring (any case); every given filter must hold; paging still works.
pub(super) async fn list_search(fx: Fixture) {
    let keyed_meta = |key: &str, meta: serde_json::Value| {
        prepare(
            NS,
            &SubmitRequest {
                task_name: TASK.into(),
                payload: json!(key),
                idempotency_key: Some(key.into()),
                metadata: Some(meta),
                ..SubmitRequest::default()
            },
        )
    };
    let a = fx
        .store
        .submit(keyed_meta("ka", json!({"team": "red", "n": 1})))
        .await
        .expect("a");
    fx.clock.advance(10.0);
    let b = fx
        .store
        .submit(keyed_meta("kb", json!({"team": "blue"})))
        .await
        .expect("b");
    // b fails with a ValueError.
    let lease = claim_one(&fx, 30.0).await;
    assert_eq!(lease.execution.id, a.id, "oldest first");
    fx.leases
        .complete(&lease.lease_ref(), &Completion::succeeded(json!(1)))
        .await
        .expect("a succeeds");
    let lease = claim_one(&fx, 30.0).await;
    fx.leases
        .complete(
            &lease.lease_ref(),
            &Completion::failed(ErrorObject::new("error", "builtins.ValueError", None)),
        )
        .await
        .expect("b fails");
    fx.clock.advance(10.0);
    let c = fx
        .store
        .submit(keyed_meta("kc", json!({"team": 7})))
        .await
        .expect("c");
    let ids = |search: ListSearch| {
        let fx = &fx;
        async move {
            let mut filter = ListQuery::default().validate().expect("query");
            filter.search = search.validate().expect("search");
            let page = fx.store.list(NS, &filter).await.expect("list");
            page.items
                .iter()
                .map(|e: &Execution| e.id)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(ids(ListSearch::default()).await, [c.id, b.id, a.id]);
    let t_b = b.created_at;
    assert_eq!(
        ids(ListSearch {
            created_from: Some(t_b),
            ..ListSearch::default()
        })
        .await,
        [c.id, b.id]
    );
    assert_eq!(
        ids(ListSearch {
            created_before: Some(t_b),
            ..ListSearch::default()
        })
        .await,
        [a.id]
    );
    assert_eq!(
        ids(ListSearch {
            idempotency_key: Some("kb".into()),
            ..ListSearch::default()
        })
        .await,
        [b.id]
    );
    assert_eq!(
        ids(ListSearch {
            metadata: Some(("team".into(), "red".into())),
            ..ListSearch::default()
        })
        .await,
        [a.id]
    );
    // A number is not the string "7"; a missing key matches nothing.
    assert!(
        ids(ListSearch {
            metadata: Some(("team".into(), "7".into())),
            ..ListSearch::default()
        })
        .await
        .is_empty()
    );
    assert!(
        ids(ListSearch {
            metadata: Some(("nope".into(), "red".into())),
            ..ListSearch::default()
        })
        .await
        .is_empty()
    );
    assert_eq!(
        ids(ListSearch {
            exception_type: Some("valueerr".into()),
            ..ListSearch::default()
        })
        .await,
        [b.id]
    );
    // `%` and `_` are literal characters, not patterns.
    assert!(
        ids(ListSearch {
            exception_type: Some("%".into()),
            ..ListSearch::default()
        })
        .await
        .is_empty()
    );
    // Every filter must hold.
    assert!(
        ids(ListSearch {
            idempotency_key: Some("ka".into()),
            exception_type: Some("Value".into()),
            ..ListSearch::default()
        })
        .await
        .is_empty()
    );
    let bad = ListSearch {
        created_from: Some(t_b),
        created_before: Some(t_b),
        ..ListSearch::default()
    };
    assert!(bad.validate().is_err());
}

/// A metadata or exception-type search examines at most `window` rows per page
/// (docs/semantics.md#search-window): a full window without enough matches is a short (maybe
/// empty) `partial` page whose cursor goes on after the last row examined; a short window is
/// the end; enough matches make an ordinary page; other filters ignore the window.
pub(super) async fn list_search_window(fx: Fixture) {
    // e0 (oldest) .. e7; red: e1, e6; e0 failed with a KeyError.
    let mut ids = Vec::new();
    for n in 0..8 {
        let team = if n == 1 || n == 6 { "red" } else { "blue" };
        let e = fx
            .store
            .submit(prepare(
                NS,
                &SubmitRequest {
                    task_name: TASK.into(),
                    payload: json!(n),
                    idempotency_key: Some(format!("w{n}")),
                    metadata: Some(json!({ "team": team })),
                    ..SubmitRequest::default()
                },
            ))
            .await
            .expect("submit");
        ids.push(e.id);
        if n == 0 {
            let lease = claim_one(&fx, 30.0).await;
            fx.leases
                .complete(
                    &lease.lease_ref(),
                    &Completion::failed(ErrorObject::new("error", "builtins.KeyError", None)),
                )
                .await
                .expect("fail");
        }
        fx.clock.advance(1.0);
    }
    let page = |search: ListSearch, limit: u32, window: u32, after: Option<String>| {
        let fx = &fx;
        async move {
            let mut filter = ListQuery {
                limit,
                cursor: after,
                ..ListQuery::default()
            }
            .validate()
            .expect("query");
            filter.search = search.validate().expect("search");
            filter.window = window;
            let page = fx.store.list(NS, &filter).await.expect("list");
            let got: Vec<_> = page.items.iter().map(|e: &Execution| e.id).collect();
            (got, page.next_cursor, page.partial)
        }
    };
    let red = || ListSearch {
        metadata: Some(("team".into(), "red".into())),
        ..ListSearch::default()
    };
    // Window e7 e6 e5: e6, then go on after e5.
    let (got, next, partial) = page(red(), 50, 3, None).await;
    assert_eq!(got, [ids[6]]);
    assert!(partial, "a full window is a partial page");
    let next = next.expect("a full window has a cursor");
    let at = onestep_core::cursor::Cursor::decode(&next).expect("cursor");
    assert_eq!(
        at.id, ids[5],
        "the cursor is the last row examined, not the last match"
    );
    // Window e4 e3 e2: nothing matches, still a cursor.
    let (got, next, partial) = page(red(), 50, 3, Some(next)).await;
    assert!(got.is_empty());
    assert!(partial);
    let next = next.expect("an empty full window has a cursor");
    // Window e1 e0 (short): e1 and the end.
    let (got, next, partial) = page(red(), 50, 3, Some(next)).await;
    assert_eq!(got, [ids[1]]);
    assert_eq!((next, partial), (None, false), "a short window is the end");
    // Enough matches inside the window: an ordinary page, whose cursor is its last item.
    let (got, next, partial) = page(red(), 1, 8, None).await;
    assert_eq!(got, [ids[6]]);
    assert!(!partial);
    let (got, next, partial) = page(red(), 1, 8, next).await;
    assert_eq!((got, next, partial), (vec![ids[1]], None, false));
    // Exactly `limit` matches in a full window: partial, from the window's end.
    let (got, next, partial) = page(red(), 2, 8, None).await;
    assert_eq!(got, [ids[6], ids[1]]);
    assert!(partial);
    let (got, next, partial) = page(red(), 2, 8, next).await;
    assert_eq!((got, next, partial), (vec![], None, false));
    // The exception type is windowed the same way (window e7..e4, then e3..e0).
    let key_error = || ListSearch {
        exception_type: Some("keyerror".into()),
        ..ListSearch::default()
    };
    let (got, next, partial) = page(key_error(), 50, 4, None).await;
    assert!(got.is_empty());
    assert!(partial);
    let (got, _, _) = page(key_error(), 50, 4, next).await;
    assert_eq!(got, [ids[0]]);
    // No window without a residual filter, or with a key (a lookup).
    let (got, next, partial) = page(ListSearch::default(), 50, 3, None).await;
    assert_eq!(got.len(), 8);
    assert_eq!((next, partial), (None, false));
    let keyed_red = ListSearch {
        idempotency_key: Some("w1".into()),
        ..red()
    };
    let (got, next, partial) = page(keyed_red, 50, 1, None).await;
    assert_eq!((got, next, partial), (vec![ids[1]], None, false));
}
