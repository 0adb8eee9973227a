//! `onestep task run … --watch` (docs/cli.md#onestep-task-run): after the first report, a new
//! build written over the component file runs again (a new report with the new component's
//! SHA-256), and rewriting the same bytes does not.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use onestep_e2e::{guest, onestep_bin};
use serde_json::Value;

/// Kills the watching process when the test ends, however it ends.
struct Killed(std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn watch_runs_again_when_the_component_changes() -> Result<()> {
    let echo = std::fs::read(guest("echo")?)?;
    let inspect = std::fs::read(guest("inspect")?)?;
    let dir = tempfile::tempdir()?;
    let component = dir.path().join("handler.wasm");
    std::fs::write(&component, &echo)?;
    let file = dir.path().join("app.yaml");
    std::fs::write(
        &file,
        "apiVersion: onestep/v1alpha1
kind: App
app: {name: watched}
resources:
  db: {type: mysql, dsn: 'mysql://nobody@127.0.0.1:1/none'}
  jobs: {type: mysql_execution_source, connector: db, namespace: w, task_names: [h], lease_duration_s: 9.0, heartbeat_interval_s: 3.0}
tasks:
  - name: h
    source: jobs
    handler: {component: handler.wasm, params: {round: 2}}
",
    )?;
    let mut child = Command::new(onestep_bin()?)
        .args(["task", "run"])
        .arg(&file)
        .args(["h", "--payload", "{\"n\":1}", "--json", "--watch"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .context("cannot start onestep")?;
    let stdout = child.stdout.take().context("no stdout")?;
    let _child = Killed(child);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let next = |what: &str| -> Result<Value> {
        let line = rx
            .recv_timeout(Duration::from_secs(120))
            .with_context(|| format!("no report {what}"))?;
        serde_json::from_str(&line).with_context(|| format!("not JSON: {line}"))
    };
    let first = next("at start")?;
    ensure!(first["result"] == serde_json::json!({"n": 1}), "{first}");
    // Give the watch time to start (it begins after the first report).
    std::thread::sleep(Duration::from_millis(500));

    // The same bytes again: no run. Then a new build renamed over the file: a run.
    std::fs::write(&component, &echo)?;
    std::thread::sleep(Duration::from_millis(800));
    let tmp = dir.path().join("handler.wasm.tmp");
    std::fs::write(&tmp, &inspect)?;
    std::fs::rename(&tmp, &component)?;
    let second = next("after the new build")?;
    ensure!(
        second["component_sha256"] != first["component_sha256"],
        "{first} {second}"
    );
    ensure!(
        second["result"]["params"] == serde_json::json!({"round": 2})
            && second["result"]["payload"] == serde_json::json!({"n": 1}),
        "the second run was not the new build: {second}"
    );
    ensure!(
        rx.recv_timeout(Duration::from_millis(800)).is_err(),
        "a third run without a change"
    );
    Ok(())
}
