//! `onestep attempts`, `onestep logs`, `onestep steps` and `onestep purge`
//! (docs/cli.md#attempts-and-logs, docs/cli.md#purge): the persisted per-attempt diagnostics
//! and durable steps of one execution, and the removal of old finished executions.

use std::time::Duration;

use onestep_api::attempts::{AttemptView, AttemptsView, LogsView};
use onestep_api::steps::StepsView;
use onestep_api::text;
use onestep_core::ExecutionStatus;
use onestep_core::diagnostics::{PurgeReport, PurgeRequest};
use uuid::Uuid;

use super::conn::{ConnArgs, Connected};
use super::output::{Failure, OK, print_json};
use super::{parse_id, with_client};

/// Arguments of `onestep attempts`.
#[derive(Debug, clap::Args)]
pub(crate) struct AttemptsArgs {
    /// Execution id.
    pub(crate) id: String,
    #[command(flatten)]
    pub(crate) conn: ConnArgs,
}

/// Arguments of `onestep logs`.
#[derive(Debug, clap::Args)]
pub(crate) struct LogsArgs {
    /// Execution id.
    pub(crate) id: String,
    /// Attempt number (default: the latest attempt).
    #[arg(long)]
    pub(crate) attempt: Option<u32>,
    /// Keep printing new lines while the attempt runs; stops when it has finished.
    #[arg(long)]
    pub(crate) follow: bool,
    /// Seconds between polls with `--follow` (default 1).
    #[arg(long, default_value_t = 1.0)]
    pub(crate) interval: f64,
    #[command(flatten)]
    pub(crate) conn: ConnArgs,
}

/// Arguments of `onestep steps`.
#[derive(Debug, clap::Args)]
pub(crate) struct StepsArgs {
    /// Execution id.
    pub(crate) id: String,
    /// Print the values too (at most 4 MiB of them; ask for the rest one `--key` at a time).
    #[arg(long)]
    pub(crate) values: bool,
    /// Only the step of this key.
    #[arg(long)]
    pub(crate) key: Option<String>,
    #[command(flatten)]
    pub(crate) conn: ConnArgs,
}

/// Arguments of `onestep purge`.
#[derive(Debug, clap::Args)]
pub(crate) struct PurgeArgs {
    /// Remove executions that finished longer ago than this (`30d`, `12h`, `90min`, `1h 30m`).
    #[arg(long, value_name = "DURATION")]
    pub(crate) older_than: String,
    /// Only these terminal statuses (repeatable or comma-separated; default all four:
    /// succeeded, failed, cancelled, expired).
    #[arg(long, value_delimiter = ',')]
    pub(crate) status: Vec<String>,
    /// Count what would be removed; remove nothing.
    #[arg(long)]
    pub(crate) dry_run: bool,
    /// Executions removed per transaction (1–10000).
    #[arg(long, default_value_t = 500)]
    pub(crate) batch_size: u32,
    /// Every namespace of the tables, not only `--namespace` / `api.namespace`.
    #[arg(long)]
    pub(crate) all_namespaces: bool,
    #[command(flatten)]
    pub(crate) conn: ConnArgs,
}

async fn attempts_of(c: &Connected, id: Uuid) -> Result<AttemptsView, Failure> {
    let items = c
        .client
        .attempts(id)
        .await?
        .ok_or(onestep_core::ExecutionError::NotFound { id })?;
    Ok(AttemptsView {
        execution_id: id,
        items: items.iter().map(AttemptView::from).collect(),
    })
}

/// The durable steps of `id` (docs/steps.md) as the API lists them; the caller has checked
/// that the execution is in its namespace.
pub(crate) async fn steps_of(
    c: &Connected,
    id: Uuid,
    key: Option<&str>,
    values: bool,
) -> Result<StepsView, Failure> {
    let store = c.backend().steps();
    Ok(onestep_api::steps::steps_view(Some(store.as_ref()), id, key, values).await?)
}

/// `onestep attempts ID`.
pub(crate) async fn attempts(args: AttemptsArgs) -> u8 {
    with_client(&args.conn, async |c| {
        let id = parse_id(&args.id)?;
        let view = attempts_of(c, id).await?;
        if args.conn.json {
            print_json(&view);
        } else {
            print!("{}", text::attempts_detail(&view));
            // Which attempt saved each step's current value (docs/steps.md).
            print!(
                "{}",
                text::steps_table(&steps_of(c, id, None, false).await?)
            );
        }
        Ok(OK)
    })
    .await
}

/// `onestep steps ID [--values] [--key K]`.
pub(crate) async fn steps(args: StepsArgs) -> u8 {
    with_client(&args.conn, async |c| {
        let id = parse_id(&args.id)?;
        if let Some(k) = &args.key {
            onestep_core::steps::validate_key(k)
                .map_err(|e| Failure::usage(format!("--key: {e}")))?;
        }
        // Another namespace's execution is a missing one.
        c.client
            .get(id)
            .await?
            .ok_or(onestep_core::ExecutionError::NotFound { id })?;
        let view = steps_of(c, id, args.key.as_deref(), args.values).await?;
        if args.conn.json {
            print_json(&view);
        } else {
            let out = text::steps_table(&view);
            if out.is_empty() {
                println!(
                    "no steps kept: the tables have no steps table (`onestep migrate --upgrade` adds it)"
                );
            }
            print!("{out}");
        }
        Ok(OK)
    })
    .await
}

