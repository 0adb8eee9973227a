//! The figures of one round ([`Report`]), how they are derived from the raw readings (counter
//! deltas, percentiles) and how they print as text.

use std::collections::BTreeMap;

use onestep_core::ports::ExecutionTiming;
use serde::Serialize;

use crate::{counting, retention};

/// The figures of one run.
#[derive(Debug, Serialize)]
pub(crate) struct Report {
    pub(crate) count: usize,
    pub(crate) handler: String,
    pub(crate) server: String,
    pub(crate) build: &'static str,
    pub(crate) concurrency: u32,
    pub(crate) batch_size: u32,
    pub(crate) completion_batch: usize,
    pub(crate) submit_chunk: usize,
    /// `--fairness-keys` (0 = none).
    pub(crate) fairness_keys: usize,
    pub(crate) pool_max: usize,
    /// Whether the tables have the `claimable` column and indexes (ours or upgraded).
    pub(crate) claimable_indexes: bool,
    /// Whether attempt diagnostics were persisted.
    pub(crate) diagnostics: bool,
    pub(crate) history: u64,
    pub(crate) history_ids: String,
    pub(crate) history_seed_s: f64,
    /// Id version of the rows this run wrote.
    pub(crate) ids: String,
    /// Whether submissions and history carried idempotency keys.
    pub(crate) idempotency_keys: bool,
    /// `random` or `ordered` (the run's keys) when they did.
    pub(crate) idempotency_key_order: Option<String>,
    /// 1-based round (`--rounds`).
    pub(crate) round: u32,
    /// The purge after this round (`--purge-older-than`).
    pub(crate) purge: Option<retention::PurgeFigures>,
    /// Rows and bytes of each table at the end of the round (after the purge).
    pub(crate) footprint: Vec<retention::Footprint>,
    /// The `migrate --upgrade` run before this round (`--upgrade-after-round`).
    pub(crate) upgrade_before: Option<retention::UpgradeFigures>,
    pub(crate) submit_s: f64,
    pub(crate) submit_per_s: f64,
    pub(crate) drain_s: f64,
    pub(crate) completed_per_s: f64,
    pub(crate) succeeded: u64,
    pub(crate) not_succeeded: u64,
    pub(crate) queued_to_started_ms: Percentiles,
    pub(crate) started_to_finished_ms: Percentiles,
    pub(crate) worker_cpu_ms_per_execution: Option<f64>,
    pub(crate) db_cpu_ms_per_execution: Option<f64>,
    pub(crate) db_process: Option<String>,
    /// Server counter deltas of the drain phase per execution (name kept for compatibility).
    pub(crate) db_statements_per_execution: BTreeMap<String, f64>,
    /// Server counter deltas of the submit phase per execution.
    pub(crate) db_submit_counters_per_execution: BTreeMap<String, f64>,
    /// `Innodb_buffer_pool_reads` and the sum of `Handler_read_*` per execution, per phase.
    pub(crate) submit_io: PhaseIo,
    pub(crate) drain_io: PhaseIo,
    pub(crate) lease_s: f64,
    pub(crate) heartbeat_s: f64,
    /// The worker's storage calls during the drain.
    pub(crate) store_calls: counting::CallCounts,
    /// Heartbeat calls (ticks that reached the store) per second of drain.
    pub(crate) heartbeat_calls_per_s: f64,
    /// Leases per heartbeat call, on average.
    pub(crate) heartbeat_leases_per_call: f64,
    /// Highest number of executions in flight seen by the sampler (claimed, not yet finished).
    pub(crate) peak_in_flight: u64,
    /// This process's memory around the drain (`/proc/self/status`).
    pub(crate) memory: Option<Memory>,
    /// The loopback server of `--http-delay-ms`.
    pub(crate) http: Option<HttpFigures>,
    /// For a component handler: whether wasm instances came from the pooling allocator (else
    /// on demand, after the pool's address space could not be reserved).
    pub(crate) wasm_pooling: Option<bool>,
}

