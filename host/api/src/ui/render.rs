//! The dashboard's templates (embedded at compile time, rendered with minijinja, HTML-escaped)
//! and the view models they read (docs/ui.md#pages).
//!
//! Every string a template prints goes through one formatter: control, bidirectional and
//! zero-width characters become visible escapes ([`onestep_core::text::visible`]), then the text
//! is HTML-escaped. JSON values are shown as a bounded preview ([`value_block`]): at most
//! [`PREVIEW_BYTES`] of pretty JSON and [`PREVIEW_DEPTH`] levels, the whole value downloadable
//! (docs/ui.md#values).

use std::sync::LazyLock;

use chrono::{DateTime, SecondsFormat, Utc};
use minijinja::{Environment, context};
use onestep_core::diagnostics::{AttemptRecord, LogTail};
use onestep_core::ports::{RecentActivity, StatusCount};
use onestep_core::{Execution, ExecutionStatus, rerun};
use serde::Serialize;
use serde_json::Value;

pub use super::values::{
    COLLAPSE_BYTES, PREVIEW_BYTES, PREVIEW_DEPTH, ValueBlock, size_text, value_block,
};

/// The formatter of every `{{ … }}`: strings with invisible or reordering characters are shown
/// escaped ([`onestep_core::text::visible`]), then everything is HTML-escaped as usual.
fn visible_formatter(
    out: &mut minijinja::Output<'_>,
    state: &minijinja::State<'_, '_>,
    value: &minijinja::Value,
) -> Result<(), minijinja::Error> {
    if let Some(text) = value.as_str()
        && let std::borrow::Cow::Owned(shown) = onestep_core::text::visible(text)
    {
        return minijinja::escape_formatter(out, state, &minijinja::Value::from(shown));
    }
    minijinja::escape_formatter(out, state, value)
}

static TEMPLATES: LazyLock<Result<Environment<'static>, minijinja::Error>> = LazyLock::new(|| {
    let mut env = Environment::new();
    env.set_formatter(visible_formatter);
    env.add_template("shell.html", include_str!("templates/shell.html"))?;
    env.add_template("overview.html", include_str!("templates/overview.html"))?;
    env.add_template("list.html", include_str!("templates/list.html"))?;
    env.add_template("detail.html", include_str!("templates/detail.html"))?;
    env.add_template("logs.html", include_str!("templates/logs.html"))?;
    env.add_template(
        "deployments.html",
        include_str!("templates/deployments.html"),
    )?;
    Ok(env)
});

/// Why a page could not be rendered ([`render`]); for the log (the page shows a fixed text).
#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    /// The embedded templates did not load (minijinja's error text: the load runs once and
    /// its error is shared by every render).
    #[error("templates: {0}")]
    Templates(String),
    /// Template `name` failed to render.
    #[error("template {name}: {source}")]
    Template {
        /// The template's file name, e.g. `detail.html`.
        name: String,
        /// minijinja's error.
        source: minijinja::Error,
    },
}

/// Renders template `name` with `ctx`; the error is for the log (the page shows a fixed text).
pub fn render<S: Serialize>(name: &str, ctx: S) -> Result<String, RenderError> {
    let env = TEMPLATES
        .as_ref()
        .map_err(|e| RenderError::Templates(e.to_string()))?;
    env.get_template(name)
        .and_then(|t| t.render(ctx))
        .map_err(|source| RenderError::Template {
            name: name.to_owned(),
            source,
        })
}

fn instant(t: Option<DateTime<Utc>>) -> String {
    t.map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
        .unwrap_or_default()
}

fn error_text(e: &Execution) -> String {
    e.error
        .as_ref()
        .map(|o| match &o.stage {
            Some(stage) => format!("{} ({}, {stage})", o.exception_type, o.kind),
            None => format!("{} ({})", o.exception_type, o.kind),
        })
        .unwrap_or_default()
}

/// One row of the list.
#[derive(Debug, Serialize)]
pub struct ListRow {
    id: String,
    short_id: String,
    task_name: String,
    status: &'static str,
    /// Where the list's event stream starts (docs/ui.md#list).
    version: i64,
    terminal: bool,
    attempts: u32,
    created_at: String,
    finished_at: String,
    error: String,
}

