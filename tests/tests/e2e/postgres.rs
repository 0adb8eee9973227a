//! PostgreSQL end to end (docs/postgres.md): `onestep migrate --dsn postgresql://…` creates the
//! tables, `onestep submit` (client command on the DSN) queues executions, a real `onestep run`
//! worker on a `postgres` connector + `postgres_execution_source` runs the real `echo` and
//! `countdown` components, `onestep wait` / `onestep get` read the results, `onestep cancel`
//! stops a running guest, and a `postgres` connector given to a `mysql_execution_source` is a
//! load error with its location.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use onestep_e2e::{WorkerProcess, guest, run_cli, wait_for};
use serde_json::{Value, json};

fn pg_server() -> String {
    std::env::var("ONESTEP_TEST_POSTGRES_URL")
        .ok()
        .filter(|v| !v.trim().is_empty())
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/".into())
}

fn worker_yaml(echo: &str, countdown: &str) -> String {
    format!(
        r#"apiVersion: onestep/v1alpha1
kind: App
app: {{name: pg-e2e, shutdown_timeout_s: 1.0, logging: {{level: INFO, format: text}}}}
resources:
  db:
    type: postgres
    dsn: "${{ONESTEP_DSN}}"
    engine_options: {{max_connections: 8}}
  echo_jobs: &jobs
    type: postgres_execution_source
    connector: db
    namespace: e2e
    task_names: [echo]
    batch_size: 8
    poll_interval_s: 0.1
    lease_duration_s: 2.0
    heartbeat_interval_s: 0.5
    worker_id: pg-worker
    auto_create: false
  countdown_jobs:
    <<: *jobs
    task_names: [countdown]
tasks:
  - name: echo
    source: echo_jobs
    handler: {{component: "{echo}"}}
  - name: countdown
    source: countdown_jobs
    handler: {{component: "{countdown}"}}
"#
    )
}