/// Resident memory of the bench process (worker, wasm runtime, HTTP client pool, loopback
/// server) around the drain, in MiB.
#[derive(Debug, Serialize)]
pub(crate) struct Memory {
    /// `VmRSS` just before the worker starts.
    pub(crate) rss_before_mib: f64,
    /// Highest `VmRSS` sampled (every 20 ms) during the drain.
    pub(crate) rss_peak_mib: f64,
    /// `VmHWM` at the end (the process's peak since it started).
    pub(crate) hwm_mib: f64,
    /// `(rss_peak - rss_before) / peak_in_flight`.
    pub(crate) per_in_flight_mib: f64,
}

#[derive(Debug, Serialize)]
pub(crate) struct HttpFigures {
    pub(crate) delay_ms: u64,
    pub(crate) origin: String,
    pub(crate) answered: u64,
}

/// Pages read from disk into the buffer pool, page reads asked of it and rows read by the
/// handler, per execution. On PostgreSQL (docs/benchmarks.md#history): `blks_read`,
/// `blks_read + blks_hit` and `tup_returned + tup_fetched` of `pg_stat_database`.
#[derive(Debug, Serialize, Default)]
pub(crate) struct PhaseIo {
    pub(crate) buffer_pool_reads: f64,
    pub(crate) buffer_pool_read_requests: f64,
    pub(crate) handler_reads: f64,
}

#[derive(Debug, Serialize, Default)]
pub(crate) struct Percentiles {
    pub(crate) p50: f64,
    pub(crate) p99: f64,
    pub(crate) max: f64,
}

/// `(after - before) / n` of every counter that grew, rounded to 3 decimals.
pub(crate) fn counter_deltas(
    before: &BTreeMap<String, f64>,
    after: &BTreeMap<String, f64>,
    n: f64,
) -> BTreeMap<String, f64> {
    after
        .iter()
        .filter_map(|(k, v)| {
            let b = before.get(k).copied().unwrap_or(0.0);
            let d = (v - b) / n;
            (d > 0.0).then(|| (k.clone(), round3(d)))
        })
        .collect()
}

pub(crate) fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

impl PhaseIo {
    pub(crate) fn of(per_exec: &BTreeMap<String, f64>) -> Self {
        let get = |k: &str| per_exec.get(k).copied().unwrap_or(0.0);
        let handler = per_exec
            .iter()
            .filter(|(k, _)| k.starts_with("handler_read_"))
            .fold(0.0, |sum, (_, v)| sum + v);
        if per_exec
            .keys()
            .any(|k| k.starts_with("blks_") || k.starts_with("tup_"))
        {
            // PostgreSQL's pg_stat_database equivalents.
            return PhaseIo {
                buffer_pool_reads: get("blks_read"),
                buffer_pool_read_requests: round3(get("blks_read") + get("blks_hit")),
                handler_reads: round3(get("tup_returned") + get("tup_fetched")),
            };
        }
        PhaseIo {
            buffer_pool_reads: get("innodb_buffer_pool_reads"),
            buffer_pool_read_requests: get("innodb_buffer_pool_read_requests"),
            handler_reads: round3(handler),
        }
    }
}

/// Queue latency (`started_at - available_at`) and run latency (`finished_at - started_at`) of
/// the namespace's rows, plus the number that succeeded.
pub(crate) fn latencies(rows: &[ExecutionTiming]) -> (Percentiles, Percentiles, u64) {
    let mut queued: Vec<f64> = rows
        .iter()
        .filter_map(|r| r.queued_us)
        .map(us_to_ms)
        .collect();
    let mut running: Vec<f64> = rows
        .iter()
        .filter_map(|r| r.running_us)
        .map(us_to_ms)
        .collect();
    let succeeded = rows.iter().filter(|r| r.succeeded).count() as u64;
    (
        percentiles(&mut queued),
        percentiles(&mut running),
        succeeded,
    )
}

#[allow(clippy::cast_precision_loss)]
fn us_to_ms(us: i64) -> f64 {
    us as f64 / 1000.0
}

