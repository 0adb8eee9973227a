//! `onestep render FILE [--format text|mermaid]` (docs/cli.md#onestep-render): the topology of
//! a real config (connectors → sources → tasks → components with sandbox capabilities), in
//! both formats, without credentials.

use anyhow::{Result, ensure};
use onestep_e2e::{e2e_config, guest, run_cli};

#[test]
fn render_draws_connectors_sources_tasks_and_components() -> Result<()> {
    let component = guest("echo")?;
    let dir = tempfile::tempdir()?;
    let docs = dir.path().join("docs");
    std::fs::create_dir(&docs)?;
    let file = dir.path().join("app.yaml");
    std::fs::write(
        &file,
        format!(
            "apiVersion: onestep/v1alpha1
kind: App
app: {{name: drawn}}
resources:
  db: {{type: mysql, dsn: 'mysql://app:s3cret@db.internal:3306/jobs'}}
  a_jobs: {{type: mysql_execution_source, connector: db, namespace: ns1, task_names: [a], lease_duration_s: 9.0, heartbeat_interval_s: 3.0}}
  b_jobs: {{type: mysql_execution_source, connector: db, namespace: ns1, task_names: [b], lease_duration_s: 9.0, heartbeat_interval_s: 3.0}}
tasks:
  - name: a
    source: a_jobs
    handler: {{component: {c}}}
    concurrency: 3
    timeout_s: 5.0
    sandbox:
      memory_limit_bytes: 33554432
      fuel: 1000000
      preopens: [{{host: {d}, guest: /docs, mode: ro}}]
      env: [LANG]
  - name: b
    source: b_jobs
    handler: {{component: {c}}}
    sandbox:
      network: {{allow: ['https://api.example.com']}}
",
            c = component.display(),
            d = docs.display()
        ),
    )?;
    let target = file.display().to_string();
    let (code, text, stderr) = run_cli(&["render", &target], &[])?;
    ensure!(code == 0, "{code} {stderr}");
    for line in [
        format!("app drawn ({target})"),
        "└ connector db: mysql db.internal:3306/jobs".to_owned(),
        "  └ source a_jobs: namespace ns1, task a, tables onestep_executions/onestep_execution_attempts, lease 9s, heartbeat 3s".to_owned(),
        "    └ task a: concurrency 3, timeout 5s, retry NoRetry".to_owned(),
        format!("      └ component {}", component.display()),
        format!(
            "        sandbox: memory 32 MiB; fuel 1000000; files: /docs (ro, {}); env: LANG; network: none",
            docs.display()
        ),
        "        sandbox: memory 64 MiB; fuel unlimited; files: none; env: none; network: https://api.example.com:443".to_owned(),
    ] {
        ensure!(text.lines().any(|l| l == line), "no line {line:?} in\n{text}");
    }
    ensure!(!text.contains("s3cret") && !text.contains("app:"), "{text}");

    let (code, mermaid, _) = run_cli(&["render", &target, "--format", "mermaid"], &[])?;
    ensure!(
        code == 0 && mermaid.starts_with("flowchart LR\n"),
        "{mermaid}"
    );
    for edge in [
        "  c0_db --> s0_a_jobs",
        "  c0_db --> s1_b_jobs",
        "  s0_a_jobs --> t0_a --> w0_a",
        "  s1_b_jobs --> t1_b --> w1_b",
    ] {
        ensure!(
            mermaid.lines().any(|l| l == edge),
            "no {edge:?} in\n{mermaid}"
        );
    }
    ensure!(
        mermaid.contains("w1_b[[\"echo.wasm<br/>memory 64 MiB<br/>fuel unlimited<br/>files: none<br/>env: none<br/>network: https://api.example.com:443\"]]"),
        "{mermaid}"
    );
    ensure!(!mermaid.contains("s3cret"), "{mermaid}");

    // The shipped e2e worker renders; a file that does not load exits 2.
    let worker = e2e_config("worker.yaml").display().to_string();
    let (code, text, _) = run_cli(&["render", &worker], &[])?;
    ensure!(
        code == 0 && text.contains("    └ task busy: concurrency 5, timeout 4s"),
        "{text}"
    );
    let (code, _, stderr) = run_cli(&["render", "/no/such.yaml"], &[])?;
    ensure!(
        code == 2 && stderr.starts_with("onestep: failed to load /no/such.yaml"),
        "{stderr}"
    );
    Ok(())
}
