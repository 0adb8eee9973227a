//! Tables cannot allocate outside the memory limit (each element is charged
//! against `memory_limit_bytes`) under both allocators, and a component that
//! declares more than its sandbox allows is refused when loaded.

use crate::common::*;
use crate::table_hog::table_hog;
use onestep_wasm::{
    CancelHandle, Error, Outcome, PoolingMode, Runtime, RuntimeSettings, SandboxSettings,
    TABLE_ELEMENT_BYTES,
};

#[tokio::test]
async fn the_table_hog_runs_within_its_limits() {
    let _g = shared();
    let h = runtime()
        .load_bytes("hog.wasm", &table_hog(2, 1, 10, 1000))
        .expect("load");
    let needs = h.needs();
    assert!(needs.measured);
    assert_eq!((needs.instances, needs.tables, needs.memories), (3, 3, 1));
    h.check_sandbox(&SandboxSettings::default()).expect("fits");
    let outcome = h
        .invoke(
            &SandboxSettings::default(),
            ctx(1),
            "{}",
            CancelHandle::new(),
            None,
        )
        .await;
    assert_eq!(outcome, Outcome::Succeeded("1".into()));
}

#[test]
fn a_component_over_its_sandbox_is_refused_at_load_with_the_need_and_the_limit() {
    let _g = shared();
    let dir = TempDir::new("tables52");
    let path = dir.path().join("tables52.wasm");
    std::fs::write(&path, table_hog(52, 0, 0, 0)).expect("write");
    // Refused before compiling, naming the component, the needs and the limits.
    let err = runtime()
        .load_for(&path, &SandboxSettings::default())
        .expect_err("52 tables do not fit the defaults");
    assert!(matches!(err, Error::OverLimits { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains("tables52.wasm"), "{text}");
    assert!(
        text.contains("52 tables per attempt but the task's sandbox allows max_tables: 8"),
        "{text}"
    );
    assert!(
        text.contains(
            "53 core instances per attempt but the task's sandbox allows max_instances: 32"
        ),
        "{text}"
    );
    // With raised limits (and a pool sized for them) it loads and runs.
    let raised = SandboxSettings {
        max_instances: 60,
        max_tables: 52,
        ..SandboxSettings::default()
    };
    let rt = Runtime::new(RuntimeSettings {
        pool: onestep_wasm::PoolSize::for_tasks([(1, &raised)]),
        ..RuntimeSettings::default()
    })
    .expect("runtime");
    let h = rt.load_for(&path, &raised).expect("fits the raised limits");
    h.check_sandbox(&raised).expect("fits");
    assert!(h.check_sandbox(&SandboxSettings::default()).is_err());
}

/// 64 tables grown to 1M elements each would take 512 MB of host memory
/// (+50 MB RSS pooled, +492 MB on demand before the fix); with a 32 MiB
/// sandbox the growth is charged against the limit, so only the growths that
/// fit succeed (4 × 8 MB next to 64 KiB of linear memory) and the host stays
/// bounded.
async fn tables_are_charged_against_the_memory_limit(pooling: PoolingMode) {
    let _g = exclusive();
    let limit: u64 = 32 << 20;
    let sandbox = SandboxSettings {
        memory_limit_bytes: limit,
        max_tables: 64,
        max_table_elements: 1_000_000,
        ..SandboxSettings::default()
    };
    let rt = Runtime::new(RuntimeSettings {
        pooling,
        pool: onestep_wasm::PoolSize::for_tasks([(2, &sandbox)]),
        max_memory_bytes: limit,
        ..RuntimeSettings::default()
    })
    .expect("runtime");
    let h = rt
        .load_bytes("grow.wasm", &table_hog(0, 64, 999_999, 0))
        .expect("load");
    h.check_sandbox(&sandbox).expect("declares little");
    let peak_resettable = reset_peak_rss();
    let before = rss_bytes();
    let report = h
        .invoke_report(&sandbox, ctx(1), "{}", CancelHandle::new(), None)
        .await;
    let peak = peak_rss_bytes();
    eprintln!(
        "table growth ({pooling:?}, pooling in use: {}): rss before {} MiB, peak {} MiB (resettable: {peak_resettable}), outcome {:?}",
        rt.pooling_enabled(),
        before >> 20,
        peak >> 20,
        report.outcome
    );
    let fit = (limit - 65_536 - 64 * TABLE_ELEMENT_BYTES) / (999_999 * TABLE_ELEMENT_BYTES);
    assert_eq!(fit, 4);
    assert_eq!(report.outcome, Outcome::Succeeded(fit.to_string()));
    if peak_resettable {
        let slack = 48 << 20;
        assert!(
            peak < before + limit + slack,
            "peak RSS {} MiB from {} MiB",
            peak >> 20,
            before >> 20
        );
    }
}

#[tokio::test]
async fn tables_are_charged_against_the_memory_limit_pooled() {
    tables_are_charged_against_the_memory_limit(PoolingMode::On).await;
}

#[tokio::test]
async fn tables_are_charged_against_the_memory_limit_on_demand() {
    tables_are_charged_against_the_memory_limit(PoolingMode::Off).await;
}
