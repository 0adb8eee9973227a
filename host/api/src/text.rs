//! Human-readable output of the CLI client commands (`onestep get`, `list`, …). `--json` output
//! is the same [`ExecutionView`] the HTTP API returns. Tenant text (task names, namespaces,
//! metadata, error types) is shown with control, bidi and zero-width characters escaped
//! ([`onestep_core::text::visible`], docs/security.md#invisible-characters), as on the dashboard.

use std::fmt::Write as _;

use onestep_core::text::visible;
use serde_json::Value;

use crate::attempts::{AttemptsView, LogsView, ProgressView};
use crate::view::{ErrorObjectView, ExecutionView};

/// The `onestep list --by-key` table: the busiest fairness keys (docs/cli.md#commands).
pub fn key_table(view: &crate::keys::KeysView) -> String {
    let rows: Vec<[String; 4]> = view
        .items
        .iter()
        .map(|k| {
            [
                visible(&k.task_name).into_owned(),
                visible(&k.fairness_key).into_owned(),
                k.waiting.to_string(),
                k.running.to_string(),
            ]
        })
        .collect();
    let mut out = columns(["TASK", "FAIRNESS_KEY", "WAITING", "RUNNING"], &rows);
    if view.truncated {
        out.push_str("(more keys have work; raise --limit)\n");
    }
    out
}

/// A table of executions: `ID  TASK  STATUS  PRI  ATTEMPTS  CREATED  FINISHED`, one row each
/// (`PRI`: the priority, docs/semantics.md#priority-and-fairness-key).
pub fn execution_table(items: &[ExecutionView]) -> String {
    let rows: Vec<[String; 7]> = items
        .iter()
        .map(|e| {
            [
                e.id.to_string(),
                visible(&e.task_name).into_owned(),
                e.status.clone(),
                e.priority.to_string(),
                e.attempts.to_string(),
                short_time(&e.created_at),
                e.finished_at.as_deref().map(short_time).unwrap_or_default(),
            ]
        })
        .collect();
    columns(
        [
            "ID", "TASK", "STATUS", "PRI", "ATTEMPTS", "CREATED", "FINISHED",
        ],
        &rows,
    )
}

