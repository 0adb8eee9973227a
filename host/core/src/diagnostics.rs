//! Per-attempt diagnostics (docs/observability.md#attempt-diagnostics): what a handler author
//! needs to see why one attempt did what it did — the handler-error message, the last
//! `progress(done, total, note)`, a bounded tail of the guest's log lines, the trap kind, the
//! component digest, fuel and peak memory.
//!
//! While an attempt runs, the runner writes into its [`AttemptJournal`] (shared through a
//! [`JournalHandle`] in the [`Invocation`](crate::runner::Invocation)); the worker's heartbeat
//! ticker persists [`AttemptJournal::live`] snapshots when something changed, and the completion
//! carries the final [`AttemptDiagnostics`]. Every field has a documented cap, so what a guest
//! can make the host store per attempt is bounded whatever it does.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::text::truncate_utf8;

/// A guest's text as it is stored: U+0000, which PostgreSQL's `text` refuses, becomes U+FFFD
/// (docs/semantics.md#storable-values), so a guest cannot make its attempt's diagnostics unwritable.
fn storable_text(text: &str) -> String {
    text.replace('\0', "\u{fffd}")
}
use crate::time::SharedClock;

/// Bytes of the handler-error message kept with an attempt (longer ones are cut at a character
/// boundary and marked `truncated`).
pub const MESSAGE_LIMIT_BYTES: usize = 8 * 1024;
/// Bytes of a progress note kept.
pub const PROGRESS_NOTE_LIMIT_BYTES: usize = 1024;
/// Bytes of one log line's message kept in the tail.
pub const LOG_LINE_LIMIT_BYTES: usize = 4 * 1024;
/// Bytes of log lines kept in an attempt's tail, each line counted as its message plus
/// [`LOG_LINE_OVERHEAD_BYTES`] (the oldest lines go first; so at most 1,024 lines).
pub const LOG_TAIL_LIMIT_BYTES: usize = 64 * 1024;
/// What one kept line costs beyond its message (its number, time and level).
pub const LOG_LINE_OVERHEAD_BYTES: usize = 64;
/// Bytes of a trap kind or component digest kept.
pub const SHORT_TEXT_LIMIT_BYTES: usize = 255;

/// The last progress report of an attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptProgress {
    /// Units done.
    pub done: u64,
    /// Units in all (0 = unknown).
    pub total: u64,
    /// The guest's note (at most [`PROGRESS_NOTE_LIMIT_BYTES`]).
    pub note: String,
    /// When the guest reported it.
    pub at: DateTime<Utc>,
}

/// One guest log line kept in the tail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogLine {
    /// 1-based position among all lines the attempt wrote (stable, so a follower can tell new
    /// lines from ones it has seen).
    pub seq: u64,
    /// When the guest wrote it.
    pub at: DateTime<Utc>,
    /// `error`, `warn`, `info`, `debug`, `trace`, `stdout` or `stderr`.
    pub level: String,
    /// The text (at most [`LOG_LINE_LIMIT_BYTES`]).
    pub message: String,
}

/// The kept end of an attempt's log.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LogTail {
    /// Lines written in all (the tail holds the last ones).
    pub total_lines: u64,
    /// The kept lines, oldest first.
    pub lines: Vec<LogLine>,
}

impl LogTail {
    /// The stored form of the kept lines: a JSON array of [`LogLine`]
    /// (docs/observability.md#attempt-diagnostics), the same on every backend.
    pub fn lines_json(&self) -> Result<String, crate::ExecutionError> {
        serde_json::to_string(&self.lines)
            .map_err(|e| crate::ExecutionError::Encoding(format!("cannot encode a log tail: {e}")))
    }

    /// The tail read back from its stored form ([`Self::lines_json`]).
    pub fn from_stored(total_lines: u64, lines_json: &str) -> Result<Self, crate::ExecutionError> {
        let lines: Vec<LogLine> = serde_json::from_str(lines_json).map_err(|e| {
            crate::ExecutionError::Encoding(format!("cannot decode the log tail: {e}"))
        })?;
        Ok(LogTail { total_lines, lines })
    }

