//! Per-invocation store data: the WASI context, the resource limiter, and
//! the implementation of the `onestep:handler/host` imports.

use std::sync::Arc;
use wasmtime::ResourceLimiter;
use wasmtime_wasi::{ResourceTable, WasiCtx, WasiCtxView, WasiView};

use crate::bindings::{Level, onestep::handler};
use crate::cancel::CancelHandle;
use crate::context::LogIds;
use crate::guest_log;
use crate::handles::OpenHandles;
use crate::log_budget::LogBudget;
use crate::needs::TABLE_ELEMENT_BYTES;
use crate::settings::SandboxSettings;

/// The `T` of every `Store<T>`. One per invocation, never reused.
pub(crate) struct State {
    pub(crate) wasi: WasiCtx,
    pub(crate) table: ResourceTable,
    pub(crate) limits: Limits,
    pub(crate) ids: Arc<LogIds>,
    pub(crate) cancel: CancelHandle,
    /// What the guest may still put in the log (shared with the captures).
    pub(crate) log: LogBudget,
    /// Files, directories and streams the guest holds open (capped).
    pub(crate) handles: OpenHandles,
    /// Outbound HTTP of the attempt (`wasi:http`).
    pub(crate) http: crate::http::HttpState,
    /// Header bytes of the `wasi:http` resources the guest holds (capped).
    pub(crate) http_fields: crate::http::resources::FieldsBudget,
    /// The attempt's durable steps (`0.3.0`'s `durable`), when the host keeps them.
    pub(crate) steps: Option<crate::durable::DurableSteps>,
    /// What the attempt's step calls did.
    pub(crate) step_counts: crate::durable::StepCounts,
    /// The wake time of a sleep that parks the attempt (set just before the sleep's trap).
    pub(crate) parked: Option<chrono::DateTime<chrono::Utc>>,
    /// Sleeps the guest reached again after their wake time (it resumed past them).
    pub(crate) wakes: u32,
}

impl WasiView for State {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// Resource limiter of one attempt: one byte ceiling over all linear memories
/// *and* all tables of the store (table elements are charged
/// [`TABLE_ELEMENT_BYTES`] each, the host memory wasmtime spends on them, so
/// tables cannot be used to allocate outside `memory_limit_bytes`), plus the
/// sandbox's counts of core instances, tables, memories and elements per
/// table. Denied growth surfaces in the guest as a failed `memory.grow` /
/// `table.grow` (an allocation failure); a denial by the byte ceiling is
/// remembered so the host can report `Trapped{MemoryLimit}` instead of a
/// generic trap. Counts over the limits fail the instantiation.
#[derive(Debug)]
pub(crate) struct Limits {
    /// Byte ceiling over linear memories plus tables.
    pub(crate) memory_limit: usize,
    /// Bytes of linear memory in use.
    pub(crate) memory_used: usize,
    /// Largest `memory_used` seen (linear memory only).
    pub(crate) memory_peak: usize,
    /// Bytes charged for table elements.
    pub(crate) table_bytes: usize,
    pub(crate) memory_denied: bool,
    pub(crate) table_elements: usize,
    pub(crate) instances: usize,
    pub(crate) tables: usize,
    pub(crate) memories: usize,
}

impl Limits {
    /// The limits of one attempt in `sandbox`, its memory ceiling clamped to
    /// the runtime's largest memory slot.
    pub(crate) fn new(sandbox: &SandboxSettings, max_memory_bytes: u64) -> Self {
        let memory_limit = sandbox.memory_limit_bytes.min(max_memory_bytes);
        Limits {
            memory_limit: usize::try_from(memory_limit).unwrap_or(usize::MAX),
            memory_used: 0,
            memory_peak: 0,
            table_bytes: 0,
            memory_denied: false,
            table_elements: usize::try_from(sandbox.max_table_elements).unwrap_or(usize::MAX),
            instances: usize::try_from(sandbox.max_instances).unwrap_or(usize::MAX),
            tables: usize::try_from(sandbox.max_tables).unwrap_or(usize::MAX),
            memories: usize::try_from(sandbox.max_memories).unwrap_or(usize::MAX),
        }
    }

    /// Whether `more` bytes still fit under the ceiling.
    fn fits(&self, more: usize) -> bool {
        self.memory_used
            .saturating_add(self.table_bytes)
            .saturating_add(more)
            <= self.memory_limit
    }
}

impl ResourceLimiter for Limits {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let growth = desired.saturating_sub(current);
        if !self.fits(growth) {
            self.memory_denied = true;
            return Ok(false);
        }
        self.memory_used = self.memory_used.saturating_add(growth);
        self.memory_peak = self.memory_peak.max(self.memory_used);
        Ok(true)
    }

    fn table_growing(
        &mut self,
        current: usize,
        desired: usize,
        _maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        if desired > self.table_elements {
            return Ok(false);
        }
        let bytes = desired
            .saturating_sub(current)
            .saturating_mul(TABLE_ELEMENT_BYTES as usize);
        if !self.fits(bytes) {
            self.memory_denied = true;
            return Ok(false);
        }
        self.table_bytes = self.table_bytes.saturating_add(bytes);
        Ok(true)
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
        if let Some(journal) = &self.ids.journal {
            journal.log(guest_log::level_name(level), &message);
        }
        if let Some(message) = self.log.admit(guest_log::level_of(level), &message) {
            guest_log::log(&self.ids, level, &message);
        }
    }

    fn cancel_requested(&mut self) -> bool {
        self.cancel.is_cancelled()
    }

    fn progress(&mut self, done: u64, total: u64, note: String) {
        if let Some(journal) = &self.ids.journal {
            journal.progress(done, total, &note);
        }
        if let Some(note) = self.log.admit(tracing::Level::DEBUG, &note) {
            guest_log::progress(&self.ids, done, total, &note);
        }
    }
}
