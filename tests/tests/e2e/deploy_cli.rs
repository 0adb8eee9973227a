//! `onestep deploy` and `onestep deployments …` (docs/cli.md#onestep-deploy) as subprocesses
//! against a real `onestep serve` on MariaDB, MySQL and PostgreSQL: deploy a manifest with a real
//! component, repeat it (nothing written), deploy v2, list, roll back to v1, read the audit,
//! deactivate; a deploy over the operator's ceiling, into another namespace, naming a secret
//! the operator does not hold, with an unlinkable or a garbage component is refused with its
//! reason and writes no version or event; a `submit` token cannot deploy; and `onestep
//! components gc` on the database removes the unreferenced uploads only.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use onestep_e2e::{Backend, TestDb};
use onestep_e2e::{guest, onestep_bin, run_cli, wait_for};
use serde_json::Value;

use crate::api_flow::curl;

const DEPLOY_TOKEN: &str = "deploy-token-e2e-aaaaaaaaaaaaaaaa";
const SUBMIT_TOKEN: &str = "submit-token-e2e-aaaaaaaaaaaaaaaa";

struct Serve(Child);

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn write_config(dir: &Path, kind: &str) -> Result<std::path::PathBuf> {
    let path = dir.join("onestep.yaml");
    std::fs::write(
        &path,
        format!(
            "apiVersion: onestep/v1alpha1
kind: App
app: {{name: e2e-deploy}}
resources:
  db:
    type: {kind}
    dsn: \"${{ONESTEP_DSN}}\"
api:
  listen: \"${{ONESTEP_API_LISTEN}}\"
  connector: db
  tokens_env: ONESTEP_E2E_TOKENS
  auto_create: true
deployments:
  policy:
    namespaces:
      team-a:
        concurrency: 4
        sandbox: {{memory_limit_bytes: 134217728, network: {{allow: [https://api.example.com]}}}}
"
        ),
    )?;
    Ok(path)
}

fn manifest(
    dir: &Path,
    name: &str,
    component: &Path,
    concurrency: u32,
) -> Result<std::path::PathBuf> {
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!(
            "apiVersion: onestep/v1alpha1
kind: Deployment
namespace: team-a
task: echo
handler:
  component: {}
  params: {{greeting: hi}}
concurrency: {concurrency}
",
            component.display()
        ),
    )?;
    Ok(path)
}

/// Runs `onestep ARGS` with the API's URL and `token`; (exit code, stdout, stderr).
fn cli(base: &str, token: &str, args: &[&str]) -> Result<(i32, String, String)> {
    run_cli(
        args,
        &[("ONESTEP_API_URL", base), ("ONESTEP_API_TOKEN", token)],
    )
}

async fn case(server: &'static str, root: &str) -> Result<()> {
    let db = TestDb::create(server, root).await?;
    let result = run_case(&db).await;
    let _ = db.drop_db().await;
    result
}

async fn run_case(db: &TestDb) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let kind = match db.backend() {
        Backend::Postgres => "postgres",
        Backend::Mysql => "mysql",
    };
    let config = write_config(dir.path(), kind)?;
    let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let listen = format!("127.0.0.1:{port}");
    let base = format!("http://{listen}");
    let log = dir.path().join("serve.log");
    let out = std::fs::File::create(&log)?;
    let tokens = format!("{DEPLOY_TOKEN}=team-a:deploy,{SUBMIT_TOKEN}=team-a:submit");
    let _serve = Serve(
        Command::new(onestep_bin()?)
            .arg("serve")
            .arg(&config)
            .env("ONESTEP_DSN", &db.dsn)
            .env("ONESTEP_API_LISTEN", &listen)
            .env("ONESTEP_E2E_TOKENS", &tokens)
            .env("ONESTEP_WASM_CACHE", dir.path().join("cache"))
            .stdout(Stdio::from(out.try_clone()?))
            .stderr(Stdio::from(out))
            .spawn()
            .context("cannot start onestep serve")?,
    );
    let health = format!("{base}/healthz");
    wait_for(
        "the API to answer /healthz",
        Duration::from_secs(60),
        || async { Ok((curl(&[health.as_str()])?.0 == 200).then_some(())) },
    )
    .await
    .with_context(|| std::fs::read_to_string(&log).unwrap_or_default())?;

    let echo = guest("echo")?;
    let inspect = guest("inspect")?;
    let v1 = manifest(dir.path(), "v1.yaml", &echo, 1)?;
    let (code, out, err) = cli(
        &base,
        DEPLOY_TOKEN,
        &["deploy", &v1.to_string_lossy(), "--note", "first"],
    )?;
    ensure!(code == 0, "deploy v1: {code} {out} {err}");
    ensure!(out.contains("deployed team-a/echo version 1"), "{out}");
    ensure!(out.contains("uploaded"), "{out}");

    // The same again: nothing written.
    let (code, out, err) = cli(&base, DEPLOY_TOKEN, &["deploy", &v1.to_string_lossy()])?;
    ensure!(code == 0, "repeat: {code} {out} {err}");
    ensure!(
        out.contains("unchanged: already active team-a/echo version 1"),
        "{out}"
    );

    // v2: another component (--component overrides the manifest's) and other settings.
    let v2 = manifest(dir.path(), "v2.yaml", &echo, 2)?;
    let (code, out, err) = cli(
        &base,
        DEPLOY_TOKEN,
        &[
            "deploy",
            &v2.to_string_lossy(),
            "--component",
            &inspect.to_string_lossy(),
            "--json",
        ],
    )?;
    ensure!(code == 0, "deploy v2: {code} {out} {err}");
    let v: Value = serde_json::from_str(&out).context("deploy --json")?;
    ensure!(v["deployed"]["deployment"]["version"] == 2, "{v}");
    ensure!(v["deployed"]["deployment"]["previous_version"] == 1, "{v}");
    ensure!(
        v["deployed"]["deployment"]["settings"]["params"]["greeting"] == "hi",
        "the typed settings are stored: {v}"
    );

    // Over the ceiling: refused with every limit.
    let greedy = manifest(dir.path(), "greedy.yaml", &echo, 16)?;
    let (code, _, err) = cli(&base, DEPLOY_TOKEN, &["deploy", &greedy.to_string_lossy()])?;
    ensure!(code == 1, "over the ceiling: {code} {err}");
    ensure!(err.contains("HTTP 422 policy_violation"), "{err}");
    ensure!(
        err.contains("concurrency: asked 16, the ceiling for namespace \"team-a\" is 4"),
        "{err}"
    );
    // An unlinkable component: the load check's reason.
    let bad = guest("bad-import")?;
    let (code, _, err) = cli(
        &base,
        DEPLOY_TOKEN,
        &[
            "deploy",
            &v1.to_string_lossy(),
            "--component",
            &bad.to_string_lossy(),
        ],
    )?;
    ensure!(code == 1, "unlinkable: {code} {err}");
    ensure!(
        err.contains("component_unloadable") && err.contains("cannot be linked"),
        "{err}"
    );
    // A submit token cannot deploy.
    let (code, _, err) = cli(&base, SUBMIT_TOKEN, &["deploy", &v1.to_string_lossy()])?;
    ensure!(
        code == 1 && err.contains("HTTP 403"),
        "submit token: {code} {err}"
    );
    // Into another namespace: the token's namespace only.
    let other = dir.path().join("other.yaml");
    std::fs::write(
        &other,
        std::fs::read_to_string(&v1)?.replace("namespace: team-a", "namespace: team-b"),
    )?;
    let (code, _, err) = cli(&base, DEPLOY_TOKEN, &["deploy", &other.to_string_lossy()])?;
    ensure!(code == 1, "another namespace: {code} {err}");
    ensure!(
        err.contains("HTTP 403")
            && err.contains("the token may deploy only into its own namespace \"team-a\""),
        "{err}"
    );
    // A secret the operator does not hold (the origin is within the ceiling: that is the only
    // violation).
    let secret = dir.path().join("secret.yaml");
    std::fs::write(
        &secret,
        format!(
            "apiVersion: onestep/v1alpha1
kind: Deployment
namespace: team-a
task: echo
handler: {{component: {}}}
sandbox:
  network:
    allow: [https://api.example.com]
    headers:
      https://api.example.com: {{Authorization: {{secret: nope}}}}
",
            echo.display()
        ),
    )?;
    let (code, _, err) = cli(&base, DEPLOY_TOKEN, &["deploy", &secret.to_string_lossy()])?;
    ensure!(code == 1, "unknown secret: {code} {err}");
    ensure!(
        err.contains("HTTP 422 policy_violation")
            && err.contains("asked secret \"nope\", which namespace \"team-a\" may not reference"),
        "{err}"
    );
    // A garbage component: uploaded (content-addressed bytes), refused by the load check.
    let garbage = dir.path().join("garbage.wasm");
    std::fs::write(&garbage, b"\0asm but not a component at all")?;
    let (code, _, err) = cli(
        &base,
        DEPLOY_TOKEN,
        &[
            "deploy",
            &v1.to_string_lossy(),
            "--component",
            &garbage.to_string_lossy(),
        ],
    )?;
    ensure!(code == 1, "garbage: {code} {err}");
    ensure!(err.contains("component_unloadable"), "{err}");
    // None of the refusals wrote a version or an event: still v1 and v2 (the list below), and
    // the events are the two deploys (and the rollback's, below).
    let (code, out, err) = cli(&base, SUBMIT_TOKEN, &["deployments", "events", "--json"])?;
    ensure!(code == 0, "events: {err}");
    let events: Value = serde_json::from_str(&out).context("events --json")?;
    ensure!(
        events["items"].as_array().map(Vec::len) == Some(2),
        "only the two deploys are events: {events}"
    );

    // List, roll back, events, deactivate.
    let (code, out, err) = cli(
        &base,
        SUBMIT_TOKEN,
        &["deployments", "list", "--task", "echo"],
    )?;
    ensure!(code == 0, "list: {err}");
    let lines: Vec<&str> = out.lines().collect();
    ensure!(lines.len() == 2, "{out}");
    ensure!(lines[0].starts_with("echo v2 active"), "{out}");
    ensure!(
        lines[1].starts_with("echo v1 superseded") && lines[1].contains("note=\"first\""),
        "{out}"
    );
    let (code, out, err) = cli(
        &base,
        DEPLOY_TOKEN,
        &[
            "deployments",
            "rollback",
            "echo",
            "1",
            "--note",
            "v2 regressed",
        ],
    )?;
    ensure!(code == 0, "rollback: {out} {err}");
    ensure!(out.starts_with("active: echo v1 active"), "{out}");
    let (code, out, _) = cli(
        &base,
        SUBMIT_TOKEN,
        &["deployments", "show", "echo", "--json"],
    )?;
    ensure!(code == 0);
    let shown: Value = serde_json::from_str(&out)?;
    ensure!(shown["active"]["version"] == 1, "{shown}");
    let (code, out, _) = cli(
        &base,
        SUBMIT_TOKEN,
        &["deployments", "events", "--task", "echo"],
    )?;
    ensure!(code == 0);
    let first = out.lines().next().unwrap_or_default();
    ensure!(
        first.contains("activate echo v1 from v2")
            && first.contains("by deploy@team-a")
            && first.contains("v2 regressed"),
        "{out}"
    );
    ensure!(out.lines().count() == 3, "{out}");
    let (code, out, err) = cli(&base, DEPLOY_TOKEN, &["deployments", "deactivate", "echo"])?;
    ensure!(
        code == 0 && out.starts_with("deactivated: echo v1 inactive"),
        "{out} {err}"
    );

    // Operator gc on the database: the unlinkable upload is unreferenced, the deployed
    // components are kept.
    let (code, out, err) = run_cli(
        &[
            "components",
            "gc",
            "--grace-s",
            "0",
            "--config",
            &config.to_string_lossy(),
            "--json",
        ],
        &[
            ("ONESTEP_DSN", db.dsn.as_str()),
            ("ONESTEP_API_LISTEN", listen.as_str()),
            ("ONESTEP_E2E_TOKENS", tokens.as_str()),
        ],
    )?;
    ensure!(code == 0, "gc: {out} {err}");
    let gc: Value = serde_json::from_str(&out)?;
    ensure!(
        gc["components"] == 2,
        "only the unreferenced uploads (unlinkable, garbage) go: {gc}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_list_rollback_through_the_cli() -> Result<()> {
    let servers = onestep_e2e::servers()?;
    let mut failures = Vec::new();
    for (server, root) in servers {
        if let Err(e) = case(server, &root).await {
            failures.push(format!("{server}: {e:#}"));
        }
    }
    ensure!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}
