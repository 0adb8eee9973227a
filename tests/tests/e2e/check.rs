//! `onestep check` through the binary: every shipped config passes `--strict` (exit 0); bad
//! files exit 2 with exactly `onestep: failed to load <target>: <reason> (line L, column C)`
//! on stderr. One bad file per rule group of docs/configuration.md#strict-validation (the config crate's own tests check
//! every rule's text at the library level; here the point is the binary's exit code and
//! message format), plus build-time rules (docs/configuration.md#checks-in-both-modes) that fail in both modes.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, ensure};
use onestep_e2e::{guest, repo_root, run_cli};

fn yaml_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            yaml_files(&path, out)?;
        } else if matches!(
            path.extension().and_then(|e| e.to_str()),
            Some("yaml" | "yml")
        ) {
            out.push(path);
        }
    }
    Ok(())
}

#[test]
fn shipped_configs_pass_strict_check() -> Result<()> {
    guest("echo")?;
    let mut files = Vec::new();
    yaml_files(&repo_root().join("config"), &mut files)?;
    files.sort();
    ensure!(files.len() >= 7, "found only {files:?}");
    let root = repo_root().join("config");
    for shipped in ["quickstart.yaml", "worker.yaml", "agent.yaml"] {
        ensure!(
            files.contains(&root.join(shipped)),
            "config/{shipped} is not among {files:?}"
        );
    }
    for file in &files {
        let path = file.display().to_string();
        for args in [vec!["check", &path], vec!["check", "--strict", &path]] {
            // agent.yaml injects `Bearer ${OPENAI_API_KEY}`: strict checks need the variable.
            let (code, stdout, stderr) = run_cli(&args, &[("OPENAI_API_KEY", "sk-test")])?;
            ensure!(code == 0, "{args:?} exited {code}; stderr: {stderr}");
            ensure!(
                stdout.starts_with(&format!("Target: {path}\n")),
                "{args:?} printed {stdout}"
            );
        }
    }
    // Without it, strict refuses the file, naming the variable; the lenient check warns.
    let agent = root.join("agent.yaml").display().to_string();
    let (code, _, stderr) = run_cli(&["check", "--strict", &agent], &[("OPENAI_API_KEY", "")])?;
    ensure!(
        code == 2 && stderr.contains("OPENAI_API_KEY") && stderr.contains("unset or empty"),
        "exit {code}: {stderr}"
    );
    Ok(())
}

/// A valid app; each bad case replaces one piece of it.
fn base(component: &Path) -> String {
    format!(
        "apiVersion: onestep/v1alpha1
kind: App
app:
  name: bad
  logging: {{level: INFO}}
resources:
  db:
    type: mysql
    dsn: mysql://root@127.0.0.1:3306/x
  jobs:
    type: mysql_execution_source
    connector: db
    namespace: e2e
    task_names: [echo]
    lease_duration_s: 9.0
    heartbeat_interval_s: 3.0
tasks:
  - name: echo
    source: jobs
    handler: {{component: {}}}
    retry: {{type: max_attempts, max_attempts: 2}}
",
        component.display()
    )
}

/// One bad file: `edits` are (text of the base, replacement); `strict`/`lenient` are the
/// expected reasons with `--strict` and without (`None`: that mode accepts the file).
struct Case {
    name: &'static str,
    edits: &'static [(&'static str, &'static str)],
    strict: &'static str,
    lenient: Option<&'static str>,
}

const NS: &str = "    namespace: e2e\n";