    /// Lines written but no longer kept.
    pub fn dropped_lines(&self) -> u64 {
        self.total_lines
            .saturating_sub(u64::try_from(self.lines.len()).unwrap_or(u64::MAX))
    }
}

/// What the runner knows once the handler call returned.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RunFacts {
    /// The trap kind when the guest trapped (`timeout`, `cancelled`, `out_of_fuel`,
    /// `memory_limit`, `panic`, `trap`).
    pub trap_kind: Option<String>,
    /// Lower-case hex SHA-256 of the component file that ran.
    pub component_digest: Option<String>,
    /// Fuel consumed, when metering is on.
    pub fuel_consumed: Option<u64>,
    /// Peak linear memory in bytes.
    pub peak_memory_bytes: Option<u64>,
}

/// What is persisted with one attempt (docs/observability.md#attempt-diagnostics).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AttemptDiagnostics {
    /// The handler-error (or trap) message, at most [`MESSAGE_LIMIT_BYTES`].
    pub message: Option<String>,
    /// The last progress report.
    pub progress: Option<AttemptProgress>,
    /// The log tail; `None` when the guest wrote no lines.
    pub log: Option<LogTail>,
    /// Trap kind, digest, fuel and memory.
    pub facts: RunFacts,
}

/// A running attempt's progress and log tail, for the heartbeat's live write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveDiagnostics {
    /// The last progress report.
    pub progress: Option<AttemptProgress>,
    /// The log tail; `None` when the guest wrote no lines yet.
    pub log: Option<LogTail>,
}

#[derive(Debug, Default)]
struct JournalState {
    lines: VecDeque<LogLine>,
    line_bytes: usize,
    total_lines: u64,
    progress: Option<AttemptProgress>,
    facts: RunFacts,
    /// Bumped on every change; the live writer remembers the one it persisted.
    version: u64,
    persisted: u64,
}

/// The in-memory record of one running attempt. Cheap to write (one short mutex hold per
/// line); its memory is bounded by [`LOG_TAIL_LIMIT_BYTES`] plus one line.
#[derive(Debug)]
pub struct AttemptJournal {
    clock: SharedClock,
    state: Mutex<JournalState>,
}

impl AttemptJournal {
    /// An empty journal reading "now" from `clock`.
    pub fn new(clock: SharedClock) -> Self {
        AttemptJournal {
            clock,
            state: Mutex::new(JournalState::default()),
        }
    }

    fn state(&self) -> MutexGuard<'_, JournalState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Appends a log line at `level` (see [`LogLine::level`]); the oldest lines go when the
    /// tail is over [`LOG_TAIL_LIMIT_BYTES`].
    pub fn log(&self, level: &str, message: &str) {
        let message = storable_text(truncate_utf8(message, LOG_LINE_LIMIT_BYTES));
        let at = self.clock.now();
        let mut st = self.state();
        st.total_lines = st.total_lines.saturating_add(1);
        st.line_bytes = st
            .line_bytes
            .saturating_add(message.len() + LOG_LINE_OVERHEAD_BYTES);
        let seq = st.total_lines;
        st.lines.push_back(LogLine {
            seq,
            at,
            level: level.to_owned(),
            message,
        });
        while st.line_bytes > LOG_TAIL_LIMIT_BYTES {
            match st.lines.pop_front() {
                Some(old) => {
                    st.line_bytes = st
                        .line_bytes
                        .saturating_sub(old.message.len() + LOG_LINE_OVERHEAD_BYTES)
                }
                None => break,
            }
        }
        st.version = st.version.wrapping_add(1);
    }

