//! `onestep submit --batch FILE.jsonl` (docs/cli.md#batch-submit): one submission per line,
//! every line read and checked before anything is sent, then written in chunks of at most
//! [`CHUNK`] items through `ExecutionClient::submit_batch` (one transaction per chunk, as
//! `POST /v1/executions:batch`), with one result line per item.

use std::fmt::Write as _;

use onestep_api::{ApiError, ErrorBody, ExecutionView};
use onestep_core::request::SubmitRequest;
use onestep_core::{ExecutionClient, ExecutionError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::output::{FAILED, Failure, OK};

/// Most items per `submit_batch` call (one transaction), as in `POST /v1/executions:batch`.
pub(crate) const CHUNK: usize = onestep_api::batch::MAX_BATCH_ITEMS;

/// Most malformed lines named in the error (the count covers the rest).
const MAX_LISTED_ERRORS: usize = 20;

/// One line of a batch file: the fields of a single submit (the body of `POST /v1/executions`
/// plus its idempotency key). Unknown fields are refused, so a misspelt one is not dropped.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Line {
    /// The task (`task` is accepted too, as the CLI's argument is named).
    #[serde(alias = "task")]
    task_name: String,
    payload: Value,
    #[serde(default)]
    idempotency_key: Option<String>,
    #[serde(default)]
    metadata: Option<Value>,
    #[serde(default)]
    delay_s: Option<f64>,
    /// RFC 3339 with an offset; a naive instant is that item's error, as on the API.
    #[serde(default)]
    expires_at: Option<String>,
    #[serde(default)]
    priority: Option<i64>,
    #[serde(default)]
    fairness_key: Option<String>,
}

/// One submission of the file: its line number (from 1) and what the line asks for, or the
/// item's own validation error (an `expires_at` without an offset), reported like the store's.
#[derive(Debug)]
pub(crate) struct Item {
    /// Line number in the file, from 1.
    pub(crate) line: usize,
    /// The request, or the item's error (not sent).
    pub(crate) request: Result<SubmitRequest, ApiError>,
}

/// Reads every line of `text` (`name` is the file's name for messages). Blank lines are
/// skipped; a line that is not a JSON object of the submit fields is malformed, and any
/// malformed line refuses the whole file (usage error naming each such line, nothing sent).
pub(crate) fn parse(name: &str, text: &str) -> Result<Vec<Item>, Failure> {
    let mut items = Vec::new();
    let mut malformed: Vec<String> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        if raw.trim().is_empty() {
            continue;
        }
        match parse_line(raw) {
            Ok(request) => items.push(Item { line, request }),
            Err(why) => malformed.push(format!("line {line}: {why}")),
        }
    }
    if !malformed.is_empty() {
        let mut message = format!(
            "{name}: {} malformed line{}, nothing submitted:",
            malformed.len(),
            if malformed.len() == 1 { "" } else { "s" }
        );
        for m in malformed.iter().take(MAX_LISTED_ERRORS) {
            let _ = write!(message, "\n  {m}");
        }
        if malformed.len() > MAX_LISTED_ERRORS {
            let _ = write!(
                message,
                "\n  … and {} more",
                malformed.len() - MAX_LISTED_ERRORS
            );
        }
        return Err(Failure::usage(message));
    }
    if items.is_empty() {
        return Err(Failure::usage(format!(
            "{name}: no submissions (one JSON object per line)"
        )));
    }
    Ok(items)
}

/// One non-blank line: the request (or the item's own error), or why the line is malformed.
fn parse_line(raw: &str) -> Result<Result<SubmitRequest, ApiError>, String> {
    let value: Value =
        serde_json::from_str(raw).map_err(|e| format!("invalid JSON: {}", without_position(&e)))?;
    if !value.is_object() {
        return Err("not a JSON object".to_owned());
    }
    let line: Line = serde_json::from_value(value).map_err(|e| e.to_string())?;
    let expires_at = match line.expires_at.as_deref() {
        None => None,
        Some(t) => match onestep_api::routes::parse_expires_at(t) {
            Ok(t) => Some(t),
            Err(e) => return Ok(Err(e)),
        },
    };
    Ok(Ok(SubmitRequest {
        task_name: line.task_name,
        payload: line.payload,
        idempotency_key: line.idempotency_key,
        metadata: line.metadata,
        delay_s: line.delay_s,
        expires_at,
        priority: line.priority,
        fairness_key: line.fairness_key,
    }))
}

