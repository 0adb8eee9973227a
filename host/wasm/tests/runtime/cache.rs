//! Compilation happens once; later loads come from the cache (observed
//! through the counters, not timing). Also checks `summarize`.

use crate::common::*;
use onestep_wasm::{
    CancelHandle, Outcome, Preopen, PreopenMode, Runtime, RuntimeSettings, SandboxSettings,
};

#[tokio::test]
async fn cache_hit_avoids_compilation() {
    let _g = shared();
    ensure_rust_guests();
    let dir = TempDir::new("cache");
    let settings = RuntimeSettings {
        cache_dir: Some(dir.path().to_path_buf()),
        ..RuntimeSettings::default()
    };
    let path = guest_path("summarize");

    let first = Runtime::new(settings.clone()).expect("runtime");
    let h1 = first.load(&path).expect("load");
    assert_eq!(first.compile_count(), 1);
    // Same runtime, same bytes: served from memory.
    let h2 = first.load(&path).expect("load again");
    assert_eq!(first.compile_count(), 1);
    assert_eq!(first.cache_stats().memory_hits, 1);
    assert_eq!(h1.digest_hex(), h2.digest_hex());
    drop(first);

    // A new process (runtime) with the same cache dir: no compilation.
    let second = Runtime::new(settings).expect("runtime");
    let h3 = second.load(&path).expect("load from disk cache");
    assert_eq!(second.compile_count(), 0, "{:?}", second.cache_stats());
    assert_eq!(second.cache_stats().disk_hits, 1);

    // And the cached artifact runs.
    let docs = TempDir::new("docs");
    let text = "the quick brown fox\njumps over the lazy dog\nThe end.\n";
    std::fs::write(docs.path().join("x.txt"), text).expect("write doc");
    let sandbox = SandboxSettings {
        preopens: vec![Preopen {
            host: docs.path().to_path_buf(),
            guest: "/docs".into(),
            mode: PreopenMode::Ro,
        }],
        ..SandboxSettings::default()
    };
    let outcome = h3
        .invoke(
            &sandbox,
            ctx(1),
            r#"{"path": "/docs/x.txt"}"#,
            CancelHandle::new(),
            None,
        )
        .await;
    let Outcome::Succeeded(out) = outcome else {
        panic!("{outcome:?}")
    };
    let out = json(&out);
    assert_eq!(out["lines"], 3);
    assert_eq!(out["words"], 11);
    assert_eq!(out["bytes"], text.len());
    assert_eq!(
        out["top_terms"][0],
        serde_json::json!({"term": "the", "count": 3})
    );
    assert_eq!(
        out["sha256"],
        "bdd0ca562f530a44baa3d3e1b072e9e80807373db648c8e7ee0025a08336462f"
    );
}

#[test]
fn runtime_without_disk_cache_counts_compiles() {
    let _g = shared();
    ensure_rust_guests();
    let rt = Runtime::new(RuntimeSettings::default()).expect("runtime");
    rt.load(guest_path("echo")).expect("load");
    rt.load(guest_path("echo")).expect("load");
    assert_eq!(rt.compile_count(), 1);
    assert_eq!(rt.cache_stats().memory_hits, 1);
}
