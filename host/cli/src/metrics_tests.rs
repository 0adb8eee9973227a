//! Tests of the worker metrics (`metrics.rs`): names, health, and label escaping.

use super::*;
use onestep_core::{BackendError, ConnectorKind, ExecutionError};
use onestep_worker::{AttemptEnd, HeartbeatOutcome, WorkerObserver};

fn metrics() -> Metrics {
    Metrics::new(
        "demo",
        [("echo".to_owned(), Duration::from_secs(90))],
        CancellationToken::new(),
    )
}

fn end(status: Option<ExecutionStatus>, failure: Option<(&str, &str)>) -> AttemptEnd {
    AttemptEnd {
        status,
        duration: Duration::from_millis(30),
        failure: failure.map(|(k, e)| (k.to_owned(), e.to_owned())),
        lease_lost: status.is_none(),
    }
}

#[test]
fn observed_work_is_rendered_under_the_reference_names() {
    let m = metrics();
    m.claimed("echo", 4, Duration::from_millis(2));
    for _ in 0..4 {
        m.attempt_started("echo", Duration::from_millis(100));
    }
    m.attempt_finished("echo", &end(Some(ExecutionStatus::Succeeded), None));
    m.attempt_finished(
        "echo",
        &end(
            Some(ExecutionStatus::Retrying),
            Some(("timeout", "TimeoutError")),
        ),
    );
    m.attempt_finished(
        "echo",
        &end(
            Some(ExecutionStatus::Failed),
            Some(("error", "HandlerError")),
        ),
    );
    m.heartbeat("echo", HeartbeatOutcome::Renewed);
    m.store_error(
        "echo",
        &ExecutionError::Backend(BackendError {
            backend: "mysql",
            operation: "heartbeat",
            kind: ConnectorKind::Disconnected,
            message: "gone".into(),
        }),
    );
    let text = m.render();
    for line in [
        r#"onestep_deliveries_fetched_total{app="demo",task="echo"} 4"#,
        r#"onestep_tasks_processed_total{app="demo",task="echo",status="succeeded"} 1"#,
        r#"onestep_tasks_processed_total{app="demo",task="echo",status="failed"} 1"#,
        r#"onestep_tasks_retried_total{app="demo",task="echo"} 1"#,
        r#"onestep_task_failures_total{app="demo",task="echo",failure_kind="timeout",exception_type="TimeoutError"} 1"#,
        r#"onestep_inflight_tasks{app="demo",task="echo"} 1"#,
        r#"onestep_task_duration_seconds_count{app="demo",task="echo"} 3"#,
        r#"onestep_task_duration_seconds_bucket{le="0.05",app="demo",task="echo"} 3"#,
        r#"onestep_queue_wait_seconds_count{app="demo",task="echo"} 4"#,
        r#"onestep_heartbeats_total{app="demo",task="echo",result="renewed"} 1"#,
        r#"onestep_db_errors_total{app="demo",operation="heartbeat",class="disconnected"} 1"#,
        "# TYPE onestep_build_info gauge",
        "# EOF",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
}

#[test]
fn health_degrades_while_draining_and_when_the_store_is_silent() {
    let stopping = CancellationToken::new();
    let m = Metrics::new(
        "demo",
        [("echo".to_owned(), Duration::from_millis(50))],
        stopping.clone(),
    );
    let (ok, doc) = m.health();
    assert!(ok, "{doc}");
    assert_eq!(doc["status"], "ok");
    assert_eq!(doc["tasks"][0]["task"], "echo");
    assert_eq!(doc["tasks"][0]["source"]["alive"], true);
    std::thread::sleep(Duration::from_millis(80));
    let (ok, doc) = m.health();
    assert!(!ok, "silent for longer than a lease: {doc}");
    assert_eq!(doc["tasks"][0]["source"]["alive"], false);
    m.claimed("echo", 0, Duration::ZERO);
    assert!(m.health().0, "the store answered again");
    stopping.cancel();
    let (ok, doc) = m.health();
    assert!(!ok);
    assert_eq!(doc["stopping"], true);
    assert_eq!(doc["status"], "degraded");
}

/// Task names are free text in the worker's config (and in tables shared with the reference):
/// every label is written escaped, so the scrape parses (with a strict OpenMetrics parser) and
/// no name forges a sample (docs/observability.md#label-escaping).
#[test]
fn hostile_task_names_are_escaped_and_parse_back_exactly() {
    let hostile = [
        "x\",app=\"other\",task=\"y\"} 999999\nonestep_inflight_tasks{app=\"other",
        "back\\slash\\",
        "brace}{",
        "new\nline",
    ];
    let m = Metrics::new(
        "demo\"app",
        hostile
            .iter()
            .map(|t| ((*t).to_owned(), Duration::from_secs(90))),
        CancellationToken::new(),
    );
    for t in hostile {
        m.claimed(t, 1, Duration::from_millis(2));
        m.attempt_started(t, Duration::from_millis(5));
        m.attempt_finished(
            t,
            &end(
                Some(ExecutionStatus::Failed),
                Some(("error", "Bad\"Type\n")),
            ),
        );
    }
    let text = m.render();
    let parsed = openmetrics_parser::openmetrics::parse_openmetrics(&text)
        .unwrap_or_else(|e| panic!("{e:?} in:\n{text}"));
    let family = &parsed.families["onestep_task_failures"];
    let mut seen: Vec<(String, String, String)> = family
        .iter_samples()
        .map(|s| {
            let l = s.get_labelset().expect("labels");
            let get = |n: &str| l.get_label_value(n).unwrap_or_default().to_owned();
            (get("app"), get("task"), get("exception_type"))
        })
        .collect();
    seen.sort();
    let mut want: Vec<(String, String, String)> = hostile
        .iter()
        .map(|t| {
            (
                "demo\"app".to_owned(),
                (*t).to_owned(),
                "Bad\"Type\n".to_owned(),
            )
        })
        .collect();
    want.sort();
    assert_eq!(seen, want, "{text}");
    assert!(
        parsed.families["onestep_inflight_tasks"]
            .iter_samples()
            .all(|s| s.get_labelset().expect("labels").get_label_value("app") == Some("demo\"app")),
        "no forged app label:\n{text}"
    );
}

#[test]
fn durable_step_calls_are_counted_by_result() {
    let m = metrics();
    let report = |steps: onestep_wasm::StepCounts| Report {
        outcome: onestep_wasm::Outcome::Succeeded("null".into()),
        stdout: String::new(),
        stderr: String::new(),
        output_dropped_bytes: 0,
        log: onestep_wasm::LogTotals::default(),
        http: onestep_wasm::HttpTotals::default(),
        rate_limits: Vec::new(),
        steps,
        wakes: 0,
        fuel_consumed: None,
        peak_memory_bytes: 65_536,
        elapsed: Duration::from_millis(5),
    };
    m.record_wasm(
        "echo",
        &report(onestep_wasm::StepCounts {
            saved: 3,
            saved_bytes: 120,
            fenced: 1,
            save_refused: 2,
            loaded: 5,
            missed: 4,
            load_errors: 1,
            ..Default::default()
        }),
    );
    m.record_wasm(
        "echo",
        &report(onestep_wasm::StepCounts {
            saved: 1,
            saved_bytes: 10,
            ..Default::default()
        }),
    );
    // A component that made no step call adds no series.
    m.record_wasm("echo", &report(onestep_wasm::StepCounts::default()));
    let text = m.render();
    for line in [
        r#"onestep_step_saves_total{app="demo",task="echo",result="saved"} 4"#,
        r#"onestep_step_saves_total{app="demo",task="echo",result="fenced"} 1"#,
        r#"onestep_step_saves_total{app="demo",task="echo",result="refused"} 2"#,
        r#"onestep_step_loads_total{app="demo",task="echo",result="hit"} 5"#,
        r#"onestep_step_loads_total{app="demo",task="echo",result="miss"} 4"#,
        r#"onestep_step_loads_total{app="demo",task="echo",result="error"} 1"#,
        r#"onestep_step_saved_bytes_total{app="demo",task="echo"} 130"#,
        "# TYPE onestep_step_saves counter",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    assert!(!text.contains(r#"result="error"} 0"#), "{text}");
    assert!(!text.contains(r#"onestep_step_saves_total{app="demo",task="echo",result="error"}"#));
}