impl From<&Execution> for ListRow {
    fn from(e: &Execution) -> Self {
        let id = e.id.to_string();
        ListRow {
            // Time-ordered ids share their first digits: show both ends.
            short_id: format!("{}…{}", &id[..8], &id[id.len() - 6..]),
            id,
            task_name: e.task_name.clone(),
            status: e.status.as_str(),
            version: e.version,
            terminal: e.terminal(),
            attempts: e.attempts,
            created_at: instant(Some(e.created_at)),
            finished_at: instant(e.finished_at),
            error: error_text(e),
        }
    }
}

/// The detail page's deliveries section (docs/ui.md#deliveries): an execution's completion
/// webhook and its attempts.
#[derive(Debug, Serialize)]
pub struct DeliveriesBlock {
    url: String,
    state: String,
    attempts: u32,
    next_at: String,
    items: Vec<DeliveryRow>,
}

/// One delivery attempt of the deliveries section.
#[derive(Debug, Serialize)]
pub struct DeliveryRow {
    attempt: u32,
    event: String,
    at: String,
    status: String,
    error: String,
}

impl From<&onestep_core::callback::CallbackRecord> for DeliveriesBlock {
    fn from(r: &onestep_core::callback::CallbackRecord) -> Self {
        DeliveriesBlock {
            url: r.url.clone(),
            state: r.state.as_str().to_owned(),
            attempts: r.attempts,
            next_at: instant(r.next_at),
            items: r
                .deliveries
                .iter()
                .map(|d| DeliveryRow {
                    attempt: d.attempt_no,
                    event: d.event.clone(),
                    at: instant(Some(d.at)),
                    status: d.status.map(|s| s.to_string()).unwrap_or_default(),
                    error: d.error.clone().unwrap_or_default(),
                })
                .collect(),
        }
    }
}

/// One attempt of the detail page's attempts table, with its persisted diagnostics
/// (docs/observability.md#attempt-diagnostics); the fields are empty where nothing was stored.
#[derive(Debug, Serialize)]
pub struct AttemptRow {
    attempt: u32,
    status: String,
    worker_id: String,
    started_at: String,
    heartbeat_at: String,
    finished_at: String,
    duration: String,
    error: String,
    message: String,
    progress: String,
    trap_kind: String,
    digest: String,
    short_digest: String,
    fuel: String,
    peak_memory: String,
    /// Log lines the attempt wrote (0: none stored, no log to open).
    log_lines: u64,
    /// The deployment versions of the task with this attempt's component (`v1, v3`), when
    /// known (docs/ui.md#deployments).
    deployed: String,
}

/// One durable step on the detail page (docs/ui.md#steps): key, size, when, which attempt.
#[derive(Debug, Serialize)]
pub struct StepRow {
    key: String,
    size: String,
    saved_at: String,
    attempt: u32,
    attempt_id: String,
}

impl From<&onestep_core::steps::StepRecord> for StepRow {
    fn from(s: &onestep_core::steps::StepRecord) -> Self {
        StepRow {
            key: s.key.clone(),
            size: size_text(usize::try_from(s.bytes).unwrap_or(usize::MAX)),
            saved_at: instant(Some(s.saved_at)),
            attempt: s.attempt_no,
            attempt_id: s.attempt_id.to_string(),
        }
    }
}

impl From<&AttemptRecord> for AttemptRow {
    fn from(a: &AttemptRecord) -> Self {
        let d = a.diagnostics.as_ref();
        let facts = d.map(|d| &d.facts);
        let digest = facts
            .and_then(|f| f.component_digest.clone())
            .unwrap_or_default();
        let progress = d
            .and_then(|d| d.progress.as_ref())
            .map(|p| {
                let count = if p.total > 0 {
                    format!("{}/{}", p.done, p.total)
                } else {
                    p.done.to_string()
                };
                let mut text = if p.note.is_empty() {
                    count
                } else {
                    format!("{count} {}", p.note)
                };
                text.push_str(&format!(" (at {})", instant(Some(p.at))));
                text
            })
            .unwrap_or_default();
        AttemptRow {
            attempt: a.attempt_no,
            status: a.status.clone(),
            worker_id: a.worker_id.clone(),
            started_at: instant(Some(a.started_at)),
            heartbeat_at: instant(Some(a.heartbeat_at)),
            finished_at: instant(a.finished_at),
            duration: a
                .finished_at
                .map(|f| wait_text((f - a.started_at).num_microseconds()))
                .unwrap_or_default(),
            error: a
                .error
                .as_ref()
                .map(|o| format!("{} ({})", o.exception_type, o.kind))
                .unwrap_or_default(),
            message: d.and_then(|d| d.message.clone()).unwrap_or_default(),
            progress,
            trap_kind: facts.and_then(|f| f.trap_kind.clone()).unwrap_or_default(),
            short_digest: digest.chars().take(12).collect(),
            digest,
            fuel: facts
                .and_then(|f| f.fuel_consumed)
                .map(|f| f.to_string())
                .unwrap_or_default(),
            peak_memory: facts
                .and_then(|f| f.peak_memory_bytes)
                .and_then(|b| usize::try_from(b).ok())
                .map(size_text)
                .unwrap_or_default(),
            deployed: String::new(),
            log_lines: d
                .and_then(|d| d.log.as_ref())
                .map(|l| l.total_lines)
                .unwrap_or(0),
        }
    }
}

