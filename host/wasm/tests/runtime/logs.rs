//! What a guest can do to the host's logs: forged lines (escaped, attributed
//! to the guest's own execution) and floods of tiny writes (bounded work and
//! bounded events), through the real runtime and `tracing-subscriber`'s text
//! and JSON formatters.

use crate::common::*;
use onestep_wasm::{CancelHandle, Outcome, SandboxSettings};
use std::time::{Duration, Instant};
use tracing_subscriber::EnvFilter;

/// Runs one invocation of `misbehave` with `payload` while a text or JSON
/// subscriber (this crate's events down to TRACE, no ANSI, as the CLI writes
/// to a file) records this thread's events; returns the report, the
/// execution id and the log text.
async fn run_logged(
    json: bool,
    payload: &str,
    sandbox: &SandboxSettings,
) -> (onestep_wasm::Report, String, String) {
    let m = load("misbehave");
    let buf = Buf::default();
    let builder = tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::new("onestep_wasm=trace"))
        .with_writer(buf.clone())
        .with_ansi(false);
    let ctx = ctx(1);
    let exec = ctx.execution_id.clone();
    let report = {
        // The test runtime is single-threaded: the guest runs on this thread.
        let _sub = if json {
            tracing::subscriber::set_default(builder.json().finish())
        } else {
            tracing::subscriber::set_default(builder.finish())
        };
        m.invoke_report(sandbox, ctx, payload, CancelHandle::new(), None)
            .await
    };
    (report, exec, buf.text())
}

#[tokio::test]
async fn forged_log_lines_stay_on_the_guests_own_lines() {
    let _g = shared();
    let sandbox = SandboxSettings::default();
    let payload = r#"{"mode":"log-injection"}"#;

    let (report, exec, log) = run_logged(false, payload, &sandbox).await;
    assert!(
        matches!(report.outcome, Outcome::HandlerError { .. }),
        "{:?}",
        report.outcome
    );
    let lines: Vec<&str> = log.lines().collect();
    // log + progress + 2 stdout lines + 2 stderr lines + the outcome.
    assert_eq!(lines.len(), 7, "{log}");
    for line in &lines {
        assert!(
            !line.starts_with("2026-01-01T00:00:00"),
            "a guest started a line: {line:?}"
        );
        assert!(
            line.contains(&format!("execution_id={exec} ")),
            "not attributed to the guest's execution: {line:?}"
        );
        assert!(
            !line.contains('\u{1b}') && !line.contains('\r'),
            "control character in {line:?}"
        );
    }
    let forged = lines
        .iter()
        .filter(|l| l.contains("execution_id=victim-execution"))
        .count();
    assert_eq!(
        forged,
        7 - 2,
        "the forged text, inside the guest's lines: {log}"
    );
    assert!(log.contains("\\u{1b}[31mforged"), "{log}");

    let (_, exec, log) = run_logged(true, payload, &sandbox).await;
    let events: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}")))
        .collect();
    assert_eq!(events.len(), 7, "{log}");
    for event in &events {
        assert!(event.is_object(), "{event}");
        assert_eq!(event["fields"]["execution_id"], exec.as_str(), "{event}");
    }
    let log_event = events
        .iter()
        .find(|e| e["fields"]["task"].is_string())
        .expect("the guest's log event");
    let message = log_event["fields"]["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("ok\\n2026-01-01T00:00:00"),
        "{message:?}"
    );
    assert!(message.ends_with("\\u{1b}[0m\\r\\n"), "{message:?}");
}

