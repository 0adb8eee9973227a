//! Per-invocation store data: the WASI context, the resource limiter, and
//! the implementation of the `onestep:handler/host` imports.

use std::sync::Arc;
use wasmtime::ResourceLimiter;
use wasmtime_wasi::{ResourceTable, WasiCtx, WasiCtxView, WasiView};

use crate::bindings::{Level, onestep::handler};
use crate::cancel::CancelHandle;
use crate::context::LogIds;
use crate::handles::OpenHandles;

/// Longest single `log` message kept (longer ones are truncated).
const MAX_LOG_MESSAGE_BYTES: usize = 16 * 1024;

/// The `T` of every `Store<T>`. One per invocation, never reused.
pub(crate) struct State {
    pub(crate) wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) limits: Limits,
    pub(crate) ids: Arc<LogIds>,
    pub(crate) cancel: CancelHandle,
    /// Bytes of `log` messages the guest may still send.
    pub(crate) log_budget: u64,
    pub(crate) log_dropped: bool,
    /// Files, directories and streams the guest holds open (capped).
    pub(crate) handles: OpenHandles,
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Resource limiter: a memory ceiling across all memories of the store plus
/// instance/table/memory counts. Denials surface in the guest as failed
/// growth (an allocation failure) and are remembered so the host can report
/// `Trapped{MemoryLimit}` instead of a generic trap.
#[derive(Debug)]
pub(crate) struct Limits {
    pub(crate) memory_limit: usize,
    pub(crate) memory_used: usize,
    pub(crate) memory_peak: usize,
    pub(crate) memory_denied: bool,
    pub(crate) table_elements: usize,
    pub(crate) instances: usize,
    pub(crate) tables: usize,
    pub(crate) memories: usize,
}

impl ResourceLimiter for Limits {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let growth = desired.saturating_sub(current);
        let total = self.memory_used.saturating_add(growth);
        if total > self.memory_limit {
            self.memory_denied = true;
            return Ok(false);
        }
        self.memory_used = total;
        self.memory_peak = self.memory_peak.max(total);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= self.table_elements)
    }

    fn instances(&self) -> usize {
        self.instances
    }

    fn tables(&self) -> usize {
        self.tables
    }

    fn memories(&self) -> usize {
        self.memories
    }
}

impl handler::types::Host for State {}

impl handler::host::Host for State {
    fn log(&mut self, level: Level, message: String) {
        let len = message.len() as u64;
        if len > self.log_budget {
            if !self.log_dropped {
                self.log_dropped = true;
                tracing::warn!(
                    target: "onestep_wasm::guest",
                    execution_id = %self.ids.execution_id,
                    attempt_id = %self.ids.attempt_id,
                    "guest log budget exhausted; further log messages are dropped"
                );
            }
            return;
        }
        self.log_budget -= len;
        let mut message = message;
        if message.len() > MAX_LOG_MESSAGE_BYTES {
            let mut cut = MAX_LOG_MESSAGE_BYTES;
            while !message.is_char_boundary(cut) {
                cut -= 1;
            }
            message.truncate(cut);
            message.push_str("…[truncated]");
        }
        let ids = &self.ids;
        macro_rules! emit {
            ($lvl:ident) => {
                tracing::$lvl!(
                    target: "onestep_wasm::guest",
                    execution_id = %ids.execution_id,
                    attempt_id = %ids.attempt_id,
                    task = %ids.task_name,
                    namespace = %ids.namespace,
                    "{message}"
                )
            };
        }
        match level {
            Level::Trace => emit!(trace),
            Level::Debug => emit!(debug),
            Level::Info => emit!(info),
            Level::Warn => emit!(warn),
            Level::Error => emit!(error),
        }
    }

    fn cancel_requested(&mut self) -> bool {
        self.cancel.is_cancelled()
    }

    fn progress(&mut self, done: u64, total: u64, note: String) {
        let note: String = note.chars().take(256).collect();
        tracing::debug!(
            target: "onestep_wasm::guest",
            execution_id = %self.ids.execution_id,
            attempt_id = %self.ids.attempt_id,
            done,
            total,
            "progress: {note}"
        );
    }
}
