//! `onestep dev` (docs/cli.md#onestep-dev): API, dashboard and workers in one process. On each
//! server, with `--dsn` at a fresh database and an app file with no `api:` section whose tables
//! do not exist yet: the start line gives the dashboard URL and a token; a submit with the token
//! succeeds and is followed over HTTP; the dashboard page answers; a request without the token
//! is refused; the token is kept private in `.onestep/` (with its `.gitignore`); a new build
//! copied over the component is loaded and the next execution records its digest; SIGTERM exits
//! 0; a second start reuses the token.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use onestep_e2e::{Schedule, e2e_config, guest, on_each_server, onestep_bin, wait_for};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use uuid::Uuid;

use crate::api_flow::curl;

const LIMIT: Duration = Duration::from_secs(60);

/// The app file: one task on a component in the project directory, tables named for this test
/// (so `dev` must create them), a production DSN that must not be used, no `api:` section.
const APP: &str = r#"apiVersion: onestep/v1alpha1
kind: App
app: {name: dev-e2e, shutdown_timeout_s: 2, logging: {level: INFO, format: text}}
resources:
  db:
    type: mysql
    dsn: "mysql://prod-user:prod-pass@192.0.2.1:3306/production"
  jobs:
    type: mysql_execution_source
    connector: db
    namespace: devns
    task_names: [hot]
    table: dev_executions
    attempts_table: dev_attempts
    poll_interval_s: 0.1
    auto_create: false
tasks:
  - name: hot
    source: jobs
    handler: {component: hot.wasm}
"#;

/// A running `onestep dev`, killed when dropped.
struct Dev {
    child: Child,
    log: PathBuf,
    base: String,
    token: String,
}

