//! The dashboard (docs/ui.md) in a real headless Chromium driven over WebDriver (fantoccini +
//! Debian's chromium-driver, installed by scripts/test-browser.sh): `onestep serve` with
//! role-bound tokens and `onestep run` as real processes on one database holding 100k finished
//! executions. Logs in, sees the seeded executions, filters by status, opens a detail page with
//! its timeline (and another with its durable steps), cancels a running execution until it is `cancelled`, retries a failed one and
//! follows the link, watches a row of the list page turn `cancelled` in place (one event stream,
//! no re-read of the list), bulk-cancels 500 queued executions and sees the count, and checks that a
//! `read` token sees no action button. Screenshots go to `target/ui-screenshots/`; page load
//! times on the 100k-row table are printed (not asserted).
//!
//! The deployments page (`deployments_page_in_a_real_browser`): a `deploy` token deploys v1 and
//! v2 of a task through the API and rolls back to v1, a worker following the namespace's
//! deployments runs attempts on each version; the page must list the versions with their
//! digests, the active one marked, and the audit (who, when, from → to), and the detail page the
//! version that ran each attempt.
//!
//! Needs `ONESTEP_TEST_CHROMEDRIVER` (the chromedriver path; scripts/test.sh sets it) — a missing
//! one fails the test.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use chrono::Utc;
use fantoccini::{Client, ClientBuilder, Locator};
use onestep_core::ExecutionStatus as S;
use onestep_core::request::SubmitRequest;
use onestep_e2e::{
    Backend, Env, NAMESPACE, Schedule, Servers, e2e_config, on_servers, onestep_bin, repo_root,
    wait_for,
};
use onestep_mysql::history::{HistoryIds, HistorySeed};
use onestep_mysql::{MySqlBackend, StoreOptions};
use onestep_postgres::PgBackend;
use serde_json::json;
use uuid::Uuid;

use crate::api_flow::curl;

const LIMIT: Duration = Duration::from_secs(60);
const OPERATOR: &str = "operator-token-0123456789abcdef";
const READER: &str = "reader-token-0123456789abcdef";

/// A child process killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

async fn wait_port(what: &str, port: u16, log: &Path) -> Result<()> {
    wait_for(what, LIMIT, || async {
        Ok(std::net::TcpStream::connect(("127.0.0.1", port))
            .is_ok()
            .then_some(()))
    })
    .await
    .with_context(|| std::fs::read_to_string(log).unwrap_or_default())
}

fn spawn_serve(env: &Env, port: u16, log: &Path) -> Result<Proc> {
    spawn_serve_with(
        env,
        port,
        log,
        &format!("{OPERATOR}=e2e:operate,{READER}=e2e:read"),
    )
}

/// `onestep serve config/e2e/ui.yaml` with the token table `tokens`.
fn spawn_serve_with(env: &Env, port: u16, log: &Path, tokens: &str) -> Result<Proc> {
    let out = std::fs::File::create(log)?;
    let child = Command::new(onestep_bin()?)
        .arg("serve")
        .arg(e2e_config("ui.yaml"))
        .envs(env.onestep_env())
        .env("ONESTEP_API_LISTEN", format!("127.0.0.1:{port}"))
        .env("ONESTEP_UI_TOKENS", tokens)
        .stdout(Stdio::from(out.try_clone()?))
        .stderr(Stdio::from(out))
        .spawn()
        .context("cannot start onestep serve")?;
    Ok(Proc(child))
}

fn spawn_driver(port: u16, log: &Path) -> Result<Proc> {
    let driver = std::env::var("ONESTEP_TEST_CHROMEDRIVER").context(
        "ONESTEP_TEST_CHROMEDRIVER is not set: run scripts/test-browser.sh (scripts/test.sh does) \
         and export what it prints",
    )?;
    let out = std::fs::File::create(log)?;
    let child = Command::new(driver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::from(out.try_clone()?))
        .stderr(Stdio::from(out))
        .spawn()
        .context("cannot start chromedriver")?;
    Ok(Proc(child))
}

async fn browser(driver_port: u16) -> Result<Client> {
    let mut caps = serde_json::Map::new();
    let mut chrome = json!({"args": ["--headless=new", "--no-sandbox", "--disable-gpu",
        "--disable-dev-shm-usage", "--window-size=1400,1000", "--no-first-run"]});
    if let Ok(bin) = std::env::var("ONESTEP_TEST_CHROMIUM") {
        chrome["binary"] = json!(bin);
    }
    caps.insert("goog:chromeOptions".into(), chrome);
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{driver_port}"))
        .await
        .context("cannot open a WebDriver session")
}

fn shots_dir() -> PathBuf {
    let dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"))
        .join("ui-screenshots");
    let _ = std::fs::create_dir_all(&dir);
    dir
}

async fn shot(c: &Client, server: &str, name: &str) -> Result<()> {
    let png = c.screenshot().await?;
    std::fs::write(shots_dir().join(format!("{server}-{name}.png")), png)?;
    Ok(())
}