fn percentiles(v: &mut [f64]) -> Percentiles {
    if v.is_empty() {
        return Percentiles::default();
    }
    v.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let i = ((v.len() as f64 - 1.0) * q).round() as usize;
        v[i.min(v.len() - 1)]
    };
    Percentiles {
        p50: at(0.50),
        p99: at(0.99),
        max: v[v.len() - 1],
    }
}

fn opt_ms(v: Option<f64>) -> String {
    v.map_or_else(|| "n/a".to_owned(), |v| format!("{v:.3} ms"))
}

pub(crate) fn print_text(r: &Report) {
    println!(
        "onestep bench: {} executions, handler {}, server {}, {} build",
        r.count, r.handler, r.server, r.build
    );
    println!(
        "  flags: concurrency {}, batch_size {}, completion_batch {}, submit_chunk {}, pool_max {}, fairness_keys {}",
        r.concurrency,
        r.batch_size,
        r.completion_batch,
        r.submit_chunk,
        r.pool_max,
        r.fairness_keys
    );
    if !r.claimable_indexes {
        println!("  tables: without the claimable column and indexes (reference DDL)");
    }
    println!(
        "  attempt diagnostics: {}",
        if r.diagnostics { "persisted" } else { "off" }
    );
    if r.round > 1 || r.purge.is_some() {
        println!("  round {} (ids of new rows: {})", r.round, r.ids);
    } else if r.ids != "v7" {
        println!("  ids of new rows: {}", r.ids);
    }
    if let Some(order) = &r.idempotency_key_order {
        println!(
            "  idempotency keys: on every submission ({order}) and every history row (random)"
        );
    }
    if r.history > 0 {
        println!(
            "  history:   {} finished executions ({} ids) seeded in {:.2} s",
            r.history, r.history_ids, r.history_seed_s
        );
    }
    println!(
        "  submit:    {:>10.0} /s  ({:.2} s)",
        r.submit_per_s, r.submit_s
    );
    println!(
        "  completed: {:>10.0} /s  ({:.2} s; {} succeeded, {} not)",
        r.completed_per_s, r.drain_s, r.succeeded, r.not_succeeded
    );
    println!(
        "  queued->started:   p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms  (includes the backlog wait)",
        r.queued_to_started_ms.p50, r.queued_to_started_ms.p99, r.queued_to_started_ms.max
    );
    println!(
        "  started->finished: p50 {:.1} ms  p99 {:.1} ms  max {:.1} ms",
        r.started_to_finished_ms.p50, r.started_to_finished_ms.p99, r.started_to_finished_ms.max
    );
    println!("{}", cpu_line(r));
    println!("{}", io_line(r));
    if let Some(pooling) = r.wasm_pooling {
        println!(
            "  wasm instances: {}",
            if pooling {
                "pooling allocator"
            } else {
                "on demand (the pooling allocator was unavailable)"
            }
        );
    }
    if let Some(h) = &r.http {
        println!(
            "  outbound HTTP: {} answering after {} ms; {} requests answered",
            h.origin, h.delay_ms, h.answered
        );
    }
    println!(
        "  in flight: peak {} (concurrency {}); lease {} s, heartbeat {} s",
        r.peak_in_flight, r.concurrency, r.lease_s, r.heartbeat_s
    );
    let c = &r.store_calls;
    println!(
        "  heartbeats: {} heartbeat_many calls ({:.2} /s), {:.1} leases per call (max {}); \
         {} claims ({} leases), {} completion batches, {} cancel polls, {} live writes",
        c.heartbeat_calls,
        r.heartbeat_calls_per_s,
        r.heartbeat_leases_per_call,
        c.heartbeat_max_leases,
        c.claims,
        c.claimed,
        c.complete_batches,
        c.cancel_polls,
        c.live_writes
    );
    if let Some(m) = &r.memory {
        println!(
            "  memory: RSS before {:.1} MiB, peak {:.1} MiB (VmHWM {:.1} MiB); {:.3} MiB per in-flight execution",
            m.rss_before_mib, m.rss_peak_mib, m.hwm_mib, m.per_in_flight_mib
        );
    }
    retention::print_report_lines(r.purge.as_ref(), &r.footprint);
    if let Some(u) = &r.upgrade_before {
        println!(
            "  before this round: migrate --upgrade in {:.2} s: {}",
            u.seconds,
            if u.steps.is_empty() {
                "nothing to add".to_owned()
            } else {
                u.steps.join(", ")
            }
        );
    }
    for line in counter_lines(r) {
        println!("{line}");
    }
}