/// One stored log line of the logs fragment.
#[derive(Debug, Serialize)]
pub struct LogRow {
    seq: u64,
    at: String,
    level: String,
    message: String,
}

/// The logs fragment's context: the kept lines, and how many were written but not kept.
pub fn logs_context(attempt: u32, tail: Option<&LogTail>) -> minijinja::Value {
    let lines: Vec<LogRow> = tail
        .map(|t| {
            t.lines
                .iter()
                .map(|l| LogRow {
                    seq: l.seq,
                    at: instant(Some(l.at)),
                    level: l.level.clone(),
                    message: l.message.clone(),
                })
                .collect()
        })
        .unwrap_or_default();
    context! {
        attempt => attempt,
        lines => lines,
        dropped => tail.map(LogTail::dropped_lines).unwrap_or(0),
    }
}

/// One step of the attempts timeline.
#[derive(Debug, Serialize)]
pub struct Step {
    at: String,
    what: String,
    detail: String,
}

/// The timeline of what the execution row records (docs/ui.md#detail), in time order.
///
/// A retried execution's `available_at` is its latest retry's (later than its first start):
/// it is shown as "retry available" where it falls, and the first attempt's wait is then
/// counted from the submit ("since submit": the first availability is not stored).
pub fn timeline(e: &Execution) -> Vec<Step> {
    let retry_available = e.started_at.is_some_and(|s| e.available_at > s);
    // (instant, order among equal instants, step); untimed steps take the instant before them.
    let mut timed: Vec<(DateTime<Utc>, u8, Step)> = vec![(
        e.created_at,
        0,
        Step {
            at: instant(Some(e.created_at)),
            what: "submitted".into(),
            detail: String::new(),
        },
    )];
    if e.available_at > e.created_at && !retry_available {
        timed.push((
            e.available_at,
            1,
            Step {
                at: instant(Some(e.available_at)),
                what: "available".into(),
                detail: String::new(),
            },
        ));
    }
    if let Some(t) = e.started_at {
        let detail = if retry_available {
            format!(
                "{} since submit",
                wait_text((t - e.created_at).num_microseconds())
            )
        } else {
            format!(
                "queue wait {}",
                wait_text((t - e.available_at).num_microseconds())
            )
        };
        timed.push((
            t,
            2,
            Step {
                at: instant(Some(t)),
                what: "first attempt started".into(),
                detail,
            },
        ));
        if e.attempts > 1 {
            timed.push((
                t,
                3,
                Step {
                    at: String::new(),
                    what: format!("{} attempts", e.attempts),
                    detail: String::new(),
                },
            ));
        }
    }
    if retry_available {
        timed.push((
            e.available_at,
            4,
            Step {
                at: instant(Some(e.available_at)),
                what: "retry available".into(),
                detail: String::new(),
            },
        ));
    }
    if let Some(t) = e.cancel_requested_at {
        timed.push((
            t,
            5,
            Step {
                at: instant(Some(t)),
                what: "cancel requested".into(),
                detail: String::new(),
            },
        ));
    }
    if let Some(t) = e.finished_at {
        timed.push((
            t,
            6,
            Step {
                at: instant(Some(t)),
                what: e.status.as_str().into(),
                detail: error_text(e),
            },
        ));
    }
    timed.sort_by_key(|(at, order, _)| (*at, *order));
    let mut steps: Vec<Step> = timed.into_iter().map(|(_, _, step)| step).collect();
    if e.finished_at.is_none() {
        steps.push(Step {
            at: String::new(),
            what: format!("now {}", e.status.as_str()),
            detail: String::new(),
        });
    }
    steps
}