#[tokio::test]
async fn one_byte_writes_cost_bounded_work_and_events() {
    const WRITES: u64 = 500_000;
    let _g = exclusive();
    let sandbox = SandboxSettings::default();
    let limit = sandbox.output_limit_bytes;
    let payload = format!(r#"{{"mode":"byte-writes","n":{WRITES}}}"#);
    let started = Instant::now();
    let (report, _, log) = run_logged(true, &payload, &sandbox).await;
    let elapsed = started.elapsed();
    eprintln!("{WRITES} one-byte writes: {elapsed:?}");
    assert_eq!(
        report.outcome,
        Outcome::Succeeded(format!(r#"{{"written":{WRITES}}}"#))
    );
    assert_eq!(report.stdout.len() as u64, limit);
    assert_eq!(report.output_dropped_bytes, WRITES - limit);
    assert_eq!(report.log.dropped_lines, 0);
    assert_eq!(
        report.log.truncated, 1,
        "the line is cut at max_log_message_bytes"
    );
    // The one unterminated line (cut) and the end line with the totals.
    assert_eq!(log.lines().count(), 2, "{log}");
    let end: serde_json::Value =
        serde_json::from_str(log.lines().last().unwrap_or_default()).expect("JSON");
    assert_eq!(
        end["fields"]["output_dropped_bytes"],
        WRITES - limit,
        "{end}"
    );
    assert_eq!(
        end["level"], "INFO",
        "a success that lost output is INFO: {end}"
    );
    // The exact work bound is a unit test of the capture; this only catches
    // a return of the rescan (which made this take minutes, not seconds).
    assert!(elapsed < Duration::from_secs(60), "{elapsed:?}");
}

#[tokio::test]
async fn output_lines_draw_on_the_attempts_line_budget() {
    let _g = shared();
    // 5000 lines of 100 bytes, all within the capture limit, far over the line cap.
    let sandbox = SandboxSettings {
        output_limit_bytes: 1 << 20,
        max_log_lines: 1000,
        ..SandboxSettings::default()
    };
    let (report, _, log) = run_logged(true, r#"{"mode":"print","lines":5000}"#, &sandbox).await;
    assert!(report.outcome.is_success(), "{:?}", report.outcome);
    let kept = report.stdout.matches('\n').count() as u64;
    assert_eq!(kept, 5000, "the captured text is complete");
    assert_eq!(report.output_dropped_bytes, 0);
    assert_eq!(report.log.lines, 1000);
    assert_eq!(report.log.dropped_lines, kept - 1000);
    let events: Vec<serde_json::Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    // 1000 lines, one warning at the first dropped line, the end line.
    assert_eq!(events.len(), 1000 + 2, "{} events", events.len());
    let warning = &events[1000]["fields"]["message"];
    assert!(
        warning
            .as_str()
            .is_some_and(|m| m.contains("max_log_lines is reached")),
        "{warning}"
    );
    let end = &events[1001]["fields"];
    assert_eq!(end["message"], "handler succeeded", "{end}");
    assert_eq!(end["log_dropped_lines"], kept - 1000, "{end}");
    assert_eq!(end["log_lines"], 1000, "{end}");
}

/// Bytes of the log lines carrying guest text (target `onestep_wasm::guest`).
fn guest_bytes(log: &str) -> usize {
    log.lines()
        .filter(|l| l.contains("\"target\":\"onestep_wasm::guest\""))
        .map(|l| l.len() + 1)
        .sum()
}

#[tokio::test]
async fn log_progress_output_and_the_error_message_share_one_budget() {
    let _g = shared();
    let budget = 64 * 1024;
    let sandbox = SandboxSettings {
        log_limit_bytes: budget,
        ..SandboxSettings::default()
    };
    // 100,000 lines of 100 bytes through each of log, progress, stdout and
    // stderr, then a 10 MiB error message.
    let (report, exec, log) = run_logged(true, r#"{"mode":"log-flood"}"#, &sandbox).await;
    let Outcome::HandlerError { message, .. } = &report.outcome else {
        panic!("{:?}", report.outcome);
    };
    // The message the host keeps is cut to what was left (at least 256 bytes).
    assert!(message.len() < 1024, "{}", message.len());
    assert!(message.ends_with("[truncated]"), "{message}");
    let t = report.log;
    // Over the budget by at most the error message's floor and its line.
    assert!(t.bytes <= budget + 256 + 1024, "{t:?}");
    // All but a few hundred of the 200,000 log and progress lines (stdout and
    // stderr keep only their first 64 KiB each, so fewer of their lines exist).
    assert!(t.dropped_lines > 199_000, "{t:?}");
    // What reached the log: bounded by the budget (plus the per-line fields
    // the host adds, which the per-line overhead accounts for).
    let written = guest_bytes(&log);
    eprintln!(
        "log-flood: {} guest lines logged ({} bytes charged), {} dropped; {written} bytes of guest log lines; {} bytes of log in all",
        t.lines,
        t.bytes,
        t.dropped_lines,
        log.len()
    );
    assert!(written as u64 <= 3 * budget, "{written}");
    assert!(log.len() < 256 * 1024, "{}", log.len());
    // The error message appears once, on the end line, with the totals.
    let end: serde_json::Value =
        serde_json::from_str(log.lines().last().unwrap_or_default()).expect("JSON end line");
    assert_eq!(end["fields"]["message"], "handler error", "{end}");
    assert_eq!(end["fields"]["execution_id"], exec.as_str(), "{end}");
    assert_eq!(end["fields"]["log_dropped_lines"], t.dropped_lines, "{end}");
    let with_message = log.lines().filter(|l| l.contains(&"e".repeat(200))).count();
    assert_eq!(with_message, 1, "the message is logged once");
}

#[tokio::test]
async fn the_tasks_log_rate_is_shared_by_its_attempts() {
    let _g = shared();
    let m = load("misbehave");
    // Each attempt may log 1 MiB; the task 200 KiB per minute.
    let per_minute = 200 * 1024;
    let sandbox = SandboxSettings {
        log_rate_bytes_per_minute: per_minute,
        ..SandboxSettings::default()
    };
    // 1000 lines of 100 bytes per attempt: 356,000 bytes charged if all were logged.
    let payload = r#"{"mode":"log-flood","n":1000,"via":["log"],"error_bytes":0}"#;
    let buf = Buf::default();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::new("onestep_wasm=info"))
        .with_writer(buf.clone())
        .json()
        .finish();
    let _sub = tracing::subscriber::set_default(subscriber);
    let mut totals = Vec::new();
    for i in 0..4 {
        let report = m
            .invoke_report(&sandbox, ctx(i), payload, CancelHandle::new(), None)
            .await;
        assert!(report.outcome.is_success(), "{:?}", report.outcome);
        totals.push(report.log);
    }
    let charged: u64 = totals.iter().map(|t| t.bytes).sum();
    let limited: u64 = totals.iter().map(|t| t.rate_limited_lines).sum();
    eprintln!(
        "log rate {per_minute} B/min: 4 attempts charged {charged} bytes, {limited} lines rate-limited: {totals:?}"
    );
    // The first attempt spends the minute's burst; the others get only what
    // refills while they run (a few hundred bytes per second).
    assert!(totals[0].rate_limited_lines > 0, "{totals:?}");
    assert!(totals[1..].iter().all(|t| t.lines < 100), "{totals:?}");
    assert!(charged <= per_minute + 64 * 1024, "{charged}");
    assert_eq!(limited, totals.iter().map(|t| t.dropped_lines).sum::<u64>());
    // A new handler (another task) has its own rate.
    let other = load("misbehave");
    let report = other
        .invoke_report(&sandbox, ctx(9), payload, CancelHandle::new(), None)
        .await;
    // A new handler (another task) has its own, full bucket: a minute's worth, as the first.
    assert!(
        report.log.lines + 5 >= totals[0].lines,
        "{:?} vs {:?}",
        report.log,
        totals[0]
    );
}

/// docs/security.md#logs: the bytes the guest lines of one attempt write are
/// at most `log_limit_bytes` in the JSON format, with the ids and the
/// worker's `delivery` span (as `onestep-worker` opens it) on every line;
/// the one "guest log limit reached" warning comes on top. Tiny lines are
/// the worst case (the line's fields outweigh its text), and a long task
/// name repeats on every line.
#[tokio::test]
async fn tiny_json_lines_write_at_most_the_attempts_log_limit() {
    use tracing::Instrument as _;
    let _g = shared();
    let budget: u64 = 64 * 1024;
    let sandbox = SandboxSettings {
        log_limit_bytes: budget,
        max_log_lines: 1_000_000,
        ..SandboxSettings::default()
    };
    let m = load("misbehave");
    let payload = r#"{"mode":"log-flood","n":20000,"size":1,"via":["log","progress","stdout"],"error_bytes":0}"#;
    let buf = Buf::default();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(EnvFilter::new("onestep_wasm=trace,delivery=info"))
        .with_writer(buf.clone())
        .with_ansi(false)
        .json()
        .finish();
    let mut ctx = ctx(1);
    ctx.task_name = format!("billing.{}", "x".repeat(100));
    let report = {
        let _sub = tracing::subscriber::set_default(subscriber);
        // The worker's span around an attempt (onestep-worker's delivery.rs).
        let span = tracing::info_span!(
            target: "delivery",
            "delivery",
            task = %ctx.task_name,
            execution_id = %ctx.execution_id,
            attempt_id = %ctx.attempt_id,
            attempt_no = u64::from(ctx.attempt),
        );
        m.invoke_report(&sandbox, ctx, payload, CancelHandle::new(), None)
            .instrument(span)
            .await
    };
    assert!(report.outcome.is_success(), "{:?}", report.outcome);
    let log = buf.text();
    let warnings = log
        .lines()
        .filter(|l| l.contains("guest log limit reached"))
        .collect::<Vec<_>>();
    assert_eq!(warnings.len(), 1, "{log}");
    assert!(
        log.contains("\"spans\":[{"),
        "the delivery span is on the lines: {log}"
    );
    let written = guest_bytes(&log) as u64;
    let lines = log
        .lines()
        .filter(|l| l.contains("\"target\":\"onestep_wasm::guest\""))
        .count();
    let t = report.log;
    eprintln!(
        "tiny JSON lines: {} guest lines logged, {} dropped; {} bytes charged, {written} bytes \
         written in {lines} lines (the warning included: {} bytes); log_limit_bytes {budget}",
        t.lines,
        t.dropped_lines,
        t.bytes,
        warnings[0].len() + 1
    );
    assert!(t.dropped_lines > 0, "{t:?}");
    let without_warning = written - (warnings[0].len() as u64 + 1);
    assert!(
        without_warning <= budget,
        "guest lines wrote {without_warning} bytes, more than log_limit_bytes {budget}"
    );
    assert!(t.bytes <= budget, "{t:?}");
}
