//! `onestep check --strict` rejects every file that `onestep run` rejects at load time: each
//! bad file below (one per kind of load-time rejection: durations, the lease/heartbeat rule, the
//! table-pair rule, resource kinds, connector references, preopens) goes through `check`,
//! `check --strict` and `run` of the real binary. All three exit 2 (a bad file) before
//! anything is opened, and `check` and `run` print the same message (`--strict` may word its
//! own first). The connector points at the MariaDB test server, so a `run` that wrongly accepted
//! a file would start a worker: it is stopped after a bound and reported.
//!
//! A component the worker cannot load (an import the host does not provide, bytes that are not
//! a component, a `wasi:http` component for a task without `sandbox.network.allow`) is rejected
//! by `check --strict` (exit 2) and reported as a problem by `check` (exit 0) with the message
//! `run` quarantines the task with (docs/security.md#one-tenants-bad-deploy: the worker starts;
//! with its only task quarantined `/readyz` answers 503 and lists the task with that message),
//! naming the task, the file and the missing import (docs/cli.md#component-checks).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use onestep_e2e::{TestDb, guest, onestep_bin};

/// Longest a rejected file may take to exit.
const BOUND: Duration = Duration::from_secs(30);

/// A valid app; each case edits one piece of it.
fn base(component: &Path, dsn: &str) -> String {
    format!(
        "app:
  name: bad
resources:
  db:
    type: mysql
    dsn: {dsn}
  jobs:
    type: mysql_execution_source
    connector: db
    namespace: e2e-check-vs-run
    task_names: [echo]
    lease_duration_s: 9.0
    heartbeat_interval_s: 3.0
tasks:
  - name: echo
    source: jobs
    handler: {{component: {}}}
",
        component.display()
    )
}

/// One bad file: `edits` are (text of the base, replacement), `COMPONENT` standing for the
/// component's path in both; `reason` is what `check` and `run` print after
/// `onestep: failed to load <target>: `.
struct Case {
    name: &'static str,
    edits: &'static [(&'static str, &'static str)],
    reason: &'static str,
}

const NS: &str = "    namespace: e2e-check-vs-run\n";
const TASK: &str = "    source: jobs\n";

const SECOND_SOURCE: &str = "  jobs2:
    type: mysql_execution_source
    connector: db
    namespace: e2e-check-vs-run
    task_names: [echo2]
    lease_duration_s: 9.0
    heartbeat_interval_s: 3.0
    max_result_bytes: 1000
tasks:
";

const CASES: &[Case] = &[
    Case {
        name: "heartbeat above lease / 3",
        edits: &[("heartbeat_interval_s: 3.0", "heartbeat_interval_s: 3.5")],
        reason: "resources.jobs: heartbeat_interval_s must be > 0 and <= lease_duration_s / 3 (line 13, column 27)",
    },
    Case {
        name: "lease beyond what a store accepts",
        edits: &[("lease_duration_s: 9.0", "lease_duration_s: 1.0e10")],
        reason: "resources.jobs: lease_duration_s is too large (line 12, column 23)",
    },
    Case {
        name: "poll interval too large for a duration",
        edits: &[(
            NS,
            "    namespace: e2e-check-vs-run\n    poll_interval_s: 1.0e300\n",
        )],
        reason: "resources.jobs: poll_interval_s is out of range (line 11, column 22)",
    },
    Case {
        name: "poll interval that rounds to zero",
        edits: &[(
            NS,
            "    namespace: e2e-check-vs-run\n    poll_interval_s: 1.0e-12\n",
        )],
        reason: "resources.jobs: poll_interval_s must be > 0 (line 11, column 22)",
    },
    Case {
        name: "task timeout that rounds to zero",
        edits: &[(TASK, "    source: jobs\n    timeout_s: 1.0e-12\n")],
        reason: "tasks[0]: timeout_s must be > 0 (line 17, column 16)",
    },
    Case {
        name: "task timeout too large for a duration",
        edits: &[(TASK, "    source: jobs\n    timeout_s: 1.0e300\n")],
        reason: "tasks[0]: timeout_s is out of range (line 17, column 16)",
    },
    Case {
        name: "shutdown timeout too large for a duration",
        edits: &[(
            "  name: bad\n",
            "  name: bad\n  shutdown_timeout_s: 1.0e300\n",
        )],
        reason: "app.shutdown_timeout_s is out of range (line 3, column 23)",
    },
    Case {
        name: "sources sharing a table pair disagree",
        edits: &[
            ("tasks:\n", SECOND_SOURCE),
            (
                "    handler: {component: COMPONENT}\n",
                "    handler: {component: COMPONENT}\n  - name: echo2\n    source: jobs2\n    handler: {component: COMPONENT}\n",
            ),
        ],
        reason: "resources.jobs2: sources 'jobs' and 'jobs2' share connector 'db' and tables \
                 onestep_executions/onestep_execution_attempts but set different limits, \
                 auto_create or reclaim_batch_size: give them the same values or different \
                 tables (line 15, column 5)",
    },
    Case {
        name: "connector of the other database kind",
        edits: &[("    type: mysql\n", "    type: postgres\n")],
        reason: "resources.jobs: resource 'db' must be a MySQLConnector (it is a PostgresConnector, which a mysql_execution_source cannot use) (line 9, column 16)",
    },
    Case {
        name: "unknown connector",
        edits: &[("connector: db", "connector: nodb")],
        reason: "resources.jobs: unknown resource 'nodb' (line 9, column 16)",
    },
    Case {
        name: "relative preopen guest path",
        edits: &[(
            TASK,
            "    source: jobs\n    sandbox: {preopens: [{host: /tmp, guest: data}]}\n",
        )],
        reason: "tasks[0].sandbox.preopens[0]: guest path 'data' must be absolute and must not contain '..' (line 17, column 46)",
    },
    Case {
        name: "open-handle cap of zero",
        edits: &[(
            TASK,
            "    source: jobs\n    sandbox: {max_open_handles: 0}\n",
        )],
        reason: "tasks[0].sandbox: max_open_handles must be an integer from 1 to 65536 (line 17, column 33)",
    },
];