/// The kind of store a report was measured on, from its `server` (the backend's version
/// string): the counters each one has differ, and so do their labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StoreKind {
    Mysql,
    Postgres,
    Sqlite,
}

impl StoreKind {
    fn of(server: &str) -> Self {
        if server.starts_with("PostgreSQL") {
            StoreKind::Postgres
        } else if server.starts_with("SQLite") {
            StoreKind::Sqlite
        } else {
            StoreKind::Mysql
        }
    }
}

/// The CPU line: on SQLite the database runs inside the worker process, so its CPU is in the
/// worker's figure rather than unknown.
fn cpu_line(r: &Report) -> String {
    let database = match StoreKind::of(&r.server) {
        StoreKind::Sqlite => "embedded (counted in the worker's)".to_owned(),
        StoreKind::Mysql | StoreKind::Postgres => format!(
            "{}{}",
            opt_ms(r.db_cpu_ms_per_execution),
            r.db_process
                .as_ref()
                .map(|p| format!(" [{p}]"))
                .unwrap_or_default()
        ),
    };
    format!(
        "  CPU per execution (drain): worker {}, database {database}",
        opt_ms(r.worker_cpu_ms_per_execution)
    )
}

/// The reads per execution, named as the store counts them. SQLite keeps no such counters: its
/// line says how much the database file grew instead (`PRAGMA page_count`).
fn io_line(r: &Report) -> String {
    let (reads, requests, rows) = match StoreKind::of(&r.server) {
        StoreKind::Sqlite => {
            let grew = |c: &BTreeMap<String, f64>| c.get("page_count").copied().unwrap_or(0.0);
            return format!(
                "  per execution: database file grew by {} pages (submit) / {} pages (drain) (PRAGMA \
                 page_count; SQLite has no buffer-pool or row-read counters)",
                grew(&r.db_submit_counters_per_execution),
                grew(&r.db_statements_per_execution)
            );
        }
        StoreKind::Postgres => (
            "blks_read",
            "blks_read+blks_hit",
            "tup_returned+tup_fetched",
        ),
        StoreKind::Mysql => (
            "buffer-pool reads",
            "buffer-pool read requests",
            "Handler_read_* rows",
        ),
    };
    format!(
        "  per execution: {reads} submit {} / drain {}; {requests} submit {} / drain {}; {rows} submit {} / drain {}",
        r.submit_io.buffer_pool_reads,
        r.drain_io.buffer_pool_reads,
        r.submit_io.buffer_pool_read_requests,
        r.drain_io.buffer_pool_read_requests,
        r.submit_io.handler_reads,
        r.drain_io.handler_reads
    )
}