/// A JSON syntax error's text: its position within the line (the line is named already).
fn without_position(e: &serde_json::Error) -> String {
    let text = e.to_string();
    match text.rfind(" at line ") {
        Some(at) => format!("{} (column {})", &text[..at], e.column()),
        None => text,
    }
}

/// The answer for one item, as one result line.
#[derive(Debug, Serialize)]
pub(crate) struct ItemResult {
    /// Line number in the file.
    pub(crate) line: usize,
    /// 202 created, 200 replayed, 409 conflict, 422 invalid (as `POST /v1/executions:batch`).
    pub(crate) status: u16,
    /// The execution, for 202 and 200.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) execution: Option<ExecutionView>,
    /// The error, for the others.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<ErrorBody>,
}

impl ItemResult {
    fn failed(line: usize, e: ApiError) -> Self {
        ItemResult {
            line,
            status: e.status().as_u16(),
            execution: None,
            error: Some(e.body().clone()),
        }
    }

    /// Whether the item was written or replayed.
    pub(crate) fn ok(&self) -> bool {
        self.execution.is_some()
    }

    /// The text form: `line N: 202 created ID`, `line N: 409 conflict: MESSAGE (execution ID)`.
    pub(crate) fn text(&self) -> String {
        match (&self.execution, &self.error) {
            (Some(x), _) => {
                let what = if self.status == 202 {
                    "created"
                } else {
                    "replayed"
                };
                format!("line {}: {} {what} {}", self.line, self.status, x.id)
            }
            (None, Some(e)) => {
                let mut s = format!(
                    "line {}: {} {}: {}",
                    self.line, self.status, e.code, e.message
                );
                if let Some(id) = e.execution_id {
                    let _ = write!(s, " (execution {id})");
                }
                s
            }
            (None, None) => format!("line {}: {}", self.line, self.status),
        }
    }

    /// The JSON form: one compact object per line.
    pub(crate) fn json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| {
            format!(
                r#"{{"line":{},"error":"cannot render JSON: {e}"}}"#,
                self.line
            )
        })
    }
}

/// What a batch run did: every answered item, and the failure that stopped it (a chunk the
/// database refused as a whole: its items and every later one were not submitted).
#[derive(Debug, Default)]
pub(crate) struct Outcome {
    /// Answered items, in file order.
    pub(crate) results: Vec<ItemResult>,
    /// `(first line not submitted, last line, error)` when a chunk failed as a whole.
    pub(crate) stopped: Option<(usize, usize, ExecutionError)>,
}

impl Outcome {
    /// 0 when every item was created or replayed; 1 otherwise.
    pub(crate) fn exit(&self) -> u8 {
        if self.stopped.is_none() && self.results.iter().all(ItemResult::ok) {
            OK
        } else {
            FAILED
        }
    }
}