/// Runs `onestep ARGS…`, killing it after [`BOUND`]: (exit code, stderr), or `None` when it had
/// to be killed.
fn run_bounded(args: &[&str]) -> Result<Option<(i32, String)>> {
    let mut child = Command::new(onestep_bin()?)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("cannot run onestep")?;
    let started = Instant::now();
    while child.try_wait()?.is_none() {
        if started.elapsed() > BOUND {
            child.kill()?;
            child.wait()?;
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output()?;
    Ok(Some((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )))
}

#[test]
fn files_run_rejects_are_rejected_by_check_strict() -> Result<()> {
    let component = guest("echo")?;
    let component = component.display().to_string();
    let server = std::env::var("ONESTEP_TEST_MARIADB_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/".to_owned());
    let dsn = format!("{}/onestep_e2e_check_vs_run", server.trim_end_matches('/'));
    let dir = tempfile::tempdir()?;
    let base = base(Path::new(&component), &dsn);
    let mut failures = Vec::new();
    for (i, case) in CASES.iter().enumerate() {
        let mut text = base.clone();
        for (from, to) in case.edits {
            let from = from.replace("COMPONENT", &component);
            ensure!(
                text.contains(&from),
                "{}: the base has no {from:?}",
                case.name
            );
            text = text.replace(&from, &to.replace("COMPONENT", &component));
        }
        let path = dir.path().join(format!("bad-{i}.yaml"));
        std::fs::write(&path, &text).context("cannot write a temp file")?;
        let target = path.display().to_string();
        let expected = format!("onestep: failed to load {target}: {}\n", case.reason);
        for args in [
            vec!["run", target.as_str()],
            vec!["check", target.as_str()],
            vec!["check", "--strict", target.as_str()],
        ] {
            match run_bounded(&args)? {
                None => failures.push(format!(
                    "{} ({args:?}): still running after {BOUND:?}: the file was accepted",
                    case.name
                )),
                Some((code, stderr)) => {
                    let strict = args.contains(&"--strict");
                    if code != 2 || (!strict && stderr != expected) {
                        failures.push(format!(
                            "{} ({args:?}): exit {code}, stderr {stderr:?}; expected exit 2{}",
                            case.name,
                            if strict {
                                String::new()
                            } else {
                                format!(", stderr {expected:?}")
                            }
                        ));
                    } else if strict
                        && !stderr.starts_with(&format!("onestep: failed to load {target}: "))
                    {
                        failures.push(format!(
                            "{} ({args:?}): stderr {stderr:?} is not a load error",
                            case.name
                        ));
                    }
                }
            }
        }
    }
    ensure!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unloadable_components_are_rejected_by_check_and_quarantined_by_run() -> Result<()> {
    let server = std::env::var("ONESTEP_TEST_MARIADB_URL")
        .unwrap_or_else(|_| "mysql://root@127.0.0.1:3306/".to_owned());
    // `run` opens its sources before it loads the components: give it a database.
    let db = TestDb::create("mariadb", &server).await?;
    let result = tokio::task::spawn_blocking({
        let dsn = db.dsn.clone();
        move || unloadable_cases(&dsn)
    })
    .await;
    db.drop_db().await?;
    result?
}

/// Runs `onestep run target` with its only task's component unloadable: the worker starts, its
/// `/readyz` answers 503 (every task quarantined) and lists the task; returns the error it
/// gives, after a clean stop (exit 0).
fn quarantine_message(target: &str) -> Result<String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let addr = format!("127.0.0.1:{port}");
    let mut child = Command::new(onestep_bin()?)
        .args(["run", "--metrics-addr", &addr, target])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot run onestep")?;
    let started = Instant::now();
    let outcome = loop {
        if let Some(status) = child.try_wait()? {
            break Err(anyhow::anyhow!(
                "run exited ({status}) instead of quarantining the task"
            ));
        }
        if started.elapsed() > BOUND {
            break Err(anyhow::anyhow!(
                "/readyz listed no quarantined task within {BOUND:?}"
            ));
        }
        let out = Command::new("curl")
            .args([
                "-sS",
                "-o",
                "-",
                "-w",
                "\n%{http_code}",
                &format!("http://{addr}/readyz"),
            ])
            .output()
            .context("cannot run curl")?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if let Some((body, code)) = text.rsplit_once('\n')
            && let Ok(doc) = serde_json::from_str::<serde_json::Value>(body)
            && doc["quarantined"][0]["task"] == "echo"
        {
            ensure!(
                code == "503",
                "/readyz {code} with every task quarantined: {doc}"
            );
            ensure!(
                doc["status"] == "not_ready" && doc["quarantined"][0]["reason"] == "load",
                "{doc}"
            );
            break Ok(doc["quarantined"][0]["error"]
                .as_str()
                .unwrap_or_default()
                .to_owned());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    let deadline = Instant::now() + BOUND;
    let code = loop {
        if let Some(status) = child.try_wait()? {
            break status.code();
        }
        if Instant::now() > deadline {
            child.kill()?;
            child.wait()?;
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let message = outcome?;
    ensure!(code == Some(0), "run exited {code:?} after SIGTERM");
    Ok(message)
}

fn unloadable_cases(dsn: &str) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let garbage = dir.path().join("garbage.wasm");
    std::fs::write(&garbage, b"garbage").context("cannot write a temp file")?;
    let bad_import = guest("bad-import")?;
    let fetch = guest("fetch")?;
    let cases = [
        (
            fetch.clone(),
            format!(
                "task 'echo': cannot load {}: component fetch.wasm cannot run in its sandbox: \
                 it imports wasi:http/outgoing-handler@0.2.12 (outbound HTTP) but the task's \
                 sandbox grants no network: list the origins it may reach under \
                 sandbox.network.allow",
                fetch.display()
            ),
        ),
        (
            bad_import.clone(),
            format!(
                "task 'echo': cannot load {}: component bad-import.wasm cannot be linked: \
                 component imports instance `onestep:bad-import/missing`",
                bad_import.display()
            ),
        ),
        (
            garbage.clone(),
            format!(
                "task 'echo': cannot load {}: component garbage.wasm is not a WebAssembly \
                 component: it is not a WebAssembly file (7 bytes, no `\\0asm` header)",
                garbage.display()
            ),
        ),
    ];
    for (i, (component, reason)) in cases.iter().enumerate() {
        let path = dir.path().join(format!("unloadable-{i}.yaml"));
        std::fs::write(&path, base(component, dsn)).context("cannot write a temp file")?;
        let target = path.display().to_string();
        let mut messages = Vec::new();
        for (args, code, prefix) in [
            (
                vec!["check", target.as_str()],
                0,
                format!("onestep: problem in {target}: "),
            ),
            (
                vec!["check", "--strict", target.as_str()],
                2,
                format!("onestep: failed to load {target}: "),
            ),
        ] {
            let Some((got, stderr)) = run_bounded(&args)? else {
                anyhow::bail!(
                    "{args:?}: still running after {BOUND:?}: the component was accepted"
                );
            };
            // `run` logs before failing; its message is its last line.
            let line = stderr
                .lines()
                .rev()
                .find(|l| l.starts_with(&prefix))
                .with_context(|| format!("{args:?}: no {prefix:?} line in {stderr:?}"))?;
            ensure!(
                got == code,
                "{args:?}: exit {got}, expected {code}; {stderr:?}"
            );
            let message = &line[prefix.len()..];
            ensure!(
                message.starts_with(reason.as_str()),
                "{args:?}: {message:?} does not start with {reason:?}"
            );
            messages.push(message.to_owned());
        }
        messages.push(quarantine_message(&target)?);
        ensure!(
            messages.iter().all(|m| *m == messages[0]),
            "check and run word it differently: {messages:#?}"
        );
    }
    Ok(())
}
