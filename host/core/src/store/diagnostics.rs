//! Attempt diagnostics as the backends store them (docs/observability.md#attempt-diagnostics):
//! the rows a final or a live write carries ([`DiagRow`]), a stored row as plain values
//! ([`StoredDiagnostics`]) and the assembly of the attempts and log-tail reads. Each backend
//! keeps its statements and its driver's decoding.

use std::collections::HashMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use uuid::Uuid;

use crate::diagnostics::{
    AttemptDiagnostics, AttemptProgress, AttemptRecord, LiveDiagnostics, LogTail, RunFacts,
};
use crate::error::ExecutionError;
use crate::execution::LeaseRef;
use crate::ports::ExecutionStore;

/// One diagnostics row to write (one per attempt).
#[derive(Debug, Clone, Copy)]
pub struct DiagRow<'a> {
    /// The attempt and its execution.
    pub lease: &'a LeaseRef,
    /// Written by the completion (a live write never replaces it).
    pub is_final: bool,
    /// The handler-error (or trap) message.
    pub message: Option<&'a str>,
    /// The last progress report.
    pub progress: Option<&'a AttemptProgress>,
    /// The log tail.
    pub log: Option<&'a LogTail>,
    /// Trap kind, digest, fuel and memory (final rows only).
    pub facts: Option<&'a RunFacts>,
}

impl<'a> DiagRow<'a> {
    /// The final rows of the attempts a completion finishes (each `(lease, diagnostics)`).
    pub fn finals(items: &'a [(&'a LeaseRef, &'a AttemptDiagnostics)]) -> Vec<DiagRow<'a>> {
        items
            .iter()
            .map(|(lease, d)| DiagRow {
                lease,
                is_final: true,
                message: d.message.as_deref(),
                progress: d.progress.as_ref(),
                log: d.log.as_ref(),
                facts: Some(&d.facts),
            })
            .collect()
    }

    /// The live rows of running attempts (the heartbeat's write).
    pub fn live(items: &'a [(LeaseRef, LiveDiagnostics)]) -> Vec<DiagRow<'a>> {
        items
            .iter()
            .map(|(lease, live)| DiagRow {
                lease,
                is_final: false,
                message: None,
                progress: live.progress.as_ref(),
                log: live.log.as_ref(),
                facts: None,
            })
            .collect()
    }
}

/// The final rows of a completion's attempts, with the table to write them to; `None` when
/// there is nothing to write (no diagnostics table, or no attempts).
pub fn final_write<'a>(
    table: Option<String>,
    items: &'a [(&'a LeaseRef, &'a AttemptDiagnostics)],
) -> Option<(String, Vec<DiagRow<'a>>)> {
    table
        .filter(|_| !items.is_empty())
        .map(|t| (t, DiagRow::finals(items)))
}

/// What the heartbeat's live write of `items` does.
#[derive(Debug)]
pub enum LiveWrite<'a> {
    /// Nothing to write: the answer at once (`false` without a diagnostics table, meaning
    /// diagnostics are not kept; `true` for no items).
    Answer(bool),
    /// Write these rows to this table, then answer `true`.
    Rows(String, Vec<DiagRow<'a>>),
}

impl<'a> LiveWrite<'a> {
    /// The live write of `items` when the diagnostics table is `table`.
    pub fn of(table: Option<String>, items: &'a [(LeaseRef, LiveDiagnostics)]) -> Self {
        match table {
            None => LiveWrite::Answer(false),
            Some(_) if items.is_empty() => LiveWrite::Answer(true),
            Some(t) => LiveWrite::Rows(t, DiagRow::live(items)),
        }
    }
}

/// Implements the inherent `write_live` of the backend type `$backend` (the
/// [`LeaseStore::record_live`](crate::ports::LeaseStore::record_live) of
/// [`impl_lease_store!`](crate::impl_lease_store)): the answer of [`LiveWrite::of`] for its
/// diagnostics table (`d(&self) -> Option<String>`), else the rows written by its inherent
/// `write_live_once(&str, &[DiagRow])`, one attempt run under the label `diagnostics`.
#[macro_export]
macro_rules! impl_live_write {
    ($backend:ty) => {
        impl $backend {
            /// Writes the live diagnostics of running attempts; `false` when diagnostics are
            /// not kept.
            pub(crate) async fn write_live(
                &self,
                items: &[($crate::LeaseRef, $crate::diagnostics::LiveDiagnostics)],
            ) -> ::std::result::Result<bool, $crate::ExecutionError> {
                use $crate::store::diagnostics::LiveWrite;
                let (table, rows) = match LiveWrite::of(self.d(), items) {
                    LiveWrite::Answer(answer) => return Ok(answer),
                    LiveWrite::Rows(table, rows) => (table, rows),
                };
                self.run("diagnostics", || self.write_live_once(&table, &rows))
                    .await?;
                Ok(true)
            }
        }
    };
}

/// Whether the final diagnostics just written under a savepoint are kept: `Ok(true)` when
/// written; `Ok(false)` when writing them failed for good (`lost` gives the failure to log,
/// `None` for a failure that fails the completion too), logged, so that the savepoint is
/// rolled back and the completion goes on; else the error.
pub fn final_kept<E>(
    written: Result<(), E>,
    lost: impl FnOnce(&E) -> Option<String>,
) -> Result<bool, E> {
    let Err(e) = written else {
        return Ok(true);
    };
    match lost(&e) {
        Some(error) => {
            tracing::warn!(%error, "attempt diagnostics not written");
            Ok(false)
        }
        None => Err(e),
    }
}

/// What [`AttemptReads::attempt_rows`] reads: the attempts, oldest first, without their
/// diagnostics; and the diagnostics stored per attempt.
pub type AttemptRows = (Vec<AttemptRecord>, Vec<(Uuid, AttemptDiagnostics)>);

/// What [`AttemptReads::stored_log`] reads: `None` without the attempt, `Some(None)` without a
/// stored tail, else `(total_lines, lines_json)`.
pub type StoredLog = Option<Option<(u64, Option<String>)>>;

/// One stored diagnostics row as its driver reads it (counters already unsigned), without the
/// log lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredDiagnostics {
    /// `attempt_id`.
    pub attempt_id: Uuid,
    /// `message`.
    pub message: Option<String>,
    /// `progress_done`.
    pub progress_done: Option<u64>,
    /// `progress_total`.
    pub progress_total: Option<u64>,
    /// `progress_note`.
    pub progress_note: Option<String>,
    /// `progress_at`.
    pub progress_at: Option<DateTime<Utc>>,
    /// `log_lines`.
    pub log_lines: u64,
    /// `trap_kind`, `component_digest`, `fuel_consumed`, `peak_memory_bytes`.
    pub facts: RunFacts,
}