/// `header` and `rows` as left-aligned columns two spaces apart, one line each (no trailing
/// spaces).
fn columns<const N: usize>(header: [&str; N], rows: &[[String; N]]) -> String {
    let mut widths = header.map(|h| h.chars().count());
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: [&str; N]| {
        let mut l = String::new();
        for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == N {
                l.push_str(cell);
            } else {
                let _ = write!(l, "{cell:<w$}  ");
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(header);
    for row in rows {
        line(row.each_ref().map(String::as_str));
    }
    out
}

/// One execution as `key: value` lines.
pub fn execution_detail(e: &ExecutionView) -> String {
    let mut out = String::new();
    let mut kv = |k: &str, v: &str| {
        let _ = writeln!(out, "{:<22}{}", format!("{k}:"), visible(v));
    };
    kv("id", &e.id.to_string());
    kv("namespace", &e.namespace);
    kv("task_name", &e.task_name);
    let terminal = if e.terminal { " (terminal)" } else { "" };
    kv("status", &format!("{}{terminal}", e.status));
    kv("attempts", &e.attempts.to_string());
    kv("priority", &e.priority.to_string());
    kv("fairness_key", &e.fairness_key);
    kv("version", &e.version.to_string());
    kv("created_at", &e.created_at);
    kv("available_at", &e.available_at);
    for (k, v) in [
        ("started_at", &e.started_at),
        ("finished_at", &e.finished_at),
        ("cancel_requested_at", &e.cancel_requested_at),
        ("expires_at", &e.expires_at),
    ] {
        if let Some(v) = v {
            kv(k, v);
        }
    }
    if !e.metadata.is_empty() {
        kv("metadata", &Value::Object(e.metadata.clone()).to_string());
    }
    if let Some(err) = &e.error {
        kv("error", &error_summary(err));
    }
    if let Some(p) = &e.progress {
        kv("progress", &progress_summary(p));
    }
    if let Some(a) = &e.last_attempt {
        kv("last_attempt", &format!("#{} {}", a.attempt, a.status));
        if let Some(m) = &a.message {
            kv("last_message", m);
        }
    }
    if let Some(r) = &e.cancel_reason {
        kv("cancel_reason", r);
    }
    out
}

/// `3/10 (30%) "note" at <time>`; `3` alone when the total is unknown.
pub fn progress_summary(p: &ProgressView) -> String {
    let mut s = if p.total > 0 {
        let pct = (p.done as f64 / p.total as f64 * 100.0).round();
        format!("{}/{} ({pct}%)", p.done, p.total)
    } else {
        p.done.to_string()
    };
    if !p.note.is_empty() {
        let _ = write!(s, " {:?}", p.note);
    }
    let _ = write!(s, " at {}", p.at);
    s
}

/// Each attempt as a block of `key: value` lines (`onestep attempts ID`).
pub fn attempts_detail(view: &AttemptsView) -> String {
    let mut out = String::new();
    if view.items.is_empty() {
        out.push_str("no attempts yet\n");
    }
    for a in &view.items {
        let _ = writeln!(out, "attempt {} ({})", a.attempt, a.status);
        let mut kv = |k: &str, v: &str| {
            let _ = writeln!(out, "  {:<20}{}", format!("{k}:"), visible(v));
        };
        kv("id", &a.id.to_string());
        kv("worker_id", &a.worker_id);
        kv("started_at", &a.started_at);
        kv("heartbeat_at", &a.heartbeat_at);
        if let Some(f) = &a.finished_at {
            kv("finished_at", f);
        }
        if let Some(err) = &a.error {
            kv("error", &error_summary(err));
        }
        if let Some(m) = &a.message {
            kv("message", &format!("{m:?}"));
        }
        if let Some(p) = &a.progress {
            kv("progress", &progress_summary(p));
        }
        if let Some(t) = &a.trap_kind {
            kv("trap", t);
        }
        if let Some(d) = &a.component_digest {
            kv("component_digest", &format!("sha256:{d}"));
        }
        if let Some(f) = a.fuel_consumed {
            kv("fuel_consumed", &f.to_string());
        }
        if let Some(m) = a.peak_memory_bytes {
            kv("peak_memory_bytes", &m.to_string());
        }
        kv("log_lines", &a.log_lines.to_string());
        if !a.diagnostics {
            kv("diagnostics", "none stored");
        }
    }
    out
}

/// The durable steps of an execution (`onestep get`, `onestep attempts`, `onestep steps`):
/// a `steps: N (B bytes)` line, then `KEY  BYTES  SAVED_AT  ATTEMPT` in first-save order, and
/// each value (`onestep steps --values`) on its own line under its key, escaped. Nothing when
/// the store keeps no steps.
pub fn steps_table(view: &crate::steps::StepsView) -> String {
    if !view.steps_kept {
        return String::new();
    }
    let mut out = format!("steps: {} ({} bytes)\n", view.items.len(), view.total_bytes);
    if view.items.is_empty() {
        return out;
    }
    let rows: Vec<[String; 4]> = view
        .items
        .iter()
        .map(|s| {
            [
                visible(&s.key).into_owned(),
                s.bytes.to_string(),
                s.saved_at.clone(),
                format!("#{} {}", s.attempt, s.attempt_id),
            ]
        })
        .collect();
    let table = columns(["KEY", "BYTES", "SAVED_AT", "ATTEMPT"], &rows);
    let mut lines = table.lines();
    if let Some(header) = lines.next() {
        let _ = writeln!(out, "  {header}");
    }
    for (line, step) in lines.zip(&view.items) {
        let _ = writeln!(out, "  {line}");
        if let Some(v) = &step.value {
            let text: String = v.to_string().escape_debug().collect();
            let _ = writeln!(out, "    = {text}");
        }
    }
    if view.values_omitted > 0 {
        let _ = writeln!(
            out,
            "  ({} values not shown: past 4 MiB of values; ask for one with --key)",
            view.values_omitted
        );
    }
    out
}

/// Log lines as `<time> <level> <message>` (`onestep logs ID`); messages are shown escaped
/// (`{:?}`-style control characters) so a line stays one line.
pub fn log_lines(view: &LogsView) -> String {
    let mut out = String::new();
    for l in &view.lines {
        let msg: String = l.message.escape_debug().collect();
        let _ = writeln!(out, "{} {:<6} {msg}", l.at, l.level);
    }
    out
}

/// `kind ExceptionType at stage [backend operation connector_kind]`.
pub fn error_summary(e: &ErrorObjectView) -> String {
    let mut s = format!("{} {}", e.kind, e.exception_type);
    if let Some(stage) = &e.stage {
        let _ = write!(s, " at {stage}");
    }
    let connector: Vec<&str> = [&e.backend, &e.operation, &e.connector_kind]
        .into_iter()
        .filter_map(|v| v.as_deref())
        .collect();
    if !connector.is_empty() {
        let _ = write!(s, " [{}]", connector.join(" "));
    }
    s
}

/// A result value for humans: strings raw, everything else pretty JSON.
pub fn result_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => serde_json::to_string_pretty(other).unwrap_or_else(|_| other.to_string()),
    }
}

