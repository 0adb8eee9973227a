//! What the stores cannot hold, through the real `onestep serve` on every server: dates outside
//! years 1000–9999, leap seconds, U+0000 in JSON and in text filters, JSON nested deeper than 31.
//! Every such request gets the same 422 and error code on MariaDB, MySQL 9 and PostgreSQL (before:
//! a panic in the MySQL driver, 500 on MariaDB for deep JSON, 500 on PostgreSQL for a NUL, 500
//! with driver text for a leap second), the values at the bounds are accepted everywhere, and the
//! server never logs a panic (docs/semantics.md#storable-values).

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use onestep_e2e::{Schedule, e2e_config, on_each_server, wait_for};
use serde_json::{Value, json};

use crate::api_flow::{Server, curl};

fn post(base: &str, body: &Value) -> Result<(u16, Value)> {
    let url = format!("{base}/v1/executions");
    let body = body.to_string();
    let key = format!(
        "Idempotency-Key: storable-{}",
        uuid::Uuid::new_v4().simple()
    );
    curl(&[
        "-X",
        "POST",
        url.as_str(),
        "-H",
        "Content-Type: application/json",
        "-H",
        key.as_str(),
        "-d",
        body.as_str(),
    ])
}

fn nested(depth: usize) -> Value {
    (0..depth).fold(json!(1), |inner, _| json!([inner]))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unstorable_values_get_the_same_422_on_every_server() -> Result<()> {
    on_each_server(
        "unstorable values over HTTP",
        &e2e_config("worker.yaml"),
        Schedule::Concurrent,
        |env| async move {
            let logs = tempfile::tempdir()?;
            let log = logs.path().join("serve.log");
            let mut server = Server::spawn(&env.onestep_env(), &log)?;
            let base = server.base.clone();
            wait_for(
                "the API to answer /healthz",
                Duration::from_secs(30),
                || {
                    let ok = curl(&[format!("{base}/healthz").as_str()])
                        .map(|(code, _)| code == 200)
                        .unwrap_or(false);
                    async move { Ok(ok.then_some(())) }
                },
            )
            .await?;
            let submit = |extra: Value| {
                let mut body = json!({"task_name": "echo", "payload": {"n": 1}});
                if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
                    b.extend(e.clone());
                }
                body
            };
            let refused: Vec<(&str, (u16, Value), &str)> = vec![
                (
                    "expires_at in year 999",
                    post(
                        &base,
                        &submit(json!({"expires_at": "0999-12-31T00:00:00Z"})),
                    )?,
                    "invalid_argument",
                ),
                (
                    "expires_at on a leap second",
                    post(
                        &base,
                        &submit(json!({"expires_at": "2030-06-30T23:59:60Z"})),
                    )?,
                    "invalid_argument",
                ),
                (
                    "payload nested 32 deep",
                    post(&base, &submit(json!({"payload": nested(32)})))?,
                    "encoding_error",
                ),
                (
                    "NUL in a payload string",
                    post(&base, &submit(json!({"payload": {"a": "x\u{0}y"}})))?,
                    "encoding_error",
                ),
                (
                    "NUL in a metadata key",
                    post(&base, &submit(json!({"metadata": {"k\u{0}": 1}})))?,
                    "encoding_error",
                ),
                (
                    "created_from in year 0",
                    curl(&[
                        format!("{base}/v1/executions?created_from=0000-01-01T00:00:00Z").as_str(),
                    ])?,
                    "invalid_argument",
                ),
                (
                    "created_from on a leap second",
                    curl(&[
                        format!("{base}/v1/executions?created_from=2016-12-31T23:59:60Z").as_str(),
                    ])?,
                    "invalid_argument",
                ),
                (
                    "NUL in the task_name filter",
                    curl(&[format!("{base}/v1/executions?task_name=a%00b").as_str()])?,
                    "invalid_argument",
                ),
            ];
            for (what, (code, body), want) in &refused {
                ensure!(
                    *code == 422 && body["code"] == *want,
                    "[{}] {what}: {code} {body} (want 422 {want})",
                    env.server()
                );
                let message = body["message"].as_str().context("no message")?;
                ensure!(
                    !message.is_empty() && !message.contains("SQL") && !message.contains("driver"),
                    "[{}] {what}: message {message:?}",
                    env.server()
                );
            }
            // The bounds themselves are stored everywhere.
            let accepted = [
                (
                    "payload nested 31 deep",
                    post(&base, &submit(json!({"payload": nested(31)})))?,
                    202,
                ),
                (
                    "expires_at in year 9999",
                    post(
                        &base,
                        &submit(json!({"expires_at": "9999-12-31T00:00:00Z"})),
                    )?,
                    202,
                ),
                (
                    "created_from in year 1000",
                    curl(&[
                        format!("{base}/v1/executions?created_from=1000-01-01T00:00:00Z").as_str(),
                    ])?,
                    200,
                ),
            ];
            for (what, (code, body), want) in &accepted {
                ensure!(
                    code == want,
                    "[{}] {what}: {code} {body} (want {want})",
                    env.server()
                );
            }
            let alive = matches!(server.child.try_wait(), Ok(None));
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            ensure!(alive, "[{}] serve exited:\n{text}", env.server());
            ensure!(
                !text.contains("panicked"),
                "[{}] serve logged a panic:\n{text}",
                env.server()
            );
            Ok(())
        },
    )
    .await
}
