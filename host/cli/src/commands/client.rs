//! Client commands on the same library as the HTTP API: `submit`, `get`, `list`, `cancel`,
//! `retry`, `result`, `wait`. They talk to the database directly (see [`conn`]), except `wait
//! --api URL`, which follows the execution through the HTTP API's bounded wait (see
//! [`api_wait`]); output is human-readable by default and the API's JSON views with `--json`
//! (see [`output`] for exit codes).

mod api_wait;
mod batch;
mod conn;
mod diag;
mod output;

pub(crate) use diag::{AttemptsArgs, LogsArgs, PurgeArgs, StepsArgs, attempts, logs, purge, steps};

use std::io::IsTerminal;
use std::time::Instant;

use onestep_api::{poll, text};
use onestep_core::request::{ListQuery, SubmitRequest, parse_execution_id};
use onestep_core::{Execution, ExecutionError, ExecutionStatus};
use serde_json::Value;
use uuid::Uuid;

pub(crate) use conn::{ConnArgs, Connected, connect};
use output::{FAILED, Failure, OK, print_execution, print_json, print_page};

/// Arguments of `onestep submit`.
#[derive(Debug, clap::Args)]
pub(crate) struct SubmitArgs {
    /// Task name.
    #[arg(required_unless_present = "batch")]
    pub(crate) task: Option<String>,
    /// Payload: JSON text, or `@FILE` to read it from a file (`@-` for stdin).
    #[arg(long, required_unless_present = "batch")]
    pub(crate) payload: Option<String>,
    /// Submit every line of a JSON Lines file instead (`-` for stdin): one object per line with
    /// the fields of `POST /v1/executions` plus `idempotency_key`; sent in chunks of 1,000.
    #[arg(
        long,
        value_name = "FILE.jsonl",
        conflicts_with_all = [
            "task", "payload", "key", "metadata", "delay_s", "expires_at", "priority",
            "fairness_key",
        ]
    )]
    pub(crate) batch: Option<String>,
    /// Idempotency key (reuse it when retrying the same submission).
    #[arg(long)]
    pub(crate) key: Option<String>,
    /// Metadata: a JSON object.
    #[arg(long)]
    pub(crate) metadata: Option<String>,
    /// Seconds before the first claim.
    #[arg(long)]
    pub(crate) delay_s: Option<f64>,
    /// Latest claim instant, RFC 3339 with an offset (`2026-08-10T12:00:00+08:00`).
    #[arg(long)]
    pub(crate) expires_at: Option<String>,
    /// Claim priority, 0 (most urgent) to 9 (default 5).
    #[arg(long, allow_negative_numbers = true)]
    pub(crate) priority: Option<i64>,
    /// Fairness key: 1–255 ASCII letters, digits, `_`, `.`, `:`, `-` (default: the namespace).
    #[arg(long)]
    pub(crate) fairness_key: Option<String>,
    #[command(flatten)]
    pub(crate) conn: ConnArgs,
}

/// Arguments of `onestep get`.
#[derive(Debug, clap::Args)]
pub(crate) struct GetArgs {
    /// Execution id.
    pub(crate) id: String,
    #[command(flatten)]
    pub(crate) conn: ConnArgs,
}

/// Arguments of `onestep list`.
#[derive(Debug, clap::Args)]
pub(crate) struct ListArgs {
    /// Only this task.
    #[arg(long)]
    pub(crate) task: Option<String>,
    /// Only this status (`queued`, `running`, `retrying`, `succeeded`, `failed`,
    /// `cancel_requested`, `cancelled`, `expired`).
    #[arg(long)]
    pub(crate) status: Option<String>,
    /// Page size, 1–200.
    #[arg(long, default_value_t = 50)]
    pub(crate) limit: u32,
    /// Continue after this cursor (printed as `more: --cursor …`).
    #[arg(long)]
    pub(crate) cursor: Option<String>,
    /// Follow every page to the end.
    #[arg(long)]
    pub(crate) all: bool,
    /// List the busiest fairness keys instead of executions: per task and key, the executions
    /// waiting and running across the fleet (`--limit` up to 1000).
    #[arg(long, conflicts_with_all = ["task", "status", "cursor", "all"])]
    pub(crate) by_key: bool,
    #[command(flatten)]
    pub(crate) conn: ConnArgs,
}

