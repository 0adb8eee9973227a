//! Component store cases (docs/semantics.md#component-store): a component of several chunks
//! round-trips byte for byte, a put is idempotent (one stored copy, never overwritten), a
//! component over the cap is refused naming it and writes nothing, a corrupted chunk is reported
//! as corrupt rather than returned, a missing digest is `None`, and concurrent puts of the same
//! bytes all succeed with one stored copy. On tables without the component tables every call is
//! refused with the upgrade message, which [`supported`] checks before a case returns early.

use std::sync::Arc;

use onestep_core::components::{
    CHUNK_BYTES, COMPONENTS_TABLE_ABSENT, ComponentDigest, ComponentStore, MAX_COMPONENT_BYTES,
};

use super::case;
use crate::suite::{Case, Fixture};

pub(crate) fn cases() -> Vec<Case> {
    vec![
        case("components_round_trip_of_several_chunks", |fx| {
            Box::pin(round_trip(fx))
        }),
        case("components_put_is_idempotent", |fx| {
            Box::pin(idempotent(fx))
        }),
        case("components_over_the_cap_writes_nothing", |fx| {
            Box::pin(over_cap(fx))
        }),
        case("components_corrupt_chunk_is_detected", |fx| {
            Box::pin(corrupt(fx))
        }),
        case("components_missing_digest_is_none", |fx| {
            Box::pin(missing(fx))
        }),
        case("components_concurrent_puts_store_one_copy", |fx| {
            Box::pin(concurrent(fx))
        }),
        case(
            "components_headerless_chunks_are_unreadable_then_completed",
            |fx| Box::pin(headerless(fx)),
        ),
    ]
}

/// Two and a half chunks of bytes that differ per `seed` (every chunk distinct).
fn bytes(seed: u8) -> Vec<u8> {
    (0..CHUNK_BYTES * 5 / 2)
        .map(|i| (i % 251) as u8 ^ seed ^ (i / CHUNK_BYTES) as u8)
        .collect()
}

/// Whether the store keeps components; `false` (checked: the refusal naming the upgrade) on
/// tables without the component tables.
async fn supported(fx: &Fixture) -> bool {
    match fx.components.get(&ComponentDigest::of(b"probe")).await {
        Ok(found) => {
            assert_eq!(found, None, "nothing stored yet");
            true
        }
        Err(e) => {
            let text = e.to_string();
            assert_eq!(e.code(), "invalid_argument", "{text}");
            assert!(
                text.contains(COMPONENTS_TABLE_ABSENT)
                    && text.contains("onestep migrate --upgrade"),
                "{text}"
            );
            false
        }
    }
}

async fn round_trip(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    let before = fx.clock.now_value();
    let b = bytes(1);
    let d = fx.components.put(&b).await.expect("put");
    assert_eq!(d, ComponentDigest::of(&b));
    assert!(d.as_str().starts_with("sha256:"), "{d}");
    assert_eq!(
        fx.components.get(&d).await.expect("get").as_deref(),
        Some(&b[..])
    );
    assert!(fx.components.exists(&d).await.expect("exists"));
    let stat = fx.components.stat(&d).await.expect("stat").expect("stored");
    assert_eq!(stat.digest, d);
    assert_eq!(stat.size, b.len() as u64);
    assert_eq!(stat.chunks, 3);
    assert!(
        stat.created_at >= before - chrono::TimeDelta::seconds(1),
        "{stat:?}"
    );
    assert_eq!(fx.probe.component_rows(&d).await, (1, 3));
    // An empty component and a one-byte one are components too.
    for small in [&b""[..], &b"x"[..]] {
        let d = fx.components.put(small).await.expect("put small");
        assert_eq!(
            fx.components.get(&d).await.expect("get small").as_deref(),
            Some(small)
        );
    }
}

