//! 10,000 invocations of echo: no memory growth, no leaked pool slots.

use crate::common::*;
use onestep_wasm::{CancelHandle, Outcome, SandboxSettings};

#[tokio::test]
async fn ten_thousand_echo_invocations_do_not_grow() {
    let echo = load("echo");
    let _g = exclusive();
    let rt = runtime();
    let sandbox = SandboxSettings::default();
    let payload = r#"{"n": 12345, "s": "some text to copy around"}"#;
    let run = |n: usize| {
        let echo = echo.clone();
        let sandbox = sandbox.clone();
        async move {
            for _ in 0..n {
                let outcome = echo
                    .invoke(&sandbox, ctx(1), payload, CancelHandle::new(), None)
                    .await;
                assert_eq!(outcome, Outcome::Succeeded(payload.to_string()));
            }
        }
    };
    // Warm up: fill allocator caches and warm pool slots.
    run(1_000).await;
    let before = rss_bytes();
    run(10_000).await;
    let after = rss_bytes();
    eprintln!(
        "RSS before {} KiB, after 10k echo {} KiB",
        before >> 10,
        after >> 10
    );
    assert!(
        after < before + (8 << 20),
        "RSS grew from {} KiB to {} KiB",
        before >> 10,
        after >> 10
    );
    if let Some(pool) = rt.pool_stats() {
        eprintln!("pool after soak: {pool:?}");
        assert_eq!(pool.component_instances, 0);
        assert_eq!(pool.core_instances, 0);
        assert_eq!(pool.memories, 0);
        assert_eq!(pool.tables, 0);
        assert_eq!(pool.stacks, 0);
    }
}