impl Drop for Dev {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Dev {
    /// Starts `onestep dev` on `app` with `dsn` and reads its start line from stdout.
    fn start(app: &Path, dsn: &str, log: PathBuf) -> Result<Dev> {
        let err = std::fs::File::create(&log)?;
        let mut child = Command::new(onestep_bin()?)
            .args(["dev", "--listen", "127.0.0.1:0", "--reload-interval", "0.2"])
            .arg("--dsn")
            .arg(dsn)
            .arg(app)
            .env_remove("ONESTEP_DSN")
            .stdout(Stdio::piped())
            .stderr(Stdio::from(err))
            .spawn()
            .context("cannot start onestep dev")?;
        let stdout = child.stdout.take().context("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        // The start line ends the wait; an exit closes stdout first.
        let Some(line) = lines.next().transpose()? else {
            let _ = child.wait();
            bail!(
                "onestep dev printed nothing: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        };
        let submit = lines.next().transpose()?.unwrap_or_default();
        // Keep draining stdout so the process never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        let words: Vec<&str> = line.split_whitespace().collect();
        let (Some(url), Some(token)) = (after(&words, "dashboard"), after(&words, "token")) else {
            bail!("no dashboard URL and token in {line:?}");
        };
        ensure!(
            line.contains(&format!("(db {} from --dsn)", dsn)) && !line.contains("prod-pass"),
            "the start line names the --dsn database: {line}"
        );
        ensure!(
            submit.contains("curl") && submit.contains("\"task_name\":\"hot\""),
            "the submit hint: {submit}"
        );
        let base = url
            .strip_suffix("/ui/")
            .with_context(|| format!("dashboard URL {url}"))?
            .to_owned();
        Ok(Dev {
            child,
            log,
            base,
            token: token.to_owned(),
        })
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn auth(&self) -> String {
        format!("Authorization: Bearer {}", self.token)
    }

    fn get(&self, path: &str) -> Result<(u16, Value)> {
        curl(&["-H", &self.auth(), &format!("{}{path}", self.base)])
    }

    fn submit(&self, payload: &Value) -> Result<Uuid> {
        let body = json!({"task_name": "hot", "payload": payload}).to_string();
        let key = format!("Idempotency-Key: {}", Uuid::new_v4());
        let (code, created) = curl(&[
            "-X",
            "POST",
            &format!("{}/v1/executions", self.base),
            "-H",
            &self.auth(),
            "-H",
            &key,
            "-H",
            "Content-Type: application/json",
            "-d",
            &body,
        ])?;
        ensure!(code == 202, "submit answered {code}: {created}");
        let id = created["id"].as_str().context("no id")?;
        Ok(Uuid::parse_str(id)?)
    }

    /// Waits until `id` succeeded over HTTP and returns the digest its last attempt ran.
    async fn succeeded_digest(&self, id: Uuid) -> Result<String> {
        wait_for(&format!("{id} to succeed"), LIMIT, || async {
            let (code, body) = self.get(&format!("/v1/executions/{id}"))?;
            ensure!(code == 200, "GET answered {code}: {body}");
            ensure!(body["status"] != "failed", "{body}\n{}", self.log());
            Ok((body["status"] == "succeeded").then_some(()))
        })
        .await?;
        let (code, attempts) = self.get(&format!("/v1/executions/{id}/attempts"))?;
        ensure!(code == 200, "attempts answered {code}: {attempts}");
        let items = attempts["items"].as_array().context("no attempts")?;
        let last = items.last().context("no attempt")?;
        Ok(last["component_digest"]
            .as_str()
            .with_context(|| format!("no digest in {last}"))?
            .to_owned())
    }

    /// SIGTERM, then the exit code.
    async fn stop(mut self) -> Result<Option<i32>> {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()?;
        ensure!(status.success(), "kill -TERM failed");
        wait_for("onestep dev to exit", LIMIT, || {
            let exited = self.child.try_wait().map(|s| s.map(|s| s.code()));
            async move { Ok(exited?) }
        })
        .await
    }
}

/// The word after `key` in `words`.
fn after<'a>(words: &[&'a str], key: &str) -> Option<&'a str> {
    let i = words.iter().position(|w| *w == key)?;
    words.get(i + 1).copied()
}

fn sha256(path: &Path) -> Result<String> {
    Ok(hex::encode(Sha256::digest(std::fs::read(path)?)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_serves_runs_reloads_and_stops() -> Result<()> {
    on_each_server(
        "onestep dev",
        &e2e_config("worker.yaml"),
        Schedule::Concurrent,
        |env| async move {
            let project = tempfile::tempdir()?;
            let app = project.path().join("app.yaml");
            std::fs::write(&app, APP)?;
            let component = project.path().join("hot.wasm");
            std::fs::copy(guest("echo")?, &component)?;
            let (echo, flaky) = (sha256(&guest("echo")?)?, sha256(&guest("flaky")?)?);
            let dsn = env.db.dsn.clone();
            let dev = Dev::start(&app, &dsn, project.path().join("dev.log"))?;

            // Submit with the token, follow over HTTP; the tables were created by dev.
            let payload = json!({"succeed_on_attempt": 1, "n": 1});
            let first = dev.submit(&payload)?;
            let digest = dev.succeeded_digest(first).await?;
            ensure!(digest == echo, "first build {digest}, expected echo {echo}");
            let (code, result) = dev.get(&format!("/v1/executions/{first}/result"))?;
            ensure!(
                code == 200 && result["result"] == payload,
                "{code}: {result}"
            );
            let rows = env
                .db
                .query_strings("SELECT status FROM dev_executions")
                .await?;
            ensure!(rows == [Some("succeeded".to_owned())], "rows {rows:?}");

            // The dashboard page; a request without the token is refused.
            let out = Command::new("curl")
                .args(["-sS", "-w", "\n%{http_code}", &format!("{}/ui/", dev.base)])
                .output()?;
            let page = String::from_utf8_lossy(&out.stdout);
            ensure!(
                page.ends_with("\n200") && page.contains("<html"),
                "dashboard: {page}"
            );
            let (code, _) = curl(&[&format!("{}/v1/executions", dev.base)])?;
            ensure!(code == 401, "no token answered {code}");

            // The token is private, .onestep/ is ignored by git.
            let dir = project.path().join(".onestep");
            ensure!(std::fs::read_to_string(dir.join(".gitignore"))? == "*\n");
            let kept = std::fs::read_to_string(dir.join("dev-token"))?;
            ensure!(kept.trim() == dev.token, "the kept token");
            #[cfg(unix)]
            {
                use std::os::unix::fs::PermissionsExt;
                let mode = std::fs::metadata(dir.join("dev-token"))?
                    .permissions()
                    .mode();
                ensure!(mode & 0o777 == 0o600, "token mode {mode:o}");
            }

            // A rebuild: another component copied over the file; the next execution runs it.
            let tmp = project.path().join("hot.wasm.tmp");
            std::fs::copy(guest("flaky")?, &tmp)?;
            std::fs::rename(&tmp, &component)?;
            wait_for("the new build to load", LIMIT, || async {
                Ok(dev.log().contains("component reloaded").then_some(()))
            })
            .await
            .with_context(|| dev.log())?;
            let second = dev.submit(&payload)?;
            let digest = dev.succeeded_digest(second).await?;
            ensure!(
                digest == flaky,
                "after the rebuild {digest}, expected {flaky}"
            );

            let token = dev.token.clone();
            let log = dev.log.clone();
            let code = dev.stop().await?;
            ensure!(
                code == Some(0),
                "exit {code:?}: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );

            // A second start reuses the token.
            let again = Dev::start(&app, &dsn, project.path().join("dev2.log"))?;
            ensure!(again.token == token, "the token changed on restart");
            let code = again.stop().await?;
            ensure!(code == Some(0), "second exit {code:?}");
            Ok(())
        },
    )
    .await
}
