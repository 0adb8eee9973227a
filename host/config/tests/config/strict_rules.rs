//! Every strict rule of docs/configuration.md#strict-validation (plus this build's sections): a bad snippet and the exact
//! message (path, rule text, line and column).

use crate::common::err;

/// A document with one source resource `resources.jobs` whose extra lines are `fields`
/// (indented by four spaces).
fn source_doc(fields: &str) -> String {
    format!(
        "app:\n  name: demo\nresources:\n  db:\n    type: mysql\n    dsn: mysql://x\n  jobs:\n    type: mysql_execution_source\n    connector: db\n{fields}"
    )
}

const NS: &str = "    namespace: ns\n    task_names: [echo]\n";

/// A document with one task whose extra lines are `fields` (indented by four spaces).
fn task_doc(fields: &str) -> String {
    format!(
        "{}tasks:\n  - name: echo\n    source: jobs\n{fields}",
        source_doc(NS)
    )
}

fn check(cases: &[(String, &str)]) {
    let mut failures = Vec::new();
    for (yaml, expected) in cases {
        let got = err(yaml, true);
        if got != *expected {
            failures.push(format!(
                "--- yaml:\n{yaml}\n    expected: {expected}\n    got:      {got}"
            ));
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
fn top_level_and_app() {
    check(&[
        (
            "foo: 1\nbar: 2\napp: {name: x}\n".into(),
            "unsupported fields for config: bar, foo (line 2, column 6)",
        ),
        (
            "apiVersion: onestep/v1alpha1\napp: {name: x}\n".into(),
            "'apiVersion' and 'kind' must be provided together in strict mode (line 1, column 13)",
        ),
        (
            "kind: App\napp: {name: x}\n".into(),
            "'apiVersion' and 'kind' must be provided together in strict mode (line 1, column 7)",
        ),
        (
            "apiVersion: onestep/v2\nkind: App\napp: {name: x}\n".into(),
            "unsupported apiVersion 'onestep/v2'; expected 'onestep/v1alpha1' (line 1, column 13)",
        ),
        (
            "apiVersion: onestep/v1alpha1\nkind: Worker\napp: {name: x}\n".into(),
            "unsupported kind 'Worker'; expected 'App' (line 2, column 7)",
        ),
        (
            "app: 3\n".into(),
            "app must be a mapping (line 1, column 6)",
        ),
        (
            "app:\n  name: x\n  colour: red\n  size: 2\n".into(),
            "unsupported fields for app: colour, size (line 3, column 11)",
        ),
        (
            "app:\n  name: x\n  logging: loud\n".into(),
            "app.logging must be a mapping (line 3, column 12)",
        ),
        (
            "app:\n  name: x\n  logging: {level: INFO, colour: true}\n".into(),
            "unsupported fields for app.logging: colour (line 3, column 34)",
        ),
        (
            "app:\n  name: x\n  logging: {format: json}\n".into(),
            "app.logging.level is required (line 3, column 12)",
        ),
        (
            "app:\n  name: x\n  logging: {level: LOUD}\n".into(),
            "unsupported logging level 'LOUD' (line 3, column 20)",
        ),
        (
            "app:\n  name: x\n  logging: {level: INFO, format: xml}\n".into(),
            "unsupported logging format 'xml'; expected 'text' or 'json' (line 3, column 34)",
        ),
        (
            "app:\n  name: x\n  env_file: 3\n".into(),
            "app.env_file must be a string (line 3, column 13)",
        ),
        (
            "app:\n  name: x\n  strict_env: yes\n".into(),
            "app.strict_env must be a boolean (line 3, column 15)",
        ),
        (
            "app:\n  name: x\n  failure_capture: [1]\n".into(),
            "app.failure_capture must be a mapping (line 3, column 20)",
        ),
        (
            "name: y\nconfig: {}\napp:\n  name: x\n".into(),
            "strict mode does not allow mixing 'app' with legacy top-level app fields: config, name (line 4, column 3)",
        ),
    ]);
}

#[test]
fn resource_sections() {
    check(&[
        (
            "app: {name: x}\nresources: [db]\n".into(),
            "resources must be a mapping (line 2, column 12)",
        ),
        (
            "app: {name: x}\nconnectors:\n  db: mysql\n".into(),
            "connectors.db must be a mapping (line 3, column 7)",
        ),
        (
            "app: {name: x}\nresources:\n  db: {dsn: x}\n".into(),
            "resources.db: 'type' must be a non-empty string (line 3, column 7)",
        ),
        (
            "app: {name: x}\nresources:\n  db: {type: '  '}\n".into(),
            "resources.db: 'type' must be a non-empty string (line 3, column 7)",
        ),
        (
            "app: {name: x}\nsinks:\n  out: {type: redis}\n".into(),
            "unsupported resource type 'redis' for sinks.out (line 3, column 8)",
        ),
        (
            "app: {name: x}\nresources:\n  db: {type: mysql, dsn: x, host: h, port: 1}\n".into(),
            "unsupported fields for resources.db: host, port (line 3, column 35)",
        ),
        (
            "app: {name: x}\nresources:\n  db: {type: mysql, dsn: x}\nconnectors:\n  db: {type: mysql, dsn: y}\n".into(),
            "resource 'db' is defined multiple times with different configs (line 5, column 7)",
        ),
        (
            source_doc("    namespace: ns\n    task_names: [echo]\n    colour: red\n"),
            "unsupported fields for resources.jobs: colour (line 12, column 13)",
        ),
    ]);
}

#[test]
fn execution_source_checks_in_order() {
    check(&[
        // 1. namespace
        (
            source_doc("    task_names: [echo]\n"),
            "resources.jobs: 'namespace' must be a non-empty string (line 8, column 5)",
        ),
        (
            source_doc("    namespace: ''\n    task_names: [echo]\n"),
            "resources.jobs: 'namespace' must be a non-empty string (line 10, column 16)",
        ),
        // 2. task_names
        (
            source_doc("    namespace: ns\n    task_names: echo\n"),
            "'resources.jobs.task_names' must be a non-empty list of strings (line 11, column 17)",
        ),
        (
            source_doc("    namespace: ns\n    task_names: []\n"),
            "'resources.jobs.task_names' must be a non-empty list of strings (line 11, column 17)",
        ),
        (
            source_doc("    namespace: ns\n    task_names: [echo, 3]\n"),
            "'resources.jobs.task_names[1]' must be a non-empty string (line 11, column 24)",
        ),
        (
            source_doc("    namespace: ns\n    task_names: [echo, echo]\n"),
            "'resources.jobs.task_names' must not contain duplicate field names (line 11, column 24)",
        ),
        // 3. optional non-empty strings
        (
            source_doc(&format!("{NS}    table: ''\n")),
            "'resources.jobs.table' must be a non-empty string (line 12, column 12)",
        ),
        (
            source_doc(&format!("{NS}    attempts_table: 5\n")),
            "'resources.jobs.attempts_table' must be a non-empty string (line 12, column 21)",
        ),
        (
            source_doc(&format!("{NS}    worker_id: ' '\n")),
            "'resources.jobs.worker_id' must be a non-empty string (line 12, column 16)",
        ),
        // 4. positive integers
        (
            source_doc(&format!("{NS}    max_payload_bytes: 1.5\n")),
            "'resources.jobs.max_payload_bytes' must be an integer (line 12, column 24)",
        ),
        (
            source_doc(&format!("{NS}    reclaim_batch_size: 0\n")),
            "'resources.jobs.reclaim_batch_size' must be >= 1 (line 12, column 25)",
        ),
        // 5. auto_create
        (
            source_doc(&format!("{NS}    auto_create: 'no'\n")),
            "resources.jobs.auto_create must be a boolean (line 12, column 18)",
        ),
        // 6. source options with the R. prefix
        (
            source_doc(&format!(
                "    namespace: '{}'\n    task_names: [echo]\n",
                "n".repeat(256)
            )),
            "resources.jobs.namespace must be non-empty and <= 255 characters (line 10, column 16)",
        ),
        (
            source_doc("    namespace: ns\n    task_names: [a, b]\n"),
            "resources.jobs.task_names must contain exactly one task name (line 11, column 17)",
        ),
        (
            source_doc(&format!("{NS}    batch_size: '4'\n")),
            "resources.jobs.batch_size must be >= 1 (line 12, column 17)",
        ),
        (
            source_doc(&format!("{NS}    batch_size: 0\n")),
            "resources.jobs.batch_size must be >= 1 (line 12, column 17)",
        ),
        (
            source_doc(&format!("{NS}    poll_interval_s: .inf\n")),
            "resources.jobs.poll_interval_s must be a finite number (line 12, column 22)",
        ),
        (
            source_doc(&format!("{NS}    heartbeat_interval_s: .nan\n")),
            "resources.jobs.heartbeat_interval_s must be a finite number (line 12, column 27)",
        ),
        (
            source_doc(&format!("{NS}    poll_interval_s: 0\n")),
            "resources.jobs.poll_interval_s must be > 0 (line 12, column 22)",
        ),
        (
            source_doc(&format!("{NS}    lease_duration_s: -1\n")),
            "resources.jobs.lease_duration_s must be > 0 (line 12, column 23)",
        ),
        (
            source_doc(&format!(
                "{NS}    lease_duration_s: 90\n    heartbeat_interval_s: 30.1\n"
            )),
            "resources.jobs.heartbeat_interval_s must be > 0 and <= resources.jobs.lease_duration_s / 3 (line 13, column 27)",
        ),
        (
            source_doc(&format!("{NS}    cancel_poll_interval_s: .inf\n")),
            "resources.jobs.cancel_poll_interval_s must be a finite number (line 12, column 29)",
        ),
        (
            source_doc(&format!(
                "{NS}    heartbeat_interval_s: 10\n    cancel_poll_interval_s: 11\n"
            )),
            "resources.jobs.cancel_poll_interval_s must be > 0 and <= resources.jobs.heartbeat_interval_s (line 13, column 29)",
        ),
        (
            source_doc(&format!("{NS}    worker_id: '{}'\n", "w".repeat(256))),
            "resources.jobs.worker_id must be non-empty and <= 255 characters (line 12, column 16)",
        ),
    ]);
}

#[test]
fn hooks_tasks_and_api() {
    check(&[
        (
            "app: {name: x}\nhooks: {startup: [], teardown: []}\n".into(),
            "unsupported fields for hooks: teardown (line 2, column 32)",
        ),
        ("app: {name: x}\ntasks: {a: 1}\n".into(), "tasks must be a list (line 2, column 8)"),
        (
            "app: {name: x}\ntasks:\n  - just-a-string\n".into(),
            "tasks[0] must be a mapping (line 3, column 5)",
        ),
        (
            task_doc("    handler: {component: echo.wasm}\n    priority: 3\n"),
            "unsupported fields for tasks[0]: priority (line 16, column 15)",
        ),
        (
            task_doc("    concurrency: 2\n"),
            "tasks[0] must define either 'handler' or 'emit' (line 13, column 5)",
        ),
        (
            task_doc("    handler: {component: echo.wasm, memory: 3}\n"),
            "unsupported fields for tasks[0].handler: memory (line 15, column 45)",
        ),
        (
            task_doc("    handler: {component: echo.wasm, params: [1]}\n"),
            "tasks[0].handler: params must be a mapping (line 15, column 45)",
        ),
        (
            task_doc("    handler: {component: echo.wasm}\n    hooks: {before: x, around: y}\n"),
            "unsupported fields for tasks[0].hooks: around (line 16, column 32)",
        ),
        (
            task_doc("    handler: {component: echo.wasm}\n    retry: forever\n"),
            "tasks[0].retry: unsupported retry type 'forever' (line 16, column 12)",
        ),
        (
            task_doc("    handler: {component: echo.wasm}\n    retry: {type: max_attempts, max_attempts: 2, jitter: full}\n"),
            "unsupported fields for tasks[0].retry: jitter (line 16, column 58)",
        ),
        (
            task_doc("    handler: {component: echo.wasm}\n    retry:\n      type: by_failure_kind\n      error: {type: no_retry, delay_s: 1}\n"),
            "unsupported fields for tasks[0].retry.error: delay_s (line 18, column 40)",
        ),
        (
            task_doc("    handler: {component: echo.wasm}\n    sandbox: {memory: 1}\n"),
            "unsupported fields for tasks[0].sandbox: memory (line 16, column 23)",
        ),
        (
            task_doc("    handler: {component: echo.wasm}\n    sandbox:\n      preopens:\n        - {host: ., guest: /d, writable: true}\n"),
            "unsupported fields for tasks[0].sandbox.preopens[0]: writable (line 18, column 42)",
        ),
        (
            "app: {name: x}\nresources:\n  db: {type: mysql, dsn: x}\napi: {connector: db, namespace: n, port: 1}\n".into(),
            "unsupported fields for api: port (line 4, column 42)",
        ),
        (
            "app: {name: x}\nresources:\n  db: {type: mysql, dsn: x}\napi: {connector: db, namespace: n, limits: {max_rows: 1}}\n".into(),
            "unsupported fields for api.limits: max_rows (line 4, column 55)",
        ),
        (
            "app: {name: x}\nresources:\n  db: {type: mysql, dsn: x}\napi: {connector: db, tokens: {t: ns}}\n".into(),
            "api: inline tokens are not allowed in YAML; use tokens_file or tokens_env (line 4, column 30)",
        ),
    ]);
}

#[test]
fn unknown_keys_are_ignored_without_strict() {
    let yaml = task_doc(
        "    handler: {component: echo.wasm, extra: 1}\n    priority: 3\n    sandbox: {memory: 1}\n",
    );
    let yaml = format!("colour: red\n{yaml}");
    let cfg = crate::common::load_text(&yaml, false).expect("non-strict load");
    assert_eq!(cfg.tasks.len(), 1);
    assert!(crate::common::load_text(&yaml, true).is_err());
}
