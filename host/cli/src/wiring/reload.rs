//! Redeploying a component without a restart (docs/cli.md#redeploying-a-component): `onestep run`
//! watches each task's component file (its size and modification time, once per poll) and
//! reloads it once a change has been stable for one poll, or on SIGHUP. The new build is
//! compiled and linked for the task's sandbox first (the same load `onestep run` does at start);
//! if that fails the running build keeps serving and the error is logged; otherwise new
//! attempts run the new build while attempts in flight finish on theirs. Every attempt records
//! the digest of the build it ran (docs/observability.md#attempt-diagnostics). A task quarantined
//! because its component could not be loaded (docs/security.md#one-tenants-bad-deploy) is
//! watched the same way: its first build that loads lifts the quarantine.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use onestep_config::TaskConfig;
use onestep_wasm::Runtime;
use onestep_worker::{Quarantine, QuarantineCause, QuarantineKind};
use tokio_util::sync::CancellationToken;

use super::wasm_runner::{WasmTaskRunner, load_task_handler};

/// One task whose component may be replaced.
pub(crate) struct ReloadTarget {
    /// The task (its component path and name).
    pub(crate) task: TaskConfig,
    /// Its runner.
    pub(crate) runner: Arc<WasmTaskRunner>,
    /// Its quarantine switch: set while no build of its component has loaded.
    pub(crate) quarantine: Quarantine,
}

/// What the watcher last saw of a file: size and modification time (`None`: unreadable).
type Stamp = Option<(u64, SystemTime)>;

fn stamp(task: &TaskConfig) -> Stamp {
    let m = std::fs::metadata(&task.handler.component).ok()?;
    Some((m.len(), m.modified().ok()?))
}

struct Watched {
    target: ReloadTarget,
    /// The stamp of the build that serves (or that last failed to load).
    loaded: Stamp,
    /// A new stamp seen once; loaded when the next poll sees it unchanged.
    pending: Option<Stamp>,
}

/// Watches `targets` every `interval` until `stop` fires.
pub(crate) fn spawn(
    runtime: Runtime,
    targets: Vec<ReloadTarget>,
    interval: Duration,
    stop: CancellationToken,
) {
    if targets.is_empty() {
        return;
    }
    tokio::spawn(async move {
        let mut watched: Vec<Watched> = targets
            .into_iter()
            .map(|target| Watched {
                loaded: stamp(&target.task),
                target,
                pending: None,
            })
            .collect();
        let mut hup = hangup();
        let mut ticks = tokio::time::interval(interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let forced = tokio::select! {
                _ = stop.cancelled() => return,
                _ = ticks.tick() => false,
                _ = next_hangup(&mut hup) => true,
            };
            if forced {
                tracing::info!("SIGHUP: reloading every task's component");
            }
            for w in &mut watched {
                let now = stamp(&w.target.task);
                let due = if forced {
                    true
                } else if now == w.loaded {
                    w.pending = None;
                    false
                } else if w.pending == Some(now) {
                    true
                } else {
                    w.pending = Some(now);
                    false
                };
                if due {
                    w.pending = None;
                    w.loaded = now;
                    reload(&runtime, &w.target).await;
                }
            }
        }
    });
}

/// Loads the task's component again (off the async threads: compiling is CPU-heavy) and swaps
/// it in when it differs from the serving build; a task without a build takes it and leaves its
/// `load` quarantine, or stays quarantined with the new error.
async fn reload(runtime: &Runtime, target: &ReloadTarget) {
    let name = target.task.name.clone();
    let (rt, task, sandbox) = (
        runtime.clone(),
        target.task.clone(),
        target.runner.sandbox().clone(),
    );
    let loaded = tokio::task::spawn_blocking(move || load_task_handler(&rt, &task, &sandbox)).await;
    match loaded {
        Ok(Ok(handler)) => {
            let new = handler.digest_hex();
            if target.runner.digest().as_deref() == Some(new.as_str()) {
                tracing::debug!(task = %name, digest = %new, "component unchanged");
                return;
            }
            match target.runner.replace(handler) {
                Some(old) => tracing::info!(
                    task = %name,
                    old_digest = %old,
                    new_digest = %new,
                    "component reloaded: new attempts run the new build, attempts in flight finish on theirs"
                ),
                None => tracing::info!(
                    task = %name,
                    new_digest = %new,
                    "component loaded for a quarantined task"
                ),
            }
            // The fetch loop logs the lift.
            target.quarantine.lift_kind(QuarantineKind::Load);
        }
        Ok(Err(e)) if target.runner.digest().is_none() => {
            // Still no build: the task stays quarantined, now for this error (the fetch loop
            // logs a new error once; the same one again is not repeated).
            let cause = QuarantineCause::new(QuarantineKind::Load, format!("{e:#}"));
            if !target.quarantine.set(cause) {
                tracing::debug!(task = %name, "component still refused; the task stays quarantined");
            }
        }
        Ok(Err(e)) => tracing::error!(
            task = %name,
            error = %format!("{e:#}"),
            "new component refused; the running build keeps serving"
        ),
        Err(e) => tracing::error!(task = %name, error = %e, "component reload failed"),
    }
}

#[cfg(unix)]
type Hangup = Option<tokio::signal::unix::Signal>;
#[cfg(not(unix))]
type Hangup = Option<()>;

fn hangup() -> Hangup {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::hangup()) {
            Ok(s) => Some(s),
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGHUP; components reload on file changes only");
                None
            }
        }
    }
    #[cfg(not(unix))]
    {
        None
    }
}

async fn next_hangup(hup: &mut Hangup) {
    #[cfg(unix)]
    if let Some(s) = hup
        && s.recv().await.is_some()
    {
        return;
    }
    let _ = hup;
    std::future::pending::<()>().await
}
