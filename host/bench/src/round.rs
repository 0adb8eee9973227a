//! One `onestep bench` run: the rounds on one database (a throw-away one unless `--dsn`), and
//! each round's phases: history seed, submit, drain with one in-process worker, purge, figures.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use chrono::Utc;
use onestep_core::history::{HistoryIds, HistorySeed};
use onestep_core::ids::IdVersion;
use onestep_core::ports::ExecutionStore;
use onestep_core::request::{SubmitRequest, prepare_submission, validate_namespace};
use onestep_core::{Execution, ExecutionError, Limits};
use onestep_wasm::{NetworkSettings, SandboxSettings};
use onestep_worker::{TaskBinding, TaskSettings, Worker, WorkerSettings};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::report::{HttpFigures, Memory, PhaseIo, Report, counter_deltas, latencies, round3};
use crate::store::{BenchStore, OpenOptions, Scratch};
use crate::{BenchArgs, Flags, Host, counting, cpu, http, retention, rss, runner, store};

pub(crate) async fn bench(args: &BenchArgs, flags: &Flags, host: &Host) -> Result<Vec<Report>> {
    let (scratch, dsn) = match &args.dsn {
        Some(d) => (None, d.clone()),
        None => {
            let db = Scratch::create(&args.server_url).await?;
            let dsn = db.dsn().to_owned();
            (Some(db), dsn)
        }
    };
    let mut reports = Vec::new();
    let mut outcome = Ok(());
    let mut upgraded = None;
    for round in 1..=args.rounds {
        match bench_on(args, flags, host, &dsn, round).await {
            Ok(mut r) => {
                if let Some(u) = upgraded.take() {
                    r.upgrade_before = Some(u);
                }
                reports.push(r);
                if args.upgrade_after_round == Some(round) {
                    match store::upgrade(&dsn).await {
                        Ok(u) => upgraded = Some(u),
                        Err(e) => {
                            outcome = Err(e.context(format!("upgrade after round {round}")));
                            break;
                        }
                    }
                }
            }
            Err(e) => {
                outcome = Err(e.context(format!("round {round}")));
                break;
            }
        }
    }
    if let Some(db) = scratch {
        if args.keep {
            eprintln!("onestep bench: kept database {}", db.name());
        } else {
            let name = db.name();
            if let Err(e) = db.drop_database().await {
                eprintln!("onestep bench: could not drop database {name}: {e}");
            }
        }
    }
    outcome.map(|()| reports)
}