/// Sends `items` in chunks of [`CHUNK`], calling `each` with every item's result as its chunk
/// is answered. An item with its own error is answered without being sent; a chunk the store
/// refuses as a whole stops the run (earlier chunks stay committed).
pub(crate) async fn submit(
    client: &ExecutionClient,
    items: Vec<Item>,
    mut each: impl FnMut(&ItemResult),
) -> Outcome {
    let mut out = Outcome::default();
    let last_line = items.last().map_or(0, |i| i.line);
    let mut items = items.into_iter().peekable();
    while items.peek().is_some() {
        let chunk: Vec<Item> = items.by_ref().take(CHUNK).collect();
        let mut answers: Vec<Option<ItemResult>> = Vec::with_capacity(chunk.len());
        let lines: Vec<usize> = chunk.iter().map(|i| i.line).collect();
        let mut requests = Vec::new();
        let mut slots = Vec::new();
        let first_line = lines.first().copied().unwrap_or(0);
        for (k, item) in chunk.into_iter().enumerate() {
            match item.request {
                Ok(r) => {
                    requests.push(r);
                    slots.push((k, item.line));
                    answers.push(None);
                }
                Err(e) => answers.push(Some(ItemResult::failed(item.line, e))),
            }
        }
        if !requests.is_empty() {
            match client.submit_batch(&requests).await {
                Ok(written) => {
                    for ((k, line), w) in slots.into_iter().zip(written) {
                        answers[k] = Some(match w {
                            Ok(s) => ItemResult {
                                line,
                                status: if s.created { 202 } else { 200 },
                                execution: Some(ExecutionView::from(&s.execution)),
                                error: None,
                            },
                            Err(e) => ItemResult::failed(line, ApiError::from(e)),
                        });
                    }
                }
                Err(e) => {
                    out.stopped = Some((first_line, last_line, e));
                    return out;
                }
            }
        }
        for (a, line) in answers.into_iter().zip(lines) {
            let a = a.unwrap_or_else(|| {
                ItemResult::failed(
                    line,
                    ApiError::from(ExecutionError::Encoding(
                        "the store answered fewer items than it was given".to_owned(),
                    )),
                )
            });
            each(&a);
            out.results.push(a);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use onestep_core::{Backend, Limits, StoreOptions};
    use serde_json::json;

    fn requests(items: &[Item]) -> Vec<(usize, &SubmitRequest)> {
        items
            .iter()
            .filter_map(|i| i.request.as_ref().ok().map(|r| (i.line, r)))
            .collect()
    }

    #[test]
    fn lines_are_numbered_in_the_file_and_blank_ones_skipped() {
        let text = "\n{\"task_name\": \"a\", \"payload\": 1}\n   \n{\"task\": \"b\", \"payload\": {\"x\": [1]}, \"idempotency_key\": \"k\", \"metadata\": {\"m\": 1}, \"delay_s\": 2.5, \"expires_at\": \"2030-01-01T00:00:00+08:00\", \"priority\": 0, \"fairness_key\": \"t-1\"}\n";
        let items = parse("f.jsonl", text).unwrap();
        let got = requests(&items);
        assert_eq!(got.len(), 2);
        assert_eq!((got[0].0, got[0].1.task_name.as_str()), (2, "a"));
        assert_eq!(got[0].1.payload, json!(1));
        assert_eq!(got[0].1.idempotency_key, None);
        let (line, r) = got[1];
        assert_eq!(line, 4);
        assert_eq!(r.task_name, "b");
        assert_eq!(r.payload, json!({"x": [1]}));
        assert_eq!(r.idempotency_key.as_deref(), Some("k"));
        assert_eq!(r.metadata, Some(json!({"m": 1})));
        assert_eq!(r.delay_s, Some(2.5));
        assert_eq!(
            r.expires_at.map(|t| t.to_rfc3339()),
            Some("2030-01-01T00:00:00+08:00".to_owned())
        );
        assert_eq!(r.priority, Some(0));
        assert_eq!(r.fairness_key.as_deref(), Some("t-1"));
    }

    #[test]
    fn malformed_lines_refuse_the_whole_file_and_are_each_named() {
        let text = [
            r#"{"task_name": "a", "payload": 1}"#,
            r#"{"task_name": "a"}"#,
            "not json",
            r#"{"task_name": "a", "payload": 1, "taks": 1}"#,
            "[1, 2]",
            r#"{"task_name": 7, "payload": 1}"#,
            r#"{"task_name": "a", "payload": 1, "priority": "high"}"#,
            r#"{"task_name": "a", "payload": 1"#,
        ]
        .join("\n");
        let f = parse("jobs.jsonl", &text).unwrap_err();
        assert_eq!(f.exit, super::super::output::USAGE);
        let m = &f.body.message;
        assert!(
            m.starts_with("jobs.jsonl: 7 malformed lines, nothing submitted:"),
            "{m}"
        );
        for expected in [
            "\n  line 2: missing field `payload`",
            "\n  line 3: invalid JSON: expected ident (column 2)",
            "\n  line 4: unknown field `taks`, expected one of",
            "\n  line 5: not a JSON object",
            "\n  line 6: invalid type: number, expected a string",
            "\n  line 7: invalid type: string \"high\", expected i64",
            "\n  line 8: invalid JSON: EOF while parsing an object (column 31)",
        ] {
            assert!(m.contains(expected), "expected {expected:?} in {m}");
        }
        assert!(!m.contains("line 1:"), "{m}");
    }

    #[test]
    fn many_malformed_lines_are_counted_beyond_the_listed_ones() {
        let text = "x\n".repeat(MAX_LISTED_ERRORS + 5);
        let m = parse("f", &text).unwrap_err().body.message;
        assert_eq!(m.matches("\n  line ").count(), MAX_LISTED_ERRORS, "{m}");
        assert!(m.ends_with("\n  … and 5 more"), "{m}");
    }

    #[test]
    fn batch_excludes_the_single_submit_arguments() {
        use clap::Parser;
        let parse = |args: &[&str]| crate::Cli::try_parse_from(args);
        match parse(&["onestep", "submit", "--batch", "f.jsonl"])
            .unwrap()
            .command
        {
            crate::Command::Submit(a) => {
                assert_eq!(
                    (a.batch.as_deref(), a.task, a.payload),
                    (Some("f.jsonl"), None, None)
                );
            }
            other => panic!("{other:?}"),
        }
        for extra in [
            &["echo"][..],
            &["--payload", "1"],
            &["--key", "k"],
            &["--priority", "1"],
            &["--fairness-key", "t"],
        ] {
            let mut args = vec!["onestep", "submit", "--batch", "f.jsonl"];
            args.extend_from_slice(extra);
            let e = parse(&args).unwrap_err();
            assert_eq!(
                e.kind(),
                clap::error::ErrorKind::ArgumentConflict,
                "{extra:?}"
            );
        }
        for missing in [
            &["onestep", "submit", "echo"][..],
            &["onestep", "submit", "--payload", "1"],
        ] {
            let e = parse(missing).unwrap_err();
            assert_eq!(
                e.kind(),
                clap::error::ErrorKind::MissingRequiredArgument,
                "{missing:?}"
            );
        }
    }

    #[test]
    fn an_empty_file_is_a_usage_error() {
        let f = parse("empty.jsonl", "\n  \n").unwrap_err();
        assert_eq!(
            f.body.message,
            "empty.jsonl: no submissions (one JSON object per line)"
        );
    }

    #[test]
    fn a_naive_expiry_is_the_items_own_error() {
        let items = parse(
            "f",
            r#"{"task_name": "a", "payload": 1, "expires_at": "2030-01-01T00:00:00"}"#,
        )
        .unwrap();
        let e = items[0].request.as_ref().unwrap_err();
        assert_eq!(
            (e.status().as_u16(), e.body().message.as_str()),
            (422, "expires_at must include a timezone")
        );
    }

    #[test]
    fn result_lines_in_text_and_json() {
        let conflict = ItemResult::failed(
            4,
            ApiError::from(ExecutionError::Conflict {
                existing_id: uuid::Uuid::nil(),
            }),
        );
        assert!(!conflict.ok());
        assert_eq!(
            conflict.text(),
            "line 4: 409 conflict: idempotency key was already used with a different submission \
             (execution 00000000-0000-0000-0000-000000000000)"
        );
        let v: Value = serde_json::from_str(&conflict.json()).unwrap();
        assert_eq!(v["line"], json!(4));
        assert_eq!(v["status"], json!(409));
        assert_eq!(v["error"]["code"], json!("conflict"));
        assert!(v.get("execution").is_none());
        assert!(!conflict.json().contains('\n'));
    }

    /// A real store: an SQLite file in a new directory, tables created.
    async fn sqlite_client() -> (ExecutionClient, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("onestep-batch-{}", uuid::Uuid::new_v4()));
        let mut opts = StoreOptions::new(format!("sqlite://{}", dir.join("t.db").display()));
        opts.auto_create = true;
        let backend = onestep_sqlite::SqliteBackend::open(opts).await.unwrap();
        let client = ExecutionClient::new(backend.executions(), "ns", Limits::default()).unwrap();
        (client, dir)
    }

    #[tokio::test]
    async fn a_mixed_file_is_answered_line_by_line_on_a_real_store() {
        let (client, dir) = sqlite_client().await;
        let text = [
            r#"{"task_name": "a", "payload": {"n": 1}, "idempotency_key": "k1"}"#,
            r#"{"task_name": "a", "payload": {"n": 2}, "idempotency_key": "k1"}"#,
            r#"{"task_name": "a", "payload": {"n": 1}, "idempotency_key": "k1"}"#,
            r#"{"task_name": "a", "payload": 1, "fairness_key": "bad key"}"#,
            r#"{"task_name": "a", "payload": 1, "expires_at": "2030-01-01T00:00:00"}"#,
            r#"{"task_name": "a", "payload": 1}"#,
        ]
        .join("\n");
        let mut printed = Vec::new();
        let outcome = submit(&client, parse("f", &text).unwrap(), |r| {
            printed.push(r.text())
        })
        .await;
        let statuses: Vec<(usize, u16)> =
            outcome.results.iter().map(|r| (r.line, r.status)).collect();
        assert_eq!(
            statuses,
            [(1, 202), (2, 409), (3, 200), (4, 422), (5, 422), (6, 202)]
        );
        let id = |i: usize| outcome.results[i].execution.as_ref().map(|x| x.id);
        assert_eq!(id(2), id(0));
        assert_eq!(
            outcome.results[1]
                .error
                .as_ref()
                .and_then(|e| e.execution_id),
            id(0)
        );
        assert_eq!(printed.len(), 6);
        assert_eq!(outcome.exit(), FAILED);
        // Only lines 1 and 6 were written.
        let page = client
            .list(&onestep_core::request::ListQuery {
                limit: 50,
                ..Default::default()
            })
            .await
            .unwrap();
        assert_eq!(page.items.len(), 2);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[tokio::test]
    async fn more_than_a_chunk_goes_in_several_transactions_all_answered() {
        let (client, dir) = sqlite_client().await;
        let n = CHUNK * 2 + 3;
        let text: String = (0..n)
            .map(|i| {
                format!(
                    "{{\"task_name\": \"a\", \"payload\": {i}, \"idempotency_key\": \"k{i}\"}}\n"
                )
            })
            .collect();
        let outcome = submit(&client, parse("f", &text).unwrap(), |_| {}).await;
        assert!(outcome.stopped.is_none());
        assert_eq!(outcome.results.len(), n);
        assert!(
            outcome
                .results
                .iter()
                .enumerate()
                .all(|(i, r)| r.line == i + 1 && r.status == 202)
        );
        assert_eq!(outcome.exit(), OK);
        // Again: every line replays its own execution.
        let again = submit(&client, parse("f", &text).unwrap(), |_| {}).await;
        assert!(again.results.iter().all(|r| r.status == 200));
        let ids = |o: &Outcome| {
            o.results
                .iter()
                .map(|r| r.execution.as_ref().map(|x| x.id))
                .collect::<Vec<_>>()
        };
        assert_eq!(ids(&outcome), ids(&again));
        let _ = std::fs::remove_dir_all(dir);
    }
}
