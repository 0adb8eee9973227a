//! The load check of a deployment (docs/deployments.md#load-check): the
//! [`ComponentVetter`] port implemented with the WebAssembly runtime, injected into the API by
//! `onestep serve`. It makes the checks a worker makes when it loads a task's component and
//! that `onestep check --strict` reports ([`onestep_wasm::Runtime::load_bytes_for`]: the
//! component's declared needs within the sandbox, compile through the compile cache, link every
//! import against the host's, the handler export, outbound HTTP only with an allow-list), with
//! the same messages.
//!
//! Each check builds its own runtime (on-demand allocation, fuel metering on, the compile cache
//! shared with workers on the same host) and drops it afterwards, so the API process keeps no
//! compiled component in memory; the work runs on a blocking thread, never on the async ones.
//! At most [`MAX_CONCURRENT_VETS`] checks run at once; more wait.

use std::sync::Arc;

use async_trait::async_trait;
use onestep_core::deploy_policy::DeploymentSettings;
use onestep_core::deployments::ComponentVetter;
use onestep_wasm::{PoolingMode, Runtime, RuntimeSettings};

/// Load checks compiling at once (compilation is CPU-heavy; the API keeps serving).
pub(crate) const MAX_CONCURRENT_VETS: usize = 2;

/// The runtime-backed load check.
pub(crate) struct WasmVetter {
    cache_dir: Option<std::path::PathBuf>,
    permits: Arc<tokio::sync::Semaphore>,
}

impl WasmVetter {
    /// A vetter compiling through the compile cache at `cache_dir` (the workers' cache:
    /// [`super::wasm_cache_dir`]).
    pub(crate) fn new(cache_dir: Option<std::path::PathBuf>) -> Self {
        WasmVetter {
            cache_dir,
            permits: Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_VETS)),
        }
    }
}

/// The check itself, blocking: what a worker does when it loads `bytes` for `settings`.
pub(crate) fn vet_blocking(
    cache_dir: Option<std::path::PathBuf>,
    bytes: &[u8],
    settings: &DeploymentSettings,
) -> Result<(), String> {
    let runtime = Runtime::new(RuntimeSettings {
        cache_dir,
        pooling: PoolingMode::Off,
        fuel_metering: true,
        max_memory_bytes: settings.sandbox.memory_limit_bytes.next_power_of_two(),
        ..RuntimeSettings::default()
    })
    .map_err(|e| format!("the WebAssembly runtime cannot start: {e}"))?;
    let name = format!("{}.wasm", settings.task);
    runtime
        .load_bytes_for(&name, bytes, &settings.sandbox)
        .map(|_| ())
        .map_err(|e| format!("{} ({})", e, e.kind()))
}

#[async_trait]
impl ComponentVetter for WasmVetter {
    async fn vet(&self, bytes: &[u8], settings: &DeploymentSettings) -> Result<(), String> {
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| "the load check is shutting down".to_owned())?;
        let cache_dir = self.cache_dir.clone();
        let bytes = bytes.to_vec();
        let settings = settings.clone();
        tokio::task::spawn_blocking(move || vet_blocking(cache_dir, &bytes, &settings))
            .await
            .map_err(|e| format!("the load check failed: {e}"))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(json: serde_json::Value) -> DeploymentSettings {
        serde_json::from_value(json).expect("settings")
    }

    fn component(name: &str) -> Vec<u8> {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../guest-examples/out")
            .join(name);
        std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    #[test]
    fn a_real_component_passes_and_bad_ones_are_refused_with_the_loaders_reason() {
        let s = settings(serde_json::json!({
            "namespace": "ns", "task": "echo", "sandbox": {}, "concurrency": 1
        }));
        vet_blocking(None, &component("echo.wasm"), &s).expect("echo loads");
        let e = vet_blocking(None, b"not wasm at all", &s).expect_err("garbage");
        assert!(e.contains("not-a-component"), "{e}");
        let e = vet_blocking(None, &component("bad-import.wasm"), &s).expect_err("bad import");
        assert!(e.contains("cannot be linked"), "{e}");
        assert!(e.contains("missing-import"), "{e}");
        // Outbound HTTP without an allow-list: refused as the worker refuses it.
        let e = vet_blocking(None, &component("fetch.wasm"), &s).expect_err("no network");
        assert!(e.contains("sandbox"), "{e}");
    }
}