/// Arguments of `onestep cancel`.
#[derive(Debug, clap::Args)]
pub(crate) struct CancelArgs {
    /// Execution id.
    pub(crate) id: String,
    /// Reason (at most 500 characters; stored, never shown).
    #[arg(long)]
    pub(crate) reason: Option<String>,
    #[command(flatten)]
    pub(crate) conn: ConnArgs,
}

/// Arguments of `onestep retry`.
#[derive(Debug, clap::Args)]
pub(crate) struct RetryArgs {
    /// Id of the failed, cancelled or expired execution.
    pub(crate) id: String,
    /// Idempotency key: the same key on the same execution returns the same retry (default: a
    /// new key, so every call retries again).
    #[arg(long)]
    pub(crate) key: Option<String>,
    #[command(flatten)]
    pub(crate) conn: ConnArgs,
}

/// Arguments of `onestep result`.
#[derive(Debug, clap::Args)]
pub(crate) struct ResultArgs {
    /// Execution id.
    pub(crate) id: String,
    #[command(flatten)]
    pub(crate) conn: ConnArgs,
}

/// Arguments of `onestep wait`.
#[derive(Debug, clap::Args)]
pub(crate) struct WaitArgs {
    /// Execution id.
    pub(crate) id: String,
    /// Give up after this many seconds (default: wait forever).
    #[arg(long)]
    pub(crate) timeout: Option<f64>,
    /// Wait through a running `onestep serve` at this base URL (`http://HOST:PORT`, optional
    /// path prefix) with its bounded wait (`?wait=`), instead of reading the database; the
    /// database options are not used then.
    #[arg(long, value_name = "URL", conflicts_with_all = ["config", "table", "attempts_table"])]
    pub(crate) api: Option<String>,
    /// Bearer token for `--api` (when the server is configured with tokens).
    #[arg(long, env = "ONESTEP_API_TOKEN", hide_env_values = true)]
    pub(crate) token: Option<String>,
    #[command(flatten)]
    pub(crate) conn: ConnArgs,
}

/// Connects, runs `body`, closes; maps failures to exit codes.
pub(super) async fn with_client<F>(conn: &ConnArgs, body: F) -> u8
where
    F: AsyncFnOnce(&Connected) -> Result<u8, Failure>,
{
    let connected = match connect(conn).await {
        Ok(c) => c,
        Err(f) => return f.report(conn.json),
    };
    let outcome = body(&connected).await;
    connected.close().await;
    outcome.unwrap_or_else(|f| f.report(conn.json))
}

fn parse_json_arg(name: &str, text: &str) -> Result<Value, Failure> {
    super::common::read_json_arg(name, text).map_err(Failure::usage)
}

pub(super) fn parse_id(text: &str) -> Result<Uuid, Failure> {
    parse_execution_id(text).map_err(Failure::from)
}

/// `onestep submit`.
pub(crate) async fn submit(args: SubmitArgs) -> u8 {
    if let Some(path) = &args.batch {
        return submit_batch(path, &args.conn).await;
    }
    let request = match build_submit(&args) {
        Ok(r) => r,
        Err(f) => return f.report(args.conn.json),
    };
    with_client(&args.conn, async |c| {
        let e = c.client.submit(&request).await?;
        print_execution(&e, args.conn.json);
        Ok(OK)
    })
    .await
}

fn build_submit(args: &SubmitArgs) -> Result<SubmitRequest, Failure> {
    let expires_at = match &args.expires_at {
        None => None,
        Some(t) => Some(
            onestep_api::routes::parse_expires_at(t)
                .map_err(|e| Failure::usage(e.body().message.clone()))?,
        ),
    };
    let (Some(task), Some(payload)) = (&args.task, &args.payload) else {
        return Err(Failure::usage(
            "a TASK and --payload are required (or --batch FILE)",
        ));
    };
    Ok(SubmitRequest {
        task_name: task.clone(),
        payload: parse_json_arg("payload", payload)?,
        idempotency_key: args.key.clone(),
        metadata: args
            .metadata
            .as_deref()
            .map(|m| parse_json_arg("metadata", m))
            .transpose()?,
        delay_s: args.delay_s,
        expires_at,
        priority: args.priority,
        fairness_key: args.fairness_key.clone(),
    })
}

