//! The runner of `--handler`: the no-op runner (the cheapest possible handler) or a wasm
//! component through the wasm runtime and the cli's task runner ([`crate::Host`]).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result, bail};
use async_trait::async_trait;
use onestep_core::Limits;
use onestep_core::runner::{Invocation, RunOutcome, TaskRunner};
use onestep_wasm::{PoolSize, Runtime, RuntimeSettings, SandboxSettings};
use tokio_util::sync::CancellationToken;

use crate::Host;

/// A runner that returns its payload (the cheapest possible handler). It records the run
/// facts a component run records (digest, peak memory), so each attempt's diagnostics row is
/// written as it would be for a real handler.
pub(crate) struct NoopRunner;

#[async_trait]
impl TaskRunner for NoopRunner {
    async fn run(&self, invocation: Invocation, _cancel: CancellationToken) -> RunOutcome {
        if let Some(journal) = &invocation.journal {
            journal.record_facts(onestep_core::diagnostics::RunFacts {
                trap_kind: None,
                component_digest: Some(NOOP_DIGEST.to_owned()),
                fuel_consumed: None,
                peak_memory_bytes: Some(65_536),
            });
        }
        RunOutcome::Succeeded(invocation.payload)
    }
}

/// The digest the no-op runner reports: SHA-256 of the empty string.
const NOOP_DIGEST: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// The runner of `--handler`, and for a component whether the wasm runtime got its pooling
/// allocator (`None` for `noop`).
pub(crate) fn runner_for(
    host: &Host,
    handler: &str,
    concurrency: u32,
    sandbox: SandboxSettings,
) -> Result<(Arc<dyn TaskRunner>, Option<bool>)> {
    if handler == "noop" {
        return Ok((Arc::new(NoopRunner), None));
    }
    let Some(path) = handler.strip_prefix("component:") else {
        bail!("--handler must be 'noop' or 'component:PATH', got '{handler}'");
    };
    let settings = RuntimeSettings {
        cache_dir: host.wasm_cache_dir.clone(),
        pool: PoolSize::for_tasks([(concurrency, &sandbox)]),
        max_memory_bytes: (64u64 << 20).next_power_of_two(),
        fuel_metering: false,
        ..RuntimeSettings::default()
    };
    let runtime = Runtime::new(settings).context("cannot start the WebAssembly runtime")?;
    let loaded = runtime
        .load_for(PathBuf::from(path), &sandbox)
        .with_context(|| format!("cannot load {path}"))?;
    let runner = (host.component_runner)(loaded, sandbox, Limits::default().max_result_bytes);
    Ok((runner, Some(runtime.pooling_enabled())))
}
