//! The `agent` guests (Rust with `wstd`, world `onestep:handler@0.3.0`; Python
//! with componentize-py, world `0.2.0`) against a loopback chat-completions server
//! (`chat_server`): the answer is what the guest computed from the server's
//! completion; the API key the task's `sandbox.network.headers` injects
//! reaches the server while neither the guest's output nor any log line holds
//! it; `base_url`/`model` come from the payload, then the metadata, then
//! `handler.params`; 429 and 5xx are retryable (429 with its
//! `Retry-After`), 401 and other 4xx fatal; an origin not allowed is denied,
//! fatally, without a request. The Rust agent's tool loop: each model call
//! and each round of tool calls is a durable step, so a retry after a failed
//! turn asks the model only from that turn on.

use crate::chat_server::{self, ChatServer};
use crate::common::*;
use crate::http::{guarded, http_runtime, logged, sandbox};
use onestep_core::execution::LeaseRef;
use onestep_core::steps::{MemorySteps, StepStore};
use onestep_core::time::SystemClock;
use onestep_wasm::{
    AllowedOrigin, CancelHandle, DurableSteps, Handler, InvocationContext, OriginPattern, Outcome,
    SandboxSettings, Secret,
};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use uuid::Uuid;

const KEY: &str = "sk-agent-test-4e8b1d-never-log-me";

/// The guests under test: the Rust one and the Python one.
const GUESTS: [&str; 2] = ["agent", "python-agent"];

fn load(guest: &str, sb: &SandboxSettings) -> Handler {
    if guest.starts_with("python") {
        ensure_python_guest();
    } else {
        ensure_rust_guests();
    }
    http_runtime()
        .load_for(guest_path(guest), sb)
        .unwrap_or_else(|e| panic!("load {guest}: {e}"))
}

/// A sandbox allowing the server's origin, with the key injected when `with_key`.
fn allowing(server: &ChatServer, with_key: bool) -> SandboxSettings {
    let mut sb = sandbox(&[]);
    sb.network.allow.push(AllowedOrigin {
        origin: OriginPattern::parse(&server.origin()).expect("origin"),
        headers: if with_key {
            vec![("Authorization".into(), Secret::new(format!("Bearer {KEY}")))]
        } else {
            Vec::new()
        },
        rate_limit: None,
    });
    sb
}

/// Attempt 1 of a new execution with its own (empty) step store.
fn context(params: Value, metadata: Value) -> InvocationContext {
    let store: Arc<dyn StepStore> = Arc::new(MemorySteps::new(Arc::new(SystemClock)));
    attempt_of(&store, Uuid::new_v4(), 1, params, metadata)
}

/// Attempt `attempt` of execution `id`, its steps in `store`.
fn attempt_of(
    store: &Arc<dyn StepStore>,
    id: Uuid,
    attempt: u32,
    params: Value,
    metadata: Value,
) -> InvocationContext {
    InvocationContext {
        execution_id: id.to_string(),
        params_json: params.to_string(),
        metadata_json: metadata.to_string(),
        steps: Some(DurableSteps {
            store: Arc::clone(store),
            lease: LeaseRef {
                execution_id: id,
                attempt_id: Uuid::new_v4(),
                lease_token: Uuid::new_v4(),
            },
            clock: Arc::new(SystemClock),
        }),
        ..ctx(attempt)
    }
}

async fn ask(
    handler: &Handler,
    sb: &SandboxSettings,
    ctx: InvocationContext,
    payload: Value,
) -> Outcome {
    handler
        .invoke(
            sb,
            ctx,
            &payload.to_string(),
            CancelHandle::new(),
            Some(Duration::from_secs(30)),
        )
        .await
}

fn answer(guest: &str, outcome: &Outcome) -> Value {
    match outcome {
        Outcome::Succeeded(s) => serde_json::from_str(s).expect("agent output is JSON"),
        other => panic!("{guest}: expected success, got {other:?}"),
    }
}

/// (retryable, message, retry_after) of a handler error.
fn handler_error(guest: &str, outcome: &Outcome) -> (bool, String, Option<Duration>) {
    match outcome {
        Outcome::HandlerError {
            retryable,
            message,
            retry_after,
        } => (*retryable, message.clone(), *retry_after),
        other => panic!("{guest}: expected a handler error, got {other:?}"),
    }
}

#[test]
fn the_answer_comes_from_the_completion_and_the_key_only_reaches_the_server() {
    for guest in GUESTS {
        guarded(false, answer_case(guest));
    }
}