    /// Records a progress report (the last one wins).
    pub fn progress(&self, done: u64, total: u64, note: &str) {
        let note = storable_text(truncate_utf8(note, PROGRESS_NOTE_LIMIT_BYTES));
        let at = self.clock.now();
        let mut st = self.state();
        st.progress = Some(AttemptProgress {
            done,
            total,
            note,
            at,
        });
        st.version = st.version.wrapping_add(1);
    }

    /// Records what the runner learnt when the call returned.
    pub fn record_facts(&self, facts: RunFacts) {
        let mut st = self.state();
        st.facts = RunFacts {
            trap_kind: facts
                .trap_kind
                .map(|s| storable_text(truncate_utf8(&s, SHORT_TEXT_LIMIT_BYTES))),
            component_digest: facts
                .component_digest
                .map(|s| storable_text(truncate_utf8(&s, SHORT_TEXT_LIMIT_BYTES))),
            ..facts
        };
    }

    fn tail(st: &JournalState) -> Option<LogTail> {
        (st.total_lines > 0).then(|| LogTail {
            total_lines: st.total_lines,
            lines: st.lines.iter().cloned().collect(),
        })
    }

    /// The progress and tail, when they changed since the last call that returned `Some`.
    pub fn live(&self) -> Option<LiveDiagnostics> {
        let mut st = self.state();
        if st.version == st.persisted {
            return None;
        }
        st.persisted = st.version;
        Some(LiveDiagnostics {
            progress: st.progress.clone(),
            log: Self::tail(&st),
        })
    }

    /// Marks a [`Self::live`] snapshot as not persisted after all, so the next call returns
    /// one again.
    pub fn unpersist(&self) {
        let mut st = self.state();
        st.persisted = st.version.wrapping_sub(1);
    }

    /// The final record, with the run's `message` (cut to [`MESSAGE_LIMIT_BYTES`]).
    pub fn finish(&self, message: Option<&str>) -> AttemptDiagnostics {
        let st = self.state();
        AttemptDiagnostics {
            message: message.map(|m| storable_text(truncate_utf8(m, MESSAGE_LIMIT_BYTES))),
            progress: st.progress.clone(),
            log: Self::tail(&st),
            facts: st.facts.clone(),
        }
    }
}

/// A shared [`AttemptJournal`]; equal only to itself (so the structs that carry it keep their
/// `PartialEq`).
#[derive(Debug, Clone)]
pub struct JournalHandle(pub Arc<AttemptJournal>);

impl JournalHandle {
    /// A new journal reading "now" from `clock`.
    pub fn new(clock: SharedClock) -> Self {
        JournalHandle(Arc::new(AttemptJournal::new(clock)))
    }
}

impl std::ops::Deref for JournalHandle {
    type Target = AttemptJournal;
    fn deref(&self) -> &AttemptJournal {
        &self.0
    }
}

