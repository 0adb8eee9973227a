//! Build-time checks that apply with and without `--strict` (docs/configuration.md#checks-in-both-modes, docs/semantics.md#worker-settings, docs/semantics.md#retry-policies).

use std::time::Duration;

use onestep_core::retry::{Jitter, RetryPolicy};

use crate::common::{BASE, err, load_text};

fn source_doc(fields: &str) -> String {
    format!(
        "app:\n  name: demo\nresources:\n  db:\n    type: mysql\n    dsn: mysql://x\n  jobs:\n    type: mysql_execution_source\n    connector: db\n{fields}"
    )
}

const NS: &str = "    namespace: ns\n    task_names: [echo]\n";

fn task_doc(fields: &str) -> String {
    format!(
        "{}tasks:\n  - name: echo\n    source: jobs\n    handler: {{component: echo.wasm}}\n{fields}",
        source_doc(NS)
    )
}

/// Checks each case in both modes (strict only where `both` is true) against the exact message.
fn check(cases: &[(String, &str)], both: bool) {
    let mut failures = Vec::new();
    for (yaml, expected) in cases {
        let modes: &[bool] = if both { &[false, true] } else { &[false] };
        for strict in modes {
            let got = err(yaml, *strict);
            if got != *expected {
                failures.push(format!(
                    "--- strict={strict} yaml:\n{yaml}\n    expected: {expected}\n    got:      {got}"
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} mismatches:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn required_strings_and_references() {
    check(
        &[
            (
                "app: {name: x}\nresources:\n  db: {type: mysql}\n".into(),
                "resources.db: 'dsn' must be a non-empty string (line 3, column 7)",
            ),
            (
                source_doc("    task_names: [echo]\n"),
                "resources.jobs: 'namespace' must be a non-empty string (line 8, column 5)",
            ),
            (
                "app: {name: x}\nresources:\n  jobs: {type: mysql_execution_source, namespace: n, task_names: [a]}\n".into(),
                "resources.jobs: 'connector' must be a non-empty string (line 3, column 9)",
            ),
            (
                "app: {name: x}\nresources:\n  jobs: {type: mysql_execution_source, connector: nope, namespace: n, task_names: [a]}\n".into(),
                "resources.jobs: unknown resource 'nope' (line 3, column 51)",
            ),
            (
                "app: {name: x}\nresources:\n  a: {type: mysql_execution_source, connector: b, namespace: n, task_names: [a]}\n  b: {type: mysql_execution_source, connector: a, namespace: n, task_names: [b]}\n".into(),
                "resources.a: resource 'b' must be a MySQLConnector (line 3, column 48)",
            ),
            (
                "app: {name: x}\nresources:\n  pgjobs: {type: postgres-execution-source, connector: db, namespace: n, task_names: [a]}\n  db: {type: mysql, dsn: x}\n".into(),
                "resources.pgjobs: resource 'db' must be a PostgresConnector (it is a MySQLConnector, which a postgres_execution_source cannot use) (line 3, column 56)",
            ),
            (
                "app: {name: x}\nresources:\n  jobs: {type: mysql_execution_source, connector: pg, namespace: n, task_names: [a]}\n  pg: {type: postgres, dsn: x}\n".into(),
                "resources.jobs: resource 'pg' must be a MySQLConnector (it is a PostgresConnector, which a mysql_execution_source cannot use) (line 3, column 51)",
            ),
            (
                format!("{BASE}  - name: other\n    source: db\n    handler: {{component: other.wasm}}\n"),
                "tasks[1]: resource 'db' cannot be used as a source (line 17, column 13)",
            ),
            (
                format!("{BASE}  - name: other\n    source: ghost\n    handler: {{component: other.wasm}}\n"),
                "tasks[1]: unknown resource 'ghost' (line 17, column 13)",
            ),
            (
                "app: {name: x}\ntasks:\n  - handler: {component: a.wasm}\n".into(),
                "tasks[0]: 'source' must be a non-empty string (line 3, column 5)",
            ),
            (
                BASE.replace("name: echo\n    source", "name: other\n    source"),
                "tasks[0]: mysql.execution:ns is configured for task 'echo', not 'other' (line 14, column 13)",
            ),
            (
                format!("{BASE}  - name: echo\n    source: jobs\n    handler: {{component: echo.wasm}}\n"),
                "tasks[1]: duplicate task name 'echo' (line 16, column 11)",
            ),
        ],
        true,
    );
}

#[test]
fn source_option_rules_without_prefix() {
    check(
        &[
            (
                source_doc("    namespace: '  '\n    task_names: [echo]\n"),
                "resources.jobs: 'namespace' must be a non-empty string (line 8, column 5)",
            ),
            (
                source_doc(&format!(
                    "    namespace: '{}'\n    task_names: [echo]\n",
                    "n".repeat(256)
                )),
                "resources.jobs: namespace must be non-empty and <= 255 characters (line 10, column 16)",
            ),
            (
                source_doc("    namespace: ns\n    task_names: echo\n"),
                "resources.jobs: task_names must be a sequence of strings (line 11, column 17)",
            ),
            (
                source_doc("    namespace: ns\n    task_names: ['']\n"),
                "resources.jobs: task_names must be non-empty strings <= 255 characters (line 11, column 18)",
            ),
            (
                source_doc("    namespace: ns\n    task_names: [a, b]\n"),
                "resources.jobs: task_names must contain exactly one task name (line 11, column 17)",
            ),
            (
                source_doc(&format!("{NS}    batch_size: 2.5\n")),
                "resources.jobs: batch_size must be >= 1 (line 12, column 17)",
            ),
            (
                source_doc(&format!("{NS}    poll_interval_s: fast\n")),
                "resources.jobs: poll_interval_s must be a finite number (line 12, column 22)",
            ),
            (
                source_doc(&format!("{NS}    lease_duration_s: .inf\n")),
                "resources.jobs: lease_duration_s must be a finite number (line 12, column 23)",
            ),
            (
                source_doc(&format!("{NS}    poll_interval_s: -0.5\n")),
                "resources.jobs: poll_interval_s must be > 0 (line 12, column 22)",
            ),
            (
                source_doc(&format!("{NS}    lease_duration_s: 0\n")),
                "resources.jobs: lease_duration_s must be > 0 (line 12, column 23)",
            ),
            (
                source_doc(&format!("{NS}    heartbeat_interval_s: 0\n")),
                "resources.jobs: heartbeat_interval_s must be > 0 and <= lease_duration_s / 3 (line 12, column 27)",
            ),
            (
                source_doc(&format!(
                    "{NS}    lease_duration_s: 10\n    heartbeat_interval_s: 3.5\n"
                )),
                "resources.jobs: heartbeat_interval_s must be > 0 and <= lease_duration_s / 3 (line 13, column 27)",
            ),
            (
                source_doc(&format!("{NS}    cancel_poll_interval_s: 0\n")),
                "resources.jobs: cancel_poll_interval_s must be > 0 and <= heartbeat_interval_s (line 12, column 29)",
            ),
            (
                source_doc(&format!("{NS}    cancel_poll_interval_s: 30.5\n")),
                "resources.jobs: cancel_poll_interval_s must be > 0 and <= heartbeat_interval_s (line 12, column 29)",
            ),
            (
                source_doc(&format!(
                    "{NS}    lease_duration_s: 3\n    heartbeat_interval_s: 0.5\n    cancel_poll_interval_s: 1\n"
                )),
                "resources.jobs: cancel_poll_interval_s must be > 0 and <= heartbeat_interval_s (line 14, column 29)",
            ),
            (
                source_doc(&format!("{NS}    cancel_poll_interval_s: soon\n")),
                "resources.jobs: cancel_poll_interval_s must be a finite number (line 12, column 29)",
            ),
            (
                source_doc(&format!("{NS}    worker_id: 123\n")),
                "resources.jobs: worker_id must be non-empty and <= 255 characters (got integer 123) (line 12, column 16)",
            ),
        ],
        false,
    );
}

/// Durations become `Duration`s at load: values a `Duration` cannot hold, that round to zero,
/// or that no store accepts are load errors (so `check` reports what `run` would hit).
#[test]
fn duration_range_rules() {
    check(
        &[
            (
                source_doc(&format!("{NS}    poll_interval_s: 1.0e300\n")),
                "resources.jobs: poll_interval_s is out of range (line 12, column 22)",
            ),
            (
                source_doc(&format!("{NS}    poll_interval_s: 1.0e-12\n")),
                "resources.jobs: poll_interval_s must be > 0 (line 12, column 22)",
            ),
            (
                source_doc(&format!("{NS}    lease_duration_s: 1.0e10\n")),
                "resources.jobs: lease_duration_s is too large (line 12, column 23)",
            ),
            (
                source_doc(&format!("{NS}    lease_duration_s: 1.0e300\n")),
                "resources.jobs: lease_duration_s is too large (line 12, column 23)",
            ),
            (
                source_doc(&format!(
                    "{NS}    lease_duration_s: 3.0e-9\n    heartbeat_interval_s: 1.0e-10\n"
                )),
                "resources.jobs: heartbeat_interval_s must be > 0 and <= lease_duration_s / 3 (line 13, column 27)",
            ),
            (
                format!("{BASE}    timeout_s: 1.0e-12\n"),
                "tasks[0]: timeout_s must be > 0 (line 16, column 16)",
            ),
            (
                format!("{BASE}    timeout_s: 1.0e300\n"),
                "tasks[0]: timeout_s is out of range (line 16, column 16)",
            ),
            (
                BASE.replace(
                    "  name: demo\n",
                    "  name: demo\n  shutdown_timeout_s: 1.0e300\n",
                ),
                "app.shutdown_timeout_s is out of range (line 3, column 23)",
            ),
        ],
        false,
    );
    // Fractions and a heartbeat of exactly a third of the lease load as durations.
    let cfg = load_text(
        &BASE.replace(
            "    task_names: [echo]\n",
            "    task_names: [echo]\n    poll_interval_s: 0.25\n    lease_duration_s: 1.5\n    heartbeat_interval_s: 0.5\n",
        ),
        true,
    )
    .expect("loads");
    let s = &cfg.sources["jobs"];
    assert_eq!(s.poll_interval, Duration::from_millis(250));
    assert_eq!(s.lease_duration, Duration::from_millis(1500));
    assert_eq!(s.heartbeat_interval, Duration::from_millis(500));
    // No cancel_poll_interval_s: 1 s, or the heartbeat when that is shorter.
    assert_eq!(s.cancel_poll_interval, Duration::from_millis(500));
    let cfg = load_text(BASE, true).expect("loads");
    assert_eq!(
        cfg.sources["jobs"].cancel_poll_interval,
        Duration::from_secs(1)
    );
    let cfg = load_text(
        &BASE.replace(
            "    task_names: [echo]\n",
            "    task_names: [echo]\n    cancel_poll_interval_s: 0.25\n",
        ),
        true,
    )
    .expect("loads");
    assert_eq!(
        cfg.sources["jobs"].cancel_poll_interval,
        Duration::from_millis(250)
    );
}

/// The sources of tasks that share a connector and a table pair share one backend, so they
/// must agree on its options; sources on different tables may differ.
#[test]
fn sources_sharing_a_table_pair_must_agree() {
    let doc = |extra: &str| {
        BASE.replace(
            "tasks:\n",
            &format!(
                "  jobs2:\n    type: mysql_execution_source\n    connector: db\n    namespace: ns\n    task_names: [echo2]\n{extra}tasks:\n"
            ),
        ) + "  - name: echo2\n    source: jobs2\n    handler: {component: echo.wasm}\n"
    };
    for extra in [
        "    max_result_bytes: 1000\n",
        "    auto_create: false\n",
        "    reclaim_batch_size: 7\n",
    ] {
        for strict in [false, true] {
            assert_eq!(
                err(&doc(extra), strict),
                "resources.jobs2: sources 'jobs' and 'jobs2' share connector 'db' and tables \
                 onestep_executions/onestep_execution_attempts but set different limits, \
                 auto_create or reclaim_batch_size: give them the same values or different \
                 tables (line 13, column 5)",
                "{extra}"
            );
        }
    }
    // Same options, or other tables: fine.
    load_text(&doc(""), true).expect("same options");
    load_text(
        &doc("    max_result_bytes: 1000\n    table: other_executions\n    attempts_table: other_attempts\n"),
        true,
    )
    .expect("other tables");
}

#[test]
fn backend_option_rules() {
    check(
        &[
            (
                source_doc(&format!("{NS}    table: app.onestep_executions\n")),
                "resources.jobs: executions_table must be a non-empty SQL identifier (line 12, column 12)",
            ),
            (
                source_doc(&format!("{NS}    attempts_table: {}\n", "a".repeat(65))),
                "resources.jobs: attempts_table must be at most 64 characters (line 12, column 21)",
            ),
            (
                source_doc(&format!("{NS}    max_payload_bytes: 0\n")),
                "resources.jobs: max_payload_bytes must be a positive integer (line 12, column 24)",
            ),
            (
                source_doc(&format!("{NS}    max_result_bytes: '10'\n")),
                "resources.jobs: max_result_bytes must be a positive integer (line 12, column 23)",
            ),
            (
                source_doc(&format!("{NS}    reclaim_batch_size: -1\n")),
                "resources.jobs: reclaim_batch_size must be a positive integer (line 12, column 25)",
            ),
            // Non-boolean auto_create is rejected in both modes (docs/configuration.md#differences-from-the-reference).
            (
                source_doc(&format!("{NS}    auto_create: 'no'\n")),
                "resources.jobs: auto_create must be a boolean (line 12, column 18)",
            ),
            (
                "app: {name: x}\nresources:\n  db: {type: mysql, dsn: x, engine_options: {pool_size: 3}}\n".into(),
                "unsupported fields for resources.db.engine_options: pool_size (line 3, column 57)",
            ),
            (
                "app: {name: x}\nresources:\n  db: {type: mysql, dsn: x, engine_options: {max_connections: 0}}\n".into(),
                "resources.db.engine_options: max_connections must be an integer >= 1 (line 3, column 63)",
            ),
        ],
        false,
    );
}

#[test]
fn max_running_is_read_in_both_modes() {
    for strict in [false, true] {
        let cfg = crate::common::load_text(&task_doc("    max_running: 3\n"), strict)
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cfg.tasks[0].max_running, Some(3));
        let cfg = crate::common::load_text(&task_doc(""), strict).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cfg.tasks[0].max_running, None);
    }
}

/// `max_duration_s` (docs/steps.md#max-duration): a number > 0, at least `timeout_s`, read
/// in both modes; absent means no bound.
#[test]
fn max_duration_is_read_and_checked_in_both_modes() {
    for strict in [false, true] {
        let cfg = load_text(
            &task_doc("    timeout_s: 60\n    max_duration_s: 86400\n"),
            strict,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cfg.tasks[0].max_duration, Some(Duration::from_secs(86_400)));
        let cfg = load_text(&task_doc(""), strict).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cfg.tasks[0].max_duration, None);
    }
    check(
        &[
            (
                task_doc("    max_duration_s: 0\n"),
                "tasks[0]: max_duration_s must be > 0 (line 16, column 21)",
            ),
            (
                task_doc("    max_duration_s: -1\n"),
                "tasks[0]: max_duration_s must be > 0 (line 16, column 21)",
            ),
            (
                task_doc("    max_duration_s: soon\n"),
                "tasks[0]: max_duration_s must be > 0 (line 16, column 21)",
            ),
            (
                task_doc("    max_duration_s: 1.0e300\n"),
                "tasks[0]: max_duration_s is out of range (line 16, column 21)",
            ),
            (
                task_doc("    timeout_s: 60\n    max_duration_s: 30\n"),
                "tasks[0]: max_duration_s must be >= timeout_s (it bounds the whole execution, \
                 every attempt included) (line 17, column 21)",
            ),
        ],
        true,
    );
}

#[test]
fn task_rules() {
    check(
        &[
            (
                task_doc("    concurrency: 0\n"),
                "tasks[0]: concurrency must be >= 1 (line 16, column 18)",
            ),
            (
                task_doc("    concurrency: '2'\n"),
                "tasks[0]: concurrency must be >= 1 (line 16, column 18)",
            ),
            (
                task_doc("    max_running: 0\n"),
                "tasks[0]: max_running must be an integer >= 1 (got 0) (line 16, column 18)",
            ),
            (
                task_doc("    max_running: '3'\n"),
                "tasks[0]: max_running must be an integer >= 1 (got 3) (line 16, column 18)",
            ),
            (
                task_doc("    max_running: 1.5\n"),
                "tasks[0]: max_running must be an integer >= 1 (got 1.5) (line 16, column 18)",
            ),
            (
                task_doc("    max_running: 99999999999\n"),
                "tasks[0]: max_running must be an integer >= 1 (got 99999999999) (line 16, column 18)",
            ),
            (
                task_doc("    timeout_s: 0\n"),
                "tasks[0]: timeout_s must be > 0 (line 16, column 16)",
            ),
            (
                task_doc("    timeout_s: -3.5\n"),
                "tasks[0]: timeout_s must be > 0 (line 16, column 16)",
            ),
            (
                task_doc("    retry: {type: max_attempts, max_attempts: 0}\n"),
                "tasks[0].retry: max_attempts must be >= 1 (line 16, column 47)",
            ),
            (
                task_doc(
                    "    retry: {type: exponential_backoff, min_delay_s: 5, max_delay_s: 1}\n",
                ),
                "tasks[0].retry: max_delay_s must be >= min_delay_s (line 16, column 12)",
            ),
            (
                task_doc("    retry: {type: exponential_backoff, multiplier: 0}\n"),
                "tasks[0].retry: multiplier must be > 0 (line 16, column 12)",
            ),
            (
                task_doc("    retry: {type: exponential_backoff, jitter: random}\n"),
                "tasks[0].retry: jitter must be one of ['equal', 'full', 'none'] (line 16, column 48)",
            ),
            (
                task_doc("    retry: {type: linear}\n"),
                "tasks[0].retry: unsupported retry type 'linear' (line 16, column 19)",
            ),
            (
                task_doc("    retry: {max_attempts: 3}\n"),
                "tasks[0].retry: 'type' must be a non-empty string (line 16, column 12)",
            ),
            (
                task_doc(
                    "    retry: {type: by_failure_kind, timeout: {type: max_attempts, max_attempts: -2}}\n",
                ),
                "tasks[0].retry.timeout: max_attempts must be >= 1 (line 16, column 80)",
            ),
            (
                task_doc("    retry: {type: by_failure_kind}\n"),
                "tasks[0].retry: by_failure_kind needs at least one of default, error, timeout, cancelled (line 16, column 12)",
            ),
            (
                task_doc("    retry: 3\n"),
                "tasks[0].retry: retry must be a string or a mapping (line 16, column 12)",
            ),
            (
                task_doc("    config: [1]\n"),
                "tasks[0]: config must be a mapping (line 16, column 13)",
            ),
            (
                task_doc("    emit: [out]\n"),
                "tasks[0]: 'emit' is not supported by this build (line 16, column 11)",
            ),
            (
                "app: {name: x}\nreporter: {url: http://x}\n".into(),
                "reporter: 'reporter' is not supported by this build (line 2, column 11)",
            ),
            (
                "app: {name: x, state: store}\n".into(),
                "app.state: state stores are not supported by this build (line 1, column 23)",
            ),
        ],
        true,
    );
}

#[test]
fn app_rules() {
    check(
        &[
            (
                "app: {shutdown_timeout_s: 3}\n".into(),
                "app.name must be a non-empty string (line 1, column 6)",
            ),
            (
                "{}\n".into(),
                "name must be a non-empty string (line 1, column 1)",
            ),
            (
                "app: {name: x, shutdown_timeout_s: 0}\n".into(),
                "app.shutdown_timeout_s must be > 0 or null (line 1, column 36)",
            ),
        ],
        true,
    );
}

#[test]
fn defaults_and_values() {
    let cfg = load_text(BASE, true).expect("loads");
    assert_eq!(cfg.name, "demo");
    assert_eq!(cfg.shutdown_timeout, Some(Duration::from_secs(30)));
    let s = &cfg.sources["jobs"];
    assert_eq!(s.connector, "db");
    assert_eq!(s.namespace, "ns");
    assert_eq!(s.task_name, "echo");
    assert_eq!(s.table, "onestep_executions");
    assert_eq!(s.attempts_table, "onestep_execution_attempts");
    assert_eq!(s.batch_size, 100);
    assert_eq!(s.poll_interval, Duration::from_secs(1));
    assert_eq!(s.lease_duration, Duration::from_secs(90));
    assert_eq!(s.heartbeat_interval, Duration::from_secs(30));
    assert_eq!(s.worker_id, "onestep-worker");
    assert!(s.auto_create);
    assert_eq!(s.limits, onestep_core::Limits::default());
    assert_eq!(s.reclaim_batch_size, 100);
    assert_eq!(s.source_name(), "mysql.execution:ns");
    let t = &cfg.tasks[0];
    assert_eq!(t.concurrency, 1);
    assert_eq!(t.retry, RetryPolicy::NoRetry);
    assert_eq!(t.timeout, None);
    assert_eq!(
        cfg.connectors["db"].dsn.expose(),
        "mysql://root@127.0.0.1/x"
    );
}

#[test]
fn heartbeat_equality_tolerance_and_trimming() {
    let yaml = source_doc(
        "    namespace: ' ns '\n    task_names: [' echo ']\n    lease_duration_s: 0.3\n    heartbeat_interval_s: 0.1\n    worker_id: ' w1 '\n",
    );
    let cfg = load_text(&yaml, true).expect("0.1 == 0.3 / 3 within tolerance");
    let s = &cfg.sources["jobs"];
    assert_eq!(
        (
            s.namespace.as_str(),
            s.task_name.as_str(),
            s.worker_id.as_str()
        ),
        ("ns", "echo", "w1")
    );
}

#[test]
fn retry_forms() {
    let cases = [
        ("retry: none", RetryPolicy::NoRetry),
        ("retry: No-Retry", RetryPolicy::NoRetry),
        (
            "retry: max_attempts",
            RetryPolicy::MaxAttempts {
                max_attempts: 3,
                delay_s: None,
            },
        ),
        (
            "retry: Exponential-Backoff",
            RetryPolicy::exponential_default(),
        ),
        (
            "retry: {type: exponential_backoff, max_attempts: 3, min_delay_s: 2.0, max_delay_s: 30.0, jitter: full}",
            RetryPolicy::ExponentialBackoff {
                max_attempts: 3,
                min_delay_s: 2.0,
                max_delay_s: 30.0,
                multiplier: 2.0,
                jitter: Jitter::Full,
            },
        ),
        (
            "retry: {type: by_failure_kind, default: max_attempts, timeout: {type: max_attempts, max_attempts: 2, delay_s: 1}}",
            RetryPolicy::ByFailureKind {
                default: Some(Box::new(RetryPolicy::MaxAttempts {
                    max_attempts: 3,
                    delay_s: None,
                })),
                error: None,
                timeout: Some(Box::new(RetryPolicy::MaxAttempts {
                    max_attempts: 2,
                    delay_s: Some(1.0),
                })),
                cancelled: None,
            },
        ),
    ];
    for (line, expected) in cases {
        let cfg = load_text(&task_doc(&format!("    {line}\n")), true).expect(line);
        assert_eq!(cfg.tasks[0].retry, expected, "{line}");
    }
}

#[test]
fn sections_share_one_name_space_and_identical_duplicates_are_fine() {
    let yaml = "app: {name: x}\nconnectors:\n  db: {type: mysql, dsn: x}\nresources:\n  db: {type: mysql, dsn: x}\nsources:\n  jobs: {type: mysql-execution-source, connector: db, namespace: n, task_names: [t]}\ntasks:\n  - {name: t, source: jobs, handler: {component: t.wasm}}\n";
    let cfg = load_text(yaml, true).expect("loads");
    assert_eq!(cfg.connectors.len(), 1);
    assert_eq!(cfg.sources["jobs"].connector, "db");
}

#[test]
fn legacy_form_and_logging() {
    let cfg = load_text(
        "name: legacy\nshutdown_timeout_s: null\nconfig: {a: 1}\n",
        true,
    )
    .expect("legacy");
    assert_eq!(cfg.name, "legacy");
    assert_eq!(cfg.shutdown_timeout, None);
    assert_eq!(cfg.config["a"], 1);
    let cfg = load_text(
        "app: {name: x, logging: {level: warn, format: JSON}}\n",
        false,
    )
    .expect("logging");
    assert_eq!(cfg.logging.level, Some(onestep_config::LogLevel::Warning));
    assert_eq!(cfg.logging.format, Some(onestep_config::LogFormat::Json));
    // app.logging unknown keys are errors even without --strict (docs/configuration.md#checks-in-both-modes).
    assert_eq!(
        err("app: {name: x, logging: {level: INFO, colour: 1}}\n", false),
        "unsupported fields for app.logging: colour (line 1, column 47)"
    );
}

#[test]
fn app_tracing() {
    use onestep_config::{OtlpProtocol, TracingSettings};
    let cfg = load_text("app: {name: x}\n", false).expect("no tracing");
    assert_eq!(cfg.tracing, None);
    let cfg = load_text("app: {name: x, tracing: {}}\n", true).expect("defaults");
    assert_eq!(cfg.tracing, Some(TracingSettings::default()));
    let cfg = load_text(
        "app:\n  name: x\n  tracing:\n    endpoint: http://collector:4317/\n    protocol: GRPC\n    service_name: shop\n    sample_ratio: 0.5\n",
        true,
    )
    .expect("every key");
    assert_eq!(
        cfg.tracing,
        Some(TracingSettings {
            endpoint: Some("http://collector:4317".into()),
            protocol: OtlpProtocol::Grpc,
            service_name: Some("shop".into()),
            sample_ratio: Some(0.5),
        })
    );
    check(
        &[
            (
                "app:\n  name: x\n  tracing: on\n".into(),
                "app.tracing must be a mapping (line 3, column 12)",
            ),
            (
                "app:\n  name: x\n  tracing: {endpoint: http://c:4318, headers: {}}\n".into(),
                "unsupported fields for app.tracing: headers (line 3, column 47)",
            ),
            (
                "app:\n  name: x\n  tracing: {endpoint: 'collector:4318'}\n".into(),
                "app.tracing.endpoint must be an http:// or https:// URL with a host, got 'collector:4318' (line 3, column 23)",
            ),
            (
                "app:\n  name: x\n  tracing: {endpoint: 'http://'}\n".into(),
                "app.tracing.endpoint must be an http:// or https:// URL with a host, got 'http://' (line 3, column 23)",
            ),
            (
                "app:\n  name: x\n  tracing: {protocol: http/json}\n".into(),
                "unsupported tracing protocol 'http/json'; expected 'http/protobuf' or 'grpc' (line 3, column 23)",
            ),
            (
                "app:\n  name: x\n  tracing: {service_name: ' '}\n".into(),
                "app.tracing.service_name must be a non-empty string (line 3, column 27)",
            ),
            (
                "app:\n  name: x\n  tracing: {sample_ratio: 1.5}\n".into(),
                "app.tracing.sample_ratio must be a number from 0 to 1 (line 3, column 27)",
            ),
            (
                "app:\n  name: x\n  tracing: {sample_ratio: half}\n".into(),
                "app.tracing.sample_ratio must be a number from 0 to 1 (line 3, column 27)",
            ),
        ],
        true,
    );
}

/// `namespaces`, `weights` and `max_running_per_key` (docs/semantics.md#fair-claim): checked
/// in full, then taken by the MySQL/MariaDB, PostgreSQL and SQLite sources (the fair claim).
#[test]
fn fair_claim_keys_are_checked_then_taken_by_database_sources() {
    let cases = [
        (
            "    namespace: ns\n    namespaces: [a]\n    task_names: [echo]\n",
            "namespace and namespaces are exclusive: give exactly one of them",
        ),
        (
            "    namespaces: []\n    task_names: [echo]\n",
            "namespaces must not be empty",
        ),
        (
            "    namespaces: [a, ' a ']\n    task_names: [echo]\n",
            "namespaces must be unique (`a` appears twice)",
        ),
        (
            "    namespaces: all\n    task_names: [echo]\n",
            "namespaces must be \"*\" (every namespace) or a sequence of namespaces",
        ),
        (
            "    namespace: ns\n    task_names: [echo]\n    weights: {big: 0}\n",
            "weights.big must be an integer from 1 to 1000 (got 0)",
        ),
        (
            "    namespace: ns\n    task_names: [echo]\n    weights: {'a b': 2}\n",
            "weights: fairness_key may contain only",
        ),
        (
            "    namespace: ns\n    task_names: [echo]\n    max_running_per_key: 0\n",
            "max_running_per_key must be an integer >= 1 (got 0)",
        ),
    ];
    for (fields, expected) in cases {
        let got = err(&source_doc(fields), false);
        assert!(
            got.contains(expected),
            "{fields}\n  expected: {expected}\n  got: {got}"
        );
    }
    // The MySQL/MariaDB source takes them (the fair claim, on tables with its keys table).
    let fair = "    namespaces: '*'\n    task_names: [echo]\n    weights: {big: 3}\n    max_running_per_key: 2\n";
    let doc = format!(
        "{}tasks:\n  - name: echo\n    source: jobs\n    handler: {{component: echo.wasm}}\n",
        source_doc(fair)
    );
    let cfg = crate::common::load_text(&doc, false).unwrap_or_else(|e| panic!("{e}"));
    let jobs = &cfg.sources["jobs"];
    assert_eq!(jobs.scope, onestep_core::request::NamespaceScope::All);
    assert_eq!(jobs.fair.weights.get("big"), Some(&3));
    assert_eq!(jobs.fair.max_running_per_key, Some(2));
    let many = format!(
        "{}tasks:\n  - name: echo\n    source: jobs\n    handler: {{component: echo.wasm}}\n",
        source_doc("    namespaces: [a, b]\n    task_names: [echo]\n")
    );
    let cfg = crate::common::load_text(&many, true).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        cfg.sources["jobs"].scope,
        onestep_core::request::NamespaceScope::Many(vec!["a".into(), "b".into()])
    );
    // The SQLite source takes them too (still checked).
    let sqlite = |fields: &str| {
        source_doc(fields)
            .replace("type: mysql\n", "type: sqlite\n")
            .replace("dsn: mysql://x", "dsn: sqlite:///var/q.db")
            .replace(
                "type: mysql_execution_source",
                "type: sqlite_execution_source",
            )
    };
    let doc = format!(
        "{}tasks:\n  - name: echo\n    source: jobs\n    handler: {{component: echo.wasm}}\n",
        sqlite(
            "    namespaces: [a, b]\n    task_names: [echo]\n    weights: {big: 3}\n    \
             max_running_per_key: 2\n"
        )
    );
    for strict in [false, true] {
        let cfg = load_text(&doc, strict).unwrap_or_else(|e| panic!("{e}\n{doc}"));
        let source = &cfg.sources["jobs"];
        assert_eq!(
            source.scope,
            onestep_core::request::NamespaceScope::Many(vec!["a".into(), "b".into()])
        );
        assert_eq!(source.fair.weights.get("big"), Some(&3));
        assert_eq!(source.fair.max_running_per_key, Some(2));
    }
    let got = err(
        &sqlite("    namespaces: []\n    task_names: [echo]\n"),
        false,
    );
    assert!(got.contains("namespaces must not be empty"), "{got}");
}

#[test]
fn fair_claim_keys_reach_a_postgres_source() {
    let yaml = "app:\n  name: demo\nresources:\n  db:\n    type: postgres\n    dsn: postgres://x\n  jobs:\n    type: postgres_execution_source\n    connector: db\n    namespaces: [a, b]\n    task_names: [echo]\n    weights: {big: 3}\n    max_running_per_key: 2\ntasks:\n  - name: echo\n    source: jobs\n    handler: {component: echo.wasm}\n";
    for strict in [false, true] {
        let config = load_text(yaml, strict).expect("valid");
        let source = config.sources.get("jobs").expect("a source");
        assert_eq!(
            source.scope,
            onestep_core::request::NamespaceScope::Many(vec!["a".into(), "b".into()])
        );
        assert_eq!(source.namespace, "a,b");
        assert_eq!(source.fair.weights.get("big"), Some(&3));
        assert_eq!(source.fair.max_running_per_key, Some(2));
    }
}

#[test]
fn a_deployed_source_serves_deployments_instead_of_task_names() {
    // docs/configuration.md#deployed-tasks
    let ok = source_doc("    namespaces: [a, b]\n    deployed: {poll_s: 0.5, slots: 8}\n");
    for strict in [false, true] {
        let cfg = load_text(&ok, strict).expect("a deployed source loads");
        let s = &cfg.sources["jobs"];
        let d = s.deployed.expect("deployed");
        assert_eq!((d.poll, d.slots), (Duration::from_millis(500), 8));
        assert_eq!(s.task_name, "");
        assert_eq!(cfg.deployed_sources().count(), 1);
        assert!(cfg.tasks.is_empty());
    }
    let defaults =
        load_text(&source_doc("    namespace: a\n    deployed: {}\n"), true).expect("defaults");
    let d = defaults.sources["jobs"].deployed.expect("deployed");
    assert_eq!((d.poll, d.slots), (Duration::from_secs(2), 64));

    check(
        &[
            (
                source_doc("    namespace: a\n    task_names: [x]\n    deployed: {}\n"),
                "resources.jobs: task_names and deployed are exclusive: a source serves the tasks it names or the deployed tasks of its namespaces (line 11, column 17)",
            ),
            (
                source_doc("    namespace: a\n    deployed: {poll_s: 0}\n"),
                "resources.jobs: deployed.poll_s must be a number > 0 (line 11, column 24)",
            ),
            (
                source_doc("    namespace: a\n    deployed: {slots: 0}\n"),
                "resources.jobs: deployed.slots must be an integer from 1 to 100000 (line 11, column 23)",
            ),
            (
                source_doc("    namespace: a\n    deployed: {every: 2}\n"),
                "resources.jobs: deployed: unsupported field 'every' (allowed: poll_s, slots) (line 11, column 23)",
            ),
            (
                source_doc("    namespace: a\n    deployed: 2\n"),
                "resources.jobs: deployed must be a mapping (e.g. {poll_s: 2}) (line 11, column 15)",
            ),
            (
                format!(
                    "{}tasks:\n  - name: echo\n    source: jobs\n    handler: {{component: echo.wasm}}\n",
                    source_doc("    namespace: a\n    deployed: {}\n")
                ),
                "tasks[0]: source 'jobs' serves deployed tasks (deployed:); a task of the file needs a source that names it in task_names (line 14, column 13)",
            ),
        ],
        false,
    );
}