/// `onestep submit --batch FILE` (docs/cli.md#batch-submit): the whole file is read and
/// checked before connecting; then one result line per item on stdout and a count on stderr.
async fn submit_batch(path: &str, conn: &ConnArgs) -> u8 {
    let (name, text) = match read_batch_input(path) {
        Ok(read) => read,
        Err(f) => return f.report(conn.json),
    };
    let items = match batch::parse(&name, &text) {
        Ok(items) => items,
        Err(f) => return f.report(conn.json),
    };
    let json = conn.json;
    with_client(conn, async |c| {
        let outcome = batch::submit(&c.client, items, |r| {
            println!("{}", if json { r.json() } else { r.text() });
        })
        .await;
        let created = outcome.results.iter().filter(|r| r.status == 202).count();
        let replayed = outcome.results.iter().filter(|r| r.status == 200).count();
        let failed = outcome.results.len() - created - replayed;
        eprintln!(
            "onestep: {} items: {created} created, {replayed} replayed, {failed} failed",
            outcome.results.len()
        );
        let exit = outcome.exit();
        if let Some((first, last, e)) = outcome.stopped {
            let f = Failure::from(e);
            if json {
                let stopped = serde_json::json!({
                    "not_submitted": {"from_line": first, "to_line": last},
                    "error": &*f.body,
                });
                println!("{stopped}");
            }
            eprintln!(
                "onestep: lines {first} to {last} were not submitted: {}",
                f.body.message
            );
        }
        Ok(exit)
    })
    .await
}

/// The batch file's name (for messages) and text; `-` reads stdin.
fn read_batch_input(path: &str) -> Result<(String, String), Failure> {
    let (name, read) = if path == "-" {
        (
            "stdin".to_owned(),
            std::io::read_to_string(std::io::stdin()),
        )
    } else {
        (path.to_owned(), std::fs::read_to_string(path))
    };
    read.map(|text| (name.clone(), text))
        .map_err(|e| Failure::usage(format!("--batch: cannot read {name}: {e}")))
}

/// `onestep get`.
pub(crate) async fn get(args: GetArgs) -> u8 {
    with_client(&args.conn, async |c| {
        let id = parse_id(&args.id)?;
        match c.client.get(id).await? {
            Some(e) => {
                let view = onestep_api::view::one_execution_view(&c.client, &e).await?;
                output::print_view(&view, args.conn.json);
                if !args.conn.json {
                    // The durable steps (docs/steps.md); `--json` is the API's execution view,
                    // `onestep steps --json` the API's steps view.
                    print!(
                        "{}",
                        text::steps_table(&diag::steps_of(c, id, None, false).await?)
                    );
                }
                Ok(OK)
            }
            None => Err(ExecutionError::NotFound { id }.into()),
        }
    })
    .await
}

/// `onestep list`.
pub(crate) async fn list(args: ListArgs) -> u8 {
    if args.by_key {
        return list_keys(args).await;
    }
    with_client(&args.conn, async |c| {
        let status = args
            .status
            .as_deref()
            .map(str::parse::<ExecutionStatus>)
            .transpose()?;
        let mut query = ListQuery {
            task_name: args.task.clone(),
            status,
            limit: args.limit,
            cursor: args.cursor.clone(),
        };
        let mut items = Vec::new();
        loop {
            let page = c.client.list(&query).await?;
            items.extend(page.items);
            match page.next_cursor {
                Some(next) if args.all => query.cursor = Some(next),
                next => {
                    print_page(&items, next, args.conn.json);
                    return Ok(OK);
                }
            }
        }
    })
    .await
}

/// `onestep list --by-key`: the busiest fairness keys of the namespace (`GET /v1/keys`).
async fn list_keys(args: ListArgs) -> u8 {
    with_client(&args.conn, async |c| {
        let limit = onestep_api::keys::parse_limit(Some(&args.limit.to_string()))
            .map_err(|e| Failure::usage(format!("--limit: {}", e.body().message)))?;
        let namespace = c.client.namespace().to_owned();
        let loads = c
            .backend()
            .insights()
            .key_loads(std::slice::from_ref(&namespace), limit)
            .await?;
        let view = onestep_api::keys::KeysView::new(&namespace, &loads);
        if args.conn.json {
            output::print_json(&view);
        } else {
            print!("{}", onestep_api::text::key_table(&view));
        }
        Ok(OK)
    })
    .await
}

/// `onestep cancel`.
pub(crate) async fn cancel(args: CancelArgs) -> u8 {
    with_client(&args.conn, async |c| {
        let id = parse_id(&args.id)?;
        match c.client.cancel(id, args.reason.as_deref()).await? {
            Some(e) => {
                print_execution(&e, args.conn.json);
                Ok(OK)
            }
            None => Err(ExecutionError::NotFound { id }.into()),
        }
    })
    .await
}