/// The detail page's context. Built from typed values, never from `serde_json::Value` numbers
/// (the workspace enables serde_json's `arbitrary_precision`, whose numbers do not serialize as
/// numbers to other formats).
///
/// `with_values: false` (the auto-refresh of a live execution, docs/ui.md#detail) leaves the
/// payload and metadata out: they do not change, and the page keeps the ones it has.
/// `deployed` maps a component digest (hex, as attempts record it) to the task's deployment
/// versions that run it (docs/ui.md#deployments).
#[allow(clippy::too_many_arguments)]
pub fn detail_context(
    e: &Execution,
    attempts: &[AttemptRecord],
    cancel_reason: Option<&str>,
    can_cancel: bool,
    can_operate: bool,
    with_values: bool,
    deliveries: Option<&onestep_core::callback::CallbackRecord>,
    deployed: &std::collections::BTreeMap<String, Vec<i64>>,
    steps: Option<&[onestep_core::steps::StepRecord]>,
) -> minijinja::Value {
    let with_values = with_values || e.terminal();
    let mut values = Vec::new();
    if with_values {
        values.push(value_block("payload", &e.payload));
        values.push(value_block("metadata", &Value::Object(e.metadata.clone())));
    }
    if e.status == ExecutionStatus::Succeeded {
        values.push(value_block(
            "result",
            e.result.as_ref().unwrap_or(&Value::Null),
        ));
    }
    context! {
        e => context! {
            id => e.id.to_string(),
            namespace => e.namespace,
            task_name => e.task_name,
            status => e.status.as_str(),
            terminal => e.terminal(),
            attempts => e.attempts,
            version => e.version,
            error => error_text(e),
        },
        cancel_reason => cancel_reason,
        can_cancel => can_cancel,
        can_retry => can_operate && rerun::is_retryable(e.status),
        retry_of => rerun::retry_of(e).map(|id| id.to_string()),
        timeline => timeline(e),
        attempts => attempts.iter().map(|a| {
            let mut row = AttemptRow::from(a);
            if let Some(versions) = deployed.get(&row.digest) {
                row.deployed = versions.iter().map(|v| format!("v{v}")).collect::<Vec<_>>().join(", ");
            }
            row
        }).collect::<Vec<_>>(),
        deliveries => deliveries.map(DeliveriesBlock::from),
        can_redeliver => can_operate && deliveries.is_some(),
        steps => steps.map(|s| s.iter().map(StepRow::from).collect::<Vec<_>>()),
        steps_size => size_text(usize::try_from(steps.map_or(0, |s| s.iter().map(|r| r.bytes).sum::<u64>())).unwrap_or(usize::MAX)),
        values => values,
        with_values => with_values,
        preview_kib => PREVIEW_BYTES / 1024,
        preview_depth => PREVIEW_DEPTH,
    }
}

/// Text of a duration in microseconds.
pub fn wait_text(us: Option<i64>) -> String {
    match us {
        None => "–".into(),
        Some(us) if us < 1_000 => format!("{us} µs"),
        Some(us) if us < 1_000_000 => format!("{:.1} ms", us as f64 / 1e3),
        Some(us) => format!("{:.2} s", us as f64 / 1e6),
    }
}

/// The `q`-quantile (0..=1) of ascending `sorted` (nearest rank), `None` when empty.
pub fn quantile(sorted: &[i64], q: f64) -> Option<i64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted.get(rank.clamp(1, sorted.len()) - 1).copied()
}

/// One row of the counts table: a task and its count in each status of [`ExecutionStatus::ALL`].
#[derive(Debug, Serialize)]
pub struct CountRow {
    task: String,
    cells: Vec<u64>,
    total: u64,
}