impl PartialEq for JournalHandle {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for JournalHandle {}

/// What a caller sees of one attempt (`GET /v1/executions/{id}/attempts`).
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptRecord {
    /// The attempt id.
    pub id: uuid::Uuid,
    /// 1-based attempt number.
    pub attempt_no: u32,
    /// `running`, `succeeded`, `retrying`, `failed`, `cancelled` or `lease_lost`.
    pub status: String,
    /// The worker that held the lease.
    pub worker_id: String,
    /// When the attempt started.
    pub started_at: DateTime<Utc>,
    /// The last heartbeat.
    pub heartbeat_at: DateTime<Utc>,
    /// When it finished.
    pub finished_at: Option<DateTime<Utc>>,
    /// The attempt's error object (as the reference stores it).
    pub error: Option<crate::ErrorObject>,
    /// The persisted diagnostics; `None` when there are none (table absent, lease lost, a
    /// worker that does not write them).
    pub diagnostics: Option<AttemptDiagnostics>,
}

/// Which executions `purge` removes (docs/cli.md#purge).
#[derive(Debug, Clone, PartialEq)]
pub struct PurgeRequest {
    /// Only executions of this namespace; all namespaces when `None`.
    pub namespace: Option<String>,
    /// Executions finished before this instant.
    pub finished_before: DateTime<Utc>,
    /// Only these terminal statuses (all terminal ones when empty).
    pub statuses: Vec<crate::ExecutionStatus>,
    /// Executions removed per transaction (1..=10,000).
    pub batch_size: u32,
    /// Count only; delete nothing.
    pub dry_run: bool,
}

/// Largest purge batch (executions per transaction).
pub const MAX_PURGE_BATCH: u32 = 10_000;

impl PurgeRequest {
    /// Checks the batch size and returns the statuses to remove (every terminal status when the
    /// request names none); a non-terminal status is refused (docs/cli.md#purge). Shared by the
    /// backends so that they refuse and select alike.
    pub fn checked_statuses(&self) -> Result<Vec<crate::ExecutionStatus>, crate::ExecutionError> {
        if self.batch_size == 0 || self.batch_size > MAX_PURGE_BATCH {
            return Err(crate::ExecutionError::invalid(format!(
                "batch size must be between 1 and {MAX_PURGE_BATCH}"
            )));
        }
        let statuses: Vec<crate::ExecutionStatus> = if self.statuses.is_empty() {
            crate::ExecutionStatus::ALL
                .iter()
                .copied()
                .filter(|s| s.is_terminal())
                .collect()
        } else {
            self.statuses.clone()
        };
        if let Some(s) = statuses.iter().find(|s| !s.is_terminal()) {
            return Err(crate::ExecutionError::invalid(format!(
                "purge removes finished executions only; '{s}' is not a terminal status \
                 (allowed: succeeded, failed, cancelled, expired)"
            )));
        }
        Ok(statuses)
    }
}

impl PurgeRequest {
    /// The passes a backend makes over a namespace, each a list of statuses: one pass per
    /// distinct named status when the request names statuses and the backend has an index
    /// over (namespace, status, created_at, id) (`per_status_index`), so that a status with
    /// few old rows costs what it removes; otherwise one pass over [`Self::checked_statuses`]
    /// (every terminal status by default, where nearly every old row matches).
    pub fn status_passes(
        &self,
        per_status_index: bool,
    ) -> Result<Vec<Vec<crate::ExecutionStatus>>, crate::ExecutionError> {
        let statuses = self.checked_statuses()?;
        if self.statuses.is_empty() || !per_status_index {
            return Ok(vec![statuses]);
        }
        let mut passes: Vec<Vec<crate::ExecutionStatus>> = Vec::new();
        for s in statuses {
            if !passes.iter().any(|p| p.contains(&s)) {
                passes.push(vec![s]);
            }
        }
        Ok(passes)
    }
}

impl PurgeReport {
    /// Adds one batch's counts (and counts the batch).
    pub fn add_batch(&mut self, batch: &PurgeReport) {
        self.executions += batch.executions;
        self.attempts += batch.attempts;
        self.diagnostics += batch.diagnostics;
        self.steps += batch.steps;
        self.batches += 1;
    }
}

/// What `purge` removed (or would remove, on a dry run).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PurgeReport {
    /// Executions.
    pub executions: u64,
    /// Their attempts.
    pub attempts: u64,
    /// Their attempts' diagnostics rows.
    pub diagnostics: u64,
    /// Their recorded steps (docs/steps.md).
    pub steps: u64,
    /// Transactions used.
    pub batches: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::SystemClock;

    fn journal() -> AttemptJournal {
        AttemptJournal::new(Arc::new(SystemClock))
    }

