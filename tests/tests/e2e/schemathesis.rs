//! schemathesis (a property-based HTTP API tester, from PyPI) against `onestep serve`'s own
//! `/openapi.json` on every server: every operation is called with generated valid and invalid
//! input (path, query, headers, bodies; NUL characters included), with an operator's token and
//! with none. Zero server errors are allowed: no 5xx, no dropped connection, no panic in the
//! server's log (docs/security.md#api-fuzzing).
//!
//! The command comes from `scripts/schemathesis-venv.sh` (`$ONESTEP_SCHEMATHESIS`, set by
//! scripts/test.sh); without it the test fails, it never skips.

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use onestep_e2e::{Schedule, e2e_config, on_each_server, onestep_bin, wait_for};

const TOKENS: &str = "st-operator-token-0123456789=st-a:operate,st-reader-token-0123456789=st-a:read,st-other-tenant-token-0123=st-b";

/// `onestep serve` as a child process, killed when dropped.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn schemathesis() -> Result<PathBuf> {
    let path = std::env::var_os("ONESTEP_SCHEMATHESIS").context(
        "ONESTEP_SCHEMATHESIS is not set: run the tests through scripts/test.sh (it installs schemathesis with scripts/schemathesis-venv.sh)",
    )?;
    Ok(PathBuf::from(path))
}

fn healthz(base: &str) -> bool {
    Command::new("curl")
        .args(["-sf", "-o", "/dev/null", &format!("{base}/healthz")])
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

#[tokio::test]
async fn schemathesis_finds_no_server_error() -> Result<()> {
    let st = schemathesis()?;
    on_each_server(
        "schemathesis",
        &e2e_config("schemathesis.yaml"),
        Schedule::Exclusive,
        move |env| {
            let st = st.clone();
            async move {
                let dir = tempfile::tempdir()?;
                let log = dir.path().join("serve.log");
                let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
                let listen = format!("127.0.0.1:{port}");
                let base = format!("http://{listen}");
                let out = std::fs::File::create(&log)?;
                let child = Command::new(onestep_bin()?)
                    .arg("serve")
                    .arg(e2e_config("schemathesis.yaml"))
                    .envs(env.onestep_env())
                    .env("ONESTEP_API_LISTEN", &listen)
                    .env("ONESTEP_ST_TOKENS", TOKENS)
                    .stdout(Stdio::from(out.try_clone()?))
                    .stderr(Stdio::from(out))
                    .spawn()
                    .context("cannot start onestep serve")?;
                let mut server = Server(child);
                let probe = base.clone();
                wait_for("the API to answer /healthz", Duration::from_secs(30), || {
                    let ok = healthz(&probe);
                    async move { Ok(ok.then_some(())) }
                })
                .await?;

                let report = dir.path().join("report.xml");
                let mut runs = Vec::new();
                // The operator's run is the long one (every operation reachable); the anonymous
                // run checks that refusing a request without a token never fails either.
                for (label, auth, examples) in [
                    (
                        "operator",
                        Some("Authorization: Bearer st-operator-token-0123456789"),
                        "150",
                    ),
                    ("anonymous", None, "15"),
                ] {
                    let mut cmd = Command::new(&st);
                    cmd.arg("run")
                        .arg(format!("{base}/openapi.json"))
                        .args(["--checks", "not_a_server_error"])
                        .args(["--max-examples", examples, "--seed", "20261205"])
                        .args(["--phases", "examples,coverage,fuzzing"])
                        .args(["--generation-allow-x00", "true"])
                        // One worker: hypothesis' strategy descriptions are not thread-safe on
                        // Python 3.11 (an internal error, not a finding, was seen with two).
                        .args(["--request-timeout", "20", "--workers", "1"])
                        .args(["--no-color", "--suppress-health-check", "all"])
                        .args(["--report", "junit", "--report-junit-path"])
                        .arg(&report)
                        .args(["--generation-database", "none"])
                        .current_dir(dir.path());
                    if let Some(h) = auth {
                        cmd.args(["-H", h]);
                    }
                    let output = cmd.output().context("cannot run schemathesis")?;
                    let text = format!(
                        "{}{}",
                        String::from_utf8_lossy(&output.stdout),
                        String::from_utf8_lossy(&output.stderr)
                    );
                    let summary: Vec<&str> = text
                        .lines()
                        .filter(|l| {
                            l.contains("passed") || l.contains("failed") || l.contains("error")
                        })
                        .rev()
                        .take(3)
                        .collect();
                    println!("[{}] schemathesis ({label}): {summary:?}", env.server());
                    runs.push((label, output.status.success(), text));
                }
                let alive = matches!(server.0.try_wait(), Ok(None));
                let serve_log = std::fs::read_to_string(&log).unwrap_or_default();
                let _ = server.0.kill();
                for (label, ok, text) in &runs {
                    ensure!(
                        *ok,
                        "[{}] schemathesis ({label}) found failures:\n{text}\n--- serve log (tail) ---\n{}",
                        env.server(),
                        tail(&serve_log, 60)
                    );
                }
                ensure!(alive, "[{}] onestep serve exited during the run:\n{}", env.server(), tail(&serve_log, 60));
                ensure!(
                    !serve_log.contains("panicked"),
                    "[{}] the server logged a panic:\n{}",
                    env.server(),
                    tail(&serve_log, 60)
                );
                Ok(())
            }
        },
    )
    .await
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