fn cli_json(args: &[&str], dsn: &str) -> Result<Value> {
    let (code, out, err) = run_cli(args, &[("ONESTEP_DSN", dsn), ("ONESTEP_NAMESPACE", "e2e")])?;
    ensure!(code == 0, "onestep {args:?} exited {code}: {err}");
    serde_json::from_str(&out).with_context(|| format!("onestep {args:?} printed {out}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_and_client_commands_on_postgres() -> Result<()> {
    let db = onestep_postgres::ScratchDatabase::create(&pg_server(), "onestep_e2e_")
        .await
        .context("create the test database (is PostgreSQL up? scripts/test-db.sh up postgres)")?;
    let dsn = db.dsn().to_owned();
    let outcome = async {
        let (code, out, err) = run_cli(&["migrate", "--dsn", &dsn], &[])?;
        ensure!(code == 0, "migrate exited {code}: {err}");
        ensure!(
            out.contains("created onestep_executions, onestep_execution_attempts"),
            "{out}"
        );
        let (code, out, _) = run_cli(&["migrate", "--dsn", &dsn], &[])?;
        ensure!(code == 0 && out.contains("already exist"), "{out}");

        let dir = tempfile::tempdir()?;
        let echo = guest("echo")?;
        let countdown = guest("countdown")?;
        let config = dir.path().join("worker.yaml");
        std::fs::write(
            &config,
            worker_yaml(
                &echo.display().to_string(),
                &countdown.display().to_string(),
            ),
        )?;
        let (code, out, err) = run_cli(
            &["check", "--strict", config.to_str().context("path")?],
            &[("ONESTEP_DSN", &dsn)],
        )?;
        ensure!(code == 0, "check exited {code}: {out}{err}");

        let payload = json!({"hello": "postgres", "n": [1, 2.5, 1e16]});
        let submitted = cli_json(
            &[
                "submit",
                "echo",
                "--payload",
                &payload.to_string(),
                "--key",
                "k1",
                "--json",
            ],
            &dsn,
        )?;
        ensure!(submitted["status"] == json!("queued"), "{submitted}");
        let id = submitted["id"].as_str().context("id")?.to_owned();
        let again = cli_json(
            &[
                "submit",
                "echo",
                "--payload",
                &payload.to_string(),
                "--key",
                "k1",
                "--json",
            ],
            &dsn,
        )?;
        ensure!(
            again["id"] == json!(id),
            "same key + payload is one execution: {again}"
        );
        let long = cli_json(
            &[
                "submit",
                "countdown",
                "--payload",
                r#"{"steps": 600, "step_ms": 100}"#,
                "--json",
            ],
            &dsn,
        )?;
        let long_id = long["id"].as_str().context("id")?.to_owned();
        // Priority and fairness key (docs/semantics.md#priority-and-fairness-key).
        let urgent = cli_json(
            &[
                "submit",
                "echo",
                "--payload",
                "1",
                "--priority",
                "0",
                "--fairness-key",
                "tenant-1",
                "--json",
            ],
            &dsn,
        )?;
        ensure!(
            urgent["priority"] == json!(0) && urgent["fairness_key"] == json!("tenant-1"),
            "{urgent}"
        );
        let urgent_id = urgent["id"].as_str().context("id")?.to_owned();
        let (code, out, _) = run_cli(
            &["get", &urgent_id, "--dsn", &dsn, "--namespace", "e2e"],
            &[],
        )?;
        ensure!(
            code == 0 && out.contains("priority:             0\nfairness_key:         tenant-1\n"),
            "get exited {code}: {out}"
        );
        let (code, out, err) = run_cli(
            &[
                "submit",
                "echo",
                "--payload",
                "1",
                "--priority",
                "10",
                "--dsn",
                &dsn,
                "--namespace",
                "e2e",
            ],
            &[],
        )?;
        ensure!(
            code != 0
                && format!("{out}{err}")
                    .contains("priority must be an integer from 0 to 9 (got 10)"),
            "submit --priority 10 exited {code}: {out}{err}"
        );

        let worker = WorkerProcess::spawn(&config, &[("ONESTEP_DSN", &dsn)], dir.path())?;
        let done = cli_json(&["wait", &id, "--timeout", "60", "--json"], &dsn)
            .with_context(|| worker.log())?;
        ensure!(
            done["status"] == json!("succeeded"),
            "{done}\n{}",
            worker.log()
        );
        let result = cli_json(&["result", &id, "--json"], &dsn)?;
        ensure!(
            onestep_core::canonical::to_canonical_string(&result["result"])
                == onestep_core::canonical::to_canonical_string(&payload),
            "result {result}"
        );
        ensure!(done["attempts"] == json!(1), "{done}");

        // The countdown guest is running; a cancel stops it.
        wait_for("countdown running", Duration::from_secs(30), || async {
            let x = cli_json(&["get", &long_id, "--json"], &dsn)?;
            Ok((x["status"] == json!("running")).then_some(()))
        })
        .await?;
        let (code, _, err) = run_cli(
            &["cancel", &long_id, "--dsn", &dsn, "--namespace", "e2e"],
            &[],
        )?;
        ensure!(code == 0, "cancel exited {code}: {err}");
        // `onestep wait` exits 1 for a terminal state other than succeeded: poll `get` instead.
        wait_for("countdown cancelled", Duration::from_secs(30), || async {
            let x = cli_json(&["get", &long_id, "--json"], &dsn)?;
            Ok((x["status"] == json!("cancelled")).then_some(()))
        })
        .await?;

        let listed = cli_json(&["list", "--json"], &dsn)?;
        ensure!(listed.to_string().contains(&id), "{listed}");
        drop(worker);

        // A postgres connector given to a mysql source is refused at load, with its place.
        let wrong = worker_yaml(
            &echo.display().to_string(),
            &countdown.display().to_string(),
        )
        .replacen(
            "type: postgres_execution_source",
            "type: mysql_execution_source",
            1,
        );
        let wrong_path = dir.path().join("wrong.yaml");
        std::fs::write(&wrong_path, wrong)?;
        let (code, out, err) = run_cli(
            &["check", wrong_path.to_str().context("path")?],
            &[("ONESTEP_DSN", &dsn)],
        )?;
        let text = format!("{out}{err}");
        ensure!(code == 2, "check exited {code}: {text}");
        ensure!(
            text.contains(
                "resources.countdown_jobs: resource 'db' must be a MySQLConnector (it is a \
                 PostgresConnector, which a mysql_execution_source cannot use) (line 21, column 9)"
            ),
            "{text}"
        );
        Ok(())
    }
    .await;
    db.drop_database().await.context("drop the test database")?;
    outcome
}

/// The fair claim through a real worker (docs/semantics.md#fair-claim): one
/// `postgres_execution_source` with `namespaces: "*"`, weights and `max_running_per_key` serves
/// executions submitted to two namespaces, with and without fairness keys; `check --strict`
/// accepts the source and a MySQL source with the same keys is refused with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_source_serves_every_namespace_fairly() -> Result<()> {
    let db = onestep_postgres::ScratchDatabase::create(&pg_server(), "onestep_e2e_")
        .await
        .context("create the test database (is PostgreSQL up? scripts/test-db.sh up postgres)")?;
    let dsn = db.dsn().to_owned();
    let outcome = async {
        let (code, _, err) = run_cli(&["migrate", "--dsn", &dsn], &[])?;
        ensure!(code == 0, "migrate exited {code}: {err}");
        let dir = tempfile::tempdir()?;
        let echo = guest("echo")?;
        let yaml = format!(
            r#"apiVersion: onestep/v1alpha1
kind: App
app: {{name: pg-fair, shutdown_timeout_s: 1.0, logging: {{level: INFO, format: text}}}}
resources:
  db:
    type: postgres
    dsn: "${{ONESTEP_DSN}}"
  jobs:
    type: postgres_execution_source
    connector: db
    namespaces: "*"
    task_names: [echo]
    weights: {{tenant-big: 3}}
    max_running_per_key: 2
    poll_interval_s: 0.1
    auto_create: false
tasks:
  - name: echo
    source: jobs
    concurrency: 4
    handler: {{component: "{}"}}
"#,
            echo.display()
        );
        let config = dir.path().join("fair.yaml");
        std::fs::write(&config, &yaml)?;
        let (code, out, err) = run_cli(
            &["check", "--strict", config.to_str().context("path")?],
            &[("ONESTEP_DSN", &dsn)],
        )?;
        ensure!(code == 0, "check exited {code}: {out}{err}");
        let mut ids = Vec::new();
        for (ns, key) in [
            ("tenant-a", None),
            ("tenant-a", Some("tenant-big")),
            ("tenant-b", None),
            ("tenant-b", Some("k2")),
        ] {
            for i in 0..3 {
                let payload = json!({"ns": ns, "i": i}).to_string();
                let mut args = vec!["submit", "echo", "--payload", &payload, "--json"];
                if let Some(k) = key {
                    args.extend(["--fairness-key", k]);
                }
                let (code, out, err) = run_cli(
                    &args,
                    &[("ONESTEP_DSN", dsn.as_str()), ("ONESTEP_NAMESPACE", ns)],
                )?;
                ensure!(code == 0, "submit exited {code}: {err}");
                let v: Value = serde_json::from_str(&out)?;
                ids.push((ns, v["id"].as_str().context("id")?.to_owned()));
            }
        }
        let worker = WorkerProcess::spawn(&config, &[("ONESTEP_DSN", &dsn)], dir.path())?;
        for (ns, id) in &ids {
            wait_for(
                "every namespace served",
                Duration::from_secs(60),
                || async {
                    let (code, out, _) = run_cli(
                        &["get", id, "--json"],
                        &[("ONESTEP_DSN", dsn.as_str()), ("ONESTEP_NAMESPACE", ns)],
                    )?;
                    ensure!(code == 0, "get exited {code}");
                    let v: Value = serde_json::from_str(&out)?;
                    Ok((v["status"] == json!("succeeded")).then_some(()))
                },
            )
            .await
            .with_context(|| worker.log())?;
        }
        drop(worker);
        // The same keys on a MySQL source: refused with the reason and the place.
        let mysql = yaml
            .replace("type: postgres\n", "type: mysql\n")
            .replace("postgres_execution_source", "mysql_execution_source");
        let mysql_path = dir.path().join("mysql.yaml");
        std::fs::write(&mysql_path, mysql)?;
        let (code, out, err) = run_cli(
            &["check", mysql_path.to_str().context("path")?],
            &[("ONESTEP_DSN", "mysql://root@127.0.0.1:3306/x")],
        )?;
        let text = format!("{out}{err}");
        ensure!(code == 2, "check exited {code}: {text}");
        ensure!(
            text.contains("namespaces: a claim of several namespaces")
                && text.contains("not implemented by the MySQL and SQLite backends yet"),
            "{text}"
        );
        Ok(())
    }
    .await;
    db.drop_database().await.context("drop the test database")?;
    outcome
}