async fn idempotent(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    let b = bytes(2);
    let first = fx.components.put(&b).await.expect("put");
    let stat = fx
        .components
        .stat(&first)
        .await
        .expect("stat")
        .expect("stored");
    fx.clock.advance(60.0);
    let again = fx.components.put(&b).await.expect("put again");
    assert_eq!(first, again);
    assert_eq!(
        fx.components
            .stat(&again)
            .await
            .expect("stat")
            .expect("stored"),
        stat,
        "never overwritten: the first put's header stays"
    );
    assert_eq!(fx.probe.component_rows(&first).await, (1, 3));
    let other = fx.components.put(&bytes(3)).await.expect("put other");
    assert_ne!(other, first);
    assert_eq!(
        fx.components.get(&first).await.expect("get").as_deref(),
        Some(&b[..])
    );
}

async fn over_cap(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    let big = vec![7u8; MAX_COMPONENT_BYTES + 1];
    let e = fx.components.put(&big).await.expect_err("over the cap");
    let text = e.to_string();
    assert!(
        text.contains(&format!("at most {MAX_COMPONENT_BYTES} bytes")),
        "{text}"
    );
    let d = ComponentDigest::of(&big);
    assert_eq!(fx.probe.component_rows(&d).await, (0, 0));
    assert!(!fx.components.exists(&d).await.expect("exists"));
}

async fn corrupt(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    let b = bytes(4);
    let d = fx.components.put(&b).await.expect("put");
    assert!(
        fx.probe.corrupt_component_chunk(&d, 1).await,
        "chunk 1 exists"
    );
    let e = fx.components.get(&d).await.expect_err("corrupt");
    let text = e.to_string();
    assert_eq!(e.code(), "undecodable_row", "{text}");
    assert!(
        text.contains(&format!("stored component {d} is corrupt")),
        "{text}"
    );
    // A put of the right bytes never overwrites: the component stays corrupt, and says so.
    fx.components.put(&b).await.expect("put again");
    assert!(fx.components.get(&d).await.is_err());
}

async fn missing(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    let d = ComponentDigest::of(b"never stored");
    assert_eq!(fx.components.get(&d).await.expect("get"), None);
    assert_eq!(fx.components.stat(&d).await.expect("stat"), None);
    assert!(!fx.components.exists(&d).await.expect("exists"));
}

async fn concurrent(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    let b = Arc::new(bytes(5));
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let store: Arc<dyn ComponentStore> = Arc::clone(&fx.components);
        let b = Arc::clone(&b);
        tasks.push(tokio::spawn(async move { store.put(&b).await }));
    }
    let want = ComponentDigest::of(&b);
    for t in tasks {
        assert_eq!(t.await.expect("join").expect("put"), want);
    }
    assert_eq!(fx.probe.component_rows(&want).await, (1, 3));
    assert_eq!(
        fx.components.get(&want).await.expect("get").as_deref(),
        Some(&b[..])
    );
}

/// Chunks without their header (what a put cut short would leave if its transaction survived)
/// are not a component: nothing reads them, and the next put of the bytes completes it.
async fn headerless(fx: Fixture) {
    if !supported(&fx).await {
        return;
    }
    let b = bytes(6);
    let d = ComponentDigest::of(&b);
    if !fx
        .probe
        .insert_component_chunk(&d, 0, &b[..CHUNK_BYTES])
        .await
    {
        return;
    }
    assert_eq!(fx.probe.component_rows(&d).await, (0, 1));
    assert_eq!(fx.components.get(&d).await.expect("get"), None);
    assert_eq!(fx.components.stat(&d).await.expect("stat"), None);
    assert!(!fx.components.exists(&d).await.expect("exists"));
    assert_eq!(fx.components.put(&b).await.expect("put"), d);
    assert_eq!(fx.probe.component_rows(&d).await, (1, 3));
    assert_eq!(
        fx.components.get(&d).await.expect("get").as_deref(),
        Some(&b[..])
    );
}
