use std::time::Duration;

use onestep_core::retry::RetryPolicy;

use super::*;

const FULL: &str = r#"
apiVersion: onestep/v1alpha1
kind: Deployment
namespace: team-a
task: summarize
description: Summaries with an LLM
handler:
  component: ./build/summarize.wasm
  params: {model: gpt-4o, max_words: 120}
timeout_s: 30
concurrency: 4
retry: {type: exponential_backoff, max_attempts: 3}
sandbox:
  memory_limit_bytes: 134217728
  fuel: 1000000
  max_instances: 10
  env_values: {MODE: fast}
  network:
    allow: [https://api.openai.com, "https://*.example.com:8443"]
    max_requests: 100
    headers:
      https://api.openai.com:
        Authorization: {secret: openai}
        OpenAI-Beta: assistants=v2
"#;

fn parse(text: &str) -> Result<DeploymentManifest, ConfigError> {
    parse_manifest(text, Path::new("/srv/deploy"))
}

fn err(text: &str) -> String {
    parse(text).expect_err("refused").to_string()
}

/// A minimal manifest plus `extra` lines at the top level.
fn with(extra: &str) -> String {
    format!("apiVersion: onestep/v1alpha1\nkind: Deployment\nnamespace: team-a\ntask: t\n{extra}\n")
}

#[test]
fn a_full_manifest_resolves_every_setting() {
    let m = parse(FULL).expect("manifest");
    assert_eq!(
        m.component.as_deref(),
        Some(Path::new("/srv/deploy/build/summarize.wasm"))
    );
    let s = &m.settings;
    assert_eq!(
        (s.namespace.as_str(), s.task.as_str()),
        ("team-a", "summarize")
    );
    assert_eq!(s.description.as_deref(), Some("Summaries with an LLM"));
    assert_eq!(s.timeout, Some(Duration::from_secs(30)));
    assert_eq!(s.concurrency, 4);
    assert!(matches!(
        s.retry,
        RetryPolicy::ExponentialBackoff {
            max_attempts: 3,
            ..
        }
    ));
    assert_eq!(s.params["model"], "gpt-4o");
    assert_eq!(s.sandbox.memory_limit_bytes, 128 << 20);
    assert_eq!(s.sandbox.fuel, Some(1_000_000));
    assert_eq!(s.sandbox.max_instances, 10);
    // Unset values are the built-in defaults.
    let d = SandboxSettings::default();
    assert_eq!(s.sandbox.max_tables, d.max_tables);
    assert_eq!(s.sandbox.network.max_requests, 100);
    assert_eq!(
        s.sandbox.network.max_response_bytes,
        d.network.max_response_bytes
    );
    assert_eq!(s.sandbox.env_values["MODE"], "fast");
    let allow: Vec<String> = s
        .sandbox
        .network
        .allow
        .iter()
        .map(|a| a.origin.to_string())
        .collect();
    assert_eq!(
        allow,
        ["https://api.openai.com:443", "https://*.example.com:8443"]
    );
    assert!(s.sandbox.network.allow.iter().all(|a| a.headers.is_empty()));
    assert_eq!(
        s.headers,
        [
            InjectedHeader {
                origin: OriginPattern::parse("https://api.openai.com").expect("origin"),
                name: "Authorization".into(),
                value: HeaderValue::Secret("openai".into()),
            },
            InjectedHeader {
                origin: OriginPattern::parse("https://api.openai.com").expect("origin"),
                name: "OpenAI-Beta".into(),
                value: HeaderValue::Literal("assistants=v2".into()),
            },
        ]
    );
    // What the store keeps reads back identical.
    let json = s.to_canonical_json().expect("json");
    assert_eq!(&DeploymentSettings::from_json(&json).expect("back"), s);
}

#[test]
fn a_minimal_manifest_takes_the_defaults() {
    let m = parse(&with("")).expect("manifest");
    assert_eq!(m.component, None);
    assert_eq!(m.settings.sandbox, SandboxSettings::default());
    assert_eq!(m.settings.concurrency, 1);
    assert_eq!(m.settings.timeout, None);
    assert_eq!(m.settings.retry, RetryPolicy::NoRetry);
}

#[test]
fn the_manifest_is_never_interpolated() {
    let m = parse(&with("handler: {params: {key: \"${HOME}\"}}")).expect("manifest");
    assert_eq!(m.settings.params["key"], "${HOME}");
}

#[test]
fn header_and_document_errors_name_their_path() {
    assert_eq!(
        err("- a\n- b"),
        "a deployment manifest must be a mapping at the top level (line 1, column 1)"
    );
    assert!(err("a: [").starts_with("invalid YAML"), "{}", err("a: ["));
    assert_eq!(
        err("apiVersion: onestep/v1alpha1\nkind: App\n"),
        "kind: expected \"Deployment\", got \"App\" (line 2, column 7)"
    );
    assert_eq!(
        err("kind: Deployment\n"),
        "apiVersion: is required: apiVersion: onestep/v1alpha1 (line 1, column 1)"
    );
    assert_eq!(
        err("apiVersion: onestep/v1alpha1\nkind: Deployment\ntask: t\n"),
        "namespace: is required (line 1, column 1)"
    );
    let e = err(&with("").replace("task: t", "task: 'a b'"));
    assert!(
        e.starts_with("task: task_name may contain only ") && e.ends_with("(line 4, column 7)"),
        "{e}"
    );
}

#[test]
fn unknown_and_operator_only_keys_are_refused_by_name() {
    assert!(
        err(&with("source: jobs")).starts_with(
            "source: is not set by a deployment manifest (the execution source is the \
             operator's); a manifest may set here: apiVersion, kind, namespace"
        ),
        "{}",
        err(&with("source: jobs"))
    );
    assert!(err(&with("colour: red")).starts_with("colour: unknown field; a manifest may set"));
    assert!(
        err(&with("sandbox: {preopens: [{host: /etc, guest: /etc}]}")).starts_with(
            "sandbox.preopens: is not set by a deployment manifest (it grants host directories)"
        )
    );
    assert!(
        err(&with("sandbox: {env: [AWS_SECRET_ACCESS_KEY]}"))
            .starts_with("sandbox.env: is not set by a deployment manifest (it passes the host's")
    );
    assert!(
        err(&with("sandbox: {http_fields_limit_bytes: 1099511627776}"))
            .starts_with("sandbox.http_fields_limit_bytes: is not set by a deployment manifest")
    );
    let rl = with(
        "sandbox: {network: {allow: [https://a.example.com], rate_limits: {https://a.example.com: {per_second: 1, burst: 1}}}}",
    );
    assert!(
        err(&rl).starts_with("sandbox.network.rate_limits: is not set by a deployment manifest"),
        "{}",
        err(&rl)
    );
    assert!(
        err(&with("handler: {component: x.wasm, ref: y}"))
            .starts_with("handler.ref: unknown field")
    );
    assert!(
        err(&with(
            "retry: {type: max_attempts, max_attempts: 2, colour: 1}"
        ))
        .contains("colour"),
        "{}",
        err(&with(
            "retry: {type: max_attempts, max_attempts: 2, colour: 1}"
        ))
    );
}

#[test]
fn values_are_validated_with_the_task_builders_bounds() {
    assert_eq!(
        err(&with("sandbox:\n  memory_limit_bytes: 12")),
        "sandbox: memory_limit_bytes must be an integer >= 1048576 (1 MiB) (line 6, column 23)"
    );
    assert!(
        err(&with("sandbox: {max_instances: 100000}"))
            .contains("max_instances must be an integer from 1 to 1000")
    );
    assert!(
        err(&with("sandbox: {network: {max_connections: 0}}"))
            .contains("max_connections must be an integer from 1 to 4096")
    );
    assert!(
        err(&with("sandbox: {network: {allow: [ftp://x.org]}}"))
            .contains("the scheme must be http or https")
    );
    assert!(
        err(&with("sandbox: {network: {allow: [\"https://u@x.org\"]}}"))
            .contains("user information")
    );
    assert_eq!(
        err(&with("concurrency: 0")),
        "concurrency: must be an integer >= 1 (got 0) (line 5, column 14)"
    );
    assert!(err(&with("timeout_s: -1")).starts_with("timeout_s: must be a number > 0"));
    assert!(err(&with("timeout_s: .inf")).starts_with("timeout_s: must be a number > 0"));
    assert!(err(&with("retry: {type: max_attempts, max_attempts: 0}")).contains("max_attempts"));
    assert!(
        err(&with("handler: {component: ''}"))
            .starts_with("handler.component: must be a non-empty string")
    );
    assert!(err(&with("handler: x.wasm")).starts_with("handler: must be a mapping"));
    assert!(err(&with("handler: {params: [1]}")).contains("params must be a mapping"));
}

fn net(headers: &str) -> String {
    with(&format!(
        "sandbox:\n  network:\n    allow: [https://api.example.com]\n    headers:\n{headers}"
    ))
}

#[test]
fn headers_are_literals_or_secrets_by_name() {
    let ok = parse(&net("      https://API.example.com:443/:\n        X-Title: hello\n        X-Api-Key: {secret: example.key_1}"))
        .expect("headers");
    assert_eq!(ok.settings.headers.len(), 2);
    assert_eq!(
        ok.settings.headers[1].value,
        HeaderValue::Secret("example.key_1".into())
    );
    // Credential-looking names must reference a secret.
    for name in [
        "Authorization",
        "proxy-authorization",
        "Cookie",
        "X-Api-Key",
        "X-Auth-Token",
        "X-Client-Secret",
    ] {
        let e = err(&net(&format!(
            "      https://api.example.com:\n        {name}: Bearer sk-live-123"
        )));
        assert!(
            e.contains("looks like a credential") && !e.contains("sk-live"),
            "{name}: {e}"
        );
    }
    let e = err(&net("      https://other.example.com:\n        X-A: b"));
    assert!(
        e.starts_with("sandbox.network.headers[\"https://other.example.com\"]: is not one of sandbox.network.allow"),
        "{e}"
    );
    assert!(
        err(&net(
            "      https://api.example.com:\n        X-A: {secret: ''}"
        ))
        .contains("must be {secret: NAME}")
    );
    assert!(
        err(&net(
            "      https://api.example.com:\n        X-A: {secret: 'a b'}"
        ))
        .contains("must be {secret: NAME}")
    );
    assert!(
        err(&net(
            "      https://api.example.com:\n        X-A: {value: x}"
        ))
        .contains("unknown field")
    );
    assert!(
        err(&net("      https://api.example.com:\n        X-A: [x]"))
            .contains("must be a string or {secret: NAME}")
    );
    assert!(
        err(&net(
            "      https://api.example.com:\n        X-A: a\n        x-a: b"
        ))
        .contains("is given twice")
    );
    assert!(
        err(&net("      https://api.example.com:\n        'X A': b"))
            .contains("is not an HTTP header name")
    );
    assert!(
        err(&net(
            "      https://api.example.com:\n        X-A: \"a\\nb\""
        ))
        .contains("control character")
    );
    assert!(
        err(&net("      https://api.example.com:\n        X-A: a\n      https://api.example.com:443:\n        X-B: b"))
            .contains("given twice")
    );
}

#[test]
fn credential_names() {
    for n in [
        "Authorization",
        "X-API-KEY",
        "x-goog-api-key",
        "Cookie",
        "X-Session-Id",
        "X-Signature",
        "X-Password",
    ] {
        assert!(is_credential_header(n), "{n}");
    }
    for n in [
        "Accept",
        "User-Agent",
        "X-Title",
        "OpenAI-Beta",
        "Content-Type",
        "Keep-Alive",
    ] {
        assert!(!is_credential_header(n), "{n}");
    }
}

#[test]
fn load_manifest_requires_a_component_and_resolves_it_beside_the_file() {
    let dir = std::env::temp_dir().join(format!("onestep-manifest-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("handler.yaml");
    std::fs::write(&file, with("")).expect("write");
    let e = load_manifest(&file).expect_err("no component").to_string();
    assert!(e.starts_with("handler: 'component' is required"), "{e}");
    std::fs::write(&file, with("handler: {component: h.wasm}")).expect("write");
    let m = load_manifest(&file).expect("manifest");
    assert_eq!(m.component, Some(dir.join("h.wasm")));
    assert!(load_manifest(&dir.join("missing.yaml")).is_err());
    std::fs::remove_dir_all(&dir).ok();
}