impl StoredDiagnostics {
    /// The attempt and its diagnostics (progress only when done and reported-at are both set).
    pub fn into_parts(self) -> (Uuid, AttemptDiagnostics) {
        let progress = match (self.progress_done, self.progress_at) {
            (Some(done), Some(at)) => Some(AttemptProgress {
                done,
                total: self.progress_total.unwrap_or(0),
                note: self.progress_note.unwrap_or_default(),
                at,
            }),
            _ => None,
        };
        let diagnostics = AttemptDiagnostics {
            message: self.message,
            progress,
            // The lines themselves come from the logs route; the count says whether there are any.
            log: (self.log_lines > 0).then(|| LogTail {
                total_lines: self.log_lines,
                lines: Vec::new(),
            }),
            facts: self.facts,
        };
        (self.attempt_id, diagnostics)
    }
}

/// The attempts of an execution, oldest first, each with the diagnostics stored for it.
pub fn with_diagnostics(
    attempts: Vec<AttemptRecord>,
    diagnostics: Vec<(Uuid, AttemptDiagnostics)>,
) -> Vec<AttemptRecord> {
    let mut by_attempt: HashMap<Uuid, AttemptDiagnostics> = diagnostics.into_iter().collect();
    attempts
        .into_iter()
        .map(|mut rec| {
            rec.diagnostics = by_attempt.remove(&rec.id);
            rec
        })
        .collect()
}

/// The answer of `attempt_log` from what was read: `None` without the attempt, `Some(None)`
/// without a stored tail, else the tail its stored `(total_lines, lines_json)` decodes to
/// (`decode`).
pub fn attempt_log(
    found: Option<Option<(u64, Option<String>)>>,
    decode: impl FnOnce(u64, &str) -> Result<LogTail, ExecutionError>,
) -> Result<Option<Option<LogTail>>, ExecutionError> {
    Ok(match found {
        None => None,
        Some(None) | Some(Some((_, None))) => Some(None),
        Some(Some((total_lines, Some(text)))) => Some(Some(decode(total_lines, &text)?)),
    })
}

/// The reads behind `ExecutionStore::attempts` and `attempt_log`
/// (docs/observability.md#attempt-diagnostics): the backend reads the stored rows, and the
/// provided methods answer (`None` for an execution not in the namespace).
#[async_trait]
pub trait AttemptReads: ExecutionStore {
    /// The attempts of execution `id`, oldest first, without their diagnostics; and the
    /// diagnostics stored per attempt.
    async fn attempt_rows(&self, id: Uuid) -> Result<AttemptRows, ExecutionError>;

    /// What is stored of the log of attempt `attempt_no` of `id`: `None` without the attempt,
    /// `Some(None)` without a stored tail, else `(total_lines, lines_json)`.
    async fn stored_log(&self, id: Uuid, attempt_no: u32) -> Result<StoredLog, ExecutionError>;

    /// A stored tail decoded ([`LogTail::from_stored`] unless the backend words it otherwise).
    fn log_tail(&self, total_lines: u64, lines_json: &str) -> Result<LogTail, ExecutionError> {
        LogTail::from_stored(total_lines, lines_json)
    }

    /// The attempts of one execution of `namespace`, oldest first, each with its diagnostics
    /// (without the log lines: [`Self::read_attempt_log`]).
    async fn read_attempts(
        &self,
        namespace: &str,
        id: Uuid,
    ) -> Result<Option<Vec<AttemptRecord>>, ExecutionError> {
        if self.get(namespace, id).await?.is_none() {
            return Ok(None);
        }
        let (attempts, diagnostics) = self.attempt_rows(id).await?;
        Ok(Some(with_diagnostics(attempts, diagnostics)))
    }

    /// The log tail of one attempt (see [`attempt_log`]).
    async fn read_attempt_log(
        &self,
        namespace: &str,
        id: Uuid,
        attempt_no: u32,
    ) -> Result<Option<Option<LogTail>>, ExecutionError> {
        if self.get(namespace, id).await?.is_none() {
            return Ok(None);
        }
        let found = self.stored_log(id, attempt_no).await?;
        attempt_log(found, |total_lines, text| self.log_tail(total_lines, text))
    }
}