/// The counts table from the grouped rows.
pub fn count_rows(counts: &[StatusCount]) -> Vec<CountRow> {
    let mut rows: Vec<CountRow> = Vec::new();
    for c in counts {
        let idx = ExecutionStatus::ALL
            .iter()
            .position(|s| *s == c.status)
            .unwrap_or(0);
        let row = match rows.iter_mut().find(|r| r.task == c.task_name) {
            Some(r) => r,
            None => {
                rows.push(CountRow {
                    task: c.task_name.clone(),
                    cells: vec![0; ExecutionStatus::ALL.len()],
                    total: 0,
                });
                let last = rows.len() - 1;
                &mut rows[last]
            }
        };
        if let Some(cell) = row.cells.get_mut(idx) {
            *cell += c.count;
        }
        row.total += c.count;
    }
    rows
}

/// The "last hour" cards.
pub fn hour_context(a: &RecentActivity) -> minijinja::Value {
    let done = a.succeeded + a.failed;
    let rate = if done == 0 {
        "–".to_owned()
    } else {
        format!("{:.1}%", 100.0 * a.failed as f64 / done as f64)
    };
    let note = if a.truncated {
        format!(
            "Last-hour figures are over the newest {} executions created in the hour.",
            a.sampled
        )
    } else {
        "Last-hour figures are over the executions created in the last hour.".to_owned()
    };
    context! {
        finished => a.finished,
        per_minute => format!("{:.1}", a.finished as f64 / 60.0),
        succeeded => a.succeeded,
        failed => a.failed,
        failure_rate => rate,
        wait_p50 => wait_text(quantile(&a.queue_waits_us, 0.5)),
        wait_p99 => wait_text(quantile(&a.queue_waits_us, 0.99)),
        note => note,
    }
}