const CASES: &[Case] = &[
    // Top level.
    Case {
        name: "top-level unknown keys",
        edits: &[("app:\n", "bogus: 1\nzeta: 2\napp:\n")],
        strict: "unsupported fields for config: bogus, zeta (line 3, column 8)",
        lenient: None,
    },
    // apiVersion / kind.
    Case {
        name: "apiVersion without kind",
        edits: &[("kind: App\n", "")],
        strict: "'apiVersion' and 'kind' must be provided together in strict mode (line 1, column 13)",
        lenient: None,
    },
    Case {
        name: "wrong apiVersion",
        edits: &[("onestep/v1alpha1", "onestep/v2")],
        strict: "unsupported apiVersion 'onestep/v2'; expected 'onestep/v1alpha1' (line 1, column 13)",
        lenient: None,
    },
    Case {
        name: "wrong kind",
        edits: &[("kind: App", "kind: Job")],
        strict: "unsupported kind 'Job'; expected 'App' (line 2, column 7)",
        lenient: None,
    },
    // app.
    Case {
        name: "unknown app field",
        edits: &[("  name: bad\n", "  name: bad\n  colour: red\n")],
        strict: "unsupported fields for app: colour (line 5, column 11)",
        lenient: None,
    },
    Case {
        name: "unknown logging level",
        edits: &[("level: INFO", "level: LOUD")],
        strict: "unsupported logging level 'LOUD' (line 5, column 20)",
        lenient: Some("unsupported logging level 'LOUD' (line 5, column 20)"),
    },
    Case {
        name: "app mixed with legacy fields",
        edits: &[("app:\n", "shutdown_timeout_s: 3\napp:\n")],
        strict: "strict mode does not allow mixing 'app' with legacy top-level app fields: shutdown_timeout_s (line 5, column 3)",
        lenient: None,
    },
    // Resources: type and fields.
    Case {
        name: "empty resource type",
        edits: &[("    type: mysql\n", "    type: ''\n")],
        strict: "resources.db: 'type' must be a non-empty string (line 8, column 5)",
        lenient: Some("resources.db: 'type' must be a non-empty string (line 8, column 5)"),
    },
    Case {
        name: "unknown resource type",
        edits: &[("    type: mysql\n", "    type: redis\n")],
        strict: "unsupported resource type 'redis' for resources.db (line 8, column 5)",
        lenient: Some("unsupported resource type 'redis' for resources.db (line 8, column 5)"),
    },
    Case {
        name: "unknown connector fields",
        edits: &[(
            "    dsn: mysql://root@127.0.0.1:3306/x\n",
            "    dsn: mysql://root@127.0.0.1:3306/x\n    host: db\n    port: 3306\n",
        )],
        strict: "unsupported fields for resources.db: host, port (line 10, column 11)",
        lenient: None,
    },
    // Source rules 1-6.
    Case {
        name: "source rule 1: namespace",
        edits: &[(NS, "")],
        strict: "resources.jobs: 'namespace' must be a non-empty string (line 11, column 5)",
        lenient: Some("resources.jobs: 'namespace' must be a non-empty string (line 11, column 5)"),
    },
    Case {
        name: "source rule 2: task_names duplicates",
        edits: &[("[echo]", "[echo, echo]")],
        strict: "'resources.jobs.task_names' must not contain duplicate field names (line 14, column 24)",
        lenient: Some(
            "resources.jobs: task_names must contain exactly one task name (line 14, column 17)",
        ),
    },
    Case {
        name: "source rule 2: task_names bare string",
        edits: &[("[echo]", "echo")],
        strict: "'resources.jobs.task_names' must be a non-empty list of strings (line 14, column 17)",
        lenient: Some(
            "resources.jobs: task_names must be a sequence of strings (line 14, column 17)",
        ),
    },
    Case {
        name: "source rule 3: empty table",
        edits: &[(NS, "    namespace: e2e\n    table: ''\n")],
        strict: "'resources.jobs.table' must be a non-empty string (line 14, column 12)",
        lenient: Some(
            "resources.jobs: executions_table must be a non-empty SQL identifier (line 14, column 12)",
        ),
    },
    Case {
        name: "source rule 4: limit not an integer",
        edits: &[(NS, "    namespace: e2e\n    max_payload_bytes: many\n")],
        strict: "'resources.jobs.max_payload_bytes' must be an integer (line 14, column 24)",
        lenient: Some(
            "resources.jobs: max_payload_bytes must be a positive integer (line 14, column 24)",
        ),
    },
    Case {
        name: "source rule 4: limit below 1",
        edits: &[(NS, "    namespace: e2e\n    reclaim_batch_size: 0\n")],
        strict: "'resources.jobs.reclaim_batch_size' must be >= 1 (line 14, column 25)",
        lenient: Some(
            "resources.jobs: reclaim_batch_size must be a positive integer (line 14, column 25)",
        ),
    },
    Case {
        name: "source rule 5: auto_create not a boolean",
        edits: &[(NS, "    namespace: e2e\n    auto_create: 'no'\n")],
        strict: "resources.jobs.auto_create must be a boolean (line 14, column 18)",
        lenient: Some("resources.jobs: auto_create must be a boolean (line 14, column 18)"),
    },
    Case {
        name: "source rule 6: two task names",
        edits: &[("[echo]", "[echo, other]")],
        strict: "resources.jobs.task_names must contain exactly one task name (line 14, column 17)",
        lenient: Some(
            "resources.jobs: task_names must contain exactly one task name (line 14, column 17)",
        ),
    },
    Case {
        name: "source rule 6: batch_size as a string",
        edits: &[(NS, "    namespace: e2e\n    batch_size: '4'\n")],
        strict: "resources.jobs.batch_size must be >= 1 (line 14, column 17)",
        lenient: Some("resources.jobs: batch_size must be >= 1 (line 14, column 17)"),
    },
    Case {
        name: "source rule 6: infinite poll interval",
        edits: &[(NS, "    namespace: e2e\n    poll_interval_s: .inf\n")],
        strict: "resources.jobs.poll_interval_s must be a finite number (line 14, column 22)",
        lenient: Some(
            "resources.jobs: poll_interval_s must be a finite number (line 14, column 22)",
        ),
    },
    Case {
        name: "source rule 6: heartbeat above lease / 3",
        edits: &[("heartbeat_interval_s: 3.0", "heartbeat_interval_s: 3.5")],
        strict: "resources.jobs.heartbeat_interval_s must be > 0 and <= resources.jobs.lease_duration_s / 3 (line 16, column 27)",
        lenient: Some(
            "resources.jobs: heartbeat_interval_s must be > 0 and <= lease_duration_s / 3 (line 16, column 27)",
        ),
    },
    // Tasks.
    Case {
        name: "unknown task field",
        edits: &[("    source: jobs\n", "    source: jobs\n    priority: 3\n")],
        strict: "unsupported fields for tasks[0]: priority (line 20, column 15)",
        lenient: None,
    },
    Case {
        name: "task without handler",
        edits: &[("    handler: {component: COMPONENT}\n", "")],
        strict: "tasks[0] must define either 'handler' or 'emit' (line 18, column 5)",
        lenient: Some("tasks[0] must define either 'handler' or 'emit' (line 18, column 5)"),
    },
    // Retry.
    Case {
        name: "unknown retry type",
        edits: &[("type: max_attempts, max_attempts: 2", "type: forever")],
        strict: "tasks[0].retry: unsupported retry type 'forever' (line 21, column 19)",
        lenient: Some("tasks[0].retry: unsupported retry type 'forever' (line 21, column 19)"),
    },
    Case {
        name: "retry field of another type",
        edits: &[("max_attempts: 2}", "max_attempts: 2, min_delay_s: 1}")],
        strict: "unsupported fields for tasks[0].retry: min_delay_s (line 21, column 63)",
        lenient: None,
    },
    Case {
        name: "by_failure_kind sub-policy field",
        edits: &[(
            "type: max_attempts, max_attempts: 2",
            "type: by_failure_kind, error: {type: max_attempts, delay: 1}",
        )],
        strict: "unsupported fields for tasks[0].retry.error: delay (line 21, column 71)",
        lenient: None,
    },
    // Handlers are components.
    Case {
        name: "import-style handler",
        edits: &[("{component: COMPONENT}", "'pkg.mod:fn'")],
        strict: "tasks[0].handler: handlers are WebAssembly components: use 'handler: {component: PATH}' ('pkg.mod:fn' is an import reference, which this build does not support) (line 20, column 14)",
        lenient: Some(
            "tasks[0].handler: handlers are WebAssembly components: use 'handler: {component: PATH}' ('pkg.mod:fn' is an import reference, which this build does not support) (line 20, column 14)",
        ),
    },
    Case {
        name: "handler ref mapping",
        edits: &[("{component: COMPONENT}", "{ref: 'pkg.mod:fn'}")],
        strict: "tasks[0].handler: handlers are WebAssembly components: use 'handler: {component: PATH}' instead of 'ref' (line 20, column 14)",
        lenient: Some(
            "tasks[0].handler: handlers are WebAssembly components: use 'handler: {component: PATH}' instead of 'ref' (line 20, column 14)",
        ),
    },
    Case {
        name: "missing component file",
        edits: &[("COMPONENT", "/nonexistent/x.wasm")],
        strict: "tasks[0].handler.component: file not found: /nonexistent/x.wasm (line 20, column 26)",
        lenient: Some(
            "tasks[0].handler.component: file not found: /nonexistent/x.wasm (line 20, column 26)",
        ),
    },
    // Build-time rules (docs/configuration.md#checks-in-both-modes), both modes.
    Case {
        name: "concurrency 0",
        edits: &[(
            "    source: jobs\n",
            "    source: jobs\n    concurrency: 0\n",
        )],
        strict: "tasks[0]: concurrency must be >= 1 (line 20, column 18)",
        lenient: Some("tasks[0]: concurrency must be >= 1 (line 20, column 18)"),
    },
    Case {
        name: "unknown connector",
        edits: &[("connector: db", "connector: nodb")],
        strict: "resources.jobs: unknown resource 'nodb' (line 12, column 16)",
        lenient: Some("resources.jobs: unknown resource 'nodb' (line 12, column 16)"),
    },
    Case {
        name: "task name not the source's",
        edits: &[("  - name: echo", "  - name: other")],
        strict: "tasks[0]: mysql.execution:e2e is configured for task 'echo', not 'other' (line 19, column 13)",
        lenient: Some(
            "tasks[0]: mysql.execution:e2e is configured for task 'echo', not 'other' (line 19, column 13)",
        ),
    },
];