/// The counter deltas per execution of each phase, when any grew: the server's global status
/// counters (MySQL/MariaDB `SHOW GLOBAL STATUS`, PostgreSQL `pg_stat_database`), or the SQLite
/// file's pragmas.
fn counter_lines(r: &Report) -> Vec<String> {
    let what = match StoreKind::of(&r.server) {
        StoreKind::Sqlite => "database file pragmas per execution",
        StoreKind::Mysql | StoreKind::Postgres => "server counters per execution",
    };
    let scope = match StoreKind::of(&r.server) {
        StoreKind::Sqlite => "this file",
        StoreKind::Mysql | StoreKind::Postgres => "global",
    };
    [
        ("submit", &r.db_submit_counters_per_execution),
        ("drain", &r.db_statements_per_execution),
    ]
    .into_iter()
    .filter(|(_, counters)| !counters.is_empty())
    .map(|(phase, counters)| {
        let s: Vec<String> = counters.iter().map(|(k, v)| format!("{k} {v}")).collect();
        format!("  {what} ({phase}, {scope}): {}", s.join(", "))
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(server: &str, submit: &[(&str, f64)], drain: &[(&str, f64)]) -> Report {
        let map = |c: &[(&str, f64)]| -> BTreeMap<String, f64> {
            c.iter().map(|(k, v)| ((*k).to_owned(), *v)).collect()
        };
        let (submit, drain) = (map(submit), map(drain));
        Report {
            count: 10,
            handler: "noop".into(),
            server: server.into(),
            build: "release",
            concurrency: 128,
            batch_size: 100,
            completion_batch: 64,
            submit_chunk: 1000,
            fairness_keys: 0,
            pool_max: 132,
            claimable_indexes: true,
            diagnostics: true,
            history: 0,
            history_ids: "v7".into(),
            history_seed_s: 0.0,
            ids: "v7".into(),
            idempotency_keys: false,
            idempotency_key_order: None,
            round: 1,
            purge: None,
            footprint: Vec::new(),
            upgrade_before: None,
            submit_s: 1.0,
            submit_per_s: 10.0,
            drain_s: 1.0,
            completed_per_s: 10.0,
            succeeded: 10,
            not_succeeded: 0,
            queued_to_started_ms: Percentiles::default(),
            started_to_finished_ms: Percentiles::default(),
            worker_cpu_ms_per_execution: Some(0.5),
            db_cpu_ms_per_execution: None,
            db_process: None,
            submit_io: PhaseIo::of(&submit),
            drain_io: PhaseIo::of(&drain),
            db_statements_per_execution: drain,
            db_submit_counters_per_execution: submit,
            lease_s: 90.0,
            heartbeat_s: 30.0,
            store_calls: counting::CallCounts::default(),
            heartbeat_calls_per_s: 0.0,
            heartbeat_leases_per_call: 0.0,
            peak_in_flight: 0,
            memory: None,
            http: None,
            wasm_pooling: None,
        }
    }

    #[test]
    fn sqlite_lines_name_its_own_counters() {
        let r = report(
            "SQLite 3.50.2",
            &[("page_count", 0.25)],
            &[("page_count", 0.125)],
        );
        let io = io_line(&r);
        assert!(
            io.contains("grew by 0.25 pages (submit) / 0.125 pages (drain)"),
            "{io}"
        );
        assert!(
            !io.contains("buffer-pool") || io.contains("no buffer-pool"),
            "{io}"
        );
        assert!(!io.contains("Handler_read"), "{io}");
        let cpu = cpu_line(&r);
        assert!(cpu.contains("database embedded"), "{cpu}");
        assert!(!cpu.contains("n/a"), "{cpu}");
        let counters = counter_lines(&r);
        assert_eq!(
            counters,
            [
                "  database file pragmas per execution (submit, this file): page_count 0.25",
                "  database file pragmas per execution (drain, this file): page_count 0.125",
            ]
        );
    }

    #[test]
    fn server_lines_keep_their_counter_names() {
        let mysql = report(
            "MariaDB 10.11.19",
            &[],
            &[("innodb_buffer_pool_reads", 0.5), ("handler_read_key", 2.0)],
        );
        let io = io_line(&mysql);
        assert!(
            io.contains("buffer-pool reads submit 0 / drain 0.5"),
            "{io}"
        );
        assert!(
            io.contains("Handler_read_* rows submit 0 / drain 2"),
            "{io}"
        );
        assert!(cpu_line(&mysql).contains("database n/a"));
        assert_eq!(
            counter_lines(&mysql),
            [
                "  server counters per execution (drain, global): handler_read_key 2, innodb_buffer_pool_reads 0.5"
            ]
        );
        let pg = report(
            "PostgreSQL 15.20",
            &[],
            &[("blks_read", 1.0), ("blks_hit", 3.0)],
        );
        let io = io_line(&pg);
        assert!(io.contains("blks_read submit 0 / drain 1"), "{io}");
        assert!(io.contains("blks_read+blks_hit submit 0 / drain 4"), "{io}");
    }
}
