//! `onestep bench --rounds R --purge-older-than D` (docs/benchmarks.md#steady-state-with-purge):
//! the purge run after each round and the table footprint read at its end, so that a run shows
//! whether the tables' size (and with it the working set) stays bounded while work keeps
//! arriving and old work is removed.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use chrono::Utc;
use onestep_core::Backend;
use onestep_core::diagnostics::PurgeRequest;
use serde::Serialize;

use crate::FlagError;
use crate::report::Report;

/// What one round's purge removed and how long it took.
#[derive(Debug, Serialize)]
pub(crate) struct PurgeFigures {
    pub older_than_s: f64,
    pub executions: u64,
    pub attempts: u64,
    pub batches: u64,
    pub seconds: f64,
}

/// One table's rows and bytes.
#[derive(Debug, Serialize)]
pub(crate) struct Footprint {
    pub table: String,
    pub rows: u64,
    pub bytes: u64,
}

/// The `migrate --upgrade` run between two rounds.
#[derive(Debug, Serialize)]
pub(crate) struct UpgradeFigures {
    pub seconds: f64,
    /// Each step taken: what was added and the form the server accepted.
    pub steps: Vec<String>,
}

/// `--purge-older-than`: a positive humantime duration.
pub(crate) fn parse_older_than(text: &str) -> Result<Duration, FlagError> {
    let d = humantime::parse_duration(text.trim()).map_err(|e| {
        FlagError::Other(format!(
            "--purge-older-than '{text}' is not a duration (e.g. 30s, 5min, 1h): {e}"
        ))
    })?;
    if d.is_zero() {
        return Err(FlagError::Other(
            "--purge-older-than must be longer than 0".to_owned(),
        ));
    }
    Ok(d)
}

/// Removes the namespace's executions (every terminal status) that finished more than
/// `older_than` ago, `batch` per transaction.
pub(crate) async fn purge(
    store: &dyn Backend,
    namespace: &str,
    older_than: Duration,
    batch: u32,
) -> Result<PurgeFigures> {
    let retention = store.retention();
    let cutoff = Utc::now()
        - chrono::Duration::from_std(older_than).context("--purge-older-than is too long")?;
    let started = Instant::now();
    let report = retention
        .purge(&PurgeRequest {
            namespace: Some(namespace.to_owned()),
            finished_before: cutoff,
            statuses: Vec::new(),
            batch_size: batch,
            dry_run: false,
        })
        .await
        .context("purge failed")?;
    Ok(PurgeFigures {
        older_than_s: older_than.as_secs_f64(),
        executions: report.executions,
        attempts: report.attempts,
        batches: report.batches,
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The backend's tables, rows and bytes.
pub(crate) async fn footprint(store: &dyn Backend) -> Result<Vec<Footprint>> {
    Ok(store
        .stats()
        .table_footprint()
        .await
        .context("cannot read the tables' size")?
        .into_iter()
        .map(|t| Footprint {
            table: t.table,
            rows: t.rows,
            bytes: t.bytes,
        })
        .collect())
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1u32 << 20)
}

/// The purge and footprint lines of one report.
pub(crate) fn print_report_lines(purge: Option<&PurgeFigures>, footprint: &[Footprint]) {
    if let Some(p) = purge {
        println!(
            "  purge (finished > {} s ago): {} executions, {} attempts in {} batches, {:.2} s",
            p.older_than_s, p.executions, p.attempts, p.batches, p.seconds
        );
    }
    if !footprint.is_empty() {
        let parts: Vec<String> = footprint
            .iter()
            .map(|t| format!("{} {} rows {:.1} MiB", t.table, t.rows, mib(t.bytes)))
            .collect();
        println!("  tables: {}", parts.join("; "));
    }
}

/// A line per round, to read a multi-round run at a glance.
pub(crate) fn print_rounds(reports: &[Report]) {
    println!(
        "rounds: round  submit/s  completed/s  bp-reads/exec (submit/drain)  purged  executions-rows  MiB (all tables)"
    );
    for r in reports {
        let rows = r.footprint.first().map_or(0, |t| t.rows);
        let bytes: u64 = r.footprint.iter().map(|t| t.bytes).sum();
        println!(
            "  {:>5}  {:>8.0}  {:>11.0}  {:>6} / {:<6}  {:>10}  {:>15}  {:>8.1}",
            r.round,
            r.submit_per_s,
            r.completed_per_s,
            r.submit_io.buffer_pool_reads,
            r.drain_io.buffer_pool_reads,
            r.purge.as_ref().map_or(0, |p| p.executions),
            rows,
            mib(bytes)
        );
    }
}
