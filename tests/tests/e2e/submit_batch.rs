//! `onestep submit --batch FILE.jsonl` (docs/cli.md#batch-submit) on MariaDB, MySQL,
//! PostgreSQL and an SQLite file: a mixed file (new items, a replay of an earlier submit, a
//! duplicate within the file, a conflict, two invalid items) answers line by line and exits 1,
//! the stored rows are what the lines asked for, and running it again replays every keyed line;
//! a file with malformed lines exits 2 naming each one and writes nothing; 1,001 lines on stdin
//! go in two chunks, every one answered.

use std::io::Write as _;
use std::process::{Command, Stdio};

use anyhow::{Context, Result, ensure};
use onestep_e2e::{Schedule, e2e_config, on_each_server, onestep_bin, run_cli};
use serde_json::{Value, json};

const NS: &str = "batch";

fn env(dsn: &str) -> [(&'static str, &str); 2] {
    [("ONESTEP_DSN", dsn), ("ONESTEP_NAMESPACE", NS)]
}

/// `onestep submit --batch PATH --json`: the exit code and one parsed object per output line.
fn batch_json(dsn: &str, path: &str) -> Result<(i32, Vec<Value>, String)> {
    let (code, out, err) = run_cli(&["submit", "--batch", path, "--json"], &env(dsn))?;
    let lines = out
        .lines()
        .map(|l| serde_json::from_str(l).with_context(|| format!("not JSON: {l}\n{out}")))
        .collect::<Result<Vec<Value>>>()?;
    Ok((code, lines, err))
}

/// Every execution of the namespace (`onestep list --all --json`).
fn listed(dsn: &str) -> Result<Vec<Value>> {
    let (code, out, err) = run_cli(&["list", "--all", "--limit", "200", "--json"], &env(dsn))?;
    ensure!(code == 0, "list exited {code}: {err}");
    let page: Value = serde_json::from_str(&out)?;
    Ok(page["items"].as_array().context("items")?.clone())
}

async fn batch_case(dsn: String) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let (code, out, err) = run_cli(
        &[
            "submit",
            "echo",
            "--payload",
            r#"{"a":1}"#,
            "--key",
            "k-pre",
            "--json",
        ],
        &env(&dsn),
    )?;
    ensure!(code == 0, "submit exited {code}: {err}");
    let pre: Value = serde_json::from_str(&out)?;
    let pre_id = pre["id"].as_str().context("id")?.to_owned();

    let file = dir.path().join("mixed.jsonl");
    let lines = [
        r#"{"task_name": "echo", "payload": {"n": 1}, "idempotency_key": "k1"}"#,
        "",
        r#"{"task": "echo", "payload": {"a": 1}, "idempotency_key": "k-pre"}"#,
        r#"{"task_name": "echo", "payload": {"a": 2}, "idempotency_key": "k-pre"}"#,
        r#"{"task_name": "echo", "payload": {"n": 1}, "idempotency_key": "k1"}"#,
        r#"{"task_name": "echo", "payload": 1, "priority": 12}"#,
        r#"{"task_name": "echo", "payload": 1, "expires_at": "2030-01-01T00:00:00"}"#,
        r#"{"task_name": "echo", "payload": {"p": 0}, "idempotency_key": "k8", "priority": 0, "fairness_key": "tenant-1", "metadata": {"by": "batch"}, "delay_s": 30}"#,
        r#"{"task_name": "echo", "payload": [1, 2]}"#,
    ];
    std::fs::write(&file, lines.join("\n") + "\n")?;
    let path = file.to_str().context("path")?;

    let (code, results, err) = batch_json(&dsn, path)?;
    ensure!(
        code == 1,
        "a file with failed items exits 1, got {code}: {err}"
    );
    let by_line: Vec<(u64, u64)> = results
        .iter()
        .map(|r| {
            (
                r["line"].as_u64().unwrap_or(0),
                r["status"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    ensure!(
        by_line
            == [
                (1, 202),
                (3, 200),
                (4, 409),
                (5, 200),
                (6, 422),
                (7, 422),
                (8, 202),
                (9, 202)
            ],
        "{results:#?}"
    );
    let id_of = |i: usize| results[i]["execution"]["id"].as_str().map(str::to_owned);
    let first = id_of(0).context("line 1's id")?;
    ensure!(
        id_of(1).as_deref() == Some(pre_id.as_str()),
        "line 3 replays the earlier submit: {results:#?}"
    );
    ensure!(
        results[2]["error"]["code"] == json!("conflict")
            && results[2]["error"]["execution_id"] == json!(pre_id),
        "line 4 conflicts with the earlier submit: {}",
        results[2]
    );
    ensure!(
        id_of(3).as_deref() == Some(first.as_str()),
        "line 5 replays line 1: {results:#?}"
    );
    let invalid = results[4]["error"]["message"].as_str().unwrap_or("");
    ensure!(
        invalid.contains("priority must be an integer from 0 to 9 (got 12)"),
        "{}",
        results[4]
    );
    let naive = results[5]["error"]["message"].as_str().unwrap_or("");
    ensure!(
        naive.contains("expires_at must include a timezone"),
        "{}",
        results[5]
    );
    let eighth = &results[6]["execution"];
    ensure!(
        eighth["priority"] == json!(0)
            && eighth["fairness_key"] == json!("tenant-1")
            && eighth["metadata"]["by"] == json!("batch")
            && eighth["status"] == json!("queued"),
        "{eighth}"
    );

    // The rows: the earlier submit and lines 1, 8 and 9; nothing of the invalid lines.
    let rows = listed(&dsn)?;
    ensure!(rows.len() == 4, "{rows:#?}");

    // Again, as text: every keyed line replays; the unkeyed line 9 is a new execution.
    let (code, out, err) = run_cli(&["submit", "--batch", path], &env(&dsn))?;
    ensure!(code == 1, "exit {code}: {out}{err}");
    let text: Vec<&str> = out.lines().collect();
    ensure!(text.len() == 8, "{out}");
    ensure!(text[0] == format!("line 1: 200 replayed {first}"), "{out}");
    ensure!(
        text[2].starts_with("line 4: 409 conflict: ")
            && text[2].ends_with(&format!("(execution {pre_id})")),
        "{out}"
    );
    ensure!(text[7].starts_with("line 9: 202 created "), "{out}");
    ensure!(
        err.contains("8 items: 1 created, 4 replayed, 3 failed"),
        "summary on stderr: {err}"
    );
    ensure!(listed(&dsn)?.len() == 5);

    // Malformed lines refuse the whole file: nothing is written, not even the good first line.
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        [
            r#"{"task_name": "echo", "payload": 1, "idempotency_key": "never"}"#,
            r#"{"task_name": "echo"}"#,
            "not json",
            r#"{"task_name": "echo", "payload": 1, "taks": 1}"#,
            "[1, 2]",
        ]
        .join("\n"),
    )?;
    let (code, out, err) = run_cli(
        &["submit", "--batch", bad.to_str().context("path")?],
        &env(&dsn),
    )?;
    ensure!(code == 2, "malformed file exits 2, got {code}: {out}{err}");
    for expected in [
        "4 malformed lines, nothing submitted",
        "line 2: missing field `payload`",
        "line 3: invalid JSON: expected ident (column 2)",
        "line 4: unknown field `taks`",
        "line 5: not a JSON object",
    ] {
        ensure!(err.contains(expected), "expected {expected:?} in: {err}");
    }
    ensure!(out.is_empty(), "{out}");
    ensure!(listed(&dsn)?.len() == 5, "a malformed file writes nothing");

    // 1,001 lines on stdin: two chunks (1,000 + 1), every line answered.
    let mut child = Command::new(onestep_bin()?)
        .args(["submit", "--batch", "-", "--json"])
        .envs(env(&dsn))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut input = String::new();
    for i in 0..1001 {
        input.push_str(&format!(
            "{{\"task_name\": \"echo\", \"payload\": {{\"i\": {i}}}, \"idempotency_key\": \"bulk-{i}\"}}\n"
        ));
    }
    child
        .stdin
        .take()
        .context("stdin")?
        .write_all(input.as_bytes())?;
    let done = child.wait_with_output()?;
    let out = String::from_utf8_lossy(&done.stdout);
    ensure!(
        done.status.code() == Some(0),
        "{:?}: {}",
        done.status,
        String::from_utf8_lossy(&done.stderr)
    );
    let answers: Vec<Value> = out
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    ensure!(answers.len() == 1001, "{} answers", answers.len());
    for (i, a) in answers.iter().enumerate() {
        ensure!(
            a["line"] == json!(i + 1) && a["status"] == json!(202),
            "answer {i}: {a}"
        );
    }
    ensure!(listed(&dsn)?.len() == 5 + 1001);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_batch_on_each_server() -> Result<()> {
    on_each_server(
        "submit_batch",
        &e2e_config("worker.yaml"),
        Schedule::Concurrent,
        |env| {
            let dsn = env.db.dsn.clone();
            async move { batch_case(dsn).await }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn submit_batch_on_sqlite() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let dsn = format!("sqlite://{}", dir.path().join("batch.db").display());
    let (code, out, err) = run_cli(&["migrate", "--dsn", &dsn], &[])?;
    ensure!(code == 0, "migrate exited {code}: {out}{err}");
    batch_case(dsn).await
}