/// `2026-08-10T12:00:00.123456+00:00` → `2026-08-10 12:00:00Z` (tables only).
fn short_time(iso: &str) -> String {
    let base = iso.split(['.', '+']).next().unwrap_or(iso);
    format!("{}Z", base.replacen('T', " ", 1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use uuid::Uuid;

    #[test]
    fn steps_are_a_table_in_first_save_order() {
        use crate::steps::{StepView, StepsView};
        let step = |key: &str, bytes: u64, attempt: u32, value: Option<Value>| StepView {
            key: key.into(),
            bytes,
            saved_at: "2026-08-10T12:00:01.000000+00:00".into(),
            attempt,
            attempt_id: Uuid::nil(),
            value,
        };
        let mut view = StepsView {
            execution_id: Uuid::nil(),
            items: vec![
                step("model-0", 17, 1, None),
                step("tool\u{1b}0", 7, 2, None),
            ],
            total_bytes: 24,
            steps_kept: true,
            values_omitted: 0,
        };
        let nil = Uuid::nil();
        assert_eq!(
            steps_table(&view),
            format!(
                "steps: 2 (24 bytes)\n\
                 \x20 KEY          BYTES  SAVED_AT                          ATTEMPT\n\
                 \x20 model-0      17     2026-08-10T12:00:01.000000+00:00  #1 {nil}\n\
                 \x20 tool\\u{{1b}}0  7      2026-08-10T12:00:01.000000+00:00  #2 {nil}\n"
            )
        );
        view.items[0].value = Some(serde_json::json!({"reply": "a\nb"}));
        view.values_omitted = 1;
        let text = steps_table(&view);
        assert!(
            text.contains("    = {\\\"reply\\\":\\\"a\\\\nb\\\"}\n"),
            "{text}"
        );
        assert!(text.contains("(1 values not shown"), "{text}");
        view.steps_kept = false;
        assert_eq!(steps_table(&view), "");
        view.steps_kept = true;
        view.items.clear();
        view.total_bytes = 0;
        assert_eq!(steps_table(&view), "steps: 0 (0 bytes)\n");
    }

    fn view(status: &str, finished: Option<&str>) -> ExecutionView {
        ExecutionView {
            id: Uuid::nil(),
            namespace: "ns".into(),
            task_name: "run_agent".into(),
            status: status.into(),
            terminal: finished.is_some(),
            attempts: 2,
            metadata: serde_json::Map::new(),
            version: 4,
            created_at: "2026-08-10T12:00:00.123456+00:00".into(),
            available_at: "2026-08-10T12:00:00.123456+00:00".into(),
            started_at: None,
            finished_at: finished.map(str::to_owned),
            cancel_requested_at: None,
            expires_at: None,
            error: Some(ErrorObjectView {
                kind: "error".into(),
                exception_type: "HandlerError".into(),
                stage: Some("handler".into()),
                backend: None,
                operation: None,
                connector_kind: None,
            }),
            priority: 3,
            fairness_key: "tenant-1".into(),
            progress: None,
            last_attempt: Some(crate::attempts::LastAttemptView {
                attempt: 2,
                status: "failed".into(),
                message: Some("chat completions answered 500".into()),
                progress: None,
                finished_at: finished.map(str::to_owned),
            }),
            cancel_reason: Some("duplicate\nrequest".into()),
        }
    }

    #[test]
    fn table_aligns_columns() {
        let t = execution_table(&[
            view("queued", None),
            view("succeeded", Some("2026-08-10T12:00:05+00:00")),
        ]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("ID                                    TASK       STATUS"));
        assert!(lines[1].ends_with("2026-08-10 12:00:00Z"), "{}", lines[1]);
        assert!(lines[2].ends_with("2026-08-10 12:00:00Z  2026-08-10 12:00:05Z"));
        let status_col = lines[0].find("STATUS").unwrap();
        assert_eq!(&lines[2][status_col..status_col + 9], "succeeded");
        let pri_col = lines[0].find("PRI").unwrap();
        assert_eq!(&lines[1][pri_col..pri_col + 3], "3  ");
    }

    #[test]
    fn detail_and_result() {
        let d = execution_detail(&view("failed", Some("2026-08-10T12:00:05+00:00")));
        assert!(
            d.contains("status:               failed (terminal)\n"),
            "{d}"
        );
        assert!(d.contains("error:                error HandlerError at handler\n"));
        assert!(
            d.contains("priority:             3\nfairness_key:         tenant-1\n"),
            "{d}"
        );
        assert!(!d.contains("started_at"));
        // The caller's view: the newest attempt's own message, the cancel reason (control
        // characters shown escaped, never written raw).
        assert!(
            d.contains("last_attempt:         #2 failed\nlast_message:         chat completions answered 500\n"),
            "{d}"
        );
        assert!(
            d.contains("cancel_reason:        duplicate\\nrequest\n"),
            "{d}"
        );
        assert_eq!(result_text(&Value::String("hi".into())), "hi");
        let mut bidi = view("queued", None);
        bidi.task_name = "invoice\u{202e}gpj.exe".into();
        let d = execution_detail(&bidi);
        assert!(
            d.contains("task_name:            invoice\\u{202e}gpj.exe\n"),
            "{d}"
        );
        let t = execution_table(&[bidi]);
        assert!(
            t.contains("invoice\\u{202e}gpj.exe") && !t.contains('\u{202e}'),
            "{t}"
        );
        assert_eq!(
            result_text(&serde_json::json!({"a": 1})),
            "{\n  \"a\": 1\n}"
        );
    }

    #[test]
    fn key_table_escapes_tenant_text_and_says_when_cut() {
        let view = crate::keys::KeysView {
            namespace: "ns".into(),
            items: vec![crate::keys::KeyLoadView {
                task_name: "llm".into(),
                fairness_key: "t\u{202e}1".into(),
                waiting: 12,
                running: 2,
            }],
            truncated: true,
        };
        let t = key_table(&view);
        let mut lines = t.lines();
        assert_eq!(lines.next(), Some("TASK  FAIRNESS_KEY  WAITING  RUNNING"));
        let row = lines.next().unwrap_or_default();
        assert!(!row.contains('\u{202e}'), "{row}");
        assert!(
            row.starts_with("llm") && row.ends_with("12       2"),
            "{row:?}"
        );
        assert_eq!(lines.next(), Some("(more keys have work; raise --limit)"));
    }
}