#[test]
fn bad_files_exit_2_with_exact_messages() -> Result<()> {
    let component = guest("echo")?;
    let dir = tempfile::tempdir()?;
    let base = base(&component);
    let mut failures = Vec::new();
    for (i, case) in CASES.iter().enumerate() {
        let mut text = base.clone();
        for (from, to) in case.edits {
            let from = from.replace("COMPONENT", &component.display().to_string());
            ensure!(
                text.contains(&from),
                "{}: the base has no {from:?}",
                case.name
            );
            text = text.replace(&from, to);
        }
        let path = dir.path().join(format!("bad-{i}.yaml"));
        std::fs::write(&path, &text).context("cannot write a temp file")?;
        let target = path.display().to_string();
        for (strict, expected) in [(true, Some(case.strict)), (false, case.lenient)] {
            let mut args = vec!["check"];
            if strict {
                args.push("--strict");
            }
            args.push(&target);
            let (code, _, stderr) = run_cli(&args, &[])?;
            let (want_code, want_err) = match expected {
                Some(reason) => (2, format!("onestep: failed to load {target}: {reason}\n")),
                None => (0, String::new()),
            };
            if code != want_code || stderr != want_err {
                failures.push(format!(
                    "{} ({}): exit {code}, stderr {stderr:?}; expected exit {want_code}, stderr {want_err:?}",
                    case.name,
                    if strict { "strict" } else { "lenient" },
                ));
            }
        }
    }
    ensure!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}