/// Every status name, in the order of the counts table and the status filter.
pub fn status_names() -> Vec<&'static str> {
    ExecutionStatus::ALL.iter().map(|s| s.as_str()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn execution(attempts: u32, status: ExecutionStatus) -> Execution {
        let t0 = DateTime::from_timestamp(1_800_000_000, 0).expect("instant");
        let s = |n: i64| t0 + chrono::TimeDelta::seconds(n);
        Execution {
            id: uuid::Uuid::from_u128(1),
            namespace: "ns".into(),
            task_name: "t".into(),
            status,
            payload: json!(1),
            metadata: serde_json::Map::new(),
            result: None,
            error: None,
            attempts,
            created_at: t0,
            available_at: s(if attempts > 1 { 40 } else { 5 }),
            started_at: Some(s(10)),
            finished_at: None,
            cancel_requested_at: None,
            expires_at: None,
            version: 3,
            priority: 5,
            fairness_key: None,
        }
    }

    fn whats(steps: &[Step]) -> Vec<&str> {
        steps.iter().map(|s| s.what.as_str()).collect()
    }

    #[test]
    fn a_retried_executions_timeline_is_in_time_order_with_no_negative_wait() {
        let first = timeline(&execution(1, ExecutionStatus::Running));
        assert_eq!(
            whats(&first),
            [
                "submitted",
                "available",
                "first attempt started",
                "now running"
            ]
        );
        assert_eq!(
            first[2].detail,
            format!("queue wait {}", wait_text(Some(5_000_000)))
        );

        // Retried: available_at is the second attempt's (40 s), after the first start (10 s).
        let mut retried = execution(2, ExecutionStatus::Retrying);
        let steps = timeline(&retried);
        assert_eq!(
            whats(&steps),
            [
                "submitted",
                "first attempt started",
                "2 attempts",
                "retry available",
                "now retrying"
            ]
        );
        assert_eq!(
            steps[1].detail,
            format!("{} since submit", wait_text(Some(10_000_000)))
        );
        assert!(
            steps.iter().all(|s| !s.detail.contains('-')),
            "no negative wait"
        );

        // A cancel requested before the retry's availability comes before it.
        retried.cancel_requested_at = Some(retried.created_at + chrono::TimeDelta::seconds(20));
        retried.finished_at = Some(retried.created_at + chrono::TimeDelta::seconds(50));
        retried.status = ExecutionStatus::Cancelled;
        assert_eq!(
            whats(&timeline(&retried)),
            [
                "submitted",
                "first attempt started",
                "2 attempts",
                "cancel requested",
                "retry available",
                "cancelled"
            ]
        );
    }

    #[test]
    fn quantiles() {
        assert_eq!(quantile(&[], 0.5), None);
        assert_eq!(quantile(&[1, 2, 3, 4], 0.5), Some(2));
        assert_eq!(quantile(&[1, 2, 3, 4], 0.99), Some(4));
    }

    #[test]
    fn templates_render_and_escape() {
        let html = render(
            "shell.html",
            json!({"title": "t", "page": "list", "id": "", "statuses": status_names()}),
        )
        .unwrap();
        assert!(html.contains("<option value=\"cancel_requested\">"));
        let rows = render(
            "list.html",
            json!({"items": [{"id": "1", "short_id": "1", "task_name": "<script>", "status": "queued"}],
                   "live": true, "next_cursor": null}),
        )
        .unwrap();
        assert!(rows.contains("&lt;script&gt;") && !rows.contains("<script>"));
        assert!(!rows.contains("search-window") && !rows.contains("next-page"));
        // A partial search page (docs/semantics.md#search-window) says how far it looked and
        // goes on from there, with or without matches.
        let partial = render(
            "list.html",
            // `context!`, as the handler passes it: a JSON number would reach the template as
            // serde_json's arbitrary-precision map.
            minijinja::context! {
                items => json!([{"id": "1", "short_id": "1", "task_name": "t", "status": "failed"}]),
                live => false, next_cursor => "CUR", partial => true, window => 1000u32,
            },
        )
        .unwrap();
        assert!(
            partial.contains("stopped after examining 1000 executions"),
            "{partial}"
        );
        assert!(partial.contains("data-cursor=\"CUR\""));
        let none = render(
            "list.html",
            minijinja::context! {
                items => json!([]), live => false, next_cursor => "CUR", partial => true,
                window => 1000u32,
            },
        )
        .unwrap();
        assert!(none.contains("No matches among the 1000 executions examined"));
        assert!(none.contains("Search older") && none.contains("data-cursor=\"CUR\""));
        let end = render(
            "list.html",
            json!({"items": [], "live": false, "next_cursor": null, "partial": false}),
        )
        .unwrap();
        assert!(end.contains("No executions match.") && !end.contains("next-page"));
        let hour = render(
            "overview.html",
            context! {
                namespace => "ns",
                statuses => status_names(),
                counts => count_rows(&[StatusCount {
                    task_name: "a".into(),
                    status: ExecutionStatus::Queued,
                    count: 7,
                }]),
                hour => hour_context(&RecentActivity {
                    sampled: 4,
                    finished: 3,
                    succeeded: 2,
                    failed: 1,
                    ..RecentActivity::default()
                }),
                as_of => "now",
                cache_s => 5,
            },
        )
        .unwrap();
        assert!(hour.contains("<td>7</td>"), "{hour}");
        assert!(
            hour.contains("33.3%") && hour.contains("<b id=\"ov-throughput\">3</b>"),
            "{hour}"
        );
        let counts = count_rows(&[
            StatusCount {
                task_name: "a".into(),
                status: ExecutionStatus::Failed,
                count: 2,
            },
            StatusCount {
                task_name: "a".into(),
                status: ExecutionStatus::Queued,
                count: 3,
            },
        ]);
        assert_eq!(counts.len(), 1);
        assert_eq!(counts[0].total, 5);
        assert_eq!(counts[0].cells[0], 3);
    }

    #[test]
    fn tenant_text_shows_bidi_and_invisible_characters_escaped() {
        let rows = render(
            "list.html",
            json!({"items": [{"id": "1", "short_id": "1", "task_name": "invoice\u{202e}gpj.exe",
                   "status": "failed", "error": "Bad\u{200b}Type\u{1b}[31m"}],
                   "live": false, "next_cursor": null}),
        )
        .unwrap();
        assert!(rows.contains("invoice\\u{202e}gpj.exe"), "{rows}");
        assert!(rows.contains("Bad\\u{200b}Type\\u{1b}[31m"), "{rows}");
        assert!(
            !rows.contains('\u{202e}') && !rows.contains('\u{200b}') && !rows.contains('\u{1b}')
        );
        // Inside JSON values too, line by line (the newlines of the pretty JSON stay).
        let block = value_block("metadata", &json!({"k\u{2066}": "v\u{202e}x"}));
        let html = render(
            "detail.html",
            context! {
                e => context! { id => "id-1", task_name => "t\u{200f}", status => "failed", terminal => true },
                timeline => Vec::<Step>::new(),
                attempts => Vec::<AttemptRow>::new(),
                values => vec![block],
                with_values => true,
            },
        )
        .unwrap();
        assert!(html.contains("t\\u{200f}"), "{html}");
        assert!(
            html.contains("&quot;k\\u{2066}&quot;: &quot;v\\u{202e}x&quot;\n"),
            "{html}"
        );
        assert!(
            !html.contains('\u{2066}') && !html.contains('\u{202e}') && !html.contains('\u{200f}')
        );
        let logs = render(
            "logs.html",
            logs_context(
                1,
                Some(&LogTail {
                    total_lines: 1,
                    lines: vec![onestep_core::diagnostics::LogLine {
                        seq: 1,
                        at: Utc::now(),
                        level: "info".into(),
                        message: "a\u{2028}b\u{202d}".into(),
                    }],
                }),
            ),
        )
        .unwrap();
        assert!(logs.contains("a\\u{2028}b\\u{202d}"), "{logs}");
    }
}