    #[test]
    fn purge_passes_one_per_named_status_only_with_the_index() {
        use crate::ExecutionStatus::{Cancelled, Expired, Failed, Running, Succeeded};
        let req = |statuses: Vec<crate::ExecutionStatus>| PurgeRequest {
            namespace: None,
            finished_before: Utc::now(),
            statuses,
            batch_size: 100,
            dry_run: false,
        };
        let named = req(vec![Failed, Cancelled, Failed]);
        assert_eq!(
            named.status_passes(true).expect("passes"),
            [vec![Failed], vec![Cancelled]]
        );
        assert_eq!(
            named.status_passes(false).expect("passes"),
            [vec![Failed, Cancelled, Failed]]
        );
        assert_eq!(
            req(vec![]).status_passes(true).expect("passes"),
            [vec![Succeeded, Failed, Cancelled, Expired]]
        );
        let bad = req(vec![Running]).status_passes(true);
        assert!(
            matches!(bad, Err(crate::ExecutionError::InvalidArgument(_))),
            "{bad:?}"
        );
    }

    #[test]
    fn the_tail_keeps_the_newest_lines_within_its_byte_cap() {
        let j = journal();
        let line = "x".repeat(1000);
        for _ in 0..200 {
            j.log("info", &line);
        }
        let d = j.finish(None);
        let tail = d.log.expect("tail");
        assert_eq!(tail.total_lines, 200);
        assert_eq!(
            tail.lines.len(),
            LOG_TAIL_LIMIT_BYTES / (1000 + LOG_LINE_OVERHEAD_BYTES)
        );
        assert_eq!(tail.lines.last().map(|l| l.seq), Some(200));
        assert_eq!(tail.dropped_lines(), 200 - tail.lines.len() as u64);
        let bytes: usize = tail
            .lines
            .iter()
            .map(|l| l.message.len() + LOG_LINE_OVERHEAD_BYTES)
            .sum();
        assert!(bytes <= LOG_TAIL_LIMIT_BYTES);
        // Empty lines are bounded by count too.
        let j = journal();
        for _ in 0..5000 {
            j.log("info", "");
        }
        let tail = j.finish(None).log.expect("tail");
        assert_eq!(
            tail.lines.len(),
            LOG_TAIL_LIMIT_BYTES / LOG_LINE_OVERHEAD_BYTES
        );
    }

    #[test]
    fn one_huge_line_is_cut_and_messages_are_capped() {
        let j = journal();
        j.log("error", &"é".repeat(10_000));
        j.progress(1, 2, &"n".repeat(5000));
        let d = j.finish(Some(&"m".repeat(20_000)));
        let tail = d.log.expect("tail");
        assert!(tail.lines[0].message.len() <= LOG_LINE_LIMIT_BYTES);
        assert_eq!(d.message.map(|m| m.len()), Some(MESSAGE_LIMIT_BYTES));
        let p = d.progress.expect("progress");
        assert_eq!((p.done, p.total), (1, 2));
        assert_eq!(p.note.len(), PROGRESS_NOTE_LIMIT_BYTES);
    }

    #[test]
    fn live_snapshots_only_when_something_changed() {
        let j = journal();
        assert_eq!(j.live(), None, "nothing written yet");
        j.progress(1, 10, "a");
        let first = j.live().expect("changed");
        assert_eq!(first.progress.map(|p| p.done), Some(1));
        assert_eq!(first.log, None);
        assert_eq!(j.live(), None, "unchanged since the snapshot");
        j.unpersist();
        assert!(j.live().is_some(), "a failed write is retried");
        j.log("info", "hello");
        assert_eq!(j.live().and_then(|l| l.log).map(|t| t.total_lines), Some(1));
    }

    #[test]
    fn no_lines_means_no_tail() {
        let j = journal();
        j.record_facts(RunFacts {
            trap_kind: Some("timeout".into()),
            component_digest: Some("ab".into()),
            fuel_consumed: Some(7),
            peak_memory_bytes: Some(65536),
        });
        let d = j.finish(None);
        assert_eq!(d.log, None);
        assert_eq!(d.message, None);
        assert_eq!(d.facts.trap_kind.as_deref(), Some("timeout"));
        assert_eq!(d.facts.fuel_consumed, Some(7));
    }
}
