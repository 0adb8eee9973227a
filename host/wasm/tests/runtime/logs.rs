//! What a guest can do to the host's logs: forged lines (escaped, attributed
//! to the guest's own execution) and floods of tiny writes (bounded work and
//! bounded events), through the real runtime and `tracing-subscriber`'s text
//! and JSON formatters.

use crate::common::*;
use onestep_wasm::{CancelHandle, Outcome, SandboxSettings};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

/// Formatter output, shared with the test.
#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Buf {
    type Writer = Buf;
    fn make_writer(&'a self) -> Buf {
        self.clone()
    }
}

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
    let bytes = buf.0.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let log = String::from_utf8(bytes).expect("log is UTF-8");
    (report, exec, log)
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
    let limit = sandbox.stdout_limit_bytes;
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
    assert_eq!(report.output_dropped_lines, 0);
    // The one unterminated line, the limit warning, the summary, the outcome.
    assert_eq!(log.lines().count(), 4, "{log}");
    // The exact work bound is a unit test of the capture; this only catches
    // a return of the rescan (which made this take minutes, not seconds).
    assert!(elapsed < Duration::from_secs(60), "{elapsed:?}");
}

#[tokio::test]
async fn newline_floods_are_capped_per_stream() {
    let _g = shared();
    // 5000 lines of 100 bytes, all within the byte limit, far over the cap.
    let sandbox = SandboxSettings {
        stdout_limit_bytes: 1 << 20,
        ..SandboxSettings::default()
    };
    let (report, _, log) = run_logged(true, r#"{"mode":"print","lines":5000}"#, &sandbox).await;
    assert!(report.outcome.is_success(), "{:?}", report.outcome);
    let kept = report.stdout.matches('\n').count() as u64;
    assert_eq!(kept, 5000);
    assert_eq!(report.output_dropped_bytes, 0);
    assert_eq!(report.output_dropped_lines, kept - 1000);
    let events = log.lines().count();
    // 1000 lines, the summary, the outcome.
    assert_eq!(events, 1000 + 2, "{events} events");
    let summary: serde_json::Value = serde_json::from_str(
        log.lines()
            .find(|l| l.contains("not logged in full"))
            .expect("summary"),
    )
    .expect("JSON");
    assert_eq!(summary["fields"]["dropped_lines"], kept - 1000);
    assert_eq!(summary["fields"]["lines_logged"], 1000);
}