/// `onestep retry`: prints the new execution (its metadata links the original).
pub(crate) async fn retry(args: RetryArgs) -> u8 {
    with_client(&args.conn, async |c| {
        let id = parse_id(&args.id)?;
        let key = args
            .key
            .clone()
            .unwrap_or_else(|| format!("cli-retry:{}", Uuid::new_v4()));
        match c.client.retry(id, &key).await? {
            Some(e) => {
                print_execution(&e, args.conn.json);
                Ok(OK)
            }
            None => Err(ExecutionError::NotFound { id }.into()),
        }
    })
    .await
}

/// `onestep result`: the result of a succeeded execution (exit 1 for anything else).
pub(crate) async fn result(args: ResultArgs) -> u8 {
    with_client(&args.conn, async |c| {
        let id = parse_id(&args.id)?;
        let value = c.client.result(id).await?;
        if args.conn.json {
            print_json(&serde_json::json!({ "result": value }));
        } else {
            println!("{}", text::result_text(&value));
        }
        Ok(OK)
    })
    .await
}

/// `onestep wait`: until the execution is terminal, prints it (as `get` does); exit 0 only for
/// `succeeded`. With `--api`, through the HTTP API's bounded wait ([`api_wait`]); else on the
/// database: one full read, then only its `version` (one primary-key read) after 0.25, 0.5, 1,
/// 2, 4 s and then every 5 s, and a full read again whenever the version moved.
pub(crate) async fn wait(args: WaitArgs) -> u8 {
    let timeout = match args.timeout.map(|s| {
        super::common::seconds_flag("--timeout", s, super::common::SecondsRange::NonNegative)
    }) {
        None => None,
        Some(Ok(d)) => Some(d),
        Some(Err(e)) => return Failure::usage(e.to_string()).report(args.conn.json),
    };
    if let Some(url) = &args.api {
        return wait_api(&args, url, timeout)
            .await
            .unwrap_or_else(|f| f.report(args.conn.json));
    }
    with_client(&args.conn, async |c| {
        let id = parse_id(&args.id)?;
        let store = c.backend().executions();
        let start = Instant::now();
        let tty = std::io::stderr().is_terminal();
        let progress = |e: &Execution| {
            if tty {
                eprint!(
                    "\r\x1b[Kwaiting for {id}: {} (attempts {}, {}s)",
                    e.status,
                    e.attempts,
                    start.elapsed().as_secs()
                );
            }
        };
        let mut n = 0;
        let mut e = c
            .client
            .get(id)
            .await?
            .ok_or(ExecutionError::NotFound { id })?;
        loop {
            progress(&e);
            if e.terminal() {
                if tty {
                    eprintln!();
                }
                let view = onestep_api::view::one_execution_view(&c.client, &e).await?;
                output::print_view(&view, args.conn.json);
                return Ok(if e.status == ExecutionStatus::Succeeded {
                    OK
                } else {
                    eprintln!("onestep: execution {id} is {}", e.status);
                    FAILED
                });
            }
            // Sleep until the version moves: the cheap read, then the full one.
            loop {
                let remaining = timeout.map(|t| t.saturating_sub(start.elapsed()));
                let Some(delay) = poll::version_delay_within(n, remaining) else {
                    if tty {
                        eprintln!();
                    }
                    return Err(Failure::failed(
                        "timeout",
                        format!(
                            "execution {id} is still {} after {:.0}s",
                            e.status,
                            start.elapsed().as_secs_f64()
                        ),
                    ));
                };
                tokio::time::sleep(delay).await;
                n += 1;
                let versions = store.versions(&[id]).await?;
                match versions.iter().find(|(v_id, _)| *v_id == id) {
                    None => return Err(ExecutionError::NotFound { id }.into()),
                    Some((_, v)) if *v != e.version => break,
                    Some(_) => progress(&e),
                }
            }
            e = c
                .client
                .get(id)
                .await?
                .ok_or(ExecutionError::NotFound { id })?;
        }
    })
    .await
}

/// `onestep wait --api URL`.
async fn wait_api(
    args: &WaitArgs,
    url: &str,
    timeout: Option<std::time::Duration>,
) -> Result<u8, Failure> {
    let id = parse_id(&args.id)?;
    let base = api_wait::ApiBase::parse(url).map_err(Failure::usage)?;
    let auth = args.token.as_deref().map(api_wait::bearer).transpose()?;
    api_wait::wait(api_wait::ApiWait {
        base: &base,
        auth,
        id,
        timeout,
        json: args.conn.json,
    })
    .await
}