async fn answer_case(guest: &str) {
    let server = chat_server::start(KEY).await;
    let sb = allowing(&server, true);
    let started = std::time::Instant::now();
    let handler = load(guest, &sb);
    let loaded = started.elapsed();
    let params = json!({"base_url": server.base_url(), "model": "gpt-test"});
    let payload = json!({"prompt": "what is two plus two", "system": "be brief", "max_tokens": 50});
    let started = std::time::Instant::now();
    let (outcome, log) = logged(|| ask(&handler, &sb, context(params, json!({})), payload)).await;
    eprintln!(
        "{guest}: loaded in {loaded:?}, one completion (logged at TRACE) in {:?}",
        started.elapsed()
    );
    let out = answer(guest, &outcome);
    assert_eq!(
        out["answer"], "gpt-test heard: what is two plus two system=be brief max_tokens=50",
        "{guest}: {out}"
    );
    assert_eq!(out["model"], "gpt-test-0613", "{guest}: {out}");
    // 2 + 5 words asked, 10 words answered.
    assert_eq!(
        out["usage"],
        json!({"prompt_tokens": 7, "completion_tokens": 10, "total_tokens": 17}),
        "{guest}: {out}"
    );
    if guest == "agent" {
        // One turn, asked by this attempt.
        assert_eq!(out["turns"], 1, "{out}");
        assert_eq!(out["model_calls"], json!({"made": 1, "loaded": 0}), "{out}");
    }
    let seen = server.seen();
    assert_eq!(seen.len(), 1, "{guest}: {seen:?}");
    assert_eq!(
        seen[0].authorization.as_deref(),
        Some(format!("Bearer {KEY}").as_str()),
        "{guest}: the key did not reach the server"
    );
    assert_eq!(
        seen[0].body,
        json!({
            "model": "gpt-test",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "what is two plus two"},
            ],
            "max_tokens": 50,
        }),
        "{guest}"
    );
    // The guest never held the key: not in what it returned, not in any log line (its own
    // lines and the host's, at TRACE).
    assert!(log.contains("POST http://127.0.0.1"), "{guest}: {log}");
    for (what, text) in [("output", out.to_string()), ("log", log)] {
        assert!(
            !text.contains("4e8b1d"),
            "{guest}: the key is in the {what}: {text}"
        );
    }
}

#[test]
fn base_url_and_model_come_from_the_payload_then_the_metadata_then_the_params() {
    for guest in GUESTS {
        guarded(false, precedence_case(guest));
    }
}

async fn precedence_case(guest: &str) {
    let server = chat_server::start(KEY).await;
    let sb = allowing(&server, true);
    let handler = load(guest, &sb);
    let params = json!({"base_url": server.failing_base_url(500), "model": "from-params"});
    let prompt = json!({"prompt": "hi"});
    // base_url from the metadata beats the params' (failing) one; the model from the params.
    let meta = json!({"base_url": server.base_url()});
    let out = answer(
        guest,
        &ask(&handler, &sb, context(params.clone(), meta), prompt.clone()).await,
    );
    assert_eq!(out["answer"], "from-params heard: hi", "{guest}: {out}");
    // The model from the metadata beats the params'.
    let meta = json!({"base_url": server.base_url(), "model": "from-metadata"});
    let out = answer(
        guest,
        &ask(&handler, &sb, context(params.clone(), meta.clone()), prompt).await,
    );
    assert_eq!(out["answer"], "from-metadata heard: hi", "{guest}: {out}");
    // The payload beats both.
    let payload = json!({"prompt": "hi", "model": "from-payload"});
    let out = answer(
        guest,
        &ask(&handler, &sb, context(params, meta), payload).await,
    );
    assert_eq!(out["answer"], "from-payload heard: hi", "{guest}: {out}");
    // Nothing anywhere: a fatal error naming where to set it, and no request.
    let before = server.seen().len();
    let outcome = ask(
        &handler,
        &sb,
        context(json!({"base_url": server.base_url()}), json!({})),
        json!({"prompt": "hi"}),
    )
    .await;
    let (retryable, message, _) = handler_error(guest, &outcome);
    assert!(!retryable, "{guest}: {message}");
    assert!(
        message.starts_with("no model: set handler.params.model"),
        "{guest}: {message}"
    );
    let outcome = ask(
        &handler,
        &sb,
        context(
            json!({"base_url": server.base_url(), "model": "m"}),
            json!({}),
        ),
        json!({"question": "no prompt"}),
    )
    .await;
    let (retryable, message, _) = handler_error(guest, &outcome);
    assert!(!retryable, "{guest}: {message}");
    assert_eq!(message, "payload needs \"prompt\": a string", "{guest}");
    assert_eq!(server.seen().len(), before, "{guest}: a request was sent");
}

