//! The backend-independent halves of a page: gathering the child rows a backend read by
//! execution id into records ([`assemble`]), and deciding which records of an imported page are
//! written and how they count ([`plan_import`]). A backend only reads and writes rows.

use std::collections::{BTreeMap, HashSet};

use uuid::Uuid;

use super::{AttemptRow, DiagnosticsRow, ExecutionRecord, ExecutionRow, ImportCounts, TraceRow};

/// Records of `executions` (in the given order), each with its attempts (sorted by attempt
/// number), the diagnostics rows and the trace row of its id. Child rows of another id are
/// dropped.
pub fn assemble(
    executions: Vec<ExecutionRow>,
    mut attempts: Vec<AttemptRow>,
    diagnostics: Vec<DiagnosticsRow>,
    traces: Vec<TraceRow>,
) -> Vec<ExecutionRecord> {
    let mut records: Vec<ExecutionRecord> = executions
        .into_iter()
        .map(|execution| ExecutionRecord {
            execution,
            attempts: Vec::new(),
            diagnostics: Vec::new(),
            trace: None,
        })
        .collect();
    let at: BTreeMap<Uuid, usize> = records
        .iter()
        .enumerate()
        .map(|(i, r)| (r.id(), i))
        .collect();
    attempts.sort_by_key(|x| (x.execution_id, x.attempt_no));
    for x in attempts {
        if let Some(&i) = at.get(&x.execution_id) {
            records[i].attempts.push(x);
        }
    }
    for x in diagnostics {
        if let Some(&i) = at.get(&x.execution_id) {
            records[i].diagnostics.push(x);
        }
    }
    for x in traces {
        if let Some(&i) = at.get(&x.execution_id) {
            records[i].trace = Some(x);
        }
    }
    records
}

/// Which of the target's optional tables exist (a record's rows for a missing one are counted
/// as skipped, not written).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChildTables {
    /// The attempt-diagnostics table exists.
    pub diagnostics: bool,
    /// The trace-context table exists.
    pub traces: bool,
}

/// What one imported page writes.
#[derive(Debug)]
pub struct ImportPlan<'a> {
    /// The records to write: those whose id the target lacks, each id once, in page order.
    pub fresh: Vec<&'a ExecutionRecord>,
    /// What the import reports once `fresh` is written.
    pub counts: ImportCounts,
    /// The diagnostics rows are written (the table exists).
    pub diagnostics: bool,
    /// The trace rows are written (the table exists).
    pub traces: bool,
}

impl<'a> ImportPlan<'a> {
    /// The executions rows to write.
    pub fn executions(&self) -> impl Iterator<Item = &'a ExecutionRow> + '_ {
        self.fresh.iter().map(|r| &r.execution)
    }

    /// The attempts rows to write.
    pub fn attempts(&self) -> impl Iterator<Item = &'a AttemptRow> + '_ {
        self.fresh.iter().flat_map(|r| &r.attempts)
    }

    /// The diagnostics rows to write (none when the table is missing).
    pub fn diagnostics(&self) -> impl Iterator<Item = &'a DiagnosticsRow> + '_ {
        let keep = self.diagnostics;
        self.fresh
            .iter()
            .filter(move |_| keep)
            .flat_map(|r| &r.diagnostics)
    }

    /// The trace rows to write (none when the table is missing).
    pub fn traces(&self) -> impl Iterator<Item = &'a TraceRow> + '_ {
        let keep = self.traces;
        self.fresh
            .iter()
            .filter(move |_| keep)
            .filter_map(|r| r.trace.as_ref())
    }
}

/// The plan of importing `records` into a target that already holds the execution ids
/// `existing` and has the optional tables `tables`: a record whose id exists (or came earlier
/// in the page) is skipped whole; a fresh record's diagnostics or trace rows are skipped when
/// their table is missing.
pub fn plan_import<'a>(
    records: &'a [ExecutionRecord],
    existing: &HashSet<Uuid>,
    tables: ChildTables,
) -> ImportPlan<'a> {
    let mut counts = ImportCounts::default();
    let mut seen = HashSet::new();
    let mut fresh = Vec::new();
    for r in records {
        if existing.contains(&r.id()) || !seen.insert(r.id()) {
            counts.skipped.add(r.counts());
            continue;
        }
        let mut copied = r.counts();
        if !tables.diagnostics {
            counts.skipped.diagnostics += copied.diagnostics;
            copied.diagnostics = 0;
        }
        if !tables.traces {
            counts.skipped.traces += copied.traces;
            copied.traces = 0;
        }
        counts.copied.add(copied);
        fresh.push(r);
    }
    ImportPlan {
        fresh,
        counts,
        diagnostics: tables.diagnostics,
        traces: tables.traces,
    }
}