/// Waits until the element `css` exists and its text satisfies `pred`; returns the text.
async fn wait_text(c: &Client, css: &str, pred: impl Fn(&str) -> bool) -> Result<String> {
    let deadline = Instant::now() + LIMIT;
    loop {
        if let Ok(e) = c.find(Locator::Css(css)).await
            && let Ok(t) = e.text().await
            && pred(&t)
        {
            return Ok(t);
        }
        if Instant::now() > deadline {
            let page = c.source().await.unwrap_or_default();
            bail!("waited {LIMIT:?} for {css}; page:\n{page}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Clicks `css`, again when the page replaced the element in between (live refresh).
async fn click(c: &Client, css: &str) -> Result<()> {
    let deadline = Instant::now() + LIMIT;
    loop {
        let outcome = match c.wait().for_element(Locator::Css(css)).await {
            Ok(e) => e.click().await.map_err(anyhow::Error::from),
            Err(e) => Err(e.into()),
        };
        match outcome {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() < deadline => {
                eprintln!("click {css}: {e}; again");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(e.context(format!("click {css}"))),
        }
    }
}

/// The `data-status` of every listed row, read in one script (no stale elements).
async fn row_statuses(c: &Client) -> Result<Vec<String>> {
    let v = c
        .execute(
            "return Array.from(document.querySelectorAll('#rows tr.row')).map(r => r.dataset.status);",
            vec![],
        )
        .await?;
    Ok(serde_json::from_value(v)?)
}

async fn count(c: &Client, css: &str) -> Result<usize> {
    Ok(c.find_all(Locator::Css(css)).await?.len())
}

async fn login(c: &Client, base: &str, token: &str) -> Result<()> {
    c.goto(&format!("{base}/ui")).await?;
    c.wait()
        .for_element(Locator::Css("#token"))
        .await?
        .send_keys(token)
        .await?;
    c.find(Locator::Css("#login-submit")).await?.click().await?;
    c.wait().for_element(Locator::Css("#rows")).await?;
    Ok(())
}

async fn confirm(c: &Client, reason: Option<&str>) -> Result<()> {
    c.wait()
        .for_element(Locator::Css("dialog[open] #confirm-ok"))
        .await?;
    if let Some(r) = reason {
        c.find(Locator::Css("#confirm-reason"))
            .await?
            .send_keys(r)
            .await?;
    }
    c.find(Locator::Css("#confirm-ok")).await?.click().await?;
    Ok(())
}

/// A page load: the page's own `onestep:<mark>` performance mark (milliseconds from the start
/// of the navigation until its content landed: shell, assets, whoami and the fragment; see
/// docs/ui.md#page-load-times), and the wall time until WebDriver saw `css` (polled every 5 ms;
/// it adds WebDriver's round trips).
struct Load {
    mark_ms: f64,
    wall_ms: f64,
    /// `path @start+duration` (ms) of every request the page made.
    requests: String,
}

impl std::fmt::Display for Load {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.0} ms (wall {:.0} ms; {})",
            self.mark_ms, self.wall_ms, self.requests
        )
    }
}

/// Loads `url`, waits for `css`, and reads the page's `onestep:<mark>` mark.
async fn timed_load(c: &Client, url: &str, css: &str, mark: &str) -> Result<Load> {
    let start = Instant::now();
    c.goto(url).await?;
    c.wait()
        .every(Duration::from_millis(5))
        .for_element(Locator::Css(css))
        .await?;
    let wall_ms = start.elapsed().as_secs_f64() * 1e3;
    let v = c
        .execute(
            "const e = performance.getEntriesByName(arguments[0]); \
             return e.length ? e[0].startTime : null;",
            vec![json!(format!("onestep:{mark}"))],
        )
        .await?;
    let mark_ms = v
        .as_f64()
        .with_context(|| format!("no performance mark onestep:{mark} on {url}: {v}"))?;
    ensure!(
        mark_ms > 0.0 && mark_ms <= wall_ms + 1.0,
        "mark onestep:{mark} at {mark_ms} ms, outside the navigation's {wall_ms} ms"
    );
    // Where the time went: each request of the page (path, start, duration), from the
    // browser's resource timing.
    let requests = c
        .execute(
            "return performance.getEntriesByType('resource').map(e => \
             new URL(e.name).pathname + ' @' + Math.round(e.startTime) + '+' + \
             Math.round(e.duration)).join(', ');",
            vec![],
        )
        .await?;
    Ok(Load {
        mark_ms,
        wall_ms,
        requests: requests.as_str().unwrap_or_default().to_owned(),
    })
}

async fn seed(env: &Env) -> Result<()> {
    // 100k finished executions, written server-side.
    let history = HistorySeed {
        namespace: "e2e".into(),
        task_name: "history".into(),
        count: 100_000,
        ids: HistoryIds::V7,
        before: Utc::now() - chrono::Duration::minutes(5),
        idempotency_keys: false,
    };
    match env.backend() {
        Backend::Mysql => {
            let backend = MySqlBackend::open(StoreOptions::new(env.db.dsn.clone())).await?;
            backend.seed_history(&history).await?;
            backend.close().await?;
        }
        Backend::Postgres => {
            let backend = PgBackend::open(StoreOptions::new(env.db.dsn.clone())).await?;
            backend.seed_history(&history).await?;
            backend.close().await?;
        }
    }
    // 500 queued executions of a task no worker runs.
    let requests: Vec<SubmitRequest> = (0..500)
        .map(|i| SubmitRequest {
            task_name: "bulkjob".into(),
            payload: json!({"i": i}),
            idempotency_key: Some(format!("bulk-{i}")),
            ..SubmitRequest::default()
        })
        .collect();
    for r in env.client.submit_many(&requests).await? {
        r?;
    }
    Ok(())
}

async fn case(env: Arc<Env>) -> Result<()> {
    let server = env.server();
    seed(&env).await?;
    let _worker = env.spawn_worker("ui-worker")?;
    let echo = env.submit("echo", json!({"greeting": "hello"})).await?;
    // Fails fatally after a log line, a progress report and stdout/stderr lines: the detail
    // page shows them with the attempt.
    let failed = env
        .submit(
            "misbehave",
            json!({"mode": "log-injection", "message": "quota exceeded for bucket reports"}),
        )
        .await?;
    let long = env
        .submit("countdown", json!({"steps": 600, "step_ms": 100}))
        .await?;
    // Followed on the list page while the test cancels it through the API.
    let later = env
        .submit("countdown", json!({"steps": 3000, "step_ms": 100}))
        .await?;
    env.wait_status(echo.id, &[S::Succeeded], LIMIT).await?;
    env.wait_status(long.id, &[S::Running], LIMIT).await?;
    env.wait_status(later.id, &[S::Running], LIMIT).await?;
    // An execution with durable steps (docs/steps.md): claimed and saved by the test itself
    // (no worker serves `history`), so its detail page has a Steps section.
    let stepped = env.submit("history", json!({"steps": 2})).await?;
    let claim = onestep_core::request::ClaimRequest {
        namespaces: onestep_core::request::NamespaceScope::One(onestep_e2e::NAMESPACE.into()),
        fair: Default::default(),
        task_names: vec!["history".into()],
        limit: 1,
        lease_duration_s: 600.0,
        worker_id: "ui-steps".into(),
        max_running: None,
    };
    let leases = env.leases().claim(&claim).await?;
    let lease = leases
        .iter()
        .find(|l| l.execution.id == stepped.id)
        .context("the stepped execution is claimed")?
        .lease_ref();
    env.steps()
        .save(&lease, "model-0", r#"{"reply":"hello"}"#)
        .await?;
    env.steps().save(&lease, "tool-0", "[1,2,3]").await?;
    let deadline = Instant::now() + LIMIT;
    while env.get(failed.id).await?.status != S::Failed {
        ensure!(Instant::now() < deadline, "misbehave did not fail");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    let logs = tempfile::tempdir()?;
    let port = free_port()?;
    let _serve = spawn_serve(&env, port, &logs.path().join("serve.log"))?;
    wait_port("onestep serve", port, &logs.path().join("serve.log")).await?;
    let driver_port = free_port()?;
    let _driver = spawn_driver(driver_port, &logs.path().join("driver.log"))?;
    wait_port("chromedriver", driver_port, &logs.path().join("driver.log")).await?;
    let base = format!("http://127.0.0.1:{port}");
    let c = browser(driver_port).await?;
    let ids = Ids {
        echo: echo.id,
        failed: failed.id,
        long: long.id,
        later: later.id,
        stepped: stepped.id,
    };
    let outcome = drive(&c, server, &base, &ids).await;
    if outcome.is_err() {
        let _ = shot(&c, server, "failure").await;
        eprintln!(
            "serve log:\n{}",
            std::fs::read_to_string(logs.path().join("serve.log")).unwrap_or_default()
        );
    }
    c.close().await?;
    outcome?;
    env.wait_status(long.id, &[S::Cancelled], LIMIT).await?;
    env.wait_status(later.id, &[S::Cancelled], LIMIT).await?;
    Ok(())
}

/// The executions [`drive`] visits.
#[derive(Clone, Copy)]
struct Ids {
    echo: Uuid,
    failed: Uuid,
    long: Uuid,
    later: Uuid,
    /// Running, with two durable steps saved by attempt 1.
    stepped: Uuid,
}

async fn drive(c: &Client, server: &str, base: &str, ids: &Ids) -> Result<()> {
    let Ids {
        echo,
        failed,
        long,
        later,
        stepped,
    } = *ids;
    // Without a token: the login prompt, no data.
    c.goto(&format!("{base}/ui")).await?;
    c.wait().for_element(Locator::Css("#token")).await?;
    shot(c, server, "login").await?;
    ensure!(count(c, "#rows").await? == 0, "no rows before logging in");
    // A wrong token is refused; the operator's is kept in session storage only.
    c.find(Locator::Css("#token"))
        .await?
        .send_keys("not-a-valid-token-at-all")
        .await?;
    c.find(Locator::Css("#login-submit")).await?.click().await?;
    wait_text(c, "#login-error", |t| t.contains("not valid")).await?;
    login(c, base, OPERATOR).await?;
    ensure!(
        !c.current_url().await?.as_str().contains(OPERATOR),
        "the token is never in a URL"
    );
    wait_text(c, "#who", |t| t.contains("operate")).await?;
    wait_text(c, "#counts", |t| {
        t.contains("history") && t.contains("100000")
    })
    .await?;
    // This server's first overview, so an uncached one (both statements ran): its duration as
    // the browser saw it.
    let first_overview = c
        .execute(
            "const e = performance.getEntriesByType('resource').filter(e => \
             new URL(e.name).pathname === '/ui/fragments/overview'); \
             return e.length ? e[e.length - 1].duration : null;",
            vec![],
        )
        .await?
        .as_f64()
        .context("no overview request after logging in")?;
    shot(c, server, "overview-list").await?;
    // The seeded executions, newest first.
    let page = c.source().await?;
    ensure!(page.contains(&long.to_string()), "running execution listed");
    ensure!(row_statuses(c).await?.len() == 50, "one page of 50");

    // Filter by status.
    c.find(Locator::Css("#f-status"))
        .await?
        .select_by_value("failed")
        .await?;
    click(c, "#apply").await?;
    // The list is replaced when the filtered page arrives: wait for rows of that status only.
    let deadline = Instant::now() + LIMIT;
    loop {
        let statuses = row_statuses(c).await?;
        if statuses == ["failed"] {
            break;
        }
        ensure!(
            Instant::now() < deadline,
            "only the failed one: {statuses:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    ensure!(
        c.current_url().await?.as_str().contains("status=failed"),
        "the filter is in the URL (shareable)"
    );
    shot(c, server, "list-failed").await?;
    // A search filter: the error type, any case, without the status filter.
    c.find(Locator::Css("#f-status"))
        .await?
        .select_by_value("")
        .await?;
    c.find(Locator::Css("#f-exc"))
        .await?
        .send_keys("handlererr")
        .await?;
    click(c, "#apply").await?;
    let deadline = Instant::now() + LIMIT;
    while !c
        .current_url()
        .await?
        .as_str()
        .contains("exception_type=handlererr")
        || row_statuses(c).await? != ["failed"]
    {
        ensure!(Instant::now() < deadline, "error-type filter");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Detail of the failed execution: timeline with its error; retry and follow the link.
    click(c, &format!("a[href='/ui/executions/{failed}']")).await?;
    wait_text(c, "#timeline", |t| t.contains("failed")).await?;
    wait_text(c, "#status", |t| t == "failed").await?;
    // Its attempt with the persisted diagnostics: worker, message, progress, digest, logs.
    wait_text(c, "#attempt-1", |t| {
        t.contains("ui-worker") && t.contains("failed")
    })
    .await?;
    wait_text(c, "#message-1", |t| {
        t == "quota exceeded for bucket reports"
    })
    .await?;
    wait_text(c, "#progress-1", |t| {
        t.starts_with("1/2 quota exceeded for bucket reports")
    })
    .await?;
    let digest = c
        .find(Locator::Css("#attempt-1 td[title^='sha256:']"))
        .await?
        .attr("title")
        .await?
        .unwrap_or_default();
    ensure!(
        digest.len() == "sha256:".len() + 64,
        "the component digest is shown: {digest:?}"
    );
    click(c, "#logs-1 summary").await?;
    let log = wait_text(c, "#log-lines-1", |t| t.contains("stderr")).await?;
    // (The guest's `print!` has no newline and its line-buffered stdout is never flushed: no
    // stdout line. `log` and the unbuffered stderr arrive.)
    ensure!(
        log.contains("info quota exceeded for bucket reports")
            && log.contains("stderr quota exceeded for bucket reports"),
        "the attempt's log lines: {log}"
    );
    shot(c, server, "detail-failed").await?;
    // It saved no step: an empty Steps section.
    wait_text(c, "#no-steps", |t| t == "No step recorded.").await?;

    // The Steps section of an execution with steps (docs/ui.md#steps): first-save order, size,
    // the attempt that saved each, no values.
    c.goto(&format!("{base}/ui/executions/{stepped}")).await?;
    wait_text(c, "#steps-summary", |t| t.starts_with("2 · ")).await?;
    let keys = c
        .execute(
            "return Array.from(document.querySelectorAll('#steps-table .step-row'))\
             .map(function (r) { return Array.from(r.cells).map(function (c) \
             { return c.textContent.trim(); }); });",
            vec![],
        )
        .await?;
    ensure!(
        keys.get(0).and_then(|r| r.get(0)) == Some(&json!("model-0"))
            && keys.get(0).and_then(|r| r.get(1)) == Some(&json!("17 B"))
            && keys.get(0).and_then(|r| r.get(3)) == Some(&json!("#1"))
            && keys.get(1).and_then(|r| r.get(0)) == Some(&json!("tool-0"))
            && keys.get(1).and_then(|r| r.get(1)) == Some(&json!("7 B"))
            && keys.as_array().map(Vec::len) == Some(2),
        "the steps table: {keys}"
    );
    ensure!(
        !c.source().await?.contains("hello"),
        "no step value on the page"
    );
    shot(c, server, "detail-steps").await?;
    c.goto(&format!("{base}/ui/executions/{failed}")).await?;
    wait_text(c, "#status", |t| t == "failed").await?;
    click(c, "#retry").await?;
    confirm(c, None).await?;
    let link = c.wait().for_element(Locator::Css("#retried-link")).await?;
    let new_id = link.text().await?;
    ensure!(new_id != failed.to_string(), "a new execution");
    link.click().await?;
    wait_text(c, "#retry-of", |t| t == failed.to_string()).await?;
    shot(c, server, "detail-retry").await?;

    // Cancel the running execution and watch it become cancelled.
    c.goto(&format!("{base}/ui/executions/{long}")).await?;
    wait_text(c, "#status", |t| t == "running").await?;
    shot(c, server, "detail-running").await?;
    click(c, "#cancel").await?;
    confirm(c, Some("from the browser test")).await?;
    wait_text(c, "#flash", |t| t.contains("Cancel requested")).await?;
    wait_text(c, "#status", |t| t == "cancelled").await?;
    ensure!(
        count(c, "#cancel").await? == 0,
        "no cancel button once cancelled"
    );
    // The live page followed the execution's event stream (docs/ui.md#detail): the server
    // counted requests on the stream's route (request counts need no token).
    let metrics = c
        .execute(
            "return fetch('/metrics').then(function (r) { return r.text(); });",
            vec![],
        )
        .await?;
    let metrics = metrics.as_str().unwrap_or_default().to_owned();
    let streamed = metrics.lines().any(|l| {
        l.starts_with("onestep_api_requests_total{")
            && l.contains(r#"route="/v1/executions/{id}/events""#)
            && l.contains(r#"status="200""#)
    });
    ensure!(
        streamed,
        "the running execution's page read /v1/executions/{{id}}/events:\n{metrics}"
    );
    shot(c, server, "detail-cancelled").await?;

    // The list page follows its live rows on one event stream (docs/ui.md#list): `later` is
    // cancelled through the API while the page shows it, and its row turns `cancelled` in place
    // — with exactly one `/v1/executions/events` request and no re-read of the list, also
    // seconds after (the page used to re-read it every 2 s).
    c.goto(&format!("{base}/ui?task_name=countdown")).await?;
    let status = format!("#rows tr.row[data-id='{later}'] .status");
    wait_text(c, &status, |t| t == "running").await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let answered = c
        .execute(
            "const t = sessionStorage.getItem('onestep.token'); \
             return fetch('/v1/executions/' + arguments[0] + '/cancel', {method: 'POST', \
             headers: {'Content-Type': 'application/json', 'Authorization': 'Bearer ' + t}, \
             body: '{}'}).then(function (r) { return r.status; });",
            vec![json!(later.to_string())],
        )
        .await?;
    ensure!(answered == json!(200), "cancel through the API: {answered}");
    wait_text(c, &status, |t| t == "cancelled").await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let requests = c
        .execute(
            "const n = function (p) { return performance.getEntriesByType('resource')\
             .filter(function (e) { return new URL(e.name).pathname === p; }).length; }; \
             return [n('/ui/fragments/list'), n('/v1/executions/events')];",
            vec![],
        )
        .await?;
    ensure!(
        requests == json!([1, 1]),
        "one list read and one stream request ([list, events]): {requests}"
    );
    let row_terminal = c
        .execute(
            "return document.querySelector(\"#rows tr.row[data-id='\" + arguments[0] + \"']\")\
             .dataset.terminal;",
            vec![json!(later.to_string())],
        )
        .await?;
    ensure!(
        row_terminal == json!("true"),
        "the row is terminal: {row_terminal}"
    );
    shot(c, server, "list-followed").await?;

    // Bulk-cancel the 500 queued bulkjob executions.
    c.goto(&format!("{base}/ui?task_name=bulkjob&status=queued"))
        .await?;
    c.wait().for_element(Locator::Css("#rows")).await?;
    click(c, "#bulk-cancel").await?;
    confirm(c, Some("bulk test")).await?;
    let done = wait_text(c, "#flash", |t| t.contains("done")).await?;
    ensure!(
        done.contains("500 matched") && done.contains("500 cancelled"),
        "{done}"
    );
    wait_text(c, "#list", |t| t.contains("No executions match")).await?;
    shot(c, server, "bulk-cancelled").await?;

    // Page loads on the 100k-row table (printed, not asserted).
    let list = timed_load(c, &format!("{base}/ui"), "#rows", "list").await?;
    let overview = {
        tokio::time::sleep(Duration::from_secs(6)).await; // past the 5 s cache: stale figures, re-read in the background
        timed_load(c, &format!("{base}/ui"), "#counts", "overview").await?
    };
    let filtered = timed_load(c, &format!("{base}/ui?status=succeeded"), "#rows", "list").await?;
    let detail = timed_load(
        c,
        &format!("{base}/ui/executions/{echo}"),
        "#timeline",
        "detail",
    )
    .await?;
    eprintln!(
        "[{server}] page load with 100k rows: list {list}, overview (stale, re-read behind it) {overview}, \
         list status=succeeded {filtered}, detail {detail}; the first (uncached) overview \
         request took {first_overview:.0} ms"
    );

    // A read token sees no action button.
    c.find(Locator::Css("#logout")).await?.click().await?;
    login(c, base, READER).await?;
    wait_text(c, "#who", |t| t.contains("read")).await?;
    ensure!(
        !c.find(Locator::Css("#bulk-cancel"))
            .await?
            .is_displayed()
            .await?,
        "read: no bulk cancel"
    );
    ensure!(
        !c.find(Locator::Css("#bulk-retry"))
            .await?
            .is_displayed()
            .await?,
        "read: no bulk retry"
    );
    shot(c, server, "read-list").await?;
    c.goto(&format!("{base}/ui/executions/{failed}")).await?;
    wait_text(c, "#status", |t| t == "failed").await?;
    ensure!(
        count(c, "[data-action]").await? == 0,
        "read: no action on the detail page"
    );
    shot(c, server, "read-detail").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_in_a_real_browser() -> Result<()> {
    on_servers(
        Servers::All,
        "dashboard in chromium",
        &e2e_config("worker.yaml"),
        Schedule::Exclusive,
        case,
    )
    .await
}

// ---------- the deployments page (docs/ui.md#deployments) ----------

const DEPLOYER: &str = "deployer-token-0123456789abcdef";
/// The task deployed through the API.
const DEPLOYED: &str = "deployed";
/// Retry delay of the deployed task: attempt 2 of a failed execution starts this long after
/// attempt 1, well after v2 is served (the workers poll every 0.3 s).
const RETRY_DELAY_S: f64 = 10.0;

/// A worker file with no task: one source following the deployments of [`NAMESPACE`].
fn deployed_worker_config(dir: &Path) -> Result<PathBuf> {
    let path = dir.join("deployed-worker.yaml");
    std::fs::write(
        &path,
        format!(
            r#"apiVersion: onestep/v1alpha1
kind: App
app: {{name: e2e-ui-deployed, shutdown_timeout_s: 5.0, logging: {{level: INFO, format: text}}}}
resources:
  db: {{type: "${{ONESTEP_E2E_BACKEND:-mysql}}", dsn: "${{ONESTEP_DSN}}"}}
  deployed:
    type: "${{ONESTEP_E2E_BACKEND:-mysql}}_execution_source"
    connector: db
    namespaces: [{NAMESPACE}]
    deployed: {{poll_s: 0.3}}
    batch_size: 4
    poll_interval_s: 0.05
    worker_id: "${{ONESTEP_WORKER_ID:-e2e-worker}}"
    auto_create: true
"#
        ),
    )?;
    Ok(path)
}

/// Uploads `guest`'s component through the API as the deployer; its digest.
fn upload(base: &str, guest: &str) -> Result<String> {
    let path = onestep_e2e::guest(guest)?;
    let (code, body) = curl(&[
        "-X",
        "POST",
        &format!("{base}/v1/components"),
        "-H",
        &format!("Authorization: Bearer {DEPLOYER}"),
        "-H",
        "Content-Type: application/wasm",
        "--data-binary",
        &format!("@{}", path.display()),
    ])?;
    ensure!(
        code == 201 || code == 200,
        "upload {guest}: HTTP {code} {body}"
    );
    body["digest"]
        .as_str()
        .map(str::to_owned)
        .with_context(|| format!("upload {guest}: no digest in {body}"))
}

/// Deploys `digest` as [`DEPLOYED`] through the API (retry: 2 attempts, [`RETRY_DELAY_S`]
/// apart); the new version.
fn deploy_version(base: &str, digest: &str, note: &str) -> Result<i64> {
    let settings = onestep_core::deploy_policy::DeploymentSettings {
        namespace: NAMESPACE.to_owned(),
        task: DEPLOYED.to_owned(),
        description: None,
        sandbox: onestep_core::sandbox::SandboxSettings::default(),
        headers: Vec::new(),
        timeout: Some(Duration::from_secs(60)),
        retry: onestep_core::retry::RetryPolicy::MaxAttempts {
            max_attempts: 2,
            delay_s: Some(RETRY_DELAY_S),
        },
        concurrency: 2,
        params: serde_json::Map::new(),
    };
    let body = json!({"settings": settings, "digest": digest, "note": note}).to_string();
    let (code, v) = curl(&[
        "-X",
        "POST",
        &format!("{base}/v1/deployments"),
        "-H",
        &format!("Authorization: Bearer {DEPLOYER}"),
        "-H",
        "Content-Type: application/json",
        "-d",
        &body,
    ])?;
    ensure!(code == 201, "deploy {digest}: HTTP {code} {v}");
    v["deployment"]["version"]
        .as_i64()
        .with_context(|| format!("no version in {v}"))
}

/// The hex of a `sha256:` digest, as attempts record it.
fn hex(digest: &str) -> &str {
    digest.trim_start_matches("sha256:")
}

/// The component digests (hex) of `id`'s attempts, by attempt number.
async fn attempt_digests(env: &Env, id: Uuid) -> Result<Vec<(i64, String)>> {
    let attempts = env
        .client
        .attempts(id)
        .await?
        .with_context(|| format!("execution {id} is missing"))?;
    Ok(attempts
        .iter()
        .map(|a| {
            (
                i64::from(a.attempt_no),
                a.diagnostics
                    .as_ref()
                    .and_then(|d| d.facts.component_digest.clone())
                    .unwrap_or_default(),
            )
        })
        .collect())
}

/// The cells' texts of every row of `css` (a table body), read in one script.
async fn table_cells(c: &Client, css: &str) -> Result<Vec<Vec<String>>> {
    let v = c
        .execute(
            "return Array.from(document.querySelectorAll(arguments[0])).map(r => \
             Array.from(r.children).map(td => (td.getAttribute('title') || '') + '|' + \
             td.textContent.trim()));",
            vec![json!(css)],
        )
        .await?;
    Ok(serde_json::from_value(v)?)
}

/// The cell text of `cell` (`title|text`): the text.
fn text(cell: &str) -> &str {
    cell.split_once('|').map_or(cell, |(_, t)| t)
}

/// The cell's `title` attribute.
fn title(cell: &str) -> &str {
    cell.split_once('|').map_or("", |(t, _)| t)
}

/// Deploys v1 and v2 of a task through the API with a worker following them, runs executions
/// on each version (one whose attempt 1 ran v1 and attempt 2 v2), rolls back to v1, and reads
/// /ui/deployments and the detail page in the browser.
async fn deployments_case(env: Arc<Env>) -> Result<()> {
    let server = env.server();
    let started = Utc::now();
    let logs = tempfile::tempdir()?;
    let port = free_port()?;
    let serve_log = logs.path().join("serve.log");
    let _serve = spawn_serve_with(
        &env,
        port,
        &serve_log,
        &format!("{OPERATOR}=e2e:operate,{DEPLOYER}=e2e:deploy"),
    )?;
    wait_port("onestep serve", port, &serve_log).await?;
    let base = format!("http://127.0.0.1:{port}");
    let outcome = async {
        // v1: `misbehave` (a retryable failure without retry-after in mode `retryable`).
        let v1_digest = upload(&base, "misbehave")?;
        let v2_digest = upload(&base, "echo")?;
        ensure!(deploy_version(&base, &v1_digest, "first")? == 1);
        let _worker = env.spawn_worker("ui-deployed-worker")?;

        // On v1 alone: succeeds at its first attempt.
        let on_v1 = env
            .submit(DEPLOYED, json!({"mode": "result", "text": "{\"v\": 1}"}))
            .await?;
        env.wait_status(on_v1.id, &[S::Succeeded], LIMIT).await?;
        // Attempt 1 on v1 fails retryably; v2 is deployed during the retry delay, so attempt
        // 2 runs v2.
        let both = env.submit(DEPLOYED, json!({"mode": "retryable"})).await?;
        env.wait_status(both.id, &[S::Retrying], LIMIT).await?;
        ensure!(deploy_version(&base, &v2_digest, "echo instead")? == 2);
        env.wait_status(both.id, &[S::Succeeded], LIMIT).await?;
        // On v2 alone.
        let on_v2 = env.submit(DEPLOYED, json!({"greeting": "v2"})).await?;
        env.wait_status(on_v2.id, &[S::Succeeded], LIMIT).await?;
        // What the attempts recorded (the page must say the same).
        ensure!(
            attempt_digests(&env, on_v1.id).await? == [(1, hex(&v1_digest).to_owned())],
            "on_v1 ran v1"
        );
        ensure!(
            attempt_digests(&env, both.id).await?
                == [
                    (1, hex(&v1_digest).to_owned()),
                    (2, hex(&v2_digest).to_owned())
                ],
            "attempt 1 ran v1, attempt 2 v2: {:?}",
            attempt_digests(&env, both.id).await?
        );
        ensure!(
            attempt_digests(&env, on_v2.id).await? == [(1, hex(&v2_digest).to_owned())],
            "on_v2 ran v2"
        );
        // Roll back to v1 through the API.
        let (code, v) = curl(&[
            "-X",
            "POST",
            &format!("{base}/v1/deployments/{DEPLOYED}/versions/1/activate"),
            "-H",
            &format!("Authorization: Bearer {DEPLOYER}"),
            "-H",
            "Content-Type: application/json",
            "-d",
            r#"{"note": "v2 regressed"}"#,
        ])?;
        ensure!(code == 200, "rollback: HTTP {code} {v}");

        let driver_port = free_port()?;
        let _driver = spawn_driver(driver_port, &logs.path().join("driver.log"))?;
        wait_port("chromedriver", driver_port, &logs.path().join("driver.log")).await?;
        let c = browser(driver_port).await?;
        let digests = (v1_digest.as_str(), v2_digest.as_str());
        let ids = (on_v1.id, both.id, on_v2.id);
        let drove = drive_deployments(&c, server, &base, started, digests, ids).await;
        if drove.is_err() {
            let _ = shot(&c, server, "deployments-failure").await;
        }
        c.close().await?;
        drove
    }
    .await;
    if outcome.is_err() {
        eprintln!(
            "serve log:\n{}",
            std::fs::read_to_string(&serve_log).unwrap_or_default()
        );
    }
    outcome
}

async fn drive_deployments(
    c: &Client,
    server: &str,
    base: &str,
    started: chrono::DateTime<Utc>,
    (v1, v2): (&str, &str),
    (on_v1, both, on_v2): (Uuid, Uuid, Uuid),
) -> Result<()> {
    login(c, base, OPERATOR).await?;
    click(c, "#nav-deployments").await?;
    let section = format!("#deployments-{DEPLOYED}");
    wait_text(c, &format!("{section} h3"), |t| t.contains("active: v1")).await?;
    shot(c, server, "deployments").await?;
    ensure!(
        c.current_url().await?.path() == "/ui/deployments",
        "the nav link opens /ui/deployments"
    );
    let when = |cell: &str| -> Result<chrono::DateTime<Utc>> {
        let t = chrono::DateTime::parse_from_rfc3339(text(cell))
            .with_context(|| format!("a time: {cell:?}"))?
            .with_timezone(&Utc);
        ensure!(
            t >= started - chrono::Duration::seconds(5) && t <= Utc::now(),
            "{t} is during the test"
        );
        Ok(t)
    };

    // Versions, newest first: version, state, digest, deployed by, deployed at, replaced, note.
    let rows = table_cells(c, &format!("{section} table.deployments tbody tr")).await?;
    ensure!(rows.len() == 2, "two versions: {rows:?}");
    let (r2, r1) = (&rows[0], &rows[1]);
    ensure!(
        text(&r2[0]) == "v2" && text(&r2[1]) == "superseded",
        "v2 superseded by the rollback: {r2:?}"
    );
    ensure!(
        text(&r1[0]) == "v1" && text(&r1[1]) == "active",
        "v1 active: {r1:?}"
    );
    ensure!(
        title(&r2[2]) == v2 && v2.contains(text(&r2[2])),
        "v2's digest: {r2:?}"
    );
    ensure!(
        title(&r1[2]) == v1 && v1.contains(text(&r1[2])),
        "v1's digest: {r1:?}"
    );
    for r in [r1, r2] {
        ensure!(text(&r[3]) == "deploy@e2e", "deployed by: {r:?}");
        when(&r[4])?;
    }
    ensure!(
        text(&r2[5]) == "v1" && text(&r1[5]).is_empty(),
        "v2 replaced v1"
    );
    ensure!(
        text(&r2[6]) == "echo instead" && text(&r1[6]) == "first",
        "notes"
    );
    ensure!(
        c.find(Locator::Css(&format!("{section} tr.d-active")))
            .await?
            .text()
            .await?
            .starts_with("v1"),
        "the active row is marked"
    );

    // Audit, newest first: #, at, action, task, version, from, digest, by, note.
    let events = table_cells(c, "#deployment-events tbody tr").await?;
    let summary: Vec<Vec<&str>> = events
        .iter()
        .map(|e| {
            [2, 3, 4, 5, 7, 8]
                .iter()
                .map(|&i| e.get(i).map_or("", |c| text(c)))
                .collect()
        })
        .collect();
    ensure!(
        summary
            == [
                vec![
                    "activate",
                    DEPLOYED,
                    "v1",
                    "v2",
                    "deploy@e2e",
                    "v2 regressed"
                ],
                vec!["deploy", DEPLOYED, "v2", "v1", "deploy@e2e", "echo instead"],
                vec!["deploy", DEPLOYED, "v1", "", "deploy@e2e", "first"],
            ],
        "the audit: {summary:?}"
    );
    ensure!(
        title(&events[0][6]) == v1 && title(&events[1][6]) == v2 && title(&events[2][6]) == v1,
        "each event's digest: {events:?}"
    );
    let mut at = Vec::new();
    for e in &events {
        at.push(when(&e[1])?);
    }
    ensure!(at.windows(2).all(|w| w[0] >= w[1]), "newest first: {at:?}");

    // The detail pages: which version ran each attempt.
    for (id, want) in [
        (both, vec![("1", v1, "v1"), ("2", v2, "v2")]),
        (on_v1, vec![("1", v1, "v1")]),
        (on_v2, vec![("1", v2, "v2")]),
    ] {
        c.goto(&format!("{base}/ui/executions/{id}")).await?;
        wait_text(c, "#status", |t| t == "succeeded").await?;
        ensure!(
            count(c, "#attempts-table tr.attempt").await? == want.len(),
            "{id}: {} attempts",
            want.len()
        );
        for (n, digest, version) in want {
            let cell = c
                .find(Locator::Css(&format!("#attempt-{n} td[title^='sha256:']")))
                .await?;
            ensure!(
                cell.attr("title").await?.as_deref() == Some(digest),
                "{id} attempt {n} ran {digest}"
            );
            let shown = c
                .find(Locator::Css(&format!("#attempt-{n} small.deployed")))
                .await?
                .text()
                .await?;
            ensure!(
                shown == version,
                "{id} attempt {n}: the page names {version}, not {shown:?}"
            );
        }
        if id == both {
            wait_text(c, "#attempt-1", |t| t.contains("retrying")).await?;
            shot(c, server, "deployments-detail").await?;
        }
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployments_page_in_a_real_browser() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let config = deployed_worker_config(dir.path())?;
    on_servers(
        Servers::All,
        "deployments page in chromium",
        &config,
        Schedule::Exclusive,
        deployments_case,
    )
    .await
}