#[test]
fn a_429_or_5xx_is_retryable_and_a_401_or_other_4xx_is_fatal() {
    for guest in GUESTS {
        guarded(false, status_case(guest));
    }
}

async fn status_case(guest: &str) {
    let server = chat_server::start(KEY).await;
    let with_key = allowing(&server, true);
    let handler = load(guest, &with_key);
    let prompt = json!({"prompt": "hi"});
    let at = |base_url: String| context(json!({"base_url": base_url, "model": "m"}), json!({}));

    let outcome = ask(
        &handler,
        &with_key,
        at(server.failing_base_url(500)),
        prompt.clone(),
    )
    .await;
    let (retryable, message, retry_after) = handler_error(guest, &outcome);
    assert!(retryable, "{guest}: {message}");
    assert!(
        message.contains("500") && message.contains("the test server fails with 500"),
        "{guest}: {message}"
    );
    assert_eq!(retry_after, None, "{guest}");
    for code in [502, 503] {
        let outcome = ask(
            &handler,
            &with_key,
            at(server.failing_base_url(code)),
            prompt.clone(),
        )
        .await;
        let (retryable, message, _) = handler_error(guest, &outcome);
        assert!(retryable, "{guest} {code}: {message}");
    }

    // 429 with Retry-After: 2 (seconds) asks for 2 s before the next attempt.
    let outcome = ask(
        &handler,
        &with_key,
        at(server.failing_base_url(429)),
        prompt.clone(),
    )
    .await;
    let (retryable, message, retry_after) = handler_error(guest, &outcome);
    assert!(retryable, "{guest}: {message}");
    assert!(message.contains("429"), "{guest}: {message}");
    assert_eq!(retry_after, Some(Duration::from_secs(2)), "{guest}");

    // No key injected: the server says 401, which retrying cannot fix.
    let without_key = allowing(&server, false);
    let outcome = ask(
        &handler,
        &without_key,
        at(server.base_url()),
        prompt.clone(),
    )
    .await;
    let (retryable, message, _) = handler_error(guest, &outcome);
    assert!(!retryable, "{guest}: {message}");
    assert!(
        message.contains("401") && message.contains("You didn't provide a valid API key."),
        "{guest}: {message}"
    );
    assert_eq!(
        server.seen().last().map(|s| s.authorization.clone()),
        Some(None)
    );

    for code in [400, 404] {
        let outcome = ask(
            &handler,
            &with_key,
            at(server.failing_base_url(code)),
            prompt.clone(),
        )
        .await;
        let (retryable, message, _) = handler_error(guest, &outcome);
        assert!(!retryable, "{guest} {code}: {message}");
        assert!(message.contains(&code.to_string()), "{guest}: {message}");
    }
}

#[test]
fn an_origin_not_allowed_is_denied_fatally_and_nothing_is_sent() {
    for guest in GUESTS {
        guarded(false, denied_case(guest));
    }
}

async fn denied_case(guest: &str) {
    let server = chat_server::start(KEY).await;
    // Allowed: another port of the same host. Asked: the server.
    let port = server.addr.port();
    let sb = sandbox(&[&format!("http://127.0.0.1:{}", port.wrapping_add(1))]);
    let handler = load(guest, &sb);
    let params = json!({"base_url": server.base_url(), "model": "m"});
    let (outcome, log) = logged(|| {
        ask(
            &handler,
            &sb,
            context(params, json!({})),
            json!({"prompt": "hi"}),
        )
    })
    .await;
    let (retryable, message, _) = handler_error(guest, &outcome);
    assert!(!retryable, "{guest}: {message}");
    assert_eq!(
        message,
        format!(
            "request to {}/chat/completions denied by the sandbox (ErrorCode::HttpRequestDenied): \
             its origin is not in the task's sandbox.network.allow",
            server.base_url()
        ),
        "{guest}"
    );
    assert!(
        log.contains("outbound HTTP request denied")
            && log.contains(&format!("origin=http://127.0.0.1:{port}")),
        "{guest}: {log}"
    );
    assert!(server.seen().is_empty(), "{guest}: {:?}", server.seen());
}

#[test]
fn each_turn_is_a_step_and_a_retry_asks_the_model_only_from_the_failed_turn() {
    guarded(false, resume_case());
}

/// The server's requests of `model`, counted per turn.
fn per_turn(server: &ChatServer, model: &str) -> Vec<usize> {
    let mut counts = Vec::new();
    for seen in server.seen().iter().filter(|s| s.body["model"] == model) {
        let turn = chat_server::turn_of(&seen.body);
        if counts.len() <= turn {
            counts.resize(turn + 1, 0);
        }
        counts[turn] += 1;
    }
    counts
}

