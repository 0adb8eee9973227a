//! Compilation happens once; later loads come from the cache (observed
//! through the counters and the artifact files, not timing); a changed
//! component or engine setting never reuses an artifact. Also checks
//! `summarize`.

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
    assert_eq!(artifacts(dir.path()), 1, "the compile wrote one artifact");
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
    assert_eq!(artifacts(dir.path()), 1, "a hit writes no new artifact");

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

/// Compiled artifacts under a cache directory: wasmtime names each by the
/// hash of its key (no extension); its bookkeeping files (`*.stats`, `*.wip-*`,
/// `.cleanup*`) have one.
fn artifacts(dir: &std::path::Path) -> usize {
    let mut n = 0;
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).expect("read cache dir") {
            let path = entry.expect("cache dir entry").path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_none() && !entry_name(&path).starts_with('.') {
                n += 1;
            }
        }
    }
    n
}

fn entry_name(path: &std::path::Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// `settings` with the disk cache in `dir`.
fn cached(dir: &TempDir, settings: RuntimeSettings) -> RuntimeSettings {
    RuntimeSettings {
        cache_dir: Some(dir.path().to_path_buf()),
        ..settings
    }
}

#[test]
fn changed_engine_setting_does_not_reuse_an_artifact() {
    let _g = shared();
    ensure_rust_guests();
    let dir = TempDir::new("cache-settings");
    let path = guest_path("echo");
    let unmetered = cached(
        &dir,
        RuntimeSettings {
            fuel_metering: false,
            ..RuntimeSettings::default()
        },
    );
    // Fuel metering instruments the compiled code: an engine with it on must
    // not run code compiled without it (a fuel budget would not be enforced).
    let metered = RuntimeSettings {
        fuel_metering: true,
        ..unmetered.clone()
    };

    let a = Runtime::new(unmetered.clone()).expect("runtime");
    a.load(&path).expect("load");
    assert_eq!(a.compile_count(), 1);
    assert_eq!(artifacts(dir.path()), 1);
    drop(a);

    let b = Runtime::new(metered).expect("runtime");
    b.load(&path).expect("load with fuel metering");
    assert_eq!(b.compile_count(), 1, "{:?}", b.cache_stats());
    assert_eq!(b.cache_stats().disk_hits, 0);
    assert_eq!(artifacts(dir.path()), 2, "one artifact per engine setting");
    drop(b);

    // Each setting keeps its own artifact: back to the first, a hit.
    let c = Runtime::new(unmetered).expect("runtime");
    c.load(&path).expect("load");
    assert_eq!(c.compile_count(), 0, "{:?}", c.cache_stats());
    assert_eq!(c.cache_stats().disk_hits, 1);
    assert_eq!(artifacts(dir.path()), 2);
}

#[test]
fn changed_component_does_not_reuse_an_artifact() {
    let _g = shared();
    ensure_rust_guests();
    let dir = TempDir::new("cache-bytes");
    let settings = cached(&dir, RuntimeSettings::default());
    let bytes = std::fs::read(guest_path("echo")).expect("read echo");
    // The same component plus a custom section (id 0, size, name, payload): a
    // new build whose code is unchanged is still a different component.
    // Section size 14 = name length byte + 12-byte name + 1-byte payload.
    let mut changed = bytes.clone();
    changed.extend_from_slice(&[0, 14, 12]);
    changed.extend_from_slice(b"onestep-test");
    changed.push(1);

    let a = Runtime::new(settings.clone()).expect("runtime");
    a.load_bytes("echo.wasm", &bytes).expect("load");
    drop(a);
    let b = Runtime::new(settings).expect("runtime");
    let h = b.load_bytes("echo.wasm", &changed).expect("load changed");
    assert_eq!(b.compile_count(), 1, "{:?}", b.cache_stats());
    assert_eq!(b.cache_stats().disk_hits, 0);
    assert_eq!(artifacts(dir.path()), 2);
    assert_eq!(h.world_version(), "onestep:handler@0.1.0");
}