async fn bench_on(
    args: &BenchArgs,
    flags: &Flags,
    host: &Host,
    dsn: &str,
    round: u32,
) -> Result<Report> {
    let history = if round == 1 { args.history } else { 0 };
    let pool_max = args
        .pool_max
        .unwrap_or(args.concurrency as usize + 4)
        .max(2);
    let backend = BenchStore::open(&OpenOptions {
        dsn: dsn.to_owned(),
        pool_max,
        diagnostics: !args.no_diagnostics,
        reference_tables: args.reference_tables,
        first_round: round == 1,
        attempt_ids: flags.ids,
    })
    .await?;
    let server = backend.server_version();
    let claimable_indexes = backend.claimable_indexes();
    let server_http = match args.http_delay_ms {
        Some(ms) => Some(http::SlowServer::start(Duration::from_millis(ms))?),
        None => None,
    };
    let mut sandbox = SandboxSettings::default();
    if let Some(srv) = &server_http {
        sandbox.network = NetworkSettings::allowing([srv.origin().as_str()])
            .map_err(|e| anyhow::anyhow!("loopback origin: {e}"))?;
        // Each attempt makes one request; the timeout leaves room for the delay.
        sandbox.network.max_concurrent_requests = 1;
    }
    let (runner, wasm_pooling) =
        runner::runner_for(host, &args.handler, args.concurrency, sandbox)?;
    let payload_url = server_http
        .as_ref()
        .map(|srv| format!("{}/slow", srv.origin()));

    // History phase (not measured beyond its wall time).
    let seed_started = Instant::now();
    if history > 0 {
        let seed = HistorySeed {
            namespace: args.namespace.clone(),
            task_name: args.task_name.clone(),
            count: history,
            ids: if args.history_ids == "v4" {
                HistoryIds::V4
            } else {
                HistoryIds::V7
            },
            before: Utc::now(),
            idempotency_keys: args.idempotency_keys.is_some(),
        };
        backend
            .seed_history(&seed)
            .await
            .context("cannot seed the history")?;
    }
    let history_seed_s = seed_started.elapsed().as_secs_f64();
    let measured_since = Utc::now();

    // Submit phase.
    let executions = backend.executions();
    let namespace = validate_namespace(&args.namespace)?;
    let status_submit = backend.stats().server_counters().await.unwrap_or_default();
    let started = Instant::now();
    let mut next = 0usize;
    while next < args.count {
        let end = (next + args.submit_chunk).min(args.count);
        let requests: Vec<SubmitRequest> = (next..end)
            .map(|i| SubmitRequest {
                task_name: args.task_name.clone(),
                payload: match &payload_url {
                    Some(url) => json!({ "url": url, "i": i }),
                    None => json!({ "i": i }),
                },
                idempotency_key: args.idempotency_keys.as_deref().map(|order| {
                    if order == "ordered" {
                        // A UUIDv7's hex: ascending with time (docs/benchmarks.md#the-idempotency-index).
                        uuid::Uuid::now_v7().simple().to_string()
                    } else {
                        uuid::Uuid::new_v4().simple().to_string()
                    }
                }),
                fairness_key: (args.fairness_keys > 0)
                    .then(|| format!("k{}", i % args.fairness_keys)),
                ..SubmitRequest::default()
            })
            .collect();
        let results = submit_many(&*executions, &namespace, &requests, flags.ids).await?;
        if let Some(Err(e)) = results.into_iter().find(Result::is_err) {
            bail!("submit failed: {e}");
        }
        next = end;
    }
    let submit_s = started.elapsed().as_secs_f64();

    // Drain phase.
    let mut settings = TaskSettings::new(&args.namespace, &args.task_name);
    settings.worker_id = "onestep-bench".into();
    settings.concurrency = args.concurrency;
    settings.batch_size = args.batch_size;
    if let Some(lease) = flags.lease {
        settings.lease_duration = lease;
    }
    if let Some(heartbeat) = flags.heartbeat {
        settings.heartbeat_interval = heartbeat;
        settings.cancel_poll_interval = settings
            .cancel_poll_interval
            .min(settings.heartbeat_interval);
    }
    let lease_s = settings.lease_duration.as_secs_f64();
    let heartbeat_s = settings.heartbeat_interval.as_secs_f64();
    let (store, calls) = counting::Counting::new(backend.leases());
    let binding = TaskBinding {
        settings,
        store: Arc::new(store),
        runner,
        quarantine: onestep_worker::Quarantine::default(),
    };
    let worker = Worker::new(
        vec![binding],
        WorkerSettings {
            completion_batch: args.completion_batch.max(1),
            ..WorkerSettings::default()
        },
    )?;
    let stats = worker.stats();
    let db_proc = backend.server_process(dsn);
    let db_cpu = |p: &cpu::ServerProcess| backend.server_cpu_ms(p);
    let status_before = backend.stats().server_counters().await.unwrap_or_default();
    let self_cpu0 = cpu::process_cpu_ms("self");
    let db_cpu0 = db_proc.as_ref().and_then(db_cpu);
    let calls0 = calls.snapshot();
    let rss_before = rss::rss_bytes();
    let peak_in_flight = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let sampler = {
        let (stats, peak) = (Arc::clone(&stats), Arc::clone(&peak_in_flight));
        rss::RssSampler::start(Duration::from_millis(20), move || {
            let done = stats.succeeded()
                + stats.failed()
                + stats.cancelled()
                + stats.retried()
                + stats.released()
                + stats.lease_lost();
            peak.fetch_max(
                stats.claimed().saturating_sub(done),
                std::sync::atomic::Ordering::Relaxed,
            );
        })
    };
    let shutdown = CancellationToken::new();
    let drain_started = Instant::now();
    let handle = tokio::spawn(worker.run(shutdown.clone()));
    let deadline = drain_started + flags.timeout;
    let total = args.count as u64;
    loop {
        let done = stats.succeeded() + stats.failed() + stats.cancelled() + stats.retried();
        if done >= total {
            break;
        }
        if Instant::now() > deadline {
            sampler.finish();
            shutdown.cancel();
            let _ = handle.await;
            bail!(
                "drain timed out after {:.1} s with {done} of {total} completed",
                args.timeout_s
            );
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let drain_s = drain_started.elapsed().as_secs_f64();
    let rss_peak = sampler.finish();
    let calls1 = calls.snapshot();
    let self_cpu1 = cpu::process_cpu_ms("self");
    let db_cpu1 = db_proc.as_ref().and_then(db_cpu);
    let status_after = backend.stats().server_counters().await.unwrap_or_default();
    shutdown.cancel();
    handle.await.context("worker task panicked")??;
    let http = server_http.map(|srv| {
        let figures = HttpFigures {
            delay_ms: args.http_delay_ms.unwrap_or(0),
            origin: srv.origin(),
            answered: srv.answered(),
        };
        srv.stop();
        figures
    });
    let store_calls = calls1.minus(&calls0);
    let peak_in_flight = peak_in_flight.load(std::sync::atomic::Ordering::Relaxed);
    let memory = rss_before.map(|before| {
        let mib = |b: u64| round3(b as f64 / f64::from(1u32 << 20));
        let grown = rss_peak.saturating_sub(before);
        Memory {
            rss_before_mib: mib(before),
            rss_peak_mib: mib(rss_peak),
            hwm_mib: rss::hwm_bytes().map_or(0.0, mib),
            per_in_flight_mib: round3(
                grown as f64 / f64::from(1u32 << 20) / peak_in_flight.max(1) as f64,
            ),
        }
    });

    let n = args.count as f64;
    let per_exec = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) => Some((b - a) / n),
        _ => None,
    };
    let statements = counter_deltas(&status_before, &status_after, n);
    let submit_counters = counter_deltas(&status_submit, &status_before, n);
    let (queued, running, succeeded) = latencies(
        &backend
            .stats()
            .execution_timings(&args.namespace, Some(measured_since))
            .await?,
    );
    let purge = match flags.purge_older_than {
        Some(older_than) => {
            Some(retention::purge(&*backend, &args.namespace, older_than, args.purge_batch).await?)
        }
        None => None,
    };
    let footprint = retention::footprint(&*backend).await?;
    let diagnostics_on = backend.capabilities().diagnostics_persisted;
    if let Err(e) = backend.close().await {
        eprintln!("onestep bench: closing the backend failed: {e}");
    }
    Ok(Report {
        count: args.count,
        handler: args.handler.clone(),
        server,
        build: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        diagnostics: diagnostics_on,
        concurrency: args.concurrency,
        batch_size: args.batch_size,
        completion_batch: args.completion_batch,
        submit_chunk: args.submit_chunk,
        fairness_keys: args.fairness_keys,
        pool_max,
        claimable_indexes,
        history,
        history_ids: args.history_ids.clone(),
        history_seed_s,
        ids: args.ids.clone(),
        idempotency_keys: args.idempotency_keys.is_some(),
        idempotency_key_order: args.idempotency_keys.clone(),
        round,
        purge,
        footprint,
        upgrade_before: None,
        submit_s,
        submit_per_s: n / submit_s,
        drain_s,
        completed_per_s: n / drain_s,
        succeeded,
        not_succeeded: total.saturating_sub(succeeded),
        queued_to_started_ms: queued,
        started_to_finished_ms: running,
        worker_cpu_ms_per_execution: per_exec(self_cpu0, self_cpu1),
        db_cpu_ms_per_execution: per_exec(db_cpu0, db_cpu1),
        db_process: db_proc.map(|p| format!("{} (pid {})", p.name, p.pid)),
        submit_io: PhaseIo::of(&submit_counters),
        drain_io: PhaseIo::of(&statements),
        db_statements_per_execution: statements,
        db_submit_counters_per_execution: submit_counters,
        lease_s,
        heartbeat_s,
        heartbeat_calls_per_s: round3(store_calls.heartbeat_calls as f64 / drain_s),
        heartbeat_leases_per_call: round3(
            store_calls.heartbeat_leases as f64 / store_calls.heartbeat_calls.max(1) as f64,
        ),
        store_calls,
        peak_in_flight,
        memory,
        http,
        wasm_pooling,
    })
}

/// Prepares `requests` as `ExecutionClient::submit_many` does and writes them in one call; with
/// `--ids v4` the executions get random ids instead of the time-ordered ones prepared.
async fn submit_many(
    store: &dyn ExecutionStore,
    namespace: &str,
    requests: &[SubmitRequest],
    ids: IdVersion,
) -> Result<Vec<Result<Execution, ExecutionError>>, ExecutionError> {
    let limits = Limits::default();
    let mut prepared = requests
        .iter()
        .map(|r| prepare_submission(namespace, r, &limits))
        .collect::<Result<Vec<_>, _>>()?;
    if ids != IdVersion::V7 {
        for p in &mut prepared {
            p.id = ids.new_id();
        }
    }
    if prepared.is_empty() {
        return Ok(Vec::new());
    }
    store.submit_many(prepared).await
}