async fn resume_case() {
    let server = chat_server::start(KEY).await;
    let sb = allowing(&server, true);
    let handler = load("agent", &sb);
    let params = |model: &str| json!({"base_url": server.base_url(), "model": model});
    let payload = json!({"prompt": "sum: 1 2 3 4", "tools": ["add"]});
    let store: Arc<dyn StepStore> = Arc::new(MemorySteps::new(Arc::new(SystemClock)));
    let id = Uuid::new_v4();
    let flaky = "fail-once-at-2";

    // Attempt 1: turns 0 and 1 (a model call and an `add` each) are recorded, turn 2's
    // model call fails with a retryable 503.
    let outcome = ask(
        &handler,
        &sb,
        attempt_of(&store, id, 1, params(flaky), json!({})),
        payload.clone(),
    )
    .await;
    let (retryable, message, _) = handler_error("agent", &outcome);
    assert!(retryable && message.contains("503"), "{message}");
    let keys = |records: Vec<onestep_core::steps::StepRecord>| -> Vec<String> {
        records.into_iter().map(|r| r.key).collect()
    };
    assert_eq!(
        keys(store.list(id).await.expect("list")),
        ["model-0", "tool-0", "model-1", "tool-1"]
    );
    assert_eq!(per_turn(&server, flaky), [1, 1, 1]);

    // Attempt 2 loads turns 0 and 1 and asks the model from turn 2 on.
    let outcome = ask(
        &handler,
        &sb,
        attempt_of(&store, id, 2, params(flaky), json!({})),
        payload.clone(),
    )
    .await;
    let out = answer("agent", &outcome);
    assert_eq!(out["answer"], "the sum is 10", "{out}");
    assert_eq!(out["turns"], 4, "{out}");
    assert_eq!(out["tool_calls"], 3, "{out}");
    assert_eq!(out["model_calls"], json!({"made": 2, "loaded": 2}), "{out}");
    // Four turns of usage {1, 1, 2} summed.
    assert_eq!(
        out["usage"],
        json!({"prompt_tokens": 4, "completion_tokens": 4, "total_tokens": 8}),
        "{out}"
    );
    assert_eq!(per_turn(&server, flaky), [1, 1, 2, 1]);
    assert_eq!(
        keys(store.list(id).await.expect("list")),
        [
            "model-0", "tool-0", "model-1", "tool-1", "model-2", "tool-2", "model-3"
        ]
    );
    // The tool results the model read are the `add` tool's: 1+2, 3+3, 6+4.
    let last = server
        .seen()
        .last()
        .map(|s| s.body.clone())
        .unwrap_or_default();
    let tool_answers: Vec<&str> = last["messages"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter(|m| m["role"] == "tool")
                .filter_map(|m| m["content"].as_str())
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(tool_answers, ["3", "6", "10"]);

    // Another attempt of the same execution asks nothing: every turn is recorded.
    let again = answer(
        "agent",
        &ask(
            &handler,
            &sb,
            attempt_of(&store, id, 3, params(flaky), json!({})),
            payload.clone(),
        )
        .await,
    );
    assert_eq!(again["answer"], "the sum is 10", "{again}");
    assert_eq!(
        again["model_calls"],
        json!({"made": 0, "loaded": 4}),
        "{again}"
    );
    assert_eq!(per_turn(&server, flaky), [1, 1, 2, 1]);

    // A run that never fails gives the same answer, all four calls made by its one attempt.
    let steady = answer(
        "agent",
        &ask(
            &handler,
            &sb,
            context(params("steady"), json!({})),
            payload.clone(),
        )
        .await,
    );
    assert_eq!(steady["answer"], out["answer"], "{steady}");
    assert_eq!(
        steady["model_calls"],
        json!({"made": 4, "loaded": 0}),
        "{steady}"
    );

    // max_turns bounds the loop: two model calls cannot finish a sum of four numbers.
    let mut short = payload.clone();
    short["max_turns"] = json!(2);
    let outcome = ask(&handler, &sb, context(params("steady"), json!({})), short).await;
    let (retryable, message, _) = handler_error("agent", &outcome);
    assert!(!retryable, "{message}");
    assert_eq!(message, "no answer after max_turns = 2 model calls");

    // An unknown tool is refused before any request.
    let before = server.seen().len();
    let outcome = ask(
        &handler,
        &sb,
        context(params("steady"), json!({})),
        json!({"prompt": "hi", "tools": ["rm"]}),
    )
    .await;
    let (retryable, message, _) = handler_error("agent", &outcome);
    assert!(!retryable, "{message}");
    assert_eq!(
        message,
        "payload.tools: no built-in tool \"rm\" (there is: \"add\")"
    );
    assert_eq!(server.seen().len(), before);
}