/// One task's deployments on the dashboard (docs/ui.md#deployments).
#[derive(Debug, Clone, Serialize)]
pub struct TaskDeployments {
    /// The task.
    pub task: String,
    /// Its active version, if any.
    pub active: Option<i64>,
    /// Its versions, newest first.
    pub versions: Vec<DeploymentRow>,
}

/// One version's row.
#[derive(Debug, Clone, Serialize)]
pub struct DeploymentRow {
    version: i64,
    state: &'static str,
    digest: String,
    short_digest: String,
    deployed_by: String,
    deployed_at: String,
    previous_version: Option<i64>,
    note: String,
}

impl From<&onestep_core::deployments::Deployment> for DeploymentRow {
    fn from(d: &onestep_core::deployments::Deployment) -> Self {
        let hex = d
            .digest
            .as_str()
            .strip_prefix("sha256:")
            .unwrap_or(d.digest.as_str());
        DeploymentRow {
            version: d.version,
            state: d.state.as_str(),
            short_digest: hex.chars().take(12).collect(),
            digest: d.digest.to_string(),
            deployed_by: d.deployed_by.clone(),
            deployed_at: instant(Some(d.deployed_at)),
            previous_version: d.previous_version,
            note: d.note.clone().unwrap_or_default(),
        }
    }
}

/// One audit event's row.
#[derive(Debug, Clone, Serialize)]
pub struct DeploymentEventRow {
    revision: i64,
    at: String,
    action: &'static str,
    task: String,
    version: i64,
    from_version: Option<i64>,
    short_digest: String,
    digest: String,
    actor: String,
    note: String,
}

impl From<&onestep_core::deployments::DeploymentEvent> for DeploymentEventRow {
    fn from(e: &onestep_core::deployments::DeploymentEvent) -> Self {
        let hex = e
            .digest
            .as_str()
            .strip_prefix("sha256:")
            .unwrap_or(e.digest.as_str());
        DeploymentEventRow {
            revision: e.revision,
            at: instant(Some(e.at)),
            action: e.action.as_str(),
            task: e.task.clone(),
            version: e.version,
            from_version: e.from_version,
            short_digest: hex.chars().take(12).collect(),
            digest: e.digest.to_string(),
            actor: e.actor.clone(),
            note: e.note.clone().unwrap_or_default(),
        }
    }
}

/// The deployments fragment's context: versions grouped by task (tasks by name, versions newest
/// first) and the audit events.
pub fn deployments_context(
    namespace: &str,
    deployments: &[onestep_core::deployments::Deployment],
    more: bool,
    events: &[onestep_core::deployments::DeploymentEvent],
) -> minijinja::Value {
    let mut tasks: std::collections::BTreeMap<&str, TaskDeployments> =
        std::collections::BTreeMap::new();
    for d in deployments {
        let t = tasks
            .entry(d.task.as_str())
            .or_insert_with(|| TaskDeployments {
                task: d.task.clone(),
                active: None,
                versions: Vec::new(),
            });
        if d.state == onestep_core::deployments::DeploymentState::Active {
            t.active = Some(d.version);
        }
        t.versions.push(DeploymentRow::from(d));
    }
    context! {
        namespace => namespace,
        tasks => tasks.into_values().collect::<Vec<_>>(),
        more => more,
        events => events.iter().map(DeploymentEventRow::from).collect::<Vec<_>>(),
    }
}