#[test]
fn missing_file_and_non_mapping_exit_2() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let missing = dir.path().join("absent.yaml").display().to_string();
    let (code, _, stderr) = run_cli(&["check", "--strict", &missing], &[])?;
    ensure!(code == 2, "exit {code}");
    ensure!(
        stderr.starts_with(&format!("onestep: failed to load {missing}: ")),
        "stderr {stderr:?}"
    );
    let list = dir.path().join("list.yaml");
    std::fs::write(&list, "- 1\n- 2\n")?;
    let list = list.display().to_string();
    let (code, _, stderr) = run_cli(&["check", &list], &[])?;
    ensure!(code == 2, "exit {code}");
    ensure!(
        stderr.starts_with(&format!("onestep: failed to load {list}: "))
            && stderr.lines().count() == 1,
        "stderr {stderr:?}"
    );
    Ok(())
}

/// `check` loads every component as the worker would and names what is wrong with it
/// (docs/cli.md#component-checks): with `--strict` an error (exit 2), without a problem line on
/// stderr and `problem=<kind>` in the summary (exit 0). A loadable component is listed with its
/// world version.
#[test]
fn component_checks_name_the_problem() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let garbage = dir.path().join("garbage.wasm");
    std::fs::write(&garbage, b"garbage")?;
    let core = dir.path().join("core.wasm");
    std::fs::write(&core, b"\0asm\x01\0\0\0")?;
    let cases: Vec<(PathBuf, &str, String)> = vec![
        (
            garbage,
            "not-a-component",
            "component garbage.wasm is not a WebAssembly component: it is not a WebAssembly \
             file (7 bytes, no `\\0asm` header)"
                .into(),
        ),
        (
            core,
            "not-a-component",
            "component core.wasm is not a WebAssembly component: it is a core WebAssembly \
             module, not a component: build the handler for the wasm32-wasip2 target (cargo \
             build --target wasm32-wasip2), or wrap the module with `wasm-tools component new`"
                .into(),
        ),
        (
            guest("not-a-handler")?,
            "wrong-world",
            "component not-a-handler.wasm does not implement onestep:handler/handler (0.1.0, \
             0.2.0 or 0.3.0): it exports wasi:cli/run@0.2.0, not the function `handle`"
                .into(),
        ),
        (
            guest("future-world")?,
            "world-version",
            "component future-world.wasm is built against onestep:handler@0.9.0, which this \
             host does not serve (it serves onestep:handler@0.1.0, onestep:handler@0.2.0, onestep:handler@0.3.0): \
             rebuild it against one of those"
                .into(),
        ),
        (
            guest("bad-import")?,
            "missing-import",
            "component bad-import.wasm cannot be linked: component imports instance \
             `onestep:bad-import/missing`, but a matching implementation was not found in the \
             linker: instance export `ping` has the wrong type: function implementation is \
             missing"
                .into(),
        ),
        (
            guest("fetch")?,
            "sandbox",
            "component fetch.wasm cannot run in its sandbox: it imports \
             wasi:http/outgoing-handler@0.2.12 (outbound HTTP) but the task's sandbox grants no \
             network: list the origins it may reach under sandbox.network.allow"
                .into(),
        ),
    ];
    let mut failures = Vec::new();
    for (i, (component, kind, reason)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("component-{i}.yaml"));
        std::fs::write(&path, base(component))?;
        let target = path.display().to_string();
        let message = format!("task 'echo': cannot load {}: {reason}", component.display());
        let (code, _, stderr) = run_cli(&["check", "--strict", &target], &[])?;
        let want = format!("onestep: failed to load {target}: {message}\n");
        if code != 2 || stderr != want {
            failures.push(format!(
                "{kind} (strict): exit {code}, stderr {stderr:?}; expected 2, {want:?}"
            ));
        }
        let (code, stdout, stderr) = run_cli(&["check", &target], &[])?;
        let want = format!("onestep: problem in {target}: {message}\n");
        let line = format!(
            "- echo: {} problem={kind} (see stderr)\n",
            component.display()
        );
        if code != 0 || stderr != want || !stdout.contains(&line) {
            failures.push(format!(
                "{kind} (plain): exit {code}, stderr {stderr:?}, stdout {stdout:?}; expected 0, \
                 {want:?}, a line {line:?}"
            ));
        }
    }
    ensure!(failures.is_empty(), "{}", failures.join("\n"));

    // Loadable components: listed with their world version and network import.
    for (name, world) in [
        ("echo", "onestep:handler@0.1.0"),
        ("inspect", "onestep:handler@0.2.0"),
    ] {
        let component = guest(name)?;
        let path = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&path, base(&component))?;
        let target = path.display().to_string();
        let (code, stdout, stderr) = run_cli(&["check", "--strict", &target], &[])?;
        let line = format!(
            "- echo: {} world={world} network=none sha256=",
            component.display()
        );
        ensure!(
            code == 0 && stdout.contains(&line),
            "{name}: exit {code}, stdout {stdout}, stderr {stderr}"
        );
        let (code, stdout, _) = run_cli(&["check", "--json", &target], &[])?;
        let v: serde_json::Value = serde_json::from_str(&stdout)?;
        ensure!(code == 0 && v["components"][0]["world"] == world, "{v}");
    }
    Ok(())
}