async fn logs_of(c: &Connected, id: Uuid, attempt: u32) -> Result<LogsView, Failure> {
    let tail = c.client.attempt_log(id, attempt).await?.ok_or_else(|| {
        Failure::failed(
            "not_found",
            format!("execution {id} was not found or has no attempt {attempt}"),
        )
    })?;
    let tail = tail.unwrap_or_default();
    Ok(LogsView {
        execution_id: id,
        attempt,
        total_lines: tail.total_lines,
        dropped_lines: tail.dropped_lines(),
        lines: tail
            .lines
            .into_iter()
            .map(|l| onestep_api::attempts::LogLineView {
                seq: l.seq,
                at: onestep_core::timefmt::utc_isoformat(&l.at),
                level: l.level,
                message: l.message,
            })
            .collect(),
    })
}

/// `onestep logs ID [--attempt N] [--follow]`.
pub(crate) async fn logs(args: LogsArgs) -> u8 {
    let interval = match Duration::try_from_secs_f64(args.interval) {
        Ok(d) if d >= Duration::from_millis(100) => d,
        _ => {
            return Failure::usage("--interval must be a number of seconds, at least 0.1")
                .report(args.conn.json);
        }
    };
    with_client(&args.conn, async |c| {
        let id = parse_id(&args.id)?;
        let attempt = match args.attempt {
            Some(0) => {
                return Err(Failure::usage(
                    "--attempt must be a positive integer (attempts are numbered from 1)",
                ));
            }
            Some(n) => n,
            None => attempts_of(c, id)
                .await?
                .items
                .last()
                .map(|a| a.attempt)
                .ok_or_else(|| {
                    Failure::failed("not_found", format!("execution {id} has no attempts yet"))
                })?,
        };
        let mut seen = 0u64;
        loop {
            let mut view = logs_of(c, id, attempt).await?;
            view.lines.retain(|l| l.seq > seen);
            if let Some(last) = view.lines.last() {
                seen = last.seq;
            }
            if args.conn.json {
                if args.follow {
                    for line in &view.lines {
                        print_json(line);
                    }
                } else {
                    print_json(&view);
                }
            } else {
                print!("{}", text::log_lines(&view));
                if !args.follow && view.dropped_lines > 0 {
                    eprintln!(
                        "({} earlier lines not kept; the tail keeps the last 64 KiB)",
                        view.dropped_lines
                    );
                }
            }
            if !args.follow {
                return Ok(OK);
            }
            let running = attempts_of(c, id)
                .await?
                .items
                .iter()
                .any(|a| a.attempt == attempt && a.status == "running");
            if !running {
                // One last read: the final write may have added lines after the poll.
                let mut last = logs_of(c, id, attempt).await?;
                last.lines.retain(|l| l.seq > seen);
                if args.conn.json {
                    for line in &last.lines {
                        print_json(line);
                    }
                } else {
                    print!("{}", text::log_lines(&last));
                }
                return Ok(OK);
            }
            tokio::time::sleep(interval).await;
        }
    })
    .await
}

fn purge_request(args: &PurgeArgs, namespace: &str) -> Result<PurgeRequest, Failure> {
    let older = humantime::parse_duration(args.older_than.trim()).map_err(|e| {
        Failure::usage(format!(
            "--older-than '{}' is not a duration ({e}); examples: 30d, 12h, 90min",
            args.older_than
        ))
    })?;
    let older = chrono::Duration::from_std(older)
        .map_err(|_| Failure::usage("--older-than is too large"))?;
    let mut statuses = Vec::new();
    for s in &args.status {
        let status: ExecutionStatus = s.trim().parse().map_err(|_| {
            Failure::usage(format!(
                "--status '{s}' is not a status (allowed: succeeded, failed, cancelled, expired)"
            ))
        })?;
        if !status.is_terminal() {
            return Err(Failure::usage(format!(
                "--status '{s}': purge removes finished executions only (allowed: succeeded, \
                 failed, cancelled, expired)"
            )));
        }
        statuses.push(status);
    }
    if args.batch_size == 0 || args.batch_size > 10_000 {
        return Err(Failure::usage("--batch-size must be between 1 and 10000"));
    }
    Ok(PurgeRequest {
        namespace: (!args.all_namespaces).then(|| namespace.to_owned()),
        finished_before: chrono::Utc::now() - older,
        statuses,
        batch_size: args.batch_size,
        dry_run: args.dry_run,
    })
}

/// `onestep purge --older-than DURATION [--status ...] [--dry-run]`.
pub(crate) async fn purge(args: PurgeArgs) -> u8 {
    with_client(&args.conn, async |c| {
        let request = purge_request(&args, c.client.namespace())?;
        let retention = c.backend().retention();
        let report: PurgeReport = retention.purge(&request).await?;
        let verb = if request.dry_run { "would remove" } else { "removed" };
        if args.conn.json {
            print_json(&serde_json::json!({
                "dry_run": request.dry_run,
                "namespace": request.namespace,
                "finished_before": onestep_core::timefmt::utc_isoformat(&request.finished_before),
                "executions": report.executions,
                "attempts": report.attempts,
                "diagnostics": report.diagnostics,
                "steps": report.steps,
                "batches": report.batches,
            }));
        } else {
            println!(
                "{verb} {} executions, {} attempts and {} diagnostics rows finished before {} ({} batches)",
                report.executions,
                report.attempts,
                report.diagnostics,
                onestep_core::timefmt::utc_isoformat(&request.finished_before),
                report.batches
            );
        }
        Ok(OK)
    })
    .await
}
